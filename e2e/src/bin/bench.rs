//! The data-path benchmark: preread (splice on and off), HAProxy and nginx
//! against the direct connection, on loopback. `bench/run.sh` builds
//! everything, installs the peers and runs this; `doc/performance.md`
//! ("Data path") has the method and the results.
//!
//! Usage: `bench [--out DIR] [--phases throughput,rate,memory,syscalls]
//! [--targets direct,preread-splice,preread-copy,haproxy,haproxy-splice,nginx]
//! [--workers 1] [--pipe-size BYTES] [--pin] [--reps 3]
//! [--bytes N] [--conns N] [--concurrency N] [--rate-bound SECONDS]
//! [--slow N] [--sessions N] [--strace-conns N] [--hello FILE]`
//!
//! `--pin` runs the rate phase with the proxy on its own CPUs and the
//! load generator (clients and backends) on the others, where the machine
//! has CPUs enough (`bench/pin.rs`; the record's `pinned` says whether it
//! was).
//!
//! `--pipe-size` gives preread's and HAProxy's spliced directions pipes
//! of that size (`splice_pipe_size`, `tune.pipesize`; nginx does not
//! splice); without it both keep the kernel's default.
//!
//! `preread-nodefer` is `preread-splice` with `defer_accept = false`;
//! `preread-delack` is `preread-copy` with `backend_delayed_ack = true`;
//! `preread-nogrow` is `preread-splice` with `splice_bulk_pipe_size = 0`
//! (its pipes keep their size, as before bulk directions grew theirs). With
//! `--workers N`, each proxy runs N worker threads or processes
//! (`worker_count`, `nbthread`, nginx's `worker_processes` under its
//! master): CPU and syscalls are summed over its processes.
//!
//! Phases, each repeated `--reps` times with the targets interleaved (their
//! order rotated by one each repetition), every proxy started fresh for each
//! measurement and stopped by its PID:
//!
//! - `throughput`: one connection uploads `--bytes` (default 4 GiB) to a
//!   sink, then one connection downloads as much from a source; GiB/s and
//!   the proxy's CPU time (user + sys) per GiB;
//! - `rate`: `--conns` short connections (hello + 64 B up, 64 B down),
//!   `--concurrency` at a time; connections/s and proxy CPU per connection;
//!   then again while `--slow` clients drip a hello one byte per second;
//! - `memory`: VmRSS idle, with `--sessions` idle connections (nothing
//!   sent), (fresh process) with `--sessions` partial hellos (the first
//!   100 bytes, then nothing), and (fresh process) with `--sessions`
//!   established idle sessions;
//! - `syscalls`: `strace -c -f` attached to a fresh proxy for
//!   `--strace-conns` (default 3,000) connections of the rate test, after
//!   the warm-up; syscalls per connection, in total and per syscall.
//!
//! Raw records go to `DIR/raw.jsonl` as they come, the summary to
//! `DIR/summary.md` (and stdout).

#[path = "../bench/mod.rs"]
mod bench;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use bench::backends::{HoldBackend, RpcBackend};
use bench::clients::{self, SlowClients};
use bench::pin;
use bench::procfs::{self, CpuTicks};
use bench::report::{Record, Sink, fmt_stats, ratios, series};
use bench::syscalls::{Tracer, breakdown};
use bench::targets::{Kind, Running};

const GIB: f64 = 1024.0 * 1024.0 * 1024.0;
/// Request and answer sizes of the connection-rate test.
const RATE_PAYLOAD: u64 = 64;
const RATE_ANSWER: u64 = 64;
/// Bytes of the hello a partial-hello connection sends.
const PARTIAL: usize = 100;

#[derive(Debug)]
struct Options {
    out: PathBuf,
    phases: Vec<String>,
    targets: Vec<Kind>,
    workers: usize,
    pipe_size: Option<u64>,
    pin: bool,
    reps: usize,
    bytes: u64,
    conns: u64,
    concurrency: usize,
    rate_bound: Duration,
    slow: usize,
    sessions: usize,
    strace_conns: u64,
    hello: Vec<u8>,
    hello_path: PathBuf,
}

