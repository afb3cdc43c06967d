//! Replays the committed fuzz corpus (`fuzz/corpus/core`) through the core
//! fuzz target's own check function, so every input the fuzzer ever kept
//! (seeds, findings) is re-checked by a plain `cargo test` on stable.

#[allow(dead_code, unreachable_pub)]
#[path = "../../fuzz/src/checks_core.rs"]
mod checks;

// The checks draw their route pool from `crate::route_pool`, as in the fuzz
// crate; this crate uses none of its other tables.
#[allow(dead_code, unreachable_pub)]
#[path = "../../testdata/route_pool.rs"]
mod route_pool;

#[allow(dead_code, unreachable_pub)]
#[path = "../../testdata/fuzz_replay.rs"]
mod corpus;

use preread_core::{Output, RejectReason};

#[test]
fn core_corpus() {
    let decisions = corpus::replay("core", 40, checks::check_core);
    let routed = decisions
        .iter()
        .filter(|d| matches!(d, Output::Routed(r) if r.fallback.is_none()))
        .count();
    let fallback = decisions
        .iter()
        .filter(|d| matches!(d, Output::Routed(r) if r.fallback.is_some()))
        .count();
    let rejected = decisions
        .iter()
        .filter(|d| matches!(d, Output::Reject(_)))
        .count();
    let mut reasons: Vec<&str> = decisions
        .iter()
        .filter_map(|d| match d {
            Output::Reject(reason) => Some(reason.as_str()),
            _ => None,
        })
        .collect();
    reasons.sort_unstable();
    println!(
        "{} files: {routed} routed, {fallback} fallbacks, {rejected} rejected {reasons:?}",
        decisions.len()
    );
    assert!(
        routed >= 5 && fallback >= 1 && rejected >= 5,
        "the replay must reach matched routes, fallbacks and rejects: \
         {routed} routed, {fallback} fallbacks, {rejected} rejected"
    );
}

/// The empty input and a few tiny ones take the server-first and
/// empty-window paths, which the seeds (all non-empty streams) do not.
#[test]
fn tiny_inputs() {
    let mut reasons = Vec::new();
    for data in [
        &[][..],
        &[0],
        &[0x16],
        &[0xff, 0xff],
        &[0x16, 3, 1, 0, 0xd7],
    ] {
        if let Output::Reject(reason) = checks::check_core(data) {
            reasons.push(reason);
        }
    }
    for b in 0..=255u8 {
        let _ = checks::check_core(&[b]);
        let _ = checks::check_core(&[0x16, b]);
    }
    assert!(reasons.contains(&RejectReason::Fragmented), "{reasons:?}");
}
