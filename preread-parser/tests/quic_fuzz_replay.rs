//! Replays the committed `fuzz/corpus/quic_initial` through the fuzz
//! target's own check function, so every input the fuzzer ever kept
//! (seeds, findings) is re-checked by a plain `cargo test` on stable.

#[allow(dead_code, unreachable_pub)]
#[path = "../../fuzz/src/checks_quic.rs"]
mod checks;

#[allow(dead_code, unreachable_pub)]
#[path = "../../testdata/fuzz_replay.rs"]
mod corpus;

use checks::QuicOutcome;

#[test]
fn quic_initial_corpus() {
    let outcomes = corpus::replay("quic_initial", 9, checks::check_quic_initial);
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
