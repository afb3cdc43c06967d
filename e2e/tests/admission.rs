//! Admission at accept, through the real worker: the buffer pool and the
//! session cap refuse new connections with a metric rather than failing
//! later, and both counts come back when the sessions close.
//!
//! Build the binary first: `cargo build -p proxy-shell`. Loopback only;
//! every wait is bounded.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use e2e::backend::PlainBackend;
use e2e::client::raw_exchange;
use e2e::proxy::{ConfigBuilder, ProxyProcess};
use e2e::testkit::capture;

const T: Duration = Duration::from_secs(5);

/// A client whose connection the proxy closed without a byte: read sees EOF
/// or a reset within `T`.
fn closed_without_answer(mut stream: TcpStream) -> bool {
    stream.set_read_timeout(Some(T)).ok();
    let mut buf = [0u8; 64];
    matches!(stream.read(&mut buf), Ok(0) | Err(_))
}

fn proxy(globals: &[&str], backend: &PlainBackend) -> ProxyProcess {
    let config = globals
        .iter()
        .fold(ConfigBuilder::new(), |config, line| config.global(line))
        .listener("main", &["sni_preread_timeout = 10000"])
        .frontend("alpha", "main", Some("a.example.com"), &[])
        .backend("alpha", "alpha-0", backend.addr())
        .build();
    ProxyProcess::start(&config).unwrap_or_else(|e| panic!("start the proxy: {e}"))
}

/// Opens a connection that sends one byte of a ClientHello: it holds a
/// session and a buffer while the preread waits for more.
fn hold(addr: std::net::SocketAddr) -> TcpStream {
    let mut stream = TcpStream::connect_timeout(&addr, T).expect("connect");
    stream.write_all(&[0x16]).expect("first byte");
    stream
}

#[test]
fn an_exhausted_buffer_pool_refuses_at_accept_and_recovers() {
    let backend = PlainBackend::start("alpha-0");
    let proxy = proxy(&["max_buffers = 2"], &backend);
    let addr = proxy.addr("main");
    let held = [hold(addr), hold(addr)];
    proxy
        .wait_metric("buffers.in_use", |v| v == 2, T)
        .expect("both waiting sessions hold a buffer");
    let refused = hold(addr);
    assert!(
        closed_without_answer(refused),
        "the third connection is refused"
    );
    proxy
        .wait_metric("tcp.refused.pool_exhausted", |v| v == 1, T)
        .expect("the refusal is counted");
    assert_eq!(
        backend.accepted(),
        0,
        "no backend is contacted for a refused connection"
    );
    drop(held);
    proxy
        .wait_metric("buffers.in_use", |v| v == 0, T)
        .expect("closed sessions give their buffers back");
    proxy
        .wait_metric("tcp.active", |v| v == 0, T)
        .expect("no session left");
    let (got, _) =
        raw_exchange(addr, &capture("curl_h2.bin"), Duration::from_millis(500)).expect("connect");
    assert!(
        got.starts_with(b"backend=alpha-0"),
        "routed once buffers are back: {got:?}"
    );
    proxy
        .wait_metric("tcp.sni_preread.active", |v| v == 0, T)
        .expect("gauge back to 0");
}

#[test]
fn the_session_cap_refuses_at_accept_and_recovers() {
    let backend = PlainBackend::start("alpha-0");
    // Silent connections are the point: the kernel must not hold them
    // back (`defer_accept`).
    let proxy = proxy(&["max_connections = 2", "defer_accept = false"], &backend);
    let addr = proxy.addr("main");
    // Idle connections hold a session, not a buffer (buffers are lazy).
    let idle: Vec<TcpStream> = (0..2)
        .map(|_| TcpStream::connect_timeout(&addr, T).expect("connect"))
        .collect();
    proxy
        .wait_metric("tcp.active", |v| v == 2, T)
        .expect("two sessions open");
    assert_eq!(
        proxy.metric("buffers.in_use"),
        0,
        "an idle connection costs no buffer"
    );
    let refused = TcpStream::connect_timeout(&addr, T).expect("the kernel still accepts");
    assert!(
        closed_without_answer(refused),
        "the third session is refused"
    );
    proxy
        .wait_metric("tcp.refused.max_connections", |v| v == 1, T)
        .expect("the refusal is counted");
    drop(idle);
    proxy
        .wait_metric("tcp.active", |v| v == 0, T)
        .expect("sessions released");
    let (got, _) =
        raw_exchange(addr, &capture("curl_h2.bin"), Duration::from_millis(500)).expect("connect");
    assert!(
        got.starts_with(b"backend=alpha-0"),
        "routed once the cap has room: {got:?}"
    );
    assert_eq!(
        proxy.metric("tcp.sni_preread.rejected.front_closed"),
        0,
        "idle connections closed without a byte are health checks, not rejects"
    );
}