fn parse_args() -> Result<Options, String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut options = Options {
        out: root.join("target/bench/latest"),
        phases: ["throughput", "rate", "memory", "syscalls"]
            .map(str::to_owned)
            .to_vec(),
        targets: [
            "direct",
            "preread-splice",
            "preread-copy",
            "preread-nodefer",
            "haproxy",
            "haproxy-splice",
            "nginx",
        ]
        .iter()
        .filter_map(|name| Kind::parse(name))
        .collect(),
        workers: 1,
        pipe_size: None,
        pin: false,
        reps: 3,
        bytes: 4 << 30,
        conns: 20_000,
        concurrency: 16,
        rate_bound: Duration::from_secs(60),
        slow: 1000,
        sessions: 1000,
        strace_conns: 3000,
        hello: Vec::new(),
        hello_path: root.join("testdata/clienthellos/curl_h2.bin"),
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{flag} needs a value"));
        let number = |text: String| -> Result<u64, String> {
            text.replace('_', "")
                .parse()
                .map_err(|e| format!("{flag} {text}: {e}"))
        };
        match flag.as_str() {
            "--out" => options.out = PathBuf::from(value()?),
            "--phases" => options.phases = value()?.split(',').map(str::to_owned).collect(),
            "--targets" => {
                options.targets = value()?
                    .split(',')
                    .map(|name| Kind::parse(name).ok_or_else(|| format!("unknown target {name}")))
                    .collect::<Result<_, _>>()?;
            }
            "--workers" => {
                options.workers = usize::try_from(number(value()?)?).unwrap_or(1).max(1);
            }
            "--pipe-size" => options.pipe_size = Some(number(value()?)?),
            "--pin" => options.pin = true,
            "--reps" => options.reps = usize::try_from(number(value()?)?).unwrap_or(1).max(1),
            "--bytes" => options.bytes = number(value()?)?,
            "--conns" => options.conns = number(value()?)?,
            "--concurrency" => {
                options.concurrency = usize::try_from(number(value()?)?).unwrap_or(1).max(1);
            }
            "--rate-bound" => options.rate_bound = Duration::from_secs(number(value()?)?),
            "--slow" => options.slow = usize::try_from(number(value()?)?).unwrap_or(0),
            "--sessions" => options.sessions = usize::try_from(number(value()?)?).unwrap_or(0),
            "--strace-conns" => options.strace_conns = number(value()?)?.max(1),
            "--hello" => options.hello_path = PathBuf::from(value()?),
            "-h" | "--help" => {
                return Err("see the header of e2e/src/bin/bench.rs for the usage".into());
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    options.hello = std::fs::read(&options.hello_path)
        .map_err(|e| format!("{}: {e}", options.hello_path.display()))?;
    Ok(options)
}

/// Proxy CPU ticks now, over all its processes (zero for the direct
/// connection).
fn proxy_cpu(running: &Running) -> CpuTicks {
    (running.pids().into_iter())
        .filter_map(|pid| procfs::cpu(pid).ok())
        .fold(CpuTicks::default(), |sum, ticks| CpuTicks {
            user: sum.user + ticks.user,
            sys: sum.sys + ticks.sys,
        })
}

/// Adds the proxy's and the bench's CPU seconds over a window to `record`.
fn cpu_values(record: &mut Record, proxy: CpuTicks, bench_self: CpuTicks, has_proxy: bool) {
    let (user, sys) = proxy.secs();
    if has_proxy {
        record.value("proxy_user_s", user).value("proxy_sys_s", sys);
    }
    let (bu, bs) = bench_self.secs();
    record.value("bench_cpu_s", bu + bs);
}

/// Keeps a stopped proxy's stderr when it said anything.
fn keep_stderr(out: &Path, name: &str, stderr: &str) {
    if !stderr.trim().is_empty() {
        let _ = std::fs::create_dir_all(out.join("logs"));
        let _ = std::fs::write(out.join("logs").join(format!("{name}.log")), stderr);
    }
}

fn rotated(targets: &[Kind], rep: usize) -> Vec<Kind> {
    let mut order = targets.to_vec();
    if !order.is_empty() {
        let shift = (rep - 1) % order.len();
        order.rotate_left(shift);
    }
    order
}

/// Starts `kind` with the options' workers and pipe size in front of the
/// two backends, its configs and logs under `<out>/work`.
fn start(
    o: &Options,
    kind: Kind,
    rpc: std::net::SocketAddr,
    hold: std::net::SocketAddr,
) -> Result<Running, String> {
    Running::start(
        kind,
        (o.workers, o.pipe_size),
        rpc,
        hold,
        &o.out.join("work"),
    )
}

fn throughput(o: &Options, sink: &mut Sink, hold: &HoldBackend, rep: usize, kind: Kind) {
    let rpc = match RpcBackend::start(o.hello.len(), 4) {
        Ok(rpc) => rpc,
        Err(e) => return eprintln!("bench: rpc backend: {e}"),
    };
    let running = match start(o, kind, rpc.addr(), hold.addr()) {
        Ok(running) => running,
        Err(e) => {
            let mut record = Record::new("upload", kind.name(), rep);
            record.note("error", e);
            sink.push(record);
            return rpc.stop();
        }
    };
    for test in ["upload", "download"] {
        let mut record = Record::new(test, kind.name(), rep);
        record.value("load1", procfs::load1());
        let (cpu0, self0) = (proxy_cpu(&running), procfs::self_cpu());
        let io_timeout = Duration::from_secs(30);
        let bound = Duration::from_secs(300);
        let result = if test == "upload" {
            clients::upload(running.rate, &o.hello, o.bytes, io_timeout, bound)
        } else {
            clients::download(running.rate, &o.hello, o.bytes, io_timeout, bound)
        };
        let cpu = proxy_cpu(&running).since(cpu0);
        cpu_values(
            &mut record,
            cpu,
            procfs::self_cpu().since(self0),
            running.pid().is_some(),
        );
        match result {
            Ok(elapsed) => {
                let gib = o.bytes as f64 / GIB;
                record
                    .value("secs", elapsed.as_secs_f64())
                    .value("gib_s", gib / elapsed.as_secs_f64());
                if running.pid().is_some() {
                    let (user, sys) = cpu.secs();
                    record.value("proxy_cpu_s_per_gib", (user + sys) / gib);
                }
            }
            Err(e) => {
                record.note("error", e);
            }
        }
        if let Some(fallbacks) = running.preread_metric("splice.fallbacks") {
            record.value("splice_fallbacks", fallbacks as f64);
        }
        sink.push(record);
    }
    keep_stderr(
        &o.out,
        &format!("throughput-{}-{rep}", kind.name()),
        &running.stop(),
    );
    rpc.stop();
}

fn rate_record(
    test: &str,
    kind: Kind,
    rep: usize,
    outcome: &clients::RateOutcome,
    cpu: CpuTicks,
    bench_self: CpuTicks,
    has_proxy: bool,
) -> Record {
    let mut record = Record::new(test, kind.name(), rep);
    record
        .value("ok", outcome.ok as f64)
        .value("failed", outcome.failed as f64)
        .value("secs", outcome.elapsed.as_secs_f64())
        .value("conn_s", outcome.ok as f64 / outcome.elapsed.as_secs_f64())
        .value("p50_us", f64::from(outcome.latency_us(500)))
        .value("p99_us", f64::from(outcome.latency_us(990)));
    cpu_values(&mut record, cpu, bench_self, has_proxy);
    if has_proxy && outcome.ok > 0 {
        let (user, sys) = cpu.secs();
        record.value(
            "proxy_cpu_us_per_conn",
            (user + sys) * 1e6 / outcome.ok as f64,
        );
    }
    if let Some(e) = &outcome.first_error {
        record.note("first_error", e.clone());
    }
    record
}

fn rate(o: &Options, sink: &mut Sink, hold: &HoldBackend, rep: usize, kind: Kind) {
    let rpc = match RpcBackend::start(o.hello.len(), o.concurrency * 2 + 8) {
        Ok(rpc) => rpc,
        Err(e) => return eprintln!("bench: rpc backend: {e}"),
    };
    let running = match start(o, kind, rpc.addr(), hold.addr()) {
        Ok(running) => running,
        Err(e) => {
            let mut record = Record::new("rate", kind.name(), rep);
            record.note("error", e);
            sink.push(record);
            return rpc.stop();
        }
    };
    let has_proxy = running.pid().is_some();
    let pinned = if o.pin {
        pin::apart(&running.pids(), o.workers).unwrap_or_else(|e| {
            eprintln!("bench: not pinned: {e}");
            None
        })
    } else {
        None
    };
    let run = |n: u64| {
        clients::rate(
            running.rate,
            &o.hello,
            n,
            o.concurrency,
            RATE_PAYLOAD,
            RATE_ANSWER,
            o.rate_bound,
        )
    };
    // Warm-up, not recorded.
    let _ = run(500);

    let load = procfs::load1();
    let accepted0 = running.preread_per_worker("tcp.accepted");
    let (cpu0, self0) = (proxy_cpu(&running), procfs::self_cpu());
    let outcome = run(o.conns);
    let (cpu, bench_self) = (
        proxy_cpu(&running).since(cpu0),
        procfs::self_cpu().since(self0),
    );
    let mut record = rate_record("rate", kind, rep, &outcome, cpu, bench_self, has_proxy);
    record.value("load1", load);
    if o.pin {
        record.value("pinned", f64::from(u8::from(pinned.is_some())));
    }
    // How SO_REUSEPORT spread the measured connections over the workers.
    if let (Some(before), Some(after)) = (accepted0, running.preread_per_worker("tcp.accepted")) {
        for (worker, (a, b)) in before.iter().zip(&after).enumerate() {
            record.value(&format!("accepted_worker_{worker}"), (b - a) as f64);
        }
    }
    sink.push(record);

    if has_proxy && o.slow > 0 {
        let fragmented = "tcp.sni_preread.rejected.fragmented";
        let frag0 = running.preread_metric(fragmented);
        let slow = SlowClients::start(
            running.rate,
            o.hello.clone(),
            o.slow,
            Duration::from_secs(5),
            o.rate_bound + Duration::from_secs(60),
        );
        // Every slow client connected, the first ones already refused.
        std::thread::sleep(Duration::from_secs(7));
        let load = procfs::load1();
        let (cpu0, self0) = (proxy_cpu(&running), procfs::self_cpu());
        let outcome = run(o.conns);
        let (cpu, bench_self) = (
            proxy_cpu(&running).since(cpu0),
            procfs::self_cpu().since(self0),
        );
        // The slow clients alone, for 5 s: their own cost.
        let bg0 = proxy_cpu(&running);
        let bg_start = Instant::now();
        std::thread::sleep(Duration::from_secs(5));
        let (bg_user, bg_sys) = proxy_cpu(&running).since(bg0).secs();
        let bg_per_s = (bg_user + bg_sys) / bg_start.elapsed().as_secs_f64();
        let slow_outcome = slow.stop();
        let frag1 = running.preread_metric(fragmented);
        let mut record = rate_record("rate_slow", kind, rep, &outcome, cpu, bench_self, true);
        let (closed_median, _, _) = bench::report::stats(&slow_outcome.closed_after_s);
        record
            .value("load1", load)
            .value("slow_clients", o.slow as f64)
            .value("slow_peak_open", slow_outcome.peak_open as f64)
            .value("slow_connects", slow_outcome.connects as f64)
            .value("slow_connect_errors", slow_outcome.connect_errors as f64)
            .value("slow_closed", slow_outcome.closed_after_s.len() as f64)
            .value("slow_closed_median_s", closed_median)
            .value("slow_bytes", slow_outcome.bytes as f64)
            .value("slow_only_proxy_cpu_s_per_s", bg_per_s);
        if let (Some(a), Some(b)) = (frag0, frag1) {
            record.value("preread_rejected_fragmented", (b - a) as f64);
        }
        if outcome.ok > 0 {
            let (user, sys) = cpu.secs();
            let routed_only = (user + sys - bg_per_s * outcome.elapsed.as_secs_f64()).max(0.0);
            record.value(
                "proxy_cpu_us_per_conn_minus_slow",
                routed_only * 1e6 / outcome.ok as f64,
            );
        }
        sink.push(record);
    }
    if let Some(pinned) = pinned {
        pinned.undo();
    }
    keep_stderr(
        &o.out,
        &format!("rate-{}-{rep}", kind.name()),
        &running.stop(),
    );
    let (_, errors, first) = rpc.counts();
    if errors > 0 {
        eprintln!("bench: rpc backend errors: {errors} (first: {first:?})");
    }
    rpc.stop();
}

fn memory(o: &Options, sink: &mut Sink, hold: &HoldBackend, rep: usize, kind: Kind) {
    if kind == Kind::Direct {
        return;
    }
    // The rate listener's backend is never reached here.
    let unused = match RpcBackend::start(o.hello.len(), 1) {
        Ok(rpc) => rpc,
        Err(e) => return eprintln!("bench: rpc backend: {e}"),
    };
    for test in ["mem_idle", "mem_partial", "mem_established"] {
        let mut record = Record::new(test, kind.name(), rep);
        let running = match start(o, kind, unused.addr(), hold.addr()) {
            Ok(running) => running,
            Err(e) => {
                record.note("error", e);
                sink.push(record);
                continue;
            }
        };
        let Some(pid) = running.pid() else { continue };
        hold.clear();
        std::thread::sleep(Duration::from_millis(500));
        let rss0 = procfs::settled_rss(pid, Duration::from_millis(200), Duration::from_secs(3));
        let fds0 = procfs::fd_count(pid);
        let slab0 = procfs::meminfo_kib("Slab");
        let n = o.sessions;
        let opened = if test == "mem_idle" {
            clients::open_idle(running.hold, n)
        } else if test == "mem_partial" {
            // The record header and the start of the handshake: the
            // proxy holds a window and waits for the rest.
            clients::open_established(running.hold, &o.hello[..o.hello.len().min(PARTIAL)], n)
        } else {
            clients::open_established(running.hold, &o.hello, n).and_then(|streams| {
                let deadline = Instant::now() + Duration::from_secs(30);
                while hold.complete() < n && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(10));
                }
                if hold.complete() < n {
                    return Err(format!(
                        "{} of {n} sessions reached the backend",
                        hold.complete()
                    ));
                }
                Ok(streams)
            })
        };
        match (rss0, opened) {
            (Ok(rss0), Ok(streams)) => {
                // 1 s after the last connect (HAProxy and nginx close a
                // silent connection at 5 s).
                std::thread::sleep(Duration::from_secs(1));
                let rss1 = procfs::status_kib(pid, "VmRSS").unwrap_or(0);
                let fds1 = procfs::fd_count(pid);
                let pipes = procfs::pipe_fd_count(pid);
                let slab1 = procfs::meminfo_kib("Slab");
                let open = clients::still_open(&streams);
                record
                    .value("sessions", n as f64)
                    .value("rss_before_kib", rss0 as f64)
                    .value("rss_kib", rss1 as f64)
                    .value("kib_per_conn", (rss1 as f64 - rss0 as f64) / n as f64)
                    .value("fds_before", fds0 as f64)
                    .value("fds", fds1 as f64)
                    .value("pipe_fds", pipes as f64)
                    .value("still_open", open as f64)
                    .value(
                        "system_slab_kib_per_conn",
                        (slab1 as f64 - slab0 as f64) / n as f64,
                    );
                drop(streams);
            }
            (Err(e), _) | (_, Err(e)) => {
                record.note("error", e);
            }
        }
        sink.push(record);
        keep_stderr(
            &o.out,
            &format!("{test}-{}-{rep}", kind.name()),
            &running.stop(),
        );
        hold.clear();
    }
    unused.stop();
}

