//! End-to-end tests of what the real `preread` process hands a backend and
//! how it holds up: the PROXY protocol handoff of every valid
//! (`proxy_protocol`, `expect_proxy`) pair checked byte for byte at the
//! backend, `max_connections_per_ip` on the TCP peer and on the PROXY
//! header's source, slow and idle clients (bounded counts, for CI), and
//! soft and hard stops with a session open.
//!
//! Build the binary first: `cargo build -p proxy-shell`. Loopback only;
//! every wait is bounded (polls, never sleeps standing in for readiness);
//! the proxy and the backends are stopped on Drop.

use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use e2e::backend::PlainBackend;
use e2e::client::{self, proxy_v1, proxy_v2, read_line, read_to_close};
use e2e::proxy::{ConfigBuilder, ProxyProcess, fill, free_addr, run_preread};
use e2e::testkit::{TempDir, capture, eventually, get, metrics, rejected_sum, start, stderr_tail};
use preread_parser::proxy::{
    Command, PP2_TYPE_ALPN, PP2_TYPE_AUTHORITY, ProxyParsed, parse_proxy_header,
};

/// The general bound of a wait.
const T: Duration = Duration::from_secs(5);
const POLL: Duration = Duration::from_millis(10);

/// The SNI of `curl_h2.bin` (its ALPN offer is `h2`, `http/1.1`).
const SNI: &str = "a.example.com";

/// The captured ClientHello every test sends: curl, SNI `a.example.com`,
/// ALPN `h2`, `http/1.1`, 517 bytes in one record.
fn hello() -> Vec<u8> {
    capture("curl_h2.bin")
}

/// Application bytes that follow the hello in the same write.
fn payload() -> Vec<u8> {
    (0..1500u32)
        .map(|i| u8::try_from((i * 13 + 7) % 251).unwrap_or(0))
        .collect()
}

/// The hello, then the payload.
fn hello_and_payload() -> Vec<u8> {
    let mut bytes = hello();
    bytes.extend_from_slice(&payload());
    bytes
}

/// Polls metric `name` until `accept` says yes; panics with the stderr
/// tail otherwise.
fn wait_metric(proxy: &ProxyProcess, name: &str, accept: impl Fn(i64) -> bool) -> i64 {
    proxy
        .wait_metric(name, accept, T)
        .unwrap_or_else(|e| panic!("{e}\nstderr tail:\n{}", stderr_tail(proxy)))
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
        stderr_tail(proxy)
    );
    logs_with(proxy, outcome)
}

// ---------------------------------------------------------------------------
// 1. PROXY protocol handoffs
// ---------------------------------------------------------------------------

/// The inbound header's source in the tests (TEST-NET-1).
fn inbound_source() -> SocketAddr {
    "192.0.2.10:51234".parse().expect("addr")
}

/// The inbound header's destination (TEST-NET-2): the load balancer's own
/// address, which is not the proxy's.
fn inbound_destination() -> SocketAddr {
    "198.51.100.20:443".parse().expect("addr")
}

/// A proxy whose cluster `pp` has `proxy_protocol = mode` and one plain
/// backend, reached for `a.example.com` from two listeners (both with the
/// given `expect_proxy`): `h2`, whose frontend lists ALPN `h2`, and `any`,
/// whose frontend lists none.
fn handoff_proxy(mode: &str, expect_proxy: bool) -> (PlainBackend, ProxyProcess) {
    let backend = PlainBackend::start("pp-0");
    let listener: &[&str] = if expect_proxy {
        &["expect_proxy = true"]
    } else {
        &[]
    };
    let config = ConfigBuilder::new()
        .listener("h2", listener)
        .listener("any", listener)
        .cluster("pp", &[&format!("proxy_protocol = \"{mode}\"")])
        .frontend("pp", "h2", Some(SNI), &["h2"])
        .frontend("pp", "any", Some(SNI), &[])
        .backend("pp", "pp-0", backend.addr())
        .build();
    (backend, start(&config))
}

/// Sends `prefix`, the hello and the payload in ONE write to `addr`, reads
/// the backend's line, ends the write side and reads until the close.
/// Returns the client socket's local address and the exact bytes the
/// backend received on the one connection this made.
fn handoff_exchange(
    proxy: &ProxyProcess,
    backend: &PlainBackend,
    addr: SocketAddr,
    prefix: &[u8],
) -> (SocketAddr, Vec<u8>) {
    let index = backend.accepted();
    let mut stream = client::connect(addr, T).expect("connect to the proxy");
    let local = stream.local_addr().expect("local addr");
    let mut sent = prefix.to_vec();
    sent.extend_from_slice(&hello_and_payload());
    stream.write_all(&sent).expect("write");
    let line = read_line(&mut stream).unwrap_or_else(|e| {
        panic!(
            "no answer through the proxy ({} bytes sent, prefix {:?}): {e}\nstderr tail:\n{}",
            sent.len(),
            String::from_utf8_lossy(prefix),
            stderr_tail(proxy)
        )
    });
    assert_eq!(line, "backend=pp-0");
    stream.shutdown(Shutdown::Write).expect("shutdown write");
    let (rest, closed) = read_to_close(&mut stream, T);
    assert!(closed, "the session did not close after both FINs");
    assert!(rest.ends_with(b"bye\n"), "{rest:?}");
    // The backend wrote `bye` after reading the client's FIN: it has
    // recorded everything by now.
    assert_eq!(
        backend.accepted(),
        index + 1,
        "exactly one backend connection per session"
    );
    let raw = backend
        .connections()
        .get(index)
        .cloned()
        .expect("the backend recorded the connection");
    (local, raw)
}

