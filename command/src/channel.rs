//! Length-prefixed protobuf frames over a Unix stream: the transport of the
//! command socket.
//!
//! A frame is a 4-byte big-endian payload length followed by that many bytes
//! of one protobuf message (a [`Request`] from client to proxy, a
//! [`Response`] back). The length is capped ([`DEFAULT_MAX_FRAME_LEN`] unless
//! configured), and the cap is enforced as soon as a length header is
//! complete, so a peer can never make either side buffer a huge frame.
//!
//! Owns: the frame format, the sans-io [`FrameDecoder`], the blocking client
//! end ([`BlockingChannel`], used by the CLI) and the non-blocking server end
//! ([`NonBlockingChannel`], driven by the proxy's mio loop), and the FAILURE
//! answer to a frame that could not be read ([`failure_response`]).
//!
//! Must never: interpret or apply a request, validate its content, own an
//! event loop or a listener, or keep a connection alive after a frame error:
//! once a frame is bad the byte stream has lost its framing and the only safe
//! move is to answer (best effort) and close.

use std::fmt;
use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use prost::Message;

use crate::proto::{Request, Response, ResponseStatus};

/// Bytes of the big-endian length header in front of every payload.
pub const HEADER_LEN: usize = 4;

/// Default cap on a frame's payload: 1 MiB. Far above any request, and
/// enough for the listings of a large configuration.
pub const DEFAULT_MAX_FRAME_LEN: usize = 1 << 20;

/// `error_code` of the FAILURE answer to a frame that could not be read (too
/// large, or not a valid message). Stable: scripts may match on it.
pub const E_CHANNEL_FRAME: &str = "E_CHANNEL_FRAME";

/// `error_code` of a FAILURE built from any other channel error (I/O,
/// timeout, closed peer). Stable: scripts may match on it.
pub const E_CHANNEL_IO: &str = "E_CHANNEL_IO";

/// The header is a `u32`, so no cap can exceed this, whatever is configured.
const MAX_WIRE_LEN: usize = u32::MAX as usize;

/// Consumed bytes are only shifted out of the decoder's buffer once there are
/// at least this many and they are at least half of it, so that many small
/// frames cost O(n) copying in total instead of O(n²).
const COMPACT_MIN: usize = 4096;

/// Same rule for the output buffer of [`NonBlockingChannel`]: flushed bytes
/// are only shifted out when they are many and at least half of it.
const OUT_COMPACT_MIN: usize = 64 * 1024;

/// Bytes asked of the socket per `read` call.
const READ_CHUNK: usize = 16 * 1024;

/// Sleep between connect attempts while the listen backlog is full.
const CONNECT_RETRY: Duration = Duration::from_millis(10);

/// What went wrong on the command channel. Every message says what happened
/// and what it means for the connection.
#[derive(Debug)]
#[non_exhaustive]
pub enum ChannelError {
    /// A frame's announced or actual payload length is over the cap. When
    /// reading, the connection must be closed: the stream has lost its
    /// framing.
    FrameTooLarge { len: usize, max: usize },
    /// A whole frame arrived but its payload is not a valid message of the
    /// expected type. The connection must be closed.
    Decode(prost::DecodeError),
    /// Connecting to the command socket failed (no such file, nobody
    /// listening, permission denied...).
    Connect { path: PathBuf, source: io::Error },
    /// The other end did not accept, take or answer in time.
    Timeout,
    /// The other end closed the connection before the exchange finished
    /// (possibly in the middle of a frame).
    Closed,
    /// Any other I/O error on the socket.
    Io(io::Error),
}

impl ChannelError {
    /// Whether this is an error in the bytes the peer sent (too large, or not
    /// decodable): the ones a server answers with [`failure_response`] before
    /// closing. Other errors leave nobody to answer.
    pub fn is_frame_error(&self) -> bool {
        matches!(self, Self::FrameTooLarge { .. } | Self::Decode(_))
    }
}

impl fmt::Display for ChannelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::FrameTooLarge { len, max } => write!(
                f,
                "a command frame of {len} bytes is over the {max}-byte limit, so it was \
                 refused (both ends must raise the limit for such messages)"
            ),
            Self::Decode(err) => write!(
                f,
                "a command frame is not a valid protobuf message of the expected type ({err}): \
                 the other end speaks another protocol or version"
            ),
            Self::Connect { path, source } => write!(
                f,
                "cannot connect to the command socket {}: {source} (is the proxy running, and \
                 is this the socket path of its configuration?)",
                path.display()
            ),
            Self::Timeout => f.write_str(
                "timed out on the command socket: the other end did not accept, take or answer \
                 in time (it may be busy or stuck; a longer timeout may help)",
            ),
            Self::Closed => f.write_str(
                "the other end closed the command connection before the exchange finished",
            ),
            Self::Io(err) => write!(f, "I/O error on the command socket: {err}"),
        }
    }
}

impl std::error::Error for ChannelError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Decode(err) => Some(err),
            Self::Connect { source, .. } => Some(source),
            Self::Io(err) => Some(err),
            Self::FrameTooLarge { .. } | Self::Timeout | Self::Closed => None,
        }
    }
}

/// Encodes `msg` as one frame (header and payload). Refuses, before encoding
/// anything, a message whose payload would be over `max` (or over what a
/// 4-byte header can say).
pub fn encode_frame(msg: &impl Message, max: usize) -> Result<Vec<u8>, ChannelError> {
    let mut out = Vec::new();
    encode_frame_into(msg, max, &mut out)?;
    Ok(out)
}

