//! Non-blocking reads and writes as the edge-triggered loop needs them.
//!
//! Owns: [`Ready`] (readiness remembered per socket), [`Peer`] (a session's
//! socket with its readiness, its last activity, the bytes read from
//! it and when its `TCP_NODELAY` is set, [`Nodelay`]), and the two loops that
//! move bytes between a socket and a pooled buffer until the socket is
//! known to be drained (or full). A TCP read that returns less than it
//! asked for emptied the receive queue, and a short write filled the send
//! queue: the flag is cleared then, without the extra call that would only
//! return `EAGAIN`. Every later arrival (or freed space) raises a new edge.
//! The one exception is a peer whose FIN or error was already reported
//! ([`Ready::closing`]): its edge has come and gone, so its socket is read
//! until the EOF itself.
//!
//! Must never: clear a readiness flag on anything but `WouldBlock` or a
//! short transfer (an edge is not repeated: a flag cleared too early
//! stalls the socket for good), or read past the budget it was given.

use std::io::{self, Read, Write};
use std::time::Instant;

use mio::net::TcpStream;

use super::pool::Checkout;

/// Edge-triggered readiness remembered per socket: set by events, cleared
/// by `WouldBlock` or a short transfer, so a socket is retried after
/// backpressure ends.
#[derive(Debug, Default, Clone, Copy)]
pub struct Ready {
    pub readable: bool,
    pub writable: bool,
    /// An event reported the peer's FIN or an error on this socket: no
    /// further edge will announce them, so reads go on to the EOF.
    pub closing: bool,
}

impl Ready {
    /// What one event says about its socket. A hang-up or an error makes
    /// the socket readable (the read reports them) and `closing`.
    pub fn of_event(event: &mio::event::Event) -> Self {
        let closing = event.is_read_closed() || event.is_error();
        Self {
            readable: event.is_readable() || closing,
            writable: event.is_writable() || event.is_write_closed() || event.is_error(),
            closing,
        }
    }

    /// Adds what an event said; only the socket's own calls clear a flag.
    pub fn merge(&mut self, event: Ready) {
        self.readable |= event.readable;
        self.writable |= event.writable;
        self.closing |= event.closing;
    }
}

/// One socket of a session, the client's or the backend's, with what the
/// loop knows of it.
#[derive(Debug)]
pub struct Peer {
    pub stream: TcpStream,
    pub ready: Ready,
    /// The last time a byte (or its EOF) came from it, or a byte went to
    /// it: what its idle timer measures.
    pub last_activity: Instant,
    /// Bytes read from it: the client's `bytes_in`; for the backend,
    /// whether it sent anything yet.
    pub read: u64,
    /// Where it stands with `TCP_NODELAY`.
    pub nodelay: Nodelay,
}

/// Where a socket stands with `TCP_NODELAY`. Linux applies Nagle in
/// Minshall's variant (`tcp_nagle_check`): a segment under the MSS waits
/// only while an earlier *short* segment is unacknowledged. A connection's
/// first write has no earlier segment, so it leaves whole at once with or
/// without the option; only a later write could wait for the peer's
/// (delayed) ACK. A backend socket therefore gets the option just before
/// its second write, and a session that writes to its backend once (a
/// short request) spends no `setsockopt` on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Nodelay {
    /// On: a client's socket inherits it from its listener; or set.
    #[default]
    On,
    /// Off, and nothing written yet.
    Unwritten,
    /// Off, written once: turned on before the next write.
    Due,
}

impl Peer {
    /// A socket just accepted or connected: nothing known, nothing read.
    pub fn new(stream: TcpStream, now: Instant) -> Self {
        Self {
            stream,
            ready: Ready::default(),
            last_activity: now,
            read: 0,
            nodelay: Nodelay::On,
        }
    }

    /// Writes `data` as [`write_some`] does, turning `TCP_NODELAY` on
    /// first when it is due.
    pub fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        if data.is_empty() || !self.ready.writable {
            return Ok(0);
        }
        self.before_write();
        let n = write_some(&mut self.stream, data, &mut self.ready)?;
        self.wrote(n);
        Ok(n)
    }

    /// To be called before any write to this socket (a `splice` into it
    /// too): turns `TCP_NODELAY` on if this is not its first write. A
    /// socket that refuses the option still carries the bytes, and is not
    /// asked again.
    pub fn before_write(&mut self) {
        if self.nodelay == Nodelay::Due {
            let _ = self.stream.set_nodelay(true);
            self.nodelay = Nodelay::On;
        }
    }

    /// To be called with the bytes each write to this socket took.
    pub fn wrote(&mut self, n: usize) {
        if n > 0 && self.nodelay == Nodelay::Unwritten {
            self.nodelay = Nodelay::Due;
        }
    }
}

fn is_retryable(error: &io::Error) -> bool {
    error.kind() == io::ErrorKind::Interrupted
}

/// Reads from `stream` into `buf` until it would block, the buffer is full
/// or `budget` bytes were added. Returns the bytes added and whether EOF came.
pub fn read_some(
    stream: &mut TcpStream,
    buf: &mut Checkout,
    ready: &mut Ready,
    mut budget: usize,
) -> io::Result<(usize, bool)> {
    let mut added = 0;
    while ready.readable && budget > 0 {
        let space = buf.space();
        if space.is_empty() {
            break;
        }
        let want = space.len().min(budget);
        match stream.read(&mut space[..want]) {
            Ok(0) => return Ok((added, true)),
            Ok(n) => {
                buf.fill(n);
                added += n;
                budget -= n;
                if n < want && !ready.closing {
                    ready.readable = false;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => ready.readable = false,
            Err(e) if is_retryable(&e) => {}
            Err(e) => return Err(e),
        }
    }
    Ok((added, false))
}

/// Writes `data` to `stream` until it would block; returns bytes written.
pub fn write_some(stream: &mut TcpStream, data: &[u8], ready: &mut Ready) -> io::Result<usize> {
    let mut written = 0;
    while ready.writable && written < data.len() {
        match stream.write(&data[written..]) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => {
                written += n;
                if written < data.len() {
                    ready.writable = false;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => ready.writable = false,
            Err(e) if is_retryable(&e) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(written)
}

#[cfg(test)]
mod tests;
