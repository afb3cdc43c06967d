//! Issue 11's acceptance test: `preread inspect` decides what the running
//! proxy decides, for every capture of the corpus, on listeners whose
//! `sni_preread_max_bytes` cuts some of them, whole and in chosen reads.
//!
//! One real `preread start` has three SNI listeners on loopback with the
//! routes of `testdata/corpus-routes.toml`'s first listener (taken from
//! `testdata/route_pool.rs`'s `CORPUS`, clusters named after their
//! patterns) and a plain TCP backend for every cluster:
//!
//! | name       | `sni_preread_max_bytes` | extra                            |
//! |------------|-------------------------|----------------------------------|
//! | `default`  | no key (65536)          | `default_cluster = "fallback"`   |
//! | `cap16384` | 16384                   | –                                |
//! | `cap1000`  | 1000                    | –                                |
//!
//! `buffer_size` keeps its default (16384): it does not bound the caps (the
//! window grows past a pooled buffer up to the cap). The `default_cluster`
//! of the first listener is there so that `fallback:<reason>` outcomes are
//! compared too; it does not change the cap.
//!
//! Every capture (each `testdata/clienthellos/*.bin`, plus a few built here
//! and never committed: ClientHellos grown with a padding extension and
//! re-framed over two records, one of them about 20 KB) goes to each
//! listener on its own connection: the whole file is written, the write side
//! shut down, then the client reads until EOF or a reset. The proxy's
//! access-log line of that connection (found by its `client=` address and
//! `listener=`) is then compared with `preread inspect -c <the proxy's
//! config> --listener <addr> <file>`. A second test sends a few captures in
//! chosen chunks (TCP_NODELAY, a pause after each chunk so each arrives as
//! its own read) and compares with `inspect --reads <the same sizes>`.
//!
//! # How the two vocabularies map
//!
//! | proxy's `outcome`          | inspect's `decision`                             |
//! |----------------------------|--------------------------------------------------|
//! | `routed` (cluster C)       | `verdict: routed`, `cluster: C`, `fallback: null` |
//! | `fallback:R` (cluster C)   | `verdict: routed`, `cluster: C`, `fallback: R`   |
//! | `rejected:R`, alert A read | `verdict: rejected`, `reason: R`, `alert: A`     |
//! | `rejected:front_closed`    | `verdict: need_more`                             |
//! | `refused:*`, no line       | nothing: always a disagreement                   |
//!
//! A rejected client's alert is what it read before the close (one fatal
//! alert record, or nothing), compared with inspect's `decision.alert`.
//!
//! The `front_closed` row: `inspect` has no close and no timer, so a capture
//! that ends before its ClientHello does is `need_more` there; the client
//! of this test closes its write side right after the capture, so the proxy,
//! holding the same incomplete window, says `rejected:front_closed`. That is
//! the same decision about the same bytes.
//!
//! Every disagreement is printed in one table and fails the test.
//!
//! Loopback only; every wait is bounded; the proxy and the backends are
//! stopped on Drop. Run `cargo build -p proxy-shell --bin preread` first.

use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use e2e::backend::PlainBackend;
use e2e::client::{self, read_to_close};
use e2e::proxy::{CLI_TIMEOUT, ConfigBuilder, ProxyProcess, run_preread};
use e2e::testkit::{eventually, stderr_tail};
use preread_parser::tls::{AlertDescription, Parsed, parse_client_hello};

/// Bound of one wait: a connect, a read to the close, the access log.
const T: Duration = Duration::from_secs(5);
/// The pause after each chunk of a chunked send, so the proxy reads each
/// chunk on its own.
const CHUNK_PAUSE: Duration = Duration::from_millis(50);

/// The three listeners: name, extra lines.
const LISTENERS: [(&str, &[&str]); 3] = [
    ("default", &["default_cluster = \"fallback\""]),
    ("cap16384", &["sni_preread_max_bytes = 16384"]),
    ("cap1000", &["sni_preread_max_bytes = 1000"]),
];

