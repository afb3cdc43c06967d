//! The harness checked on its own, without the proxy: clients talk to the
//! backends directly. Loopback only; every wait is bounded.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use e2e::backend::{BackendConfig, PlainBackend, TlsBackend, pattern};
use e2e::certs::TestCa;
use e2e::client::{
    self, ClientOptions, half_close, raw_exchange, read_line, read_tls_to_close, tls_client,
    tls_request, tls_request_with,
};
use e2e::proxy::free_addr;
use e2e::testkit::eventually;

const T: Duration = Duration::from_secs(5);

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[test]
fn tls_request_sees_certificate_alpn_and_first_line() {
    let backend = TlsBackend::start(
        BackendConfig::new("alpha-0", &["a.example.com", "*.b.example.com"])
            .alpn(&["h2", "http/1.1"]),
    );
    let outcome =
        tls_request(backend.addr(), "a.example.com", &["http/1.1", "h2"], None).expect("request");
    assert_eq!(outcome.dns_names, ["a.example.com", "*.b.example.com"]);
    // The server's preference wins in rustls.
    assert_eq!(outcome.alpn.as_deref(), Some("h2"));
    assert_eq!(outcome.line, "backend=alpha-0 alpn=h2 sni=a.example.com");
    assert_eq!(outcome.backend(), Some("alpha-0"));
    assert_eq!(outcome.field("sni"), Some("a.example.com"));
    assert_eq!(outcome.tail, b"bye\n");
    assert!(outcome.clean_close);
    assert_eq!(outcome.version, "TLSv1_3");

    // Wildcard name, no ALPN offered.
    let outcome = tls_request(backend.addr(), "x.b.example.com", &[], None).expect("wildcard");
    assert_eq!(outcome.line, "backend=alpha-0 alpn=- sni=x.b.example.com");

    // No SNI at all: verified against 127.0.0.1.
    let outcome = tls_request(backend.addr(), "", &[], None).expect("no SNI");
    assert_eq!(outcome.line, "backend=alpha-0 alpn=- sni=-");

    // TLS 1.2.
    let outcome = tls_request_with(
        backend.addr(),
        &ClientOptions::new("a.example.com", &["http/1.1"]).tls12_only(),
    )
    .expect("TLS 1.2");
    assert_eq!(outcome.version, "TLSv1_2");
    assert_eq!(outcome.alpn.as_deref(), Some("http/1.1"));

    // A name the certificate does not hold is refused by the client.
    let err = tls_request(backend.addr(), "c.example.com", &[], None).expect_err("bad name");
    assert!(err.contains("handshake"), "{err}");

    assert!(eventually(T, || backend.accepted() == 5));
}

#[test]
fn raw_bytes_start_with_a_handshake_record_and_hold_the_sni() {
    let backend = TlsBackend::start(BackendConfig::new("raw-0", &["raw.example.com"]));
    tls_request(backend.addr(), "raw.example.com", &[], None).expect("request");
    assert!(eventually(T, || backend.connections().len() == 1));
    let raw = &backend.connections()[0];
    assert_eq!(raw[0], 0x16, "TLS handshake record");
    assert_eq!(raw[5], 0x01, "ClientHello");
    assert!(contains(raw, b"raw.example.com"));
}

#[test]
fn echo_and_half_close() {
    let backend = TlsBackend::start(BackendConfig::new("echo-0", &["echo.example.com"]));
    let mut stream = tls_client(backend.addr(), "echo.example.com", &[]).expect("handshake");
    stream.write_all(b"first\n").expect("write");
    let line = read_line(&mut stream).expect("line");
    assert_eq!(line, "backend=echo-0 alpn=- sni=echo.example.com");
    for round in 0..3 {
        let message = format!("round {round}\n");
        stream.write_all(message.as_bytes()).expect("write");
        stream.flush().expect("flush");
        assert_eq!(read_line(&mut stream).expect("echo"), message.trim_end());
    }
    // Still writable in the other direction after our FIN: bye arrives.
    half_close(&mut stream).expect("half close");
    let (rest, clean) = read_tls_to_close(&mut stream, T);
    assert_eq!(rest, b"bye\n");
    assert!(clean);
}

#[test]
fn big_response() {
    let len = 1 << 20;
    let backend =
        TlsBackend::start(BackendConfig::new("big-0", &["big.example.com"]).big_response(len));
    let outcome = tls_request(backend.addr(), "big.example.com", &[], None).expect("request");
    assert_eq!(outcome.tail.len(), len + 4);
    assert_eq!(&outcome.tail[..len], pattern(len).as_slice());
    assert_eq!(&outcome.tail[len..], b"bye\n");
}

