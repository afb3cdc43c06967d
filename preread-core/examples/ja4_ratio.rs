//! What JA4 adds to parse plus decision, as ratios that a loaded machine
//! does not blur: the cases of `benches/ja4.rs` (keep the two in step),
//! run in turn, burst after burst, each case's best burst kept. Criterion
//! times one case after another, so load that comes and goes between
//! them lands in one and not the other; here every case sees the same
//! load, and the best burst is the one it least disturbed.
//!
//! Per capture (`chromium_a_1`, `curl_h2`, `openssl_tls13`), a fresh core
//! per connection on the 1,000-route corpus table:
//! - `decide`: parse + decision, no `deny_ja4` list (the baseline);
//! - `other_a`: a one-entry list of another `a` section (the prefilter);
//! - `hit`: an entry with the hello's `a` section, the fingerprint from
//!   the thread's cache;
//! - `miss`: the same, the first cipher changed on every connection
//!   (4,096 values, 256 slots): computed and stored each time.
//!
//! ```text
//! cargo run --release -p preread-core --example ja4_ratio [bursts]
//! ```

use std::hint::black_box;
use std::time::Instant;

#[path = "../benches/tables/mod.rs"]
mod tables;

use tables::{CORPUS_ROUTES, corpus_dir, table};

use preread_core::{DenyJa4, Input, Output, PrereadConfig, SniPrereadCore};
use preread_parser::tls::{Ja4, Parsed, parse_client_hello};

const FILES: [&str; 3] = ["chromium_a_1", "curl_h2", "openssl_tls13"];
const CASES: [&str; 4] = ["decide", "other_a", "hit", "miss"];
const PER_BURST: u32 = 300;
const COLD_VARIANTS: u16 = 4096;

fn decide(config: &PrereadConfig, window: &[u8], now: Instant) -> (SniPrereadCore, Output) {
    let mut core = SniPrereadCore::new();
    let output = core.handle_input(config, Input::Bytes { buf: window, now });
    (core, output)
}

fn first_cipher_at(window: &[u8]) -> usize {
    let mut scratch = Vec::new();
    match parse_client_hello(window, &mut scratch) {
        Ok(Parsed::Complete(hello)) => hello.cipher_suites.as_ptr().addr() - window.as_ptr().addr(),
        other => panic!("not a whole hello: {other:?}"),
    }
}

fn same_a(plain: &PrereadConfig, ja4: Ja4) -> PrereadConfig {
    let a = &ja4.as_str()[..10];
    let entry = Ja4::parse(&format!("{a}_000000000000_000000000000")).expect("a fingerprint");
    let mut config = plain.clone();
    config.deny_ja4 = DenyJa4::new([entry]);
    config
}

fn main() {
    let bursts: usize = std::env::args()
        .nth(1)
        .map_or(300, |n| n.parse().expect("a count of bursts"));
    let plain = PrereadConfig::new(table(CORPUS_ROUTES, 1_000));
    let mut other_a = plain.clone();
    let spec = Ja4::parse("t13d1516h2_8daaf6152771_e5627efa2ab1").expect("a fingerprint");
    other_a.deny_ja4 = DenyJa4::new([spec]);
    let now = Instant::now();
    for file in FILES {
        let window = std::fs::read(corpus_dir().join(format!("{file}.bin"))).expect("capture");
        let (core, _) = decide(&plain, &window, now);
        let warm = same_a(&plain, core.ja4(&window).expect("a parsed hello"));
        let mut changed = window.clone();
        let at = first_cipher_at(&window);
        changed[at..at + 2].copy_from_slice(&0xe001u16.to_be_bytes());
        let (core, _) = decide(&plain, &changed, now);
        let cold = same_a(&plain, core.ja4(&changed).expect("a parsed hello"));
        for config in [&plain, &other_a, &warm, &cold] {
            let (_, output) = decide(config, &window, now);
            assert!(matches!(output, Output::Routed(_)), "{file}: {output:?}");
        }
        let mut turn: u16 = 0;
        let mut best = [f64::MAX; CASES.len()];
        for _ in 0..bursts {
            for (case, best) in best.iter_mut().enumerate() {
                let start = Instant::now();
                for _ in 0..PER_BURST {
                    let (core, output) = match case {
                        0 => decide(black_box(&plain), black_box(&window), now),
                        1 => decide(black_box(&other_a), black_box(&window), now),
                        2 => decide(black_box(&warm), black_box(&window), now),
                        _ => {
                            turn = (turn + 1) % COLD_VARIANTS;
                            changed[at..at + 2].copy_from_slice(&(0xe000 + turn).to_be_bytes());
                            decide(black_box(&cold), black_box(&changed), now)
                        }
                    };
                    black_box((&core, &output));
                }
                *best = best.min(start.elapsed().as_nanos() as f64 / f64::from(PER_BURST));
            }
        }
        let base = best[0];
        let row: Vec<String> = CASES
            .iter()
            .zip(best)
            .skip(1)
            .map(|(case, ns)| format!("{case} {ns:.0} ns ({:+.1}%)", (ns / base - 1.0) * 100.0))
            .collect();
        println!("{file:14} decide {base:.0} ns | {}", row.join(" | "));
    }
}
