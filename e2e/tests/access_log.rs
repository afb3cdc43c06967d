//! End-to-end tests of the access log against the real `preread` process:
//! the `ech`, `tls_version` and `hello_bytes` fields of captured hellos in
//! both formats; a log pointed at a FIFO nobody reads, which must never
//! slow routing (lines are dropped and counted in
//! `access_log.dropped_total` instead); and the syslog targets, whose
//! RFC 5424 datagrams a listener of the test receives (UDP on loopback, and
//! a Unix datagram socket).
//!
//! Build the binary first: `cargo build -p proxy-shell`. Loopback only;
//! every load loop is bounded in count and time; the proxy and the
//! backends are stopped on Drop.

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::io::Write;
use std::net::{Shutdown, SocketAddr, UdpSocket};
use std::os::unix::fs::OpenOptionsExt as _;
use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::time::{Duration, Instant};

use e2e::backend::PlainBackend;
use e2e::client::{self, read_line, read_to_close};
use e2e::proxy::{ConfigBuilder, ProxyProcess, parse_logfmt};
use e2e::testkit::{TempDir, capture, eventually, start, stderr_tail};

/// Bound of one wait.
const T: Duration = Duration::from_secs(10);

/// Sends `bytes` to the proxy, reads the backend's line, and closes.
fn session(proxy: &ProxyProcess, bytes: &[u8]) -> Result<String, String> {
    let mut stream = client::connect(proxy.listener(), T)?;
    stream.write_all(bytes).map_err(|e| format!("write: {e}"))?;
    let line = read_line(&mut stream)?;
    stream
        .shutdown(Shutdown::Write)
        .map_err(|e| format!("shutdown: {e}"))?;
    let (_, closed) = read_to_close(&mut stream, T);
    if !closed {
        return Err("the session did not close".to_owned());
    }
    Ok(line)
}

/// The captures of the field test: (file, sni, ech, tls_version,
/// hello_bytes) as the manifest of `testdata/clienthellos` gives them.
const CAPTURES: [(&str, &str, &str, &str, &str); 3] = [
    // Chromium's hello carries an outer (GREASE) ECH extension and routes
    // on its visible name.
    ("chromium_a_1.bin", "a.example.com", "outer", "1.3", "1921"),
    // An ECH outer hello routed on its public name.
    (
        "gen_j_ech_outer_public_name.bin",
        "public.example.net",
        "outer",
        "1.3",
        "627",
    ),
    ("curl_tls12.bin", "c.example.com", "absent", "1.2", "224"),
];

fn fields_proxy(backend: &PlainBackend, globals: &[&str]) -> ProxyProcess {
    let mut config = ConfigBuilder::new().listener("main", &[]);
    for line in globals {
        config = config.global(line);
    }
    for (_, sni, ..) in CAPTURES {
        config = config.frontend("plain", "main", Some(sni), &[]);
    }
    start(&config.backend("plain", "plain-0", backend.addr()).build())
}

#[test]
fn ech_tls_version_and_hello_bytes_are_logged_in_both_formats() {
    let backend = PlainBackend::start("plain-0");
    let proxy = fields_proxy(&backend, &[]);
    let dir = TempDir::new("access-json");
    let json_path = dir.path().join("access.json");
    let json_proxy = fields_proxy(
        &backend,
        &[
            &format!("access_logs = \"{}\"", json_path.display()),
            "access_log_format = \"json\"",
        ],
    );
    for (file, ..) in CAPTURES {
        for proxy in [&proxy, &json_proxy] {
            let line = session(proxy, &capture(file))
                .unwrap_or_else(|e| panic!("{file}: {e}\n{}", stderr_tail(proxy)));
            assert_eq!(line, "backend=plain-0", "{file}");
        }
    }
    // A session that never sent a hello has none of the three.
    let not_tls = session(&proxy, b"GET / HTTP/1.0\r\n\r\n");
    assert!(not_tls.is_err(), "no default cluster: refused");

    let mut logfmt = Vec::new();
    assert!(
        eventually(T, || {
            logfmt = proxy.access_logs();
            logfmt.len() == CAPTURES.len() + 1
        }),
        "{logfmt:?}"
    );
    let mut json: Vec<serde_json::Value> = Vec::new();
    assert!(
        eventually(T, || {
            let text = std::fs::read_to_string(&json_path).unwrap_or_default();
            json = text
                .lines()
                .filter_map(|l| serde_json::from_str(l).ok())
                .collect();
            json.len() == CAPTURES.len()
        }),
        "{json:?}"
    );
    for (file, sni, ech, version, bytes) in CAPTURES {
        let by_sni =
            |line: &&BTreeMap<String, String>| line.get("sni").map(String::as_str) == Some(sni);
        let line = logfmt
            .iter()
            .find(by_sni)
            .unwrap_or_else(|| panic!("{file}: no line for {sni} in {logfmt:?}"));
        let got = ["outcome", "ech", "tls_version", "hello_bytes"]
            .map(|key| line.get(key).map_or("", String::as_str));
        assert_eq!(got, ["routed", ech, version, bytes], "{file}: {line:?}");

        let object = json
            .iter()
            .find(|o| o["sni"] == sni)
            .unwrap_or_else(|| panic!("{file}: no JSON line for {sni}"));
        assert_eq!(object["ech"], ech, "{file}");
        assert_eq!(object["tls_version"], version, "{file}");
        assert_eq!(object["hello_bytes"].to_string(), bytes, "{file}: a number");
    }
    let refused = logfmt
        .iter()
        .find(|l| l.get("outcome").map(String::as_str) == Some("rejected:not_tls"))
        .unwrap_or_else(|| panic!("no not_tls line in {logfmt:?}"));
    let unknown = ["ech", "tls_version", "hello_bytes"].map(|k| refused.get(k).cloned());
    assert_eq!(
        unknown,
        [
            Some("-".to_owned()),
            Some("-".to_owned()),
            Some("-".to_owned())
        ]
    );
}

