//! The control plane at 20,000 routes, sized to run in seconds: a start
//! from a config of 200 clusters × 100 names, a one-line reload that
//! renames one of them, and real TLS handshakes that show which names are
//! served. The timing goals at 100,000 routes are measured by
//! `bench/scale.sh`, not asserted here.
//!
//! Loopback only; the proxy and the backend are stopped on Drop.

use std::time::{Duration, Instant};

use e2e::backend::{BackendConfig, TlsBackend};
use e2e::client::tls_request;
use e2e::proxy::{ProxyProcess, StartOptions};
use e2e::testkit::stderr_tail;

const CLUSTERS: usize = 200;
const NAMES: usize = 100;

fn name(i: usize, c: usize) -> String {
    format!("n{i}-c{c}.example.com")
}

/// One listener, `CLUSTERS` clusters of `NAMES` exact names each, every
/// cluster on the same backend (whose certificate is `*.example.com`).
fn config(backend: &TlsBackend, renamed: Option<&str>) -> String {
    let mut text =
        String::from("worker_count = 2\n\n[[listeners]]\naddress = \"${addr:main}\"\n\n");
    for c in 0..CLUSTERS {
        let frontends: Vec<String> = (0..NAMES)
            .map(|i| {
                let sni = match renamed {
                    Some(new) if (i, c) == (5, 7) => new.to_owned(),
                    _ => name(i, c),
                };
                format!("{{ address = \"${{addr:main}}\", sni = \"{sni}\" }}")
            })
            .collect();
        text.push_str(&format!(
            "[clusters.c{c}]\nfrontends = [{}]\nbackends = [{{ address = \"{}\" }}]\n\n",
            frontends.join(", "),
            backend.addr()
        ));
    }
    text
}

fn served(proxy: &ProxyProcess, sni: &str) -> bool {
    tls_request(proxy.addr("main"), sni, &[], None)
        .is_ok_and(|outcome| outcome.field("sni") == Some(sni))
}

#[test]
fn twenty_thousand_routes_start_reload_and_route() {
    let backend = TlsBackend::start(BackendConfig::new("b", &["*.example.com"]));
    let started = Instant::now();
    let options = StartOptions {
        ready_timeout: Duration::from_secs(60),
        ..StartOptions::default()
    };
    let mut proxy = ProxyProcess::start_with(&config(&backend, None), &options).expect("ready");
    eprintln!(
        "{} routes: ready in {:?} (debug build)",
        CLUSTERS * NAMES,
        started.elapsed()
    );
    for (i, c) in [(0, 0), (5, 7), (99, 199), (42, 100)] {
        assert!(served(&proxy, &name(i, c)), "{} not served", name(i, c));
    }
    assert!(!served(&proxy, "renamed.example.com"));

    proxy
        .write_config(&config(&backend, Some("renamed.example.com")))
        .expect("write config");
    let reloading = Instant::now();
    let out = proxy.cli(&["reload"]).expect("reload");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    eprintln!("one-line reload: {:?} (debug build)", reloading.elapsed());
    assert!(
        out.status.success() && text.contains("2 applied, 0 skipped"),
        "{text}{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        stderr_tail(&proxy)
    );
    assert!(served(&proxy, "renamed.example.com"));
    assert!(!served(&proxy, &name(5, 7)), "the old name still routes");
    assert!(served(&proxy, &name(4, 7)), "its neighbour stopped routing");

    let status = proxy.cli(&["status"]).expect("status");
    let said = String::from_utf8_lossy(&status.stdout);
    assert!(said.contains("generation 1"), "{said}");
}
