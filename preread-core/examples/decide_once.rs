//! One routing decision, repeated, for callgrind; and the heap allocations
//! of one decision, counted by a global allocator.
//!
//! Builds the same tables and hellos as `benches/decision.rs` (keep the two
//! in step): `<size>:<shape>` is the Chrome capture with its SNI rewritten
//! for the shape (`exact`, `one-label`, `any-depth`, `unmatched`) on a table
//! of `size` frontends; `<size>:exact-rotating` writes the next exact name
//! of the table into the capture before each decision; `corpus:<file>` is a
//! routed real corpus hello on the 1,000-route corpus table;
//! `ja4-other:<file>` and `ja4-hit:<file>` the same with a `deny_ja4`
//! entry of another `a` section, or of the hello's own `a` section (its
//! fingerprint from the thread's cache), as in `benches/ja4.rs`;
//! `ja4-section:<file>` the `ja4-other` list with the decisions run on a
//! thread of their own, whose cache never held the whole fingerprint: it
//! answers from a slot that holds the hello's `a` section alone (as in a
//! worker with a blocklist and no access log).
//!
//! ```text
//! cargo build --release -p preread-core --example decide_once
//! E=target/release/examples/decide_once
//! $E cases                      # every case name
//! $E allocs                     # allocations per decision, every case
//! $E time [substring]           # ns per decision, best of 200 short bursts
//! valgrind --tool=callgrind $E run corpus:curl_h2 0      # setup only
//! valgrind --tool=callgrind $E run corpus:curl_h2 10000  # setup + 10,000 decisions
//! ```
//!
//! Instructions per decision: (Ir of the second run − Ir of the first) /
//! 10,000. `--toggle-collect='*decide_loop*'` (`'*decide_rotating*'` for
//! `exact-rotating`) restricts the profile to the decisions for
//! `callgrind_annotate`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
use std::time::Instant;

#[path = "../benches/ja4_cases/mod.rs"]
mod ja4_cases;
#[path = "../benches/tables/mod.rs"]
mod tables;

use tables::{CORPUS_ROUTES, SHAPE_ROUTES, corpus_dir, rotating_names, table, with_sni};

use preread_core::{Input, Output, PrereadConfig, RejectReason, SniPrereadCore};

/// Counts allocations (and records their sizes) while `RECORDING` is set.
struct Counting;

static RECORDING: AtomicBool = AtomicBool::new(false);
static ALLOCS: AtomicUsize = AtomicUsize::new(0);
static FREES: AtomicUsize = AtomicUsize::new(0);
static BYTES: AtomicUsize = AtomicUsize::new(0);
const RECORDED: usize = 16;
static SIZES: [AtomicUsize; RECORDED] = [const { AtomicUsize::new(0) }; RECORDED];

impl Counting {
    fn note_alloc(size: usize) {
        if RECORDING.load(Relaxed) {
            let n = ALLOCS.fetch_add(1, Relaxed);
            BYTES.fetch_add(size, Relaxed);
            if let Some(slot) = SIZES.get(n) {
                slot.store(size, Relaxed);
            }
        }
    }
}

// SAFETY: every call is forwarded unchanged to `System`; the wrapper only
// updates atomics and never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        Self::note_alloc(layout.size());
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        Self::note_alloc(layout.size());
        // SAFETY: the caller upholds `GlobalAlloc::alloc_zeroed`'s contract.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        Self::note_alloc(new_size);
        // SAFETY: the caller upholds `GlobalAlloc::realloc`'s contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if RECORDING.load(Relaxed) {
            FREES.fetch_add(1, Relaxed);
        }
        // SAFETY: the caller upholds `GlobalAlloc::dealloc`'s contract.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const SIZES_OF_TABLES: [usize; 3] = [10, 1_000, 100_000];

/// `(name, SNI written into the Chrome capture, pattern that must match)`.
const SHAPES: [(&str, &str, Option<&str>); 4] = [
    ("exact", "a.example.com", Some("a.example.com")),
    (
        "one-label",
        "x.wild.example.com",
        Some("*.wild.example.com"),
    ),
    (
        "any-depth",
        "x.y.deep.example.com",
        Some("**.deep.example.com"),
    ),
    ("unmatched", "a.example.org", None),
];

