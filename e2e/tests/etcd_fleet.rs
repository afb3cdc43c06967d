//! A fleet fed by etcd, against a real 3-member etcd cluster on loopback
//! (its own data dirs, stopped by PID) and three preread replicas on
//! 127.0.0.2, 127.0.0.3 and 127.0.0.4 (one port): after every change they
//! route every probe name alike, through real TLS handshakes, and their
//! status keys show the same revision; the last key deleted empties the
//! routes; a bad key is excluded with its code everywhere and listed in
//! every status key; the etcd leader killed during 500 changes loses
//! none; all members down for 10 s fail no connection and the replicas
//! catch up; a compaction past a paused replica resyncs it to what the
//! others serve; a replica restarted while etcd is down boots from its
//! saved state. And `fleet publish` of the example config makes a fresh
//! replica route as `preread start -c` of that file does.
//!
//! Every wait is for a condition, with a generous deadline.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use command::proto::{self, request::RequestType, response_content::ContentType};
use e2e::backend::{BackendConfig, TlsBackend};
use e2e::client::tls_request;
use e2e::etcd::EtcdCluster;
use e2e::proxy::{ProxyProcess, free_addr, free_port_on};
use e2e::testkit::{eventually, stderr_tail};

/// How long a change may take to reach every replica on a loaded machine.
const FOLLOW: Duration = Duration::from_secs(30);

const PREFIX: &str = "/e2e/";

const PROBES: [&str; 3] = ["a.example.com", "b.example.com", "other.example.com"];

struct Replica {
    proxy: ProxyProcess,
    addr: SocketAddr,
    id: String,
}

fn replica_config(cluster: &EtcdCluster, addr: SocketAddr, id: &str) -> String {
    format!(
        "worker_count = 1\nsaved_state = \"${{dir}}/state\"\nautomatic_state_save = true\n\
         [[listeners]]\naddress = \"{addr}\"\n\n[sources.etcd]\nendpoints = {}\n\
         prefix = \"{PREFIX}\"\nreplica_id = \"{id}\"\n",
        cluster.endpoints_toml()
    )
}

/// Three replicas, on one port of 127.0.0.2, .3 and .4.
fn replicas(cluster: &EtcdCluster) -> Vec<Replica> {
    let mut last = String::new();
    for _ in 0..3 {
        let port = free_port_on(&[2, 3, 4].map(|n| IpAddr::from([127, 0, 0, n])));
        let started: Result<Vec<Replica>, String> = (2..=4)
            .map(|n| {
                let addr: SocketAddr = format!("127.0.0.{n}:{port}")
                    .parse()
                    .map_err(|e| format!("{e}"))?;
                let id = format!("r{n}");
                let config = replica_config(cluster, addr, &id);
                ProxyProcess::start(&config).map(|proxy| Replica { proxy, addr, id })
            })
            .collect();
        match started {
            Ok(replicas) => return replicas,
            Err(e) => last = e,
        }
    }
    panic!("the replicas did not start: {last}");
}

fn decide(addr: SocketAddr, sni: &str) -> String {
    match tls_request(addr, sni, &[], None) {
        Ok(outcome) => outcome.backend().unwrap_or("?").to_owned(),
        Err(_) => "refused".to_owned(),
    }
}

fn decisions(replica: &Replica) -> BTreeMap<&'static str, String> {
    PROBES
        .iter()
        .map(|sni| (*sni, decide(replica.addr, sni)))
        .collect()
}

/// The replicas' status keys, by replica id.
fn statuses(cluster: &EtcdCluster) -> BTreeMap<String, serde_json::Value> {
    let prefix = format!("{PREFIX}status/");
    let out = cluster.ctl(&["get", "--prefix", &prefix]);
    let lines: Vec<&str> = out.lines().collect();
    lines
        .chunks(2)
        .filter_map(|pair| {
            let [key, value] = pair else { return None };
            let id = key.strip_prefix(&prefix)?.to_owned();
            Some((id, serde_json::from_str(value).ok()?))
        })
        .collect()
}