/// Syscalls per connection: strace attached to a fresh proxy after the
/// rate test's warm-up, for `--strace-conns` connections.
fn syscalls(o: &Options, sink: &mut Sink, hold: &HoldBackend, rep: usize, kind: Kind) {
    if kind == Kind::Direct {
        return;
    }
    let mut record = Record::new("syscalls", kind.name(), rep);
    let rpc = match RpcBackend::start(o.hello.len(), o.concurrency * 2 + 8) {
        Ok(rpc) => rpc,
        Err(e) => return eprintln!("bench: rpc backend: {e}"),
    };
    let running = match start(o, kind, rpc.addr(), hold.addr()) {
        Ok(running) => running,
        Err(e) => {
            record.note("error", e);
            sink.push(record);
            return rpc.stop();
        }
    };
    let run = |n: u64| {
        clients::rate(
            running.rate,
            &o.hello,
            n,
            o.concurrency,
            RATE_PAYLOAD,
            RATE_ANSWER,
            o.rate_bound,
        )
    };
    let _ = run(500);
    let trace = o
        .out
        .join("work")
        .join(format!("strace-{}-{rep}.txt", kind.name()));
    let traced = Tracer::attach(&running.pids(), &trace).and_then(|tracer| {
        let outcome = run(o.strace_conns);
        tracer.finish(&trace).map(|counts| (outcome, counts))
    });
    match traced {
        Ok((outcome, counts)) if outcome.ok > 0 => {
            let conns = outcome.ok as f64;
            let total: u64 = counts.values().map(|c| c.calls).sum();
            record
                .value("ok", conns)
                .value("failed", outcome.failed as f64)
                .value("syscalls_per_conn", total as f64 / conns);
            for (name, count) in &counts {
                record.value(&format!("sys_{name}"), count.calls as f64 / conns);
                if count.errors > 0 {
                    record.value(&format!("err_{name}"), count.errors as f64 / conns);
                }
            }
        }
        Ok(_) => {
            record.note("error", "no connection completed under strace");
        }
        Err(e) => {
            record.note("error", e);
        }
    }
    sink.push(record);
    keep_stderr(
        &o.out,
        &format!("syscalls-{}-{rep}", kind.name()),
        &running.stop(),
    );
    rpc.stop();
}