/// Compares the backend's record with what was expected, naming the first
/// difference (the records are a few KiB: no full dump).
fn assert_bytes(what: &str, raw: &[u8], expected: &[u8]) {
    assert!(
        raw == expected,
        "{what}: the backend received {} bytes, expected {} (first difference at {:?}; first 64 received {:?})",
        raw.len(),
        expected.len(),
        raw.iter()
            .zip(expected)
            .position(|(a, b)| a != b)
            .or((raw.len() != expected.len()).then_some(raw.len().min(expected.len()))),
        String::from_utf8_lossy(&raw[..raw.len().min(64)])
    );
}

/// The inbound headers the `expect_proxy` tests send, all with
/// [`inbound_source`]: v1, v2, and the corpus's v2 with TLVs (AUTHORITY
/// and UNIQUE_ID, which must not leak into a header preread writes).
fn inbound_headers() -> [(&'static str, Vec<u8>); 3] {
    let with_tlvs = capture("gen_m_proxy_v2_tlv.bin");
    assert_eq!(
        &with_tlvs[63..],
        hello(),
        "the corpus file is curl_h2.bin behind 63 bytes"
    );
    [
        ("v1", proxy_v1(inbound_source(), inbound_destination())),
        ("v2", proxy_v2(inbound_source(), inbound_destination())),
        ("v2 with TLVs", with_tlvs[..63].to_vec()),
    ]
}

/// Parses the v2 header preread put in front of `raw`, checks the TLVs, and
/// returns (source, destination, header length).
fn sent_header(
    what: &str,
    raw: &[u8],
    alpn: Option<&[u8]>,
) -> (Option<SocketAddr>, Option<SocketAddr>, usize) {
    let header = match parse_proxy_header(raw) {
        Ok(ProxyParsed::Complete(header)) => header,
        other => panic!(
            "{what}: the backend's bytes do not start with a complete PROXY header: {other:?} (first 32 bytes {:?})",
            &raw[..raw.len().min(32)]
        ),
    };
    assert_eq!(header.version(), 2, "{what}: preread writes v2");
    assert_eq!(header.command(), Command::Proxy, "{what}");
    let tlvs: Vec<(u8, Vec<u8>)> = header.tlvs().map(|(t, v)| (t, v.to_vec())).collect();
    let mut expected = vec![(PP2_TYPE_AUTHORITY, SNI.as_bytes().to_vec())];
    if let Some(alpn) = alpn {
        expected.push((PP2_TYPE_ALPN, alpn.to_vec()));
    }
    assert_eq!(tlvs, expected, "{what}: the header's TLVs");
    (header.source(), header.destination(), header.len())
}

#[test]
fn handoff_none_without_inbound_header_forwards_exactly_the_client_bytes() {
    let (backend, proxy) = handoff_proxy("none", false);
    for listener in ["h2", "any"] {
        let (_, raw) = handoff_exchange(&proxy, &backend, proxy.addr(listener), &[]);
        assert_bytes(
            &format!("none, no inbound header, listener {listener}"),
            &raw,
            &hello_and_payload(),
        );
    }
    assert!(backend.errors().is_empty(), "{:?}", backend.errors());
}

#[test]
fn handoff_none_drops_the_inbound_v1_and_v2_headers() {
    let (backend, proxy) = handoff_proxy("none", true);
    for (version, header) in inbound_headers() {
        let (_, raw) = handoff_exchange(&proxy, &backend, proxy.addr("h2"), &header);
        assert_bytes(
            &format!("none, inbound {version} header"),
            &raw,
            &hello_and_payload(),
        );
    }
    assert!(backend.errors().is_empty(), "{:?}", backend.errors());
}

#[test]
fn handoff_relay_replays_the_inbound_v1_and_v2_headers_verbatim() {
    let (backend, proxy) = handoff_proxy("relay", true);
    for (version, header) in inbound_headers() {
        let (_, raw) = handoff_exchange(&proxy, &backend, proxy.addr("h2"), &header);
        let mut expected = header.clone();
        expected.extend_from_slice(&hello_and_payload());
        assert_bytes(&format!("relay, inbound {version} header"), &raw, &expected);
    }
    assert!(backend.errors().is_empty(), "{:?}", backend.errors());
}

#[test]
fn handoff_send_without_inbound_header_writes_a_v2_header_for_the_client() {
    let (backend, proxy) = handoff_proxy("send", false);
    // The frontend lists h2: the ALPN TLV says the matched protocol. The
    // frontend without a list: no ALPN TLV.
    for (listener, alpn) in [("h2", Some(&b"h2"[..])), ("any", None)] {
        let what = format!("send, no inbound header, listener {listener}");
        let addr = proxy.addr(listener);
        let (client, raw) = handoff_exchange(&proxy, &backend, addr, &[]);
        let (source, destination, len) = sent_header(&what, &raw, alpn);
        assert_eq!(source, Some(client), "{what}: the source is the client");
        assert_eq!(
            destination,
            Some(addr),
            "{what}: the destination is the listener"
        );
        assert_bytes(&what, &raw[len..], &hello_and_payload());
    }
    assert!(backend.errors().is_empty(), "{:?}", backend.errors());
}

#[test]
fn handoff_send_replaces_the_inbound_header_with_its_own() {
    let (backend, proxy) = handoff_proxy("send", true);
    let addr = proxy.addr("h2");
    for (version, header) in inbound_headers() {
        let what = format!("send, inbound {version} header");
        let (_, raw) = handoff_exchange(&proxy, &backend, addr, &header);
        assert!(
            !raw.starts_with(&header),
            "{what}: the inbound header was forwarded"
        );
        let (source, destination, len) = sent_header(&what, &raw, Some(b"h2"));
        assert_eq!(
            source,
            Some(inbound_source()),
            "{what}: the source is the inbound header's"
        );
        assert_eq!(
            destination,
            Some(addr),
            "{what}: the destination is the listener"
        );
        // Exactly one header: the hello follows at once.
        assert_bytes(&what, &raw[len..], &hello_and_payload());
    }
    // An IPv6 client behind the load balancer, on an IPv4 listener: the
    // header is written as AF_INET6, the listener in its IPv4-mapped form.
    let v6_source: SocketAddr = "[2001:db8::7]:40000".parse().expect("addr");
    let v6_destination: SocketAddr = "[2001:db8::1]:443".parse().expect("addr");
    for (version, header) in [
        ("v1 TCP6", proxy_v1(v6_source, v6_destination)),
        ("v2 TCP6", proxy_v2(v6_source, v6_destination)),
    ] {
        let what = format!("send, inbound {version} header");
        let (_, raw) = handoff_exchange(&proxy, &backend, addr, &header);
        let (source, destination, len) = sent_header(&what, &raw, Some(b"h2"));
        assert_eq!(source, Some(v6_source), "{what}");
        let destination = destination.expect("a destination");
        assert_eq!(
            (destination.ip().to_canonical(), destination.port()),
            (addr.ip(), addr.port()),
            "{what}: the destination is the listener"
        );
        assert_bytes(&what, &raw[len..], &hello_and_payload());
    }
    assert!(backend.errors().is_empty(), "{:?}", backend.errors());
}

#[test]
fn relay_without_expect_proxy_is_refused_with_e208() {
    let dir = TempDir::new("e208");
    let listener = free_addr().to_string();
    let backend = free_addr().to_string();
    let template = |expect_proxy: bool| {
        let extra: &[&str] = if expect_proxy {
            &["expect_proxy = true"]
        } else {
            &[]
        };
        let built = ConfigBuilder::new()
            .global("command_socket = \"preread.sock\"")
            .listener("main", extra)
            .cluster("relayed", &["proxy_protocol = \"relay\""])
            .frontend("relayed", "main", Some(SNI), &[])
            .backend("relayed", "relayed-0", backend.parse().expect("addr"))
            .build();
        fill(&built, &[("addr:main", &listener)])
    };
    let path = dir.path().join("relay.toml");
    let path_arg = path.display().to_string();

    std::fs::write(&path, template(false)).expect("write config");
    let out = run_preread(&["-c", &path_arg, "config", "check"], dir.path(), T).expect("run");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(2), "config check: {stdout}");
    assert!(stdout.contains("E208"), "config check: {stdout}");
    assert_eq!(stdout.lines().count(), 1, "one problem, the E208: {stdout}");
    // `start` refuses it the same way (status 2, nothing started).
    let out = run_preread(&["-c", &path_arg, "start"], dir.path(), T).expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "start: {stderr}");
    assert!(stderr.contains("E208"), "start: {stderr}");

    // With expect_proxy on the listener, the same cluster is accepted.
    std::fs::write(&path, template(true)).expect("write config");
    let out = run_preread(&["-c", &path_arg, "config", "check"], dir.path(), T).expect("run");
    assert_eq!(
        out.status.code(),
        Some(0),
        "config check with expect_proxy: {}",
        String::from_utf8_lossy(&out.stdout)
    );
}

