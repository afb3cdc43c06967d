//! Opening a listening socket that several workers share through
//! `SO_REUSEPORT`, so the kernel spreads connections over them.
//!
//! Owns: the socket options of listeners, and the check that no other
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

/// Binds a non-blocking listener with `SO_REUSEADDR` and `SO_REUSEPORT`.
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