/// Per syscall, (name, calls per connection, errors per connection): the
/// median over the repetitions of one target.
fn syscall_rows(records: &[Record], name: &str) -> Vec<(String, f64, f64)> {
    let mut keys: Vec<String> = records
        .iter()
        .filter(|r| r.test == "syscalls" && r.target == name)
        .flat_map(|r| r.values.keys().cloned())
        .filter_map(|k| k.strip_prefix("sys_").map(str::to_owned))
        .collect();
    keys.sort();
    keys.dedup();
    let median = |key: &str| {
        let values = series(records, "syscalls", name, key);
        if values.is_empty() {
            0.0
        } else {
            bench::report::stats(&values).0
        }
    };
    keys.into_iter()
        .map(|k| {
            let calls = median(&format!("sys_{k}"));
            let errors = median(&format!("err_{k}"));
            (k, calls, errors)
        })
        .collect()
}

/// The median of `key` in `test` over `targets`' repetitions, the lowest
/// of those targets that have it.
fn lowest_median(records: &[Record], test: &str, targets: &[&str], key: &str) -> Option<f64> {
    targets
        .iter()
        .map(|t| bench::report::stats(&series(records, test, t, key)).0)
        .filter(|v| !v.is_nan())
        .min_by(f64::total_cmp)
}

