//! What JA4 adds to parse plus decision, as ratios that a loaded machine
//! does not blur: the cases of `benches/ja4.rs` (both take them from
//! `benches/ja4_cases`),
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

#[path = "../benches/ja4_cases/mod.rs"]
mod ja4_cases;
#[path = "../benches/tables/mod.rs"]
mod tables;

use ja4_cases::{Cases, FILES, decide};

const CASES: [&str; 4] = ["decide", "other_a", "hit", "miss"];
const PER_BURST: u32 = 300;

fn main() {
    let bursts: usize = std::env::args()
        .nth(1)
        .map_or(300, |n| n.parse().expect("a count of bursts"));
    let now = Instant::now();
    for file in FILES {
        let mut cases = Cases::of(file, now);
        let mut turn: u16 = 0;
        let mut best = [f64::MAX; CASES.len()];
        for _ in 0..bursts {
            for (case, best) in best.iter_mut().enumerate() {
                let start = Instant::now();
                for _ in 0..PER_BURST {
                    let (core, output) = match case {
                        0 => decide(black_box(&cases.plain), black_box(&cases.window), now),
                        1 => decide(black_box(&cases.other_a), black_box(&cases.window), now),
                        2 => decide(black_box(&cases.warm), black_box(&cases.window), now),
                        _ => {
                            cases.vary(&mut turn);
                            decide(black_box(&cases.cold), black_box(&cases.changed), now)
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