/// The routed real corpus hellos: `(file stem, expected normalized SNI)`.
fn corpus_names() -> Vec<(String, String)> {
    let manifest =
        std::fs::read_to_string(corpus_dir().join("manifest.jsonl")).expect("read manifest");
    manifest
        .lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| serde_json::from_str::<serde_json::Value>(line).expect("manifest line"))
        .filter(|entry| entry["kind"] == "real" && entry["expected"] == "routed")
        .map(|entry| {
            let file = entry["file"].as_str().expect("file");
            let sni = entry["sni_normalized"].as_str().expect("SNI");
            (file.trim_end_matches(".bin").to_owned(), sni.to_owned())
        })
        .collect()
}

fn cases() -> Vec<String> {
    let mut cases = Vec::new();
    for size in SIZES_OF_TABLES {
        for (shape, _, _) in SHAPES {
            cases.push(format!("{size}:{shape}"));
        }
        cases.push(format!("{size}:exact-rotating"));
    }
    for (file, _) in corpus_names() {
        cases.push(format!("corpus:{file}"));
    }
    for file in ja4_cases::FILES {
        for kind in ["ja4-other", "ja4-hit", "ja4-section"] {
            cases.push(format!("{kind}:{file}"));
        }
    }
    cases
}

/// What `case` decides on: one hello, and for `exact-rotating` the names
/// written in turn into it at `at`.
struct Case {
    config: PrereadConfig,
    window: Vec<u8>,
    /// `(at, len, names)`: `names` holds names of `len` bytes back to back.
    rotate: Option<(usize, usize, Vec<u8>)>,
    /// The next name to write, so that successive runs go on through them.
    next: usize,
    /// Decide on a new thread (a fresh JA4 cache), after one decision
    /// there that fills it.
    fresh_thread: bool,
}

/// The config and hello of `case`, checked with one decision (one per
/// name for `exact-rotating`).
fn setup(case: &str) -> Case {
    let (kind, name) = case.split_once(':').expect("case is kind:name");
    let now = Instant::now();
    if let Some(list) = kind.strip_prefix("ja4-") {
        let cases = ja4_cases::Cases::of(name, now);
        let config = match list {
            "other" | "section" => cases.other_a,
            "hit" => cases.warm,
            _ => panic!("{case}: ja4-other, ja4-hit or ja4-section"),
        };
        return Case {
            config,
            window: cases.window,
            rotate: None,
            next: 0,
            fresh_thread: list == "section",
        };
    }
    if kind == "corpus" {
        let (_, sni) = corpus_names()
            .into_iter()
            .find(|(file, _)| file == name)
            .expect("a routed real corpus file");
        let window = std::fs::read(corpus_dir().join(format!("{name}.bin"))).expect("read");
        let config = PrereadConfig::new(table(CORPUS_ROUTES, 1_000));
        match decide(&config, &window, now) {
            Output::Routed(route) => {
                assert_eq!(route.sni.map(|s| s.as_str().to_owned()), Some(sni));
            }
            other => panic!("{case}: {other:?}"),
        }
        return Case {
            config,
            window,
            rotate: None,
            next: 0,
            fresh_thread: false,
        };
    }
    let size: usize = kind.parse().expect("table size");
    let chrome = std::fs::read(corpus_dir().join("chromium_a_1.bin")).expect("read capture");
    let config = PrereadConfig::new(table(SHAPE_ROUTES, size));
    if name == "exact-rotating" {
        let (names, len) = rotating_names(size);
        let mut window = with_sni(&chrome, std::str::from_utf8(&names[..len]).expect("ASCII"));
        let at = window
            .windows(len)
            .position(|w| w == &names[..len])
            .expect("the name is in the hello");
        for name in names.chunks_exact(len) {
            window[at..at + len].copy_from_slice(name);
            match decide(&config, &window, now) {
                Output::Routed(route) => {
                    let got = route.matched_sni.as_ref().map(|p| p.to_string());
                    assert_eq!(got.as_deref().map(str::as_bytes), Some(name), "{case}");
                }
                other => panic!("{case}: {other:?}"),
            }
        }
        return Case {
            config,
            window,
            rotate: Some((at, len, names)),
            next: 0,
            fresh_thread: false,
        };
    }
    let (_, sni, matched) = SHAPES
        .into_iter()
        .find(|(shape, _, _)| *shape == name)
        .expect("a shape");
    let window = with_sni(&chrome, sni);
    match (decide(&config, &window, now), matched) {
        (Output::Routed(route), Some(pattern)) => {
            let got = route.matched_sni.as_ref().map(|p| p.to_string());
            assert_eq!(got.as_deref(), Some(pattern), "{case}");
        }
        (Output::Reject(RejectReason::SniUnmatched), None) => {}
        (other, _) => panic!("{case}: {other:?}"),
    }
    Case {
        config,
        window,
        rotate: None,
        next: 0,
        fresh_thread: false,
    }
}

