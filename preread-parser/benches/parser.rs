//! ClientHello parse cost: preread against tls-parser, rustls's `Acceptor`
//! and a bare offset walker (the floor), on every real captured ClientHello
//! of the corpus that a router must route (`kind: real`, `expected: routed`).
//!
//! Every implementation does the same job per hello: frame the record, find
//! SNI and ALPN, and hand both to `black_box`. Before timing anything, each
//! implementation's SNI and ALPN are checked against the manifest, so no row
//! times an error path.
//!
//! Run: `cargo bench -p preread-parser` (results in `doc/performance.md`).
//! One file only: `cargo bench -p preread-parser -- curl_h2`.

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};

/// Receives what an implementation found in a ClientHello.
trait Sink {
    fn sni(&mut self, name: &[u8]);
    fn alpn(&mut self, protocol: &[u8]);
}

/// The sink of the timed loop: consumes every result through `black_box`.
struct Consume;

impl Sink for Consume {
    #[inline(always)]
    fn sni(&mut self, name: &[u8]) {
        black_box(name);
    }

    #[inline(always)]
    fn alpn(&mut self, protocol: &[u8]) {
        black_box(protocol);
    }
}

/// The sink of the correctness check run before timing.
#[derive(Debug, Default, PartialEq, Eq)]
struct Collect {
    sni: Option<Vec<u8>>,
    alpn: Option<Vec<Vec<u8>>>,
}

impl Sink for Collect {
    fn sni(&mut self, name: &[u8]) {
        self.sni = Some(name.to_vec());
    }

    fn alpn(&mut self, protocol: &[u8]) {
        self.alpn
            .get_or_insert_with(Vec::new)
            .push(protocol.to_vec());
    }
}

/// Implementation 1, preread: full validation, zero allocation, scratch reused across calls.
fn preread(window: &[u8], scratch: &mut Vec<u8>, sink: &mut impl Sink) {
    use preread_parser::tls::{Parsed, parse_client_hello};
    if let Ok(Parsed::Complete(hello)) = parse_client_hello(window, scratch) {
        if let Some(name) = hello.server_name {
            sink.sni(name);
        }
        if let Some(alpn) = hello.alpn {
            for protocol in alpn {
                sink.alpn(protocol);
            }
        }
    }
}

/// Implementation 2, tls-parser 0.12: one plaintext record, then the ClientHello extensions.
fn tls_parser(window: &[u8], sink: &mut impl Sink) {
    use tls_parser::{SNIType, TlsExtension, TlsMessage, TlsMessageHandshake};
    let Ok((_, record)) = tls_parser::parse_tls_plaintext(window) else {
        return;
    };
    for message in &record.msg {
        let TlsMessage::Handshake(TlsMessageHandshake::ClientHello(hello)) = message else {
            continue;
        };
        let Some(block) = hello.ext else {
            continue;
        };
        let Ok((_, extensions)) = tls_parser::parse_tls_client_hello_extensions(block) else {
            return;
        };
        for extension in &extensions {
            match extension {
                TlsExtension::SNI(names) => {
                    for (name_type, name) in names {
                        if *name_type == SNIType::HostName {
                            sink.sni(name);
                        }
                    }
                }
                TlsExtension::ALPN(protocols) => {
                    for protocol in protocols {
                        sink.alpn(protocol);
                    }
                }
                _ => {}
            }
        }
    }
}

/// Implementation 3, rustls 0.23 `Acceptor`: a fresh acceptor per hello, as per connection.
fn rustls(window: &[u8], sink: &mut impl Sink) {
    let mut acceptor = rustls::server::Acceptor::default();
    let mut rest = window;
    loop {
        if acceptor.read_tls(&mut rest).is_err() {
            return;
        }
        match acceptor.accept() {
            Ok(Some(accepted)) => {
                let hello = accepted.client_hello();
                if let Some(name) = hello.server_name() {
                    sink.sni(name.as_bytes());
                }
                if let Some(alpn) = hello.alpn() {
                    for protocol in alpn {
                        sink.alpn(protocol);
                    }
                }
                return;
            }
            Ok(None) if !rest.is_empty() => {}
            Ok(None) | Err(_) => return,
        }
    }
}

