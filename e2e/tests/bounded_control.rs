//! End-to-end tests of what surrounds the data path under hostile or broken
//! local clients, each reproducing a finding of an adversarial run: a
//! command client that floods requests and never reads, clients that send
//! half a frame and wait, `state load` of a FIFO, a device or a huge file,
//! clients that drip a metrics request, and state files cut at a line
//! boundary, left empty, of the older format, or with the temp files of
//! killed saves beside them.
//!
//! Build the binary first: `cargo build -p proxy-shell`. Loopback only;
//! every loop is bounded in count and time.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::Output;
use std::thread;
use std::time::{Duration, Instant};

use command::channel::{DEFAULT_MAX_FRAME_LEN, E_CHANNEL_IO, FrameDecoder, encode_frame};
use command::proto::{self, request::RequestType};
use command::state_file::render_state;
use e2e::backend::{BackendConfig, TlsBackend};
use e2e::client::tls_request;
use e2e::proxy::{ConfigBuilder, ProxyProcess, StartOptions, free_addr, run_preread};
use e2e::testkit::{TempDir, eventually, start, tail};

/// The general bound of a wait.
const T: Duration = Duration::from_secs(5);

/// What the acceptance allows the proxy to grow by under the flood.
const RSS_GROWTH_CAP_KIB: u64 = 64 * 1024;

fn routed(addr: SocketAddr) -> Result<(), String> {
    let outcome = tls_request(addr, "a.example.com", &[], None)?;
    match outcome.backend() {
        Some("alpha-0") => Ok(()),
        other => Err(format!("routed to {other:?}")),
    }
}

/// A proxy routing `a.example.com` on listener `main` to a TLS backend.
fn routing_proxy(globals: &[&str]) -> (ProxyProcess, TlsBackend) {
    let alpha = TlsBackend::start(BackendConfig::new("alpha-0", &["a.example.com"]));
    let mut config = ConfigBuilder::new();
    for line in globals {
        config = config.global(line);
    }
    let config = config
        .listener("main", &[])
        .frontend("alpha", "main", Some("a.example.com"), &[])
        .backend("alpha", "alpha-0", alpha.addr())
        .build();
    (start(&config), alpha)
}

/// `VmRSS` of process `pid`, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

/// Open descriptors of process `pid`.
fn fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("proc fd")
        .count()
}

/// Open descriptors of process `pid` once the count has not moved for
/// 150 ms (sessions and command connections just ended still close), or
/// the lowest seen within [`T`].
fn settled_fds(pid: u32) -> usize {
    let deadline = Instant::now() + T;
    let (mut last, mut steady, mut lowest) = (fds(pid), 0, usize::MAX);
    while steady < 3 && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(50));
        let now = fds(pid);
        lowest = lowest.min(now);
        steady = if now == last { steady + 1 } else { 0 };
        last = now;
    }
    last.min(lowest)
}

fn frame_of(request_type: RequestType) -> Vec<u8> {
    let request = proto::Request {
        request_type: Some(request_type),
    };
    encode_frame(&request, DEFAULT_MAX_FRAME_LEN).expect("encode")
}

/// How a flood ended.
#[derive(Debug)]
struct Flood {
    frames_written: usize,
    /// The write error that ended it (the proxy closed the connection), or
    /// `None` when every frame went out.
    ended_by: Option<ErrorKind>,
    elapsed: Duration,
}

