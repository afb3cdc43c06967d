//! The control plane at 20,000 routes, sized to run in seconds: a start
//! from a config of 200 clusters × 100 names, a one-line reload that
//! renames one of them (and reads only that cluster's table), batches of
//! runtime adds cut by a kill -9 in the
//! middle, and a restart from the saved state and its journal; real TLS
//! handshakes show which names are served: every acknowledged one, and the
//! batch in flight at the kill either whole or not at all. The timing goals
//! at 100,000 routes are measured by `bench/scale.sh`, not asserted here.
//!
//! Loopback only; the proxy and the backend are stopped on Drop.

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use command::channel::BlockingChannel;
use command::proto::{self, Request, request::RequestType};

use e2e::backend::{BackendConfig, TlsBackend};
use e2e::client::tls_request;
use e2e::proxy::{ProxyProcess, StartOptions};
use e2e::testkit::stderr_tail;

const CLUSTERS: usize = 200;
const NAMES: usize = 100;
/// Frontends of one runtime batch.
const BATCH: usize = 20;
/// Batches acknowledged before the kill.
const BEFORE_KILL: usize = 5;

fn name(i: usize, c: usize) -> String {
    format!("n{i}-c{c}.example.com")
}

/// One listener, `CLUSTERS` clusters of `NAMES` exact names each, every
/// cluster on the same backend (whose certificate is `*.example.com`).
fn config(backend: &TlsBackend, renamed: Option<&str>) -> String {
    let mut text = String::from(
        "worker_count = 2\nsaved_state = \"state.json\"\nautomatic_state_save = true\n\n\
             [[listeners]]\naddress = \"${addr:main}\"\n\n",
    );
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

/// The names of runtime batch `b`.
fn batch_names(b: usize) -> Vec<String> {
    (0..BATCH)
        .map(|i| format!("added{b}-{i}.example.com"))
        .collect()
}

/// Sends batches of adds on one command connection until it breaks (the
/// kill): the number of each batch as it is acknowledged.
fn add_batches(proxy: &ProxyProcess, acknowledged: mpsc::Sender<usize>) -> thread::JoinHandle<()> {
    let socket = proxy.socket_path().to_owned();
    let address = proxy.addr("main").to_string();
    thread::spawn(move || {
        let Ok(mut channel) = BlockingChannel::connect(&socket, Duration::from_secs(30)) else {
            return;
        };
        for b in 0..1_000 {
            let requests = batch_names(b)
                .into_iter()
                .map(|sni| Request {
                    request_type: Some(RequestType::AddTcpFrontend(proto::TcpFrontend {
                        cluster_id: "c0".to_owned(),
                        address: address.clone(),
                        sni: Some(sni),
                        ..Default::default()
                    })),
                })
                .collect();
            let batch = Request {
                request_type: Some(RequestType::ApplyChanges(proto::ChangeBatch {
                    requests,
                    ..Default::default()
                })),
            };
            match channel.request(&batch, |_| {}) {
                Ok(r) if r.status == proto::ResponseStatus::Ok as i32 => {
                    if acknowledged.send(b).is_err() {
                        return;
                    }
                }
                _ => return,
            }
        }
    })
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
    // The proxy booted from this file's text: it read only the table that
    // changed.
    let logged = proxy
        .wait_stderr("reloading ", Duration::from_secs(10))
        .expect("the proxy logged its reload");
    assert!(
        logged.contains("(its 1 changed cluster table(s);"),
        "{logged}"
    );
    assert!(served(&proxy, "renamed.example.com"));
    assert!(!served(&proxy, &name(5, 7)), "the old name still routes");
    assert!(served(&proxy, &name(4, 7)), "its neighbour stopped routing");

    let status = proxy.cli(&["status"]).expect("status");
    let said = String::from_utf8_lossy(&status.stdout);
    assert!(said.contains("generation 1"), "{said}");

    // Batches of adds, cut by a kill -9 once a few were acknowledged.
    let (tx, rx) = mpsc::channel();
    let adder = add_batches(&proxy, tx);
    let mut acknowledged = Vec::new();
    while acknowledged.len() < BEFORE_KILL {
        acknowledged.push(
            rx.recv_timeout(Duration::from_secs(30))
                .expect("a batch answered"),
        );
    }
    proxy.kill().expect("kill -9");
    adder.join().expect("adder");
    acknowledged.extend(rx.try_iter());
    let in_flight = acknowledged.len();
    let restarting = Instant::now();
    proxy
        .restart(Duration::from_secs(60))
        .expect("restart from the journal");
    eprintln!(
        "{} batches acknowledged; restart from the state file and journal: {:?} (debug build)",
        acknowledged.len(),
        restarting.elapsed()
    );
    for &b in &acknowledged {
        for name in batch_names(b) {
            assert!(served(&proxy, &name), "acknowledged {name} lost");
        }
    }
    let kept: Vec<bool> = batch_names(in_flight)
        .iter()
        .map(|name| served(&proxy, name))
        .collect();
    assert!(
        kept.iter().all(|k| *k) || kept.iter().all(|k| !*k),
        "the batch in flight was half applied: {kept:?}"
    );
    assert!(
        !served(&proxy, &batch_names(in_flight + 1)[0]),
        "a batch never sent is served"
    );
    assert!(served(&proxy, "renamed.example.com"), "the reload was lost");
    assert!(!served(&proxy, &name(5, 7)));

    // The listing, over 1 MiB at this size had it been one answer, comes in
    // pages: it holds exactly the names served.
    let listed = proxy.cli(&["frontend", "list"]).expect("frontend list");
    assert!(
        listed.status.success(),
        "{}",
        String::from_utf8_lossy(&listed.stderr)
    );
    let text = String::from_utf8_lossy(&listed.stdout);
    let mut names: Vec<&str> = text
        .lines()
        .skip(1)
        .filter_map(|line| line.split_whitespace().nth(1))
        .collect();
    names.sort_unstable();
    let mut expected: Vec<String> = (0..CLUSTERS)
        .flat_map(|c| (0..NAMES).map(move |i| (i, c)))
        .filter(|&ic| ic != (5, 7))
        .map(|(i, c)| name(i, c))
        .chain(["renamed.example.com".to_owned()])
        .chain(acknowledged.iter().flat_map(|&b| batch_names(b)))
        .chain(
            kept.iter()
                .all(|k| *k)
                .then(|| batch_names(in_flight))
                .into_iter()
                .flatten(),
        )
        .collect();
    expected.sort_unstable();
    assert_eq!(names.len(), expected.len(), "listed vs acknowledged");
    assert!(
        names.iter().zip(&expected).all(|(l, e)| l == e),
        "the listing differs from what is served"
    );
}
