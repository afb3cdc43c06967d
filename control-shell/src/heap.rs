//! Giving freed heap back to the kernel after a large routing change.
//!
//! Owns: when the proxy asks glibc's allocator to return free memory
//! (`malloc_trim`): after the boot, after a generation of at least
//! [`TRIM_AFTER_CHANGES`] changes, and after a compaction of the state
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

/// The size of a generation after which the heap is trimmed.
pub const TRIM_AFTER_CHANGES: usize = 10_000;

/// Returns the free heap at the top of each arena to the kernel.
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
