//! The server end of the command socket, driven by the proxy's mio loop:
//! a non-blocking Unix stream that decodes requests and queues responses.
//!
//! Owns: reading on readiness with a bound on what is buffered, telling the
//! loop whether to wait, read again or close ([`ReadOutcome`]), and flushing
//! queued responses across partial writes.
//!
//! Must never: block, own the poll or decide what to answer, or buffer more
//! than about one maximal frame of a client's input.

use std::fmt;
use std::io::{self, Read, Write};

use super::frame::encode_frame_into;
use super::{
    ChannelError, DEFAULT_MAX_FRAME_LEN, FrameDecoder, HEADER_LEN, OUT_COMPACT_MIN, READ_CHUNK,
};
use crate::proto::{Request, Response};

/// What [`NonBlockingChannel::read_ready`] did. Deliberately not
/// `#[non_exhaustive]`: an event loop must decide for every outcome whether
/// to wait, read again or close, and a new one is a breaking change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadOutcome {
    /// The socket has nothing more for now. Take the requests, then wait for
    /// the next readable event.
    Drained,
    /// Reading stopped with bytes possibly still waiting in the socket: the
    /// decoder holds a full frame's worth of bytes (so at least one whole
    /// frame), or has hit a bad frame. Take the requests (a bad frame comes
    /// out as an error), then call `read_ready` again without waiting: an
    /// edge-triggered poll will not report bytes that are already waiting.
    Paused,
    /// The peer closed its side (or reset the connection). Requests already
    /// decoded can still be taken and answered, as far as the peer still
    /// reads.
    PeerClosed,
}

/// The server end: a non-blocking mio Unix stream that decodes [`Request`]s
/// and queues [`Response`]s, driven by readiness events.
///
/// It implements [`mio::event::Source`], so it registers like the stream.
/// The frame cap applies to both directions. Writing to a peer that went
/// away relies on SIGPIPE being ignored (the Rust runtime's default), so that
/// it is an error ([`ChannelError::Closed`]) rather than the end of the
/// process.
///
/// Reading is bounded: `read_ready` stops once about one maximal frame is
/// buffered ([`ReadOutcome::Paused`]), so a client flooding requests cannot
/// make the proxy buffer without limit or starve other connections.
pub struct NonBlockingChannel {
    stream: mio::net::UnixStream,
    decoder: FrameDecoder,
    out: Vec<u8>,
    /// First byte of `out` not yet written.
    out_pos: usize,
    peer_closed: bool,
}

impl NonBlockingChannel {
    /// Wraps an accepted stream, with the [`DEFAULT_MAX_FRAME_LEN`] cap.
    pub fn new(stream: mio::net::UnixStream) -> Self {
        Self::with_max_frame_len(stream, DEFAULT_MAX_FRAME_LEN)
    }

    /// Wraps an accepted stream, refusing frames over `max` bytes.
    pub fn with_max_frame_len(stream: mio::net::UnixStream, max: usize) -> Self {
        Self {
            stream,
            decoder: FrameDecoder::with_max_frame_len(max),
            out: Vec::new(),
            out_pos: 0,
            peer_closed: false,
        }
    }

    /// The underlying stream (for `shutdown`, `peer_addr`...).
    pub fn get_ref(&self) -> &mio::net::UnixStream {
        &self.stream
    }

    /// Whether the peer closed its side (EOF seen).
    pub fn is_peer_closed(&self) -> bool {
        self.peer_closed
    }

    /// Bytes queued and not yet written.
    pub fn pending_output(&self) -> usize {
        self.out.len().saturating_sub(self.out_pos)
    }

