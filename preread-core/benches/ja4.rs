//! What JA4 adds to parse plus decision, on the 1,000-route corpus table,
//! a fresh `SniPrereadCore` per connection fed the whole ClientHello:
//!
//! - `ja4/<file>/decide`: parse + decision, no `deny_ja4` list (the
//!   fingerprint is not computed: the baseline);
//! - `ja4/<file>/deny_list_warm`: the same with a one-entry listener
//!   `deny_ja4` that does not match, so the decision fingerprints the
//!   hello, through the thread's cache, which holds it (a client seen
//!   before: the common case);
//! - `ja4/<file>/deny_list_cold`: the same, but one cipher of the hello
//!   changes on every connection (4,096 values in turn, against 256
//!   slots), so every fingerprint misses the cache: computed, then stored;
//! - `ja4/<file>/uncached`: `Ja4::of` alone on the hello, no cache.
//!
//! Run: `cargo bench -p preread-core --bench ja4` (doc/performance.md).

use std::hint::black_box;
use std::time::{Duration, Instant};

mod tables;

use tables::{CORPUS_ROUTES, corpus_dir, table};

use criterion::{Criterion, criterion_group, criterion_main};
use preread_core::{DenyJa4, Input, Output, PrereadConfig, SniPrereadCore};
use preread_parser::tls::{Ja4, Parsed, Transport, parse_client_hello};

const FILES: [&str; 3] = ["chromium_a_1", "curl_h2", "openssl_tls13"];

/// Distinct values the cold case gives the changed cipher, in turn.
const COLD_VARIANTS: u16 = 4096;

fn decide(config: &PrereadConfig, window: &[u8], now: Instant) -> (SniPrereadCore, Output) {
    let mut core = SniPrereadCore::new();
    let output = core.handle_input(config, Input::Bytes { buf: window, now });
    (core, output)
}

/// Where the hello's first cipher lies in `window` (one record).
fn first_cipher_at(window: &[u8]) -> usize {
    let mut scratch = Vec::new();
    match parse_client_hello(window, &mut scratch) {
        Ok(Parsed::Complete(hello)) => hello.cipher_suites.as_ptr().addr() - window.as_ptr().addr(),
        other => panic!("not a whole hello: {other:?}"),
    }
}

fn bench(c: &mut Criterion) {
    let plain = PrereadConfig::new(table(CORPUS_ROUTES, 1_000));
    let mut listed = plain.clone();
    let other = Ja4::parse("t13d1516h2_8daaf6152771_e5627efa2ab1").expect("a fingerprint");
    listed.deny_ja4 = DenyJa4::new([other]);
    let now = Instant::now();
    let mut group = c.benchmark_group("ja4");
    group.measurement_time(Duration::from_secs(3));
    for file in FILES {
        let window = std::fs::read(corpus_dir().join(format!("{file}.bin"))).expect("capture");
        for config in [&plain, &listed] {
            let (_, output) = decide(config, &window, now);
            assert!(matches!(output, Output::Routed(_)), "{file}: {output:?}");
        }
        group.bench_function(format!("{file}/decide"), |b| {
            b.iter(|| decide(black_box(&plain), black_box(&window), now));
        });
        group.bench_function(format!("{file}/deny_list_warm"), |b| {
            b.iter(|| decide(black_box(&listed), black_box(&window), now));
        });
        let mut changed = window.clone();
        let at = first_cipher_at(&window);
        let mut turn: u16 = 0;
        group.bench_function(format!("{file}/deny_list_cold"), |b| {
            b.iter(|| {
                turn = (turn + 1) % COLD_VARIANTS;
                // 0xe000.. holds one GREASE value, 0xeaea: a repeat, no more.
                changed[at..at + 2].copy_from_slice(&(0xe000 + turn).to_be_bytes());
                decide(black_box(&listed), black_box(&changed), now)
            });
        });
        let (core, _) = decide(&plain, &window, now);
        let input = core.ja4_input(&window).expect("a parsed hello");
        group.bench_function(format!("{file}/uncached"), |b| {
            b.iter(|| Ja4::of(black_box(input), Transport::Tcp));
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