/// Appends one frame to `out`; on error `out` is left as it was.
fn encode_frame_into(
    msg: &impl Message,
    max: usize,
    out: &mut Vec<u8>,
) -> Result<(), ChannelError> {
    let max = max.min(MAX_WIRE_LEN);
    let len = msg.encoded_len();
    let too_large = ChannelError::FrameTooLarge { len, max };
    if len > max {
        return Err(too_large);
    }
    let Ok(header) = u32::try_from(len) else {
        return Err(too_large);
    };
    let before = out.len();
    out.reserve(HEADER_LEN.saturating_add(len));
    out.extend_from_slice(&header.to_be_bytes());
    // A Vec grows on demand, so `encode` only fails when the buffer cannot
    // grow any more: that is still "too large", never a half frame on the wire.
    if msg.encode(out).is_err() {
        out.truncate(before);
        return Err(too_large);
    }
    Ok(())
}

/// A frame error remembered by a poisoned decoder, so every later call
/// reports it again.
#[derive(Debug, Clone)]
enum Poison {
    TooLarge { len: usize, max: usize },
    Decode(prost::DecodeError),
}

impl Poison {
    fn to_error(&self) -> ChannelError {
        match self {
            Self::TooLarge { len, max } => ChannelError::FrameTooLarge {
                len: *len,
                max: *max,
            },
            Self::Decode(err) => ChannelError::Decode(err.clone()),
        }
    }
}

/// Sans-io frame decoder: push bytes as they arrive, take whole messages out.
///
/// Frames come out in order, one per [`next_frame`](Self::next_frame) call,
/// however the bytes were cut. A length over the cap is detected as soon as
/// its 4 header bytes are in; bytes after such a header are dropped, never
/// buffered. Frames complete before a bad one still come out first, then the
/// error. After an error the decoder is poisoned: every later call returns
/// the same error and pushes are ignored; close the connection.
pub struct FrameDecoder {
    buf: Vec<u8>,
    /// First byte not yet consumed by `next_frame`.
    start: usize,
    /// Offset of the first length header not yet checked against the cap;
    /// every frame between `start` and here is complete and within the cap.
    scanned: usize,
    max: usize,
    /// The announced length of an over-cap frame whose header sits at
    /// `scanned`; reported once the frames before it are taken.
    oversized: Option<usize>,
    poison: Option<Poison>,
}

impl FrameDecoder {
    /// A decoder with the [`DEFAULT_MAX_FRAME_LEN`] cap.
    pub fn new() -> Self {
        Self::with_max_frame_len(DEFAULT_MAX_FRAME_LEN)
    }

    /// A decoder refusing payloads over `max` bytes (at most `u32::MAX`, the
    /// largest length a header can carry).
    pub fn with_max_frame_len(max: usize) -> Self {
        Self {
            buf: Vec::new(),
            start: 0,
            scanned: 0,
            max: max.min(MAX_WIRE_LEN),
            oversized: None,
            poison: None,
        }
    }

    /// The payload cap in bytes.
    pub fn max_frame_len(&self) -> usize {
        self.max
    }

    /// Bytes received and not yet taken as frames.
    pub fn buffered_len(&self) -> usize {
        self.buf.len().saturating_sub(self.start)
    }

    /// Whether the decoder has reported an error (and will keep doing so).
    pub fn is_poisoned(&self) -> bool {
        self.poison.is_some()
    }

    /// Whether reading more bytes is pointless: the decoder is poisoned, or
    /// an over-cap header is waiting to be reported.
    fn is_blocked(&self) -> bool {
        self.poison.is_some() || self.oversized.is_some()
    }

    /// Appends bytes received from the peer.
    pub fn push(&mut self, bytes: &[u8]) {
        // Bytes after a bad header belong to no frame we will ever read.
        if self.is_blocked() || bytes.is_empty() {
            return;
        }
        self.compact();
        self.buf.extend_from_slice(bytes);
        self.scan();
    }

    /// Takes the next whole frame and decodes it as `M`. `Ok(None)`: no whole
    /// frame yet, push more bytes.
    pub fn next_frame<M: Message + Default>(&mut self) -> Result<Option<M>, ChannelError> {
        if let Some(poison) = &self.poison {
            return Err(poison.to_error());
        }
        if self.start >= self.scanned {
            if let Some(len) = self.oversized {
                return Err(self.poison(Poison::TooLarge { len, max: self.max }));
            }
            return Ok(None);
        }
        // `scan` vouched for a whole frame at `start`; the lookups below
        // still go through `get` so that a bug here cannot become a panic.
        let Some(len) = self.len_at(self.start) else {
            return Ok(None);
        };
        let payload_start = self.start.saturating_add(HEADER_LEN);
        let payload_end = payload_start.saturating_add(len);
        let decoded = match self.buf.get(payload_start..payload_end) {
            Some(payload) => M::decode(payload),
            None => return Ok(None),
        };
        self.start = payload_end;
        if self.start == self.buf.len() {
            // Fully drained: restart at the front for free.
            self.buf.clear();
            self.start = 0;
            self.scanned = 0;
        }
        match decoded {
            Ok(msg) => Ok(Some(msg)),
            Err(err) => Err(self.poison(Poison::Decode(err))),
        }
    }

    fn poison(&mut self, poison: Poison) -> ChannelError {
        let err = poison.to_error();
        self.poison = Some(poison);
        self.oversized = None;
        // Nothing buffered will ever be read; give the memory back.
        self.buf = Vec::new();
        self.start = 0;
        self.scanned = 0;
        err
    }

