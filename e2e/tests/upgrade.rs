//! `preread upgrade`: the running proxy starts a new process of the
//! binary, hands it the listening sockets and the state, and drains its own
//! sessions once the new one serves.
//!
//! - A TLS session opened before the upgrade keeps echoing through it and
//!   closes normally, while clients connect in a loop: none is refused or
//!   reset, the command socket answers with a new pid, and the old process
//!   exits once its session closed.
//! - A scrape loop of the metrics endpoint across the upgrades sees no
//!   refused scrape: its socket is handed over like the listeners.
//! - A binary that exits at once (`/bin/false`), or one that never answers
//!   in time, leaves the old process serving; `upgrade` exits 1 and says
//!   why.
//!
//! Loopback only; every loop is bounded; the successor is stopped by pid.

use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use e2e::backend::{BackendConfig, TlsBackend};
use e2e::client::{TlsStream, half_close, read_line, read_tls_to_close, tls_client, tls_request};
use e2e::proxy::{ConfigBuilder, ProxyProcess};
use e2e::testkit::{eventually, stderr_tail};

const T: Duration = Duration::from_secs(10);
const CLIENTS: usize = 4;
/// The load's bound, whatever happens to the upgrade.
const LOAD_BOUND: Duration = Duration::from_secs(60);

fn config(alpha: &TlsBackend) -> String {
    ConfigBuilder::new()
        .global("worker_count = 2")
        .global("soft_stop_grace = 20")
        .global("metrics_address = \"${addr:metrics}\"")
        .listener("main", &[])
        .frontend("alpha", "main", Some("a.example.com"), &[])
        .backend("alpha", "alpha-0", alpha.addr())
        .build()
}

/// `GET /metrics` on `address`: the body of a 200 answer.
fn scrape(address: std::net::SocketAddr) -> Result<String, String> {
    let mut stream =
        std::net::TcpStream::connect_timeout(&address, T).map_err(|e| e.to_string())?;
    stream
        .set_read_timeout(Some(T))
        .map_err(|e| e.to_string())?;
    stream
        .write_all(b"GET /metrics HTTP/1.0\r\nHost: preread\r\n\r\n")
        .map_err(|e| e.to_string())?;
    let mut answer = String::new();
    std::io::Read::read_to_string(&mut stream, &mut answer).map_err(|e| e.to_string())?;
    match answer.split_once("\r\n\r\n") {
        Some((head, body))
            if head.starts_with("HTTP/1.1 200") || head.starts_with("HTTP/1.0 200") =>
        {
            Ok(body.to_owned())
        }
        _ => Err(format!("not a 200 answer: {answer:.200}")),
    }
}

/// The inodes of the IPv4 sockets listening on `port` (/proc/net/tcp): the
/// kernel sockets themselves, whichever process holds them.
fn listening_inodes(port: u16) -> std::collections::BTreeSet<u64> {
    let table = std::fs::read_to_string("/proc/net/tcp").expect("/proc/net/tcp");
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let local_port = fields.get(1)?.rsplit(':').next()?;
            let listening = fields.get(3) == Some(&"0A");
            (listening && u16::from_str_radix(local_port, 16).ok()? == port)
                .then(|| fields.get(9)?.parse().ok())?
        })
        .collect()
}

/// Clients that route real TLS handshakes to `a.example.com` in a loop,
/// until stopped (at most [`LOAD_BOUND`]), counting the routed ones and
/// keeping every failure.
struct Load {
    stop: Arc<AtomicBool>,
    routed: Arc<AtomicUsize>,
    failures: Arc<Mutex<Vec<String>>>,
    clients: Vec<thread::JoinHandle<()>>,
}

impl Load {
    fn start(proxy: std::net::SocketAddr, clients: usize) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let routed = Arc::new(AtomicUsize::new(0));
        let failures = Arc::new(Mutex::new(Vec::new()));
        let clients = (0..clients)
            .map(|_| {
                let (stop, routed, failures) = (
                    Arc::clone(&stop),
                    Arc::clone(&routed),
                    Arc::clone(&failures),
                );
                thread::spawn(move || {
                    let until = Instant::now() + LOAD_BOUND;
                    while !stop.load(Ordering::Relaxed) && Instant::now() < until {
                        let failed = match tls_request(proxy, "a.example.com", &[], None) {
                            Ok(outcome) if outcome.backend() == Some("alpha-0") => {
                                routed.fetch_add(1, Ordering::Relaxed);
                                continue;
                            }
                            Ok(outcome) => format!("misrouted: {}", outcome.line),
                            Err(e) => e,
                        };
                        failures.lock().expect("failures").push(failed);
                    }
                })
            })
            .collect();
        Self {
            stop,
            routed,
            failures,
            clients,
        }
    }

    fn routed(&self) -> usize {
        self.routed.load(Ordering::Relaxed)
    }

    /// Stops the clients; every failure they saw.
    fn stop(self) -> Vec<String> {
        self.stop.store(true, Ordering::Relaxed);
        for client in self.clients {
            client.join().expect("client thread");
        }
        self.failures.lock().expect("failures").clone()
    }
}

