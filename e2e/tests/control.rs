//! End-to-end tests of the real `preread` process: every reject path seen
//! from the socket, non-TLS and server-first fallbacks, dead backends,
//! runtime control over the command socket and the CLI, restart from the
//! saved state, every socket subcommand, and gauge/duration accounting.
//!
//! Build the binary first: `cargo build -p proxy-shell`. Loopback only;
//! every wait is bounded (polls, never sleeps standing in for readiness).

use std::collections::BTreeMap;
use std::io::Write;
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use command::proto;
use command::proto::request::RequestType;
use command::state_file::{load_state, seal};
use e2e::backend::{BackendConfig, PlainBackend, TlsBackend};
use e2e::client::{
    self, half_close, raw_exchange, read_line, read_tls_to_close, tls_client, tls_request,
};
use e2e::proxy::{ConfigBuilder, ProxyProcess, free_addr, run_preread};
use e2e::testkit::{TempDir, capture, eventually, get, metrics, rejected_sum, start, tail};

/// The general bound of a wait.
const T: Duration = Duration::from_secs(5);
const POLL: Duration = Duration::from_millis(20);

const HTTP_GET: &[u8] = b"GET / HTTP/1.1\r\nHost: a.example.com\r\n\r\n";

/// Polls the metrics until `accept` says yes; panics with the last
/// snapshot and the stderr tail otherwise.
fn wait_metrics(
    proxy: &ProxyProcess,
    what: &str,
    accept: impl Fn(&BTreeMap<String, i64>) -> bool,
) -> BTreeMap<String, i64> {
    let deadline = Instant::now() + T;
    loop {
        let m = metrics(proxy);
        if accept(&m) {
            return m;
        }
        if Instant::now() >= deadline {
            panic!(
                "{what}: not reached within {T:?}; metrics: {m:?}\nstderr tail:\n{}",
                tail(&proxy.stderr_text(), 30)
            );
        }
        std::thread::sleep(POLL);
    }
}

/// Waits until every session the proxy accepted so far has left preread
/// and closed (the harness's readiness probes included): no active session.
fn settle(proxy: &ProxyProcess, min_accepted: i64) -> BTreeMap<String, i64> {
    wait_metrics(proxy, "settle", |m| {
        get(m, "tcp.accepted") >= min_accepted
            && get(m, "tcp.active") == 0
            && get(m, "tcp.sni_preread.active") == 0
    })
}

/// Access-log lines whose outcome is `outcome`.
fn logs_with(proxy: &ProxyProcess, outcome: &str) -> Vec<BTreeMap<String, String>> {
    proxy
        .access_logs()
        .into_iter()
        .filter(|l| l.get("outcome").map(String::as_str) == Some(outcome))
        .collect()
}

/// Waits for `count` access-log lines with `outcome`; returns them.
fn wait_logs(proxy: &ProxyProcess, outcome: &str, count: usize) -> Vec<BTreeMap<String, String>> {
    let found = eventually(T, || logs_with(proxy, outcome).len() >= count);
    assert!(
        found,
        "expected {count} access-log line(s) with outcome={outcome}; stderr:\n{}",
        tail(&proxy.stderr_text(), 40)
    );
    logs_with(proxy, outcome)
}

/// Checks one reject: the proxy sends nothing but the fatal alert of the
/// reason (description `alert`, as a TLS 1.0 record: `15 03 01 00 02 02
/// <code>`; none for a peer that does not speak TLS or has gone) and
/// closes, `tcp.sni_preread.rejected.<reason>` goes up by one, and the
/// access log gets a line `outcome=rejected:<reason>` for this listener.
fn check_reject(
    proxy: &ProxyProcess,
    addr: SocketAddr,
    reason: &str,
    alert: Option<u8>,
    received_closed: (Vec<u8>, bool),
) {
    let (received, closed) = received_closed;
    assert!(
        closed,
        "{reason}: the proxy did not close the connection within {T:?} (got {} bytes)",
        received.len()
    );
    let expected = alert.map_or_else(Vec::new, |code| {
        vec![0x15, 0x03, 0x01, 0x00, 0x02, 0x02, code]
    });
    assert_eq!(
        received, expected,
        "{reason}: the proxy answered {received:?} before closing"
    );
    let name = format!("tcp.sni_preread.rejected.{reason}");
    proxy
        .wait_metric(&name, |v| v == 1, T)
        .unwrap_or_else(|e| panic!("{reason}: {e}\nstderr:\n{}", tail(&proxy.stderr_text(), 30)));
    let outcome = format!("rejected:{reason}");
    let logs = wait_logs(proxy, &outcome, 1);
    assert_eq!(logs.len(), 1, "{reason}: {logs:?}");
    assert_eq!(logs[0]["listener"], addr.to_string(), "{reason}: {logs:?}");
    assert_eq!(logs[0]["backend"], "-", "{reason}: {logs:?}");
    // A refused name is logged, so an operator sees which host was missing.
    let named = match reason {
        "sni_unmatched" => Some("www.b.example.com"),
        "alpn_unmatched" => Some("a.example.com"),
        _ => None,
    };
    if let Some(sni) = named {
        assert_eq!(logs[0]["sni"], sni, "{reason}: {logs:?}");
    }
}