/// Writes `count` copies of `frame` on a non-blocking connection, never
/// reading. Once all are out, holds the connection for `hold` so the proxy
/// has time to answer them into memory. Bounded by `limit` in all.
fn flood(socket: &Path, frame: &[u8], count: usize, hold: Duration, limit: Duration) -> Flood {
    let mut stream = UnixStream::connect(socket).expect("connect");
    stream.set_nonblocking(true).expect("non-blocking");
    let started = Instant::now();
    let batch = frame.repeat(8192);
    let total = frame.len() * count;
    let mut written = 0;
    let ended_by = loop {
        if written >= total {
            let until = (started + limit).min(Instant::now() + hold);
            while Instant::now() < until {
                thread::sleep(Duration::from_millis(20));
            }
            break None;
        }
        if started.elapsed() >= limit {
            break Some(ErrorKind::TimedOut);
        }
        let offset = written % batch.len();
        let end = batch.len().min(offset + total - written);
        match stream.write(&batch[offset..end]) {
            Ok(n) => written += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => thread::sleep(Duration::from_millis(5)),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => break Some(e.kind()),
        }
    };
    Flood {
        frames_written: written / frame.len(),
        ended_by,
        elapsed: started.elapsed(),
    }
}

#[test]
fn a_client_flooding_requests_without_reading_is_held_back_and_traffic_keeps_routing() {
    let (proxy, _alpha) = routing_proxy(&["command_client_timeout = 2"]);
    let main = proxy.addr("main");
    routed(main).expect("routed before the flood");
    let pid = proxy.pid();
    let before = rss_kib(pid);

    let socket = proxy.socket_path().to_owned();
    let frame = frame_of(RequestType::QueryMetrics(proto::QueryMetrics::default()));
    let flooder = thread::spawn(move || {
        flood(
            &socket,
            &frame,
            400_000,
            Duration::from_secs(5),
            Duration::from_secs(20),
        )
    });
    let (mut peak, mut routes, mut queries) = (before, 0, 0);
    let mut failures = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(25);
    while !flooder.is_finished() && Instant::now() < deadline {
        peak = peak.max(rss_kib(pid));
        match routed(main) {
            Ok(()) => routes += 1,
            Err(e) => failures.push(e),
        }
        match proxy.metrics() {
            Ok(_) => queries += 1,
            Err(e) => failures.push(e),
        }
        thread::sleep(Duration::from_millis(50));
    }
    let flood = flooder.join().expect("flooder");
    peak = peak.max(rss_kib(pid));
    let growth = peak.saturating_sub(before);
    println!(
        "flood: {flood:?}; RSS {before} KiB before, {peak} KiB at most (+{growth} KiB); \
         {routes} routed, {queries} metrics queries answered meanwhile"
    );
    assert!(
        growth <= RSS_GROWTH_CAP_KIB,
        "RSS grew by {growth} KiB under the flood: {flood:?}"
    );
    assert!(failures.is_empty(), "during the flood: {failures:?}");
    assert!(
        routes >= 5 && queries >= 5,
        "{routes} routed, {queries} queries"
    );
    assert!(
        flood.frames_written < 400_000,
        "the proxy read every request of a client that reads nothing: {flood:?}"
    );
    assert!(
        matches!(
            flood.ended_by,
            Some(ErrorKind::BrokenPipe | ErrorKind::ConnectionReset)
        ),
        "the proxy did not close the flooder: {flood:?}"
    );
    assert!(flood.elapsed < Duration::from_secs(10), "{flood:?}");
    proxy
        .wait_stderr("command_client_timeout", T)
        .expect("the close is logged");
    routed(main).expect("routed after the flood");
}

/// Reads a command connection until the proxy closes it: the answers, and
/// when the close came.
fn answers_until_closed(
    stream: &mut UnixStream,
    limit: Duration,
) -> (Vec<proto::Response>, Instant) {
    stream.set_read_timeout(Some(limit)).expect("timeout");
    let mut decoder = FrameDecoder::new();
    let mut answers = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        while let Some(answer) = decoder.next_frame::<proto::Response>().expect("a frame") {
            answers.push(answer);
        }
        match stream.read(&mut buf) {
            Ok(0) => return (answers, Instant::now()),
            Ok(n) => decoder.push(&buf[..n]),
            Err(e) => panic!("not closed within {limit:?}: {e}"),
        }
    }
}

