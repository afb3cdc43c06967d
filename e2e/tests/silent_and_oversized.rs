//! Hostile clients before routing, through the real `preread` process: a
//! client that sends nothing is refused at `sni_preread_timeout` after the
//! accept (not at `front_timeout`); a length that announces more than the
//! cap is `too_large` the moment its header arrives; and a listener's
//! `max_unrouted_per_ip` bounds what one client address may hold before
//! routing; a cut inbound PROXY header is `fragmented` at the deadline and
//! `front_closed` on a close, logged, counted and captured; a listener
//! that defers its accepts (`defer_accept`) is not woken by a client that
//! connects and waits, and routes it once its hello comes.
//!
//! Build the binary first: `cargo build -p proxy-shell`. Loopback only
//! (127.0.0.1 and 127.0.0.2); every wait is bounded.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use e2e::backend::PlainBackend;
use e2e::client::{End, connect, raw_exchange, read_line, read_until_end};
use e2e::proxy::{ConfigBuilder, ProxyProcess};
use e2e::testkit::{capture, eventually, shut, start, tail};

/// The general bound of a wait.
const T: Duration = Duration::from_secs(5);
/// The preread timeout of the silent-client listeners.
const SILENCE: Duration = Duration::from_millis(500);
/// How soon an announced length must be refused.
const AT_ONCE: Duration = Duration::from_millis(100);

fn logs_with(proxy: &ProxyProcess, outcome: &str) -> Vec<BTreeMap<String, String>> {
    proxy
        .access_logs()
        .into_iter()
        .filter(|l| l.get("outcome").map(String::as_str) == Some(outcome))
        .collect()
}

/// Waits until no session is open (the harness's readiness probe
/// included), so that counts start from a known point.
fn settle(proxy: &ProxyProcess) {
    proxy
        .wait_metric("tcp.active", |v| v == 0, T)
        .unwrap_or_else(|e| panic!("{e}\n{}", tail(&proxy.stderr_text(), 30)));
}

/// How long until the proxy ends a connection whose client sent nothing,
/// and how it ended.
fn silent_until_closed(addr: SocketAddr) -> (Duration, Vec<u8>, End) {
    let started = Instant::now();
    let mut stream = connect(addr, T).expect("connect");
    let (got, end) = read_until_end(&mut stream, T);
    (started.elapsed(), got, end)
}

#[test]
fn a_silent_client_is_closed_at_sni_preread_timeout() {
    let greeter = PlainBackend::start_speaking_first("smtp-0");
    let backend = PlainBackend::start("alpha-0");
    let config = ConfigBuilder::new()
        .listener("main", &["sni_preread_timeout = 500", "front_timeout = 60"])
        .listener(
            "smtp",
            &[
                "sni_preread_timeout = 500",
                "server_first_timeout = 150",
                "default_cluster = \"greeter\"",
            ],
        )
        .frontend("alpha", "main", Some("a.example.com"), &[])
        .frontend("alpha", "smtp", Some("a.example.com"), &[])
        .backend("alpha", "alpha-0", backend.addr())
        .backend("greeter", "smtp-0", greeter.addr())
        .build();
    let proxy = start(&config);
    settle(&proxy);

    let (elapsed, got, end) = silent_until_closed(proxy.addr("main"));
    println!("a silent client was closed after {elapsed:?}");
    assert!(got.is_empty(), "a silent client is told nothing: {got:?}");
    assert_eq!(end, End::Eof, "closed, not left to front_timeout");
    assert!(
        elapsed >= SILENCE - Duration::from_millis(50) && elapsed < SILENCE * 3,
        "closed after {elapsed:?}, sni_preread_timeout is {SILENCE:?}"
    );
    proxy
        .wait_metric("tcp.refused.silent_timeout", |v| v == 1, T)
        .expect("counted as a refusal");
    assert!(
        eventually(T, || logs_with(&proxy, "refused:silent_timeout").len() == 1),
        "one access-log line; stderr:\n{}",
        tail(&proxy.stderr_text(), 30)
    );
    let prefix = "tcp.sni_preread.rejected.";
    let rejects: i64 = proxy
        .metrics()
        .expect("metrics")
        .iter()
        .filter(|(name, _)| name.starts_with(prefix))
        .map(|(_, v)| v)
        .sum();
    assert_eq!(rejects, 0, "not a reject reason");

    // A bare connect-and-close (a health check) stays silent.
    let accepted = proxy.metric("tcp.accepted");
    // Its FIN now: a late one would be a second silent client.
    shut(&connect(proxy.addr("main"), T).expect("connect")).expect("shutdown");
    proxy
        .wait_metric("tcp.accepted", |v| v > accepted, T)
        .expect("accepted");
    settle(&proxy);
    assert_eq!(proxy.metric("tcp.refused.silent_timeout"), 1);
    assert_eq!(proxy.metric("tcp.sni_preread.rejected.front_closed"), 0);
    assert_eq!(logs_with(&proxy, "refused:silent_timeout").len(), 1);

    // A client that speaks in time is judged by its hello as ever.
    let (got, _) = raw_exchange(proxy.addr("main"), &capture("curl_h2.bin"), T).expect("connect");
    assert!(got.starts_with(b"backend=alpha-0"), "{got:?}");

    // The server-first timer, shorter, routes a silent client first.
    let started = Instant::now();
    let mut stream = connect(proxy.addr("smtp"), T).expect("connect");
    let line = read_line(&mut stream).expect("a greeting");
    assert_eq!(line, "backend=smtp-0");
    assert!(started.elapsed() < SILENCE, "{:?}", started.elapsed());
    drop(stream);
    assert_eq!(proxy.metric("tcp.refused.silent_timeout"), 1);
}