// The one set of route fixtures; this test uses its CORPUS table only.
#[allow(dead_code, unreachable_pub)]
#[path = "../../testdata/route_pool.rs"]
mod route_pool;

/// Every listener gets every route of [`route_pool::CORPUS`] (each to a
/// cluster named after its pattern), with the one narrowing that
/// `testdata/corpus-routes.toml` makes: `d.example.com` takes only `h2`.
const NARROWED: (&str, &[&str]) = ("d.example.com", &["h2"]);

/// The `default_cluster` of the `default` listener; it has no frontend.
const FALLBACK: &str = "fallback";

/// `(pattern, ALPN list, cluster)` of every frontend of each listener.
fn routes() -> Vec<route_pool::RouteSpec> {
    route_pool::CORPUS
        .iter()
        .map(|&(pattern, alpn, cluster)| {
            let alpn = if pattern == NARROWED.0 {
                NARROWED.1
            } else {
                alpn
            };
            (pattern, alpn, cluster)
        })
        .collect()
}

/// The captures built by [`built_captures`]: file name, base capture, total
/// length, sizes of every record's fragment but the last (which takes the
/// rest). The base is `openssl_tls13.bin` (`d.example.com`, ALPN `h2`).
const BUILT: [(&str, &str, usize, &[usize]); 5] = [
    // About 20 KB over two records: over every cap but the default one,
    // which takes it after growing its window.
    (
        "built_2rec_20000.bin",
        "openssl_tls13.bin",
        20_000,
        &[16_384],
    ),
    // Complete exactly at 16384 bytes: at the default and 16384 caps.
    (
        "built_2rec_16384.bin",
        "openssl_tls13.bin",
        16_384,
        &[8_192],
    ),
    // Complete exactly at the 1000 cap, and one byte over it.
    ("built_2rec_1000.bin", "openssl_tls13.bin", 1_000, &[300]),
    ("built_2rec_1001.bin", "openssl_tls13.bin", 1_001, &[300]),
    // The second record's header straddles the 1000 cap (bytes 998..1003).
    (
        "built_2rec_header_at_998.bin",
        "openssl_tls13.bin",
        1_500,
        &[993],
    ),
];

/// The proxy and its backends, stopped on Drop (the proxy first).
struct Fixture {
    proxy: ProxyProcess,
    _backends: Vec<PlainBackend>,
}

impl Fixture {
    fn start() -> Self {
        let routes = routes();
        let clusters: Vec<&str> = routes
            .iter()
            .map(|(_, _, cluster)| *cluster)
            .chain([FALLBACK])
            .collect();
        let backends: Vec<PlainBackend> = clusters
            .iter()
            .map(|cluster| PlainBackend::start(&format!("{cluster}-0")))
            .collect();
        let mut config = ConfigBuilder::new();
        for (name, extra) in LISTENERS {
            config = config.listener(name, extra);
        }
        for (name, _) in LISTENERS {
            for &(sni, alpn, cluster) in &routes {
                config = config.frontend(cluster, name, Some(sni), alpn);
            }
        }
        for (cluster, backend) in clusters.iter().zip(&backends) {
            config = config.backend(cluster, backend.name(), backend.addr());
        }
        let proxy = ProxyProcess::start(&config.build())
            .unwrap_or_else(|err| panic!("start the proxy: {err}"));
        Self {
            proxy,
            _backends: backends,
        }
    }

    fn listeners(&self) -> Vec<(&'static str, SocketAddr)> {
        LISTENERS
            .iter()
            .map(|(name, _)| (*name, self.proxy.addr(name)))
            .collect()
    }
}

/// One input: its name in the table, the file given to `inspect`, its bytes.
struct Capture {
    name: String,
    path: PathBuf,
    bytes: Vec<u8>,
}

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/clienthellos")
}