/// Scrapes of the metrics endpoint in a loop, until stopped (at most
/// [`LOAD_BOUND`]), keeping every one that did not get a 200.
struct Scrapes {
    stop: Arc<AtomicBool>,
    answered: Arc<AtomicUsize>,
    failures: Arc<Mutex<Vec<String>>>,
    scraper: thread::JoinHandle<()>,
}

impl Scrapes {
    fn start(metrics: std::net::SocketAddr) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let answered = Arc::new(AtomicUsize::new(0));
        let failures = Arc::new(Mutex::new(Vec::new()));
        let scraper = {
            let (stop, answered, failures) = (
                Arc::clone(&stop),
                Arc::clone(&answered),
                Arc::clone(&failures),
            );
            thread::spawn(move || {
                let until = Instant::now() + LOAD_BOUND;
                while !stop.load(Ordering::Relaxed) && Instant::now() < until {
                    match scrape(metrics) {
                        Ok(body) if body.contains("preread_") => {
                            answered.fetch_add(1, Ordering::Relaxed);
                        }
                        Ok(body) => failures
                            .lock()
                            .expect("failures")
                            .push(format!("no series: {body:.200}")),
                        Err(e) => failures.lock().expect("failures").push(e),
                    }
                    thread::sleep(Duration::from_millis(10));
                }
            })
        };
        Self {
            stop,
            answered,
            failures,
            scraper,
        }
    }

    fn answered(&self) -> usize {
        self.answered.load(Ordering::Relaxed)
    }

    /// Stops the scraper; the scrapes answered and every failure.
    fn stop(self) -> (usize, Vec<String>) {
        self.stop.store(true, Ordering::Relaxed);
        self.scraper.join().expect("scraper thread");
        let failures = self.failures.lock().expect("failures").clone();
        (self.answered.load(Ordering::Relaxed), failures)
    }
}

/// One line written on the open session comes back.
fn echo(session: &mut TlsStream, round: usize) {
    let message = format!("round {round}\n");
    session.write_all(message.as_bytes()).expect("write");
    session.flush().expect("flush");
    assert_eq!(read_line(session).expect("echo"), message.trim_end());
}