/// Sends `bytes` and measures how long until the proxy closes: what came
/// back, how it ended, how long it took.
fn refused_after(addr: SocketAddr, bytes: &[u8]) -> (Vec<u8>, End, Duration) {
    let mut stream = connect(addr, T).expect("connect");
    let started = Instant::now();
    stream.write_all(bytes).expect("write");
    let (got, end) = read_until_end(&mut stream, T);
    (got, end, started.elapsed())
}

#[test]
fn a_16_mib_announced_handshake_is_too_large_within_100ms() {
    let backend = PlainBackend::start("alpha-0");
    let config = ConfigBuilder::new()
        .listener("main", &["sni_preread_timeout = 10000"])
        .listener(
            "lb",
            &["sni_preread_timeout = 10000", "expect_proxy = true"],
        )
        .frontend("alpha", "main", Some("a.example.com"), &[])
        .frontend("alpha", "lb", Some("a.example.com"), &[])
        .backend("alpha", "alpha-0", backend.addr())
        .build();
    let proxy = start(&config);
    settle(&proxy);

    // A 512-byte record whose handshake header says 2^24 - 1 bytes: the
    // first 100 bytes of it, then the client waits.
    let mut hello = capture("curl_h2.bin");
    hello[6..9].copy_from_slice(&[0xff, 0xff, 0xff]);
    let (got, end, elapsed) = refused_after(proxy.addr("main"), &hello[..100]);
    println!("a 16 MiB announced handshake was refused after {elapsed:?}");
    assert!(elapsed < AT_ONCE, "refused after {elapsed:?}");
    assert_eq!(end, End::Eof, "closed: {end:?}");
    assert_eq!(
        got.first(),
        Some(&0x15),
        "the fatal alert a TLS server would send: {got:?}"
    );
    proxy
        .wait_metric("tcp.sni_preread.rejected.too_large", |v| v == 1, T)
        .expect("counted as too_large");

    // A PROXY v2 header that announces 65,535 bytes against a 16 KiB cap.
    let mut header = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
    header.extend_from_slice(&[0x21, 0x11, 0xff, 0xff, 127, 0, 0, 1]);
    let (_, end, elapsed) = refused_after(proxy.addr("lb"), &header);
    println!("a PROXY v2 length of 65535 was refused after {elapsed:?}");
    assert!(elapsed < AT_ONCE, "refused after {elapsed:?}");
    assert_eq!(end, End::Eof, "closed: {end:?}");
    proxy
        .wait_metric("tcp.sni_preread.rejected.too_large", |v| v == 2, T)
        .expect("counted as too_large");
    assert!(
        eventually(T, || logs_with(&proxy, "rejected:too_large").len() == 2),
        "stderr:\n{}",
        tail(&proxy.stderr_text(), 30)
    );
    assert_eq!(backend.accepted(), 0, "no backend is contacted");
}

