//! Decision cost of the core: a fresh `SniPrereadCore` per connection, fed
//! the whole ClientHello in one `Input::Bytes`, as the worker does.
//!
//! Two groups:
//!
//! - `decision_<N>_routes/<shape>`: route tables of 10, 1,000 and 100,000
//!   frontends (mixed exact, `*.` and `**.` patterns, some with ALPN lists),
//!   all searched with the Chrome capture `chromium_a_1.bin` (1,921 bytes).
//!   `exact` is the capture as it is (SNI `a.example.com`); `one-label`,
//!   `any-depth` and `unmatched` are the same capture with only the SNI
//!   rewritten, so the shapes differ in the lookup alone. `exact-rotating`
//!   writes another exact name of the table into the same capture before
//!   each decision: every filler name of one length (6 names in the
//!   10-route table, 486 in the 1,000-route one, 48,600 in the
//!   100,000-route one), so the big table is searched beyond the cache
//!   rather than for one hot bucket. The goal: the 100,000-route figures
//!   within 20% of the 10-route ones.
//! - `corpus_1000_routes/<file>`: parse + decision for every `kind: real`,
//!   `expected: routed` corpus hello, on a 1,000-route table that holds the
//!   corpus names. The goal: under 300 ns for the median hello.
//!
//! Every case is decided once and checked before it is timed, so no row
//! times an unexpected path. Tables are built once, outside the timed loop;
//! the timed loop includes dropping the core and the output (the worker
//! drops both too).
//!
//! Run: `cargo bench -p preread-core` (results in `doc/performance.md`).
//! One group only: `cargo bench -p preread-core -- decision_100000`.
//! `examples/decide_once.rs` builds the same tables for callgrind and counts
//! allocations; keep the two in step.

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use preread_core::pattern::validate_sni_pattern;
use preread_core::routes::{AlpnSet, RouteTable};
use preread_core::{Input, Output, PrereadConfig, RejectReason, SniPrereadCore};

const H2_H11: &[&str] = &["h2", "http/1.1"];

/// The table sizes of the first group.
const SIZES: [usize; 3] = [10, 1_000, 100_000];

/// One lookup shape: the SNI written into the Chrome capture, and the
/// pattern that must match it (`None`: refused as `SniUnmatched`).
struct Shape {
    name: &'static str,
    sni: &'static str,
    matched: Option<&'static str>,
}

const SHAPES: [Shape; 4] = [
    Shape {
        name: "exact",
        sni: "a.example.com",
        matched: Some("a.example.com"),
    },
    Shape {
        name: "one-label",
        sni: "x.wild.example.com",
        matched: Some("*.wild.example.com"),
    },
    Shape {
        name: "any-depth",
        sni: "x.y.deep.example.com",
        matched: Some("**.deep.example.com"),
    },
    Shape {
        name: "unmatched",
        sni: "a.example.org",
        matched: None,
    },
];

/// The frontends the shapes hit; every synthetic table holds them.
const SHAPE_ROUTES: &[(&str, &[&str], &str)] = &[
    ("a.example.com", H2_H11, "exact"),
    ("*.wild.example.com", H2_H11, "one-label"),
    ("**.deep.example.com", H2_H11, "any-depth"),
];

/// The corpus names, as in `tests/common/mod.rs`.
const CORPUS_ROUTES: &[(&str, &[&str], &str)] = &[
    ("a.example.com", &[], "a.example.com"),
    ("*.b.example.com", &[], "*.b.example.com"),
    ("c.example.com", &[], "c.example.com"),
    ("d.example.com", &[], "d.example.com"),
    ("psk.example.com", &[], "psk.example.com"),
    ("**.example.com", &[], "**.example.com"),
    ("public.example.net", &[], "public.example.net"),
];

fn insert(table: &mut RouteTable, pattern: &str, alpn: &[&str], cluster: &str) {
    let pattern = validate_sni_pattern(pattern).expect("valid bench pattern");
    let alpn = if alpn.is_empty() {
        AlpnSet::Any
    } else {
        AlpnSet::protocols(alpn).expect("valid bench ALPN")
    };
    table
        .insert(pattern, alpn, Arc::from(cluster))
        .expect("no conflict in bench routes");
}

