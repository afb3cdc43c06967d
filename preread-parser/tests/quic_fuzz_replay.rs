//! Replays the committed `fuzz/corpus/quic_initial` through the fuzz
//! target's own check function, so every input the fuzzer ever kept
//! (seeds, findings) is re-checked by a plain `cargo test` on stable.

#[allow(dead_code, unreachable_pub)]
#[path = "../../fuzz/src/checks_quic.rs"]
mod checks;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;

use checks::QuicOutcome;

#[test]
fn quic_initial_corpus() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/quic_initial");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("corpus entry").path())
        .filter(|path| path.is_file())
        .collect();
    files.sort();
    assert!(
        files.len() >= 9,
        "fuzz/corpus/quic_initial holds {} files",
        files.len()
    );
    let outcomes: Vec<QuicOutcome> = files
        .iter()
        .map(|path| {
            let bytes = std::fs::read(path).expect("corpus file");
            catch_unwind(AssertUnwindSafe(|| checks::check_quic_initial(&bytes)))
                .unwrap_or_else(|_| panic!("{} breaks an invariant", path.display()))
        })
        .collect();
    // The seeds reach every outcome: a corpus that stops at the AEAD
    // would test nothing past it.
    for outcome in [
        QuicOutcome::Complete,
        QuicOutcome::Incomplete,
        QuicOutcome::Refused,
        QuicOutcome::BadHello,
    ] {
        assert!(outcomes.contains(&outcome), "no seed is {outcome:?}");
    }
}

#[test]
fn tiny_inputs() {
    for data in [
        &[][..],
        &[0],
        &[1],
        &[0, 0],
        &[0, 0, 0, 0, 5, 6],
        &[1, 0, 3, 0x40, 1, 2],
    ] {
        checks::check_quic_initial(data);
    }
}