    /// Reads what the socket has into the decoder, until it would block, the
    /// peer closes, or the decoder has enough (see [`ReadOutcome`]). Errors
    /// are I/O errors only; frame errors come out of
    /// [`next_request`](Self::next_request).
    pub fn read_ready(&mut self) -> Result<ReadOutcome, ChannelError> {
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
            match self.stream.read(&mut chunk) {
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
    /// until [`write_ready`](Self::write_ready). A response over the cap is
    /// refused and nothing is queued (answer with
    /// [`failure_response`](super::failure_response) of that error instead).
    pub fn queue(&mut self, response: &Response) -> Result<(), ChannelError> {
        if self.out_pos >= self.out.len() {
            self.out.clear();
            self.out_pos = 0;
        }
        encode_frame_into(response, self.decoder.max_frame_len(), &mut self.out)
    }

    /// Writes queued bytes until all are written (`Ok(true)`) or the socket
    /// would block (`Ok(false)`: wait for a writable event and call again;
    /// the rest stays queued).
    pub fn write_ready(&mut self) -> Result<bool, ChannelError> {
        loop {
            let Some(rest) = self.out.get(self.out_pos..).filter(|rest| !rest.is_empty()) else {
                self.out.clear();
                self.out_pos = 0;
                return Ok(true);
            };
            match self.stream.write(rest) {
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

impl mio::event::Source for NonBlockingChannel {
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

impl fmt::Debug for NonBlockingChannel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NonBlockingChannel")
            .field("stream", &self.stream)
            .field("decoder", &self.decoder)
            .field("pending_output", &self.pending_output())
            .field("peer_closed", &self.peer_closed)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::net::UnixStream;
    use std::time::Instant;

    use mio::{Events, Interest, Poll, Token};

    use super::*;
    use crate::channel::tests::{TEST_TIMEOUT, add_cluster, frame, response, soft_stop, status};
    use crate::channel::{E_CHANNEL_FRAME, failure_response};
    use crate::proto::ResponseStatus;

    /// A NonBlockingChannel registered for reading on its own Poll, and the
    /// blocking peer a test writes with.
    struct Reader {
        poll: Poll,
        events: Events,
        channel: NonBlockingChannel,
    }

    impl Reader {
        fn pair(max: usize) -> (Self, UnixStream) {
            let (server, client) = mio::net::UnixStream::pair().expect("pair");
            let poll = Poll::new().expect("poll");
            let mut channel = NonBlockingChannel::with_max_frame_len(server, max);
            poll.registry()
                .register(&mut channel, Token(0), Interest::READABLE)
                .expect("register");
            let client = UnixStream::from(client);
            client.set_nonblocking(false).expect("blocking");
            let reader = Self {
                poll,
                events: Events::with_capacity(8),
                channel,
            };
            (reader, client)
        }

        /// Waits for the next readable event.
        fn wait_readable(&mut self) {
            let deadline = Instant::now() + TEST_TIMEOUT;
            loop {
                let left = deadline
                    .checked_duration_since(Instant::now())
                    .expect("no readable event in time");
                self.poll.poll(&mut self.events, Some(left)).expect("poll");
                if self.events.iter().any(|e| e.is_readable()) {
                    return;
                }
            }
        }

        /// Reads (re-reading while paused) and takes every whole request.
        fn read_all(&mut self) -> (ReadOutcome, Result<Vec<Request>, ChannelError>) {
            let mut got = Vec::new();
            loop {
                let outcome = self.channel.read_ready().expect("read");
                loop {
                    match self.channel.next_request() {
                        Ok(Some(req)) => got.push(req),
                        Ok(None) => break,
                        Err(err) => return (outcome, Err(err)),
                    }
                }
                if outcome != ReadOutcome::Paused {
                    return (outcome, Ok(got));
                }
            }
        }

        /// Waits and reads until `want` requests arrived.
        fn collect(&mut self, want: usize) -> Vec<Request> {
            let mut got = Vec::new();
            loop {
                got.extend(self.read_all().1.expect("valid frames"));
                if got.len() >= want {
                    return got;
                }
                self.wait_readable();
            }
        }
    }

    #[test]
    fn nonblocking_several_frames_in_one_write() {
        let (mut reader, mut client) = Reader::pair(DEFAULT_MAX_FRAME_LEN);
        let reqs = vec![status(), add_cluster("a"), soft_stop(), add_cluster("b")];
        client
            .write_all(&reqs.iter().flat_map(frame).collect::<Vec<u8>>())
            .expect("write");
        assert_eq!(reader.collect(reqs.len()), reqs);
    }

    #[test]
    fn nonblocking_frame_written_one_byte_at_a_time() {
        let (mut reader, mut client) = Reader::pair(DEFAULT_MAX_FRAME_LEN);
        let req = add_cluster("trickled");
        let bytes = frame(&req);
        let (last, init) = bytes.split_last().expect("non-empty");
        for byte in init {
            client.write_all(std::slice::from_ref(byte)).expect("write");
            reader.wait_readable();
            let (outcome, got) = reader.read_all();
            assert_eq!(outcome, ReadOutcome::Drained);
            assert_eq!(got.expect("no error"), vec![]);
        }
        client.write_all(std::slice::from_ref(last)).expect("write");
        assert_eq!(reader.collect(1), vec![req]);
    }

    #[test]
    fn nonblocking_length_header_split() {
        let (mut reader, mut client) = Reader::pair(DEFAULT_MAX_FRAME_LEN);
        let req = add_cluster("split");
        let bytes = frame(&req);
        client.write_all(&bytes[..2]).expect("write");
        reader.wait_readable();
        assert_eq!(reader.read_all().1.expect("no error"), vec![]);
        client.write_all(&bytes[2..]).expect("write");
        assert_eq!(reader.collect(1), vec![req]);
    }

    #[test]
    fn nonblocking_oversized_frame_refused_after_its_header() {
        let (mut reader, mut client) = Reader::pair(DEFAULT_MAX_FRAME_LEN);
        let len = u32::try_from(DEFAULT_MAX_FRAME_LEN + 1).expect("fits");
        // Only the header: the refusal must not wait for any payload.
        client.write_all(&len.to_be_bytes()).expect("write");
        reader.wait_readable();
        let (outcome, got) = reader.read_all();
        assert_eq!(outcome, ReadOutcome::Paused);
        assert!(matches!(
            got,
            Err(ChannelError::FrameTooLarge { len, max: DEFAULT_MAX_FRAME_LEN })
                if len == DEFAULT_MAX_FRAME_LEN + 1
        ));
        // Poisoned: more bytes change nothing, and nothing is buffered.
        client.write_all(&frame(&status())).expect("write");
        reader.wait_readable();
        assert_eq!(
            reader.channel.read_ready().expect("read"),
            ReadOutcome::Paused
        );
        assert!(matches!(
            reader.channel.next_request(),
            Err(ChannelError::FrameTooLarge { .. })
        ));
        assert_eq!(reader.channel.decoder.buffered_len(), 0);
        let failure = failure_response(&ChannelError::FrameTooLarge {
            len: DEFAULT_MAX_FRAME_LEN + 1,
            max: DEFAULT_MAX_FRAME_LEN,
        });
        assert_eq!(failure.error_code, E_CHANNEL_FRAME);
    }

    #[test]
    fn nonblocking_eof_mid_frame_is_closed_after_whole_frames() {
        let (mut reader, mut client) = Reader::pair(DEFAULT_MAX_FRAME_LEN);
        let mut bytes = frame(&status());
        let partial = frame(&add_cluster("cut"));
        bytes.extend(&partial[..partial.len() - 1]);
        client.write_all(&bytes).expect("write");
        drop(client);
        reader.wait_readable();
        let (outcome, got) = reader.read_all();
        assert_eq!(outcome, ReadOutcome::PeerClosed);
        assert!(matches!(got, Err(ChannelError::Closed)));
        assert!(reader.channel.is_peer_closed());
    }

    #[test]
    fn nonblocking_clean_eof_is_peer_closed() {
        let (mut reader, mut client) = Reader::pair(DEFAULT_MAX_FRAME_LEN);
        client.write_all(&frame(&status())).expect("write");
        drop(client);
        reader.wait_readable();
        let (outcome, got) = reader.read_all();
        assert_eq!(outcome, ReadOutcome::PeerClosed);
        assert_eq!(got.expect("no error"), vec![status()]);
    }

    #[test]
    fn nonblocking_pauses_when_a_full_frame_is_buffered() {
        let max = 64;
        let (mut reader, mut client) = Reader::pair(max);
        let reqs: Vec<Request> = (0..200).map(|i| add_cluster(&format!("c{i}"))).collect();
        client
            .write_all(&reqs.iter().flat_map(frame).collect::<Vec<u8>>())
            .expect("write");
        reader.wait_readable();
        assert_eq!(
            reader.channel.read_ready().expect("read"),
            ReadOutcome::Paused
        );
        // Bounded: at most one read chunk past the pause threshold.
        assert!(reader.channel.decoder.buffered_len() < max + HEADER_LEN + READ_CHUNK);
        assert_eq!(reader.collect(reqs.len()), reqs);
    }

    #[test]
    fn nonblocking_partial_writes_deliver_large_responses_whole() {
        let max = 2 << 20;
        let (server, client) = mio::net::UnixStream::pair().expect("pair");
        let mut poll = Poll::new().expect("poll");
        let mut events = Events::with_capacity(8);
        let mut channel = NonBlockingChannel::with_max_frame_len(server, max);
        poll.registry()
            .register(&mut channel, Token(0), Interest::WRITABLE)
            .expect("register");
        // About 4.4 MB, far over any default socket buffer; each response is over
        // the default cap, so the raised cap is what lets them through.
        let responses: Vec<Response> = (0..4)
            .map(|i| {
                let body: String = (0..1_100_000)
                    .map(|j| char::from(b'a' + ((i + j) % 26) as u8))
                    .collect();
                response(ResponseStatus::Ok, &body)
            })
            .collect();
        for resp in &responses {
            channel.queue(resp).expect("queue");
        }
        assert!(channel.pending_output() > 4_000_000);
        // Over the default cap: refused, and nothing half-queued.
        let before = channel.pending_output();
        let mut small = NonBlockingChannel::new(mio::net::UnixStream::pair().expect("pair").0);
        assert!(matches!(
            small.queue(&responses[0]),
            Err(ChannelError::FrameTooLarge { .. })
        ));
        assert_eq!(small.pending_output(), 0);

        let mut client = UnixStream::from(client);
        client.set_nonblocking(false).expect("blocking");
        client
            .set_read_timeout(Some(TEST_TIMEOUT))
            .expect("timeout");
        let want = responses.len();
        // A slow reader: small reads, fed to a decoder.
        let reader = std::thread::spawn(move || -> Result<Vec<Response>, String> {
            let mut decoder = FrameDecoder::with_max_frame_len(max);
            let mut got = Vec::new();
            let mut chunk = [0u8; 997];
            while got.len() < want {
                let n = client.read(&mut chunk).map_err(|e| e.to_string())?;
                if n == 0 {
                    return Err("EOF before all responses".to_owned());
                }
                decoder.push(&chunk[..n]);
                while let Some(resp) = decoder.next_frame().map_err(|e| e.to_string())? {
                    got.push(resp);
                }
            }
            Ok(got)
        });

        let deadline = Instant::now() + TEST_TIMEOUT;
        let mut partial_writes = 0;
        while !channel.write_ready().expect("write") {
            partial_writes += 1;
            assert!(channel.pending_output() < before, "progress is kept");
            let left = deadline
                .checked_duration_since(Instant::now())
                .expect("flush took too long");
            poll.poll(&mut events, Some(left)).expect("poll");
        }
        assert!(partial_writes > 0, "the socket buffer should have filled");
        assert_eq!(channel.pending_output(), 0);
        let got = reader.join().expect("reader thread").expect("reader");
        assert!(got == responses, "responses arrived altered");
    }
}
