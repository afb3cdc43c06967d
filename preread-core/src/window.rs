//! The shell's accumulate-and-cap arithmetic, as pure functions, so the
//! worker and the simulation run the very same rule.
//!
//! Owns: how large the preread window may grow and how much one read may
//! add. Must never: depend on a socket; the shell calls these with numbers.

use crate::config::MIN_PREREAD_MAX_BYTES;

/// The cap the shell enforces and hands to the core: the configured cap,
/// never more than the buffer holds (the core trusts it entirely) and never
/// less than one record header (a smaller cap could never make progress).
pub fn effective_max_bytes(configured: usize, buffer_capacity: usize) -> usize {
    configured.min(buffer_capacity).max(MIN_PREREAD_MAX_BYTES)
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
    use super::{effective_max_bytes, read_budget};

    #[test]
    fn the_cap_is_bounded_by_the_buffer_and_floored_at_a_record_header() {
        assert_eq!(effective_max_bytes(16_384, 16_384), 16_384);
        assert_eq!(effective_max_bytes(65_536, 16_384), 16_384);
        assert_eq!(effective_max_bytes(300, 16_384), 300);
        assert_eq!(effective_max_bytes(0, 16_384), 5);
        assert_eq!(effective_max_bytes(3, 4), 5);
    }

    #[test]
    fn the_budget_never_lets_the_window_pass_the_cap() {
        assert_eq!(read_budget(100, 0), 100);
        assert_eq!(read_budget(100, 99), 1);
        assert_eq!(read_budget(100, 100), 0);
        assert_eq!(read_budget(100, 150), 0);
    }
}