/// A catch-all listener to a plain backend, logging to `access_logs`.
fn catch_all_proxy(backend: &PlainBackend, globals: &[&str]) -> ProxyProcess {
    let mut config = ConfigBuilder::new()
        .listener("main", &[])
        .frontend("plain", "main", None, &[])
        .backend("plain", "plain-0", backend.addr());
    for line in globals {
        config = config.global(line);
    }
    start(&config.build())
}

/// Runs `count` sessions one after the other; how long they took.
fn sessions(proxy: &ProxyProcess, count: usize) -> Duration {
    let started = Instant::now();
    for i in 0..count {
        let line = session(proxy, b"ping\n")
            .unwrap_or_else(|e| panic!("session {i}: {e}\n{}", stderr_tail(proxy)));
        assert_eq!(line, "backend=plain-0");
        assert!(
            started.elapsed() < 4 * T,
            "{i} sessions took {:?}",
            started.elapsed()
        );
    }
    started.elapsed()
}

fn mkfifo(path: &Path) {
    let made = std::process::Command::new("mkfifo").arg(path).status();
    assert!(made.is_ok_and(|s| s.success()), "mkfifo {}", path.display());
}

const DROPPED: &str = "access_log.dropped_total";
/// Sessions of one measured batch.
const BATCH: usize = 200;

#[test]
fn a_fifo_nobody_reads_never_slows_routing_and_the_drops_are_counted() {
    let backend = PlainBackend::start("plain-0");
    let baseline = catch_all_proxy(&backend, &["access_logs = \"off\""]);
    let unlogged = sessions(&baseline, BATCH);
    drop(baseline);

    let dir = TempDir::new("access-fifo");
    let fifo = dir.path().join("access.fifo");
    mkfifo(&fifo);
    // Held open for reading, never read: once the pipe's buffer is full,
    // every write to it blocks.
    let _reader = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(&fifo)
        .expect("open the FIFO's read end");
    let mut proxy = catch_all_proxy(
        &backend,
        &[
            &format!("access_logs = \"{}\"", fifo.display()),
            "access_log_queue = 16",
        ],
    );
    // Fill the pipe and the queue: the writer is stuck from then on.
    let filled = Instant::now();
    let mut filling = 0;
    while proxy.metric(DROPPED) == 0 {
        let _ = sessions(&proxy, 50);
        filling += 50;
        assert!(
            filling <= 5_000 && filled.elapsed() < 6 * T,
            "no line dropped after {filling} sessions"
        );
    }
    let before = proxy.metric(DROPPED);
    let stalled = sessions(&proxy, BATCH);
    let dropped = proxy.metric(DROPPED) - before;
    assert_eq!(
        dropped, BATCH as i64,
        "with the writer stuck, every line of the batch is dropped"
    );
    eprintln!(
        "{BATCH} sessions: {:.0}/s with the access log off, {:.0}/s with it stuck on a full \
         FIFO ({filling} sessions to fill it)",
        BATCH as f64 / unlogged.as_secs_f64(),
        BATCH as f64 / stalled.as_secs_f64()
    );
    assert!(
        stalled <= unlogged * 3 + Duration::from_secs(1),
        "routing slowed down: {stalled:?} against {unlogged:?} without a log"
    );
    // A stuck writer does not hold the stop either.
    let status = proxy
        .stop_soft_within(T)
        .unwrap_or_else(|e| panic!("{e}\n{}", stderr_tail(&proxy)));
    assert!(status.success(), "{status}");
    assert!(
        proxy.stderr_text().contains("queued line(s) lost"),
        "{}",
        stderr_tail(&proxy)
    );
}

