//! Opening a listening socket that several workers share through
//! `SO_REUSEPORT`, so the kernel spreads connections over them.
//!
//! Owns: the socket options of listeners (and so of the connections they
//! accept: Linux copies `TCP_NODELAY` and the keepalive options into each
//! accepted socket, which saves five `setsockopt` per connection), and the
//! check that no other
//! process already listens on an address with `SO_REUSEPORT` (the kernel
//! would let the workers join it and split the connections with it).
//! Must never: block.

use std::io;
use std::net::SocketAddr;

use mio::net::TcpListener;
use socket2::{Domain, Socket, Type};

/// Backlog of pending connections per listening socket.
const BACKLOG: i32 = 1024;

/// Fails with `AddrInUse` when some socket is bound to `address` already,
/// by binding (and at once closing) a socket there without
/// `SO_REUSEPORT`. Call it before the workers bind an address they do not
/// hold yet: with `SO_REUSEPORT`, their bind would succeed next to another
/// process of the same user (a second preread, say), and that process
/// would silently get a share of the connections.
pub fn ensure_unbound(address: SocketAddr) -> io::Result<()> {
    let socket = Socket::new(Domain::for_address(address), Type::STREAM, None)?;
    // TIME_WAIT leftovers of our own earlier listener must not count.
    socket.set_reuse_address(true)?;
    if address.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    socket.bind(&address.into()).map_err(|e| {
        if e.kind() == io::ErrorKind::AddrInUse {
            io::Error::new(
                e.kind(),
                format!(
                    "{address} is already bound by another socket (another process, maybe \
                     another preread: with SO_REUSEPORT it would share the connections)"
                ),
            )
        } else {
            e
        }
    })
}

/// The options every accepted connection must start with, set on the
/// listening socket, which passes them on: `TCP_NODELAY`, and the
/// keepalive options when the config turns them on. Applied to every
/// socket a worker listens on, the ones an upgrade hands over too.
pub(super) fn prepare(
    listener: &TcpListener,
    keepalive: Option<&socket2::TcpKeepalive>,
) -> io::Result<()> {
    super::keepalive::apply(listener, keepalive, "listening");
    socket2::SockRef::from(listener).set_tcp_nodelay(true)
}

/// Binds a non-blocking listener with `SO_REUSEADDR` and `SO_REUSEPORT`;
/// [`prepare`] sets what its accepted sockets inherit.
pub(super) fn bind_reuseport(address: SocketAddr) -> io::Result<TcpListener> {
    let socket = Socket::new(Domain::for_address(address), Type::STREAM, None)?;
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    if address.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    socket.set_nonblocking(true)?;
    socket.bind(&address.into())?;
    socket.listen(BACKLOG)?;
    Ok(TcpListener::from_std(socket.into()))
}

#[cfg(test)]
mod tests {
    use std::net::{SocketAddr, TcpStream};
    use std::time::{Duration, Instant};

    use command::config::TcpKeepalive;
    use socket2::SockRef;

    use super::{bind_reuseport, prepare};
    use crate::worker::keepalive::options;

    /// The worker sets no option on an accepted socket: this pins the
    /// kernel's copy of `TCP_NODELAY` and of the keepalive options from the
    /// listener it relies on.
    #[test]
    fn an_accepted_socket_inherits_nodelay_and_keepalive() -> std::io::Result<()> {
        let listener = bind_reuseport(SocketAddr::from(([127, 0, 0, 1], 0)))?;
        let configured = TcpKeepalive {
            idle_s: 7,
            interval_s: 3,
            count: 4,
        };
        prepare(&listener, Some(&options(&configured)))?;
        let _client = TcpStream::connect(listener.local_addr()?)?;
        let deadline = Instant::now() + Duration::from_secs(5);
        let accepted = loop {
            match listener.accept() {
                Ok((stream, _)) => break stream,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if Instant::now() > deadline {
                        return Err(e);
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(e) => return Err(e),
            }
        };
        assert!(accepted.nodelay()?);
        let socket = SockRef::from(&accepted);
        assert!(socket.keepalive()?);
        assert_eq!(socket.tcp_keepalive_time()?, Duration::from_secs(7));
        assert_eq!(socket.tcp_keepalive_interval()?, Duration::from_secs(3));
        assert_eq!(socket.tcp_keepalive_retries()?, 4);
        Ok(())
    }
}
