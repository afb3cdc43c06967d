//! Small helpers the end-to-end test files share: reading a capture of
//! the corpus, starting the proxy, reading its metrics and stderr, and the
//! harness's one temp dir ([`TempDir`], which [`ProxyProcess`] uses too).
//! Must never: be used outside tests and tools (they panic on failure, which
//! is what a test wants), or grow a second temp-dir helper.

use std::collections::BTreeMap;
use std::io;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::proxy::ProxyProcess;

pub fn capture(name: &str) -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../testdata/clienthellos")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

pub fn start(template: &str) -> ProxyProcess {
    ProxyProcess::start(template).unwrap_or_else(|e| panic!("start the proxy: {e}"))
}

pub fn metrics(proxy: &ProxyProcess) -> BTreeMap<String, i64> {
    proxy
        .metrics()
        .unwrap_or_else(|e| panic!("query metrics: {e}"))
}

pub fn get(m: &BTreeMap<String, i64>, name: &str) -> i64 {
    m.get(name).copied().unwrap_or(0)
}

/// The sum of every `tcp.sni_preread.rejected.*` metric.
pub fn rejected_sum(m: &BTreeMap<String, i64>) -> i64 {
    m.iter()
        .filter(|(name, _)| name.starts_with("tcp.sni_preread.rejected."))
        .map(|(_, v)| *v)
        .sum()
}

pub fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Polls `probe` every 10 ms until it holds, for at most `timeout`; whether
/// it did (checked once more at the end, so a slow last step still counts).
pub fn eventually(timeout: Duration, mut probe: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if probe() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    probe()
}

/// The last 30 lines of the proxy's stderr, for failure messages.
pub fn stderr_tail(proxy: &ProxyProcess) -> String {
    tail(&proxy.stderr_text(), 30)
}

/// Set (to anything) to keep every temp dir of the harness after the run.
pub const KEEP_ENV: &str = "PREREAD_E2E_KEEP";

/// A temp dir removed on drop, kept (its path printed) when the thread is
/// panicking or [`KEEP_ENV`] is set, so a failure leaves its files to look
/// at. Created by the `tempfile` crate: a fresh, unguessable name, mode 0700.
#[derive(Debug)]
pub struct TempDir(tempfile::TempDir);

impl TempDir {
    /// A new temp dir whose name starts with `preread-e2e-{tag}-`.
    pub fn create(tag: &str) -> io::Result<Self> {
        tempfile::Builder::new()
            .prefix(&format!("preread-e2e-{tag}-"))
            .tempdir()
            .map(Self)
    }

    /// [`create`](Self::create), panicking on failure.
    pub fn new(tag: &str) -> Self {
        Self::create(tag).unwrap_or_else(|e| panic!("create a temp dir for {tag}: {e}"))
    }

    pub fn path(&self) -> &Path {
        self.0.path()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if std::thread::panicking() || std::env::var_os(KEEP_ENV).is_some() {
            self.0.disable_cleanup(true);
            eprintln!("e2e: files kept in {}", self.0.path().display());
        }
    }
}