/// Waits until every replica routes as `expected` and every status key
/// shows `revision` (when given), then checks the replicas agree.
fn all_follow(
    cluster: &EtcdCluster,
    replicas: &[Replica],
    step: &str,
    expected: &[(&str, &str)],
    revision: Option<i64>,
) {
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
    if let Some(revision) = revision {
        let equal = eventually(FOLLOW, || {
            let statuses = statuses(cluster);
            replicas.iter().all(|r| {
                statuses
                    .get(&r.id)
                    .and_then(|s| s["revision"].as_i64())
                    .is_some_and(|got| got == revision)
            })
        });
        assert!(
            equal,
            "{step}: the status keys do not all show revision {revision}: {:?}",
            statuses(cluster)
        );
    }
    eprintln!(
        "{step}: every replica followed within {:?}",
        start.elapsed()
    );
}

fn route(cluster_id: &str, sni: &str, backend: &TlsBackend) -> String {
    format!(
        "[clusters.{cluster_id}]\nfrontends = [{{ address = \"*:PORT\", sni = \"{sni}\" }}]\n\
         backends = [{{ address = \"{}\", backend_id = \"{}\" }}]\n",
        backend.addr(),
        backend.name()
    )
}

/// Puts route key `name`; the revision of the put.
fn put_route(cluster: &EtcdCluster, port: u16, name: &str, text: &str) -> i64 {
    let text = text.replace("PORT", &port.to_string());
    cluster.put(&format!("{PREFIX}routes/{name}"), &text)
}