#[test]
fn a_session_and_continuous_load_survive_an_upgrade() {
    let alpha = TlsBackend::start(BackendConfig::new(
        "alpha-0",
        &["a.example.com", "b.example.com"],
    ));
    let mut proxy = ProxyProcess::start(&config(&alpha)).expect("proxy ready");
    let main = proxy.addr("main");
    let old_pid = proxy.pid();
    let metrics = proxy.addr("metrics");
    assert!(scrape(metrics).is_ok_and(|body| body.contains("preread_")));
    let sockets = listening_inodes(main.port());
    assert_eq!(sockets.len(), 2, "one socket per worker");
    // A frontend added at runtime, not in the config: the successor gets
    // the running state, not the file.
    let added = proxy
        .cli(&[
            "frontend",
            "tcp",
            "add",
            "-i",
            "alpha",
            "-a",
            &main.to_string(),
            "--sni",
            "b.example.com",
        ])
        .expect("frontend add");
    assert!(
        added.status.success(),
        "{}",
        String::from_utf8_lossy(&added.stderr)
    );

    let mut session = tls_client(main, "a.example.com", &[]).expect("handshake");
    session.write_all(b"first\n").expect("write");
    assert_eq!(
        read_line(&mut session).expect("first line"),
        "backend=alpha-0 alpn=- sni=a.example.com"
    );
    echo(&mut session, 0);

    let load = Load::start(main, CLIENTS);
    let scrapes = Scrapes::start(metrics);
    // Load before, during and after the upgrade.
    assert!(eventually(T, || load.routed() >= 50 && scrapes.answered() >= 5));
    let out = proxy
        .upgrade(&[], Duration::from_secs(60))
        .expect("upgrade ran");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "upgrade failed: {stdout}{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        stderr_tail(&proxy)
    );
    assert!(stdout.contains("upgraded: pid"), "{stdout}");
    let new_pid = proxy.serving_pid().expect("status answers");
    assert_ne!(new_pid, old_pid, "status reports the new process");
    let at_upgrade = load.routed();
    assert!(eventually(T, || load.routed() >= at_upgrade + 100));

    // The old session still echoes, served by the draining old process.
    for round in 1..4 {
        echo(&mut session, round);
    }
    assert!(
        proxy.exit_status().is_none(),
        "the old process left its session"
    );
    half_close(&mut session).expect("half close");
    let (rest, clean) = read_tls_to_close(&mut session, T);
    assert_eq!(rest, b"bye\n");
    assert!(clean, "the session closed normally");
    // Its last session gone, the old process exits well within the grace.
    let status = proxy.wait_exit(T).expect("the old process exits");
    assert!(status.success(), "{status}");
    // The successor accepts on the very sockets the old process had: none
    // was closed, so no connection queued in one was lost.
    assert_eq!(listening_inodes(main.port()), sockets);

    let routed = load.routed();
    let failures = load.stop();
    eprintln!(
        "upgrade under load: {} routed ({at_upgrade} before the upgrade), {} failed",
        routed,
        failures.len()
    );
    assert!(
        failures.is_empty(),
        "{} of {} connections failed across the upgrade: {:?}\n{}",
        failures.len(),
        routed + failures.len(),
        &failures[..failures.len().min(5)],
        stderr_tail(&proxy)
    );
    // The successor serves alone, and answers on the command socket.
    let outcome = tls_request(main, "a.example.com", &[], None).expect("after the old exit");
    assert_eq!(outcome.backend(), Some("alpha-0"));
    assert!(ProxyProcess::is_running(new_pid));
    let status = proxy.cli(&["status"]).expect("status");
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(text.contains(&format!("pid {new_pid}")), "{text}");
    assert!(
        text.contains("generation 1"),
        "the generation carries over: {text}"
    );
    let outcome = tls_request(main, "b.example.com", &[], None).expect("runtime frontend");
    assert_eq!(outcome.backend(), Some("alpha-0"));
    // The metrics endpoint was handed over with the listeners: no scrape
    // was refused, before, during or after the old process's exit.
    let at_exit = scrapes.answered();
    assert!(eventually(T, || scrapes.answered() >= at_exit + 5));
    let (answered, failed) = scrapes.stop();
    eprintln!(
        "scrapes across the upgrade: {answered} answered, {} failed",
        failed.len()
    );
    assert!(
        failed.is_empty(),
        "{} of {} scrapes failed across the upgrade: {:?}\n{}",
        failed.len(),
        answered + failed.len(),
        &failed[..failed.len().min(5)],
        stderr_tail(&proxy)
    );
    let stopped = proxy.cli(&["shutdown"]).expect("shutdown");
    assert!(stopped.status.success());
    assert!(eventually(T, || !ProxyProcess::is_running(new_pid)));
}

/// Upgrades in a row, each new process upgraded in turn, under load from
/// twice as many clients: no connection fails.
#[test]
fn upgrades_in_a_row_fail_no_connection() {
    const UPGRADES: usize = 3;
    let alpha = TlsBackend::start(BackendConfig::new("alpha-0", &["a.example.com"]));
    let mut proxy = ProxyProcess::start(&config(&alpha)).expect("proxy ready");
    let main = proxy.addr("main");
    let load = Load::start(main, 2 * CLIENTS);
    let scrapes = Scrapes::start(proxy.addr("metrics"));
    let mut pids = vec![proxy.pid()];
    for _ in 0..UPGRADES {
        let before = load.routed();
        assert!(eventually(T, || load.routed() >= before + 50));
        let out = proxy
            .upgrade(&[], Duration::from_secs(60))
            .expect("upgrade ran");
        assert!(
            out.status.success(),
            "{}\n{}",
            String::from_utf8_lossy(&out.stderr),
            stderr_tail(&proxy)
        );
        let pid = proxy.serving_pid().expect("status");
        assert!(!pids.contains(&pid), "a new pid each time");
        pids.push(pid);
    }
    let before = load.routed();
    assert!(eventually(T, || load.routed() >= before + 50));
    let routed = load.routed();
    let failures = load.stop();
    eprintln!(
        "{UPGRADES} upgrades under load: {} routed, {} failed",
        routed,
        failures.len()
    );
    assert!(
        failures.is_empty(),
        "{} connections failed: {:?}\n{}",
        failures.len(),
        &failures[..failures.len().min(5)],
        stderr_tail(&proxy)
    );
    // Every process but the last has drained and gone.
    assert!(proxy.wait_exit(T).is_ok_and(|s| s.success()));
    let (last, older) = pids.split_last().expect("pids");
    assert!(eventually(T, || older
        .iter()
        .all(|&p| !ProxyProcess::is_running(p))));
    assert!(ProxyProcess::is_running(*last));
    // The metrics endpoint passed from process to process with the
    // listeners: not one scrape was refused while the old ones exited.
    let gone = scrapes.answered();
    assert!(eventually(T, || scrapes.answered() >= gone + 5));
    let (answered, failed) = scrapes.stop();
    eprintln!(
        "scrapes across {UPGRADES} upgrades: {answered} answered, {} failed",
        failed.len()
    );
    assert!(
        failed.is_empty(),
        "{} of {} scrapes failed: {:?}\n{}",
        failed.len(),
        answered + failed.len(),
        &failed[..failed.len().min(5)],
        stderr_tail(&proxy)
    );
}