#[test]
fn proxy_header_is_stripped_and_reported() {
    let backend = TlsBackend::start(BackendConfig::new("pp-0", &["pp.example.com"]));
    let source: SocketAddr = "192.0.2.7:4242".parse().expect("addr");
    for header in [
        client::proxy_v2(source, backend.addr()),
        client::proxy_v1(source, backend.addr()),
    ] {
        let outcome = tls_request_with(
            backend.addr(),
            &ClientOptions::new("pp.example.com", &[]).prefix(&header),
        )
        .expect("request");
        assert_eq!(
            outcome.line,
            "backend=pp-0 alpn=- sni=pp.example.com proxy=192.0.2.7:4242"
        );
    }
    assert!(eventually(T, || backend.connections().len() == 2));
    let raw = backend.connections();
    assert!(raw[0].starts_with(b"\r\n\r\n\x00\r\nQUIT\n"));
    assert!(raw[1].starts_with(b"PROXY TCP4 192.0.2.7 127.0.0.1 4242 "));
}

#[test]
fn dripped_handshake_completes() {
    let backend = TlsBackend::start(BackendConfig::new("slow-0", &["slow.example.com"]));
    let outcome = tls_request_with(
        backend.addr(),
        &ClientOptions::new("slow.example.com", &[]).drip(200, Duration::from_millis(2)),
    )
    .expect("request");
    assert_eq!(outcome.backend(), Some("slow-0"));
}

#[test]
fn mtls_requires_a_client_certificate() {
    let backend =
        TlsBackend::start(BackendConfig::new("mtls-0", &["m.example.com"]).client_auth(true));
    let err = tls_request(backend.addr(), "m.example.com", &[], None).expect_err("no cert");
    assert!(err.to_lowercase().contains("certificate"), "{err}");

    let leaf = TestCa::shared().client_cert("client.example.com");
    let outcome =
        tls_request(backend.addr(), "m.example.com", &[], Some(&leaf)).expect("with cert");
    assert_eq!(outcome.backend(), Some("mtls-0"));

    // A certificate from another CA is refused.
    let stranger = TestCa::new("stranger").client_cert("client.example.com");
    assert!(tls_request(backend.addr(), "m.example.com", &[], Some(&stranger)).is_err());
    assert!(eventually(T, || backend.errors().len() == 2));
}

#[test]
fn alpn_mismatch_is_refused_by_the_backend() {
    let backend = TlsBackend::start(BackendConfig::new("h2-0", &["h2.example.com"]).alpn(&["h2"]));
    let err = tls_request(backend.addr(), "h2.example.com", &["http/1.1"], None)
        .expect_err("no common protocol");
    assert!(err.contains("handshake"), "{err}");
}

#[test]
fn http_mode_answers_http() {
    let backend = TlsBackend::start(BackendConfig::new("www-0", &["www.example.com"]).http(true));
    let outcome = tls_request_with(
        backend.addr(),
        &ClientOptions::new("www.example.com", &["http/1.1"])
            .message(b"GET / HTTP/1.1\r\nHost: www.example.com\r\n\r\n"),
    )
    .expect("request");
    assert!(
        outcome.line.starts_with("HTTP/1.1 200 OK"),
        "{}",
        outcome.line
    );
    let body = String::from_utf8_lossy(&outcome.tail).into_owned();
    assert!(
        body.ends_with("backend=www-0 alpn=- sni=www.example.com\n"),
        "{body}"
    );
}

#[test]
fn plain_backend_records_and_answers() {
    let backend = PlainBackend::start("fallback-0");
    let (received, closed) = raw_exchange(
        backend.addr(),
        b"GET / HTTP/1.0\r\n\r\n",
        Duration::from_millis(300),
    )
    .expect("exchange");
    assert_eq!(received, b"backend=fallback-0\n");
    assert!(!closed, "the backend waits for more");
    assert!(eventually(T, || backend
        .connections()
        .first()
        .map(Vec::as_slice)
        == Some(b"GET / HTTP/1.0\r\n\r\n".as_slice())));

    // Echo and half-close on a plain stream.
    let mut stream = client::connect(backend.addr(), T).expect("connect");
    stream.write_all(b"hi").expect("write");
    let mut line = [0u8; 19];
    stream.read_exact(&mut line).expect("line");
    assert_eq!(&line, b"backend=fallback-0\n");
    stream.write_all(b"echo me").expect("write");
    stream
        .shutdown(std::net::Shutdown::Write)
        .expect("shutdown");
    let (rest, closed) = client::read_to_close(&mut stream, T);
    assert_eq!(rest, b"echo mebye\n");
    assert!(closed);

    let greeter = PlainBackend::start_speaking_first("smtp-0");
    let mut stream = client::connect(greeter.addr(), T).expect("connect");
    assert_eq!(read_line(&mut stream).expect("greeting"), "backend=smtp-0");
    assert_eq!(greeter.accepted(), 1);
}