#[test]
fn two_hundred_half_frame_clients_are_closed_by_the_client_timeout() {
    let timeout = Duration::from_secs(1);
    let (proxy, _alpha) = routing_proxy(&["command_client_timeout = 1"]);
    let pid = proxy.pid();
    // A first session fills the worker's pool of idle splice pipes.
    routed(proxy.addr("main")).expect("routed");
    let before = settled_fds(pid);
    // A header announcing 100 bytes, and 50 of them.
    let mut half = 100u32.to_be_bytes().to_vec();
    half.extend_from_slice(&[0x0a; 50]);
    let started = Instant::now();
    let mut clients: Vec<UnixStream> = (0..200)
        .map(|_| {
            let mut stream = UnixStream::connect(proxy.socket_path()).expect("connect");
            stream.write_all(&half).expect("half a frame");
            stream
        })
        .collect();
    // Held, and the proxy goes on meanwhile.
    assert!(
        eventually(T, || fds(pid) >= before + 200),
        "{} descriptors, {before} before",
        fds(pid)
    );
    proxy.metrics().expect("answered while 200 clients wait");
    routed(proxy.addr("main")).expect("routed while 200 clients wait");

    for client in &mut clients {
        let (answers, closed) = answers_until_closed(client, T);
        let after = closed.duration_since(started);
        assert!(after >= timeout, "closed after {after:?}");
        assert!(
            after < timeout + Duration::from_secs(3),
            "closed after {after:?}"
        );
        assert_eq!(answers.len(), 1, "{answers:?}");
        assert_eq!(answers[0].error_code, E_CHANNEL_IO, "{answers:?}");
    }
    println!(
        "200 half-frame clients closed within {:?} of their connect",
        started.elapsed()
    );
    assert!(
        eventually(T, || fds(pid) <= before + 2),
        "{} descriptors left, {before} before",
        fds(pid)
    );
    proxy
        .wait_stderr("sent no whole request", T)
        .expect("the closes are logged");
}

