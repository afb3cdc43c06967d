//! The client end of the command socket, used by the CLI: a blocking Unix
//! stream that sends a request and reads responses until the final one.
//!
//! Owns: connecting within a deadline (even to a listener whose backlog is
//! full), the per-operation timeouts, and the request/progress/final
//! exchange.
//!
//! Must never: wait without the bound the caller gave, mistake an unknown
//! status for progress, or be used inside the proxy's event loop (it
//! blocks).

use std::fmt;
use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use socket2::{Domain, SockAddr, Socket, Type};

use super::{CONNECT_RETRY, ChannelError, FrameDecoder, READ_CHUNK, encode_frame};
use crate::proto::{Request, Response, ResponseStatus};

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

/// One connect attempt on a fresh non-blocking socket. socket2, because std
/// can only create a Unix stream by a blocking connect.
fn try_connect(addr: &SockAddr) -> io::Result<Socket> {
    let socket = Socket::new(Domain::UNIX, Type::STREAM, None)?;
    socket.set_nonblocking(true)?;
    socket.connect(addr)?;
    Ok(socket)
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
        let connect_error = |source| ChannelError::Connect {
            path: path.to_owned(),
            source,
        };
        let addr = SockAddr::unix(path).map_err(connect_error)?;
        // A blocking connect to a listener whose backlog is full waits with
        // no bound, so connect non-blocking and retry until the deadline
        // instead. On Linux a Unix-socket connect either completes at once
        // or fails with EAGAIN (backlog full); it is never "in progress".
        let socket = loop {
            match try_connect(&addr) {
                Ok(socket) => break socket,
                Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => {
                    let pause =
                        time_left(deadline)?.map_or(CONNECT_RETRY, |left| left.min(CONNECT_RETRY));
                    std::thread::sleep(pause);
                }
                Err(source) => return Err(connect_error(source)),
            }
        };
        if let Ok(Some(source)) = socket.take_error() {
            return Err(connect_error(source));
        }
        Self::from_stream(UnixStream::from(socket), timeout)
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

    /// Changes the frame cap (both directions) from
    /// [`DEFAULT_MAX_FRAME_LEN`](super::DEFAULT_MAX_FRAME_LEN). Call it before
    /// any exchange: bytes already buffered are dropped.
    pub fn with_max_frame_len(mut self, max: usize) -> Self {
        self.decoder = FrameDecoder::with_max_frame_len(max);
        self
    }

    /// The timeout of each operation: the one given at construction, or
    /// the last [`set_timeout`](Self::set_timeout).
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Changes the timeout of the next operations: a caller bound by one
    /// deadline over a whole exchange gives each operation what is left.
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::channel::tests::{TEST_TIMEOUT, frame, response, soft_stop, status};

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
    fn set_timeout_bounds_the_next_operations() {
        let (mut client, _server) = blocking_pair(TEST_TIMEOUT);
        let short = Duration::from_millis(100);
        client.set_timeout(short);
        assert_eq!(client.timeout(), short);
        let start = Instant::now();
        assert!(matches!(client.recv(), Err(ChannelError::Timeout)));
        let elapsed = start.elapsed();
        assert!(
            elapsed >= short && elapsed < TEST_TIMEOUT / 2,
            "{elapsed:?}"
        );
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
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("nobody-listens.sock");
        match BlockingChannel::connect(&path, TEST_TIMEOUT) {
            Err(err @ ChannelError::Connect { .. }) => {
                assert!(err.to_string().contains(&*path.to_string_lossy()), "{err}");
            }
            other => panic!("expected Connect error, got {other:?}"),
        }
    }
}
