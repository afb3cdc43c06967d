//! TCP keepalive on the sockets of a session.
//!
//! Owns: turning the config's `tcp_keepalive*` values into the socket
//! options (`SO_KEEPALIVE`, `TCP_KEEPIDLE`, `TCP_KEEPINTVL`, `TCP_KEEPCNT`)
//! and setting them on a listening socket (the client sockets it accepts
//! inherit them, `listen::prepare`) and, with `backend_keepalive` only, on
//! a backend socket as it connects (four `setsockopt` per connection). Must
//! never: fail a session over it (a socket that
//! refuses the options still carries traffic; the refusal is logged at
//! debug), or touch `TCP_NODELAY`.

use std::os::fd::AsFd;
use std::time::Duration;

use command::config::TcpKeepalive;
use log::debug;
use socket2::SockRef;

/// The socket options of `keepalive`, built once per worker.
pub(super) fn options(keepalive: &TcpKeepalive) -> socket2::TcpKeepalive {
    socket2::TcpKeepalive::new()
        .with_time(Duration::from_secs(keepalive.idle_s.into()))
        .with_interval(Duration::from_secs(keepalive.interval_s.into()))
        .with_retries(keepalive.count)
}

/// Turns keepalive on for `socket` (the client's or the backend's side of
/// a session), when the config has it on.
pub(super) fn apply(socket: &impl AsFd, keepalive: Option<&socket2::TcpKeepalive>, side: &str) {
    let Some(keepalive) = keepalive else {
        return;
    };
    if let Err(e) = SockRef::from(socket).set_tcp_keepalive(keepalive) {
        debug!("cannot turn TCP keepalive on for a {side} socket: {e}");
    }
}

#[cfg(test)]
mod tests {
    use std::net::{TcpListener, TcpStream};
    use std::time::Duration;

    use command::config::TcpKeepalive;
    use socket2::SockRef;

    use super::{apply, options};

    #[test]
    fn the_configured_values_reach_the_socket() -> std::io::Result<()> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let client = TcpStream::connect(listener.local_addr()?)?;
        let (accepted, _) = listener.accept()?;
        let configured = TcpKeepalive {
            idle_s: 7,
            interval_s: 3,
            count: 4,
        };
        apply(&accepted, Some(&options(&configured)), "client");
        let socket = SockRef::from(&accepted);
        assert!(socket.keepalive()?);
        assert_eq!(socket.tcp_keepalive_time()?, Duration::from_secs(7));
        assert_eq!(socket.tcp_keepalive_interval()?, Duration::from_secs(3));
        assert_eq!(socket.tcp_keepalive_retries()?, 4);

        apply(&client, None, "backend");
        assert!(!SockRef::from(&client).keepalive()?, "off leaves it off");
        Ok(())
    }
}