/// Every `*.bin` of the corpus, by name.
fn corpus_captures() -> Vec<Capture> {
    let dir = corpus_dir();
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|err| panic!("list {}: {err}", dir.display()))
        .map(|entry| entry.expect("read a corpus directory entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "bin"))
        .collect();
    paths.sort();
    assert!(
        paths.len() >= 40,
        "the corpus has {} captures in {}; expected the whole corpus",
        paths.len(),
        dir.display()
    );
    paths
        .into_iter()
        .map(|path| {
            let bytes =
                std::fs::read(&path).unwrap_or_else(|err| panic!("read {}: {err}", path.display()));
            let name = path
                .file_name()
                .expect("a corpus file has a name")
                .to_string_lossy()
                .into_owned();
            Capture { name, path, bytes }
        })
        .collect()
}

/// The [`BUILT`] captures, written into `dir` for `inspect`; each checked
/// with the parser to be one complete ClientHello over its records.
fn built_captures(dir: &Path) -> Vec<Capture> {
    BUILT
        .iter()
        .map(|(name, base, total, fragments)| {
            let bytes = e2e::testkit::reframed(&e2e::testkit::capture(base), *total, fragments);
            let mut scratch = Vec::new();
            match parse_client_hello(&bytes, &mut scratch) {
                Ok(Parsed::Complete(hello)) => {
                    assert_eq!(hello.records, fragments.len() + 1, "{name}: records");
                    assert_eq!(hello.end, *total, "{name}: end");
                    assert_eq!(
                        hello.server_name,
                        Some(&b"d.example.com"[..]),
                        "{name}: sni"
                    );
                }
                other => panic!("{name}: the built capture does not parse: {other:?}"),
            }
            let path = dir.join(name);
            std::fs::write(&path, &bytes)
                .unwrap_or_else(|err| panic!("write {}: {err}", path.display()));
            Capture {
                name: (*name).to_owned(),
                path,
                bytes,
            }
        })
        .collect()
}

/// `len` bytes cut as `inspect --reads` cuts them: reads of `sizes` while
/// bytes are left, then the rest (if any) as one last read.
fn chunk_sizes(len: usize, sizes: &[usize]) -> Vec<usize> {
    let mut out = Vec::new();
    let mut left = len;
    for &size in sizes {
        if left == 0 {
            break;
        }
        let take = size.min(left);
        out.push(take);
        left -= take;
    }
    if left > 0 {
        out.push(left);
    }
    out
}

/// What the client side of one connection saw.
struct Sent {
    client: SocketAddr,
    /// Kept open (read side at EOF) until the access log is read, so that
    /// no later connection of this test reuses the client port.
    _stream: TcpStream,
    /// What the proxy sent before the close: a rejected client's alert.
    received: Vec<u8>,
    note: Option<String>,
}

/// Connects to `addr`, writes `bytes` in `chunks` (with [`CHUNK_PAUSE`]
/// after each chunk but the last when `pause`), shuts the write side down
/// and reads until EOF or a reset. A write refused because the proxy
/// already closed is not an error: the proxy decided before the end.
fn send(addr: SocketAddr, bytes: &[u8], chunks: &[usize], pause: bool) -> Result<Sent, String> {
    let mut stream = client::connect(addr, T)?;
    let client = stream
        .local_addr()
        .map_err(|e| format!("local_addr: {e}"))?;
    let mut at = 0;
    for (i, &size) in chunks.iter().enumerate() {
        if i > 0 && pause {
            std::thread::sleep(CHUNK_PAUSE);
        }
        if stream.write_all(&bytes[at..at + size]).is_err() {
            break;
        }
        at += size;
    }
    let _ = stream.shutdown(Shutdown::Write);
    let (received, closed) = read_to_close(&mut stream, T);
    let note = (!closed).then(|| format!("the proxy did not close within {T:?}"));
    Ok(Sent {
        client,
        _stream: stream,
        received,
        note,
    })
}

/// One decision, in the vocabulary of the module documentation.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Decision {
    Routed {
        cluster: String,
        fallback: Option<String>,
    },
    /// The reason, and the name of the alert the client read (none for
    /// a bare close).
    Rejected(String, Option<String>),
    NeedMore,
    /// Anything that can agree with nothing: a refusal, a missing line, a
    /// failed `inspect`.
    Other(String),
}

