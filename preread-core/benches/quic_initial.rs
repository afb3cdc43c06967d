//! The cost of a QUIC flow's decision: its client Initials derived keys
//! for, header protection removed, opened (AES-128-GCM), their frames
//! walked, the CRYPTO stream reassembled, the ClientHello parsed, and the
//! route decided, by the step the worker runs (`QuicPrereadStep`), on a
//! 1,000-route table.
//!
//! - `quic_initial/chromium_2_initials`: Chrome's capture
//!   (`chromium_a_1.bin`, a 1,916-byte hello, the size a post-quantum key
//!   share gives) over 2 Initials of 1,200 bytes, as a client sends it;
//! - `quic_initial/curl_1_initial`: curl's capture (`curl_h2.bin`, 512
//!   bytes) with its SNI rewritten to a routed name, in 1 Initial.
//!
//! Throughput counts Initials, so criterion's `elem/s` is per Initial. The
//! goal (issue 31): at most 5 µs per Initial. Each case is decided once
//! and checked before it is timed; the timed loop includes building the
//! flow's step and dropping it, as the worker does.
//!
//! Run: `cargo bench -p preread-core --bench quic_initial` (results in
//! `doc/performance.md`).

use std::hint::black_box;
use std::time::{Duration, Instant};

mod tables;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use preread_core::PrereadConfig;
use preread_core::quic::{QuicListener, QuicNext, QuicPrereadStep, QuicRejectWith};
use preread_parser::quic::{Version, client_first_flight};
use tables::{CORPUS_ROUTES, corpus_dir, table, with_sni};

const DCID: [u8; 8] = [0x83, 0x94, 0xc8, 0xf0, 0x3e, 0x51, 0x57, 0x08];
const SCID: [u8; 8] = [1, 2, 3, 4, 5, 6, 7, 8];

/// The most a CRYPTO frame carries in one of a client's Initials.
const CHUNK: usize = 1100;

/// A corpus capture (one TLS record) with its SNI set to a routed name:
/// the client's first flight carrying its ClientHello.
fn flight(file: &str) -> Vec<Vec<u8>> {
    let record = std::fs::read(corpus_dir().join(file)).expect("a corpus capture");
    let record = with_sni(&record, "a.example.com");
    client_first_flight(Version::V1, &DCID, &SCID, &record[5..], CHUNK)
}

/// Feeds `datagrams` to a new step: whether it routed.
fn decide(listener: &QuicListener, datagrams: &[Vec<u8>], now: Instant) -> bool {
    let Some((first, rest)) = datagrams.split_first() else {
        return false;
    };
    let (mut step, mut actions) = QuicPrereadStep::first(listener, first, now);
    for datagram in rest {
        actions = step.datagram(listener, datagram, now);
    }
    matches!(actions.next, QuicNext::Connect(_))
}

fn bench(c: &mut Criterion) {
    let config = PrereadConfig::new(table(CORPUS_ROUTES, 1_000));
    let listener = QuicListener::new(config, QuicRejectWith::Close);
    let now = Instant::now();
    let mut group = c.benchmark_group("quic_initial");
    group.measurement_time(Duration::from_secs(5));
    for (name, file, initials) in [
        ("chromium_2_initials", "chromium_a_1.bin", 2),
        ("curl_1_initial", "curl_h2.bin", 1),
    ] {
        let datagrams = flight(file);
        assert_eq!(datagrams.len(), initials, "{name}: the Initials");
        assert!(decide(&listener, &datagrams, now), "{name}: routed");
        group.throughput(Throughput::Elements(initials as u64));
        group.bench_function(name, |b| {
            b.iter(|| decide(&listener, black_box(&datagrams), now));
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
