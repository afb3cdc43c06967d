//! The directory source, and scale-out on paper made real once: two
//! preread processes, each listening on its own loopback address
//! (127.0.0.2 and 127.0.0.3, one port), watch the same directory, whose
//! files name the listener as `*:PORT`. After every change (a file added,
//! changed, broken, removed) both route every probe name the same way,
//! through real TLS handshakes with the backends' certificates, and
//! report the same excluded fragments with the same codes.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::time::{Duration, Instant};

use e2e::backend::{BackendConfig, TlsBackend};
use e2e::client::tls_request;
use e2e::proxy::{ProxyProcess, free_port_on};
use e2e::testkit::{TempDir, eventually, stderr_tail};

/// How long a change may take to reach both replicas: the debounce, the
/// scan and one generation, with room for a loaded machine.
const FOLLOW: Duration = Duration::from_secs(5);

const PROBES: [&str; 4] = [
    "a.example.com",
    "b.example.com",
    "c.example.com",
    "other.example.com",
];

struct Replica {
    proxy: ProxyProcess,
    addr: SocketAddr,
}

/// The two replicas, on one port of 127.0.0.2 and 127.0.0.3.
fn replicas(dir: &Path) -> Vec<Replica> {
    let mut last = String::new();
    for _ in 0..3 {
        let port = free_port_on(&[2, 3].map(|n| IpAddr::from([127, 0, 0, n])));
        let started: Result<Vec<Replica>, String> = ["127.0.0.2", "127.0.0.3"]
            .into_iter()
            .map(|ip| {
                let addr: SocketAddr =
                    format!("{ip}:{port}").parse().map_err(|e| format!("{e}"))?;
                let config = format!(
                    "[[listeners]]\naddress = \"{addr}\"\n\n[sources.directory]\npath = \"{}\"\n",
                    dir.display()
                );
                ProxyProcess::start(&config).map(|proxy| Replica { proxy, addr })
            })
            .collect();
        match started {
            Ok(replicas) => return replicas,
            Err(e) => last = e,
        }
    }
    panic!("the replicas did not start: {last}");
}

/// How `replica` routes each probe name: the backend that answered, or
/// `refused`.
fn decisions(replica: &Replica) -> BTreeMap<&'static str, String> {
    PROBES
        .iter()
        .map(|sni| {
            let decision = match tls_request(replica.addr, sni, &[], None) {
                Ok(outcome) => outcome.backend().unwrap_or("?").to_owned(),
                Err(_) => "refused".to_owned(),
            };
            (*sni, decision)
        })
        .collect()
}

/// The excluded fragments of `replica`'s directory source, with codes.
fn excluded(replica: &Replica) -> Vec<(String, String, String)> {
    let source = replica
        .proxy
        .source("directory")
        .unwrap_or_else(|e| panic!("{e}"));
    source
        .excluded
        .into_iter()
        .map(|e| (e.name, e.error_code, e.message))
        .collect()
}

/// Waits until both replicas route as `expected`, then checks that they
/// decide and report alike.
fn both_follow(replicas: &[Replica], step: &str, expected: &[(&str, &str)]) {
    let expected: BTreeMap<&str, String> = PROBES
        .iter()
        .map(|sni| {
            let backend = expected
                .iter()
                .find(|(name, _)| name == sni)
                .map_or("refused", |(_, backend)| *backend);
            (*sni, backend.to_owned())
        })
        .collect();
    let start = Instant::now();
    for replica in replicas {
        let followed = eventually(FOLLOW, || decisions(replica) == expected);
        assert!(
            followed,
            "{step}: {} decides {:?}, not {expected:?}; stderr:\n{}",
            replica.addr,
            decisions(replica),
            stderr_tail(&replica.proxy)
        );
    }
    eprintln!(
        "{step}: both replicas followed within {:?}",
        start.elapsed()
    );
    let [first, second] = replicas else {
        panic!("two replicas");
    };
    assert_eq!(
        decisions(first),
        decisions(second),
        "{step}: decisions differ"
    );
    assert_eq!(
        excluded(first),
        excluded(second),
        "{step}: exclusions differ"
    );
}

