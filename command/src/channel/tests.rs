//! Tests of the channel as a whole, and the fixtures every channel test
//! shares.
//!
//! Owns: the sample requests and responses, the FAILURE answer's test, and a
//! tiny mio server over a real listening socket that exercises the client
//! and server ends together.
//!
//! Must never: reach into the private state of one end; tests of a single
//! part live beside that part.

use std::collections::HashMap;
use std::io::Write;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use mio::{Events, Interest, Poll, Token, Waker};
use prost::Message;

use super::*;
use crate::proto::request::RequestType;
use crate::proto::{Cluster, Request, SoftStop, Status};

/// Upper bound on any wait in these tests; reaching it is a failure.
pub(super) const TEST_TIMEOUT: Duration = Duration::from_secs(10);

pub(super) fn status() -> Request {
    Request {
        request_type: Some(RequestType::Status(Status {})),
    }
}

pub(super) fn add_cluster(id: &str) -> Request {
    Request {
        request_type: Some(RequestType::AddCluster(Cluster {
            cluster_id: id.to_owned(),
            ..Cluster::default()
        })),
    }
}

pub(super) fn soft_stop() -> Request {
    Request {
        request_type: Some(RequestType::SoftStop(SoftStop {})),
    }
}

pub(super) fn response(status: ResponseStatus, message: &str) -> Response {
    Response {
        status: status as i32,
        message: message.to_owned(),
        ..Response::default()
    }
}

pub(super) fn frame(msg: &impl Message) -> Vec<u8> {
    encode_frame(msg, DEFAULT_MAX_FRAME_LEN).expect("encode")
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
// ---- a tiny mio server over a real listening socket ----

const LISTENER: Token = Token(0);
const WAKER: Token = Token(1);

pub(super) fn unique_socket_path() -> PathBuf {
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