// ---------------------------------------------------------------------------
// 2. max_connections_per_ip
// ---------------------------------------------------------------------------

/// Opens a session through the proxy: `prefix` and the hello, then the
/// backend's line. The session stays open (the backend echoes).
fn open_session(addr: SocketAddr, prefix: &[u8], proxy: &ProxyProcess) -> TcpStream {
    let mut stream = client::connect(addr, T).expect("connect to the proxy");
    let mut sent = prefix.to_vec();
    sent.extend_from_slice(&hello());
    stream.write_all(&sent).expect("write");
    let line = read_line(&mut stream).unwrap_or_else(|e| {
        panic!(
            "session through {addr} with prefix {:?} not served: {e}\nstderr tail:\n{}",
            String::from_utf8_lossy(prefix),
            stderr_tail(proxy)
        )
    });
    assert_eq!(line, "backend=alpha-0");
    stream
}

/// Sends `bytes` on an open session and reads them back from the echo.
fn echo(stream: &mut TcpStream, bytes: &[u8]) -> Result<(), String> {
    stream
        .write_all(bytes)
        .map_err(|e| format!("write {bytes:?}: {e}"))?;
    let mut back = vec![0u8; bytes.len()];
    stream
        .read_exact(&mut back)
        .map_err(|e| format!("read the echo of {bytes:?}: {e}"))?;
    if back == bytes {
        Ok(())
    } else {
        Err(format!("echo of {bytes:?} came back as {back:?}"))
    }
}

