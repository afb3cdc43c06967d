//! The server end of the command channel, sans-io: what a client sent goes
//! in, its requests come out, and the answers are queued as frames until the
//! caller's socket takes them.
//!
//! Owns: bounded reading from any [`Read`] that reports `WouldBlock` (a
//! non-blocking socket), telling the caller whether to wait, read again or
//! close ([`ReadOutcome`]), and writing the queued answers to any [`Write`]
//! across partial writes.
//!
//! Must never: know an event loop (the proxy's mio adapter lives in
//! `control-shell/src/server/channel_mio.rs`), own a socket, block on its own,
//! decide what to answer, or buffer more than about one maximal frame of a
//! client's input.

use std::fmt;
use std::io::{self, Read, Write};

use super::frame::encode_frame_into;
use super::{
    ChannelError, DEFAULT_MAX_FRAME_LEN, FrameDecoder, HEADER_LEN, MAX_ANSWER_LEN, OUT_COMPACT_MIN,
    READ_CHUNK,
};
use crate::proto::{Request, Response};

/// What [`ServerEnd::read_from`] did. Deliberately not `#[non_exhaustive]`:
/// an event loop must decide for every outcome whether to wait, read again
/// or close, and a new one is a breaking change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadOutcome {
    /// The socket has nothing more for now. Take the requests, then wait for
    /// the next readable event.
    Drained,
    /// Reading stopped with bytes possibly still waiting in the socket: the
    /// decoder holds a full frame's worth of bytes (so at least one whole
    /// frame), or has hit a bad frame. Take the requests (a bad frame comes
    /// out as an error), then read again without waiting: an edge-triggered
    /// poll will not report bytes that are already waiting.
    Paused,
    /// The peer closed its side (or reset the connection). Requests already
    /// decoded can still be taken and answered, as far as the peer still
    /// reads.
    PeerClosed,
}

/// The framing state of one accepted command connection: decodes
/// [`Request`]s from the bytes read and queues [`Response`]s as frames.
///
/// The frame cap applies to both directions. Writing to a peer that went
/// away relies on SIGPIPE being ignored (the Rust runtime's default), so
/// that it is an error ([`ChannelError::Closed`]) rather than the end of the
/// process.
///
/// Reading is bounded: [`read_from`](Self::read_from) stops once about one
/// maximal frame is buffered ([`ReadOutcome::Paused`]), so a client flooding
/// requests cannot make the proxy buffer without limit or starve other
/// connections.
pub struct ServerEnd {
    decoder: FrameDecoder,
    /// The largest answer [`queue`](Self::queue) takes.
    max_answer: usize,
    out: Vec<u8>,
    /// First byte of `out` not yet written.
    out_pos: usize,
    peer_closed: bool,
}

impl ServerEnd {
    /// A fresh connection, with the [`DEFAULT_MAX_FRAME_LEN`] cap.
    pub fn new() -> Self {
        Self::with_max_frame_len(DEFAULT_MAX_FRAME_LEN)
    }

    /// A fresh connection, refusing requests over `max` bytes; answers are
    /// capped at [`MAX_ANSWER_LEN`].
    pub fn with_max_frame_len(max: usize) -> Self {
        Self::with_caps(max, MAX_ANSWER_LEN)
    }

    /// A fresh connection, refusing requests over `max_request` bytes and
    /// answers over `max_answer`.
    pub fn with_caps(max_request: usize, max_answer: usize) -> Self {
        Self {
            decoder: FrameDecoder::with_max_frame_len(max_request),
            max_answer,
            out: Vec::new(),
            out_pos: 0,
            peer_closed: false,
        }
    }

    /// Whether the peer closed its side (EOF seen).
    pub fn is_peer_closed(&self) -> bool {
        self.peer_closed
    }

    /// Bytes queued and not yet written.
    pub fn pending_output(&self) -> usize {
        self.out.len().saturating_sub(self.out_pos)
    }

    /// Bytes read and not yet taken out as requests.
    pub fn buffered_input(&self) -> usize {
        self.decoder.buffered_len()
    }