    /// The payload length announced by the header at `offset`, if all 4
    /// header bytes are in.
    fn len_at(&self, offset: usize) -> Option<usize> {
        let header = self.buf.get(offset..offset.checked_add(HEADER_LEN)?)?;
        let header: [u8; HEADER_LEN] = header.try_into().ok()?;
        // Saturating: on a target where usize is narrower than u32 a huge
        // length must still count as over the cap.
        Some(usize::try_from(u32::from_be_bytes(header)).unwrap_or(usize::MAX))
    }

    /// Checks every newly complete header against the cap, walking over
    /// whole frames; stops at an incomplete header or frame.
    fn scan(&mut self) {
        while let Some(len) = self.len_at(self.scanned) {
            if len > self.max {
                self.oversized = Some(len);
                // Keep the frames before the bad header, drop the rest.
                self.buf.truncate(self.scanned);
                return;
            }
            let end = self.scanned.saturating_add(HEADER_LEN).saturating_add(len);
            if end > self.buf.len() {
                return;
            }
            self.scanned = end;
        }
    }

    fn compact(&mut self) {
        if self.start == 0 {
            return;
        }
        if self.start >= self.buf.len() {
            self.buf.clear();
            self.start = 0;
            self.scanned = 0;
        } else if self.start >= COMPACT_MIN && self.start >= self.buf.len() / 2 {
            self.buf.drain(..self.start);
            self.scanned = self.scanned.saturating_sub(self.start);
            self.start = 0;
        }
    }
}

impl Default for FrameDecoder {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for FrameDecoder {
    // The buffer may be a megabyte of peer bytes: show sizes, not contents.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FrameDecoder")
            .field("buffered_len", &self.buffered_len())
            .field("max", &self.max)
            .field("oversized", &self.oversized)
            .field("poison", &self.poison)
            .finish()
    }
}

/// The deadline `timeout` from now; `None` for no limit (a zero timeout, or
/// one too far away to represent).
fn deadline_after(timeout: Duration) -> Option<Instant> {
    if timeout.is_zero() {
        None
    } else {
        Instant::now().checked_add(timeout)
    }
}

/// Time left before `deadline`, as a socket timeout: `None` waits forever,
/// and an expired deadline is [`ChannelError::Timeout`] (a zero socket
/// timeout would be refused by the OS, not mean "now").
fn time_left(deadline: Option<Instant>) -> Result<Option<Duration>, ChannelError> {
    match deadline {
        None => Ok(None),
        Some(deadline) => {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                Err(ChannelError::Timeout)
            } else {
                Ok(Some(left))
            }
        }
    }
}

/// Maps an I/O error of a blocking socket with a timeout set.
fn blocking_io_error(err: io::Error) -> ChannelError {
    match err.kind() {
        // An expired SO_RCVTIMEO/SO_SNDTIMEO shows up as EAGAIN on Linux.
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => ChannelError::Timeout,
        io::ErrorKind::BrokenPipe
        | io::ErrorKind::ConnectionReset
        | io::ErrorKind::ConnectionAborted
        | io::ErrorKind::UnexpectedEof => ChannelError::Closed,
        _ => ChannelError::Io(err),
    }
}

/// The client end: a blocking Unix stream that sends [`Request`]s and reads
/// [`Response`]s, each operation bounded by a timeout.
///
/// The timeout bounds the connect, each `send`, and the wait for each
/// response (from the start of the wait until the whole frame is in), so a
/// peer trickling bytes cannot stretch it. Progress responses restart the
/// clock: a long operation that keeps reporting is not a stuck one. A zero
/// timeout means no limit, as for socket timeouts.
///
/// After a [`ChannelError::Timeout`] a late response may still arrive on the
/// connection; a caller that gives up should drop the channel.
pub struct BlockingChannel {
    stream: UnixStream,
    decoder: FrameDecoder,
    timeout: Duration,
}

impl BlockingChannel {
    /// Connects to the command socket at `path`.
    pub fn connect(path: impl AsRef<Path>, timeout: Duration) -> Result<Self, ChannelError> {
        let path = path.as_ref();
        let deadline = deadline_after(timeout);
        // A blocking connect to a listener whose backlog is full waits with
        // no bound, so connect non-blocking (mio) and retry until the
        // deadline instead. On Linux a Unix-socket connect either completes
        // at once or fails with EAGAIN (backlog full); it is never "in
        // progress".
        let stream = loop {
            match mio::net::UnixStream::connect(path) {
                Ok(stream) => break stream,
                Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => {
                    let pause =
                        time_left(deadline)?.map_or(CONNECT_RETRY, |left| left.min(CONNECT_RETRY));
                    std::thread::sleep(pause);
                }
                Err(source) => {
                    return Err(ChannelError::Connect {
                        path: path.to_owned(),
                        source,
                    });
                }
            }
        };
        if let Ok(Some(source)) = stream.take_error() {
            return Err(ChannelError::Connect {
                path: path.to_owned(),
                source,
            });
        }
        Self::from_stream(UnixStream::from(stream), timeout)
    }

    /// Wraps an already connected stream (switched to blocking mode).
    pub fn from_stream(stream: UnixStream, timeout: Duration) -> Result<Self, ChannelError> {
        stream.set_nonblocking(false).map_err(ChannelError::Io)?;
        Ok(Self {
            stream,
            decoder: FrameDecoder::new(),
            timeout,
        })
    }

