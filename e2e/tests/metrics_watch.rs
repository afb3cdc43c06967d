//! End-to-end tests of `preread metrics get --watch` against the real
//! `preread` process, its stdout a pipe: refreshes come as blocks of an
//! aligned table with no escape code, `tcp.accepted` rises with real TLS
//! connections and gets a rate; SIGINT and SIGTERM end the watch with
//! status 0; with `--json` each refresh is one JSON line; a proxy that
//! goes away is reported on stderr and watched again once it is back.
//!
//! Build the binary first: `cargo build -p proxy-shell`. Loopback only;
//! every wait is bounded; the watch, the proxy and the backend are stopped
//! on Drop.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

use e2e::backend::{BackendConfig, TlsBackend};
use e2e::client::tls_request;
use e2e::proxy::{ConfigBuilder, ProxyProcess, preread_bin};
use e2e::testkit::stderr_tail;
use serde_json::Value;

/// Bound of one wait.
const T: Duration = Duration::from_secs(5);

/// A line of the watch's stdout or stderr.
#[derive(Debug)]
enum Line {
    Out(String),
    Err(String),
}

/// `preread metrics get --watch …` as a child, stopped by its pid on Drop.
struct Watch {
    child: Child,
    lines: Receiver<Line>,
    out: Vec<String>,
    err: Vec<String>,
}