/// Filler frontend `i`: 60% exact `host-N.zone-M.example.com` (a third of
/// them listing `h2`), 20% `*.svc-N.zone-M.example.com`, 20%
/// `**.tenant-N.example.net` (a quarter of them listing `http/1.1`). No
/// filler matches a shape or corpus name.
fn filler(i: usize) -> (String, &'static [&'static str], String) {
    let zone = i % 100;
    match i % 10 {
        0..=5 => (
            format!("host-{i}.zone-{zone}.example.com"),
            if i % 3 == 0 { &["h2"] } else { &[] },
            format!("exact-{}", i % 50),
        ),
        6 | 7 => (
            format!("*.svc-{i}.zone-{zone}.example.com"),
            &[],
            format!("one-label-{}", i % 50),
        ),
        _ => (
            format!("**.tenant-{i}.example.net"),
            if i % 20 == 9 { &["http/1.1"] } else { &[] },
            format!("any-depth-{}", i % 50),
        ),
    }
}

/// `routes`, then fillers `0..size - routes.len()`.
fn table(routes: &[(&str, &[&str], &str)], size: usize) -> RouteTable {
    let mut table = RouteTable::new();
    for &(pattern, alpn, cluster) in routes {
        insert(&mut table, pattern, alpn, cluster);
    }
    for i in 0..size - routes.len() {
        let (pattern, alpn, cluster) = filler(i);
        insert(&mut table, &pattern, alpn, &cluster);
    }
    assert_eq!(table.len(), size);
    table
}

/// The exact filler names of `table(_, size)` of its most common length,
/// concatenated, and that length: names of one length can be written in
/// turn into one hello.
fn rotating_names(size: usize) -> (Vec<u8>, usize) {
    let mut by_len: Vec<Vec<u8>> = Vec::new();
    for i in 0..size - SHAPE_ROUTES.len() {
        let (name, _, _) = filler(i);
        if !name.starts_with('*') {
            if by_len.len() <= name.len() {
                by_len.resize(name.len() + 1, Vec::new());
            }
            by_len[name.len()].extend_from_slice(name.as_bytes());
        }
    }
    let (len, names) = by_len
        .into_iter()
        .enumerate()
        .filter(|(len, _)| *len > 0)
        .max_by_key(|(len, names)| names.len() / len)
        .expect("the table has exact fillers");
    (names, len)
}

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/clienthellos")
}

/// A single-record ClientHello with its `host_name` replaced by `sni`; every
/// enclosing length is patched. Panics on anything else.
fn with_sni(hello: &[u8], sni: &str) -> Vec<u8> {
    let u16_at = |at: usize| usize::from(u16::from_be_bytes([hello[at], hello[at + 1]]));
    assert_eq!(hello[0], 22, "a handshake record");
    assert_eq!(u16_at(3) + 5, hello.len(), "one record, nothing after it");
    // record header (5), handshake header (4), legacy_version (2), random (32)
    let mut at = 5 + 4 + 2 + 32;
    at += 1 + usize::from(hello[at]); // session_id
    at += 2 + u16_at(at); // cipher_suites
    at += 1 + usize::from(hello[at]); // compression_methods
    let extensions_len_at = at;
    at += 2;
    while u16_at(at) != 0x0000 {
        at += 4 + u16_at(at + 2);
        assert!(at < hello.len(), "no server_name extension");
    }
    // type (2), length (2), list length (2), name_type (1), name length (2)
    let name_len_at = at + 7;
    let old_len = u16_at(name_len_at);
    let grow = |bytes: &mut [u8], at: usize, width: usize| {
        let mut value = 0usize;
        for b in &bytes[at..at + width] {
            value = value << 8 | usize::from(*b);
        }
        let value = value + sni.len() - old_len;
        for (i, b) in bytes[at..at + width].iter_mut().enumerate() {
            *b = (value >> (8 * (width - 1 - i))) as u8;
        }
    };
    let mut out = hello.to_vec();
    for (field, width) in [
        (3, 2),                 // record length
        (6, 3),                 // handshake length
        (extensions_len_at, 2), // extensions length
        (at + 2, 2),            // server_name extension length
        (at + 4, 2),            // server_name_list length
        (name_len_at, 2),       // host_name length
    ] {
        grow(&mut out, field, width);
    }
    let name = name_len_at + 2;
    out.splice(name..name + old_len, sni.bytes());
    out
}

/// One connection: a fresh core, the whole hello in one input.
#[inline]
fn decide(config: &PrereadConfig, window: &[u8], now: Instant) -> Output {
    let mut core = SniPrereadCore::new();
    core.handle_input(config, Input::Bytes { buf: window, now })
}

