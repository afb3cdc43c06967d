//! The mio adapter over real non-blocking Unix streams and a mio poll:
//! edge-triggered reads across any cut of the frames, the bounded pause, the
//! frame cap from its header, EOF and partial writes. These came with the
//! adapter from `command`, whose own tests of `ServerEnd` need no socket.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use command::channel::{
    E_CHANNEL_FRAME, FrameDecoder, HEADER_LEN, READ_CHUNK, encode_frame, failure_response,
};
use command::proto::request::RequestType;
use command::proto::{Cluster, ResponseStatus, SoftStop, Status};
use mio::{Events, Interest, Poll, Token};

use super::*;

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

fn frame(req: &Request) -> Vec<u8> {
    encode_frame(req, DEFAULT_MAX_FRAME_LEN).expect("encode")
}

/// A MioChannel registered for reading on its own Poll, and the
/// blocking peer a test writes with.
struct Reader {
    poll: Poll,
    events: Events,
    channel: MioChannel,
}

impl Reader {
    fn pair(max: usize) -> (Self, UnixStream) {
        let (server, client) = mio::net::UnixStream::pair().expect("pair");
        let poll = Poll::new().expect("poll");
        let mut channel = MioChannel::with_max_frame_len(server, max);
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
    assert_eq!(reader.channel.end.buffered_input(), 0);
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
    assert!(reader.channel.end.buffered_input() < max + HEADER_LEN + READ_CHUNK);
    assert_eq!(reader.collect(reqs.len()), reqs);
}

#[test]
fn nonblocking_partial_writes_deliver_large_responses_whole() {
    let max = 2 << 20;
    let (server, client) = mio::net::UnixStream::pair().expect("pair");
    let mut poll = Poll::new().expect("poll");
    let mut events = Events::with_capacity(8);
    let mut channel = MioChannel::with_max_frame_len(server, max);
    poll.registry()
        .register(&mut channel, Token(0), Interest::WRITABLE)
        .expect("register");
    // About 4.4 MB, far over any default socket buffer; each response is over
    // the request cap (answers have their own, larger one).
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
    let before = channel.pending_output();

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
