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
use std::time::{Duration, Instant};

mod tables;

use tables::{CORPUS_ROUTES, SHAPE_ROUTES, corpus_dir, rotating_names, table, with_sni};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use preread_core::{Input, Output, PrereadConfig, RejectReason, SniPrereadCore};

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
