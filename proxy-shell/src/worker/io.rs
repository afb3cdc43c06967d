//! Non-blocking reads and writes as the edge-triggered loop needs them.
//!
//! Owns: [`Ready`] (readiness remembered per socket) and the two loops that
//! move bytes between a socket and a pooled buffer until the socket would
//! block. Must never: clear a readiness flag on anything but `WouldBlock`
//! (an edge is not repeated: a flag cleared too early stalls the socket
//! for good), or read past the budget it was given.

use std::io::{self, Read, Write};

use mio::net::TcpStream;

use super::pool::Checkout;

/// Edge-triggered readiness remembered per socket: set by events, cleared
/// only by `WouldBlock`, so a socket is retried after backpressure ends.
#[derive(Debug, Default, Clone, Copy)]
pub struct Ready {
    pub readable: bool,
    pub writable: bool,
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
            Ok(n) => written += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => ready.writable = false,
            Err(e) if is_retryable(&e) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(written)
}
