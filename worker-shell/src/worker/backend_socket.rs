//! Opening a backend's socket: a non-blocking connect that, with
//! `backend_delayed_ack` and when the session has bytes to write the moment
//! it is connected, lets the kernel carry the handshake's last ACK on those
//! bytes instead of a packet of its own.
//!
//! Owns: the socket and its `connect` ([`open`]), and the rule that says
//! whether the session writes at once ([`writes_at_once`]). Must never:
//! hold back the ACK of a connection whose backend may speak first (no
//! bytes to send: its banner would wait for the kernel's delayed-ACK
//! timer), or fail a connect over the option (a socket that refuses it
//! connects as usual).
//!
//! How: on a connecting socket, Linux sends the ACK of the SYN-ACK at once
//! unless the socket has `TCP_DEFER_ACCEPT` (or is in delayed-ACK
//! "pingpong" mode); then it arms the delayed-ACK timer (at most 200 ms)
//! and the first data segment carries the ACK
//! (`tcp_rcv_synsent_state_process`). The worker writes the preread window
//! (or the PROXY header) as soon as the connect's writable edge comes, so
//! the timer does not fire. HAProxy does the same with `TCP_QUICKACK` off
//! under `option smart-connect`.
//!
//! Why it is not the default: that path also starts the socket's ACK
//! clock, so the hello, sent within the delayed-ACK interval of the
//! SYN-ACK, counts as an interactive reply and the socket delays its ACKs
//! from then on (pingpong mode). A backend that writes its first answer in
//! two small writes without `TCP_NODELAY` would then wait for the delayed
//! ACK (40 ms or more) before its second one. On loopback it saves two
//! packets per short connection: the handshake's ACK, and one ACK of the
//! backend's answer (doc/performance.md, "The handshake's last ACK").

use std::io;
use std::net::SocketAddr;

use log::debug;
use mio::net::TcpStream;
use preread_core::step::ProxyMode;
use socket2::{Domain, Socket, Type};

/// Whether a session connecting with `mode` has bytes to write to its
/// backend at once: a PROXY header always; else what is left of its
/// `window` bytes once the first `content_offset` (a PROXY header the
/// client sent, dropped unless relayed) are skipped.
pub(super) fn writes_at_once(mode: ProxyMode, content_offset: usize, window: usize) -> bool {
    match mode {
        ProxyMode::Send => true,
        ProxyMode::Relay => window > 0,
        ProxyMode::None => window > content_offset,
    }
}

/// A non-blocking, close-on-exec TCP socket connecting to `address`
/// (`EINPROGRESS` is the usual answer). With `writes_at_once`, the
/// handshake's last ACK waits for the first bytes written.
pub(super) fn open(address: SocketAddr, writes_at_once: bool) -> io::Result<TcpStream> {
    let socket = Socket::new(
        Domain::for_address(address),
        Type::STREAM.nonblocking(),
        None,
    )?;
    if writes_at_once {
        merge_last_ack(&socket);
    }
    match socket.connect(&address.into()) {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
        Err(e) => return Err(e),
    }
    Ok(TcpStream::from_std(socket.into()))
}

/// `TCP_DEFER_ACCEPT` on a socket about to connect (the listeners' own
/// setter, `defer.rs`): any non-zero value does; 1 s is the least.
fn merge_last_ack(socket: &Socket) {
    if let Err(e) = super::defer::apply(socket, 1) {
        debug!(
            "TCP_DEFER_ACCEPT refused on a backend socket ({e}): its handshake ends with an ACK of its own"
        );
    }
}

#[cfg(test)]
mod tests;