/// Connections made again and again to every replica while `running`;
/// the failures counted.
fn load(
    replicas: &[Replica],
    running: &Arc<AtomicBool>,
) -> (std::thread::JoinHandle<()>, Arc<AtomicU64>, Arc<AtomicU64>) {
    let addrs: Vec<SocketAddr> = replicas.iter().map(|r| r.addr).collect();
    let failed = Arc::new(AtomicU64::new(0));
    let made = Arc::new(AtomicU64::new(0));
    let (f, m, r) = (Arc::clone(&failed), Arc::clone(&made), Arc::clone(running));
    let handle = std::thread::spawn(move || {
        while r.load(Ordering::Relaxed) {
            for addr in &addrs {
                match tls_request(*addr, "a.example.com", &[], None) {
                    Ok(outcome) if outcome.backend() == Some("a-1") => {}
                    _ => {
                        f.fetch_add(1, Ordering::Relaxed);
                    }
                }
                m.fetch_add(1, Ordering::Relaxed);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    });
    (handle, failed, made)
}

#[test]
fn a_fleet_fed_by_etcd_converges_and_outlives_its_store() {
    let mut cluster = EtcdCluster::start().unwrap_or_else(|e| panic!("{e}"));
    let a0 = TlsBackend::start(BackendConfig::new("a-0", &["a.example.com"]));
    let a1 = TlsBackend::start(BackendConfig::new("a-1", &["a.example.com"]));
    let b0 = TlsBackend::start(BackendConfig::new("b-0", &["b.example.com"]));
    let n0 = TlsBackend::start(BackendConfig::new("n-0", &["other.example.com"]));
    let replicas = replicas(&cluster);
    let port = replicas[0].addr.port();

    // Convergence after every change, with equal status revisions.
    let revision = put_route(&cluster, port, "a", &route("a", "a.example.com", &a0));
    all_follow(
        &cluster,
        &replicas,
        "a added",
        &[("a.example.com", "a-0")],
        Some(revision),
    );
    put_route(&cluster, port, "a", &route("a", "a.example.com", &a1));
    let revision = put_route(&cluster, port, "b", &route("b", "b.example.com", &b0));
    all_follow(
        &cluster,
        &replicas,
        "a changed, b added",
        &[("a.example.com", "a-1"), ("b.example.com", "b-0")],
        Some(revision),
    );
    let shown = replicas[0]
        .proxy
        .cli(&["sources"])
        .unwrap_or_else(|e| panic!("{e}"));
    let text = String::from_utf8_lossy(&shown.stdout);
    let revision = revision.to_string();
    assert!(
        text.contains("etcd") && text.contains(&revision),
        "preread sources:\n{text}"
    );

    // A bad key and a clashing key: excluded with their codes everywhere.
    cluster.put(&format!("{PREFIX}routes/bad"), "[clusters.bad\n");
    let revision = put_route(
        &cluster,
        port,
        "clash",
        &route("clash", "b.example.com", &a0),
    );
    all_follow(
        &cluster,
        &replicas,
        "bad and clashing keys",
        &[("a.example.com", "a-1"), ("b.example.com", "b-0")],
        Some(revision),
    );
    for replica in &replicas {
        let source = replica
            .proxy
            .source("etcd")
            .unwrap_or_else(|e| panic!("{e}"));
        let codes: Vec<(String, String)> = source
            .excluded
            .iter()
            .map(|e| (e.name.clone(), e.error_code.clone()))
            .collect();
        assert_eq!(
            codes,
            [
                ("bad".to_owned(), "E001".to_owned()),
                ("clash".to_owned(), "E204".to_owned())
            ],
            "{}: {source:?}",
            replica.id
        );
        let status = &statuses(&cluster)[&replica.id];
        let listed: Vec<(&str, &str)> = status["excluded"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|e| Some((e["key"].as_str()?, e["code"].as_str()?)))
                    .collect()
            })
            .unwrap_or_default();
        assert_eq!(listed, [("bad", "E001"), ("clash", "E204")], "{status}");
    }
    let fleet = replicas[0]
        .proxy
        .cli(&["fleet", "status", "--expect", "3"])
        .unwrap_or_else(|e| panic!("{e}"));
    let text = String::from_utf8_lossy(&fleet.stdout);
    assert!(
        fleet.status.success(),
        "fleet status:\n{text}{}",
        String::from_utf8_lossy(&fleet.stderr)
    );
    assert!(
        text.contains("r2") && text.contains("excluded bad: E001"),
        "{text}"
    );

    // The last keys deleted: the routes are empty everywhere.
    let mut revision = 0;
    for name in ["a", "b", "bad", "clash"] {
        revision = cluster.del(&format!("{PREFIX}routes/{name}"));
    }
    all_follow(
        &cluster,
        &replicas,
        "every key deleted",
        &[],
        Some(revision),
    );

    // The leader killed during a stream of 500 changes: none is lost.
    put_route(&cluster, port, "a", &route("a", "a.example.com", &a1));
    let killed = cluster
        .leader()
        .unwrap_or_else(|| panic!("no leader:\n{}", cluster.logs()));
    for i in 0..500 {
        if i == 150 {
            cluster.kill(killed);
        }
        let text = route("n", &format!("n{i}.example.com"), &n0).replace("PORT", &port.to_string());
        let key = format!("{PREFIX}routes/n");
        let put = eventually(FOLLOW, || {
            cluster
                .etcdctl(&["put", &key, "--", &text])
                .is_ok_and(|out| out.status.success())
        });
        assert!(put, "put {i} failed:\n{}", cluster.logs());
    }
    let final_text = route("o", "other.example.com", &n0).replace("PORT", &port.to_string());
    let revision = cluster.put(&format!("{PREFIX}routes/n"), &final_text);
    all_follow(
        &cluster,
        &replicas,
        "500 changes, the leader killed",
        &[("a.example.com", "a-1"), ("other.example.com", "n-0")],
        Some(revision),
    );
    cluster.restart(killed).unwrap_or_else(|e| panic!("{e}"));
    cluster.wait_ready(FOLLOW).unwrap_or_else(|e| panic!("{e}"));

    // Every member down for 10 s: no connection fails, then catch-up.
    let running = Arc::new(AtomicBool::new(true));
    let (loader, failed, made) = load(&replicas, &running);
    for i in 0..3 {
        cluster.kill(i);
    }
    std::thread::sleep(Duration::from_secs(10));
    for replica in &replicas {
        let said = replica.proxy.wait_stderr("serving revision", FOLLOW);
        assert!(
            said.is_ok(),
            "{}: the log does not say how stale:\n{}",
            replica.id,
            stderr_tail(&replica.proxy)
        );
    }
    for i in 0..3 {
        cluster.restart(i).unwrap_or_else(|e| panic!("{e}"));
    }
    cluster.wait_ready(FOLLOW).unwrap_or_else(|e| panic!("{e}"));
    let revision = put_route(&cluster, port, "b", &route("b", "b.example.com", &b0));
    all_follow(
        &cluster,
        &replicas,
        "the store back",
        &[
            ("a.example.com", "a-1"),
            ("b.example.com", "b-0"),
            ("other.example.com", "n-0"),
        ],
        Some(revision),
    );
    running.store(false, Ordering::Relaxed);
    loader
        .join()
        .unwrap_or_else(|_| panic!("the load thread panicked"));
    assert!(
        made.load(Ordering::Relaxed) > 30,
        "too few connections made"
    );
    assert_eq!(
        failed.load(Ordering::Relaxed),
        0,
        "connections failed while the store was down"
    );

    // A compaction past a paused replica's watch revision: it resyncs to
    // what the others serve. The replica is paused while it has no member
    // (so nothing of the later changes waits in its socket), the changes
    // and the compaction happen, then it resumes.
    let mut replicas = replicas;
    for i in 0..3 {
        cluster.kill(i);
    }
    let noticed = eventually(FOLLOW, || {
        replicas[2]
            .proxy
            .source("etcd")
            .is_ok_and(|s| !s.error.is_empty())
    });
    assert!(noticed, "{}", stderr_tail(&replicas[2].proxy));
    replicas[2]
        .proxy
        .signal(libc::SIGSTOP)
        .unwrap_or_else(|e| panic!("{e}"));
    for i in 0..3 {
        cluster.restart(i).unwrap_or_else(|e| panic!("{e}"));
    }
    cluster.wait_ready(FOLLOW).unwrap_or_else(|e| panic!("{e}"));
    cluster.del(&format!("{PREFIX}routes/b"));
    let mut last = 0;
    for i in 0..20 {
        let text = format!(
            "# version {i}\n{}",
            route("a", "a.example.com", &a0).replace("PORT", &port.to_string())
        );
        last = cluster.put(&format!("{PREFIX}routes/a"), &text);
    }
    cluster.ctl(&["compact", &last.to_string()]);
    replicas[2]
        .proxy
        .signal(libc::SIGCONT)
        .unwrap_or_else(|e| panic!("{e}"));
    all_follow(
        &cluster,
        &replicas,
        "compaction past a paused replica",
        &[("a.example.com", "a-0"), ("other.example.com", "n-0")],
        Some(last),
    );
    let resynced = replicas[2].proxy.wait_stderr(
        "reading the routes again (only the difference is applied)",
        FOLLOW,
    );
    assert!(resynced.is_ok(), "{}", stderr_tail(&replicas[2].proxy));

    // A replica restarted while etcd is down boots from its saved state.
    for i in 0..3 {
        cluster.kill(i);
    }
    let restarted = &mut replicas[0];
    restarted.proxy.kill().unwrap_or_else(|e| panic!("{e}"));
    restarted
        .proxy
        .restart(FOLLOW)
        .unwrap_or_else(|e| panic!("{e}"));
    let booted = eventually(FOLLOW, || decide(restarted.addr, "a.example.com") == "a-0");
    assert!(
        booted,
        "the restarted replica does not serve its saved state:\n{}",
        stderr_tail(&restarted.proxy)
    );
    let said = restarted
        .proxy
        .wait_stderr("serving the state it started with", FOLLOW);
    assert!(said.is_ok(), "{}", stderr_tail(&restarted.proxy));
    for i in 0..3 {
        cluster.restart(i).unwrap_or_else(|e| panic!("{e}"));
    }
    cluster.wait_ready(FOLLOW).unwrap_or_else(|e| panic!("{e}"));
    all_follow(
        &cluster,
        &replicas,
        "the restarted replica catches up",
        &[("a.example.com", "a-0"), ("other.example.com", "n-0")],
        None,
    );
}

