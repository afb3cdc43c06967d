//! Telling a shortage of this host's own resources from a fault of a peer,
//! and keeping the warnings about it few.
//!
//! Owns: which `io::Error`s of `accept` mean the proxy ran short (so the
//! listener pauses) and which only concern the one connection being
//! accepted, which errors opening a backend socket are local (so no
//! backend is blamed for them), how often a shortage is retried
//! ([`RETRY_EVERY`]), and [`ShortageLog`], the gate that lets one warning
//! through per [`WARN_EVERY`]. Must never: count, retry or close
//! anything itself (the accept loop and the connect step do), or call a
//! refused or reset connect local: those are the backend's.

use std::io;
use std::time::{Duration, Instant};

/// How often what ran short is tried again: a paused listener, a backend
/// socket that could not be opened.
pub(crate) const RETRY_EVERY: Duration = Duration::from_millis(100);

/// At most one warning about local shortages per worker in this long.
pub(crate) const WARN_EVERY: Duration = Duration::from_secs(10);

/// The process (`EMFILE`) or the system (`ENFILE`) has no descriptor left.
pub(crate) fn is_out_of_descriptors(error: &io::Error) -> bool {
    matches!(error.raw_os_error(), Some(libc::EMFILE | libc::ENFILE))
}

/// An `accept` error that belongs to the connection it would have returned,
/// not to the listener: Linux reports a network error pending on the new
/// connection this way, and `accept(2)` says to go on as for `EAGAIN`.
pub(crate) fn is_connection_error(error: &io::Error) -> bool {
    error.kind() == io::ErrorKind::ConnectionAborted
        || matches!(
            error.raw_os_error(),
            Some(
                libc::ENETDOWN
                    | libc::EPROTO
                    | libc::ENOPROTOOPT
                    | libc::EHOSTDOWN
                    | libc::ENONET
                    | libc::EHOSTUNREACH
                    | libc::EOPNOTSUPP
                    | libc::ENETUNREACH
            )
        )
}

/// Creating, registering or connecting a backend socket failed for lack of
/// this host's resources: descriptors, kernel buffers or memory, or a free
/// local port (`EADDRNOTAVAIL`). The backend was never reached (the health
/// checker asks this too, so a shortage never takes a backend down).
pub(crate) fn is_local(error: &io::Error) -> bool {
    is_out_of_descriptors(error)
        || matches!(
            error.raw_os_error(),
            Some(libc::ENOBUFS | libc::ENOMEM | libc::EADDRNOTAVAIL)
        )
}

/// Lets a warning through at most once per [`WARN_EVERY`], and says how
/// many were held back before it.
#[derive(Debug, Default)]
pub(crate) struct ShortageLog {
    last: Option<Instant>,
    held_back: u64,
}

impl ShortageLog {
    /// `Some(held back since the last warning)` when a warning may be
    /// logged at `now`; `None` when this one is held back.
    pub(crate) fn admit(&mut self, now: Instant) -> Option<u64> {
        if self
            .last
            .is_some_and(|last| now.saturating_duration_since(last) < WARN_EVERY)
        {
            self.held_back += 1;
            return None;
        }
        self.last = Some(now);
        Some(std::mem::take(&mut self.held_back))
    }
}

#[cfg(test)]
mod tests {
    use std::io;
    use std::time::{Duration, Instant};

    use super::{ShortageLog, WARN_EVERY, is_connection_error, is_local, is_out_of_descriptors};

    fn os(code: i32) -> io::Error {
        io::Error::from_raw_os_error(code)
    }

    #[test]
    fn local_shortages_are_told_from_the_backends_faults() {
        for code in [libc::EMFILE, libc::ENFILE] {
            assert!(is_out_of_descriptors(&os(code)) && is_local(&os(code)));
        }
        for code in [libc::ENOBUFS, libc::ENOMEM, libc::EADDRNOTAVAIL] {
            assert!(is_local(&os(code)) && !is_out_of_descriptors(&os(code)));
        }
        for code in [
            libc::ECONNREFUSED,
            libc::ECONNRESET,
            libc::ETIMEDOUT,
            libc::ENETUNREACH,
            libc::EHOSTUNREACH,
        ] {
            assert!(!is_local(&os(code)), "{code} is the backend's");
        }
    }

    #[test]
    fn a_connection_error_is_no_shortage_of_the_listener() {
        assert!(is_connection_error(&os(libc::ECONNABORTED)));
        assert!(is_connection_error(&os(libc::EPROTO)));
        for code in [libc::EMFILE, libc::ENFILE, libc::ENOBUFS, libc::ENOMEM] {
            assert!(!is_connection_error(&os(code)), "{code} pauses");
        }
    }

    #[test]
    fn one_warning_per_period_with_the_count_held_back() {
        let t = Instant::now();
        let mut log = ShortageLog::default();
        assert_eq!(log.admit(t), Some(0));
        assert_eq!(log.admit(t + Duration::from_secs(1)), None);
        assert_eq!(log.admit(t + WARN_EVERY - Duration::from_millis(1)), None);
        assert_eq!(log.admit(t + WARN_EVERY), Some(2));
        assert_eq!(log.admit(t + WARN_EVERY), None);
        assert_eq!(log.admit(t + 3 * WARN_EVERY), Some(1));
    }
}