fn write(dir: &Path, name: &str, text: &str) {
    std::fs::write(dir.join(name), text).unwrap_or_else(|e| panic!("write {name}: {e}"));
}

fn cluster(id: &str, port: u16, snis: &[&str], backend: &TlsBackend) -> String {
    let frontends: Vec<String> = snis
        .iter()
        .map(|sni| format!("{{ address = \"*:{port}\", sni = \"{sni}\" }}"))
        .collect();
    format!(
        "[clusters.{id}]\nfrontends = [{}]\nbackends = [{{ address = \"{}\", backend_id = \"{}\" }}]\n",
        frontends.join(", "),
        backend.addr(),
        backend.name()
    )
}

#[test]
fn two_replicas_watching_one_directory_decide_alike_after_every_change() {
    let a0 = TlsBackend::start(BackendConfig::new("a-0", &["a.example.com"]));
    let a1 = TlsBackend::start(BackendConfig::new(
        "a-1",
        &["a.example.com", "b.example.com"],
    ));
    let d0 = TlsBackend::start(BackendConfig::new("d-0", &["c.example.com"]));
    let dir = TempDir::new("conf.d");
    let replicas = replicas(dir.path());
    let port = replicas[0].addr.port();
    both_follow(&replicas, "empty directory", &[]);

    write(
        dir.path(),
        "a.toml",
        &cluster("a", port, &["a.example.com"], &a0),
    );
    both_follow(&replicas, "a.toml added", &[("a.example.com", "a-0")]);

    write(
        dir.path(),
        "a.toml",
        &cluster("a", port, &["a.example.com", "b.example.com"], &a1),
    );
    both_follow(
        &replicas,
        "a.toml changed",
        &[("a.example.com", "a-1"), ("b.example.com", "a-1")],
    );

    write(dir.path(), "c.toml", "[clusters.c\nfrontends = []\n");
    write(
        dir.path(),
        "d.toml",
        &cluster("d", port, &["c.example.com"], &d0),
    );
    both_follow(
        &replicas,
        "c.toml broken, d.toml added",
        &[
            ("a.example.com", "a-1"),
            ("b.example.com", "a-1"),
            ("c.example.com", "d-0"),
        ],
    );
    let broken = excluded(&replicas[0]);
    assert_eq!(broken.len(), 1, "{broken:?}");
    assert_eq!(
        (broken[0].0.as_str(), broken[0].1.as_str()),
        ("c.toml", "E001")
    );
    assert!(broken[0].2.starts_with("c.toml:1:"), "the line: {broken:?}");
    let shown = replicas[1]
        .proxy
        .cli(&["sources"])
        .unwrap_or_else(|e| panic!("{e}"));
    let text = String::from_utf8_lossy(&shown.stdout);
    assert!(
        text.contains("excluded directory c.toml: E001: c.toml:1:"),
        "preread sources:\n{text}"
    );

    std::fs::remove_file(dir.path().join("a.toml")).unwrap_or_else(|e| panic!("{e}"));
    both_follow(&replicas, "a.toml removed", &[("c.example.com", "d-0")]);

    write(
        dir.path(),
        "c.toml",
        &cluster("c", port, &["a.example.com"], &a0),
    );
    both_follow(
        &replicas,
        "c.toml fixed",
        &[("a.example.com", "a-0"), ("c.example.com", "d-0")],
    );
    for replica in &replicas {
        let source = replica
            .proxy
            .source("directory")
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((source.routes, source.fragments), (2, 2), "{source:?}");
        assert!(
            source.excluded.is_empty() && source.error.is_empty(),
            "{source:?}"
        );
    }
}