/// `preread ARGS` against the proxy: must exit 0; returns stdout.
fn cli_ok(proxy: &ProxyProcess, args: &[&str]) -> String {
    let out = proxy
        .cli(args)
        .unwrap_or_else(|e| panic!("preread {args:?}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "preread {args:?} exited {}: stdout {stdout:?} stderr {:?}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The acknowledgement of a change: `ok` or the proxy's one-line message
/// (such as `applied on 2 worker(s)`).
fn assert_ack(stdout: &str) {
    assert_eq!(stdout.lines().count(), 1, "{stdout:?}");
    assert!(!stdout.trim().is_empty(), "{stdout:?}");
}

/// `preread ARGS` against the proxy: must be refused (exit 1) with `code`
/// on stderr and nothing on stdout; returns stderr.
fn cli_refused(proxy: &ProxyProcess, args: &[&str], code: &str) -> String {
    let out = proxy
        .cli(args)
        .unwrap_or_else(|e| panic!("preread {args:?}: {e}"));
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(
        out.status.code(),
        Some(1),
        "preread {args:?}: exit {} (stderr {stderr:?})",
        out.status
    );
    assert!(stderr.contains(code), "preread {args:?}: stderr {stderr:?}");
    assert!(
        out.stdout.is_empty(),
        "preread {args:?}: stdout {:?}",
        out.stdout
    );
    stderr
}

fn cluster(id: &str) -> RequestType {
    RequestType::AddCluster(proto::Cluster {
        cluster_id: id.to_owned(),
        ..Default::default()
    })
}

fn backend(cluster: &str, id: &str, addr: SocketAddr) -> proto::Backend {
    proto::Backend {
        cluster_id: cluster.to_owned(),
        backend_id: id.to_owned(),
        address: addr.to_string(),
        weight: None,
        backup: false,
        max_connections: None,
    }
}

fn frontend(cluster: &str, addr: SocketAddr, sni: &str) -> proto::TcpFrontend {
    proto::TcpFrontend {
        cluster_id: cluster.to_owned(),
        address: addr.to_string(),
        sni: Some(sni.to_owned()),
        alpn: Vec::new(),
        tags: BTreeMap::new(),
        protocol: None,
    }
}

fn routed_to(addr: SocketAddr, sni: &str, expected: &str) {
    let outcome =
        tls_request(addr, sni, &[], None).unwrap_or_else(|e| panic!("{sni} through {addr}: {e}"));
    assert_eq!(outcome.backend(), Some(expected), "{outcome:?}");
    assert_eq!(outcome.tail, b"bye\n", "{outcome:?}");
}

/// Whether a TCP connect to `addr` succeeds within a short bound.
fn accepts(addr: SocketAddr) -> bool {
    TcpStream::connect_timeout(&addr, Duration::from_millis(300)).is_ok()
}

// ---------------------------------------------------------------------------
// 1. Reject paths
// ---------------------------------------------------------------------------

#[test]
fn every_reject_reason_is_seen_from_the_socket() {
    let config = ConfigBuilder::new()
        .listener("main", &[])
        .listener("slow", &["sni_preread_timeout = 300"])
        .listener("small", &["sni_preread_max_bytes = 100"])
        .listener("pp", &["expect_proxy = true"])
        // a.example.com takes only h3: curl_h2.bin (h2, http/1.1) is
        // alpn_unmatched; www.b.example.com (curl_http11.bin) is unmatched.
        .frontend("alpha", "main", Some("a.example.com"), &["h3"])
        .frontend("alpha", "slow", Some("a.example.com"), &[])
        .frontend("alpha", "small", Some("a.example.com"), &[])
        .frontend("alpha", "pp", Some("a.example.com"), &[])
        .build();
    let proxy = start(&config);
    let main = proxy.addr("main");
    let base = settle(&proxy, 4);
    assert_eq!(rejected_sum(&base), 0, "{base:?}");

    // A bare connect-and-close is a health check: silent.
    for _ in 0..3 {
        drop(TcpStream::connect_timeout(&main, T).expect("connect"));
    }
    let m = settle(&proxy, get(&base, "tcp.accepted") + 3);
    assert_eq!(
        rejected_sum(&m),
        0,
        "bare connects counted as rejects: {m:?}"
    );
    assert!(
        proxy.access_logs().is_empty(),
        "bare connects wrote access-log lines: {:?}",
        proxy.access_logs()
    );

    // With the alert a TLS server would send: decode_error (50) for an
    // empty record, unexpected_message (10) for a first message that is no
    // ClientHello, missing_extension (109) for a TLS 1.3 hello without a
    // name, unrecognized_name (112), no_application_protocol (120), and
    // record_overflow (22) for a 512-byte record cut at a 100-byte cap.
    let cases: [(&str, SocketAddr, Vec<u8>, Option<u8>); 9] = [
        ("not_tls", main, HTTP_GET.to_vec(), None),
        (
            "malformed_record",
            main,
            vec![0x16, 0x03, 0x01, 0x00, 0x00],
            Some(50),
        ),
        (
            "malformed_handshake",
            main,
            capture("gen_handshake_type_2.bin"),
            Some(10),
        ),
        (
            "no_sni",
            main,
            capture("openssl_noservername.bin"),
            Some(109),
        ),
        (
            "ech_outer_absent",
            main,
            capture("chromium_ip_literal.bin"),
            Some(109),
        ),
        ("sni_unmatched", main, capture("curl_http11.bin"), Some(112)),
        ("alpn_unmatched", main, capture("curl_h2.bin"), Some(120)),
        (
            "too_large",
            proxy.addr("small"),
            capture("curl_h2.bin"),
            Some(22),
        ),
        (
            "proxy_header_invalid",
            proxy.addr("pp"),
            capture("gen_n_proxy_v1_bad_protocol.bin"),
            None,
        ),
    ];
    for (reason, addr, bytes, alert) in &cases {
        let exchange = raw_exchange(*addr, bytes, T).expect("connect");
        check_reject(&proxy, *addr, reason, *alert, exchange);
    }

    // fragmented: a partial hello, then nothing; closed at the 300 ms
    // deadline, not before.
    let slow = proxy.addr("slow");
    let started = Instant::now();
    let exchange =
        raw_exchange(slow, &capture("gen_truncated_200_of_517.bin"), T).expect("connect");
    let elapsed = started.elapsed();
    check_reject(&proxy, slow, "fragmented", None, exchange);
    assert!(
        elapsed >= Duration::from_millis(250),
        "fragmented decided after {elapsed:?}, before the 300 ms deadline"
    );

    // front_closed: three bytes of a record header, then the client's FIN.
    let mut stream = client::connect(main, T).expect("connect");
    stream.write_all(&[0x16, 0x03, 0x01]).expect("write");
    stream.shutdown(Shutdown::Write).expect("shutdown");
    let exchange = client::read_to_close(&mut stream, T);
    check_reject(&proxy, main, "front_closed", None, exchange);

    // Each reason exactly once, nothing else; every session closed.
    let m = settle(&proxy, 0);
    let rejected: BTreeMap<&str, i64> = m
        .iter()
        .filter_map(|(k, v)| k.strip_prefix("tcp.sni_preread.rejected.").map(|k| (k, *v)))
        .filter(|(_, v)| *v != 0)
        .collect();
    let expected: BTreeMap<&str, i64> = [
        "not_tls",
        "malformed_record",
        "malformed_handshake",
        "fragmented",
        "too_large",
        "no_sni",
        "ech_outer_absent",
        "sni_unmatched",
        "alpn_unmatched",
        "proxy_header_invalid",
        "front_closed",
    ]
    .into_iter()
    .map(|r| (r, 1))
    .collect();
    assert_eq!(rejected, expected);
    let logs = proxy
        .wait_access_logs(T, |lines| lines.len() >= 11)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(logs.len(), 11, "{logs:?}");
    assert_eq!(get(&m, "tcp.sni_preread.routed"), 0);
}

// ---------------------------------------------------------------------------
// 2. Non-TLS at once; fallbacks
// ---------------------------------------------------------------------------

/// "At once" for a listener whose preread timeout is 30 s: a third of it.
const DECIDED_WITHIN: Duration = Duration::from_secs(10);

#[test]
fn non_tls_is_decided_at_once_and_server_first_falls_back() {
    let fallback = PlainBackend::start("fallback-0");
    let greeter = PlainBackend::start_speaking_first("smtp-0");
    let config = ConfigBuilder::new()
        .listener("strict", &["sni_preread_timeout = 30000"])
        .listener(
            "fb",
            &[
                "sni_preread_timeout = 30000",
                "default_cluster = \"fallback\"",
            ],
        )
        .listener(
            "smtp",
            &[
                "server_first_timeout = 200",
                "default_cluster = \"greeter\"",
            ],
        )
        .frontend("alpha", "strict", Some("a.example.com"), &[])
        .frontend("alpha", "fb", Some("a.example.com"), &[])
        .frontend("alpha", "smtp", Some("a.example.com"), &[])
        .backend("fallback", "fallback-0", fallback.addr())
        .backend("greeter", "smtp-0", greeter.addr())
        .build();
    let proxy = start(&config);
    settle(&proxy, 3);

    // No default cluster: closed at once, far inside the 30 s timeout. The
    // bound is a third of the timeout, so that a loaded machine's delay
    // cannot pass for it, nor waiting out the timeout for "at once".
    let strict = proxy.addr("strict");
    let started = Instant::now();
    let (received, closed) = raw_exchange(strict, HTTP_GET, DECIDED_WITHIN).expect("connect");
    let elapsed = started.elapsed();
    assert!(
        closed,
        "not_tls not closed within {DECIDED_WITHIN:?} ({elapsed:?})"
    );
    assert!(received.is_empty(), "{received:?}");
    assert!(elapsed < DECIDED_WITHIN, "{elapsed:?}");
    proxy
        .wait_metric("tcp.sni_preread.rejected.not_tls", |v| v == 1, T)
        .expect("not_tls counted");

    // With a default cluster: the fallback answers at once, inside the same
    // bound.
    let fb = proxy.addr("fb");
    let started = Instant::now();
    let mut stream = client::connect(fb, DECIDED_WITHIN).expect("connect");
    stream.write_all(HTTP_GET).expect("write");
    let line = read_line(&mut stream).expect("the fallback backend's answer");
    let elapsed = started.elapsed();
    assert_eq!(line, "backend=fallback-0");
    assert!(elapsed < DECIDED_WITHIN, "{elapsed:?}");
    proxy
        .wait_metric("tcp.sni_preread.fallback.not_tls", |v| v == 1, T)
        .expect("fallback.not_tls counted");
    // The backend got the request unchanged; echo goes on through the pipe.
    assert!(eventually(T, || fallback
        .connections()
        .first()
        .map(Vec::as_slice)
        == Some(HTTP_GET)));
    stream.write_all(b"more").expect("write");
    stream.shutdown(Shutdown::Write).expect("shutdown");
    let (rest, closed) = client::read_to_close(&mut stream, T);
    assert_eq!(rest, b"morebye\n");
    assert!(closed);
    let logs = wait_logs(&proxy, "fallback:not_tls", 1);
    assert_eq!(logs[0]["cluster"], "fallback", "{logs:?}");
    assert_eq!(logs[0]["backend"], "fallback-0", "{logs:?}");

    // Server first: a silent client gets the greeter's greeting.
    let smtp = proxy.addr("smtp");
    let started = Instant::now();
    let mut stream = client::connect(smtp, T).expect("connect");
    let line = read_line(&mut stream).expect("greeting");
    let elapsed = started.elapsed();
    assert_eq!(line, "backend=smtp-0");
    assert!(
        elapsed >= Duration::from_millis(150),
        "greeted after {elapsed:?}, before server_first_timeout"
    );
    proxy
        .wait_metric("tcp.sni_preread.fallback.server_first", |v| v == 1, T)
        .expect("fallback.server_first counted");
    stream.shutdown(Shutdown::Write).expect("shutdown");
    let (rest, closed) = client::read_to_close(&mut stream, T);
    assert_eq!(rest, b"bye\n");
    assert!(closed);
    wait_logs(&proxy, "fallback:server_first", 1);
    let m = settle(&proxy, 0);
    assert_eq!(rejected_sum(&m), 1, "{m:?}");
}

#[test]
fn server_first_and_health_checks_behind_a_proxy_header() {
    let greeter = PlainBackend::start_speaking_first("smtp-0");
    let config = ConfigBuilder::new()
        .listener(
            "smtp",
            &[
                "expect_proxy = true",
                "server_first_timeout = 200",
                "default_cluster = \"greeter\"",
            ],
        )
        .frontend("alpha", "smtp", Some("a.example.com"), &[])
        .backend("greeter", "smtp-0", greeter.addr())
        .build();
    let proxy = start(&config);
    settle(&proxy, 1);
    let smtp = proxy.addr("smtp");
    let source: SocketAddr = "192.0.2.10:51234".parse().expect("addr");
    let destination: SocketAddr = "198.51.100.20:25".parse().expect("addr");

    // The load balancer's header, then a silent client: the header is not
    // the client speaking, so the server-first timer still fires, and the
    // greeter gets the client's bytes without the header.
    for (what, header, pause) in [
        ("v1 at once", client::proxy_v1(source, destination), None),
        ("v2 at once", client::proxy_v2(source, destination), None),
        (
            "v2 after the timer",
            client::proxy_v2(source, destination),
            Some(Duration::from_millis(400)),
        ),
    ] {
        let before = greeter.accepted();
        let started = Instant::now();
        let mut stream = client::connect(smtp, T).expect("connect");
        if let Some(pause) = pause {
            std::thread::sleep(pause);
        }
        stream.write_all(&header).expect("write header");
        let line = read_line(&mut stream).unwrap_or_else(|e| {
            panic!(
                "{what}: no greeting ({e}); stderr:\n{}",
                tail(&proxy.stderr_text(), 30)
            )
        });
        assert_eq!(line, "backend=smtp-0", "{what}");
        assert!(
            started.elapsed() >= Duration::from_millis(150),
            "{what}: greeted before server_first_timeout"
        );
        stream.write_all(b"EHLO client\r\n").expect("write");
        stream.shutdown(Shutdown::Write).expect("shutdown");
        let (_, closed) = client::read_to_close(&mut stream, T);
        assert!(closed, "{what}");
        assert!(
            eventually(T, || greeter.connections().get(before).map(Vec::as_slice)
                == Some(&b"EHLO client\r\n"[..])),
            "{what}: the greeter got {:?}",
            greeter
                .connections()
                .get(before)
                .map(|c| String::from_utf8_lossy(c).into_owned())
        );
    }
    let logs = wait_logs(&proxy, "fallback:server_first", 3);
    assert!(
        logs.iter()
            .all(|l| l["proxy_client"] == "192.0.2.10:51234" && l["client"] != l["proxy_client"]),
        "the log names the header's client next to the peer: {logs:?}"
    );
    // A reject after a valid header names it too (the route never came).
    let mut bad = client::proxy_v1(source, destination);
    bad.extend_from_slice(&[0x16, 0x03, 0x01, 0x00, 0x00]);
    let (_, closed) = raw_exchange(smtp, &bad, T).expect("connect");
    assert!(closed);
    let logs = wait_logs(&proxy, "rejected:malformed_record", 1);
    assert_eq!(logs[0]["proxy_client"], "192.0.2.10:51234", "{logs:?}");

    // A load balancer's health check: a v2 LOCAL header, then a close. Not
    // a client that went away mid-hello, so no reject and no log line.
    let local = b"\r\n\r\n\x00\r\nQUIT\n\x20\x00\x00\x00";
    for _ in 0..3 {
        let mut stream = client::connect(smtp, T).expect("connect");
        stream.write_all(local).expect("write");
        stream.shutdown(Shutdown::Both).expect("close");
    }
    let m = settle(&proxy, 8);
    assert_eq!(rejected_sum(&m), 1, "only the malformed record: {m:?}");
    assert_eq!(get(&m, "tcp.sni_preread.fallback.server_first"), 3, "{m:?}");
    let logs = proxy
        .wait_access_logs(T, |lines| lines.len() >= 4)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(logs.len(), 4, "{logs:?}");
}

// ---------------------------------------------------------------------------
// 3. A dead backend
// ---------------------------------------------------------------------------

#[test]
fn a_dead_backend_is_skipped_and_marked_down() {
    let live = TlsBackend::start(BackendConfig::new("alpha-live", &["a.example.com"]));
    // Nothing listens there: a port handed out and never bound.
    let dead = free_addr();
    let config = ConfigBuilder::new()
        .listener("main", &[])
        .frontend("alpha", "main", Some("a.example.com"), &[])
        .backend("alpha", "alpha-dead", dead)
        .backend("alpha", "alpha-live", live.addr())
        .build();
    let proxy = start(&config);
    for i in 0..20 {
        let outcome =
            tls_request(proxy.addr("main"), "a.example.com", &[], None).unwrap_or_else(|e| {
                panic!(
                    "connection {i}: {e}\nstderr:\n{}",
                    tail(&proxy.stderr_text(), 30)
                )
            });
        assert_eq!(outcome.backend(), Some("alpha-live"), "connection {i}");
    }
    assert_eq!(live.accepted(), 20);
    let m = settle(&proxy, 21);
    assert!(get(&m, "backend.connect.errors") > 0, "{m:?}");
    assert!(get(&m, "backend.down") >= 1, "{m:?}");
    assert_eq!(get(&m, "tcp.sni_preread.routed"), 20, "{m:?}");
    let line = proxy
        .wait_stderr("backend alpha-dead of alpha is down", T)
        .expect("a down log line");
    assert!(!line.contains("alpha-live"), "{line}");
    let routed = wait_logs(&proxy, "routed", 20);
    assert!(
        routed.iter().all(|l| l["backend"] == "alpha-live"),
        "{routed:?}"
    );
}

// ---------------------------------------------------------------------------
// 4. Runtime control
// ---------------------------------------------------------------------------

#[test]
fn runtime_control_adds_and_removes_routes() {
    let alpha = TlsBackend::start(BackendConfig::new(
        "alpha-0",
        &["a.example.com", "b.example.com"],
    ));
    let proxy = start(&ConfigBuilder::new().listener("main", &[]).build());
    let main = proxy.addr("main");
    let main_s = main.to_string();
    let alpha_s = alpha.addr().to_string();

    // Nothing routes yet.
    assert!(tls_request(main, "a.example.com", &[], None).is_err());
    proxy
        .wait_metric("tcp.sni_preread.rejected.sni_unmatched", |v| v == 1, T)
        .expect("unmatched before any frontend");

    // Socket requests and the CLI.
    proxy.apply(cluster("alpha")).expect("add cluster");
    proxy
        .apply(RequestType::AddBackend(backend(
            "alpha",
            "alpha-0",
            alpha.addr(),
        )))
        .expect("add backend");
    proxy
        .apply(RequestType::AddTcpFrontend(frontend(
            "alpha",
            main,
            "b.example.com",
        )))
        .expect("add frontend b");
    let out = cli_ok(
        &proxy,
        &[
            "frontend",
            "tcp",
            "add",
            "-i",
            "alpha",
            "-a",
            &main_s,
            "--sni",
            "a.example.com",
        ],
    );
    assert_ack(&out);
    routed_to(main, "a.example.com", "alpha-0");
    routed_to(main, "b.example.com", "alpha-0");

    // A long-lived session.
    let mut session = tls_client(main, "a.example.com", &[]).expect("handshake");
    session.write_all(b"first\n").expect("write");
    assert_eq!(
        read_line(&mut session).expect("first line"),
        "backend=alpha-0 alpn=- sni=a.example.com"
    );

    // Remove the frontend (socket) and the backend (CLI).
    proxy
        .apply(RequestType::RemoveTcpFrontend(frontend(
            "alpha",
            main,
            "a.example.com",
        )))
        .expect("remove frontend a");
    cli_ok(
        &proxy,
        &[
            "backend",
            "remove",
            "-i",
            "alpha",
            "--backend-id",
            "alpha-0",
            "-a",
            &alpha_s,
        ],
    );
    assert!(tls_request(main, "a.example.com", &[], None).is_err());
    proxy
        .wait_metric("tcp.sni_preread.rejected.sni_unmatched", |v| v == 2, T)
        .expect("unmatched after the removal");
    let logs = wait_logs(&proxy, "rejected:sni_unmatched", 2);
    assert!(
        logs.iter()
            .all(|l| l["listener"] == main_s && l["cluster"] == "-"),
        "{logs:?}"
    );

    // The established session keeps echoing.
    for round in 0..3 {
        let message = format!("round {round}\n");
        session.write_all(message.as_bytes()).expect("write");
        session.flush().expect("flush");
        assert_eq!(read_line(&mut session).expect("echo"), message.trim_end());
    }
    half_close(&mut session).expect("half close");
    let (rest, clean) = read_tls_to_close(&mut session, T);
    assert_eq!(rest, b"bye\n");
    assert!(clean);

    // Invalid requests through the CLI: exit 1, the code on stderr,
    // nothing changed.
    let frontends_before = cli_ok(&proxy, &["frontend", "list"]);
    cli_refused(
        &proxy,
        &[
            "frontend",
            "tcp",
            "add",
            "-i",
            "alpha",
            "-a",
            &main_s,
            "--sni",
            "a..example.com",
        ],
        "E201",
    );
    cli_refused(
        &proxy,
        &[
            "frontend", "tcp", "add", "-i", "alpha", "-a", &main_s, "--sni", "*.com",
        ],
        "E201",
    );
    cli_refused(
        &proxy,
        &[
            "frontend",
            "tcp",
            "add",
            "-i",
            "nope",
            "-a",
            &main_s,
            "--sni",
            "c.example.com",
        ],
        "E302",
    );
    cli_refused(
        &proxy,
        &[
            "backend",
            "remove",
            "-i",
            "alpha",
            "--backend-id",
            "alpha-0",
            "-a",
            &alpha_s,
        ],
        "E401",
    );
    cli_refused(&proxy, &["cluster", "remove", "-i", "alpha"], "E402");
    assert_eq!(cli_ok(&proxy, &["frontend", "list"]), frontends_before);
    let err = proxy
        .apply(RequestType::AddTcpFrontend(frontend(
            "alpha",
            main,
            "a..example.com",
        )))
        .expect_err("bad pattern over the socket");
    assert!(err.starts_with("E201"), "{err}");

    // Re-add the removed routes; an identical re-add of existing ones
    // succeeds and changes nothing.
    proxy
        .apply(RequestType::AddTcpFrontend(frontend(
            "alpha",
            main,
            "a.example.com",
        )))
        .expect("re-add frontend a");
    cli_ok(
        &proxy,
        &[
            "backend",
            "add",
            "-i",
            "alpha",
            "--backend-id",
            "alpha-0",
            "-a",
            &alpha_s,
        ],
    );
    routed_to(main, "a.example.com", "alpha-0");
    proxy.apply(cluster("alpha")).expect("identical cluster");
    proxy
        .apply(RequestType::AddBackend(backend(
            "alpha",
            "alpha-0",
            alpha.addr(),
        )))
        .expect("identical backend");
    cli_ok(
        &proxy,
        &[
            "frontend",
            "tcp",
            "add",
            "-i",
            "alpha",
            "-a",
            &main_s,
            "--sni",
            "a.example.com",
        ],
    );
    let list = cli_ok(&proxy, &["frontend", "list"]);
    assert_eq!(
        list.lines().filter(|l| l.contains("a.example.com")).count(),
        1,
        "{list}"
    );
    let clusters = cli_ok(&proxy, &["cluster", "list"]);
    assert_eq!(clusters.matches("alpha-0=").count(), 1, "{clusters}");
    routed_to(main, "a.example.com", "alpha-0");
    routed_to(main, "b.example.com", "alpha-0");
    settle(&proxy, 0);
}

// ---------------------------------------------------------------------------
// 5. Saved state
// ---------------------------------------------------------------------------

#[test]
fn runtime_routes_survive_a_restart_from_the_saved_state() {
    let alpha = TlsBackend::start(BackendConfig::new("alpha-0", &["a.example.com"]));
    let config = ConfigBuilder::new()
        .global("saved_state = \"${dir}/state.json\"")
        .global("automatic_state_save = true")
        .listener("main", &[])
        .build();
    let mut first = start(&config);
    let main = first.addr("main");
    let state_path = first.dir().join("state.json");

    first.apply(cluster("alpha")).expect("add cluster");
    first
        .apply(RequestType::AddBackend(backend(
            "alpha",
            "alpha-0",
            alpha.addr(),
        )))
        .expect("add backend");
    let main_s = main.to_string();
    cli_ok(
        &first,
        &[
            "frontend",
            "tcp",
            "add",
            "-i",
            "alpha",
            "-a",
            &main_s,
            "--sni",
            "a.example.com",
        ],
    );
    routed_to(main, "a.example.com", "alpha-0");
    // Saved before the answer: the snapshot, and the journal after it.
    let saved = load_state(&state_path).expect("the saved state loads");
    assert!(
        saved
            .frontends()
            .any(|f| f.sni.as_deref() == Some("a.example.com"))
            && saved.backends().any(|b| b.backend_id == "alpha-0"),
        "the state was not saved: {saved:?}"
    );

    let exit = first.stop_soft().expect("soft stop");
    assert!(exit.success(), "{exit}");

    // The same config text (same saved_state path, same listener).
    let text = std::fs::read_to_string(first.config_path()).expect("config");
    let second = start(&text);
    assert_eq!(second.listener(), main);
    routed_to(main, "a.example.com", "alpha-0");
    second
        .wait_stderr("booting from the state file", T)
        .expect("booted from the state file");
    let frontends = cli_ok(&second, &["frontend", "list"]);
    assert!(frontends.contains("a.example.com"), "{frontends}");
}

/// Starts `preread` on `config` (and `state.json` when given) in a temp
/// dir, expects it to give up by itself with `exit`; returns its stderr.
fn refused_start(tag: &str, config: &str, state: Option<&str>, exit: i32) -> String {
    let dir = TempDir::new(tag);
    let config_path = dir.path().join("preread.toml");
    std::fs::write(&config_path, config).expect("write config");
    if let Some(state) = state {
        std::fs::write(dir.path().join("state.json"), state).expect("write state");
    }
    let cfg = config_path.display().to_string();
    let out = run_preread(&["start", "-c", &cfg], dir.path(), T).expect("start ends by itself");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(exit), "{stderr}");
    stderr
}

#[test]
fn a_corrupt_state_file_refuses_the_start() {
    let listener = free_addr();
    let config = format!(
        "command_socket = \"preread.sock\"\nsaved_state = \"state.json\"\n\n\
         [[listeners]]\naddress = \"{listener}\"\n"
    );
    // Sealed as a save would: the trailer matches, the line does not parse.
    let state = seal(
        "{\"preread_state\":2}\n\
        {\"request_type\":{\"add_cluster\":{\"cluster_id\":\"alpha\",\"load_balancing\":0,\"proxy_protocol\":0,\"max_connections_per_ip\":0}}}\n\
        {\"request_type\":{\"add_cluster\": this is not json\n",
    );
    let stderr = refused_start("corrupt", &config, Some(&state), 2);
    assert!(stderr.contains("line 3"), "{stderr}");
    assert!(stderr.contains("E010"), "{stderr}");
    assert!(!accepts(listener), "the listener was opened");
}

/// Workers share a port through `SO_REUSEPORT`, which would also let a
/// second preread of the same user join a port the first one holds and take
/// a share of its connections. Neither a runtime add nor a start may.
#[test]
fn a_second_preread_cannot_share_a_port() {
    let first = start(&ConfigBuilder::new().listener("main", &[]).build());
    let taken = first.addr("main").to_string();
    let second = start(&ConfigBuilder::new().listener("own", &[]).build());
    let stderr = cli_refused(
        &second,
        &["listener", "tcp", "add", "-a", &taken],
        "E_WORKER_REFUSED",
    );
    assert!(stderr.contains("already bound"), "{stderr}");
    let listed = cli_ok(&second, &["listener", "list"]);
    assert!(!listed.contains(&taken), "{listed}");

    let config =
        format!("command_socket = \"preread.sock\"\n\n[[listeners]]\naddress = \"{taken}\"\n");
    let stderr = refused_start("shared-port", &config, None, 1);
    assert!(stderr.contains("already bound"), "{stderr}");
    // The first one still serves its port alone.
    assert!(accepts(first.addr("main")));
}

// ---------------------------------------------------------------------------
// 6. Every socket subcommand through the CLI
// ---------------------------------------------------------------------------

/// The value of `"name":N` in a JSON line.
fn json_number(line: &str, name: &str) -> Option<i64> {
    let key = format!("\"{name}\":");
    let start = line.find(&key)? + key.len();
    let digits: String = line[start..]
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '-')
        .collect();
    digits.parse().ok()
}

#[test]
fn every_socket_subcommand_works_through_the_cli() {
    let alpha = TlsBackend::start(BackendConfig::new(
        "alpha-0",
        &["a.example.com", "b.example.com"],
    ));
    let gamma = TlsBackend::start(BackendConfig::new("gamma-0", &["g.example.com"]));
    let base = ConfigBuilder::new()
        .global("worker_count = 2")
        .listener("main", &[])
        .frontend("alpha", "main", Some("a.example.com"), &[])
        .backend("alpha", "alpha-0", alpha.addr());
    let mut proxy = start(&base.build());
    let main = proxy.addr("main");
    let main_s = main.to_string();

    // status
    let status = cli_ok(&proxy, &["status"]);
    assert!(status.starts_with("uptime "), "{status}");
    assert!(status.contains("2 worker(s)"), "{status}");
    assert!(status.contains("1 listener(s)"), "{status}");

    // listener tcp add / list / deactivate / activate / remove
    let extra = free_addr();
    let extra_s = extra.to_string();
    assert_ack(&cli_ok(
        &proxy,
        &[
            "listener",
            "tcp",
            "add",
            "-a",
            &extra_s,
            "--sni-preread-timeout",
            "1000",
        ],
    ));
    let list = cli_ok(&proxy, &["listener", "list"]);
    let row = list
        .lines()
        .find(|l| l.starts_with(&extra_s))
        .unwrap_or_else(|| panic!("{list}"));
    assert!(row.contains("active") && row.contains("1000"), "{list}");
    assert!(list.lines().any(|l| l.starts_with(&main_s)), "{list}");
    assert!(eventually(T, || accepts(extra)), "the new listener accepts");
    let added = cli_ok(
        &proxy,
        &[
            "frontend",
            "tcp",
            "add",
            "-i",
            "alpha",
            "-a",
            &extra_s,
            "--sni",
            "b.example.com",
            "--alpn",
            "h2,http/1.1",
        ],
    );
    // The answer says what changed, in words, not as the request's JSON.
    assert_eq!(
        added,
        format!(
            "add frontend {extra_s} sni=b.example.com alpn=h2,http/1.1 -> alpha: applied on 2 worker(s)\n"
        )
    );
    let frontends = cli_ok(&proxy, &["frontend", "list"]);
    assert!(
        frontends.lines().next().is_some_and(|l| l
            .split_whitespace()
            .eq(["ADDRESS", "SNI", "ALPN", "CLUSTER", "TAGS", "PROTOCOL"])),
        "{frontends}"
    );
    assert!(
        frontends.lines().any(|l| l.contains(&extra_s)
            && l.contains("b.example.com")
            && l.contains("h2,http/1.1")),
        "{frontends}"
    );
    let outcome = tls_request(extra, "b.example.com", &["h2"], None).expect("via the new listener");
    assert_eq!(outcome.backend(), Some("alpha-0"));

    cli_ok(&proxy, &["listener", "tcp", "deactivate", "-a", &extra_s]);
    assert!(
        eventually(T, || !accepts(extra)),
        "deactivated but accepting"
    );
    let list = cli_ok(&proxy, &["listener", "list"]);
    assert!(
        list.lines()
            .any(|l| l.starts_with(&extra_s) && l.contains("inactive")),
        "{list}"
    );
    cli_ok(&proxy, &["listener", "tcp", "activate", "-a", &extra_s]);
    assert!(eventually(T, || accepts(extra)), "activated but refusing");
    let outcome = tls_request(extra, "b.example.com", &["h2"], None).expect("routes kept");
    assert_eq!(outcome.backend(), Some("alpha-0"));
    cli_refused(
        &proxy,
        &["listener", "tcp", "remove", "-a", &extra_s],
        "E402",
    );
    cli_ok(
        &proxy,
        &[
            "frontend",
            "tcp",
            "remove",
            "-i",
            "alpha",
            "-a",
            &extra_s,
            "--sni",
            "b.example.com",
            "--alpn",
            "h2,http/1.1",
        ],
    );
    assert!(!cli_ok(&proxy, &["frontend", "list"]).contains("b.example.com"));
    cli_ok(&proxy, &["listener", "tcp", "remove", "-a", &extra_s]);
    assert!(!cli_ok(&proxy, &["listener", "list"]).contains(&extra_s));
    assert!(eventually(T, || !accepts(extra)), "removed but accepting");

    // cluster add / list / remove; backend add / remove
    cli_ok(
        &proxy,
        &[
            "cluster",
            "add",
            "-i",
            "beta",
            "--load-balancing",
            "least-connections",
        ],
    );
    let beta_addr = free_addr().to_string();
    cli_ok(
        &proxy,
        &[
            "backend",
            "add",
            "-i",
            "beta",
            "--backend-id",
            "beta-0",
            "-a",
            &beta_addr,
            "--weight",
            "5",
            "--backup",
        ],
    );
    let clusters = cli_ok(&proxy, &["cluster", "list"]);
    let row = clusters
        .lines()
        .find(|l| l.starts_with("beta "))
        .unwrap_or_else(|| panic!("{clusters}"));
    assert!(row.contains("least_connections"), "{clusters}");
    assert!(
        row.contains(&format!("beta-0={beta_addr} w5 backup")),
        "{clusters}"
    );
    assert!(
        clusters.lines().any(|l| l.starts_with("alpha ")),
        "{clusters}"
    );
    cli_refused(&proxy, &["cluster", "remove", "-i", "beta"], "E402");
    cli_ok(
        &proxy,
        &[
            "backend",
            "remove",
            "-i",
            "beta",
            "--backend-id",
            "beta-0",
            "-a",
            &beta_addr,
        ],
    );
    cli_ok(&proxy, &["cluster", "remove", "-i", "beta"]);
    assert!(!cli_ok(&proxy, &["cluster", "list"]).contains("beta"));

    // state save / load
    let saved = proxy.dir().join("saved-by-cli.json");
    let saved_s = saved.display().to_string();
    cli_ok(&proxy, &["state", "save", "-f", &saved_s]);
    let text = std::fs::read_to_string(&saved).expect("the saved state");
    assert!(text.starts_with("{\"preread_state\":2}\n"), "{text}");
    assert!(text.contains("alpha-0") && !text.contains("beta"), "{text}");
    cli_ok(&proxy, &["state", "load", "-f", &saved_s]);
    routed_to(main, "a.example.com", "alpha-0");

    // metrics get, human and JSON
    settle(&proxy, 1);
    let human = cli_ok(&proxy, &["metrics", "get"]);
    let header = human.lines().next().unwrap_or_default();
    assert!(
        header.starts_with("METRIC") && header.contains("TOTAL"),
        "{human}"
    );
    assert!(
        header.contains("WORKER_0") && header.contains("WORKER_1"),
        "{human}"
    );
    assert!(
        human
            .lines()
            .any(|l| l.starts_with("tcp.sni_preread.routed ")),
        "{human}"
    );
    let json = cli_ok(&proxy, &["metrics", "get", "--json"]);
    let lines: Vec<&str> = json.lines().collect();
    assert_eq!(lines.len(), 3, "{json}");
    assert!(lines[0].contains("\"worker\":0"), "{json}");
    assert!(lines[1].contains("\"worker\":1"), "{json}");
    assert!(lines[2].contains("\"worker\":\"total\""), "{json}");
    let accepted: Vec<i64> = lines
        .iter()
        .map(|l| json_number(l, "tcp.accepted").unwrap_or(0))
        .collect();
    assert_eq!(accepted[0] + accepted[1], accepted[2], "{json}");
    assert!(accepted[2] >= 4, "{json}");
    let routed = json_number(lines[2], "tcp.sni_preread.routed");
    assert_eq!(routed, Some(3), "{json}");

    // reload: only the difference (a new cluster gamma) is applied.
    let with_gamma = base
        .clone()
        .frontend("gamma", "main", Some("g.example.com"), &[])
        .backend("gamma", "gamma-0", gamma.addr())
        .build();
    proxy.write_config(&with_gamma).expect("write config");
    let out = cli_ok(&proxy, &["reload"]);
    let applied: Vec<&str> = out.lines().filter(|l| l.starts_with("applied ")).collect();
    assert_eq!(applied.len(), 3, "{out}");
    assert!(applied.iter().all(|l| l.contains("gamma")), "{out}");
    assert!(
        applied.contains(
            &format!("applied add frontend {main_s} sni=g.example.com alpn=any -> gamma").as_str()
        ),
        "{out}"
    );
    assert!(!out.contains('{'), "a person reads these lines: {out}");
    assert!(!out.contains("alpha"), "{out}");
    assert!(out.contains("3 applied, 0 skipped"), "{out}");
    routed_to(main, "g.example.com", "gamma-0");
    routed_to(main, "a.example.com", "alpha-0");
    // A second reload has nothing to do.
    let out = cli_ok(&proxy, &["reload"]);
    assert!(out.contains("0 applied, 0 skipped"), "{out}");
    // A worker's refusal keeps the proxy's own code: a new listener on a
    // port another program holds.
    let holder = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let held = holder.local_addr().expect("addr");
    proxy
        .write_config(&format!(
            "{with_gamma}\n[[listeners]]\naddress = \"{held}\"\n"
        ))
        .expect("write config");
    for json in [false, true] {
        let args: &[&str] = if json {
            &["--json", "reload"]
        } else {
            &["reload"]
        };
        let out = proxy.cli(args).expect("reload");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(out.status.code(), Some(1), "{text}");
        let wanted = if json {
            "\"code\":\"E_WORKER_REFUSED\""
        } else {
            ": E_WORKER_REFUSED: "
        };
        assert!(text.contains(wanted), "{text}");
        assert!(text.contains(&held.to_string()), "{text}");
        assert!(!text.contains("E403"), "{text}");
    }
    drop(holder);

    // shutdown: soft, the process exits 0.
    cli_ok(&proxy, &["shutdown"]);
    let exit = proxy.wait_exit(T).expect("exit after shutdown");
    assert!(exit.success(), "{exit}");
}

// ---------------------------------------------------------------------------
// 7. Gauge and duration accounting
// ---------------------------------------------------------------------------

#[test]
fn gauges_return_to_zero_after_every_kind_of_exit() {
    let live = TlsBackend::start(BackendConfig::new("alpha-0", &["a.example.com"]));
    let dead = free_addr();
    let config = ConfigBuilder::new()
        .listener("main", &["sni_preread_timeout = 300"])
        .frontend("alpha", "main", Some("a.example.com"), &[])
        .backend("alpha", "alpha-0", live.addr())
        .frontend("dead", "main", Some("d.example.com"), &[])
        .backend("dead", "dead-0", dead)
        .build();
    let proxy = start(&config);
    let main = proxy.addr("main");
    // The readiness probe included.
    let base = settle(&proxy, 1);

    // 1. reject
    let (_, closed) = raw_exchange(main, HTTP_GET, T).expect("connect");
    assert!(closed);
    // 2. route and pipe
    routed_to(main, "a.example.com", "alpha-0");
    // 3. client close without bytes
    drop(TcpStream::connect_timeout(&main, T).expect("connect"));
    // 4. fragmented timeout
    let (_, closed) =
        raw_exchange(main, &capture("gen_truncated_200_of_517.bin"), T).expect("connect");
    assert!(closed);
    // 5. backend connect failure
    let err = tls_request(main, "d.example.com", &[], None).expect_err("no live backend");
    assert!(err.contains("handshake"), "{err}");

    let sessions = 5;
    // The duration runs from the first byte: the bare close has none.
    let with_bytes = 4;
    let m = wait_metrics(&proxy, "every session closed", |m| {
        get(m, "tcp.accepted") >= get(&base, "tcp.accepted") + sessions
            && get(m, "tcp.active") == 0
            && get(m, "tcp.sni_preread.active") == 0
            && get(m, "tcp.sni_preread.duration.count")
                >= get(&base, "tcp.sni_preread.duration.count") + with_bytes
    });
    let delta = |name: &str| get(&m, name) - get(&base, name);
    assert_eq!(delta("tcp.accepted"), sessions, "{m:?}");
    assert_eq!(delta("tcp.sni_preread.duration.count"), with_bytes, "{m:?}");
    assert_eq!(get(&m, "tcp.active"), 0, "{m:?}");
    assert_eq!(get(&m, "tcp.sni_preread.active"), 0, "{m:?}");
    assert_eq!(get(&m, "backend.connections"), 0, "{m:?}");
    assert_eq!(delta("tcp.sni_preread.rejected.not_tls"), 1, "{m:?}");
    assert_eq!(delta("tcp.sni_preread.rejected.fragmented"), 1, "{m:?}");
    assert_eq!(delta("tcp.sni_preread.routed"), 2, "{m:?}");
    assert!(delta("backend.connect.errors") >= 1, "{m:?}");
    assert_eq!(rejected_sum(&m), 2, "{m:?}");
    let refused = wait_logs(&proxy, "refused:backend_unavailable", 1);
    assert_eq!(refused[0]["sni"], "d.example.com", "{refused:?}");
}
