//! End-to-end checks of `backend_delayed_ack` against the real `preread`
//! process: with it, a session that writes at once still carries every
//! byte both ways, over and over (its backend socket's handshake ACK rides
//! on the first bytes, and `TCP_NODELAY` comes before its second write),
//! and a server-first listener, whose backend speaks first, still gets its
//! greeting (its socket connects plainly). The packets themselves are
//! counted by the benchmark (doc/performance.md), not here.
//!
//! Loopback only; every wait is bounded; the proxy is stopped on Drop.
//! Run `cargo build -p proxy-shell` first.

use std::io::Write;
use std::net::Shutdown;
use std::time::Duration;

use e2e::backend::PlainBackend;
use e2e::client::{self, read_line, read_to_close};
use e2e::proxy::{ConfigBuilder, ProxyProcess};
use e2e::testkit::stderr_tail;

/// Bound of one wait.
const T: Duration = Duration::from_secs(10);
/// Sessions in a row: enough that a stall of any one would show.
const SESSIONS: usize = 20;

#[test]
fn sessions_that_write_at_once_carry_every_byte_both_ways() {
    let backend = PlainBackend::start("plain-0");
    let config = ConfigBuilder::new()
        .global("backend_delayed_ack = true")
        .listener("main", &[])
        .frontend("plain", "main", None, &[])
        .backend("plain", "plain-0", backend.addr())
        .build();
    let proxy = ProxyProcess::start(&config).expect("proxy ready");
    for i in 0..SESSIONS {
        let mut stream = client::connect(proxy.listener(), T).expect("connect");
        stream.write_all(b"hello\n").expect("write");
        let line = read_line(&mut stream).expect("the backend's answer");
        assert_eq!(
            line,
            "backend=plain-0",
            "session {i}: {}",
            stderr_tail(&proxy)
        );
        // The backend socket's second write (after the TCP_NODELAY).
        stream.write_all(b"more").expect("write");
        stream.shutdown(Shutdown::Write).expect("shutdown");
        let (rest, closed) = read_to_close(&mut stream, T);
        assert_eq!(rest, b"morebye\n", "session {i}");
        assert!(closed, "session {i}");
    }
    // Health checks may connect too, and send nothing.
    let received = backend.connections();
    let sessions: Vec<&Vec<u8>> = received.iter().filter(|c| !c.is_empty()).collect();
    assert_eq!(sessions.len(), SESSIONS, "{received:?}");
    assert!(
        sessions.iter().all(|c| c.as_slice() == b"hello\nmore"),
        "{received:?}"
    );
}

#[test]
fn a_server_first_backend_still_greets_a_silent_client() {
    let greeter = PlainBackend::start_speaking_first("smtp-0");
    let config = ConfigBuilder::new()
        .global("backend_delayed_ack = true")
        .listener(
            "smtp",
            &[
                "server_first_timeout = 200",
                "default_cluster = \"greeter\"",
            ],
        )
        .frontend("alpha", "smtp", Some("a.example.com"), &[])
        .backend("greeter", "smtp-0", greeter.addr())
        .build();
    let proxy = ProxyProcess::start(&config).expect("proxy ready");
    let mut stream = client::connect(proxy.addr("smtp"), T).expect("connect");
    let line = read_line(&mut stream).expect("greeting");
    assert_eq!(line, "backend=smtp-0", "{}", stderr_tail(&proxy));
    stream.shutdown(Shutdown::Write).expect("shutdown");
    let (rest, closed) = read_to_close(&mut stream, T);
    assert_eq!(rest, b"bye\n");
    assert!(closed);
}