/// Every cluster, frontend and backend of `proxy`, as listed.
fn routes(proxy: &ProxyProcess) -> Vec<String> {
    let mut all = Vec::new();
    for request in [
        RequestType::ListClusters(proto::ListClusters::default()),
        RequestType::ListFrontends(proto::ListFrontends::default()),
        RequestType::ListBackends(proto::ListBackends::default()),
    ] {
        let response = proxy.apply(request).unwrap_or_else(|e| panic!("{e}"));
        let listed = match response.content.and_then(|c| c.content_type) {
            Some(ContentType::Clusters(list)) => format!("{:?}", list.clusters),
            Some(ContentType::Frontends(list)) => format!("{:?}", list.frontends),
            Some(ContentType::Backends(list)) => {
                let backends: Vec<_> = list.backends.iter().map(|b| &b.backend).collect();
                format!("{backends:?}")
            }
            other => panic!("{other:?}"),
        };
        all.push(listed);
    }
    all
}

#[test]
fn fleet_publish_of_the_example_config_equals_starting_from_it() {
    let cluster = EtcdCluster::start().unwrap_or_else(|e| panic!("{e}"));
    let example = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../doc/examples/preread.toml"),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let listener = free_addr();
    let text = example
        .replace("127.0.0.1:8443", &listener.to_string())
        .replace("metrics_address = \"127.0.0.1:9109\"", "")
        .replace("command_socket = \"./preread.sock\"", "");
    let mut from_file = ProxyProcess::start(&text).unwrap_or_else(|e| panic!("{e}"));
    let expected = routes(&from_file);

    let file = from_file.dir().join("published.toml");
    std::fs::write(&file, &text).unwrap_or_else(|e| panic!("{e}"));
    let endpoints = cluster.endpoints().join(",");
    let file_arg = file.display().to_string();
    let publish = |extra: &[&str]| {
        let mut args = vec![
            "-c",
            file_arg.as_str(),
            "fleet",
            "publish",
            "--endpoints",
            &endpoints,
            "--prefix",
            PREFIX,
        ];
        args.extend_from_slice(extra);
        from_file.cli(&args).unwrap_or_else(|e| panic!("{e}"))
    };
    let dry = publish(&["--dry-run"]);
    let said = String::from_utf8_lossy(&dry.stdout).into_owned();
    assert!(
        dry.status.success() && said.contains("would write"),
        "{said}"
    );
    assert!(
        cluster
            .ctl(&["get", "--prefix", &format!("{PREFIX}routes/")])
            .is_empty(),
        "a dry run writes nothing"
    );
    // A key the file does not have goes.
    cluster.put(&format!("{PREFIX}routes/stale"), "[clusters.stale]\n");
    let done = publish(&[]);
    let said = String::from_utf8_lossy(&done.stdout).into_owned();
    assert!(
        done.status.success() && said.contains("deleted /e2e/routes/stale"),
        "{said}"
    );
    from_file.kill().unwrap_or_else(|e| panic!("{e}"));

    assert!(
        said.contains("kept in the config file: cluster fallback"),
        "{said}"
    );

    // A fresh replica: the example's settings and listeners, and the
    // listener's default cluster, which stays in the file.
    let clusters_at = text.find("[clusters.").unwrap_or(text.len());
    let settings: String = text[..clusters_at].to_owned();
    let fallback_at = text.find("[clusters.fallback]").unwrap_or(text.len());
    let fallback_end = text[fallback_at..]
        .find("\n\n")
        .map_or(text.len(), |end| fallback_at + end);
    let fallback = &text[fallback_at..fallback_end];
    let config = format!(
        "{settings}\n{fallback}\n\n[sources.etcd]\nendpoints = {}\nprefix = \"{PREFIX}\"\n\
         replica_id = \"fresh\"\n",
        cluster.endpoints_toml()
    );
    let fresh = ProxyProcess::start(&config).unwrap_or_else(|e| panic!("{e}"));
    let equal = eventually(FOLLOW, || routes(&fresh) == expected);
    assert!(
        equal,
        "the fresh replica's routes:\n{:?}\nnot those of start -c:\n{expected:?}\n{}",
        routes(&fresh),
        stderr_tail(&fresh)
    );
}