fn median(records: &[Record], test: &str, target: &str, key: &str) -> f64 {
    bench::report::stats(&series(records, test, target, key)).0
}

/// The ratios, from this run's medians: preread's CPU per
/// connection against the lower of HAProxy's and nginx's, and its spliced
/// throughput and CPU per GiB against HAProxy's splice.
fn ratio_lines(records: &[Record]) -> String {
    let mut out = String::new();
    let peers = ["haproxy", "nginx"];
    if let Some(best) = lowest_median(records, "rate", &peers, "proxy_cpu_us_per_conn") {
        for name in [
            "preread-copy",
            "preread-splice",
            "preread-nodefer",
            "preread-delack",
        ] {
            let mine = median(records, "rate", name, "proxy_cpu_us_per_conn");
            if !mine.is_nan() {
                out.push_str(&format!(
                    "- {name}: CPU per connection {mine:.1} µs = **{:.2}×** the lower peer's {best:.1} µs\n",
                    mine / best
                ));
            }
        }
    }
    for name in [
        "preread-copy",
        "preread-splice",
        "preread-nodefer",
        "preread-delack",
    ] {
        let mine = median(records, "syscalls", name, "syscalls_per_conn");
        if let (false, Some(best)) = (
            mine.is_nan(),
            lowest_median(records, "syscalls", &peers, "syscalls_per_conn"),
        ) {
            out.push_str(&format!(
                "- {name}: {mine:.1} syscalls per connection = **{:.2}×** the lower peer's {best:.1}\n",
                mine / best
            ));
        }
    }
    for test in ["upload", "download"] {
        let (mine, theirs) = (
            median(records, test, "preread-splice", "gib_s"),
            median(records, test, "haproxy-splice", "gib_s"),
        );
        let (my_cpu, their_cpu) = (
            median(records, test, "preread-splice", "proxy_cpu_s_per_gib"),
            median(records, test, "haproxy-splice", "proxy_cpu_s_per_gib"),
        );
        if !(mine / theirs).is_nan() {
            out.push_str(&format!(
                "- {test}, preread-splice vs haproxy-splice: **{:.2}×** the GiB/s, **{:.2}×** the CPU per GiB\n",
                mine / theirs,
                my_cpu / their_cpu
            ));
        }
    }
    out.push_str(&bulk_line(records));
    out
}

