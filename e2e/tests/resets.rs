//! End-to-end checks that a reset is relayed, against the real `preread`
//! process: when one side of a piped session resets, the other side is
//! reset too (`SO_LINGER` 0), not closed with a FIN, so a plain-TCP client
//! can tell an answer cut by its backend from a complete one. Both data
//! paths: spliced and copied.
//!
//! The backend here is a raw loopback socket the test drives by hand (it
//! answers, then resets, or it reports how its connection ended). Loopback
//! only; every wait is bounded; the proxy is stopped on Drop. Run
//! `cargo build -p proxy-shell` first.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::mpsc;
use std::thread::{self, JoinHandle};
use std::time::Duration;

use e2e::client::{self, End, read_until_end};
use e2e::proxy::{ConfigBuilder, ProxyProcess};
use e2e::testkit::stderr_tail;
use socket2::SockRef;

/// Bound of one wait.
const T: Duration = Duration::from_secs(10);
/// A plain-TCP request: not TLS, so the listener's `default_cluster` takes it.
const REQUEST: &[u8] = b"GET /report HTTP/1.0\r\n\r\n";
/// The part of the answer the backend sends before it resets.
const PARTIAL: &[u8] = b"HTTP/1.0 200 OK\r\nContent-Length: 1000\r\n\r\npart of it";

/// Closes `stream` with a reset.
fn reset(stream: TcpStream) {
    SockRef::from(&stream)
        .set_linger(Some(Duration::ZERO))
        .expect("SO_LINGER 0");
    drop(stream);
}

/// A backend that takes one connection, reads the request, and runs `then`
/// on it; what `then` returns comes back on join.
fn backend<R: Send + 'static>(
    then: impl FnOnce(TcpStream) -> R + Send + 'static,
) -> (SocketAddr, JoinHandle<R>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (ready_tx, ready_rx) = mpsc::channel();
    let handle = thread::spawn(move || {
        ready_tx.send(()).expect("ready");
        let (mut stream, _) = listener.accept().expect("accept");
        stream.set_read_timeout(Some(T)).expect("read timeout");
        let mut got = vec![0u8; REQUEST.len()];
        stream.read_exact(&mut got).expect("the request");
        assert_eq!(got, REQUEST);
        then(stream)
    });
    ready_rx.recv_timeout(T).expect("the backend thread runs");
    (addr, handle)
}

/// A listener whose `default_cluster` is `plain`, with `splice` on (from
/// the first byte: `splice_threshold = 0`, so that these short exchanges
/// go through kernel pipes) or off.
fn start(splice: bool, backend: SocketAddr) -> ProxyProcess {
    let config = ConfigBuilder::new()
        .global(&format!("splice = {splice}"))
        .global("splice_threshold = 0")
        .listener("main", &["default_cluster = \"plain\""])
        .frontend("tls", "main", Some("tls.example.com"), &[])
        .backend("tls", "tls-0", backend)
        .backend("plain", "plain-0", backend)
        .build();
    ProxyProcess::start(&config).expect("proxy ready")
}

/// The finding: the backend's reset reached the client as a clean FIN, so
/// the client took a truncated answer for a complete one. Now the client
/// reads what came before the reset, then `ECONNRESET`.
fn a_backend_reset_reaches_the_client_as_a_reset(splice: bool) {
    let (addr, backend) = backend(|mut stream| {
        stream.write_all(PARTIAL).expect("the partial answer");
        // Let the partial answer reach the client before the reset.
        thread::sleep(Duration::from_millis(200));
        reset(stream);
    });
    let proxy = start(splice, addr);
    let mut tcp = client::connect(proxy.addr("main"), T).expect("connect");
    tcp.write_all(REQUEST).expect("request");
    let (answer, end) = read_until_end(&mut tcp, T);
    backend.join().expect("backend");
    assert_eq!(answer, PARTIAL, "splice {splice}");
    assert_eq!(
        end,
        End::Error(io::ErrorKind::ConnectionReset),
        "splice {splice}: the client must see the reset; stderr:\n{}",
        stderr_tail(&proxy)
    );
    if let Err(err) = proxy.wait_metric("tcp.reset.from_backend", |v| v == 1, T) {
        panic!("splice {splice}: {err}");
    }
    assert_eq!(proxy.metric("tcp.reset.from_client"), 0);
    assert_eq!(proxy.metric("splice.pipes_created") > 0, splice);
    let logs = proxy
        .wait_stderr("outcome=fallback:not_tls", T)
        .expect("logged");
    assert!(logs.contains("backend=plain-0"), "{logs}");
}

#[test]
fn a_backend_reset_reaches_the_client_as_a_reset_spliced() {
    a_backend_reset_reaches_the_client_as_a_reset(true);
}

#[test]
fn a_backend_reset_reaches_the_client_as_a_reset_copied() {
    a_backend_reset_reaches_the_client_as_a_reset(false);
}

/// The other way: a client that resets makes the backend read a reset too,
/// not a FIN it could take for the end of a complete upload.
fn a_client_reset_reaches_the_backend_as_a_reset(splice: bool) {
    let (addr, backend) = backend(|mut stream| {
        stream.write_all(PARTIAL).expect("answer");
        let mut rest = Vec::new();
        match stream.read_to_end(&mut rest) {
            Ok(_) => Err(format!("a clean end after {} bytes", rest.len())),
            Err(e) => Ok(e.kind()),
        }
    });
    let proxy = start(splice, addr);
    let mut tcp = client::connect(proxy.addr("main"), T).expect("connect");
    tcp.write_all(REQUEST).expect("request");
    // Piped once the answer is back: then the client resets.
    let mut got = vec![0u8; PARTIAL.len()];
    tcp.set_read_timeout(Some(T)).expect("read timeout");
    tcp.read_exact(&mut got).expect("the answer");
    reset(tcp);
    let end = backend.join().expect("backend");
    assert_eq!(
        end,
        Ok(io::ErrorKind::ConnectionReset),
        "splice {splice}; stderr:\n{}",
        stderr_tail(&proxy)
    );
    if let Err(err) = proxy.wait_metric("tcp.reset.from_client", |v| v == 1, T) {
        panic!("splice {splice}: {err}");
    }
    assert_eq!(proxy.metric("tcp.reset.from_backend"), 0);
    assert_eq!(proxy.metric("splice.pipes_created") > 0, splice);
}

#[test]
fn a_client_reset_reaches_the_backend_as_a_reset_spliced() {
    a_client_reset_reaches_the_backend_as_a_reset(true);
}

#[test]
fn a_client_reset_reaches_the_backend_as_a_reset_copied() {
    a_client_reset_reaches_the_backend_as_a_reset(false);
}