/// One connection: a fresh core, the whole hello in one input.
#[inline]
fn decide(config: &PrereadConfig, window: &[u8], now: Instant) -> Output {
    let mut core = SniPrereadCore::new();
    core.handle_input(config, Input::Bytes { buf: window, now })
}

/// The decisions callgrind measures (`--toggle-collect` on this function).
#[inline(never)]
fn decide_loop(config: &PrereadConfig, window: &[u8], now: Instant, n: u64) {
    for _ in 0..n {
        let _ = black_box(decide(config, black_box(window), now));
    }
}

/// `n` decisions, each after writing the next of `names` into `window`,
/// starting with name `next`; returns the name to start from next time.
#[inline(never)]
fn decide_rotating(
    config: &PrereadConfig,
    window: &mut [u8],
    (at, len, names): (usize, usize, &[u8]),
    mut next: usize,
    now: Instant,
    n: u64,
) -> usize {
    let count = names.len() / len;
    for _ in 0..n {
        window[at..at + len].copy_from_slice(&names[next * len..][..len]);
        let _ = black_box(decide(config, black_box(&*window), now));
        next = if next + 1 == count { 0 } else { next + 1 };
    }
    next
}

fn decide_n(case: &mut Case, now: Instant, n: u64) {
    match &case.rotate {
        None if case.fresh_thread => std::thread::scope(|scope| {
            scope.spawn(|| {
                let _ = black_box(decide(&case.config, &case.window, now));
                decide_loop(&case.config, &case.window, now, n);
            });
        }),
        None => decide_loop(&case.config, &case.window, now, n),
        Some((at, len, names)) => {
            let rotate = (*at, *len, names.as_slice());
            case.next = decide_rotating(&case.config, &mut case.window, rotate, case.next, now, n);
        }
    }
}

/// Allocations, frees and bytes of `n` decisions, and the sizes of the
/// first decision's allocations.
fn count(config: &PrereadConfig, window: &[u8], now: Instant, n: usize) -> String {
    ALLOCS.store(0, Relaxed);
    FREES.store(0, Relaxed);
    BYTES.store(0, Relaxed);
    RECORDING.store(true, Relaxed);
    for _ in 0..n {
        let _ = black_box(decide(config, black_box(window), now));
    }
    RECORDING.store(false, Relaxed);
    let allocs = ALLOCS.load(Relaxed);
    let per = allocs / n;
    let sizes: Vec<String> = SIZES
        .iter()
        .take(per.min(RECORDED))
        .map(|s| s.load(Relaxed).to_string())
        .collect();
    format!(
        "allocs/decision {:.2}  frees/decision {:.2}  bytes/decision {:.1}  sizes of one decision [{}]",
        allocs as f64 / n as f64,
        FREES.load(Relaxed) as f64 / n as f64,
        BYTES.load(Relaxed) as f64 / n as f64,
        sizes.join(", "),
    )
}

/// Nanoseconds per decision: the fastest and the median of `bursts` bursts
/// of `per_burst` decisions. On a machine shared with other work the
/// fastest burst is the one least disturbed by preemption.
fn time(case: &mut Case, bursts: usize, per_burst: u64) -> (f64, f64) {
    let now = Instant::now();
    let mut ns: Vec<f64> = (0..bursts)
        .map(|_| {
            let start = Instant::now();
            decide_n(case, now, per_burst);
            start.elapsed().as_nanos() as f64 / per_burst as f64
        })
        .collect();
    ns.sort_by(f64::total_cmp);
    (ns[0], ns[ns.len() / 2])
}