impl Decision {
    /// From the proxy's access-log fields.
    fn from_access_log(fields: &BTreeMap<String, String>, received: &[u8]) -> Self {
        let outcome = fields.get("outcome").map_or("-", String::as_str);
        let cluster = fields.get("cluster").cloned().unwrap_or_default();
        if outcome == "routed" {
            return Self::Routed {
                cluster,
                fallback: None,
            };
        }
        if let Some(reason) = outcome.strip_prefix("fallback:") {
            return Self::Routed {
                cluster,
                fallback: Some(reason.to_owned()),
            };
        }
        match outcome.strip_prefix("rejected:") {
            // The documented mapping: the client closed on an incomplete
            // ClientHello, which inspect (no close, no timer) calls need_more.
            Some("front_closed") => Self::NeedMore,
            Some(reason) => match alert_of(received) {
                Ok(alert) => Self::Rejected(reason.to_owned(), alert),
                Err(bytes) => Self::Other(format!("rejected:{reason}, then {bytes:02x?}")),
            },
            None => Self::Other(format!("outcome={outcome}")),
        }
    }

    /// From inspect's `decision` object.
    fn from_inspect(decision: &Value) -> Self {
        let text = |key: &str| decision.get(key).and_then(Value::as_str).map(str::to_owned);
        match text("verdict").as_deref() {
            Some("routed") => Self::Routed {
                cluster: text("cluster").unwrap_or_default(),
                fallback: text("fallback"),
            },
            Some("rejected") => Self::Rejected(text("reason").unwrap_or_default(), text("alert")),
            Some("need_more") => Self::NeedMore,
            other => Self::Other(format!("verdict {other:?}")),
        }
    }
}

/// The name of the one fatal alert record in `received`, `None` when the
/// proxy sent nothing, or the bytes when they are anything else.
fn alert_of(received: &[u8]) -> Result<Option<String>, &[u8]> {
    match received {
        [] => Ok(None),
        [0x15, 0x03, _, 0x00, 0x02, 0x02, code] => AlertDescription::from_code(*code)
            .map(|alert| Some(alert.as_str().to_owned()))
            .ok_or(received),
        _ => Err(received),
    }
}

impl std::fmt::Display for Decision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Routed {
                cluster,
                fallback: None,
            } => write!(f, "routed {cluster}"),
            Self::Routed {
                cluster,
                fallback: Some(reason),
            } => write!(f, "routed {cluster} (fallback {reason})"),
            Self::Rejected(reason, None) => write!(f, "rejected {reason}, no alert"),
            Self::Rejected(reason, Some(alert)) => write!(f, "rejected {reason}, {alert}"),
            Self::NeedMore => f.write_str("need_more / front_closed"),
            Self::Other(what) => f.write_str(what),
        }
    }
}

/// Runs `preread inspect -c CONFIG --listener ADDR [--reads SIZES] FILE` and
/// returns its decision.
fn inspect(proxy: &ProxyProcess, listener: SocketAddr, reads: &[usize], file: &Path) -> Decision {
    let config = proxy.config_path().display().to_string();
    let listener = listener.to_string();
    let file = file.display().to_string();
    let reads = reads
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let mut args = vec!["inspect", "-c", &config, "--listener", &listener];
    if !reads.is_empty() {
        args.extend(["--reads", &reads]);
    }
    args.push(&file);
    let output = match run_preread(&args, proxy.dir(), CLI_TIMEOUT) {
        Ok(output) => output,
        Err(err) => return Decision::Other(format!("inspect: {err}")),
    };
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let first = stderr.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
        return Decision::Other(format!("inspect {}: {first}", output.status));
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    let Some(line) = stdout.lines().find(|l| !l.trim().is_empty()) else {
        return Decision::Other("inspect printed nothing".to_owned());
    };
    match serde_json::from_str::<Value>(line) {
        Ok(report) => match report.get("decision") {
            Some(decision) => Decision::from_inspect(decision),
            None => Decision::Other("inspect printed no decision".to_owned()),
        },
        Err(err) => Decision::Other(format!("inspect's JSON: {err}")),
    }
}