/// One repetition's bulk figure of a target, both directions together:
/// the bytes of the upload and the download over their summed time
/// (GiB/s), and the proxy's CPU over both (s/GiB).
fn bulk_per_rep(records: &[Record], target: &str) -> (Vec<f64>, Vec<f64>) {
    let by_rep = |test: &str, key: &str| -> BTreeMap<usize, f64> {
        (records.iter())
            .filter(|r| r.test == test && r.target == target)
            .filter_map(|r| Some((r.rep, *r.values.get(key)?)))
            .collect()
    };
    let (up_secs, down_secs) = (by_rep("upload", "secs"), by_rep("download", "secs"));
    let (up_gib_s, down_gib_s) = (by_rep("upload", "gib_s"), by_rep("download", "gib_s"));
    let (up_cpu, down_cpu) = (
        by_rep("upload", "proxy_cpu_s_per_gib"),
        by_rep("download", "proxy_cpu_s_per_gib"),
    );
    let (mut rates, mut cpus) = (Vec::new(), Vec::new());
    for (rep, up) in &up_secs {
        let (Some(down), Some(up_rate), Some(down_rate)) =
            (down_secs.get(rep), up_gib_s.get(rep), down_gib_s.get(rep))
        else {
            continue;
        };
        // Both transfers are the same size: GiB = rate × secs.
        let gib = up_rate * up + down_rate * down;
        rates.push(gib / (up + down));
        if let (Some(a), Some(b)) = (up_cpu.get(rep), down_cpu.get(rep)) {
            cpus.push((a + b) / 2.0);
        }
    }
    (rates, cpus)
}

/// The bulk goal, both directions together, medians of this run's
/// alternated repetitions: preread's spliced GiB/s (with its pipes grown,
/// the default, and without) against HAProxy's splice, and its CPU per GiB
/// against HAProxy's copy path.
fn bulk_line(records: &[Record]) -> String {
    let mut out = String::new();
    for name in ["preread-splice", "preread-nogrow"] {
        out.push_str(&bulk_lines_of(records, name));
    }
    out
}

fn bulk_lines_of(records: &[Record], name: &str) -> String {
    let median_of = |v: &[f64]| bench::report::stats(v).0;
    let (mine, my_cpu) = bulk_per_rep(records, name);
    let (theirs, _) = bulk_per_rep(records, "haproxy-splice");
    let (_, copy_cpu) = bulk_per_rep(records, "haproxy");
    let mut out = String::new();
    let (m, t) = (median_of(&mine), median_of(&theirs));
    if !(m / t).is_nan() {
        out.push_str(&format!(
            "- bulk (upload + download), {name} {m:.3} GiB/s vs haproxy-splice {t:.3}: **{:.2}×** (median of {} / {} runs; per run {:?} / {:?})\n",
            m / t,
            mine.len(),
            theirs.len(),
            rounded(&mine),
            rounded(&theirs),
        ));
    }
    let (c, h) = (median_of(&my_cpu), median_of(&copy_cpu));
    if !(c / h).is_nan() {
        out.push_str(&format!(
            "- bulk CPU, {name} {c:.3} s/GiB vs haproxy (copy) {h:.3}: **{:.2}×**\n",
            c / h
        ));
    }
    out
}