const USAGE: &str = "\
usage: decide_once cases | allocs | time [SUBSTRING...] | run CASE ITERATIONS

  cases                  every case name
  allocs                 heap allocations per decision, every case
  time [SUBSTRING...]    ns per decision (best and median of 200 short bursts),
                         for the cases whose name holds every SUBSTRING
  run CASE ITERATIONS    set CASE up, then decide ITERATIONS times (for
                         callgrind: the difference of two runs is the cost)

Build it with --release: a debug build measures the debug build.";

/// What the command line asks for.
#[derive(Debug, PartialEq)]
enum Invocation<'a> {
    Help,
    Cases,
    Allocs,
    Time(&'a [&'a str]),
    Run(&'a str, u64),
    /// A mistake, said in a line above the usage.
    Usage(String),
}

fn invocation<'a>(args: &'a [&'a str]) -> Invocation<'a> {
    if args.iter().any(|a| *a == "-h" || *a == "--help") {
        return Invocation::Help;
    }
    match args {
        ["cases"] => Invocation::Cases,
        ["allocs"] => Invocation::Allocs,
        ["time", filter @ ..] => Invocation::Time(filter),
        ["run", case, n] => match n.parse() {
            Ok(n) => Invocation::Run(case, n),
            Err(_) => Invocation::Usage(format!("{n:?} is not an iteration count")),
        },
        [] => Invocation::Usage("no subcommand given".to_owned()),
        [first, ..] => Invocation::Usage(format!(
            "{first:?} with these arguments is not a subcommand"
        )),
    }
}

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    match invocation(&args) {
        Invocation::Help => println!("{USAGE}"),
        Invocation::Cases => {
            for case in cases() {
                println!("{case}");
            }
        }
        Invocation::Allocs => {
            for case in cases() {
                if case.starts_with("100000:") || case.ends_with("-rotating") {
                    continue; // the decisions of 1000:exact, with a slower setup
                }
                let Case { config, window, .. } = setup(&case);
                let counted = count(&config, &window, Instant::now(), 1000);
                println!("{case:<45} {counted}");
            }
        }
        Invocation::Time(filter) => {
            println!("{:<45} {:>9} {:>9}", "case", "best ns", "median ns");
            let cases = cases().into_iter();
            for case in cases.filter(|c| filter.iter().all(|f| c.contains(f))) {
                let (best, median) = time(&mut setup(&case), 200, 2_000);
                println!("{case:<45} {best:>9.1} {median:>9.1}");
            }
        }
        Invocation::Run(case, n) => decide_n(&mut setup(case), Instant::now(), n),
        Invocation::Usage(mistake) => {
            eprintln!("decide_once: {mistake}\n{USAGE}");
            return std::process::ExitCode::from(2);
        }
    }
    std::process::ExitCode::SUCCESS
}

/// `cargo test` runs these (`test = true` in Cargo.toml).
#[cfg(test)]
mod tests {
    use super::{Invocation, USAGE, invocation};

    #[test]
    fn help_and_mistakes_print_the_usage() {
        assert_eq!(invocation(&["--help"]), Invocation::Help);
        assert_eq!(invocation(&["time", "-h"]), Invocation::Help);
        assert_eq!(invocation(&["cases"]), Invocation::Cases);
        assert_eq!(
            invocation(&["time", "corpus", "h2"]),
            Invocation::Time(&["corpus", "h2"])
        );
        assert_eq!(
            invocation(&["run", "corpus:curl_h2", "10"]),
            Invocation::Run("corpus:curl_h2", 10)
        );
        for wrong in [
            &["run", "corpus:curl_h2", "many"][..],
            &[],
            &["cases", "extra"],
        ] {
            assert!(
                matches!(invocation(wrong), Invocation::Usage(_)),
                "{wrong:?}"
            );
        }
        assert!(USAGE.starts_with("usage: decide_once "));
    }
}