/// The pattern that routed `output`, or the reject reason.
fn outcome(output: &Output) -> Result<String, String> {
    match output {
        Output::Routed(route) if route.fallback.is_none() => route
            .matched_sni
            .as_ref()
            .map(ToString::to_string)
            .ok_or_else(|| format!("{output:?}")),
        Output::Reject(RejectReason::SniUnmatched) => Err("unmatched".to_owned()),
        other => Err(format!("{other:?}")),
    }
}

fn lookup_shapes(c: &mut Criterion) {
    let chrome = std::fs::read(corpus_dir().join("chromium_a_1.bin")).expect("read capture");
    assert_eq!(
        with_sni(&chrome, "a.example.com"),
        chrome,
        "rewriting the SNI to itself is the identity"
    );
    let hellos: Vec<Vec<u8>> = SHAPES.iter().map(|s| with_sni(&chrome, s.sni)).collect();
    let now = Instant::now();
    for size in SIZES {
        let config = PrereadConfig::new(table(SHAPE_ROUTES, size));
        let mut group = c.benchmark_group(format!("decision_{size}_routes"));
        group.throughput(Throughput::Elements(1));
        for (shape, window) in SHAPES.iter().zip(&hellos) {
            let expected = shape
                .matched
                .map(str::to_owned)
                .ok_or_else(|| "unmatched".to_owned());
            let got = outcome(&decide(&config, window, now));
            assert_eq!(got, expected, "{size} routes, {}", shape.name);
            let window = window.as_slice();
            group.bench_function(shape.name, |b| {
                b.iter(|| black_box(decide(&config, black_box(window), now)));
            });
        }
        let (names, len) = rotating_names(size);
        let mut window = with_sni(&chrome, std::str::from_utf8(&names[..len]).expect("ASCII"));
        let at = window
            .windows(len)
            .position(|w| w == &names[..len])
            .expect("the name is in the hello");
        for name in names.chunks_exact(len) {
            window[at..at + len].copy_from_slice(name);
            let got = outcome(&decide(&config, &window, now));
            assert_eq!(got.as_deref().map(str::as_bytes), Ok(name), "{size} routes");
        }
        let mut next = 0;
        group.bench_function("exact-rotating", |b| {
            b.iter(|| {
                next = (next + len) % names.len();
                window[at..at + len].copy_from_slice(&names[next..next + len]);
                black_box(decide(&config, black_box(&window), now))
            });
        });
        group.finish();
    }
}

fn corpus(c: &mut Criterion) {
    let dir = corpus_dir();
    let manifest = std::fs::read_to_string(dir.join("manifest.jsonl")).expect("read manifest");
    let hellos: Vec<(String, Vec<u8>, String)> = manifest
        .lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| serde_json::from_str::<serde_json::Value>(line).expect("manifest line"))
        .filter(|entry| entry["kind"] == "real" && entry["expected"] == "routed")
        .map(|entry| {
            let file = entry["file"].as_str().expect("file");
            (
                file.trim_end_matches(".bin").to_owned(),
                std::fs::read(dir.join(file)).expect("read corpus file"),
                entry["sni_normalized"].as_str().expect("SNI").to_owned(),
            )
        })
        .collect();
    assert!(!hellos.is_empty(), "no routed real hellos in the corpus");
    let config = PrereadConfig::new(table(CORPUS_ROUTES, 1_000));
    let now = Instant::now();
    let mut group = c.benchmark_group("corpus_1000_routes");
    group.throughput(Throughput::Elements(1));
    for (name, window, sni) in &hellos {
        match decide(&config, window, now) {
            Output::Routed(route) => {
                let got = route.sni.map(|s| s.as_str().to_owned());
                assert_eq!(got.as_ref(), Some(sni), "{name}");
                assert_eq!(route.fallback, None, "{name}");
            }
            other => panic!("{name}: {other:?}"),
        }
        let window = window.as_slice();
        group.bench_function(name, |b| {
            b.iter(|| black_box(decide(&config, black_box(window), now)));
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    // 15 table cases + 17 corpus files: short windows keep the whole run
    // near a minute and a half. Override with `-- --warm-up-time S --measurement-time S`.
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_millis(1500));
    targets = lookup_shapes, corpus
}
criterion_main!(benches);
