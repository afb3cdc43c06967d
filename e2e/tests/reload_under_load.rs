//! A reload never misroutes: eight clients route real TLS handshakes in a
//! loop while fifty changes of the config file are applied, half by
//! `preread reload` and half by SIGHUP. The changes alternate between a
//! cluster's `load_balancing`, a backend's `weight`, a cluster's
//! `proxy_protocol` (`none` ↔ `send`: the backends read and drop a PROXY
//! header), an unrelated frontend added or removed, and the tags of the
//! busy frontend `a.example.com` (which the diff removes and adds again
//! under the same key). Settings become in-place updates, and each reload
//! is one routing generation, so no frontend is ever missing, not even the
//! one removed and re-added: no connection fails, none reaches a backend
//! of another cluster, none falls back or is refused, and the final
//! running state equals the file (a last reload has nothing to do).
//!
//! Loopback only; the clients stop after the changes (and at most after a
//! bound); the proxy and the backends are stopped on Drop.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use e2e::backend::{BackendConfig, TlsBackend};
use e2e::client::tls_request;
use e2e::proxy::{ConfigBuilder, ProxyProcess};
use e2e::testkit::{eventually, get, metrics, rejected_sum, stderr_tail};

const T: Duration = Duration::from_secs(10);
const CLIENTS: usize = 8;
const CHANGES: usize = 50;
/// The clients' bound, whatever happens to the changes.
const CLIENT_BOUND: Duration = Duration::from_secs(120);

/// One version of the config: the four settings the changes flip.
#[derive(Clone, Copy, Debug, Default)]
struct Knobs {
    random: bool,
    heavy: bool,
    send: bool,
    extra: bool,
    team: bool,
}

fn config(knobs: Knobs, alpha: [&TlsBackend; 2], beta: &TlsBackend) -> String {
    let lb = if knobs.random {
        "random"
    } else {
        "round_robin"
    };
    let pp = if knobs.send { "send" } else { "none" };
    let weight = if knobs.heavy { 300 } else { 100 };
    let mut builder = ConfigBuilder::new()
        .global("worker_count = 2")
        .listener("main", &[])
        .cluster(
            "alpha",
            &[
                &format!("load_balancing = \"{lb}\""),
                &format!("proxy_protocol = \"{pp}\""),
            ],
        )
        .frontend_with(
            "alpha",
            "main",
            Some("a.example.com"),
            &[],
            &[if knobs.team {
                "tags = { team = \"web\" }"
            } else {
                "tags = { team = \"edge\" }"
            }],
        )
        .backend("alpha", "alpha-0", alpha[0].addr())
        .backend_with(
            "alpha",
            "alpha-1",
            alpha[1].addr(),
            &format!("weight = {weight}"),
        )
        .frontend("beta", "main", Some("b.example.com"), &[])
        .backend("beta", "beta-0", beta.addr());
    if knobs.extra {
        builder = builder.frontend("beta", "main", Some("unrelated.example.net"), &[]);
    }
    builder.build()
}

/// What the clients saw.
#[derive(Debug, Default)]
struct Seen {
    routed: usize,
    failed: Vec<String>,
    misrouted: Vec<String>,
}

fn client(proxy: std::net::SocketAddr, n: usize, stop: &AtomicBool) -> Seen {
    let started = Instant::now();
    let mut seen = Seen::default();
    let mut i = n;
    while !stop.load(Ordering::Relaxed) && started.elapsed() < CLIENT_BOUND {
        let (sni, cluster) = if i % 2 == 0 {
            ("a.example.com", "alpha-")
        } else {
            ("b.example.com", "beta-")
        };
        i += 1;
        match tls_request(proxy, sni, &[], None) {
            Ok(outcome) => match outcome.backend() {
                Some(backend) if backend.starts_with(cluster) => seen.routed += 1,
                other => seen.misrouted.push(format!("{sni} reached {other:?}")),
            },
            Err(e) => seen.failed.push(format!("{sni}: {e}")),
        }
    }
    seen
}

/// Lines of the proxy's stderr that report a finished SIGHUP reload.
fn reloads_logged(proxy: &ProxyProcess) -> usize {
    proxy
        .stderr_text()
        .lines()
        .filter(|l| l.contains("reload of ") && l.contains(" skipped"))
        .count()
}

