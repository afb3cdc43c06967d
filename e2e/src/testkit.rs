//! Small helpers the end-to-end test files share: reading a capture of
//! the corpus, building a large ClientHello over several records from one,
//! starting the proxy, reading its metrics and stderr, closing a socket
//! at once ([`shut`]), and the harness's one temp dir ([`TempDir`], which
//! [`ProxyProcess`] uses too).
//! Must never: be used outside tests and tools (they panic on failure, which
//! is what a test wants), or grow a second temp-dir helper.

use std::collections::BTreeMap;
use std::io;
use std::net::Shutdown;
use std::os::fd::AsFd;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::proxy::ProxyProcess;

/// Shuts `socket` down both ways: a listener refuses connects and frees
/// its port (if it was bound to port 0), a stream sends its FIN, now.
/// Dropping closes one descriptor only, and a process another test is
/// starting holds a copy of every descriptor until its exec: the socket
/// would live on in it, still listening, its FIN not sent.
pub fn shut(socket: &impl AsFd) -> io::Result<()> {
    socket2::SockRef::from(socket).shutdown(Shutdown::Both)
}

pub fn capture(name: &str) -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../testdata/clienthellos")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

fn u16_at(bytes: &[u8], at: usize) -> usize {
    usize::from(u16::from_be_bytes([bytes[at], bytes[at + 1]]))
}

fn push_u16(out: &mut Vec<u8>, value: usize) {
    out.extend_from_slice(&u16::try_from(value).expect("fits in u16").to_be_bytes());
}

/// `base` (one record holding exactly one ClientHello) grown with a padding
/// extension (type 0x0015, zeros) at the end of its extensions so that the
/// result is `total` bytes long, re-framed over `fragments.len() + 1`
/// records: the given fragment sizes, then the rest.
pub fn reframed(base: &[u8], total: usize, fragments: &[usize]) -> Vec<u8> {
    assert_eq!(base[0], 0x16, "the base starts with a handshake record");
    assert_eq!(base.len(), 5 + u16_at(base, 3), "the base is one record");
    let message = &base[5..];
    assert_eq!(message[0], 1, "the base's message is a ClientHello");
    let body = &message[4..];
    let body_len = usize::from(message[1]) << 16 | u16_at(message, 2);
    assert_eq!(body.len(), body_len, "the base's record holds the message");
    // legacy_version, random, session id, cipher suites, compression.
    let mut at = 2 + 32;
    at += 1 + usize::from(body[at]);
    at += 2 + u16_at(body, at);
    at += 1 + usize::from(body[at]);
    let extensions_len = u16_at(body, at);
    assert_eq!(
        at + 2 + extensions_len,
        body.len(),
        "extensions end the body"
    );
    let records = fragments.len() + 1;
    let message_len = total - 5 * records;
    let pad = message_len
        .checked_sub(message.len() + 4)
        .expect("total leaves room for the padding extension");
    let mut new_body = body[..at].to_vec();
    push_u16(&mut new_body, extensions_len + 4 + pad);
    new_body.extend_from_slice(&body[at + 2..]);
    new_body.extend_from_slice(&[0x00, 0x15]);
    push_u16(&mut new_body, pad);
    new_body.resize(new_body.len() + pad, 0);
    let mut new_message = vec![1];
    let len = u32::try_from(new_body.len()).expect("fits in u24");
    new_message.extend_from_slice(&len.to_be_bytes()[1..]);
    new_message.extend_from_slice(&new_body);
    assert_eq!(new_message.len(), message_len);
    let mut out = Vec::with_capacity(total);
    let mut rest: &[u8] = &new_message;
    let sizes = fragments
        .iter()
        .copied()
        .chain([message_len - fragments.iter().sum::<usize>()]);
    for size in sizes {
        assert!((1..=16_384).contains(&size), "fragment of {size} bytes");
        let (fragment, after) = rest.split_at(size);
        out.extend_from_slice(&base[..3]);
        push_u16(&mut out, size);
        out.extend_from_slice(fragment);
        rest = after;
    }
    assert!(rest.is_empty());
    assert_eq!(out.len(), total);
    out
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
