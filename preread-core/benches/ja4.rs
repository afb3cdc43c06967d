//! What JA4 adds to parse plus decision, on the 1,000-route corpus table,
//! a fresh `SniPrereadCore` per connection fed the whole ClientHello:
//!
//! - `ja4/<file>/decide`: parse + decision, no `deny_ja4` list (the
//!   fingerprint is not computed: the baseline);
//! - `ja4/<file>/deny_other_a`: a one-entry listener `deny_ja4` whose `a`
//!   section is not the hello's (the spec's example): the decision walks
//!   the lists for the hello's `a` and stops there;
//! - `ja4/<file>/deny_same_a_warm`: an entry with the hello's `a` section
//!   but other hashes, so the decision fingerprints the hello in full,
//!   through the thread's cache, which holds it (a client seen before);
//! - `ja4/<file>/deny_same_a_cold`: the same, but the hello's first cipher
//!   changes on every connection (4,096 values in turn, against 256
//!   slots; the `a` section stays), so every fingerprint misses the cache:
//!   computed, then stored;
//! - `ja4/<file>/uncached`: `Ja4::of` alone on the hello, no cache.
//!
//! Run: `cargo bench -p preread-core --bench ja4` (doc/performance.md).
//! `examples/ja4_ratio.rs` runs the same cases in turn, burst after burst,
//! for ratios a loaded machine does not blur (keep the two in step).

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

/// A one-entry `deny_ja4` list that shares `ja4`'s `a` section only.
fn same_a(plain: &PrereadConfig, ja4: Ja4) -> PrereadConfig {
    let a = &ja4.as_str()[..10];
    let entry = Ja4::parse(&format!("{a}_000000000000_000000000000")).expect("a fingerprint");
    assert_ne!(entry, ja4);
    let mut config = plain.clone();
    config.deny_ja4 = DenyJa4::new([entry]);
    config
}

fn bench(c: &mut Criterion) {
    let plain = PrereadConfig::new(table(CORPUS_ROUTES, 1_000));
    let mut other_a = plain.clone();
    let spec = Ja4::parse("t13d1516h2_8daaf6152771_e5627efa2ab1").expect("a fingerprint");
    other_a.deny_ja4 = DenyJa4::new([spec]);
    let now = Instant::now();
    let mut group = c.benchmark_group("ja4");
    group.measurement_time(Duration::from_secs(3));
    for file in FILES {
        let window = std::fs::read(corpus_dir().join(format!("{file}.bin"))).expect("capture");
        let (core, _) = decide(&plain, &window, now);
        let ja4 = core.ja4(&window).expect("a parsed hello");
        assert_ne!(ja4.section_a(), spec.section_a(), "{file}");
        let warm = same_a(&plain, ja4);
        let mut changed = window.clone();
        let at = first_cipher_at(&window);
        changed[at..at + 2].copy_from_slice(&0xe001u16.to_be_bytes());
        let (core, _) = decide(&plain, &changed, now);
        let cold = same_a(&plain, core.ja4(&changed).expect("a parsed hello"));
        for config in [&plain, &other_a, &warm, &cold] {
            let (_, output) = decide(config, &window, now);
            assert!(matches!(output, Output::Routed(_)), "{file}: {output:?}");
        }
        group.bench_function(format!("{file}/decide"), |b| {
            b.iter(|| decide(black_box(&plain), black_box(&window), now));
        });
        group.bench_function(format!("{file}/deny_other_a"), |b| {
            b.iter(|| decide(black_box(&other_a), black_box(&window), now));
        });
        group.bench_function(format!("{file}/deny_same_a_warm"), |b| {
            b.iter(|| decide(black_box(&warm), black_box(&window), now));
        });
        let mut turn: u16 = 0;
        group.bench_function(format!("{file}/deny_same_a_cold"), |b| {
            b.iter(|| {
                turn = (turn + 1) % COLD_VARIANTS;
                // 0xe000.. holds one GREASE value, 0xeaea: one turn in
                // 4,096 has another `a` section and is not fingerprinted.
                changed[at..at + 2].copy_from_slice(&(0xe000 + turn).to_be_bytes());
                decide(black_box(&cold), black_box(&changed), now)
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