#[test]
fn a_fifo_without_a_reader_queues_then_drops_and_routing_goes_on() {
    let backend = PlainBackend::start("plain-0");
    let dir = TempDir::new("access-fifo-unread");
    let fifo = dir.path().join("access.fifo");
    mkfifo(&fifo);
    // Nobody ever opens it for reading: the writer waits in its open.
    let proxy = catch_all_proxy(
        &backend,
        &[
            &format!("access_logs = \"{}\"", fifo.display()),
            "access_log_queue = 16",
        ],
    );
    let _ = sessions(&proxy, 100);
    // Every session logs a line (on a catch-all listener the harness's
    // readiness probe too): all but the queue's 16 are dropped.
    let accepted = proxy.metric("tcp.accepted");
    assert!(accepted > 100, "{accepted}");
    assert!(
        eventually(T, || proxy.metric(DROPPED) == accepted - 16),
        "{DROPPED} = {} of {accepted} lines",
        proxy.metric(DROPPED)
    );
}

/// The fields of an RFC 5424 message: PRI and VERSION, TIMESTAMP,
/// HOSTNAME, APP-NAME, PROCID, MSGID, STRUCTURED-DATA, then the MSG after
/// its UTF-8 BOM.
fn rfc5424(datagram: &[u8]) -> (Vec<String>, String) {
    let text = String::from_utf8_lossy(datagram).into_owned();
    let (head, msg) = text
        .split_once(" \u{feff}")
        .unwrap_or_else(|| panic!("no BOM before the MSG: {text:?}"));
    (head.split(' ').map(str::to_owned).collect(), msg.to_owned())
}

fn check_rfc5424(datagram: &[u8], proxy: &ProxyProcess) {
    let (header, msg) = rfc5424(datagram);
    assert_eq!(header.len(), 7, "{header:?}");
    assert_eq!(header[0], "<134>1", "local0.info, version 1");
    let ts = &header[1];
    assert!(
        ts.len() == 24 && ts.ends_with('Z') && ts.as_bytes()[10] == b'T',
        "RFC 3339 UTC with milliseconds: {ts}"
    );
    assert!(!header[2].is_empty(), "a HOSTNAME or -");
    assert_eq!(
        header[3..],
        ["preread", &proxy.pid().to_string(), "access", "-"]
    );
    let line = parse_logfmt(&msg);
    assert_eq!(
        line.get("outcome").map(String::as_str),
        Some("routed"),
        "{msg}"
    );
    assert_eq!(line.get("ts"), Some(ts), "the header's time is the line's");
}

#[test]
fn syslog_targets_receive_rfc5424_messages_over_udp_and_a_unix_socket() {
    let backend = PlainBackend::start("plain-0");

    let udp = UdpSocket::bind("127.0.0.1:0").expect("bind the UDP listener");
    udp.set_read_timeout(Some(T)).expect("read timeout");
    let server: SocketAddr = udp.local_addr().expect("address");
    let proxy = catch_all_proxy(
        &backend,
        &[&format!("access_logs = \"syslog:udp://{server}\"")],
    );
    let _ = sessions(&proxy, 3);
    let mut buf = [0u8; 4096];
    for _ in 0..3 {
        let (n, from) = udp.recv_from(&mut buf).expect("a datagram from the proxy");
        assert!(from.ip().is_loopback());
        check_rfc5424(&buf[..n], &proxy);
    }
    drop(proxy);

    let dir = TempDir::new("access-syslog");
    let path = dir.path().join("log");
    let daemon = UnixDatagram::bind(&path).expect("bind the Unix listener");
    daemon.set_read_timeout(Some(T)).expect("read timeout");
    let proxy = catch_all_proxy(
        &backend,
        &[&format!("access_logs = \"syslog:{}\"", path.display())],
    );
    let _ = sessions(&proxy, 1);
    let n = daemon.recv(&mut buf).expect("a datagram from the proxy");
    check_rfc5424(&buf[..n], &proxy);
}

#[test]
fn a_syslog_socket_nobody_listens_on_stops_the_start_with_the_reason() {
    let dir = TempDir::new("access-syslog-none");
    let path = dir.path().join("no-daemon");
    let config = ConfigBuilder::new()
        .global(&format!("access_logs = \"syslog:{}\"", path.display()))
        .listener("main", &[])
        .build();
    let error = ProxyProcess::start(&config).expect_err("no daemon: no start");
    assert!(
        error.contains("cannot open the access log") && error.contains("no-daemon"),
        "{error}"
    );
}