    /// Changes the frame cap (both directions) from [`DEFAULT_MAX_FRAME_LEN`].
    /// Call it before any exchange: bytes already buffered are dropped.
    pub fn with_max_frame_len(mut self, max: usize) -> Self {
        self.decoder = FrameDecoder::with_max_frame_len(max);
        self
    }

    /// The timeout given at construction.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The underlying stream.
    pub fn get_ref(&self) -> &UnixStream {
        &self.stream
    }

    /// Sends one request, whole, within the timeout.
    pub fn send(&mut self, request: &Request) -> Result<(), ChannelError> {
        let frame = encode_frame(request, self.decoder.max_frame_len())?;
        let deadline = deadline_after(self.timeout);
        let mut rest = frame.as_slice();
        while !rest.is_empty() {
            self.stream
                .set_write_timeout(time_left(deadline)?)
                .map_err(ChannelError::Io)?;
            match self.stream.write(rest) {
                Ok(0) => return Err(ChannelError::Closed),
                Ok(n) => rest = rest.get(n..).unwrap_or_default(),
                Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
                Err(err) => return Err(blocking_io_error(err)),
            }
        }
        Ok(())
    }

    /// Reads the next response (progress or final), within the timeout.
    pub fn recv(&mut self) -> Result<Response, ChannelError> {
        let deadline = deadline_after(self.timeout);
        let mut chunk = [0u8; READ_CHUNK];
        loop {
            // Several responses may have come in one read: serve those first.
            if let Some(response) = self.decoder.next_frame()? {
                return Ok(response);
            }
            self.stream
                .set_read_timeout(time_left(deadline)?)
                .map_err(ChannelError::Io)?;
            match self.stream.read(&mut chunk) {
                // Waiting for a response, so EOF is a failure even between frames.
                Ok(0) => return Err(ChannelError::Closed),
                Ok(n) => self.decoder.push(chunk.get(..n).unwrap_or_default()),
                Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
                Err(err) => return Err(blocking_io_error(err)),
            }
        }
    }

    /// Sends `request`, then reads responses until a final one (any status
    /// but PROCESSING), which is returned. PROCESSING responses are progress
    /// messages, handed to `on_progress` in order of arrival.
    pub fn request(
        &mut self,
        request: &Request,
        mut on_progress: impl FnMut(&Response),
    ) -> Result<Response, ChannelError> {
        self.send(request)?;
        loop {
            let response = self.recv()?;
            // Compare the raw value: prost maps an unknown status to the
            // default (OK) in `status()`, and an unknown status must end the
            // exchange rather than be mistaken for progress.
            if response.status == ResponseStatus::Processing as i32 {
                on_progress(&response);
            } else {
                return Ok(response);
            }
        }
    }
}

impl fmt::Debug for BlockingChannel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BlockingChannel")
            .field("stream", &self.stream)
            .field("decoder", &self.decoder)
            .field("timeout", &self.timeout)
            .finish()
    }
}

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
    /// ([`ChannelError::is_frame_error`]) queue [`failure_response`], flush,
    /// and close.
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
    /// refused and nothing is queued (answer with [`failure_response`] of
    /// that error instead).
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

