//! Hostile framing: the CPU of one connection whose ClientHello comes in
//! 1-byte records, against the same hello in one record, through the core
//! as the worker feeds it (a fresh `SniPrereadCore` per connection, the
//! whole window after every read, until the decision).
//!
//! The hello is `chromium_a_1.bin` grown with a padding extension to a
//! handshake message of 10,922 bytes: in 1-byte records (6 bytes each on
//! the wire) it fills 65,532 bytes of the default 64 KiB window; in one
//! record it is 10,927 bytes. Both route to `a.example.com`.
//!
//! Group `hostile_framing`, one case per framing and read pattern:
//! - `<framing>/reads_of_6`: every read adds 6 bytes (for the 1-byte
//!   records, one record per read: 10,922 reads; 1,822 for the one record);
//! - `<framing>/reads_of_1448`: reads of one TCP segment's payload;
//! - `<framing>/one_read`: the whole window in one read.
//!
//! Group `hostile_framing_reparse`: the parser alone, with no cursor
//! (`parse_client_hello_within` from byte 0 on every read, what each read
//! cost before the core kept one), on the 1-byte records in 1,448-byte
//! reads, against `parse_client_hello_resuming` on the same reads.
//!
//! Every case is decided once and checked before it is timed.
//!
//! Run: `cargo bench -p preread-core --bench framing` (results in
//! `doc/performance.md`, "Hostile framing").

use std::hint::black_box;
use std::time::{Duration, Instant};

mod tables;

use tables::{CORPUS_ROUTES, corpus_dir, table};

use criterion::{Criterion, criterion_group, criterion_main};
use preread_core::{Input, Output, PrereadConfig, SniPrereadCore};
use preread_parser::tls::{
    FrameCursor, Parsed, parse_client_hello_resuming, parse_client_hello_within,
};

/// The handshake message length: 6 bytes a record fill 65,532 bytes.
const MESSAGE_LEN: usize = 65_536 / 6;
/// The padding extension (RFC 7685).
const PADDING: u16 = 0x0015;

/// The Chrome capture's handshake message, padded to [`MESSAGE_LEN`].
fn padded_message() -> Vec<u8> {
    let capture = std::fs::read(corpus_dir().join("chromium_a_1.bin")).expect("read capture");
    let record_len = usize::from(u16::from_be_bytes([capture[3], capture[4]]));
    let mut message = capture[5..5 + record_len].to_vec();
    let u16_at = |m: &[u8], at: usize| usize::from(u16::from_be_bytes([m[at], m[at + 1]]));
    let mut at = 4 + 2 + 32;
    at += 1 + usize::from(message[at]);
    at += 2 + u16_at(&message, at);
    at += 1 + usize::from(message[at]);
    let pad = MESSAGE_LEN - message.len() - 4;
    let extensions = u16_at(&message, at) + 4 + pad;
    message[at..at + 2].copy_from_slice(&(extensions as u16).to_be_bytes());
    message.extend_from_slice(&PADDING.to_be_bytes());
    message.extend_from_slice(&(pad as u16).to_be_bytes());
    message.resize(MESSAGE_LEN, 0);
    let body = (MESSAGE_LEN - 4) as u32;
    message[1..4].copy_from_slice(&body.to_be_bytes()[1..]);
    message
}

/// `message` in records of `size` bytes.
fn framed(message: &[u8], size: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for part in message.chunks(size) {
        out.extend_from_slice(&[22, 3, 1]);
        out.extend_from_slice(&(part.len() as u16).to_be_bytes());
        out.extend_from_slice(part);
    }
    out
}

/// One connection: a fresh core, the window grown by `read` bytes a call.
fn connection(config: &PrereadConfig, window: &[u8], read: usize, now: Instant) -> Output {
    let mut core = SniPrereadCore::new();
    let mut len = 0;
    loop {
        len = (len + read).min(window.len());
        let output = core.handle_input(
            config,
            Input::Bytes {
                buf: &window[..len],
                now,
            },
        );
        if output.is_terminal() || len == window.len() {
            return output;
        }
    }
}

fn hostile_framing(c: &mut Criterion) {
    let message = padded_message();
    let framings = [
        ("one_record", framed(&message, MESSAGE_LEN)),
        ("one_byte_records", framed(&message, 1)),
    ];
    assert_eq!(framings[0].1.len(), 10_927);
    assert_eq!(framings[1].1.len(), 65_532);
    let config = PrereadConfig::new(table(CORPUS_ROUTES, 1_000));
    let now = Instant::now();
    let mut group = c.benchmark_group("hostile_framing");
    group.sample_size(20);
    for (name, window) in &framings {
        for (reads, size) in [
            ("reads_of_6", 6),
            ("reads_of_1448", 1_448),
            ("one_read", window.len()),
        ] {
            match connection(&config, window, size, now) {
                Output::Routed(route) => assert_eq!(
                    route.sni.map(|s| s.as_str().to_owned()).as_deref(),
                    Some("a.example.com"),
                    "{name}/{reads}"
                ),
                other => panic!("{name}/{reads}: {other:?}"),
            }
            group.bench_function(format!("{name}/{reads}"), |b| {
                b.iter(|| black_box(connection(&config, black_box(window), size, now)));
            });
        }
    }
    group.finish();
}

/// The parser on `window` grown by `read` bytes a call, resuming or not:
/// the records of the hello it answers with.
fn parse_reads(window: &[u8], read: usize, resume: bool) -> usize {
    let mut cursor = FrameCursor::default();
    let mut scratch = Vec::new();
    let mut len = 0;
    loop {
        len = (len + read).min(window.len());
        let prefix = &window[..len];
        let parsed = if resume {
            parse_client_hello_resuming(prefix, 65_536, &mut cursor, &mut scratch)
        } else {
            parse_client_hello_within(prefix, 65_536, &mut scratch)
        };
        match parsed {
            Ok(Parsed::Complete(hello)) => return hello.records,
            Ok(Parsed::Incomplete(_)) if len < window.len() => {}
            other => panic!("{other:?}"),
        }
    }
}

fn reparse(c: &mut Criterion) {
    let window = framed(&padded_message(), 1);
    let mut group = c.benchmark_group("hostile_framing_reparse");
    group.sample_size(10);
    for (name, resume) in [("from_byte_0", false), ("resuming", true)] {
        assert_eq!(parse_reads(&window, 1_448, resume), MESSAGE_LEN);
        group.bench_function(format!("{name}/reads_of_1448"), |b| {
            b.iter(|| black_box(parse_reads(black_box(&window), 1_448, resume)));
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = hostile_framing, reparse
}
criterion_main!(benches);
