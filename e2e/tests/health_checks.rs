//! Acceptance of issue 13's backend health, one state per backend for the
//! whole process: active checks with no client traffic (a killed backend
//! is down in `backend list` within interval × fall, and the first client
//! connections afterwards go straight to the other backend on every
//! worker, `backend.connect.errors` unmoved; restarted, it is up within
//! interval × rise), a TLS check up against `openssl s_server` and down
//! against a plain echo, passive health taking down a backend that closes
//! before its first byte, backups while every primary is down, and an
//! immediate `backend_unavailable` when nothing is up.
//!
//! Build the binary first: `cargo build -p proxy-shell`. `openssl` must be
//! on `PATH` (installed with `apt-get` when missing, never skipped).
//! Loopback only; every wait is bounded; every process started here is
//! stopped by its PID on Drop.

use std::io::Write;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use command::proto::BackendStatus;
use e2e::backend::PlainBackend;
use e2e::certs::TestCa;
use e2e::client::{self, raw_exchange};
use e2e::openssl::OpensslServer;
use e2e::proxy::{ConfigBuilder, ProxyProcess};
use e2e::testkit::{capture, start, stderr_tail};
use e2e::tools::require_tool;

const T: Duration = Duration::from_secs(5);
/// The check interval of these tests, and its rise and fall.
const INTERVAL: Duration = Duration::from_millis(200);
const RISE: u32 = 2;
const FALL: u32 = 2;
/// What a state change may take past interval × rise (or fall): the
/// check's own time, the checker's wake-up, the polling of `backend list`,
/// a loaded machine.
const SLACK: Duration = Duration::from_millis(500);

fn health_check(kind: &str) -> String {
    format!(
        "health_check = {{ kind = \"{kind}\", interval = \"{}ms\", timeout = \"100ms\", rise = \
         {RISE}, fall = {FALL} }}",
        INTERVAL.as_millis()
    )
}

fn up(statuses: &[BackendStatus]) -> bool {
    !statuses.is_empty() && statuses.iter().all(|s| s.up)
}

fn down(statuses: &[BackendStatus]) -> bool {
    !statuses.is_empty() && statuses.iter().all(|s| !s.up)
}

/// How long backend `id` took to satisfy `accept`, checked against `bound`.
fn within(
    proxy: &ProxyProcess,
    id: &str,
    accept: impl Fn(&[BackendStatus]) -> bool,
    bound: Duration,
) -> (Duration, Vec<BackendStatus>) {
    let started = Instant::now();
    let statuses = proxy
        .wait_backend(id, accept, bound + SLACK + T)
        .unwrap_or_else(|e| panic!("{e}\nstderr:\n{}", stderr_tail(proxy)));
    let took = started.elapsed();
    assert!(
        took <= bound + SLACK,
        "backend {id} took {took:?}, more than {bound:?} (+ {SLACK:?})"
    );
    (took, statuses)
}

/// The plain backend's answer line to one ClientHello of `a.example.com`,
/// as soon as it comes; empty when the connection closed without one.
fn answered_by(addr: SocketAddr) -> String {
    let mut stream = client::connect(addr, T).unwrap_or_else(|e| panic!("{e}"));
    stream
        .write_all(&capture("curl_h2.bin"))
        .unwrap_or_else(|e| panic!("write: {e}"));
    let _ = stream.set_read_timeout(Some(T));
    client::read_line(&mut stream).unwrap_or_default()
}

/// The connections `backend` got a byte on: clients', not checks'.
fn served(backend: &PlainBackend) -> usize {
    backend
        .connections()
        .iter()
        .filter(|c| !c.is_empty())
        .count()
}

#[test]
fn a_killed_backend_is_down_for_every_worker_without_traffic_and_comes_back() {
    let a = PlainBackend::start("alpha-a");
    let b = PlainBackend::start("alpha-b");
    let a_addr = a.addr();
    let config = ConfigBuilder::new()
        .global("worker_count = 4")
        .listener("main", &[])
        .cluster("alpha", &[&health_check("tcp")])
        .frontend("alpha", "main", Some("a.example.com"), &[])
        .backend("alpha", "alpha-a", a_addr)
        .backend("alpha", "alpha-b", b.addr())
        .build();
    let proxy = start(&config);
    proxy
        .wait_backend("alpha-a", up, T)
        .unwrap_or_else(|e| panic!("{e}"));

    drop(a);
    let fall = INTERVAL * FALL;
    let (took, statuses) = within(&proxy, "alpha-a", down, fall);
    eprintln!("down {took:?} after the kill (interval × fall = {fall:?})");
    assert!(
        statuses[0].last_error.contains("check: connect to"),
        "{statuses:?}"
    );
    assert!(
        proxy
            .wait_stderr("backend alpha-a of alpha is down", T)
            .is_ok_and(|line| line.contains("health checks")),
        "the change is logged"
    );
    assert_eq!(proxy.metric("backend.down"), 1, "and counted once");

    // Client connections until every worker has taken some (bounded): all
    // go to alpha-b, and no connect to alpha-a is even tried.
    let mut sent = 0;
    while sent < 200 {
        for _ in 0..10 {
            assert_eq!(answered_by(proxy.addr("main")), "backend=alpha-b");
            sent += 1;
        }
        let per_worker = proxy
            .per_worker("tcp.sni_preread.routed")
            .unwrap_or_else(|e| panic!("{e}"));
        if per_worker.iter().all(|&n| n > 0) {
            eprintln!("routed per worker after {sent} connections: {per_worker:?}");
            break;
        }
    }
    assert!(
        proxy
            .per_worker("tcp.sni_preread.routed")
            .is_ok_and(|w| w.len() == 4 && w.iter().all(|&n| n > 0)),
        "every worker routed"
    );
    assert_eq!(proxy.metric("backend.connect.errors"), 0);
    assert_eq!(served(&b), sent);

    let a = PlainBackend::start_on(a_addr, "alpha-a", false)
        .unwrap_or_else(|e| panic!("restart alpha-a on {a_addr}: {e}"));
    let rise = INTERVAL * RISE;
    let (took, _) = within(&proxy, "alpha-a", up, rise);
    eprintln!("up {took:?} after the restart (interval × rise = {rise:?})");
    assert_eq!(proxy.metric("backend.recovered"), 1);
    assert_eq!(proxy.metric("backend.alpha-a.up"), 1);
    let answers: Vec<String> = (0..4).map(|_| answered_by(proxy.addr("main"))).collect();
    assert!(
        answers.iter().any(|a| a == "backend=alpha-a"),
        "{answers:?}"
    );
    drop(a);
}