impl Watch {
    fn start(proxy: &ProxyProcess, args: &[&str]) -> Result<Self, String> {
        let bin = preread_bin()?;
        let mut child = Command::new(&bin)
            .arg("--socket")
            .arg(proxy.socket_path())
            .args(args)
            .current_dir(proxy.dir())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("spawn {}: {e}", bin.display()))?;
        let (sender, lines) = mpsc::channel();
        let stdout = child.stdout.take().ok_or("no stdout pipe")?;
        let stderr = child.stderr.take().ok_or("no stderr pipe")?;
        forward(stdout, sender.clone(), Line::Out);
        forward(stderr, sender, Line::Err);
        Ok(Self {
            child,
            lines,
            out: Vec::new(),
            err: Vec::new(),
        })
    }

    /// Takes the lines that came so far, waiting until `until` holds or
    /// `timeout` passed; whether it held.
    fn collect(&mut self, timeout: Duration, until: impl Fn(&Self) -> bool) -> bool {
        let deadline = Instant::now() + timeout;
        while !until(self) {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(Line::Out(line)) => self.out.push(line),
                Ok(Line::Err(line)) => self.err.push(line),
                Err(_) => return until(self),
            }
        }
        true
    }

    fn stderr_has(&self, needle: &str) -> bool {
        self.err.iter().any(|line| line.contains(needle))
    }

    /// Sends `signal` to the watch, by its pid.
    fn signal(&self, signal: i32) -> Result<(), String> {
        let pid = i32::try_from(self.child.id()).map_err(|e| format!("pid: {e}"))?;
        // SAFETY: kill(2) has no memory-safety preconditions; `pid` is our
        // own child, not yet reaped (only `wait` below reaps it, and it
        // runs after), so the id cannot name another process.
        if unsafe { libc::kill(pid, signal) } == 0 {
            Ok(())
        } else {
            Err(format!("kill({pid}): {}", std::io::Error::last_os_error()))
        }
    }

    /// Waits at most `T` for the watch to exit, then reads the rest of its
    /// output (the pipes close with it).
    fn wait(&mut self) -> Result<ExitStatus, String> {
        let deadline = Instant::now() + T;
        let status = loop {
            if let Some(status) = self.child.try_wait().map_err(|e| format!("wait: {e}"))? {
                break status;
            }
            if Instant::now() >= deadline {
                return Err(format!("the watch did not exit within {T:?}"));
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        while let Ok(line) = self.lines.recv_timeout(T) {
            match line {
                Line::Out(line) => self.out.push(line),
                Line::Err(line) => self.err.push(line),
            }
        }
        Ok(status)
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Sends each line of `stream` as `wrap(line)` until it closes.
fn forward(
    stream: impl Read + Send + 'static,
    sender: mpsc::Sender<Line>,
    wrap: fn(String) -> Line,
) {
    std::thread::spawn(move || {
        for line in BufReader::new(stream).lines() {
            let Ok(line) = line else { return };
            if sender.send(wrap(line)).is_err() {
                return;
            }
        }
    });
}

/// A proxy with listener `main` routing `a.example.com` to a TLS backend.
fn proxy() -> Result<(TlsBackend, ProxyProcess), String> {
    let alpha = TlsBackend::start(BackendConfig::new("alpha-0", &["a.example.com"]));
    let config = ConfigBuilder::new()
        .listener("main", &[])
        .frontend("alpha", "main", Some("a.example.com"), &[])
        .backend("alpha", "alpha-0", alpha.addr())
        .build();
    let proxy = ProxyProcess::start(&config)?;
    Ok((alpha, proxy))
}

/// One refresh of the table: its header line, its column header and its
/// rows.
struct Block<'a> {
    header: &'a str,
    columns: &'a str,
    rows: &'a [String],
}

fn blocks(out: &[String]) -> Vec<Block<'_>> {
    out.split(|line| line.is_empty())
        .filter(|block| !block.is_empty())
        .map(|block| Block {
            header: block[0].as_str(),
            columns: block.get(1).map_or("", String::as_str),
            rows: block.get(2..).unwrap_or(&[]),
        })
        .collect()
}

/// The value and the rate (if shown) of `name` in `block`.
fn cells(block: &Block<'_>, name: &str) -> Option<(i64, Option<f64>)> {
    let row = block
        .rows
        .iter()
        .find(|row| row.split_whitespace().next() == Some(name))?;
    let mut fields = row.split_whitespace().skip(1);
    let value = fields.next()?.parse().ok()?;
    let rate = fields.next().and_then(|rate| rate.parse().ok());
    Some((value, rate))
}

/// Whether each row's value ends under `VALUE` and its rate under
/// `RATE/S`, names starting at the left edge.
fn aligned(block: &Block<'_>) -> Result<(), String> {
    let end_of = |word: &str| {
        block
            .columns
            .find(word)
            .map(|at| at + word.len())
            .ok_or_else(|| format!("no {word} in {:?}", block.columns))
    };
    let (value_end, rate_end) = (end_of("VALUE")?, end_of("RATE/S")?);
    if !block.columns.starts_with("METRIC ") {
        return Err(format!("column header {:?}", block.columns));
    }
    for row in block.rows {
        let mut ends = Vec::new();
        let mut at = 0;
        for word in row.split_whitespace() {
            let start = at + row[at..].find(word).ok_or("a word of its own row")?;
            at = start + word.len();
            ends.push((start, at));
        }
        let fits = match ends.as_slice() {
            [(0, _), (_, value)] => *value == value_end,
            [(0, _), (_, value), (_, rate)] => *value == value_end && *rate == rate_end,
            _ => false,
        };
        if !fits {
            return Err(format!(
                "row {row:?} is not aligned under {:?}",
                block.columns
            ));
        }
    }
    Ok(())
}

#[test]
fn watch_on_a_pipe_prints_aligned_blocks_with_rates_until_sigint() -> Result<(), String> {
    let (_alpha, proxy) = proxy()?;
    let mut watch = Watch::start(&proxy, &["metrics", "get", "--watch", "200ms"])?;
    // The connections come after the first refresh, so all 5 are seen
    // rising from it.
    assert!(
        watch.collect(T, |w| w.out.iter().any(|l| l.starts_with("METRIC "))),
        "a first refresh: {:?}",
        watch.err
    );
    let started = Instant::now();
    for _ in 0..5 {
        let outcome = tls_request(proxy.addr("main"), "a.example.com", &[], None)?;
        assert_eq!(outcome.backend(), Some("alpha-0"), "{outcome:?}");
        std::thread::sleep(Duration::from_millis(150));
    }
    std::thread::sleep(Duration::from_millis(1_500).saturating_sub(started.elapsed()));
    watch.signal(libc::SIGINT)?;
    let status = watch.wait()?;
    let context = || {
        format!(
            "stdout:\n{}\nstderr:\n{}\nproxy:\n{}",
            watch.out.join("\n"),
            watch.err.join("\n"),
            stderr_tail(&proxy)
        )
    };
    assert!(
        status.success(),
        "SIGINT ends the watch: {status}\n{}",
        context()
    );
    assert!(
        !watch.out.iter().any(|line| line.contains('\x1b')),
        "no escape code on a pipe\n{}",
        context()
    );
    let blocks = blocks(&watch.out);
    assert!(blocks.len() >= 3, "at least 3 refreshes\n{}", context());
    for block in &blocks {
        assert!(
            block.header.contains("every 200ms") && block.header.contains("1 worker(s)"),
            "header {:?}",
            block.header
        );
        aligned(block).map_err(|e| format!("{e}\n{}", context()))?;
        let active = cells(block, "tcp.active");
        assert!(
            active.is_some_and(|(_, rate)| rate.is_none()),
            "a gauge has no rate: {active:?}"
        );
    }
    let accepted: Vec<(i64, Option<f64>)> = blocks
        .iter()
        .map(|block| cells(block, "tcp.accepted").ok_or_else(context))
        .collect::<Result<_, _>>()?;
    let (first, last) = (accepted[0].0, accepted[accepted.len() - 1].0);
    assert!(
        last >= first + 5,
        "tcp.accepted rose by the 5 connections: {accepted:?}"
    );
    assert_eq!(accepted[0].1, None, "no rate on the first refresh");
    assert!(
        accepted[1..]
            .iter()
            .any(|(_, rate)| rate.is_some_and(|r| r > 0.0)),
        "a rate was shown while connections came: {accepted:?}"
    );
    Ok(())
}

#[test]
fn watch_json_lines_outlive_a_proxy_restart_until_sigterm() -> Result<(), String> {
    let (_alpha, mut proxy) = proxy()?;
    let mut watch = Watch::start(
        &proxy,
        &[
            "--json",
            "metrics",
            "get",
            "--watch",
            "200ms",
            "--filter",
            "tcp.accepted",
        ],
    )?;
    assert!(
        watch.collect(T, |w| w.out.len() >= 2),
        "two refreshes: {:?} {:?}",
        watch.out,
        watch.err
    );
    proxy.kill()?;
    assert!(
        watch.collect(T, |w| w.stderr_has("proxy unreachable since")),
        "the outage is reported on stderr: {:?}",
        watch.err
    );
    assert!(
        matches!(watch.child.try_wait(), Ok(None)),
        "the watch keeps retrying"
    );
    proxy.restart(T)?;
    assert!(
        watch.collect(T, |w| w.stderr_has("the proxy answers again")),
        "the recovery is reported on stderr: {:?}",
        watch.err
    );
    let before = watch.out.len();
    assert!(
        watch.collect(T, |w| w.out.len() > before),
        "refreshes resume: {:?}",
        watch.out
    );
    watch.signal(libc::SIGTERM)?;
    let status = watch.wait()?;
    assert!(status.success(), "SIGTERM ends the watch: {status}");
    let lines: Vec<Value> = watch
        .out
        .iter()
        .map(|line| serde_json::from_str(line).map_err(|e| format!("{line:?}: {e}")))
        .collect::<Result<_, _>>()?;
    assert_eq!(lines[0]["elapsed_ms"], Value::Null, "{lines:?}");
    for line in &lines {
        assert_eq!(line["interval_ms"], 200, "{line}");
        let names: Vec<&String> = line["values"]
            .as_object()
            .ok_or("values is an object")?
            .keys()
            .collect();
        assert_eq!(names, ["tcp.accepted"], "--filter keeps one name: {line}");
    }
    assert!(
        lines[1..]
            .iter()
            .all(|line| line["rates"]["tcp.accepted"].is_number()),
        "every later refresh has a rate: {lines:?}"
    );
    Ok(())
}
