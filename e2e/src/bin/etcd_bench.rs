//! The etcd fleet benchmark: `bench/etcd_fleet.sh` builds and runs it;
//! `doc/performance.md` ("A fleet fed by etcd") has the results.
//!
//! Usage: `etcd_bench [--routes 10000] [--changes 100]`
//!
//! Against a 3-member etcd of its own on loopback (`e2e::etcd`, members
//! allowed transactions of every route key), with the `preread` beside
//! this binary:
//!
//! 1. `--routes` route keys (one cluster each: one exact name on `*:PORT`,
//!    one backend) written in one `etcdctl txn`;
//! 2. first sync: a replica fed by etcd started, time until `preread
//!    sources` lists every route; its VmRSS once settled, beside a proxy
//!    started from the same file;
//! 3. two more replicas; `--changes` one-key changes (a put of one route
//!    key, a new name, over one gRPC connection kept open, as a controller
//!    writes): per change and replica, the time from the put's start until
//!    that replica serves the put's revision; p50, p99 and max; and the
//!    put's own time (etcd's commit) beside them;
//! 4. a bulk update: every key rewritten in one `etcdctl txn`; the first
//!    replica's VmRSS sampled every 5 ms until it serves the new revision:
//!    the peak against the steady state before.
//!
//! Every process it starts is stopped by its PID (the harness's drops).

use std::fmt::Write as _;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use e2e::etcd::EtcdCluster;
use e2e::proxy::{ProxyProcess, free_addr, preread_bin};
use etcdv3client::{EtcdClient, pb};

/// How long one step may take before the run gives up.
const BOUND: Duration = Duration::from_secs(300);
const PREFIX: &str = "/bench/";

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|text| {
            text.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}

/// The VmRSS of `pid` once two reads 500 ms apart agree within 1%.
fn settled_rss(pid: u32) -> u64 {
    let mut last = rss_kib(pid);
    for _ in 0..40 {
        std::thread::sleep(Duration::from_millis(500));
        let now = rss_kib(pid);
        if now.abs_diff(last) * 100 <= last {
            return now;
        }
        last = now;
    }
    last
}

fn config(listener: &str, routes: usize, generation: usize) -> String {
    let mut text = format!("worker_count = 1\n[[listeners]]\naddress = \"{listener}\"\n");
    for i in 0..routes {
        let _ = write!(
            text,
            "[clusters.c{i}]\nfrontends = [{{ address = \"{listener}\", sni = \"n{i}-{generation}.bench.example\" }}]\n\
             backends = [{{ address = \"127.0.0.1:9\", backend_id = \"c{i}-0\" }}]\n"
        );
    }
    text
}

fn etcd_revision(replica: &ProxyProcess) -> i64 {
    replica.source("etcd").map_or(0, |s| s.revision)
}