#[test]
fn a_tls_check_passes_on_a_tls_server_and_fails_on_a_plain_echo() {
    let openssl = require_tool("openssl", "openssl");
    let leaf = TestCa::shared().server_cert(&["tls.example.com"]);
    let files = [
        ("server.crt", leaf.cert_pem.as_str()),
        ("server.key", leaf.key_pem.as_str()),
    ];
    let server = OpensslServer::start(
        &openssl,
        &files,
        &["-cert", "server.crt", "-key", "server.key"],
    );
    let echo = PlainBackend::start_echo("echo");
    let config = ConfigBuilder::new()
        .listener("main", &[])
        .cluster("tls", &[&health_check("tls")])
        .frontend("tls", "main", Some("tls.example.com"), &[])
        .backend("tls", "tls-server", server.addr())
        .cluster("plain", &[&health_check("tls")])
        .frontend("plain", "main", Some("plain.example.com"), &[])
        .backend("plain", "plain-echo", echo.addr())
        .build();
    let proxy = start(&config);
    let (_, statuses) = within(&proxy, "plain-echo", down, INTERVAL * FALL);
    assert!(
        statuses[0].last_error.contains("no TLS server sends"),
        "{statuses:?}"
    );
    assert!(echo.accepted() >= FALL as usize, "the echo was checked");
    // Several intervals later the TLS server is still up, and was checked.
    std::thread::sleep(INTERVAL * 3);
    let statuses = proxy
        .wait_backend("tls-server", up, T)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(statuses[0].last_error, "", "no check failed: {statuses:?}");
    assert_eq!(proxy.metric("backend.down"), 1, "the echo only");
}

#[test]
fn a_backend_that_closes_before_its_first_byte_is_taken_down_passively() {
    let slam = PlainBackend::start_closing("slam");
    let good = PlainBackend::start("good");
    let config = ConfigBuilder::new()
        .listener("main", &[])
        .frontend("alpha", "main", Some("a.example.com"), &[])
        .backend("alpha", "slam", slam.addr())
        .backend("alpha", "good", good.addr())
        .build();
    let proxy = start(&config);
    // Round robin alternates until the third close takes `slam` down.
    for _ in 0..6 {
        let _ = answered_by(proxy.addr("main"));
    }
    let statuses = proxy
        .wait_backend("slam", down, T)
        .unwrap_or_else(|e| panic!("{e}\nstderr:\n{}", stderr_tail(&proxy)));
    // A close, or a reset when the replayed hello met the closed socket.
    let error = &statuses[0].last_error;
    assert!(
        error.ends_with("the connection before sending a byte"),
        "{statuses:?}"
    );
    assert_eq!(slam.accepted(), 3);
    let answers: Vec<String> = (0..6).map(|_| answered_by(proxy.addr("main"))).collect();
    assert!(answers.iter().all(|a| a == "backend=good"), "{answers:?}");
    assert_eq!(proxy.metric("backend.down"), 1);
    assert_eq!(
        proxy.metric("backend.connect.errors"),
        0,
        "every connect succeeded"
    );
}

#[test]
fn backups_serve_while_every_primary_is_down_and_nothing_up_is_refused_at_once() {
    let primary = PlainBackend::start("primary");
    let backup = PlainBackend::start("backup");
    let config = ConfigBuilder::new()
        .listener("main", &["connect_timeout = 10"])
        .cluster("alpha", &[&health_check("tcp")])
        .frontend("alpha", "main", Some("a.example.com"), &[])
        .backend("alpha", "primary", primary.addr())
        .backend_with("alpha", "backup", backup.addr(), "backup = true")
        .build();
    let proxy = start(&config);
    assert_eq!(answered_by(proxy.addr("main")), "backend=primary");
    drop(primary);
    within(&proxy, "primary", down, INTERVAL * FALL);
    assert_eq!(answered_by(proxy.addr("main")), "backend=backup");
    drop(backup);
    within(&proxy, "backup", down, INTERVAL * FALL);
    let errors = proxy.metric("backend.connect.errors");
    let started = Instant::now();
    let (got, closed) = raw_exchange(proxy.addr("main"), &capture("curl_h2.bin"), T)
        .unwrap_or_else(|e| panic!("{e}"));
    let took = started.elapsed();
    assert!(got.is_empty() && closed, "refused without a byte");
    assert!(
        took < Duration::from_secs(1),
        "at once, not after a connect timeout: {took:?}"
    );
    proxy
        .wait_metric("tcp.refused.backend_unavailable", |v| v == 1, T)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        proxy.metric("backend.connect.errors"),
        errors,
        "no connect was tried"
    );
}