#[test]
fn fifty_reloads_under_load_fail_misroute_and_drop_nothing() {
    let alpha = [
        TlsBackend::start(BackendConfig::new("alpha-0", &["a.example.com"])),
        TlsBackend::start(BackendConfig::new("alpha-1", &["a.example.com"])),
    ];
    let beta = TlsBackend::start(BackendConfig::new("beta-0", &["b.example.com"]));
    let mut knobs = Knobs::default();
    let mut proxy =
        ProxyProcess::start(&config(knobs, [&alpha[0], &alpha[1]], &beta)).expect("proxy ready");
    let addr = proxy.addr("main");

    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|n| {
            let stop = Arc::clone(&stop);
            thread::spawn(move || client(addr, n, &stop))
        })
        .collect();
    // Let the clients get going before the first change.
    assert!(
        eventually(T, || get(&metrics(&proxy), "tcp.sni_preread.routed") >= 16),
        "{}",
        stderr_tail(&proxy)
    );

    let mut by_signal = 0;
    for change in 0..CHANGES {
        match change % 5 {
            0 => knobs.random = !knobs.random,
            1 => knobs.heavy = !knobs.heavy,
            2 => knobs.send = !knobs.send,
            3 => knobs.extra = !knobs.extra,
            _ => knobs.team = !knobs.team,
        }
        proxy
            .write_config(&config(knobs, [&alpha[0], &alpha[1]], &beta))
            .expect("write config");
        if change % 2 == 0 {
            let out = proxy.cli(&["reload"]).expect("reload");
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            assert!(
                out.status.success() && text.contains(" applied, 0 skipped"),
                "change {change}: {text}{}",
                String::from_utf8_lossy(&out.stderr)
            );
        } else {
            by_signal += 1;
            proxy.signal(libc::SIGHUP).expect("SIGHUP");
            assert!(
                eventually(T, || reloads_logged(&proxy) >= by_signal),
                "change {change}: the SIGHUP reload did not finish\n{}",
                stderr_tail(&proxy)
            );
        }
        thread::sleep(Duration::from_millis(20));
    }
    stop.store(true, Ordering::Relaxed);
    let seen: Vec<Seen> = clients
        .into_iter()
        .map(|c| c.join().expect("client thread"))
        .collect();

    let routed: usize = seen.iter().map(|s| s.routed).sum();
    let failed: Vec<&String> = seen.iter().flat_map(|s| &s.failed).collect();
    let misrouted: Vec<&String> = seen.iter().flat_map(|s| &s.misrouted).collect();
    assert!(
        failed.is_empty() && misrouted.is_empty(),
        "{} failed, {} misrouted of {routed} routed; the first: {:?} {:?}\n{}",
        failed.len(),
        misrouted.len(),
        &failed[..failed.len().min(5)],
        &misrouted[..misrouted.len().min(5)],
        stderr_tail(&proxy)
    );
    assert!(routed >= 100, "only {routed} connections routed");
    let sighup_skips = proxy
        .stderr_text()
        .lines()
        .filter(|l| l.contains("reload of ") && !l.contains(", 0 skipped"))
        .count();
    assert_eq!(sighup_skips, 0, "{}", stderr_tail(&proxy));

    let m = metrics(&proxy);
    let fallbacks: i64 = m
        .iter()
        .filter(|(name, _)| name.starts_with("tcp.sni_preread.fallback."))
        .map(|(_, v)| v)
        .sum();
    let refused: i64 = m
        .iter()
        .filter(|(name, _)| name.starts_with("tcp.refused."))
        .map(|(_, v)| v)
        .sum();
    assert_eq!((fallbacks, rejected_sum(&m), refused), (0, 0, 0), "{m:?}");
    let outcomes: Vec<String> = proxy
        .access_logs()
        .into_iter()
        .filter_map(|l| l.get("outcome").cloned())
        .filter(|o| o != "routed")
        .collect();
    assert!(outcomes.is_empty(), "{outcomes:?}");

    // The running state is the file: nothing left to apply.
    let out = proxy.cli(&["reload"]).expect("reload");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(text.contains("0 applied, 0 skipped"), "{text}");
}