/// A connection from `source` (a loopback address) that has sent one byte
/// of a ClientHello: it prereads, unrouted, until it sends the rest.
fn unrouted_from(source: &str, to: SocketAddr) -> TcpStream {
    let socket =
        socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).expect("socket");
    let from: SocketAddr = format!("{source}:0").parse().expect("address");
    socket.bind(&from.into()).expect("bind a loopback source");
    socket.connect_timeout(&to.into(), T).expect("connect");
    let mut stream: TcpStream = socket.into();
    stream.write_all(&[0x16]).expect("first byte");
    stream
}

/// With `defer_accept` (on by default) and `sni_preread_timeout = 60s`, the
/// kernel holds a connection without bytes for 31 s (`worker/defer.rs`):
/// a client that waits a second before its hello is no session while it
/// waits, and is routed once it speaks. The server-first listener of
/// `control.rs` shows the other side: it does not defer and still greets.
#[test]
fn a_deferred_listener_routes_a_client_that_waits_before_its_hello() {
    let backend = PlainBackend::start("alpha-0");
    let config = ConfigBuilder::new()
        .listener("main", &["sni_preread_timeout = \"60s\""])
        .frontend("alpha", "main", Some("a.example.com"), &[])
        .backend("alpha", "alpha-0", backend.addr())
        .build();
    let proxy = start(&config);
    settle(&proxy);
    let accepted = proxy.metric("tcp.accepted");

    let mut stream = connect(proxy.addr("main"), T).expect("connect");
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(
        proxy.metric("tcp.accepted"),
        accepted,
        "a client without bytes is not accepted while the kernel defers it"
    );
    stream
        .write_all(&capture("curl_h2.bin"))
        .expect("the hello");
    let mut line = [0u8; 15];
    stream.set_read_timeout(Some(T)).ok();
    stream.read_exact(&mut line).expect("the backend's answer");
    assert_eq!(&line, b"backend=alpha-0");
    proxy
        .wait_metric("tcp.accepted", |v| v == accepted + 1, T)
        .expect("accepted once, with its hello");
}

/// Whether the proxy closed `stream` without a byte within `T`.
fn closed_without_answer(mut stream: TcpStream) -> bool {
    stream.set_read_timeout(Some(T)).ok();
    let mut buf = [0u8; 64];
    matches!(stream.read(&mut buf), Ok(0) | Err(_))
}

#[test]
fn max_unrouted_per_ip_refuses_one_more_connection_per_address() {
    let backend = PlainBackend::start("alpha-0");
    let config = ConfigBuilder::new()
        .listener(
            "main",
            &["sni_preread_timeout = 10000", "max_unrouted_per_ip = 2"],
        )
        .frontend("alpha", "main", Some("a.example.com"), &[])
        .backend("alpha", "alpha-0", backend.addr())
        .build();
    let proxy = start(&config);
    let addr = proxy.addr("main");
    settle(&proxy);

    let mut held = vec![
        unrouted_from("127.0.0.1", addr),
        unrouted_from("127.0.0.1", addr),
    ];
    proxy
        .wait_metric("tcp.sni_preread.active", |v| v == 2, T)
        .expect("two unrouted sessions");
    assert!(
        closed_without_answer(unrouted_from("127.0.0.1", addr)),
        "a third from the same address is refused"
    );
    proxy
        .wait_metric("tcp.refused.unrouted_per_ip", |v| v == 1, T)
        .expect("the refusal is counted");
    // Another address has its own count.
    let other = unrouted_from("127.0.0.2", addr);
    proxy
        .wait_metric("tcp.sni_preread.active", |v| v == 3, T)
        .expect("another address is admitted");

    // Routing gives the slot back: the rest of a hello on a held one.
    let hello = capture("curl_h2.bin");
    let mut routed = held.remove(0);
    routed
        .write_all(&hello[1..])
        .expect("the rest of the hello");
    let mut line = [0u8; 15];
    routed.set_read_timeout(Some(T)).ok();
    routed.read_exact(&mut line).expect("the backend's answer");
    assert_eq!(&line, b"backend=alpha-0");
    let again = unrouted_from("127.0.0.1", addr);
    proxy
        .wait_metric("tcp.sni_preread.active", |v| v == 3, T)
        .expect("admitted again once one was routed");
    assert_eq!(proxy.metric("tcp.refused.unrouted_per_ip"), 1);

    // The CLI sets it at runtime; a flag left out takes its default.
    let out = proxy
        .cli(&[
            "listener",
            "tcp",
            "update",
            "-a",
            &addr.to_string(),
            "--sni-preread-timeout",
            "10000",
            "--max-unrouted-per-ip",
            "1",
        ])
        .expect("run the CLI");
    assert!(
        out.status.success(),
        "listener tcp update: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        closed_without_answer(unrouted_from("127.0.0.2", addr)),
        "127.0.0.2 holds one: a second is refused under the new limit"
    );
    proxy
        .wait_metric("tcp.refused.unrouted_per_ip", |v| v == 2, T)
        .expect("counted");
    drop((held, other, again, routed));
    settle(&proxy);
    assert_eq!(proxy.metric("tcp.sni_preread.active"), 0);
}