/// One connection to compare: which capture, listener and reads, and what
/// the client saw.
struct Case<'a> {
    capture: &'a Capture,
    listener: (&'static str, SocketAddr),
    /// Empty: the whole capture in one write, and no `--reads`.
    reads: Vec<usize>,
    sent: Result<Sent, String>,
}

/// A row of the result table.
struct Row {
    file: String,
    listener: String,
    reads: String,
    proxy: Decision,
    inspect: Decision,
}

/// Waits (bounded) for every case's access-log line, then asks inspect
/// about each case: one row per case.
fn compare(proxy: &ProxyProcess, cases: &[Case<'_>]) -> Vec<Row> {
    let key = |listener: SocketAddr, client: SocketAddr| (listener.to_string(), client.to_string());
    let wanted: Vec<(String, String)> = cases
        .iter()
        .filter_map(|case| {
            case.sent
                .as_ref()
                .ok()
                .map(|s| key(case.listener.1, s.client))
        })
        .collect();
    let lines_by_key = || {
        let mut by_key: BTreeMap<(String, String), Vec<BTreeMap<String, String>>> = BTreeMap::new();
        for fields in proxy.access_logs() {
            if let (Some(listener), Some(client)) = (fields.get("listener"), fields.get("client")) {
                by_key
                    .entry((listener.clone(), client.clone()))
                    .or_default()
                    .push(fields);
            }
        }
        by_key
    };
    eventually(T, || {
        let by_key = lines_by_key();
        wanted.iter().all(|k| by_key.contains_key(k))
    });
    let by_key = lines_by_key();
    cases
        .iter()
        .map(|case| {
            let proxy_decision = match &case.sent {
                Err(err) => Decision::Other(format!("client: {err}")),
                Ok(sent) => match by_key
                    .get(&key(case.listener.1, sent.client))
                    .map(Vec::as_slice)
                {
                    Some([fields]) => {
                        let decision = Decision::from_access_log(fields, &sent.received);
                        match &sent.note {
                            Some(note) => Decision::Other(format!("{decision}; {note}")),
                            None => decision,
                        }
                    }
                    Some(lines) => Decision::Other(format!("{} access-log lines", lines.len())),
                    None => Decision::Other(format!("no access-log line within {T:?}")),
                },
            };
            let inspect_decision = inspect(proxy, case.listener.1, &case.reads, &case.capture.path);
            let reads = if case.reads.is_empty() {
                "whole".to_owned()
            } else {
                case.reads
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(",")
            };
            Row {
                file: case.capture.name.clone(),
                listener: format!("{} ({})", case.listener.0, case.listener.1),
                reads,
                proxy: proxy_decision,
                inspect: inspect_decision,
            }
        })
        .collect()
}

/// Fails with a table of every row where the two sides disagree, and with
/// `uncovered`: outcomes the proxy was assumed to reach and did not (so a
/// broken config or harness cannot pass by comparing nothing interesting).
fn assert_agree(proxy: &ProxyProcess, rows: &[Row], uncovered: &[String], started: Instant) {
    let bad: Vec<&Row> = rows.iter().filter(|r| r.proxy != r.inspect).collect();
    eprintln!(
        "inspect_agrees: {} comparisons, {} disagreements, {:.1?}",
        rows.len(),
        bad.len(),
        started.elapsed()
    );
    if bad.is_empty() && uncovered.is_empty() {
        return;
    }
    let headers = ["file", "listener", "reads", "proxy", "inspect"];
    let cells: Vec<[String; 5]> = bad
        .iter()
        .map(|r| {
            [
                r.file.clone(),
                r.listener.clone(),
                r.reads.clone(),
                r.proxy.to_string(),
                r.inspect.to_string(),
            ]
        })
        .collect();
    let widths: Vec<usize> = (0..5)
        .map(|i| {
            cells
                .iter()
                .map(|c| c[i].len())
                .chain([headers[i].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut table = String::new();
    let mut line = |row: [&str; 5]| {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        let _ = writeln!(table, "| {} |", cells.join(" | "));
    };
    line(headers);
    let rules: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
    line([&rules[0], &rules[1], &rules[2], &rules[3], &rules[4]]);
    for c in &cells {
        line([&c[0], &c[1], &c[2], &c[3], &c[4]]);
    }
    if !uncovered.is_empty() {
        let _ = writeln!(
            table,
            "\nthe proxy did not decide as this test's coverage assumes (the config or the harness is off):"
        );
        for miss in uncovered {
            let _ = writeln!(table, "  {miss}");
        }
    }
    panic!(
        "the proxy and `preread inspect` disagree on {} of {} comparisons:\n{table}\nproxy stderr (tail):\n{}",
        bad.len(),
        rows.len(),
        stderr_tail(proxy)
    );
}

#[test]
fn inspect_agrees_with_the_proxy_on_every_capture_and_listener() {
    let started = Instant::now();
    let fixture = Fixture::start();
    let proxy = &fixture.proxy;
    let mut captures = corpus_captures();
    captures.extend(built_captures(proxy.dir()));
    let mut cases = Vec::new();
    for listener in fixture.listeners() {
        for capture in &captures {
            let whole = [capture.bytes.len()];
            let sent = send(listener.1, &capture.bytes, &whole, false);
            cases.push(Case {
                capture,
                listener,
                reads: Vec::new(),
                sent,
            });
        }
    }
    let rows = compare(proxy, &cases);
    // Not vacuous: the proxy's side reached every kind of outcome that the
    // comparison maps, and the oversized captures were cut.
    let seen = |file: &str, listener: &str, want: &Decision| {
        rows.iter().any(|r| {
            r.file == file && r.listener.starts_with(&format!("{listener} (")) && r.proxy == *want
        })
    };
    let rejected = |reason: &str, alert: Option<&str>| {
        Decision::Rejected(reason.to_owned(), alert.map(str::to_owned))
    };
    let too_large = rejected("too_large", Some("record_overflow"));
    let coverage = [
        (
            "curl_h2.bin",
            "cap1000",
            Decision::Routed {
                cluster: "a.example.com".to_owned(),
                fallback: None,
            },
        ),
        (
            "gen_l_http_get.bin",
            "default",
            Decision::Routed {
                cluster: FALLBACK.to_owned(),
                fallback: Some("not_tls".to_owned()),
            },
        ),
        ("gen_l_http_get.bin", "cap16384", rejected("not_tls", None)),
        (
            "gen_truncated_200_of_517.bin",
            "cap1000",
            Decision::NeedMore,
        ),
        (
            "gen_o_record_exactly_16384.bin",
            "cap16384",
            too_large.clone(),
        ),
        // Past one pooled buffer: the default cap's window grows to it.
        (
            "built_2rec_20000.bin",
            "default",
            Decision::Routed {
                cluster: "d.example.com".to_owned(),
                fallback: None,
            },
        ),
        ("built_2rec_20000.bin", "cap16384", too_large.clone()),
        ("chromium_a_1.bin", "cap1000", too_large),
        // Issue 28's alerts, as the client reads them.
        (
            "gen_o_second_record_overflow_16385.bin",
            "default",
            rejected("malformed_record", Some("record_overflow")),
        ),
        (
            "gen_p_cipher_suites_len_14_no_ext.bin",
            "default",
            rejected("malformed_handshake", Some("decode_error")),
        ),
        (
            "gen_q_compression_methods_len_0.bin",
            "cap1000",
            rejected("malformed_handshake", Some("decode_error")),
        ),
        (
            "gen_sni_embedded_nul.bin",
            "default",
            rejected("malformed_handshake", Some("illegal_parameter")),
        ),
    ];
    let missing: Vec<String> = coverage
        .iter()
        .filter(|(file, listener, want)| !seen(file, listener, want))
        .map(|(file, listener, want)| format!("{file} on {listener}: {want}"))
        .collect();
    assert_agree(proxy, &rows, &missing, started);
    drop(cases);
}

#[test]
fn inspect_reads_agree_with_the_proxy_reading_the_same_chunks() {
    let started = Instant::now();
    let fixture = Fixture::start();
    let proxy = &fixture.proxy;
    let mut captures = corpus_captures();
    captures.extend(built_captures(proxy.dir()));
    let listener = |name: &str| {
        fixture
            .listeners()
            .into_iter()
            .find(|(n, _)| *n == name)
            .expect("a listener of LISTENERS")
    };
    let capture = |name: &str| {
        captures
            .iter()
            .find(|c| c.name == name)
            .unwrap_or_else(|| panic!("no capture {name}"))
    };
    // (capture, listener, reads): each chunking is sent as is and given to
    // `inspect --reads` as is.
    let plans: [(&str, &str, &[usize]); 13] = [
        // The second record's header (bytes 1005..1010) cut after 3 bytes.
        (
            "gen_o_second_record_overflow_16385.bin",
            "default",
            &[1_008, 300],
        ),
        ("curl_h2.bin", "default", &[5, 100, 4000]),
        // Chunk boundaries inside the 5-byte record header.
        ("curl_h2.bin", "cap16384", &[3, 2, 200]),
        ("openssl_alpn.bin", "cap1000", &[1, 3, 337]),
        // The third read is capped at 895 bytes: still incomplete at 1000.
        ("chromium_a_1.bin", "cap1000", &[5, 100, 4000]),
        // Complete at 517, read as 600: routed, the rest piped.
        ("gen_g_trailing_2k.bin", "cap1000", &[600, 500]),
        (
            "gen_o_record_exactly_16384.bin",
            "cap16384",
            &[5, 100, 4000],
        ),
        ("gen_o_record_exactly_16384.bin", "cap1000", &[999, 1]),
        ("gen_truncated_200_of_517.bin", "default", &[1, 4, 100]),
        // The first record exactly fills the 16384 cap; the default one
        // grows its window past it.
        ("built_2rec_20000.bin", "cap16384", &[5, 16_379]),
        ("built_2rec_20000.bin", "default", &[5, 16_379]),
        // Header cut after 4 bytes; complete exactly at the 1000 cap.
        ("built_2rec_1000.bin", "cap1000", &[4, 301, 600]),
        ("openssl_noservername.bin", "default", &[2, 50]),
    ];
    let cases: Vec<Case<'_>> = std::thread::scope(|scope| {
        let handles: Vec<_> = plans
            .iter()
            .map(|(file, listener_name, reads)| {
                let capture = capture(file);
                let listener = listener(listener_name);
                let reads = reads.to_vec();
                scope.spawn(move || {
                    let chunks = chunk_sizes(capture.bytes.len(), &reads);
                    let sent = send(listener.1, &capture.bytes, &chunks, true);
                    Case {
                        capture,
                        listener,
                        reads,
                        sent,
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a sender thread"))
            .collect()
    });
    let rows = compare(proxy, &cases);
    assert_agree(proxy, &rows, &[], started);
    drop(cases);
}
