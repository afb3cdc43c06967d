//! The signals of `preread start`, sent to a real proxy: SIGHUP reloads the
//! config file with `preread reload`'s diff (a broken file changes nothing
//! and the proxy keeps serving; warnings are logged, at start too), SIGUSR1 moves the access log to a fresh
//! file with no line lost, SIGQUIT stops at once; none of them kills the
//! proxy without a log line.
//!
//! Loopback only; every wait is bounded; the proxy and the backends are
//! stopped on Drop.

use std::time::Duration;

use e2e::backend::{BackendConfig, TlsBackend};
use e2e::client::tls_request;
use e2e::proxy::{ConfigBuilder, ProxyProcess};
use e2e::testkit::{eventually, stderr_tail};

const T: Duration = Duration::from_secs(5);

fn routed_to(proxy: &ProxyProcess, sni: &str, expected: &str) {
    let addr = proxy.addr("main");
    let outcome =
        tls_request(addr, sni, &[], None).unwrap_or_else(|e| panic!("{sni} through {addr}: {e}"));
    assert_eq!(outcome.backend(), Some(expected), "{outcome:?}");
}

fn lines_of(path: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn sighup_reloads_the_config_file_and_a_broken_one_changes_nothing() {
    let alpha = TlsBackend::start(BackendConfig::new("alpha-0", &["a.example.com"]));
    let gamma = TlsBackend::start(BackendConfig::new("gamma-0", &["g.example.com"]));
    let base = ConfigBuilder::new()
        .listener("main", &[])
        .frontend("alpha", "main", Some("a.example.com"), &[])
        .backend("alpha", "alpha-0", alpha.addr());
    let mut proxy = ProxyProcess::start(&base.build()).expect("proxy ready");
    routed_to(&proxy, "a.example.com", "alpha-0");
    let version = env!("CARGO_PKG_VERSION");
    let status = |proxy: &ProxyProcess| {
        let out = proxy.cli(&["status"]).expect("status");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let before = status(&proxy);
    assert!(
        before.contains(&format!(
            ", pid {}, version {version}, generation 0",
            proxy.pid()
        )),
        "{before}"
    );

    let with_gamma = base
        .clone()
        .frontend("gamma", "main", Some("g.example.com"), &[])
        .backend("gamma", "gamma-0", gamma.addr())
        .build();
    proxy.write_config(&with_gamma).expect("write config");
    proxy.signal(libc::SIGHUP).expect("SIGHUP");
    proxy
        .wait_stderr("3 applied, 0 unchanged, 0 skipped", T)
        .unwrap_or_else(|e| panic!("{e}\n{}", stderr_tail(&proxy)));
    assert!(proxy.exit_status().is_none(), "SIGHUP stopped the proxy");
    let after = status(&proxy);
    assert!(
        after.contains(", generation 1"),
        "three changes applied as one generation: {after}"
    );
    routed_to(&proxy, "g.example.com", "gamma-0");
    routed_to(&proxy, "a.example.com", "alpha-0");

    // A config that does not parse: logged, nothing changed, still serving.
    std::fs::write(proxy.config_path(), "[[listeners]\n").expect("write broken config");
    proxy.signal(libc::SIGHUP).expect("SIGHUP");
    proxy
        .wait_stderr("error(s); nothing changed", T)
        .unwrap_or_else(|e| panic!("{e}\n{}", stderr_tail(&proxy)));
    routed_to(&proxy, "g.example.com", "gamma-0");

    // Back to the first file: gamma goes, alpha stays.
    proxy.write_config(&base.build()).expect("write config");
    proxy.signal(libc::SIGHUP).expect("SIGHUP");
    let removed = eventually(T, || {
        tls_request(proxy.addr("main"), "g.example.com", &[], None).is_err()
    });
    assert!(
        removed,
        "g.example.com still routes: {}",
        stderr_tail(&proxy)
    );
    routed_to(&proxy, "a.example.com", "alpha-0");
    assert!(proxy.exit_status().is_none(), "the proxy stopped");
}

/// Warnings do not stop a start or a reload, and both log them, with the
/// file's line.
#[test]
fn start_and_sighup_log_the_configs_warnings() {
    let alpha = TlsBackend::start(BackendConfig::new("alpha-0", &["a.example.com"]));
    let config = |listener: &[&str]| {
        ConfigBuilder::new()
            .listener("main", listener)
            .frontend("alpha", "main", Some("a.example.com"), &[])
            .backend("alpha", "alpha-0", alpha.addr())
            .build()
    };
    let mut proxy = ProxyProcess::start(&config(&["connect_timeout = 90"])).expect("proxy ready");
    proxy
        .wait_stderr("W003: connect_timeout = 90 is 1m 30s, over 1m", T)
        .unwrap_or_else(|e| panic!("{e}\n{}", stderr_tail(&proxy)));
    routed_to(&proxy, "a.example.com", "alpha-0");

    proxy
        .write_config(&config(&["front_timeout = 60000"]))
        .expect("write config");
    proxy.signal(libc::SIGHUP).expect("SIGHUP");
    proxy
        .wait_stderr("W004: front_timeout = 60000 is 60000 seconds", T)
        .unwrap_or_else(|e| panic!("{e}\n{}", stderr_tail(&proxy)));
    proxy
        .wait_stderr("1 applied, 0 unchanged, 0 skipped", T)
        .unwrap_or_else(|e| panic!("{e}\n{}", stderr_tail(&proxy)));
    routed_to(&proxy, "a.example.com", "alpha-0");

    // `preread reload`: the proxy reads the file and the CLI prints the
    // warnings it answers with.
    let config_path = proxy.config_path().display().to_string();
    proxy
        .write_config(&config(&["connect_timeout = \"2m\""]))
        .expect("write config");
    let out = proxy.cli(&["-c", &config_path, "reload"]).expect("reload");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("W003: connect_timeout = \"2m\" is 2m, over 1m"),
        "{stderr}"
    );
    assert!(proxy.exit_status().is_none(), "the proxy stopped");
}

#[test]
fn sigusr1_reopens_the_access_log_and_loses_no_line() {
    let alpha = TlsBackend::start(BackendConfig::new("alpha-0", &["a.example.com"]));
    let config = ConfigBuilder::new()
        .global("access_logs = \"access.log\"")
        .listener("main", &[])
        .frontend("alpha", "main", Some("a.example.com"), &[])
        .backend("alpha", "alpha-0", alpha.addr())
        .build();
    let mut proxy = ProxyProcess::start(&config).expect("proxy ready");
    let log = proxy.dir().join("access.log");
    let rotated = proxy.dir().join("access.log.1");
    routed_to(&proxy, "a.example.com", "alpha-0");
    assert!(
        eventually(T, || lines_of(&log).len() == 1),
        "{:?}",
        lines_of(&log)
    );

    // logrotate: rename, then SIGUSR1 (its `postrotate`).
    std::fs::rename(&log, &rotated).expect("rename the log");
    routed_to(&proxy, "a.example.com", "alpha-0");
    // The line is written when the proxy closes the session, a moment
    // after the client is done: the renamed file (still open) gets it.
    assert!(
        eventually(T, || lines_of(&rotated).len() == 2),
        "{:?}",
        lines_of(&rotated)
    );
    proxy.signal(libc::SIGUSR1).expect("SIGUSR1");
    proxy
        .wait_stderr("access log reopened", T)
        .unwrap_or_else(|e| panic!("{e}\n{}", stderr_tail(&proxy)));
    routed_to(&proxy, "a.example.com", "alpha-0");
    assert!(
        eventually(T, || lines_of(&log).len() == 1
            && lines_of(&rotated).len() == 2),
        "old {:?}, new {:?}",
        lines_of(&rotated),
        lines_of(&log)
    );
    for line in lines_of(&rotated).iter().chain(&lines_of(&log)) {
        assert!(line.contains("outcome=routed"), "{line}");
    }
    assert!(proxy.exit_status().is_none(), "SIGUSR1 stopped the proxy");
}

#[test]
fn sigquit_stops_at_once_with_a_log_line() {
    let config = ConfigBuilder::new().listener("main", &[]).build();
    let mut proxy = ProxyProcess::start(&config).expect("proxy ready");
    proxy.signal(libc::SIGQUIT).expect("SIGQUIT");
    let status = proxy.wait_exit(T).expect("exits");
    assert!(status.success(), "{status}: {}", stderr_tail(&proxy));
    assert!(
        proxy.stderr_text().contains("SIGQUIT: hard stop"),
        "{}",
        stderr_tail(&proxy)
    );
}

#[test]
fn sigterm_drains_open_sessions_for_soft_stop_grace_then_closes_them() {
    let alpha = TlsBackend::start(BackendConfig::new("alpha-0", &["a.example.com"]));
    let config = ConfigBuilder::new()
        .global("soft_stop_grace = 1")
        .listener("main", &[])
        .frontend("alpha", "main", Some("a.example.com"), &[])
        .backend("alpha", "alpha-0", alpha.addr())
        .build();
    let mut proxy = ProxyProcess::start(&config).expect("proxy ready");
    // A session that stays open: its client sends a hello and waits.
    let mut open = std::net::TcpStream::connect(proxy.addr("main")).expect("connect");
    std::io::Write::write_all(&mut open, &e2e::testkit::capture("curl_h2.bin")).expect("hello");
    proxy
        .wait_metric("backend.connections", |v| v == 1, T)
        .unwrap_or_else(|e| panic!("{e}\n{}", stderr_tail(&proxy)));
    let started = std::time::Instant::now();
    proxy.signal(libc::SIGTERM).expect("SIGTERM");
    let status = proxy.wait_exit(T).expect("exits after the grace");
    let took = started.elapsed();
    assert!(status.success(), "{status}");
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(4),
        "the 1 s grace took {took:?}"
    );
    assert!(
        proxy.stderr_text().contains("for at most 1000 ms"),
        "{}",
        stderr_tail(&proxy)
    );
    let shutdown = proxy
        .access_logs()
        .into_iter()
        .filter(|l| l.get("outcome").map(String::as_str) == Some("refused:shutdown"))
        .count();
    assert_eq!(shutdown, 1, "{}", stderr_tail(&proxy));
}
