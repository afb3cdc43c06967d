//! The control-plane scale benchmark: how start, reload, runtime changes
//! and memory grow with the number of routes. `bench/scale.sh` builds and
//! runs it; `doc/performance.md` ("Control plane at scale") has the
//! results.
//!
//! Usage: `scale [--routes 1000,10000,100000] [--workers 2] [--adds 1000]
//! [--out DIR]`
//!
//! For each size it generates one listener and `routes / 100` clusters of
//! 100 exact names each (one backend per cluster), then, with the release
//! `preread` beside this binary, each started fresh and stopped by its PID:
//!
//! 1. start from the config: time until the command socket answers and
//!    the listener accepts; resident memory (VmRSS) once ready;
//! 2. `preread reload` after renaming one name in the file (wall time of
//!    the CLI, which includes parsing and checking the file);
//! 3. `--adds` runtime `add_tcp_frontend` requests on one command
//!    connection, one at a time: the latency of each, and the total;
//! 4. the same adds with `automatic_state_save` on (bounded at 60 s);
//! 5. a restart from the state file that step 4 left: time until ready.
//!
//! Records go to `DIR/scale.jsonl`, the table to `DIR/scale.md` and stdout.

use std::fmt::Write as _;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use command::channel::BlockingChannel;
use command::proto::{self, Request, request::RequestType};

/// How long a start may take before the run gives up.
const READY_BOUND: Duration = Duration::from_secs(120);
/// The bound of the adds with the state saved after each.
const SAVED_ADDS_BOUND: Duration = Duration::from_secs(60);
const NAMES_PER_CLUSTER: usize = 100;

struct Options {
    routes: Vec<usize>,
    workers: usize,
    adds: usize,
    out: PathBuf,
}

fn options() -> Result<Options, String> {
    let mut options = Options {
        routes: vec![1_000, 10_000, 100_000],
        workers: 2,
        adds: 1_000,
        out: PathBuf::from("target/bench/scale"),
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or(format!("{flag} needs a value"))?;
        let number = |v: &str| v.parse::<usize>().map_err(|e| format!("{flag} {v}: {e}"));
        match flag.as_str() {
            "--routes" => {
                options.routes = value.split(',').map(number).collect::<Result<_, _>>()?;
            }
            "--workers" => options.workers = number(&value)?,
            "--adds" => options.adds = number(&value)?,
            "--out" => options.out = PathBuf::from(value),
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    Ok(options)
}

/// A port free right now on 127.0.0.1.
fn free_port() -> Result<u16, String> {
    let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("bind: {e}"))?;
    Ok(listener.local_addr().map_err(|e| e.to_string())?.port())
}

fn config(routes: usize, workers: usize, port: u16, saved: Option<&Path>) -> String {
    let mut text = format!(
        "command_socket = \"preread.sock\"\nworker_count = {workers}\nlog_level = \"warn\"\n"
    );
    if let Some(saved) = saved {
        let _ = writeln!(
            text,
            "saved_state = \"{}\"\nautomatic_state_save = true",
            saved.display()
        );
    }
    let _ = write!(text, "\n[[listeners]]\naddress = \"127.0.0.1:{port}\"\n\n");
    let clusters = routes.div_ceil(NAMES_PER_CLUSTER).max(1);
    for c in 0..clusters {
        let names = (routes - c * NAMES_PER_CLUSTER).min(NAMES_PER_CLUSTER);
        let frontends: Vec<String> = (0..names)
            .map(|i| {
                format!("{{ address = \"127.0.0.1:{port}\", sni = \"n{i}.c{c}.example.com\" }}")
            })
            .collect();
        let _ = write!(
            text,
            "[clusters.c{c}]\nfrontends = [{}]\nbackends = [{{ address = \"127.0.0.1:{}\" }}]\n\n",
            frontends.join(", "),
            20_000 + c % 1_000
        );
    }
    text
}

/// The release `preread` beside this binary.
fn preread() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let bin = exe.with_file_name("preread");
    if bin.is_file() {
        Ok(bin)
    } else {
        Err(format!(
            "{} is not built: run bench/scale.sh",
            bin.display()
        ))
    }
}