#[test]
fn raw_exchange_on_a_closed_port_fails_fast() {
    let addr = free_addr();
    let started = Instant::now();
    let err = raw_exchange(addr, b"x", T).expect_err("nothing listens");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert!(err.contains("connect"), "{err}");
}

#[test]
fn drip_sends_everything_slowly() {
    let backend = PlainBackend::start("drip-0");
    let payload: Vec<u8> = (0u8..40).collect();
    let pause = Duration::from_millis(5);
    let started = Instant::now();
    let mut stream = client::drip(backend.addr(), &payload, 4, pause).expect("drip");
    assert!(started.elapsed() >= pause * 10);
    stream
        .shutdown(std::net::Shutdown::Write)
        .expect("shutdown");
    let (_, closed) = client::read_to_close(&mut stream, T);
    assert!(closed);
    assert!(eventually(T, || backend.connections().first() == Some(&payload)));
}

#[test]
fn garbage_to_a_tls_backend_is_closed() {
    let backend = TlsBackend::start(BackendConfig::new("g-0", &["g.example.com"]));
    let (received, closed) =
        raw_exchange(backend.addr(), b"\x16\x03\x01\x00\x05hello-garbage", T).expect("exchange");
    assert!(closed);
    // rustls answers with an alert record before closing.
    assert!(received.is_empty() || received[0] == 0x15, "{received:?}");
    assert!(eventually(T, || backend.errors().len() == 1));
}

#[test]
fn drop_stops_a_backend_with_an_open_connection() {
    let backend = TlsBackend::start(BackendConfig::new("d-0", &["d.example.com"]));
    let addr = backend.addr();
    let mut stream = tls_client(addr, "d.example.com", &[]).expect("handshake");
    stream.write_all(b"x").expect("write");
    read_line(&mut stream).expect("line");
    let started = Instant::now();
    drop(backend);
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_err());
}

/// The proxy harness against the real binary, when it is built (skipped
/// with a note otherwise: `cargo build -p proxy-shell` first).
#[test]
fn proxy_process_smoke() {
    use e2e::proxy::{ConfigBuilder, ProxyProcess};
    if let Err(why) = e2e::proxy::preread_bin() {
        eprintln!("skipped: {why}");
        return;
    }
    let alpha = TlsBackend::start(BackendConfig::new("alpha-0", &["a.example.com"]).alpn(&["h2"]));
    let fallback = PlainBackend::start("fallback-0");
    let config = ConfigBuilder::new()
        .listener("main", &["default_cluster = \"fallback\""])
        .frontend("alpha", "main", Some("a.example.com"), &[])
        .backend("alpha", "alpha-0", alpha.addr())
        .backend("fallback", "fallback-0", fallback.addr())
        .build();
    let mut proxy = ProxyProcess::start(&config).expect("proxy ready");
    let outcome = tls_request(proxy.addr("main"), "a.example.com", &["h2"], None).expect("routed");
    assert_eq!(outcome.backend(), Some("alpha-0"));
    assert_eq!(outcome.dns_names, ["a.example.com"]);
    assert_eq!(outcome.tail, b"bye\n");
    let (received, _) =
        raw_exchange(proxy.addr("main"), b"PING\r\n", Duration::from_millis(500)).expect("plain");
    assert_eq!(received, b"backend=fallback-0\n");
    proxy
        .wait_metric("tcp.sni_preread.routed", |v| v >= 1, T)
        .expect("routed metric");
    proxy
        .wait_stderr("outcome=fallback:not_tls", T)
        .expect("access log");
    let routed = |lines: &[BTreeMap<String, String>]| {
        (lines.iter()).any(|l| l["backend"] == "alpha-0" && l["outcome"] == "routed")
    };
    if let Err(e) = proxy.wait_access_logs(T, routed) {
        panic!("no routed line to alpha-0: {e}");
    }
    let status = proxy.cli(&["status"]).expect("cli");
    assert!(status.status.success(), "{status:?}");
    let exit = proxy.stop_soft().expect("soft stop");
    assert!(exit.success(), "{exit}");
}