/// The FAILURE answer a server sends before closing a connection whose
/// frame it could not read: the error's text as the message, and
/// [`E_CHANNEL_FRAME`] for a frame error ([`E_CHANNEL_IO`] otherwise).
pub fn failure_response(err: &ChannelError) -> Response {
    let error_code = if err.is_frame_error() {
        E_CHANNEL_FRAME
    } else {
        E_CHANNEL_IO
    };
    Response {
        status: ResponseStatus::Failure as i32,
        message: format!("{err}; the proxy closes this connection"),
        error_code: error_code.to_owned(),
        content: None,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, HashMap};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::thread::JoinHandle;

    use mio::{Events, Interest, Poll, Token, Waker};
    use proptest::prelude::*;

    use super::*;
    use crate::proto::request::RequestType;
    use crate::proto::{Cluster, SoftStop, Status, TcpFrontend};

    /// Upper bound on any wait in these tests; reaching it is a failure.
    const TEST_TIMEOUT: Duration = Duration::from_secs(10);

    fn status() -> Request {
        Request {
            request_type: Some(RequestType::Status(Status {})),
        }
    }

    fn add_cluster(id: &str) -> Request {
        Request {
            request_type: Some(RequestType::AddCluster(Cluster {
                cluster_id: id.to_owned(),
                ..Cluster::default()
            })),
        }
    }

    fn soft_stop() -> Request {
        Request {
            request_type: Some(RequestType::SoftStop(SoftStop {})),
        }
    }

    fn response(status: ResponseStatus, message: &str) -> Response {
        Response {
            status: status as i32,
            message: message.to_owned(),
            ..Response::default()
        }
    }

    fn frame(msg: &impl Message) -> Vec<u8> {
        encode_frame(msg, DEFAULT_MAX_FRAME_LEN).expect("encode")
    }

    fn drain<M: Message + Default>(decoder: &mut FrameDecoder) -> Vec<M> {
        let mut out = Vec::new();
        while let Some(msg) = decoder.next_frame().expect("valid frames") {
            out.push(msg);
        }
        out
    }

    // ---- sans-io decoder and encoder ----

    #[test]
    fn encode_frame_is_big_endian_length_then_payload() {
        let req = add_cluster("api");
        let bytes = frame(&req);
        let payload = req.encode_to_vec();
        let len = u32::try_from(payload.len()).expect("small");
        assert_eq!(bytes.get(..HEADER_LEN), Some(&len.to_be_bytes()[..]));
        assert_eq!(bytes.get(HEADER_LEN..), Some(&payload[..]));
    }

    #[test]
    fn encode_frame_refuses_a_message_over_max() {
        let req = add_cluster(&"x".repeat(100));
        let len = req.encoded_len();
        match encode_frame(&req, len - 1) {
            Err(ChannelError::FrameTooLarge { len: l, max }) => {
                assert_eq!((l, max), (len, len - 1));
            }
            other => panic!("expected FrameTooLarge, got {other:?}"),
        }
        assert!(encode_frame(&req, len).is_ok());
    }

    #[test]
    fn decoder_several_frames_in_one_push() {
        let reqs = vec![
            status(),
            add_cluster("a"),
            add_cluster("b"),
            Request::default(),
        ];
        let mut decoder = FrameDecoder::new();
        decoder.push(&reqs.iter().flat_map(frame).collect::<Vec<u8>>());
        assert_eq!(drain::<Request>(&mut decoder), reqs);
        assert_eq!(decoder.buffered_len(), 0);
    }

    #[test]
    fn decoder_frame_pushed_one_byte_at_a_time() {
        let req = add_cluster("one-byte-at-a-time");
        let bytes = frame(&req);
        let mut decoder = FrameDecoder::new();
        let (last, init) = bytes.split_last().expect("non-empty");
        for byte in init {
            decoder.push(std::slice::from_ref(byte));
            assert_eq!(decoder.next_frame::<Request>().expect("no error"), None);
        }
        decoder.push(std::slice::from_ref(last));
        assert_eq!(
            decoder.next_frame::<Request>().expect("no error"),
            Some(req)
        );
    }

    #[test]
    fn decoder_length_header_split() {
        let req = add_cluster("split-header");
        let bytes = frame(&req);
        let mut decoder = FrameDecoder::new();
        for cut in [&bytes[..1], &bytes[1..3], &bytes[3..4]] {
            decoder.push(cut);
            assert_eq!(decoder.next_frame::<Request>().expect("no error"), None);
        }
        decoder.push(&bytes[4..]);
        assert_eq!(
            decoder.next_frame::<Request>().expect("no error"),
            Some(req)
        );
    }

    #[test]
    fn decoder_refuses_oversized_header_after_four_bytes_and_stays_poisoned() {
        let mut decoder = FrameDecoder::with_max_frame_len(64);
        // Two good frames, then a header announcing 65 bytes: the good ones
        // still come out, then the error, with nothing after it buffered.
        let mut bytes = frame(&status());
        bytes.extend(frame(&add_cluster("a")));
        bytes.extend(65u32.to_be_bytes());
        decoder.push(&bytes);
        decoder.push(&[0u8; 1000]);
        assert_eq!(
            decoder.next_frame::<Request>().expect("first"),
            Some(status())
        );
        assert_eq!(
            decoder.next_frame::<Request>().expect("second"),
            Some(add_cluster("a"))
        );
        for _ in 0..3 {
            match decoder.next_frame::<Request>() {
                Err(ChannelError::FrameTooLarge { len: 65, max: 64 }) => {}
                other => panic!("expected FrameTooLarge, got {other:?}"),
            }
            assert!(decoder.is_poisoned());
            decoder.push(&frame(&status()));
            assert_eq!(decoder.buffered_len(), 0);
        }
    }

    #[test]
    fn decoder_refuses_a_huge_header_before_any_payload() {
        let mut decoder = FrameDecoder::new();
        decoder.push(&u32::MAX.to_be_bytes());
        assert_eq!(
            decoder.buffered_len(),
            0,
            "the huge frame is never buffered"
        );
        assert!(matches!(
            decoder.next_frame::<Request>(),
            Err(ChannelError::FrameTooLarge {
                max: DEFAULT_MAX_FRAME_LEN,
                ..
            })
        ));
    }

    #[test]
    fn decoder_garbage_payload_is_a_decode_error_and_poisons() {
        let mut decoder = FrameDecoder::new();
        decoder.push(&[0, 0, 0, 3, 0xff, 0xff, 0xff]);
        decoder.push(&frame(&status()));
        assert!(matches!(
            decoder.next_frame::<Request>(),
            Err(ChannelError::Decode(_))
        ));
        assert!(decoder.is_poisoned());
        assert!(matches!(
            decoder.next_frame::<Request>(),
            Err(ChannelError::Decode(_))
        ));
    }

    #[test]
    fn decoder_compacts_instead_of_growing_or_shifting_per_frame() {
        let one = frame(&add_cluster("c"));
        let mut decoder = FrameDecoder::new();
        // A steady trickle (push a frame and a half, take what is whole):
        // the buffer never holds much more than what is pending.
        let mut stream: Vec<u8> = Vec::new();
        for _ in 0..10_000 {
            stream.extend(&one);
        }
        let mut taken = 0;
        for piece in stream.chunks(one.len() * 3 / 2) {
            decoder.push(piece);
            taken += drain::<Request>(&mut decoder).len();
            assert!(decoder.buf.len() <= 2 * COMPACT_MIN + 2 * one.len());
        }
        assert_eq!(taken, 10_000);
        assert_eq!(decoder.buffered_len(), 0);
        // Everything in one push: all frames come out; the buffer empties.
        decoder.push(&stream);
        assert_eq!(drain::<Request>(&mut decoder).len(), 10_000);
        assert!(decoder.buf.is_empty());
    }

    #[test]
    fn failure_response_explains_and_carries_a_stable_code() {
        let too_large = ChannelError::FrameTooLarge { len: 5, max: 4 };
        let resp = failure_response(&too_large);
        assert_eq!(resp.status, ResponseStatus::Failure as i32);
        assert_eq!(resp.error_code, E_CHANNEL_FRAME);
        assert!(resp.message.contains("5 bytes"), "{}", resp.message);
        assert!(resp.message.contains("4-byte limit"), "{}", resp.message);
        assert_eq!(
            failure_response(&ChannelError::Timeout).error_code,
            E_CHANNEL_IO
        );
    }

    // ---- non-blocking server end over a mio pair ----

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

    // ---- blocking client end over a std pair ----

    fn blocking_pair(timeout: Duration) -> (BlockingChannel, UnixStream) {
        let (client, server) = UnixStream::pair().expect("pair");
        server
            .set_read_timeout(Some(TEST_TIMEOUT))
            .expect("timeout");
        (
            BlockingChannel::from_stream(client, timeout).expect("channel"),
            server,
        )
    }

    /// Reads one request frame from the raw server side.
    fn read_request(server: &mut UnixStream) -> Request {
        let mut decoder = FrameDecoder::new();
        let mut chunk = [0u8; 256];
        loop {
            if let Some(req) = decoder.next_frame().expect("valid request") {
                return req;
            }
            let n = server.read(&mut chunk).expect("read");
            assert!(n > 0, "client closed");
            decoder.push(&chunk[..n]);
        }
    }

    #[test]
    fn blocking_timeout_fires_when_the_server_never_answers() {
        let timeout = Duration::from_millis(200);
        let (mut client, mut server) = blocking_pair(timeout);
        let start = Instant::now();
        let result = client.request(&status(), |_| panic!("no progress expected"));
        let elapsed = start.elapsed();
        assert!(matches!(result, Err(ChannelError::Timeout)), "{result:?}");
        assert!(elapsed >= timeout, "fired early: {elapsed:?}");
        assert!(elapsed < TEST_TIMEOUT, "fired late: {elapsed:?}");
        // The request itself did go out.
        assert_eq!(read_request(&mut server), status());
    }

    #[test]
    fn blocking_timeout_is_not_stretched_by_a_trickling_peer() {
        let timeout = Duration::from_millis(300);
        let (mut client, mut server) = blocking_pair(timeout);
        let bytes = frame(&response(ResponseStatus::Ok, &"never finished ".repeat(8)));
        let start = Instant::now();
        let writer = std::thread::spawn(move || {
            // One byte every 50 ms for 2 s: a per-read timeout would never
            // fire while this lasts; the per-response deadline does.
            for byte in bytes.iter().take(40) {
                if server.write_all(std::slice::from_ref(byte)).is_err() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        let result = client.recv();
        let elapsed = start.elapsed();
        assert!(matches!(result, Err(ChannelError::Timeout)), "{result:?}");
        assert!(
            elapsed < Duration::from_millis(1500),
            "stretched: {elapsed:?}"
        );
        drop(client);
        writer.join().expect("writer");
    }

    #[test]
    fn blocking_progress_goes_to_the_callback_before_the_final_response() {
        let (mut client, mut server) = blocking_pair(TEST_TIMEOUT);
        let mut answer = Vec::new();
        for resp in [
            response(ResponseStatus::Processing, "step 1"),
            response(ResponseStatus::Processing, "step 2"),
            response(ResponseStatus::Ok, "done"),
            response(ResponseStatus::Processing, "next exchange"),
        ] {
            answer.extend(frame(&resp));
        }
        // Queued before the request: all of it arrives in one read, and the
        // response after the final one must stay for the next recv.
        server.write_all(&answer).expect("write");
        let mut progress = Vec::new();
        let last = client
            .request(&soft_stop(), |resp| progress.push(resp.message.clone()))
            .expect("request");
        assert_eq!(progress, ["step 1", "step 2"]);
        assert_eq!(last.message, "done");
        assert_eq!(read_request(&mut server), soft_stop());
        assert_eq!(client.recv().expect("recv").message, "next exchange");
    }

    #[test]
    fn blocking_unknown_status_ends_the_exchange() {
        let (mut client, mut server) = blocking_pair(TEST_TIMEOUT);
        let odd = Response {
            status: 7,
            message: "from a newer proxy".to_owned(),
            ..Response::default()
        };
        server.write_all(&frame(&odd)).expect("write");
        let last = client
            .request(&status(), |_| panic!("not progress"))
            .expect("request");
        assert_eq!(last, odd);
    }

    #[test]
    fn blocking_peer_closed_mid_frame_is_closed() {
        let (mut client, mut server) = blocking_pair(TEST_TIMEOUT);
        let bytes = frame(&response(ResponseStatus::Ok, "cut short"));
        server.write_all(&bytes[..bytes.len() - 2]).expect("write");
        drop(server);
        assert!(matches!(client.recv(), Err(ChannelError::Closed)));
    }

    #[test]
    fn blocking_connect_to_a_missing_socket_names_the_path() {
        let path = unique_socket_path();
        match BlockingChannel::connect(&path, TEST_TIMEOUT) {
            Err(err @ ChannelError::Connect { .. }) => {
                assert!(err.to_string().contains(&*path.to_string_lossy()), "{err}");
            }
            other => panic!("expected Connect error, got {other:?}"),
        }
    }

    // ---- a tiny mio server over a real listening socket ----

    const LISTENER: Token = Token(0);
    const WAKER: Token = Token(1);

    fn unique_socket_path() -> PathBuf {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        std::env::temp_dir().join(format!(
            "preread-channel-test-{}-{}.sock",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ))
    }

    /// What the test server saw, for assertions.
    #[derive(Debug, Default)]
    struct ServerLog {
        accepted: usize,
        frame_errors: usize,
    }

    struct TestServer {
        path: PathBuf,
        waker: Arc<Waker>,
        thread: Option<JoinHandle<ServerLog>>,
    }

    struct Conn {
        channel: NonBlockingChannel,
        closing: bool,
    }

    /// The answers of the test server: progress for a soft stop, one
    /// response otherwise.
    fn answer(req: &Request) -> Vec<Response> {
        match &req.request_type {
            Some(RequestType::Status(_)) => vec![response(ResponseStatus::Ok, "status ok")],
            Some(RequestType::AddCluster(c)) => vec![response(
                ResponseStatus::Ok,
                &format!("cluster {} added", c.cluster_id),
            )],
            Some(RequestType::SoftStop(_)) => vec![
                response(ResponseStatus::Processing, "draining 1"),
                response(ResponseStatus::Processing, "draining 2"),
                response(ResponseStatus::Ok, "stopped"),
            ],
            _ => vec![response(ResponseStatus::Failure, "unsupported")],
        }
    }

    /// Reads, answers and flushes one connection; false when it is done.
    fn service(conn: &mut Conn, log: &mut ServerLog) -> bool {
        while !conn.closing {
            let Ok(outcome) = conn.channel.read_ready() else {
                return false;
            };
            loop {
                match conn.channel.next_request() {
                    Ok(Some(req)) => {
                        for resp in answer(&req) {
                            if conn.channel.queue(&resp).is_err() {
                                return false;
                            }
                        }
                    }
                    Ok(None) => break,
                    Err(err) => {
                        if err.is_frame_error() {
                            log.frame_errors += 1;
                            // The failure response is small: it always fits.
                            let _ = conn.channel.queue(&failure_response(&err));
                        }
                        conn.closing = true;
                        break;
                    }
                }
            }
            match outcome {
                ReadOutcome::Paused => {}
                ReadOutcome::PeerClosed => conn.closing = true,
                _ => break,
            }
        }
        match conn.channel.write_ready() {
            Ok(flushed) => !(flushed && conn.closing),
            Err(_) => false,
        }
    }

    fn serve(mut poll: Poll, listener: mio::net::UnixListener) -> ServerLog {
        let mut log = ServerLog::default();
        let mut events = Events::with_capacity(64);
        let mut conns: HashMap<Token, Conn> = HashMap::new();
        let mut next = 2;
        loop {
            // Bounded: a server nobody stops exits on its own.
            if poll.poll(&mut events, Some(TEST_TIMEOUT)).is_err() || events.is_empty() {
                return log;
            }
            for event in &events {
                match event.token() {
                    WAKER => return log,
                    LISTENER => loop {
                        let Ok((stream, _)) = listener.accept() else {
                            break;
                        };
                        log.accepted += 1;
                        let token = Token(next);
                        next += 1;
                        let mut conn = Conn {
                            channel: NonBlockingChannel::new(stream),
                            closing: false,
                        };
                        if poll
                            .registry()
                            .register(
                                &mut conn.channel,
                                token,
                                Interest::READABLE | Interest::WRITABLE,
                            )
                            .is_ok()
                            && service(&mut conn, &mut log)
                        {
                            conns.insert(token, conn);
                        }
                    },
                    token => {
                        let keep = conns.get_mut(&token).is_some_and(|c| service(c, &mut log));
                        if !keep {
                            if let Some(mut conn) = conns.remove(&token) {
                                let _ = poll.registry().deregister(&mut conn.channel);
                            }
                        }
                    }
                }
            }
        }
    }

    impl TestServer {
        fn start() -> Self {
            let path = unique_socket_path();
            let _ = std::fs::remove_file(&path);
            let mut listener = mio::net::UnixListener::bind(&path).expect("bind");
            let poll = Poll::new().expect("poll");
            poll.registry()
                .register(&mut listener, LISTENER, Interest::READABLE)
                .expect("register");
            let waker = Arc::new(Waker::new(poll.registry(), WAKER).expect("waker"));
            let thread = std::thread::spawn(move || serve(poll, listener));
            Self {
                path,
                waker,
                thread: Some(thread),
            }
        }

        fn stop(mut self) -> ServerLog {
            self.shutdown().expect("server thread")
        }

        fn shutdown(&mut self) -> Option<ServerLog> {
            let _ = self.waker.wake();
            let log = self.thread.take().and_then(|t| t.join().ok());
            let _ = std::fs::remove_file(&self.path);
            log
        }
    }

    impl Drop for TestServer {
        fn drop(&mut self) {
            self.shutdown();
        }
    }

    #[test]
    fn server_answers_requests_in_order_with_progress() {
        let server = TestServer::start();
        let mut client = BlockingChannel::connect(&server.path, TEST_TIMEOUT).expect("connect");
        let first = client
            .request(&status(), |_| panic!("no progress"))
            .expect("status");
        assert_eq!(first.message, "status ok");
        let second = client
            .request(&add_cluster("api"), |_| panic!("no progress"))
            .expect("add");
        assert_eq!(second.message, "cluster api added");
        let mut progress = Vec::new();
        let last = client
            .request(&soft_stop(), |r| progress.push(r.message.clone()))
            .expect("stop");
        assert_eq!(progress, ["draining 1", "draining 2"]);
        assert_eq!(last.message, "stopped");
        drop(client);
        let log = server.stop();
        assert_eq!((log.accepted, log.frame_errors), (1, 0));
    }

    #[test]
    fn server_answers_garbage_with_failure_closes_and_keeps_serving() {
        let server = TestServer::start();
        let mut raw = UnixStream::connect(&server.path).expect("connect");
        // A valid request, then a frame whose payload is not protobuf.
        let mut bytes = frame(&status());
        bytes.extend([0, 0, 0, 3, 0xff, 0xff, 0xff]);
        raw.write_all(&bytes).expect("write");
        let mut client = BlockingChannel::from_stream(raw, TEST_TIMEOUT).expect("channel");
        assert_eq!(client.recv().expect("answer").message, "status ok");
        let failure = client.recv().expect("failure");
        assert_eq!(failure.status, ResponseStatus::Failure as i32);
        assert_eq!(failure.error_code, E_CHANNEL_FRAME);
        assert!(
            failure.message.contains("not a valid protobuf"),
            "{}",
            failure.message
        );
        assert!(matches!(client.recv(), Err(ChannelError::Closed)));

        let mut fresh = BlockingChannel::connect(&server.path, TEST_TIMEOUT).expect("reconnect");
        let ok = fresh.request(&status(), |_| {}).expect("status");
        assert_eq!(ok.status, ResponseStatus::Ok as i32);
        drop(fresh);
        let log = server.stop();
        assert_eq!((log.accepted, log.frame_errors), (2, 1));
    }

    #[test]
    fn server_refuses_an_oversized_frame_from_its_header() {
        let server = TestServer::start();
        let mut raw = UnixStream::connect(&server.path).expect("connect");
        let len = u32::try_from(DEFAULT_MAX_FRAME_LEN + 1).expect("fits");
        raw.write_all(&len.to_be_bytes()).expect("write");
        let mut client = BlockingChannel::from_stream(raw, TEST_TIMEOUT).expect("channel");
        let failure = client.recv().expect("failure");
        assert_eq!(failure.error_code, E_CHANNEL_FRAME);
        assert!(failure.message.contains("over the"), "{}", failure.message);
        assert!(matches!(client.recv(), Err(ChannelError::Closed)));
        let log = server.stop();
        assert_eq!(log.frame_errors, 1);
    }

    // ---- properties ----

    fn request_strategy() -> impl Strategy<Value = Request> {
        prop_oneof![
            Just(status()),
            "[a-z0-9-]{0,24}".prop_map(|id| add_cluster(&id)),
            (
                "[a-z0-9-]{1,12}",
                proptest::option::of("(\\*\\*?\\.)?[a-z0-9-]{1,10}\\.[a-z]{2,5}"),
                proptest::collection::vec("[a-z0-9/.]{1,10}", 0..4),
                proptest::collection::btree_map("[a-z]{1,5}", "[a-z0-9]{0,5}", 0..3),
            )
                .prop_map(
                    |(cluster_id, sni, alpn, tags): (_, _, _, BTreeMap<_, _>)| {
                        Request {
                            request_type: Some(RequestType::AddTcpFrontend(TcpFrontend {
                                cluster_id,
                                address: "127.0.0.1:443".to_owned(),
                                sni,
                                alpn,
                                tags,
                            })),
                        }
                    }
                ),
        ]
    }

    proptest! {
        #[test]
        fn frames_cut_anywhere_decode_to_the_same_sequence(
            reqs in proptest::collection::vec(request_strategy(), 0..16),
            cuts in proptest::collection::vec(any::<proptest::sample::Index>(), 0..24),
        ) {
            let bytes: Vec<u8> = reqs.iter().flat_map(frame).collect();
            let mut points: Vec<usize> = cuts.iter().map(|c| c.index(bytes.len() + 1)).collect();
            points.push(bytes.len());
            points.sort_unstable();
            let mut decoder = FrameDecoder::new();
            let mut got = Vec::new();
            let mut from = 0;
            for to in points {
                decoder.push(&bytes[from..to]);
                from = to;
                while let Some(req) = decoder.next_frame::<Request>().expect("valid frames") {
                    got.push(req);
                }
            }
            prop_assert_eq!(got, reqs);
            prop_assert_eq!(decoder.buffered_len(), 0);
        }

        #[test]
        fn random_bytes_never_panic_and_errors_stick(
            bytes in proptest::collection::vec(any::<u8>(), 0..512),
            cuts in proptest::collection::vec(any::<proptest::sample::Index>(), 0..8),
        ) {
            let mut points: Vec<usize> = cuts.iter().map(|c| c.index(bytes.len() + 1)).collect();
            points.push(bytes.len());
            points.sort_unstable();
            let mut decoder = FrameDecoder::with_max_frame_len(64);
            let mut first_error: Option<String> = None;
            let mut from = 0;
            for to in points {
                decoder.push(&bytes[from..to]);
                from = to;
                loop {
                    match decoder.next_frame::<Request>() {
                        Ok(Some(_)) => prop_assert!(first_error.is_none()),
                        Ok(None) => {
                            prop_assert!(first_error.is_none());
                            break;
                        }
                        Err(err) => {
                            let text = err.to_string();
                            if let Some(first) = &first_error {
                                prop_assert_eq!(first, &text);
                            }
                            first_error = Some(text);
                            break;
                        }
                    }
                }
            }
        }
    }
}