/// Ends an open session from the client side: FIN, then the backend's
/// `bye` and the close.
fn close_session(mut stream: TcpStream) {
    stream.shutdown(Shutdown::Write).expect("shutdown write");
    let (rest, closed) = read_to_close(&mut stream, T);
    assert!(closed, "the session did not close");
    assert_eq!(rest, b"bye\n");
}

/// A connection that the proxy must close with a FIN and no byte: `prefix`
/// and the hello are sent (nothing more, so the proxy has read everything
/// and its close is a FIN, not a reset).
fn assert_closed_with_fin(addr: SocketAddr, prefix: &[u8], proxy: &ProxyProcess) {
    let mut stream = client::connect(addr, T).expect("connect to the proxy");
    let mut sent = prefix.to_vec();
    sent.extend_from_slice(&hello());
    stream.write_all(&sent).expect("write");
    let mut buf = [0u8; 256];
    match stream.read(&mut buf) {
        Ok(0) => {}
        Ok(n) => panic!(
            "a refused connection got {n} bytes: {:?}",
            String::from_utf8_lossy(&buf[..n])
        ),
        Err(e) => panic!(
            "a refused connection (prefix {:?}) was not closed with a FIN: {e}\nstderr tail:\n{}",
            String::from_utf8_lossy(prefix),
            stderr_tail(proxy)
        ),
    }
}

#[test]
fn per_ip_limit_refuses_past_the_limit_per_source_and_recovers() {
    let backend = PlainBackend::start("alpha-0");
    let config = ConfigBuilder::new()
        .global("worker_count = 1")
        .listener("main", &[])
        .listener("pp", &["expect_proxy = true"])
        .cluster("alpha", &["max_connections_per_ip = 2"])
        .frontend("alpha", "main", Some(SNI), &[])
        .frontend("alpha", "pp", Some(SNI), &[])
        .backend("alpha", "alpha-0", backend.addr())
        .build();
    let proxy = start(&config);
    let main = proxy.addr("main");
    let pp = proxy.addr("pp");
    let lb = |ip: &str, port: u16| -> SocketAddr { format!("{ip}:{port}").parse().expect("addr") };
    let dst = inbound_destination();

    // Two sessions from 127.0.0.1 are served; a third is closed at once.
    let first = open_session(main, &[], &proxy);
    let mut second = open_session(main, &[], &proxy);
    assert_closed_with_fin(main, &[], &proxy);
    wait_metric(&proxy, "tcp.refused.per_ip_limit", |v| v == 1);
    let refused = wait_logs(&proxy, "refused:per_ip_limit", 1);
    assert_eq!(refused[0]["listener"], main.to_string(), "{refused:?}");
    assert_eq!(refused[0]["sni"], SNI, "{refused:?}");
    assert_eq!(refused[0]["backend"], "-", "{refused:?}");
    // The refusal names whose limit it was.
    assert_eq!(refused[0]["cluster"], "alpha", "{refused:?}");
    assert_eq!(
        backend.accepted(),
        2,
        "a refused connection reached the backend"
    );
    // The served ones still work.
    echo(&mut second, b"still here\n").expect("second session");

    // Closing one makes room for a new one.
    close_session(first);
    wait_metric(&proxy, "tcp.active", |v| v == 1);
    let mut third = open_session(main, &[], &proxy);
    echo(&mut third, b"third\n").expect("third session");

    // Behind expect_proxy the limit applies to the header's source, not to
    // 127.0.0.1 (which holds two sessions on `main` right now).
    let from_1a = open_session(pp, &proxy_v2(lb("192.0.2.1", 40001), dst), &proxy);
    let from_1b = open_session(pp, &proxy_v1(lb("192.0.2.1", 40002), dst), &proxy);
    let from_2 = open_session(pp, &proxy_v2(lb("192.0.2.2", 40003), dst), &proxy);
    assert_closed_with_fin(pp, &proxy_v2(lb("192.0.2.1", 40004), dst), &proxy);
    wait_metric(&proxy, "tcp.refused.per_ip_limit", |v| v == 2);
    let refused = wait_logs(&proxy, "refused:per_ip_limit", 2);
    assert_eq!(refused[1]["listener"], pp.to_string(), "{refused:?}");
    assert_eq!(backend.accepted(), 6);

    // Every count returns to zero once the sessions close.
    for stream in [second, third, from_1a, from_1b, from_2] {
        close_session(stream);
    }
    wait_metric(&proxy, "tcp.active", |v| v == 0);
    let burst = [
        open_session(main, &[], &proxy),
        open_session(main, &[], &proxy),
        open_session(pp, &proxy_v2(lb("192.0.2.1", 40005), dst), &proxy),
        open_session(pp, &proxy_v1(lb("192.0.2.1", 40006), dst), &proxy),
    ];
    for stream in burst {
        close_session(stream);
    }
    let m = metrics(&proxy);
    assert_eq!(get(&m, "tcp.refused.per_ip_limit"), 2, "{m:?}");
    assert_eq!(logs_with(&proxy, "refused:per_ip_limit").len(), 2);
    assert_eq!(backend.accepted(), 10);
    wait_metric(&proxy, "tcp.active", |v| v == 0);
    assert!(backend.errors().is_empty(), "{:?}", backend.errors());
}

