//! Tests of the channel as a whole, and the fixtures every channel test
//! shares.
//!
//! Owns: the sample requests and responses, the FAILURE answer's test, and a
//! tiny server over a real listening socket (std sockets, polled) that
//! exercises the client and server ends together.
//!
//! Must never: reach into the private state of one end; tests of a single
//! part live beside that part.

use std::io::Write;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

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
// ---- a tiny server over a real listening socket ----

/// Sleep of the test server between passes over its connections when none
/// made progress: it polls non-blocking std sockets instead of owning an
/// event loop, which this crate must not know.
const IDLE_PAUSE: Duration = Duration::from_millis(1);

/// What the test server saw, for assertions.
#[derive(Debug, Default)]
struct ServerLog {
    accepted: usize,
    frame_errors: usize,
}

struct TestServer {
    /// Holds the socket file; removed on drop.
    _dir: tempfile::TempDir,
    path: PathBuf,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<ServerLog>>,
}

struct Conn {
    stream: UnixStream,
    end: ServerEnd,
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
        let Ok(outcome) = conn.end.read_from(&mut &conn.stream) else {
            return false;
        };
        loop {
            match conn.end.next_request() {
                Ok(Some(req)) => {
                    for resp in answer(&req) {
                        if conn.end.queue(&resp).is_err() {
                            return false;
                        }
                    }
                }
                Ok(None) => break,
                Err(err) => {
                    if err.is_frame_error() {
                        log.frame_errors += 1;
                        // The failure response is small: it always fits.
                        let _ = conn.end.queue(&failure_response(&err));
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
    match conn.end.write_to(&mut &conn.stream) {
        Ok(flushed) => !(flushed && conn.closing),
        Err(_) => false,
    }
}

fn serve(listener: UnixListener, stop: &AtomicBool) -> ServerLog {
    let mut log = ServerLog::default();
    let mut conns: Vec<Conn> = Vec::new();
    // Bounded: a server nobody stops exits on its own.
    let deadline = Instant::now() + TEST_TIMEOUT;
    while !stop.load(Ordering::Acquire) && Instant::now() < deadline {
        while let Ok((stream, _)) = listener.accept() {
            log.accepted += 1;
            if stream.set_nonblocking(true).is_ok() {
                conns.push(Conn {
                    stream,
                    end: ServerEnd::new(),
                    closing: false,
                });
            }
        }
        conns.retain_mut(|conn| service(conn, &mut log));
        std::thread::sleep(IDLE_PAUSE);
    }
    log
}

impl TestServer {
    fn start() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("command.sock");
        let listener = UnixListener::bind(&path).expect("bind");
        listener.set_nonblocking(true).expect("non-blocking");
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::spawn(move || serve(listener, &flag));
        Self {
            _dir: dir,
            path,
            stop,
            thread: Some(thread),
        }
    }

    fn stop(mut self) -> ServerLog {
        self.shutdown().expect("server thread")
    }

    fn shutdown(&mut self) -> Option<ServerLog> {
        self.stop.store(true, Ordering::Release);
        self.thread.take().and_then(|t| t.join().ok())
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
