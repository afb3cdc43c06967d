//! The command channel's server end on the main thread's mio loop: one
//! accepted non-blocking Unix stream and the sans-io [`ServerEnd`] that
//! frames it.
//!
//! Owns: registering the stream with a mio registry (the adapter is a
//! [`mio::event::Source`]) and moving bytes between the stream and its
//! `ServerEnd` on readiness.
//!
//! Must never: frame, bound or decode anything itself (`command`'s
//! `ServerEnd` owns the format and its limits), block, own the poll, or
//! decide what to answer.

use std::io;

use command::channel::{ChannelError, DEFAULT_MAX_FRAME_LEN, ReadOutcome, ServerEnd};
use command::proto::{Request, Response};

/// A client connection of the command socket, registered like its stream.
#[derive(Debug)]
pub(super) struct MioChannel {
    stream: mio::net::UnixStream,
    end: ServerEnd,
}

impl MioChannel {
    /// Wraps an accepted stream, with the [`DEFAULT_MAX_FRAME_LEN`] cap.
    pub(super) fn new(stream: mio::net::UnixStream) -> Self {
        Self::with_max_frame_len(stream, DEFAULT_MAX_FRAME_LEN)
    }

    /// Wraps an accepted stream, refusing frames over `max` bytes.
    pub(super) fn with_max_frame_len(stream: mio::net::UnixStream, max: usize) -> Self {
        Self {
            stream,
            end: ServerEnd::with_max_frame_len(max),
        }
    }

    /// The underlying stream (for the peer's credentials, or draining it).
    pub(super) fn get_ref(&self) -> &mio::net::UnixStream {
        &self.stream
    }

    /// Whether the peer closed its side (EOF seen).
    pub(super) fn is_peer_closed(&self) -> bool {
        self.end.is_peer_closed()
    }

    /// Bytes queued and not yet written.
    pub(super) fn pending_output(&self) -> usize {
        self.end.pending_output()
    }

    /// Reads what the socket has (see [`ServerEnd::read_from`]): on every
    /// readable event, and again at once after [`ReadOutcome::Paused`].
    pub(super) fn read_ready(&mut self) -> Result<ReadOutcome, ChannelError> {
        self.end.read_from(&mut &self.stream)
    }

    /// See [`ServerEnd::next_request`].
    pub(super) fn next_request(&mut self) -> Result<Option<Request>, ChannelError> {
        self.end.next_request()
    }

    /// See [`ServerEnd::queue`]: nothing is written before
    /// [`write_ready`](Self::write_ready).
    pub(super) fn queue(&mut self, response: &Response) -> Result<(), ChannelError> {
        self.end.queue(response)
    }

    /// Writes the queued answers (see [`ServerEnd::write_to`]); `Ok(false)`:
    /// call again on the next writable event.
    pub(super) fn write_ready(&mut self) -> Result<bool, ChannelError> {
        self.end.write_to(&mut &self.stream)
    }
}

impl mio::event::Source for MioChannel {
    fn register(
        &mut self,
        registry: &mio::Registry,
        token: mio::Token,
        interests: mio::Interest,
    ) -> io::Result<()> {
        self.stream.register(registry, token, interests)
    }

    fn reregister(
        &mut self,
        registry: &mio::Registry,
        token: mio::Token,
        interests: mio::Interest,
    ) -> io::Result<()> {
        self.stream.reregister(registry, token, interests)
    }

    fn deregister(&mut self, registry: &mio::Registry) -> io::Result<()> {
        self.stream.deregister(registry)
    }
}

#[cfg(test)]
mod tests;