    /// Reads what `source` has into the decoder, [`READ_CHUNK`] bytes at a
    /// time, until it would block, the peer closes, or the decoder has enough
    /// (see [`ReadOutcome`]). Call it on every readable event. Errors are
    /// I/O errors only; frame errors come out of
    /// [`next_request`](Self::next_request).
    pub fn read_from<R: Read + ?Sized>(
        &mut self,
        source: &mut R,
    ) -> Result<ReadOutcome, ChannelError> {
        let mut chunk = [0u8; READ_CHUNK];
        let enough = self.decoder.max_frame_len().saturating_add(HEADER_LEN);
        loop {
            if self.peer_closed {
                return Ok(ReadOutcome::PeerClosed);
            }
            // A first frame holds at most `enough` bytes, so this many
            // buffered bytes always include a whole frame: pausing here
            // always leaves the caller something to take.
            if self.decoder.is_blocked() || self.decoder.buffered_len() >= enough {
                return Ok(ReadOutcome::Paused);
            }
            match source.read(&mut chunk) {
                Ok(0) => self.peer_closed = true,
                Ok(n) => self.decoder.push(chunk.get(..n).unwrap_or_default()),
                Err(err) => match err.kind() {
                    io::ErrorKind::Interrupted => {}
                    io::ErrorKind::WouldBlock => return Ok(ReadOutcome::Drained),
                    // A reset is the peer going away too; whatever it sent
                    // before is still in the decoder.
                    io::ErrorKind::ConnectionReset | io::ErrorKind::ConnectionAborted => {
                        self.peer_closed = true;
                    }
                    _ => return Err(ChannelError::Io(err)),
                },
            }
        }
    }

    /// Takes the next decoded request. `Ok(None)`: none complete yet. After
    /// the peer closed, leftover bytes that do not make a whole frame are
    /// [`ChannelError::Closed`]. On a frame error
    /// ([`ChannelError::is_frame_error`]) queue
    /// [`failure_response`](super::failure_response), flush, and close.
    pub fn next_request(&mut self) -> Result<Option<Request>, ChannelError> {
        match self.decoder.next_frame()? {
            Some(request) => Ok(Some(request)),
            None if self.peer_closed && self.decoder.buffered_len() > 0 => {
                Err(ChannelError::Closed)
            }
            None => Ok(None),
        }
    }

    /// Appends `response` as a frame to the output buffer; nothing is written
    /// until [`write_to`](Self::write_to). A response over the answer cap is refused
    /// and nothing is queued (answer with
    /// [`failure_response`](super::failure_response) of that error instead).
    pub fn queue(&mut self, response: &Response) -> Result<(), ChannelError> {
        if self.out_pos >= self.out.len() {
            self.out.clear();
            self.out_pos = 0;
        }
        encode_frame_into(response, self.max_answer, &mut self.out)
    }

    /// Writes queued bytes to `sink` until all are written (`Ok(true)`) or it
    /// would block (`Ok(false)`: call again on the next writable event; the
    /// rest stays queued).
    pub fn write_to<W: Write + ?Sized>(&mut self, sink: &mut W) -> Result<bool, ChannelError> {
        loop {
            let Some(rest) = self.out.get(self.out_pos..).filter(|rest| !rest.is_empty()) else {
                self.out.clear();
                self.out_pos = 0;
                return Ok(true);
            };
            match sink.write(rest) {
                Ok(0) => return Err(ChannelError::Closed),
                Ok(n) => self.out_pos = self.out_pos.saturating_add(n),
                Err(err) => match err.kind() {
                    io::ErrorKind::Interrupted => {}
                    io::ErrorKind::WouldBlock => {
                        if self.out_pos >= OUT_COMPACT_MIN && self.out_pos >= self.out.len() / 2 {
                            self.out.drain(..self.out_pos);
                            self.out_pos = 0;
                        }
                        return Ok(false);
                    }
                    io::ErrorKind::BrokenPipe
                    | io::ErrorKind::ConnectionReset
                    | io::ErrorKind::ConnectionAborted => return Err(ChannelError::Closed),
                    _ => return Err(ChannelError::Io(err)),
                },
            }
        }
    }
}

impl Default for ServerEnd {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for ServerEnd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerEnd")
            .field("decoder", &self.decoder)
            .field("pending_output", &self.pending_output())
            .field("peer_closed", &self.peer_closed)
            .finish()
    }
}

#[cfg(test)]
mod tests;