/// Implementation 4, the FLOOR, NOT A PARSER: a bare offset walker with no validation at all,
/// only the bounds checks that keep it from panicking. It assumes a single
/// record, skips the fixed fields by their length bytes and takes the first
/// SNI entry at a fixed offset, like a naive peek router. It exists only to
/// show the cost of touching the bytes; nothing outside this bench uses it.
fn floor_walker(window: &[u8], sink: &mut impl Sink) -> Option<()> {
    let u16_at = |at: usize| -> Option<usize> {
        let pair = window.get(at..at + 2)?;
        Some(usize::from(u16::from_be_bytes([pair[0], pair[1]])))
    };
    // record header (5) + handshake header (4) + legacy_version (2) + random (32)
    let mut at = 5 + 4 + 2 + 32;
    at += 1 + usize::from(*window.get(at)?); // session_id
    at += 2 + u16_at(at)?; // cipher_suites
    at += 1 + usize::from(*window.get(at)?); // compression_methods
    let end = at + 2 + u16_at(at)?;
    at += 2;
    while at + 4 <= end {
        let (ext_type, len) = (u16_at(at)?, u16_at(at + 2)?);
        let data = window.get(at + 4..at + 4 + len)?;
        match ext_type {
            0x0000 => {
                // list length (2), name_type (1), name length (2), name
                let name_len = usize::from(u16::from_be_bytes([*data.get(3)?, *data.get(4)?]));
                sink.sni(data.get(5..5 + name_len)?);
            }
            0x0010 => {
                let mut list = data.get(2..)?;
                while let Some((&n, tail)) = list.split_first() {
                    let (protocol, after) = tail.split_at_checked(usize::from(n))?;
                    sink.alpn(protocol);
                    list = after;
                }
            }
            _ => {}
        }
        at += 4 + len;
    }
    Some(())
}

struct Hello {
    name: String,
    bytes: Vec<u8>,
    sni: Vec<u8>,
    sni_normalized: Vec<u8>,
    alpn: Option<Vec<Vec<u8>>>,
}

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/clienthellos")
}

/// The real captures a router must route, in manifest order.
fn routed_real_hellos() -> Vec<Hello> {
    let dir = corpus_dir();
    let manifest = std::fs::read_to_string(dir.join("manifest.jsonl")).expect("read manifest");
    let text = |v: &serde_json::Value| v.as_str().map(|s| s.as_bytes().to_vec());
    manifest
        .lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| serde_json::from_str::<serde_json::Value>(line).expect("manifest line"))
        .filter(|entry| entry["kind"] == "real" && entry["expected"] == "routed")
        .map(|entry| {
            let file = entry["file"].as_str().expect("file");
            Hello {
                name: file.trim_end_matches(".bin").to_owned(),
                bytes: std::fs::read(dir.join(file)).expect("read corpus file"),
                sni: text(&entry["sni"]).expect("routed hello has an SNI"),
                sni_normalized: text(&entry["sni_normalized"]).expect("normalized SNI"),
                alpn: entry["alpn"]
                    .as_array()
                    .map(|list| list.iter().map(|p| text(p).expect("ALPN name")).collect()),
            }
        })
        .collect()
}

/// Every implementation must find the manifest's SNI and ALPN before it is timed.
fn check(hello: &Hello) {
    let expected = Collect {
        sni: Some(hello.sni.clone()),
        alpn: hello.alpn.clone(),
    };
    let mut scratch = Vec::new();
    let mut got = Collect::default();
    preread(&hello.bytes, &mut scratch, &mut got);
    assert_eq!(got, expected, "preread on {}", hello.name);
    let mut got = Collect::default();
    tls_parser(&hello.bytes, &mut got);
    assert_eq!(got, expected, "tls-parser on {}", hello.name);
    let mut got = Collect::default();
    floor_walker(&hello.bytes, &mut got);
    assert_eq!(got, expected, "floor walker on {}", hello.name);
    // rustls hands out the name as a DNS name: compare it normalized.
    let mut got = Collect::default();
    rustls(&hello.bytes, &mut got);
    if let Some(sni) = &mut got.sni {
        sni.make_ascii_lowercase();
        if sni.ends_with(b".") {
            sni.pop();
        }
    }
    let expected = Collect {
        sni: Some(hello.sni_normalized.clone()),
        ..expected
    };
    assert_eq!(got, expected, "rustls on {}", hello.name);
}

fn clienthello(c: &mut Criterion) {
    let hellos = routed_real_hellos();
    assert!(!hellos.is_empty(), "no routed real hellos in the corpus");
    for hello in &hellos {
        check(hello);
    }
    let mut scratch = Vec::new();
    for hello in &hellos {
        let window = hello.bytes.as_slice();
        let mut group = c.benchmark_group(&hello.name);
        group.throughput(Throughput::Bytes(window.len() as u64));
        group.bench_function("preread", |b| {
            b.iter(|| preread(black_box(window), &mut scratch, &mut Consume));
        });
        group.bench_function("tls-parser", |b| {
            b.iter(|| tls_parser(black_box(window), &mut Consume));
        });
        group.bench_function("rustls", |b| {
            b.iter(|| rustls(black_box(window), &mut Consume));
        });
        group.bench_function("floor-walker", |b| {
            b.iter(|| floor_walker(black_box(window), &mut Consume));
        });
        group.finish();
    }
}

criterion_group! {
    name = benches;
    // 17 files x 4 implementations = 68 benchmarks: short windows and fewer
    // bootstrap resamples keep the whole run under three minutes on 2 cores.
    // Override with `-- --warm-up-time S --measurement-time S --nresamples N`.
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_millis(1200))
        .nresamples(10_000);
    targets = clienthello
}
criterion_main!(benches);