fn rounded(values: &[f64]) -> Vec<f64> {
    values
        .iter()
        .map(|v| (v * 1000.0).round() / 1000.0)
        .collect()
}

fn summary(o: &Options, records: &[Record]) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "Worker threads or processes per proxy: {}\n\n",
        o.workers
    ));
    if o.pin {
        let pinned = records
            .iter()
            .filter(|r| r.test == "rate")
            .filter(|r| r.values.get("pinned").is_some_and(|&v| v > 0.0))
            .count();
        out.push_str(&format!(
            "Rate runs with the proxy and the load generator on separate CPUs: {pinned}\n\n"
        ));
    }
    let names: Vec<&str> = o.targets.iter().map(|k| k.name()).collect();
    let has = |test: &str| records.iter().any(|r| r.test == test);
    let gib = o.bytes as f64 / GIB;
    let line = |out: &mut String, cells: Vec<String>| {
        out.push_str("| ");
        out.push_str(&cells.join(" | "));
        out.push_str(" |\n");
    };
    if has("upload") || has("download") {
        out.push_str(&format!(
            "### Throughput: one {gib:.2} GiB transfer, median (min–max) of {} runs\n\n",
            o.reps
        ));
        out.push_str(
            "| target | upload GiB/s | upload vs direct | proxy CPU s/GiB up | download GiB/s | download vs direct | proxy CPU s/GiB down |\n|---|---:|---:|---:|---:|---:|---:|\n",
        );
        for name in &names {
            let mut cells = vec![(*name).to_owned()];
            for test in ["upload", "download"] {
                cells.push(fmt_stats(&series(records, test, name, "gib_s"), 2));
                cells.push(fmt_stats(
                    &ratios(records, test, name, test, "direct", "gib_s"),
                    2,
                ));
                cells.push(fmt_stats(
                    &series(records, test, name, "proxy_cpu_s_per_gib"),
                    3,
                ));
            }
            line(&mut out, cells);
        }
        out.push('\n');
    }
    if has("rate") {
        out.push_str(&format!(
            "### Connection rate: {} connections, {} at a time (hello + {RATE_PAYLOAD} B up, {RATE_ANSWER} B down)\n\n",
            o.conns, o.concurrency
        ));
        out.push_str(
            "| target | conn/s | vs direct | proxy CPU µs/conn | p50 / p99 ms | with slow: conn/s | with/without | proxy CPU µs/conn (slow's own cost removed) | p50 / p99 ms | slow clients refused, median lifetime s |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
        );
        for name in &names {
            let ms = |test: &str| {
                let p50 = bench::report::stats(&series(records, test, name, "p50_us")).0 / 1000.0;
                let p99 = bench::report::stats(&series(records, test, name, "p99_us")).0 / 1000.0;
                if p50.is_nan() {
                    "–".to_owned()
                } else {
                    format!("{p50:.2} / {p99:.2}")
                }
            };
            let refused = {
                let closed = series(records, "rate_slow", name, "slow_closed");
                let life = series(records, "rate_slow", name, "slow_closed_median_s");
                if closed.is_empty() {
                    "–".to_owned()
                } else {
                    format!("{} / {}", fmt_stats(&closed, 0), fmt_stats(&life, 1))
                }
            };
            line(
                &mut out,
                vec![
                    (*name).to_owned(),
                    fmt_stats(&series(records, "rate", name, "conn_s"), 0),
                    fmt_stats(
                        &ratios(records, "rate", name, "rate", "direct", "conn_s"),
                        2,
                    ),
                    fmt_stats(&series(records, "rate", name, "proxy_cpu_us_per_conn"), 1),
                    ms("rate"),
                    fmt_stats(&series(records, "rate_slow", name, "conn_s"), 0),
                    fmt_stats(
                        &ratios(records, "rate_slow", name, "rate", name, "conn_s"),
                        2,
                    ),
                    format!(
                        "{} ({})",
                        fmt_stats(
                            &series(records, "rate_slow", name, "proxy_cpu_us_per_conn"),
                            1
                        ),
                        fmt_stats(
                            &series(
                                records,
                                "rate_slow",
                                name,
                                "proxy_cpu_us_per_conn_minus_slow"
                            ),
                            1
                        )
                    ),
                    ms("rate_slow"),
                    refused,
                ],
            );
        }
        out.push('\n');
    }
    if has("mem_idle") || has("mem_established") {
        out.push_str(&format!(
            "### Memory: VmRSS, {} connections\n\n",
            o.sessions
        ));
        out.push_str(&format!(
            "| target | idle RSS KiB | + idle conns KiB | KiB per idle conn | KiB per partial hello ({PARTIAL} B) | idle RSS KiB (2nd start) | + established KiB | KiB per established | fds / pipe fds established | machine Slab KiB per established (noisy) |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
        ));
        for name in names.iter().filter(|n| **n != "direct") {
            let fds = bench::report::stats(&series(records, "mem_established", name, "fds")).0;
            let pipes =
                bench::report::stats(&series(records, "mem_established", name, "pipe_fds")).0;
            line(
                &mut out,
                vec![
                    (*name).to_owned(),
                    fmt_stats(&series(records, "mem_idle", name, "rss_before_kib"), 0),
                    fmt_stats(&series(records, "mem_idle", name, "rss_kib"), 0),
                    fmt_stats(&series(records, "mem_idle", name, "kib_per_conn"), 2),
                    fmt_stats(&series(records, "mem_partial", name, "kib_per_conn"), 2),
                    fmt_stats(
                        &series(records, "mem_established", name, "rss_before_kib"),
                        0,
                    ),
                    fmt_stats(&series(records, "mem_established", name, "rss_kib"), 0),
                    fmt_stats(&series(records, "mem_established", name, "kib_per_conn"), 2),
                    format!("{fds:.0} / {pipes:.0}"),
                    fmt_stats(
                        &series(records, "mem_established", name, "system_slab_kib_per_conn"),
                        1,
                    ),
                ],
            );
        }
        out.push('\n');
    }
    if has("syscalls") {
        out.push_str(&format!(
            "### Syscalls per connection: strace -c -f, {} connections, {} at a time, median of {} runs\n\n",
            o.strace_conns, o.concurrency, o.reps
        ));
        out.push_str("| target | syscalls per connection | per syscall (calls per connection, errors) |\n|---|---:|---|\n");
        for name in names.iter().filter(|n| **n != "direct") {
            line(
                &mut out,
                vec![
                    (*name).to_owned(),
                    fmt_stats(&series(records, "syscalls", name, "syscalls_per_conn"), 1),
                    breakdown(&syscall_rows(records, name)),
                ],
            );
        }
        out.push('\n');
    }
    let ratio_text = ratio_lines(records);
    if !ratio_text.is_empty() {
        out.push_str("### Ratios (medians of this run)\n\n");
        out.push_str(&ratio_text);
        out.push('\n');
    }
    let errors: Vec<String> = records
        .iter()
        .filter_map(|r| {
            let e = r
                .notes
                .get("error")
                .or_else(|| r.notes.get("first_error"))?;
            Some(format!("- {} {} rep {}: {e}\n", r.test, r.target, r.rep))
        })
        .collect();
    if !errors.is_empty() {
        out.push_str("### Errors\n\n");
        for e in errors {
            out.push_str(&e);
        }
    }
    out
}

