//! What JA4 adds to parse plus decision, on the 1,000-route corpus table,
//! a fresh `SniPrereadCore` per connection fed the whole ClientHello:
//!
//! - `ja4/<file>/decide`: parse + decision, no `deny_ja4` list (the
//!   fingerprint is not computed: the baseline);
//! - `ja4/<file>/decide_deny_list`: the same with a one-entry listener
//!   `deny_ja4` that does not match, so the decision computes the
//!   fingerprint and routes;
//! - `ja4/<file>/after_decision`: the fingerprint alone, from a decided
//!   core (what the access log adds after the decision, off its path).
//!
//! Run: `cargo bench -p preread-core --bench ja4` (doc/performance.md).

use std::hint::black_box;
use std::time::{Duration, Instant};

mod tables;

use tables::{CORPUS_ROUTES, corpus_dir, table};

use criterion::{Criterion, criterion_group, criterion_main};
use preread_core::{DenyJa4, Input, Output, PrereadConfig, SniPrereadCore};
use preread_parser::tls::Ja4;

const FILES: [&str; 3] = ["chromium_a_1", "curl_h2", "openssl_tls13"];

fn decide(config: &PrereadConfig, window: &[u8], now: Instant) -> (SniPrereadCore, Output) {
    let mut core = SniPrereadCore::new();
    let output = core.handle_input(config, Input::Bytes { buf: window, now });
    (core, output)
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
        let window = window.as_slice();
        for config in [&plain, &listed] {
            let (_, output) = decide(config, window, now);
            assert!(matches!(output, Output::Routed(_)), "{file}: {output:?}");
        }
        group.bench_function(format!("{file}/decide"), |b| {
            b.iter(|| decide(black_box(&plain), black_box(window), now));
        });
        group.bench_function(format!("{file}/decide_deny_list"), |b| {
            b.iter(|| decide(black_box(&listed), black_box(window), now));
        });
        let (core, _) = decide(&plain, window, now);
        assert!(core.ja4(window).is_some());
        group.bench_function(format!("{file}/after_decision"), |b| {
            b.iter(|| black_box(&core).ja4(black_box(window)));
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