struct Proxy {
    child: Child,
    socket: PathBuf,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn request(kind: RequestType) -> Request {
    Request {
        request_type: Some(kind),
    }
}

fn answers(socket: &Path) -> bool {
    BlockingChannel::connect(socket, Duration::from_millis(500))
        .and_then(|mut c| c.request(&request(RequestType::Status(proto::Status {})), |_| {}))
        .is_ok_and(|r| r.status == proto::ResponseStatus::Ok as i32)
}

/// Starts the proxy in `dir` on `config`; returns it once it serves, and
/// how long that took.
fn start(bin: &Path, dir: &Path, port: u16) -> Result<(Proxy, Duration), String> {
    let socket = dir.join("preread.sock");
    let _ = std::fs::remove_file(&socket);
    let started = Instant::now();
    let child = Command::new(bin)
        .args(["start", "-c", "preread.toml"])
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("stderr.log")).map_err(|e| e.to_string())?)
        .spawn()
        .map_err(|e| format!("start: {e}"))?;
    let proxy = Proxy { child, socket };
    let listener = SocketAddr::from(([127, 0, 0, 1], port));
    while started.elapsed() < READY_BOUND {
        if answers(&proxy.socket)
            && TcpStream::connect_timeout(&listener, Duration::from_millis(200)).is_ok()
        {
            return Ok((proxy, started.elapsed()));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Err(format!("not ready within {READY_BOUND:?}"))
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}

/// Adds `count` frontends one by one on one connection, at most `bound`:
/// each latency.
fn adds(socket: &Path, port: u16, count: usize, bound: Duration) -> Result<Vec<Duration>, String> {
    let mut channel =
        BlockingChannel::connect(socket, Duration::from_secs(30)).map_err(|e| e.to_string())?;
    let started = Instant::now();
    let mut latencies = Vec::with_capacity(count);
    for i in 0..count {
        if started.elapsed() > bound {
            break;
        }
        let add = request(RequestType::AddTcpFrontend(proto::TcpFrontend {
            cluster_id: "c0".to_owned(),
            address: format!("127.0.0.1:{port}"),
            sni: Some(format!("added{i}.example.net")),
            ..Default::default()
        }));
        let sent = Instant::now();
        let response = channel.request(&add, |_| {}).map_err(|e| e.to_string())?;
        latencies.push(sent.elapsed());
        if response.status != proto::ResponseStatus::Ok as i32 {
            return Err(format!("add {i} refused: {}", response.message));
        }
    }
    Ok(latencies)
}

fn quantile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let at = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[at.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

#[derive(Default)]
struct Row {
    routes: usize,
    ready: Duration,
    rss_kib: u64,
    reload: Duration,
    add_median: Duration,
    add_p99: Duration,
    adds_total: Duration,
    adds: usize,
    saved_add_median: Duration,
    saved_adds: usize,
    saved_adds_total: Duration,
    ready_from_state: Duration,
}

fn measure(bin: &Path, routes: usize, options: &Options) -> Result<Row, String> {
    let dir = tempfile::Builder::new()
        .prefix("preread-scale-")
        .tempdir()
        .map_err(|e| e.to_string())?;
    let port = free_port()?;
    let path = dir.path().join("preread.toml");
    let text = config(routes, options.workers, port, None);
    std::fs::write(&path, &text).map_err(|e| e.to_string())?;
    let mut row = Row {
        routes,
        ..Row::default()
    };

    let (proxy, ready) = start(bin, dir.path(), port)?;
    row.ready = ready;
    std::thread::sleep(Duration::from_millis(300));
    row.rss_kib = rss_kib(proxy.child.id());
    std::fs::write(
        &path,
        text.replacen("n5.c0.example.com", "renamed.c0.example.com", 1),
    )
    .map_err(|e| e.to_string())?;
    let reloading = Instant::now();
    let out = Command::new(bin)
        .args(["-c", "preread.toml", "reload"])
        .current_dir(dir.path())
        .output()
        .map_err(|e| format!("reload: {e}"))?;
    row.reload = reloading.elapsed();
    let said = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() || !said.contains("2 applied, 0 skipped") {
        return Err(format!(
            "reload: {said}{}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let mut latencies = adds(&proxy.socket, port, options.adds, Duration::from_secs(600))?;
    row.adds = latencies.len();
    row.adds_total = latencies.iter().sum();
    latencies.sort();
    row.add_median = quantile(&latencies, 0.5);
    row.add_p99 = quantile(&latencies, 0.99);
    drop(proxy);

    let saved = dir.path().join("state.json");
    std::fs::write(&path, config(routes, options.workers, port, Some(&saved)))
        .map_err(|e| e.to_string())?;
    let (proxy, _) = start(bin, dir.path(), port)?;
    let mut latencies = adds(&proxy.socket, port, options.adds, SAVED_ADDS_BOUND)?;
    row.saved_adds = latencies.len();
    row.saved_adds_total = latencies.iter().sum();
    latencies.sort();
    row.saved_add_median = quantile(&latencies, 0.5);
    drop(proxy);
    let (proxy, ready) = start(bin, dir.path(), port)?;
    row.ready_from_state = ready;
    drop(proxy);
    Ok(row)
}

fn main() -> ExitCode {
    let options = match options() {
        Ok(options) => options,
        Err(e) => {
            eprintln!("scale: {e}");
            return ExitCode::from(2);
        }
    };
    let bin = match preread() {
        Ok(bin) => bin,
        Err(e) => {
            eprintln!("scale: {e}");
            return ExitCode::from(2);
        }
    };
    if let Err(e) = std::fs::create_dir_all(&options.out) {
        eprintln!("scale: {}: {e}", options.out.display());
        return ExitCode::from(2);
    }
    let mut table = format!(
        "| routes | ready from config | RSS ({} workers) | bytes/route | one-line reload | add median / p99 | {} adds | add median, state saved | saved adds in | ready from state |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
        options.workers, options.adds
    );
    let mut jsonl = String::new();
    for &routes in &options.routes {
        match measure(&bin, routes, &options) {
            Ok(r) => {
                let _ = writeln!(
                    table,
                    "| {} | {:.0} ms | {:.1} MB | {} | {:.0} ms | {:.2} / {:.2} ms | {:.2} s | {:.2} ms | {} in {:.1} s | {:.0} ms |",
                    r.routes,
                    ms(r.ready),
                    r.rss_kib as f64 / 1024.0,
                    r.rss_kib * 1024 / r.routes as u64,
                    ms(r.reload),
                    ms(r.add_median),
                    ms(r.add_p99),
                    r.adds_total.as_secs_f64(),
                    ms(r.saved_add_median),
                    r.saved_adds,
                    r.saved_adds_total.as_secs_f64(),
                    ms(r.ready_from_state),
                );
                let _ = writeln!(
                    jsonl,
                    "{{\"routes\":{},\"workers\":{},\"ready_ms\":{:.1},\"rss_kib\":{},\"reload_ms\":{:.1},\"add_median_ms\":{:.3},\"add_p99_ms\":{:.3},\"adds\":{},\"adds_total_s\":{:.3},\"saved_add_median_ms\":{:.3},\"saved_adds\":{},\"saved_adds_total_s\":{:.3},\"ready_from_state_ms\":{:.1}}}",
                    r.routes,
                    options.workers,
                    ms(r.ready),
                    r.rss_kib,
                    ms(r.reload),
                    ms(r.add_median),
                    ms(r.add_p99),
                    r.adds,
                    r.adds_total.as_secs_f64(),
                    ms(r.saved_add_median),
                    r.saved_adds,
                    r.saved_adds_total.as_secs_f64(),
                    ms(r.ready_from_state)
                );
            }
            Err(e) => {
                eprintln!("scale: {routes} routes: {e}");
                return ExitCode::from(1);
            }
        }
    }
    print!("{table}");
    let written = std::fs::write(options.out.join("scale.md"), &table)
        .and_then(|()| std::fs::write(options.out.join("scale.jsonl"), &jsonl));
    if let Err(e) = written {
        eprintln!("scale: {}: {e}", options.out.display());
        return ExitCode::from(1);
    }
    ExitCode::SUCCESS
}
