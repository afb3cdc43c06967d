//! preread under systemd: the shipped unit (`doc/examples/preread.service`)
//! passes `systemd-analyze verify` with nothing to say, and a proxy started
//! with `NOTIFY_SOCKET` tells its service manager `READY=1` once it serves,
//! `RELOADING=1` (with `MONOTONIC_USEC`) then `READY=1` around a SIGHUP
//! reload, and `STOPPING=1` when it stops.
//!
//! `systemd-analyze` is installed from Debian's `systemd` when missing; the
//! test never skips. The notify socket is a real Unix datagram socket, the
//! kind systemd listens on. Loopback only; every wait is bounded.

use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::time::{Duration, Instant};

use e2e::proxy::{ConfigBuilder, ProxyProcess, StartOptions, preread_bin};
use e2e::testkit::{TempDir, stderr_tail};
use e2e::tools::{require_tool, run};

const T: Duration = Duration::from_secs(10);

/// The binary the shipped unit names; the test points it at the one under
/// test, since `verify` checks that `ExecStart` is executable.
const INSTALLED_BIN: &str = "/usr/local/bin/preread";

fn unit_text() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../doc/examples/preread.service");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn the_shipped_unit_verifies_clean() {
    let analyze = require_tool("systemd-analyze", "systemd");
    let text = unit_text();
    for line in [
        "Type=notify",
        "ExecReload=/bin/kill -HUP $MAINPID",
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "RuntimeDirectory=preread",
        "StateDirectory=preread",
        "CapabilityBoundingSet=CAP_NET_BIND_SERVICE",
    ] {
        assert!(text.lines().any(|l| l == line), "the unit lacks {line}");
    }
    assert!(
        text.contains(INSTALLED_BIN),
        "ExecStart names {INSTALLED_BIN}"
    );
    let bin = preread_bin().expect("the preread binary");
    let dir = TempDir::new("unit");
    let unit = dir.path().join("preread.service");
    std::fs::write(
        &unit,
        text.replace(INSTALLED_BIN, &bin.display().to_string()),
    )
    .expect("write the unit");
    let unit_arg = unit.display().to_string();
    let ran = run(&analyze, &["verify", &unit_arg], dir.path(), T).expect("systemd-analyze");
    assert!(ran.status.success(), "{}", ran.both());
    assert_eq!(
        format!("{}{}", ran.stdout, ran.stderr).trim(),
        "",
        "systemd-analyze verify has something to say"
    );

    // The check is real: a bad value is reported.
    let broken = text.replace("NoNewPrivileges=yes", "NoNewPrivileges=perhaps");
    std::fs::write(
        &unit,
        broken.replace(INSTALLED_BIN, &bin.display().to_string()),
    )
    .expect("write the unit");
    let ran = run(&analyze, &["verify", &unit_arg], dir.path(), T).expect("systemd-analyze");
    assert!(
        ran.both()
            .contains("Failed to parse boolean value, ignoring: perhaps"),
        "{}",
        ran.both()
    );
}

/// A proxy started with `NOTIFY_SOCKET` naming a real datagram socket
/// (its reads time out after 100 ms), in a temp dir kept with it.
fn notified_proxy() -> (TempDir, UnixDatagram, ProxyProcess) {
    let dir = TempDir::new("notify");
    let path = dir.path().join("notify.sock");
    let socket = UnixDatagram::bind(&path).expect("bind the notify socket");
    socket
        .set_read_timeout(Some(Duration::from_millis(100)))
        .expect("timeout");
    let config = ConfigBuilder::new().listener("main", &[]).build();
    let options = StartOptions::default().env("NOTIFY_SOCKET", &path.display().to_string());
    let proxy = ProxyProcess::start_with(&config, &options).expect("proxy ready");
    (dir, socket, proxy)
}

/// Receives notify datagrams until one holds `needle`; returns all of them.
fn until(socket: &UnixDatagram, needle: &str, seen: &mut Vec<String>) -> bool {
    let deadline = Instant::now() + T;
    let mut buf = [0u8; 4096];
    while Instant::now() < deadline {
        if let Ok(n) = socket.recv(&mut buf) {
            let message = String::from_utf8_lossy(&buf[..n]).into_owned();
            let found = message.lines().any(|l| l == needle);
            seen.push(message);
            if found {
                return true;
            }
        }
    }
    false
}

#[test]
fn the_proxy_notifies_ready_reloading_and_stopping() {
    let (_dir, socket, mut proxy) = notified_proxy();
    let mut seen = Vec::new();
    assert!(until(&socket, "READY=1", &mut seen), "no READY=1: {seen:?}");
    assert!(
        seen.iter()
            .any(|m| m.contains("STATUS=1 worker(s), listeners [")),
        "{seen:?}"
    );

    proxy.signal(libc::SIGHUP).expect("SIGHUP");
    seen.clear();
    assert!(
        until(&socket, "RELOADING=1", &mut seen),
        "no RELOADING=1: {seen:?}\n{}",
        stderr_tail(&proxy)
    );
    assert!(
        seen.iter()
            .any(|m| m.lines().any(|l| l.starts_with("MONOTONIC_USEC="))),
        "RELOADING=1 without MONOTONIC_USEC: {seen:?}"
    );
    assert!(
        until(&socket, "READY=1", &mut seen),
        "no READY=1 after the reload: {seen:?}"
    );
    assert!(
        seen.iter()
            .any(|m| m.contains(": 0 applied, 0 unchanged, 0 skipped")),
        "{seen:?}"
    );

    proxy.signal(libc::SIGTERM).expect("SIGTERM");
    seen.clear();
    assert!(
        until(&socket, "STOPPING=1", &mut seen),
        "no STOPPING=1: {seen:?}"
    );
    let status = proxy.wait_exit(T).expect("exits");
    assert!(status.success(), "{status}");
}

/// An upgrade under a notify socket: the old process names the new one
/// the main process (`MAINPID=`), the new one says it too with `READY=1`,
/// and the old one never says `STOPPING=1` (the service goes on).
#[test]
fn an_upgrade_hands_the_main_pid_over_without_stopping() {
    let (_dir, socket, mut proxy) = notified_proxy();
    let mut seen = Vec::new();
    assert!(until(&socket, "READY=1", &mut seen), "no READY=1: {seen:?}");
    seen.clear();
    let out = proxy
        .upgrade(&[], Duration::from_secs(60))
        .expect("upgrade ran");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let new_pid = proxy.serving_pid().expect("status");
    let main_pid = format!("MAINPID={new_pid}");
    assert!(
        until(&socket, "READY=1", &mut seen),
        "no READY=1 from the new process: {seen:?}"
    );
    let old_exit = proxy.wait_exit(T).expect("the old process exits");
    assert!(old_exit.success(), "{old_exit}");
    // Whatever is still queued (the read times out after 100 ms).
    let mut buf = [0u8; 4096];
    while let Ok(n) = socket.recv(&mut buf) {
        seen.push(String::from_utf8_lossy(&buf[..n]).into_owned());
    }
    let naming = seen.iter().filter(|m| m.contains(&main_pid)).count();
    assert_eq!(naming, 2, "both processes name the new main pid: {seen:?}");
    assert!(
        !seen.iter().any(|m| m.contains("STOPPING=1")),
        "the old process told systemd the service stops: {seen:?}"
    );
    let stopped = proxy.cli(&["shutdown"]).expect("shutdown");
    assert!(stopped.status.success());
}