#[test]
fn a_binary_that_exits_leaves_the_old_process_serving() {
    let alpha = TlsBackend::start(BackendConfig::new("alpha-0", &["a.example.com"]));
    let mut proxy = ProxyProcess::start(&config(&alpha)).expect("proxy ready");
    let main = proxy.addr("main");
    let out = proxy
        .upgrade(&["--binary", "/bin/false"], Duration::from_secs(30))
        .expect("upgrade ran");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("E_UPGRADE_FAILED"), "{stderr}");
    assert!(stderr.contains("/bin/false"), "{stderr}");
    assert!(stderr.contains("exit status: 1"), "{stderr}");
    assert!(stderr.contains("keeps serving"), "{stderr}");
    assert_eq!(proxy.serving_pid().expect("status"), proxy.pid());
    let outcome = tls_request(main, "a.example.com", &[], None).expect("still routes");
    assert_eq!(outcome.backend(), Some("alpha-0"));
    assert!(proxy.exit_status().is_none());
}

#[test]
fn a_binary_that_never_takes_over_is_killed_at_the_deadline() {
    let alpha = TlsBackend::start(BackendConfig::new("alpha-0", &["a.example.com"]));
    let mut proxy = ProxyProcess::start(&config(&alpha)).expect("proxy ready");
    let main = proxy.addr("main");
    let script = proxy.dir().join("hangs.sh");
    std::fs::write(&script, "#!/bin/sh\nexec sleep 30\n").expect("write script");
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    let script = script.display().to_string();
    let started = Instant::now();
    let out = proxy
        .upgrade(
            &["--binary", &script, "--within", "1"],
            Duration::from_secs(30),
        )
        .expect("upgrade ran");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("did not take over in time"), "{stderr}");
    assert!(stderr.contains("killed"), "{stderr}");
    assert!(started.elapsed() < Duration::from_secs(15));
    let outcome = tls_request(main, "a.example.com", &[], None).expect("still routes");
    assert_eq!(outcome.backend(), Some("alpha-0"));
    assert_eq!(proxy.serving_pid().expect("status"), proxy.pid());
}

#[test]
fn a_successor_takes_smaller_buffers_and_a_config_it_cannot_load_leaves_the_old_process_serving() {
    let alpha = TlsBackend::start(BackendConfig::new("alpha-0", &["a.example.com"]));
    let config = ConfigBuilder::new()
        .listener("main", &["sni_preread_max_bytes = 65536"])
        .frontend("alpha", "main", Some("a.example.com"), &[])
        .backend("alpha", "alpha-0", alpha.addr());
    let mut proxy = ProxyProcess::start(&config.build()).expect("ready");
    let main = proxy.addr("main");
    // Buffers smaller than the running listener's cap no longer make a
    // successor refuse the state: the preread window grows past them.
    let shrunk = config.global("buffer_size = 8192").build();
    proxy.write_config(&shrunk).expect("write config");
    let out = proxy
        .upgrade(&[], Duration::from_secs(30))
        .expect("upgrade ran");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let outcome = tls_request(main, "a.example.com", &[], None).expect("still routes");
    assert_eq!(outcome.backend(), Some("alpha-0"));

    // A config the new process cannot load at all: refused with why.
    std::fs::write(proxy.config_path(), "[[listeners]\n").expect("write broken config");
    let out = proxy
        .upgrade(&[], Duration::from_secs(30))
        .expect("upgrade ran");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("is not a valid config"), "{stderr}");
    let outcome = tls_request(main, "a.example.com", &[], None).expect("still routes");
    assert_eq!(outcome.backend(), Some("alpha-0"));
}