/// A cut inbound PROXY header, as an `expect_proxy` listener sees it
/// (issue 28): bytes came, so it is the client's reject, not a silence.
const CUT_HEADER: &[u8] = b"PROXY TCP4 192.0.2.1 198.5";

#[test]
fn a_cut_proxy_header_is_fragmented_on_the_deadline_and_front_closed_on_a_close() {
    let backend = PlainBackend::start("alpha-0");
    let config = ConfigBuilder::new()
        .listener("pp", &["expect_proxy = true", "sni_preread_timeout = 500"])
        .frontend("alpha", "pp", Some("a.example.com"), &[])
        .backend("alpha", "alpha-0", backend.addr())
        .build();
    let proxy = start(&config);
    settle(&proxy);

    // The header is cut, then nothing: the deadline rejects it.
    let mut waits = connect(proxy.addr("pp"), T).expect("connect");
    waits.write_all(CUT_HEADER).expect("write the cut header");
    let (got, end) = read_until_end(&mut waits, T);
    assert_ne!(end, End::Timeout, "closed at the deadline: {got:?}");
    proxy
        .wait_metric("tcp.sni_preread.rejected.fragmented", |v| v == 1, T)
        .unwrap_or_else(|e| panic!("{e}\n{}", tail(&proxy.stderr_text(), 30)));
    assert!(
        eventually(T, || logs_with(&proxy, "rejected:fragmented").len() == 1),
        "one access-log line; stderr:\n{}",
        tail(&proxy.stderr_text(), 30)
    );

    // The header is cut, then the client closes.
    let mut closes = connect(proxy.addr("pp"), T).expect("connect");
    closes.write_all(CUT_HEADER).expect("write the cut header");
    closes
        .shutdown(std::net::Shutdown::Write)
        .expect("close the sending side");
    let _ = read_until_end(&mut closes, T);
    proxy
        .wait_metric("tcp.sni_preread.rejected.front_closed", |v| v == 1, T)
        .unwrap_or_else(|e| panic!("{e}\n{}", tail(&proxy.stderr_text(), 30)));
    assert!(
        eventually(T, || logs_with(&proxy, "rejected:front_closed").len() == 1),
        "one access-log line; stderr:\n{}",
        tail(&proxy.stderr_text(), 30)
    );

    // A whole header alone, then a close, is a balancer's health check.
    let mut check = connect(proxy.addr("pp"), T).expect("connect");
    check
        .write_all(b"PROXY TCP4 192.0.2.1 198.51.100.2 40000 443\r\n")
        .expect("write a whole header");
    check
        .shutdown(std::net::Shutdown::Write)
        .expect("close the sending side");
    let _ = read_until_end(&mut check, T);
    settle(&proxy);
    assert_eq!(proxy.metric("tcp.sni_preread.rejected.front_closed"), 1);
    assert_eq!(proxy.metric("tcp.refused.silent_timeout"), 0);

    // Both cut headers are captured, with the bytes they sent.
    let out = proxy
        .cli(&["--json", "rejects"])
        .expect("run preread rejects");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).expect("a JSON line"))
        .collect();
    let outcomes: Vec<&str> = listed
        .iter()
        .filter_map(|entry| entry["outcome"].as_str())
        .collect();
    assert_eq!(
        outcomes,
        ["rejected:front_closed", "rejected:fragmented"],
        "newest first: {listed:?}"
    );
    assert!(
        listed
            .iter()
            .all(|entry| entry["bytes"] == CUT_HEADER.len()),
        "{listed:?}"
    );
}