fn wait(what: &str, mut done: impl FnMut() -> bool) -> Result<Duration, String> {
    let start = Instant::now();
    while !done() {
        if start.elapsed() > BOUND {
            return Err(format!("{what}: not within {BOUND:?}"));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(start.elapsed())
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn replica_config(listener: &str, cluster: &EtcdCluster, id: &str) -> String {
    format!(
        "worker_count = 1\n[[listeners]]\naddress = \"{listener}\"\n[sources.etcd]\n\
         endpoints = {}\nprefix = \"{PREFIX}\"\nreplica_id = \"{id}\"\n",
        cluster.endpoints_toml()
    )
}

/// Route key `c{i}` on port `port`, generation `generation`: one line
/// (TOML inline tables, literal strings), as `etcdctl txn` reads a value.
fn key_text(i: usize, port: u16, generation: usize) -> String {
    format!(
        "clusters = {{ c{i} = {{ frontends = [{{ address = '*:{port}', sni = \
         'n{i}-{generation}.bench.example' }}], backends = [{{ address = '127.0.0.1:9', \
         backend_id = 'c{i}-0' }}] }} }}"
    )
}

/// Writes every route key of `generation` in one transaction.
fn write_keys(
    cluster: &EtcdCluster,
    routes: usize,
    port: u16,
    generation: usize,
) -> Result<Duration, String> {
    let mut script = String::from("\n");
    for i in 0..routes {
        let _ = writeln!(
            script,
            "put {PREFIX}routes/c{i} \"{}\"",
            key_text(i, port, generation)
        );
    }
    script.push_str("\n\n");
    let start = Instant::now();
    cluster.txn(&script)?;
    Ok(start.elapsed())
}

fn run(routes: usize, changes: usize) -> Result<String, String> {
    let mut report = String::new();
    let bin = preread_bin()?;
    let _ = writeln!(report, "preread: {}", bin.display());
    let cluster = EtcdCluster::start_with(&[
        "--max-txn-ops",
        &(routes + 10).to_string(),
        "--max-request-bytes",
        "67108864",
    ])?;
    let port = free_addr().port();
    let took = write_keys(&cluster, routes, port, 0)?;
    let _ = writeln!(
        report,
        "{routes} route keys written (one etcdctl txn): {} ms",
        took.as_millis()
    );

    // First sync, and memory beside the same routes from a file.
    let start = Instant::now();
    let first = ProxyProcess::start(&replica_config(
        &format!("127.0.0.2:{port}"),
        &cluster,
        "r1",
    ))?;
    let synced = wait("first sync", || {
        first
            .source("etcd")
            .is_ok_and(|s| s.routes as usize == routes)
    })?;
    let _ = writeln!(
        report,
        "first sync of {routes} keys: {} ms from the process start ({} ms after it was ready)",
        start.elapsed().as_millis(),
        synced.as_millis()
    );
    let etcd_rss = settled_rss(first.pid());
    let from_file = ProxyProcess::start(&config(&format!("127.0.0.5:{port}"), routes, 0))?;
    let file_rss = settled_rss(from_file.pid());
    drop(from_file);
    let _ = writeln!(
        report,
        "VmRSS with {routes} routes: fed by etcd {etcd_rss} KiB, from a file {file_rss} KiB ({:+.1}%)",
        (etcd_rss as f64 / file_rss.max(1) as f64 - 1.0) * 100.0
    );

    // One-key changes seen by three replicas.
    let mut replicas = vec![first];
    for (id, ip) in [("r2", "127.0.0.3"), ("r3", "127.0.0.4")] {
        let l = format!("{ip}:{port}");
        let replica = ProxyProcess::start(&replica_config(&l, &cluster, id))?;
        wait("sync", || {
            replica
                .source("etcd")
                .is_ok_and(|s| s.routes as usize == routes)
        })?;
        replicas.push(replica);
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("runtime: {e}"))?;
    let mut writer = runtime
        .block_on(EtcdClient::new(cluster.endpoints(), None))
        .map_err(|e| format!("etcd client: {e}"))?;
    let mut latencies: Vec<f64> = Vec::new();
    let mut puts: Vec<f64> = Vec::new();
    for i in 0..changes {
        let key = format!("{PREFIX}routes/c{}", i % routes);
        let value = key_text(i % routes, port, i + 2);
        let start = Instant::now();
        let put = pb::PutRequest {
            key: key.into_bytes(),
            value: value.into_bytes(),
            ..Default::default()
        };
        let revision = runtime
            .block_on(writer.kv.put(put))
            .map_err(|e| format!("put: {e}"))?
            .header
            .map_or(0, |h| h.revision);
        puts.push(start.elapsed().as_secs_f64() * 1000.0);
        let mut pending: Vec<usize> = (0..replicas.len()).collect();
        while !pending.is_empty() {
            if start.elapsed() > BOUND {
                return Err(format!("change {i} not seen by {pending:?}"));
            }
            pending.retain(|&r| {
                if etcd_revision(&replicas[r]) >= revision {
                    latencies.push(start.elapsed().as_secs_f64() * 1000.0);
                    false
                } else {
                    true
                }
            });
            // A breath between rounds: the replicas share the machine's
            // cores with this loop.
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    latencies.sort_by(f64::total_cmp);
    puts.sort_by(f64::total_cmp);
    let _ = writeln!(
        report,
        "one-key change visible, {} samples ({changes} changes x {} replicas): p50 {:.1} ms, \
         p99 {:.1} ms, max {:.1} ms (from the start of the put)",
        latencies.len(),
        replicas.len(),
        percentile(&latencies, 50.0),
        percentile(&latencies, 99.0),
        latencies.last().copied().unwrap_or(0.0)
    );
    let _ = writeln!(
        report,
        "  of which the put itself (etcd's commit, until its answer): p50 {:.1} ms, p99 {:.1} ms",
        percentile(&puts, 50.0),
        percentile(&puts, 99.0)
    );

    // A bulk update of every key in one transaction.
    let pid = replicas[0].pid();
    let steady = settled_rss(pid);
    let before = etcd_revision(&replicas[0]);
    let sampling = Arc::new(AtomicBool::new(true));
    let on = Arc::clone(&sampling);
    let sampler = std::thread::spawn(move || {
        let mut peak = 0;
        while on.load(Ordering::Relaxed) {
            peak = peak.max(rss_kib(pid));
            std::thread::sleep(Duration::from_millis(5));
        }
        peak
    });
    let start = Instant::now();
    write_keys(&cluster, routes, port, 1)?;
    wait("bulk update", || etcd_revision(&replicas[0]) > before)?;
    let applied = start.elapsed();
    // A second of the settling after the generation counts too.
    std::thread::sleep(Duration::from_secs(1));
    sampling.store(false, Ordering::Relaxed);
    drop(replicas);
    let peak = sampler
        .join()
        .map_err(|_| "the sampler panicked".to_owned())?;
    let _ = writeln!(
        report,
        "bulk update of {routes} keys (one txn): applied in {} ms; VmRSS steady {steady} KiB, \
         peak {peak} KiB ({:.2}x)",
        applied.as_millis(),
        peak as f64 / steady.max(1) as f64
    );
    Ok(report)
}

fn main() -> ExitCode {
    let mut routes = 10_000;
    let mut changes = 100;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().and_then(|v| v.parse::<usize>().ok());
        match (flag.as_str(), value) {
            ("--routes", Some(v)) => routes = v,
            ("--changes", Some(v)) => changes = v,
            _ => {
                eprintln!("usage: etcd_bench [--routes N] [--changes N]");
                return ExitCode::from(2);
            }
        }
    }
    match run(routes, changes) {
        Ok(report) => {
            print!("{report}");
            ExitCode::SUCCESS
        }
        Err(why) => {
            eprintln!("etcd_bench: {why}");
            ExitCode::FAILURE
        }
    }
}
