//! Opening a listening socket that several workers share through
//! `SO_REUSEPORT`, so the kernel spreads connections over them.
//!
//! Owns: the socket options of listeners. Must never: block.

use std::io;
use std::net::SocketAddr;

use mio::net::TcpListener;
use socket2::{Domain, Socket, Type};

/// Backlog of pending connections per listening socket.
const BACKLOG: i32 = 1024;

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