/// `preread state load -f PATH` against `proxy`: refused within 2 s with
/// E012 and `what` on stderr.
fn load_refused(proxy: &ProxyProcess, path: &Path, what: &str) {
    let started = Instant::now();
    let path_s = path.display().to_string();
    let out = proxy
        .cli(&["state", "load", "-f", &path_s])
        .unwrap_or_else(|e| panic!("state load {path_s}: {e}"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("E012") && stderr.contains(what), "{stderr}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn state_load_reads_only_regular_files_up_to_the_cap_and_never_stalls() {
    let (proxy, _alpha) = routing_proxy(&[]);
    let fifo = proxy.dir().join("state.fifo");
    let c_path = std::ffi::CString::new(fifo.display().to_string()).expect("path");
    // SAFETY: a valid NUL-terminated path; mkfifo reads nothing else.
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
    load_refused(&proxy, &fifo, "a FIFO");
    load_refused(&proxy, Path::new("/dev/zero"), "a device");
    let huge = proxy.dir().join("huge.json");
    let file = std::fs::File::create(&huge).expect("create");
    // Sparse: one byte over the 64 MiB cap, no disk used.
    file.set_len((64 << 20) + 1).expect("set_len");
    load_refused(&proxy, &huge, "over the");
    // The command thread never stopped serving, and nothing changed.
    proxy
        .send(RequestType::Status(proto::Status {}))
        .expect("status");
    routed(proxy.addr("main")).expect("still routed");
}

// ---------------------------------------------------------------------------
// The metrics endpoint
// ---------------------------------------------------------------------------

/// One HTTP exchange: the status line and body the endpoint answered.
fn http(addr: SocketAddr, request: &[u8]) -> (String, String) {
    let mut stream = TcpStream::connect_timeout(&addr, T).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    stream.write_all(request).expect("write");
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).expect("read the answer");
    let text = String::from_utf8_lossy(&answer).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head.lines().next().unwrap_or_default().to_owned();
    (status, body.to_owned())
}

const SCRAPE: &[u8] = b"GET /metrics HTTP/1.1\r\nHost: preread\r\n\r\n";

/// A client that sends a request head one byte every `pause`, never
/// finishing it; returns when the endpoint closed the connection (or after
/// `limit`), with how long after its connect that was.
fn drip(
    addr: SocketAddr,
    pause: Duration,
    limit: Duration,
) -> thread::JoinHandle<Option<Duration>> {
    thread::spawn(move || {
        let mut stream = TcpStream::connect_timeout(&addr, T).ok()?;
        let started = Instant::now();
        let head = b"GET /metrics HTTP/1.1\r\nHost: a-very-slow-client.example\r\n";
        for byte in head.iter().cycle() {
            if started.elapsed() >= limit {
                return None;
            }
            if stream.write_all(std::slice::from_ref(byte)).is_err() {
                return Some(started.elapsed());
            }
            // The close shows up as a read of 0 (or a reset) before a write fails.
            stream.set_read_timeout(Some(pause)).ok()?;
            let mut sink = [0u8; 64];
            match stream.read(&mut sink) {
                Ok(_) => return Some(started.elapsed()),
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                Err(_) => return Some(started.elapsed()),
            }
        }
        None
    })
}

#[test]
fn a_scrape_behind_dripping_clients_answers_within_6_s() {
    let (proxy, _alpha) = routing_proxy(&["metrics_address = \"${addr:metrics}\""]);
    let metrics = proxy.addr("metrics");
    routed(proxy.addr("main")).expect("routed");

    let (status, body) = http(metrics, SCRAPE);
    assert_eq!(status, "HTTP/1.1 200 OK", "{body}");
    assert!(
        body.contains("# TYPE preread_connections_accepted_total counter"),
        "{body}"
    );
    assert_eq!(
        http(metrics, b"GET / HTTP/1.1\r\n\r\n").0,
        "HTTP/1.1 404 Not Found"
    );
    assert_eq!(
        http(metrics, b"POST /metrics HTTP/1.1\r\n\r\n").0,
        "HTTP/1.1 405 Method Not Allowed"
    );
    let big = format!("GET /metrics HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(9000));
    assert_eq!(
        http(metrics, big.as_bytes()).0,
        "HTTP/1.1 431 Request Header Fields Too Large"
    );
    assert_eq!(
        http(metrics, b"\x16\x03\x01\x00\x10hello\r\n\r\n").0,
        "HTTP/1.1 400 Bad Request"
    );

    // One client dripping a byte every 500 ms: a scrape is not held up, and
    // the dripper is cut 2 s after its accept.
    let pause = Duration::from_millis(500);
    let limit = Duration::from_secs(12);
    let dripper = drip(metrics, pause, limit);
    thread::sleep(Duration::from_millis(200));
    let started = Instant::now();
    let (status, _) = http(metrics, SCRAPE);
    let waited = started.elapsed();
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert!(
        waited < Duration::from_secs(1),
        "the scrape waited {waited:?}"
    );
    let cut = dripper
        .join()
        .expect("dripper")
        .expect("the dripper was never cut");
    assert!(
        cut >= Duration::from_millis(1800) && cut < Duration::from_millis(3500),
        "cut after {cut:?}"
    );

    // Eight drippers, twice the scrapes served at once: the scrape queued
    // behind them still answers within 6 s, with its 200.
    let drippers: Vec<_> = (0..8).map(|_| drip(metrics, pause, limit)).collect();
    thread::sleep(Duration::from_millis(200));
    let started = Instant::now();
    let (status, _) = http(metrics, SCRAPE);
    let waited = started.elapsed();
    println!("a scrape behind 8 dripping clients answered in {waited:?}");
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert!(
        waited < Duration::from_secs(6),
        "the scrape waited {waited:?}"
    );
    for dripper in drippers {
        let cut = dripper
            .join()
            .expect("dripper")
            .expect("a dripper was never cut");
        assert!(cut < Duration::from_millis(5500), "cut after {cut:?}");
    }
}

// ---------------------------------------------------------------------------
// State files
// ---------------------------------------------------------------------------

/// `preread start -c CONFIG` in `dir`, expected to give up by itself.
fn start_refused(dir: &Path, config: &Path) -> Output {
    let cfg = config.display().to_string();
    run_preread(&["start", "-c", &cfg], dir, T).expect("start ends by itself")
}

fn accepts(addr: SocketAddr) -> bool {
    TcpStream::connect_timeout(&addr, Duration::from_millis(300)).is_ok()
}

/// A pid that no process has: a child that already exited.
fn dead_pid() -> u32 {
    let mut child = std::process::Command::new("true").spawn().expect("spawn");
    let pid = child.id();
    child.wait().expect("wait");
    pid
}

#[test]
fn a_state_file_cut_at_a_line_boundary_is_refused_and_stale_temp_files_are_removed() {
    let alpha = TlsBackend::start(BackendConfig::new("alpha-0", &["a.example.com"]));
    let config = ConfigBuilder::new()
        .global("saved_state = \"${dir}/state.json\"")
        .global("automatic_state_save = true")
        .listener("main", &[])
        .frontend("alpha", "main", Some("a.example.com"), &[])
        .backend("alpha", "alpha-0", alpha.addr())
        .build();
    let mut first = start(&config);
    let main = first.addr("main");
    let dir = first.dir().to_owned();
    let state_path = dir.join("state.json");
    assert!(eventually(T, || state_path.exists()), "no state file saved");
    assert!(first.stop_soft().expect("soft stop").success());
    let full = std::fs::read_to_string(&state_path).expect("the state file");
    let lines: Vec<&str> = full.lines().collect();
    assert!(lines.len() >= 5, "{full}");

    // Killed saves left their temp files; one of a live process is not
    // stale.
    let dead = dead_pid();
    let stale = [
        format!(".state.json.tmp.{dead}.0"),
        format!(".state.json.tmp.{dead}.7"),
    ];
    let live = format!(".state.json.tmp.{}.0", std::process::id());
    for name in stale.iter().chain([&live]) {
        std::fs::write(dir.join(name), &full[..full.len() / 2]).expect("temp file");
    }

    // Cut after the frontend: the backend line and the trailer are gone.
    let cut: String = lines[..lines.len() - 2]
        .iter()
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&state_path, &cut).expect("cut");
    let out = start_refused(&dir, &first.config_path());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("E013") && stderr.contains("cut short"),
        "{stderr}"
    );
    assert!(!accepts(main), "the listener was opened");
    for name in &stale {
        assert!(!dir.join(name).exists(), "{name} left");
    }
    assert!(
        dir.join(&live).exists(),
        "the live save's temp file was removed"
    );
    assert!(
        stderr.contains("left by a save that was killed"),
        "{stderr}"
    );

    // Whole again, it boots from the file and routes.
    std::fs::write(&state_path, &full).expect("restore");
    let config_text = std::fs::read_to_string(first.config_path()).expect("config");
    let second = start(&config_text);
    second
        .wait_stderr("booting from the state file", T)
        .expect("booted from the file");
    routed(main).expect("routed from the state file");
}

