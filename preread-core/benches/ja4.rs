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
//! for ratios a loaded machine does not blur; both take their cases from
//! `benches/ja4_cases`.

use std::hint::black_box;
use std::time::{Duration, Instant};

mod ja4_cases;
mod tables;

use ja4_cases::{Cases, FILES, decide};

use criterion::{Criterion, criterion_group, criterion_main};
use preread_parser::tls::{Ja4, Transport};

fn bench(c: &mut Criterion) {
    let now = Instant::now();
    let mut group = c.benchmark_group("ja4");
    group.measurement_time(Duration::from_secs(3));
    for file in FILES {
        let mut cases = Cases::of(file, now);
        let window = cases.window.clone();
        group.bench_function(format!("{file}/decide"), |b| {
            b.iter(|| decide(black_box(&cases.plain), black_box(&window), now));
        });
        group.bench_function(format!("{file}/deny_other_a"), |b| {
            b.iter(|| decide(black_box(&cases.other_a), black_box(&window), now));
        });
        group.bench_function(format!("{file}/deny_same_a_warm"), |b| {
            b.iter(|| decide(black_box(&cases.warm), black_box(&window), now));
        });
        let mut turn: u16 = 0;
        group.bench_function(format!("{file}/deny_same_a_cold"), |b| {
            b.iter(|| {
                cases.vary(&mut turn);
                decide(black_box(&cases.cold), black_box(&cases.changed), now)
            });
        });
        let (core, _) = decide(&cases.plain, &window, now);
        let input = core.ja4_input(&window).expect("a parsed hello");
        group.bench_function(format!("{file}/uncached"), |b| {
            b.iter(|| Ja4::of(black_box(input), Transport::Tcp));
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
