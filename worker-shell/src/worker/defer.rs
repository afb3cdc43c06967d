//! Deferred accept: a listener that waits for the client's first bytes
//! asks the kernel (`TCP_DEFER_ACCEPT`) to hand a connection over only once
//! they are there, as nginx's `listen … deferred` and HAProxy's
//! `defer-accept` do. A client that connects and is silent costs the worker
//! no wakeup, no `accept4`, no session and no registration until its
//! first bytes (or its FIN) arrive, or the kernel gives up waiting.
//!
//! Owns: which listeners defer and for how long ([`seconds`]), and setting
//! the option on a listening socket ([`apply`]). Must never: defer on a
//! listener where the server may speak first (`server_first_timeout`, or a
//! catch-all listener that connects at accept, unread), or for longer than
//! the listener's `sni_preread_timeout`.
//!
//! The kernel counts the wait in retransmissions of its SYN-ACK (1 s, then
//! doubling): a value of `s` seconds becomes the shortest series of
//! retransmissions that lasts at least `s`, so 1 s waits 1 s, 3 s waits
//! 3 s, but 5 s waits 7 s. [`seconds`] therefore picks the longest such
//! wait (1, 3, 7, 15, 31, … s) within the preread timeout; a listener whose
//! timeout is under a second does not defer. Once the wait is over, the
//! kernel hands the silent connection over and the preread timers start
//! from that accept.

use std::io;
use std::os::fd::AsRawFd;
use std::time::Duration;

use preread_core::step::PrereadListener;

/// The kernel's first SYN-ACK retransmission timeout, in seconds
/// (`TCP_TIMEOUT_INIT`).
const FIRST_RETRANSMIT_S: u64 = 1;
/// The kernel's longest retransmission timeout, in seconds (`TCP_RTO_MAX`).
const MAX_RETRANSMIT_S: u64 = 120;

/// The `TCP_DEFER_ACCEPT` seconds of `listener`; 0 is off (with
/// `defer_accept = false`, a server-first or unread catch-all listener, or
/// a preread timeout under a second).
pub(super) fn seconds(listener: &PrereadListener, defer_accept: bool) -> u32 {
    let config = &listener.config;
    let unread = config.catch_all.is_some() && !config.expect_proxy;
    if !defer_accept || config.server_first_timeout.is_some() || unread {
        return 0;
    }
    longest_wait_within(config.timeout)
}

/// The longest wait the kernel can make that does not exceed `limit`.
fn longest_wait_within(limit: Duration) -> u32 {
    let limit = limit.as_secs();
    let (mut wait, mut step, mut fits) = (FIRST_RETRANSMIT_S, FIRST_RETRANSMIT_S, 0);
    while wait <= limit {
        fits = wait;
        step = (step * 2).min(MAX_RETRANSMIT_S);
        wait += step;
    }
    u32::try_from(fits).unwrap_or(u32::MAX)
}

/// Sets `TCP_DEFER_ACCEPT` to `seconds` on a listening socket (0 turns it
/// off, as a reload that gives the listener a `server_first_timeout`
/// needs).
pub(super) fn apply(listener: &impl AsRawFd, seconds: u32) -> io::Result<()> {
    let value = libc::c_int::try_from(seconds).unwrap_or(libc::c_int::MAX);
    // SAFETY: the descriptor is the caller's open socket for the whole
    // call; the option value points to a live `c_int` whose size is passed
    // with it, and the kernel only reads it.
    let set = unsafe {
        libc::setsockopt(
            listener.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_DEFER_ACCEPT,
            (&raw const value).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if set == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
pub(super) mod tests {
    use std::net::SocketAddr;
    use std::os::fd::AsRawFd;
    use std::time::Duration;

    use preread_core::PrereadConfig;
    use preread_core::routes::{ClusterId, RouteTable};
    use preread_core::step::PrereadListener;

    use super::{apply, seconds};
    use crate::worker::listen::bind_reuseport;

    fn listener(timeout_ms: u64) -> PrereadListener {
        let mut config = PrereadConfig::new(RouteTable::default());
        config.timeout = Duration::from_millis(timeout_ms);
        PrereadListener::new(config, None)
    }

    #[test]
    fn the_wait_is_the_longest_the_kernel_makes_within_the_preread_timeout() {
        for (timeout_ms, want) in [
            (999, 0),
            (1_000, 1),
            (2_999, 1),
            (3_000, 3),
            (5_000, 3),
            (7_000, 7),
            (60_000, 31),
            (300_000, 247),
        ] {
            assert_eq!(
                seconds(&listener(timeout_ms), true),
                want,
                "{timeout_ms} ms"
            );
        }
        assert_eq!(seconds(&listener(5_000), false), 0, "defer_accept = false");
    }

    #[test]
    fn listeners_where_the_server_may_speak_first_do_not_defer() {
        let mut server_first = listener(5_000);
        server_first.config.server_first_timeout = Some(Duration::from_millis(200));
        assert_eq!(seconds(&server_first, true), 0);

        let mut unread = listener(5_000);
        unread.config.catch_all = Some(ClusterId::from("any"));
        assert_eq!(seconds(&unread, true), 0, "connects at accept, unread");
        unread.config.expect_proxy = true;
        assert_eq!(seconds(&unread, true), 3, "reads the PROXY header first");
    }

    #[test]
    fn the_option_reaches_the_socket_and_zero_clears_it() -> std::io::Result<()> {
        let socket = bind_reuseport(SocketAddr::from(([127, 0, 0, 1], 0)))?;
        apply(&socket, 3)?;
        assert_eq!(defer_accept(socket.as_raw_fd())?, 3);
        apply(&socket, 0)?;
        assert_eq!(defer_accept(socket.as_raw_fd())?, 0);
        Ok(())
    }

    /// The socket's `TCP_DEFER_ACCEPT`, as the kernel reports it (the
    /// backend sockets' tests read it too).
    pub(in crate::worker) fn defer_accept(fd: i32) -> std::io::Result<libc::c_int> {
        let mut value: libc::c_int = -1;
        let mut len = size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: `fd` is the test's open listening socket; `value` and
        // `len` are live locals the kernel writes at most `len` bytes to.
        let got = unsafe {
            libc::getsockopt(
                fd,
                libc::IPPROTO_TCP,
                libc::TCP_DEFER_ACCEPT,
                (&raw mut value).cast(),
                &raw mut len,
            )
        };
        if got == 0 {
            Ok(value)
        } else {
            Err(std::io::Error::last_os_error())
        }
    }
}
