//! The shell's accumulate-and-cap arithmetic, as pure functions, so the
//! worker and the simulation run the very same rule.
//!
//! Owns: how large the preread window may grow, how large its buffer is at
//! first and when it grows, and how much one read may add. Must never:
//! depend on a socket or allocate; the shell calls these with numbers and
//! allocates what they say.

use crate::config::MIN_PREREAD_MAX_BYTES;

/// The window's buffer before the first read: a ClientHello without a
/// post-quantum key share fits (the corpus's real ones are 224 to 517
/// bytes), so an ordinary hello, partial or complete, holds 1.5 KiB. A
/// larger one grows it ([`window_capacity`]): a hello with an ML-KEM share
/// (the corpus's Chromium ones, about 1,950 bytes) once.
pub const FIRST_WINDOW_BYTES: usize = 1536;

/// The cap the shell enforces and hands to the core: the configured cap,
/// never less than one record header (a smaller cap could never make
/// progress). The window grows up to it, whatever the pooled buffers' size.
pub fn effective_max_bytes(configured: usize) -> usize {
    configured.max(MIN_PREREAD_MAX_BYTES)
}

/// The capacity the window's buffer needs before the next read, holding
/// `buffered` bytes in `capacity`: unchanged while it has room or has
/// reached the cap; else doubled, never past the cap. A hello that still
/// needs bytes thus costs one copy per doubling, and only it pays.
pub fn window_capacity(capacity: usize, buffered: usize, cap: usize) -> usize {
    if buffered < capacity || capacity >= cap {
        capacity
    } else {
        capacity.saturating_mul(2).clamp(FIRST_WINDOW_BYTES, cap)
    }
}

/// How many bytes the next read may add to a window of `buffered` bytes.
///
/// Reading more than this would let an oversized but complete ClientHello
/// arrive whole and route, where the cap says it must be refused.
pub fn read_budget(effective_max: usize, buffered: usize) -> usize {
    effective_max.saturating_sub(buffered)
}

#[cfg(test)]
mod tests {
    use super::{FIRST_WINDOW_BYTES, effective_max_bytes, read_budget, window_capacity};

    #[test]
    fn the_cap_is_the_configured_one_floored_at_a_record_header() {
        assert_eq!(effective_max_bytes(65_536), 65_536);
        assert_eq!(effective_max_bytes(300), 300);
        assert_eq!(effective_max_bytes(0), 5);
        assert_eq!(effective_max_bytes(3), 5);
    }

    #[test]
    fn the_window_doubles_only_when_full_and_never_past_the_cap() {
        let first = FIRST_WINDOW_BYTES;
        assert_eq!(window_capacity(first, 0, 65_536), first);
        assert_eq!(window_capacity(first, first - 1, 65_536), first);
        assert_eq!(window_capacity(first, first, 65_536), 2 * first);
        assert_eq!(window_capacity(32_768, 32_768, 65_536), 65_536);
        assert_eq!(window_capacity(32_768, 32_768, 40_000), 40_000);
        assert_eq!(window_capacity(65_536, 65_536, 65_536), 65_536);
        // A cap below the first window: the budget stops the reads first.
        assert_eq!(window_capacity(first, 300, 300), first);
        let mut capacity = first;
        let mut copies = 0;
        while capacity < 65_536 {
            capacity = window_capacity(capacity, capacity, 65_536);
            copies += 1;
        }
        assert_eq!(copies, 6, "1.5 KiB to 64 KiB in six doublings");
    }

    #[test]
    fn the_budget_never_lets_the_window_pass_the_cap() {
        assert_eq!(read_budget(100, 0), 100);
        assert_eq!(read_budget(100, 99), 1);
        assert_eq!(read_budget(100, 100), 0);
        assert_eq!(read_budget(100, 150), 0);
    }
}