// ---------------------------------------------------------------------------
// 3. Slow and hostile clients
// ---------------------------------------------------------------------------

/// Clients dripping a hello (the benchmark with 1,000 is separate).
const DRIPPERS: usize = 50;
/// Idle clients that send nothing.
const IDLERS: usize = 100;
/// One byte per client every this long.
const DRIP_PAUSE: Duration = Duration::from_millis(200);
/// The listener's `sni_preread_timeout`.
const PREREAD_TIMEOUT: Duration = Duration::from_millis(1000);
/// How late past a deadline a close may be seen (timer, scheduling on a
/// shared CI machine, the 10 ms poll of the test).
const SLACK: Duration = Duration::from_millis(1000);
/// How long a routed exchange during the drip may take: well under the
/// preread timeout.
const PROMPT: Duration = Duration::from_millis(250);
/// Routed exchanges made during the drip.
const ROUTED_DURING_DRIP: usize = 10;

/// One dripping client, driven by the test's single loop.
#[derive(Debug)]
struct Dripper {
    stream: TcpStream,
    sent: usize,
    next_write: Instant,
    first_byte: Option<Instant>,
    closed: Option<Instant>,
    received: usize,
    how: &'static str,
}

impl Dripper {
    /// Sees whether the proxy closed the connection (or sent something).
    fn check(&mut self, now: Instant) {
        let mut buf = [0u8; 256];
        match self.stream.read(&mut buf) {
            Ok(0) => {
                self.closed = Some(now);
                self.how = "fin";
            }
            Ok(n) => self.received += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => {
                self.closed = Some(now);
                self.how = "reset";
            }
        }
    }