/// A config declaring one listener, booting from `state.json` beside it.
fn config_with_state(dir: &Path, extra: &str) -> (std::path::PathBuf, SocketAddr) {
    let listener = free_addr();
    let config = dir.join("preread.toml");
    std::fs::write(
        &config,
        format!(
            "command_socket = \"preread.sock\"\nsaved_state = \"state.json\"\n{extra}\n\n\
             [[listeners]]\naddress = \"{listener}\"\n"
        ),
    )
    .expect("write config");
    (config, listener)
}

#[test]
fn an_empty_state_file_does_not_silently_replace_the_config() {
    let dir = TempDir::new("empty-state");
    let (config, listener) = config_with_state(dir.path(), "");
    let state = dir.path().join("state.json");

    // Header only: no trailer, refused as cut short.
    std::fs::write(&state, "{\"preread_state\":2}\n").expect("write");
    let out = start_refused(dir.path(), &config);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("E013"), "{stderr}");

    // A whole empty save: the operator chooses.
    std::fs::write(&state, render_state(&[]).expect("render")).expect("write");
    let out = start_refused(dir.path(), &config);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("E014") && stderr.contains("empty_saved_state"),
        "{stderr}"
    );
    assert!(!accepts(listener), "the listener was opened");

    let use_config = ConfigBuilder::new()
        .global("saved_state = \"${dir}/state.json\"")
        .global("empty_saved_state = \"use_config\"")
        .listener("main", &[])
        .build();
    let options = StartOptions::default().file("state.json", &render_state(&[]).expect("render"));
    let proxy = ProxyProcess::start_with(&use_config, &options).expect("starts from the config");
    assert!(accepts(proxy.addr("main")));
    proxy
        .wait_stderr("use_config", T)
        .expect("the choice is logged");

    let keep_empty = ConfigBuilder::new()
        .global("saved_state = \"${dir}/state.json\"")
        .global("empty_saved_state = \"keep_empty\"")
        .listener("main", &[])
        .build();
    let options = StartOptions {
        wait_listeners: false,
        ..options
    };
    let proxy = ProxyProcess::start_with(&keep_empty, &options).expect("starts empty");
    assert!(
        !accepts(proxy.addr("main")),
        "the config's listener was opened"
    );
    let listed = proxy.cli(&["listener", "list"]).expect("listener list");
    assert!(
        !String::from_utf8_lossy(&listed.stdout).contains(&proxy.addr("main").to_string()),
        "{listed:?}"
    );
}

