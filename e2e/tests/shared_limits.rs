//! Acceptance of issue 13's shared admission, through the real process
//! with `worker_count = 4`: a cluster's `max_connections_per_ip`, a
//! backend's `max_connections` and the global `max_connections` each admit
//! exactly their limit of twenty concurrent connections from one address,
//! whichever workers the kernel hands them to; and `max_buffers` is one
//! pool for the process: a worker whose own share would be out still takes
//! a connection while the process has buffers.
//!
//! Build the binary first: `cargo build -p proxy-shell`. Loopback only;
//! every wait is bounded; every backend and proxy stops on Drop.

use std::collections::BTreeMap;
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use e2e::backend::PlainBackend;
use e2e::proxy::{ConfigBuilder, ProxyProcess};
use e2e::testkit::{capture, eventually, start, stderr_tail};

const T: Duration = Duration::from_secs(5);
/// Concurrent connections per test, all from 127.0.0.1.
const CLIENTS: usize = 20;
/// The limit each test sets.
const LIMIT: usize = 2;

/// A proxy with four workers, routing `a.example.com` to one plain
/// backend; `global` and `cluster` are raw lines, `backend` raw backend
/// fields.
fn proxy(
    global: &str,
    cluster: &str,
    backend_fields: &str,
    backend: &PlainBackend,
) -> ProxyProcess {
    let mut config = ConfigBuilder::new()
        .global("worker_count = 4")
        .listener("main", &["sni_preread_timeout = 10000"])
        .frontend("alpha", "main", Some("a.example.com"), &[])
        .backend_with("alpha", "alpha-0", backend.addr(), backend_fields);
    if !global.is_empty() {
        config = config.global(global);
    }
    if !cluster.is_empty() {
        config = config.cluster("alpha", &[cluster]);
    }
    start(&config.build())
}

/// Opens a connection that sends `bytes` and stays open.
fn open(addr: SocketAddr, bytes: &[u8]) -> TcpStream {
    let mut stream =
        TcpStream::connect_timeout(&addr, T).unwrap_or_else(|e| panic!("connect: {e}"));
    stream
        .write_all(bytes)
        .unwrap_or_else(|e| panic!("write {} bytes: {e}", bytes.len()));
    stream
}

/// Opens [`CLIENTS`] connections that each send a ClientHello and stay
/// open, waits until `refusals` counts all the ones past [`LIMIT`], and
/// checks that exactly [`LIMIT`] reached the backend and that more than one
/// worker took part.
fn twenty_admit_exactly_two(proxy: &ProxyProcess, backend: &PlainBackend, refusals: &str) {
    let hello = capture("curl_h2.bin");
    let clients: Vec<TcpStream> = (0..CLIENTS)
        .map(|_| open(proxy.addr("main"), &hello))
        .collect();
    let refused = (CLIENTS - LIMIT) as i64;
    proxy
        .wait_metric(refusals, |v| v == refused, T)
        .unwrap_or_else(|e| panic!("{e}\nstderr:\n{}", stderr_tail(proxy)));
    assert!(
        eventually(T, || backend.accepted() == LIMIT),
        "{} connections reached the backend",
        backend.accepted()
    );
    // Settle: nothing more arrives late.
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(
        backend.accepted(),
        LIMIT,
        "exactly the limit reached the backend"
    );
    assert_eq!(proxy.metric(refusals), refused, "and no more were refused");
    let accepted = proxy
        .per_worker("tcp.accepted")
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(accepted.len(), 4, "{accepted:?}");
    assert!(
        accepted.iter().filter(|&&n| n > 0).count() >= 2,
        "the kernel spread the connections over the workers: {accepted:?}"
    );
    eprintln!("accepted per worker (the readiness probe included): {accepted:?}");
    drop(clients);
    proxy
        .wait_metric("tcp.active", |v| v == 0, T)
        .unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn per_ip_limit_admits_exactly_its_limit_over_four_workers() {
    let backend = PlainBackend::start("alpha-0");
    let proxy = proxy("", "max_connections_per_ip = 2", "", &backend);
    twenty_admit_exactly_two(&proxy, &backend, "tcp.refused.per_ip_limit");
    let per_ip = |lines: &[BTreeMap<String, String>]| {
        (lines.iter())
            .filter(|l| l.get("outcome").map(String::as_str) == Some("refused:per_ip_limit"))
            .count()
    };
    let refused = proxy
        .wait_access_logs(T, |lines| per_ip(lines) >= CLIENTS - LIMIT)
        .map_or(0, |lines| per_ip(&lines));
    assert_eq!(refused, CLIENTS - LIMIT, "each refusal is logged");
    // The counts came back: two more are admitted.
    let hello = capture("curl_h2.bin");
    let again: Vec<TcpStream> = (0..LIMIT)
        .map(|_| open(proxy.addr("main"), &hello))
        .collect();
    assert!(eventually(T, || backend.accepted() == 2 * LIMIT));
    drop(again);
}

#[test]
fn a_backend_max_connections_admits_exactly_its_limit_over_four_workers() {
    let backend = PlainBackend::start("alpha-0");
    let proxy = proxy("", "", "max_connections = 2", &backend);
    twenty_admit_exactly_two(&proxy, &backend, "tcp.refused.backend_full");
    assert_eq!(
        proxy.metric("backend.connect.errors"),
        0,
        "a full backend is not a failed one"
    );
}

#[test]
fn the_global_max_connections_admits_exactly_its_limit_over_four_workers() {
    let backend = PlainBackend::start("alpha-0");
    let proxy = proxy("max_connections = 2", "", "", &backend);
    twenty_admit_exactly_two(&proxy, &backend, "tcp.refused.max_connections");
}

#[test]
fn one_buffer_pool_for_the_process_whatever_worker_takes_the_connection() {
    // Split evenly, 8 buffers would be 2 per worker, and 8 connections fit
    // only if the kernel spread them exactly 2 by 2 (4% of the time).
    const BUFFERS: usize = 8;
    let backend = PlainBackend::start("alpha-0");
    let proxy = proxy(&format!("max_buffers = {BUFFERS}"), "", "", &backend);
    // One byte of a ClientHello: each session holds one buffer while it
    // waits for the rest.
    let held: Vec<TcpStream> = (0..BUFFERS)
        .map(|_| open(proxy.addr("main"), &[0x16]))
        .collect();
    proxy
        .wait_metric("buffers.in_use", |v| v == BUFFERS as i64, T)
        .unwrap_or_else(|e| panic!("{e}\nstderr:\n{}", stderr_tail(&proxy)));
    let per_worker = proxy
        .per_worker("buffers.in_use")
        .unwrap_or_else(|e| panic!("{e}"));
    eprintln!("buffers per worker: {per_worker:?}");
    assert_eq!(
        proxy.metric("tcp.refused.pool_exhausted"),
        0,
        "{per_worker:?}"
    );
    let past = open(proxy.addr("main"), &[0x16]);
    proxy
        .wait_metric("tcp.refused.pool_exhausted", |v| v == 1, T)
        .unwrap_or_else(|e| panic!("{e}"));
    drop((held, past));
    proxy
        .wait_metric("buffers.in_use", |v| v == 0, T)
        .unwrap_or_else(|e| panic!("{e}"));
}
