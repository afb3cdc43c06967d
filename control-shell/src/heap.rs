//! Giving freed heap back to the kernel after a large routing change.
//!
//! Owns: when the proxy asks glibc's allocator to return free memory
//! (`malloc_trim`): after the boot, once [`TRIM_AFTER_CHANGES`] changes
//! settled since the last trim (one large generation or many small ones:
//! 1,000 route files added to a watched directory, then removed, left the
//! resident size 10 MB above the boot's when only large generations
//! trimmed, and 4 MB above it with this count), and after a compaction
//! of the state
//! journal (its copy of the requests, freed in the thread that wrote
//! them: at 100,000 routes the resident size went from 64 to 118 MB over
//! one compaction that held its whole text and did not trim, to 93 MB
//! with the trim, and stays at 65 MB now that the text is streamed too). Building 100,000 routes frees about as
//! much as it keeps (the parsed config, the requests, the plan), and glibc
//! keeps freed pages mapped: measured at 100,000 routes with two workers,
//! the resident size right after start is 264 MB without the trim and
//! 133 MB with it. Must never: run on the data path or per small change
//! (it walks every arena under its lock). No crate offers this; it is one
//! call with no preconditions. Other C libraries have no such call, and
//! nothing is done there.

/// The changes settled (committed or rolled back) after which the heap is
/// trimmed: in one large generation, or summed over many small ones (a
/// route source's burst of files is hundreds of generations of a few
/// changes each).
pub const TRIM_AFTER_CHANGES: usize = 1_000;

/// Changes settled since the last trim.
#[derive(Debug, Default)]
pub struct Untrimmed(usize);

impl Untrimmed {
    /// Counts a generation of `changes`; whether the heap is due a trim
    /// (the count starts again).
    pub fn settled(&mut self, changes: usize) -> bool {
        self.0 = self.0.saturating_add(changes);
        let due = self.0 >= TRIM_AFTER_CHANGES;
        if due {
            self.0 = 0;
        }
        due
    }
}

/// Returns the free heap of each arena to the kernel.
pub fn trim() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: malloc_trim has no preconditions; it only inspects and
        // releases the allocator's own free memory, under its locks.
        unsafe {
            libc::malloc_trim(0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_generations_add_up_to_a_trim() {
        let mut untrimmed = Untrimmed::default();
        let small = TRIM_AFTER_CHANGES / 4;
        assert!(!untrimmed.settled(small));
        assert!(!untrimmed.settled(small));
        assert!(!untrimmed.settled(small));
        assert!(untrimmed.settled(small), "four quarters are due");
        assert!(!untrimmed.settled(1), "the count started again");
        assert!(
            untrimmed.settled(TRIM_AFTER_CHANGES),
            "one large generation"
        );
        assert!(!untrimmed.settled(0));
    }
}