#[test]
fn a_version_1_state_file_is_refused_until_sealed() {
    let dir = TempDir::new("legacy-state");
    let (config, listener) = config_with_state(dir.path(), "");
    let state = dir.path().join("state.json");
    let legacy = format!(
        "{{\"preread_state\":1}}\n\
         {{\"request_type\":{{\"add_tcp_listener\":{{\"address\":\"{listener}\",\"expect_proxy\":false,\"sni_preread_timeout\":5000,\"sni_preread_max_bytes\":16384,\"default_cluster\":null,\"server_first_timeout\":null,\"front_timeout\":60,\"back_timeout\":30,\"connect_timeout\":3,\"active\":true}}}}}}\n"
    );
    std::fs::write(&state, &legacy).expect("write");
    let out = start_refused(dir.path(), &config);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("E011") && stderr.contains("preread state seal"),
        "{stderr}"
    );

    let state_s = state.display().to_string();
    let out = run_preread(&["state", "seal", "-f", &state_s], dir.path(), T).expect("seal");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("1 request(s)"), "{stdout}");
    let sealed = std::fs::read_to_string(&state).expect("sealed");
    assert!(sealed.starts_with("{\"preread_state\":2}\n"), "{sealed}");
    assert!(sealed.contains("preread_state_end"), "{sealed}");

    for code in ["E011", "E013", "E014"] {
        let out = run_preread(&["explain", code], dir.path(), T).expect("explain");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && text.contains("Fix: "),
            "{code}: {text}"
        );
    }
    let explained = run_preread(&["explain", "E013"], dir.path(), T).expect("explain");
    assert!(String::from_utf8_lossy(&explained.stdout).contains("preread state seal"));

    // Sealed, the start boots from it: the file's listener, not the
    // config's.
    let template = ConfigBuilder::new()
        .global("saved_state = \"${dir}/state.json\"")
        .listener("main", &[])
        .build();
    let options = StartOptions {
        wait_listeners: false,
        ..StartOptions::default().file("state.json", &sealed)
    };
    let proxy = ProxyProcess::start_with(&template, &options).expect("boots from the sealed file");
    proxy
        .wait_stderr("booting from the state file", T)
        .expect("booted from the file");
    assert!(
        eventually(T, || accepts(listener)),
        "{}",
        tail(&proxy.stderr_text(), 20)
    );
}