fn main() -> ExitCode {
    let o = match parse_args() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("bench: {e}");
            return ExitCode::from(2);
        }
    };
    if let Err(e) = std::fs::create_dir_all(o.out.join("work")) {
        eprintln!("bench: {}: {e}", o.out.display());
        return ExitCode::FAILURE;
    }
    // The proxies run in other directories: every path they get is absolute.
    let mut o = o;
    if let Ok(out) = o.out.canonicalize() {
        o.out = out;
    }
    let mut sink = match Sink::create(&o.out.join("raw.jsonl")) {
        Ok(sink) => sink,
        Err(e) => {
            eprintln!("bench: {e}");
            return ExitCode::FAILURE;
        }
    };
    // One hold backend for the whole run (bounded to 3 h).
    let hold = match HoldBackend::start(o.hello.len(), Duration::from_secs(3 * 3600)) {
        Ok(hold) => hold,
        Err(e) => {
            eprintln!("bench: hold backend: {e}");
            return ExitCode::FAILURE;
        }
    };
    let started = Instant::now();
    let mut phase_secs = BTreeMap::new();
    for phase in &o.phases {
        let phase_start = Instant::now();
        for rep in 1..=o.reps {
            for kind in rotated(&o.targets, rep) {
                eprintln!("bench: {phase} rep {rep} {}", kind.name());
                match phase.as_str() {
                    "throughput" => throughput(&o, &mut sink, &hold, rep, kind),
                    "rate" => rate(&o, &mut sink, &hold, rep, kind),
                    "memory" => memory(&o, &mut sink, &hold, rep, kind),
                    "syscalls" => syscalls(&o, &mut sink, &hold, rep, kind),
                    other => eprintln!("bench: unknown phase {other}"),
                }
            }
        }
        phase_secs.insert(phase.clone(), phase_start.elapsed().as_secs());
    }
    hold.stop();
    let mut text = summary(&o, &sink.records);
    text.push_str(&format!(
        "\nPhases (s): {phase_secs:?}; total {} s. Hello: {} ({} B).\n",
        started.elapsed().as_secs(),
        o.hello_path.display(),
        o.hello.len()
    ));
    let _ = std::fs::write(o.out.join("summary.md"), &text);
    println!("{text}");
    ExitCode::SUCCESS
}