    /// Writes the next byte if it is due.
    fn drip(&mut self, hello: &[u8], now: Instant) {
        if now < self.next_write || self.sent >= hello.len() {
            return;
        }
        let before = Instant::now();
        match self.stream.write(&hello[self.sent..=self.sent]) {
            Ok(n) => {
                if self.sent == 0 {
                    // Taken before the write: the proxy's deadline is armed
                    // when it reads the byte, which is later.
                    self.first_byte = Some(before);
                }
                self.sent += n;
                self.next_write += DRIP_PAUSE;
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(_) => {
                self.closed = Some(now);
                self.how = "write failed";
            }
        }
    }
}

/// A routed exchange: the hello, the backend's line, FIN, `bye`, close.
/// Returns how long it took.
fn routed_exchange(addr: SocketAddr) -> Result<Duration, String> {
    let started = Instant::now();
    let mut stream = client::connect(addr, T)?;
    stream
        .write_all(&hello())
        .map_err(|e| format!("write: {e}"))?;
    let line = read_line(&mut stream)?;
    if line != "backend=alpha-0" {
        return Err(format!("unexpected line {line:?}"));
    }
    stream
        .shutdown(Shutdown::Write)
        .map_err(|e| format!("shutdown: {e}"))?;
    let (rest, closed) = read_to_close(&mut stream, T);
    if !closed || rest != b"bye\n" {
        return Err(format!("no clean end: closed {closed}, rest {rest:?}"));
    }
    Ok(started.elapsed())
}

#[test]
fn dripping_clients_are_rejected_at_the_deadline_while_routing_stays_prompt() {
    let backend = PlainBackend::start("alpha-0");
    let config = ConfigBuilder::new()
        .global("worker_count = 1")
        .listener(
            "main",
            &[&format!(
                "sni_preread_timeout = {}",
                PREREAD_TIMEOUT.as_millis()
            )],
        )
        .frontend("alpha", "main", Some(SNI), &[])
        .backend("alpha", "alpha-0", backend.addr())
        .build();
    let proxy = start(&config);
    let addr = proxy.addr("main");
    wait_metric(&proxy, "tcp.active", |v| v == 0);
    let hello = hello();

    let started = Instant::now();
    let mut drippers: Vec<Dripper> = (0..DRIPPERS)
        .map(|i| {
            let stream = client::connect(addr, T).expect("connect a dripping client");
            stream.set_nonblocking(true).expect("nonblocking");
            Dripper {
                stream,
                sent: 0,
                // Staggered over one pause.
                next_write: started + DRIP_PAUSE * u32::try_from(i).unwrap_or(0) / 50,
                first_byte: None,
                closed: None,
                received: 0,
                how: "",
            }
        })
        .collect();

    let routed = std::thread::scope(|scope| {
        // Routed connections while the drip goes on: paced over the first
        // preread timeout, when every dripping client is mid-hello.
        let routing = scope.spawn(|| {
            (0..ROUTED_DURING_DRIP)
                .map(|_| {
                    std::thread::sleep(PREREAD_TIMEOUT / 12);
                    routed_exchange(addr)
                })
                .collect::<Vec<_>>()
        });
        let bound = started + DRIP_PAUSE + PREREAD_TIMEOUT + SLACK * 3;
        // 10 ms a round: bounded by the count and by `bound`.
        for _ in 0..2_000 {
            let now = Instant::now();
            for dripper in drippers.iter_mut().filter(|d| d.closed.is_none()) {
                dripper.check(now);
                if dripper.closed.is_none() {
                    dripper.drip(&hello, now);
                }
            }
            if drippers.iter().all(|d| d.closed.is_some()) || now > bound {
                break;
            }
            std::thread::sleep(POLL);
        }
        routing.join().expect("the routing thread")
    });

    let closes: Vec<Duration> = drippers
        .iter()
        .filter_map(|d| Some(d.closed?.duration_since(d.first_byte?)))
        .collect();
    eprintln!(
        "drip: routed exchanges {:?}; dripping clients closed {:?}..{:?} after their first byte",
        routed.iter().flatten().collect::<Vec<_>>(),
        closes.iter().min(),
        closes.iter().max()
    );
    for (i, result) in routed.iter().enumerate() {
        match result {
            Ok(took) => assert!(
                *took < PROMPT,
                "routed exchange {i} during the drip took {took:?} (bound {PROMPT:?}); all: {routed:?}"
            ),
            Err(e) => panic!(
                "routed exchange {i} during the drip failed: {e}\nstderr tail:\n{}",
                stderr_tail(&proxy)
            ),
        }
    }
    let late: Vec<String> = drippers
        .iter()
        .enumerate()
        .filter_map(|(i, d)| {
            let first = d.first_byte?;
            let Some(closed) = d.closed else {
                return Some(format!("#{i}: still open after {} bytes", d.sent));
            };
            let after = closed.duration_since(first);
            let in_bounds = after >= PREREAD_TIMEOUT.saturating_sub(Duration::from_millis(10))
                && after <= PREREAD_TIMEOUT + SLACK;
            (!in_bounds || d.received > 0).then(|| {
                format!(
                    "#{i}: closed ({}) {after:?} after its first byte, {} bytes sent, {} received",
                    d.how, d.sent, d.received
                )
            })
        })
        .collect();
    assert!(
        late.is_empty(),
        "dripping clients not closed at the {PREREAD_TIMEOUT:?} deadline (+{SLACK:?}): {late:?}\nstderr tail:\n{}",
        stderr_tail(&proxy)
    );
    assert!(
        drippers.iter().all(|d| d.first_byte.is_some()),
        "a dripping client never sent"
    );
    let m = {
        let total = i64::try_from(DRIPPERS).unwrap_or(i64::MAX);
        wait_metric(&proxy, "tcp.sni_preread.rejected.fragmented", |v| {
            v == total
        });
        wait_metric(&proxy, "tcp.active", |v| v == 0);
        metrics(&proxy)
    };
    assert_eq!(
        rejected_sum(&m),
        i64::try_from(DRIPPERS).unwrap_or(i64::MAX),
        "only fragmented: {m:?}"
    );
    assert_eq!(
        get(&m, "tcp.sni_preread.routed"),
        i64::try_from(ROUTED_DURING_DRIP).unwrap_or(i64::MAX),
        "{m:?}"
    );
    assert_eq!(
        wait_logs(&proxy, "rejected:fragmented", DRIPPERS).len(),
        DRIPPERS
    );
    assert_eq!(backend.accepted(), ROUTED_DURING_DRIP);
    assert_eq!(get(&m, "buffers.in_use"), 0, "{m:?}");
}

/// A duration string reaches the worker's timer in milliseconds: with
/// `front_timeout = "1500ms"`, an idle client is closed after 1.5 s, not
/// after 1 s or 2 s as a value rounded to whole seconds would be.
#[test]
fn a_front_timeout_in_milliseconds_is_kept_to_the_millisecond() {
    let backend = PlainBackend::start("alpha-0");
    let config = ConfigBuilder::new()
        .global("worker_count = 1")
        // The idle clients must be sessions, not held by the kernel.
        .global("defer_accept = false")
        .listener("main", &["front_timeout = \"1500ms\""])
        .frontend("alpha", "main", Some(SNI), &[])
        .backend("alpha", "alpha-0", backend.addr())
        .build();
    let proxy = start(&config);
    let addr = proxy.addr("main");
    let front_timeout = Duration::from_millis(1_500);
    let idle: Vec<(TcpStream, Instant)> = (0..3)
        .map(|_| {
            let stream = client::connect(addr, T).expect("connect an idle client");
            (stream, Instant::now())
        })
        .collect();
    for (i, (mut stream, connected)) in idle.into_iter().enumerate() {
        let (_, closed) = read_to_close(&mut stream, front_timeout + SLACK);
        let after = connected.elapsed();
        // The bounds tell 1500 ms from 1 s and from 2 s, whatever the load.
        assert!(
            closed && after >= Duration::from_millis(1_450) && after < Duration::from_millis(1_950),
            "#{i}: closed {closed} after {after:?}\nstderr tail:\n{}",
            stderr_tail(&proxy)
        );
    }
}

#[test]
fn idle_clients_hold_no_buffer_and_a_shorter_front_timeout_refuses_them() {
    let backend = PlainBackend::start("alpha-0");
    let config = ConfigBuilder::new()
        .global("worker_count = 1")
        // The idle clients must be sessions, not held by the kernel.
        .global("defer_accept = false")
        .listener("main", &["front_timeout = 1"])
        .frontend("alpha", "main", Some(SNI), &[])
        .backend("alpha", "alpha-0", backend.addr())
        .build();
    let proxy = start(&config);
    let addr = proxy.addr("main");
    wait_metric(&proxy, "tcp.active", |v| v == 0);
    let front_timeout = Duration::from_secs(1);

    let idle: Vec<(TcpStream, Instant)> = (0..IDLERS)
        .map(|_| {
            let stream = client::connect(addr, T).expect("connect an idle client");
            (stream, Instant::now())
        })
        .collect();
    let open = i64::try_from(IDLERS).unwrap_or(i64::MAX);
    wait_metric(&proxy, "tcp.active", |v| v == open);
    // Every idle client is a session, and none holds a buffer.
    for _ in 0..3 {
        let m = metrics(&proxy);
        assert_eq!(
            get(&m, "buffers.in_use"),
            0,
            "idle clients hold buffers: {m:?}"
        );
        assert_eq!(get(&m, "tcp.active"), open, "{m:?}");
        std::thread::sleep(POLL);
    }

    // Each sees the close within front_timeout + slack of its connect.
    let mut wrong = Vec::new();
    for (i, (mut stream, connected)) in idle.into_iter().enumerate() {
        let (received, closed) = read_to_close(&mut stream, front_timeout + SLACK * 2);
        let after = connected.elapsed();
        if !closed
            || !received.is_empty()
            || after < front_timeout.saturating_sub(Duration::from_millis(50))
            || after > front_timeout + SLACK
        {
            wrong.push(format!(
                "#{i}: closed {closed} after {after:?}, {} bytes",
                received.len()
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "idle clients not closed by front_timeout = 1 s: {wrong:?}\nstderr tail:\n{}",
        stderr_tail(&proxy)
    );
    wait_metric(&proxy, "tcp.active", |v| v == 0);
    let m = metrics(&proxy);
    assert_eq!(
        rejected_sum(&m),
        0,
        "idle clients counted as rejects: {m:?}"
    );
    assert_eq!(get(&m, "buffers.in_use"), 0, "{m:?}");
    assert_eq!(get(&m, "tcp.sni_preread.active"), 0, "{m:?}");
    // Silent until a timeout: refused, each once, with its line.
    assert_eq!(get(&m, "tcp.refused.silent_timeout"), open, "{m:?}");
    let logs = proxy
        .wait_access_logs(T, |lines| lines.len() >= IDLERS)
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        logs.len() == IDLERS
            && logs
                .iter()
                .all(|l| l.get("outcome").map(String::as_str) == Some("refused:silent_timeout")),
        "idle clients' access-log lines: {logs:?}"
    );
    assert_eq!(backend.accepted(), 0);
}

// ---------------------------------------------------------------------------
// 4. Soft and hard stops
// ---------------------------------------------------------------------------

fn stop_proxy(backend: &PlainBackend) -> ProxyProcess {
    let config = ConfigBuilder::new()
        .global("worker_count = 1")
        .listener("main", &[])
        .frontend("alpha", "main", Some(SNI), &[])
        .backend("alpha", "alpha-0", backend.addr())
        .build();
    start(&config)
}

/// A new connection is refused: the connect fails, or the connection is
/// closed at once without a byte.
fn new_connection_refused(addr: SocketAddr) -> Result<(), String> {
    let Ok(mut stream) = TcpStream::connect_timeout(&addr, Duration::from_secs(1)) else {
        return Ok(());
    };
    let _ = stream.write_all(&hello());
    stream
        .set_read_timeout(Some(Duration::from_secs(1)))
        .map_err(|e| format!("set timeout: {e}"))?;
    let mut buf = [0u8; 256];
    match stream.read(&mut buf) {
        Ok(0) => Ok(()),
        Ok(n) => Err(format!(
            "a new connection was served: {:?}",
            String::from_utf8_lossy(&buf[..n])
        )),
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ) =>
        {
            Err("a new connection was accepted and held open".to_owned())
        }
        Err(_) => Ok(()),
    }
}

#[test]
fn soft_stop_drains_the_open_session_and_refuses_new_ones() {
    let backend = PlainBackend::start("alpha-0");
    let mut proxy = stop_proxy(&backend);
    let addr = proxy.addr("main");
    let mut session = open_session(addr, &[], &proxy);
    echo(&mut session, b"before the stop\n").expect("echo before the stop");

    proxy.signal(libc::SIGTERM).expect("SIGTERM");
    proxy
        .wait_stderr("stopped listening", T)
        .unwrap_or_else(|e| panic!("{e}"));
    new_connection_refused(addr)
        .unwrap_or_else(|e| panic!("after SIGTERM: {e}\nstderr tail:\n{}", stderr_tail(&proxy)));

    // The established session goes on.
    echo(&mut session, b"after the stop\n").unwrap_or_else(|e| {
        panic!(
            "the open session broke after SIGTERM: {e}\nstderr tail:\n{}",
            stderr_tail(&proxy)
        )
    });
    assert!(
        proxy.exit_status().is_none(),
        "the proxy exited with a session open; stderr tail:\n{}",
        stderr_tail(&proxy)
    );

    // The client ends it; the proxy exits 0 soon after, not at its grace
    // cut (which would drop the session without an access-log line).
    close_session(session);
    let closed = Instant::now();
    let status = proxy
        .wait_exit(T)
        .unwrap_or_else(|e| panic!("{e}\nstderr tail:\n{}", stderr_tail(&proxy)));
    let took = closed.elapsed();
    assert!(
        status.success(),
        "soft stop exit {status}; stderr tail:\n{}",
        stderr_tail(&proxy)
    );
    assert!(
        took < Duration::from_secs(2),
        "the proxy exited {took:?} after its last session closed; stderr tail:\n{}",
        stderr_tail(&proxy)
    );
    let routed = logs_with(&proxy, "routed");
    assert_eq!(routed.len(), 1, "the drained session's line: {routed:?}");
    assert!(
        !proxy.stderr_text().contains("did not end in time"),
        "the worker was cut: {}",
        stderr_tail(&proxy)
    );
}

#[test]
fn hard_stop_closes_the_open_session_at_once() {
    let backend = PlainBackend::start("alpha-0");
    let mut proxy = stop_proxy(&backend);
    let addr = proxy.addr("main");
    let mut session = open_session(addr, &[], &proxy);
    echo(&mut session, b"before the stop\n").expect("echo before the stop");

    let ordered = Instant::now();
    let out = proxy
        .cli(&["shutdown", "--hard"])
        .expect("preread shutdown --hard");
    assert!(
        out.status.success(),
        "shutdown --hard: {} {:?}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let (received, closed) = read_to_close(&mut session, T);
    let took = ordered.elapsed();
    assert!(
        closed,
        "the open session was not closed by the hard stop; stderr tail:\n{}",
        stderr_tail(&proxy)
    );
    assert!(received.is_empty(), "{received:?}");
    assert!(
        took < Duration::from_secs(2),
        "the session closed {took:?} after the hard stop was ordered"
    );
    let status = proxy
        .wait_exit(T)
        .unwrap_or_else(|e| panic!("{e}\nstderr tail:\n{}", stderr_tail(&proxy)));
    assert!(status.success(), "hard stop exit {status}");
    let cut = logs_with(&proxy, "refused:shutdown");
    assert_eq!(cut.len(), 1, "{:?}", proxy.access_logs());
    assert_eq!(cut[0]["backend"], "alpha-0", "{cut:?}");
    new_connection_refused(addr).expect("after the hard stop");
}
