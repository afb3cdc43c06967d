//! The control-plane simulation as a test: the shipped coordinator holds
//! every invariant on a bounded run of seeds, and each planted sabotage is
//! caught on those same seeds.
//!
//! `SIM_CONTROL_SEED=<n> cargo test -p sim --test control` replays seed
//! `n` alone.

use sim::control::{ControlSabotage, checks, play_control};
use sim::parse_seed;

const SEEDS: u64 = 2_000;

#[test]
fn the_coordinator_holds_every_invariant() {
    if let Ok(text) = std::env::var("SIM_CONTROL_SEED") {
        let seed = parse_seed(&text).unwrap_or_else(|| panic!("SIM_CONTROL_SEED={text}"));
        if let Err(failure) = play_control(seed, ControlSabotage::None) {
            panic!("{failure}");
        }
        return;
    }
    let mut failures = Vec::new();
    let mut committed = 0;
    let mut refused = 0;
    for seed in 0..SEEDS {
        match play_control(seed, ControlSabotage::None) {
            Ok(played) => {
                committed += played.committed;
                refused += played.refused;
            }
            Err(failure) => failures.push(failure),
        }
    }
    for failure in failures.iter().take(10) {
        println!("{failure}");
    }
    assert!(failures.is_empty(), "{} seed(s) failed", failures.len());
    assert!(
        committed > SEEDS as usize,
        "{committed} generations committed"
    );
    assert!(refused > 0, "no generation was refused");
}

/// Seeds each sabotage is played on.
const SABOTAGE_SEEDS: u64 = 120;

/// The invariants a sabotage may break first.
fn expected(sabotage: ControlSabotage) -> &'static [&'static str] {
    match sabotage {
        ControlSabotage::CommitEarly => &[checks::COMMIT_AFTER_ALL],
        // A worker the rollback skipped refuses every later generation
        // its copy cannot take; a refused merge of the route sources is
        // queued again at once, so a seed may never be quiet.
        ControlSabotage::SkipRollback => &[
            checks::QUIET_ROUTING,
            checks::REFUSED_NOWHERE,
            checks::DEADLINES,
        ],
        ControlSabotage::LoseAnswer | ControlSabotage::ReorderAnswers => &[checks::CLIENT_ORDER],
        ControlSabotage::DoubleAppend => &[checks::JOURNAL_ONCE],
        ControlSabotage::MissDeadline => &[checks::DEADLINES],
        ControlSabotage::None => &[],
    }
}

#[test]
fn every_planted_sabotage_is_caught() {
    for seed in 0..SABOTAGE_SEEDS {
        if let Err(failure) = play_control(seed, ControlSabotage::None) {
            panic!("without a sabotage: {failure}");
        }
    }
    for sabotage in ControlSabotage::ALL {
        let mut caught = 0;
        let mut fired_unseen = Vec::new();
        for seed in 0..SABOTAGE_SEEDS {
            match play_control(seed, sabotage) {
                Ok(played) if played.fired => fired_unseen.push(seed),
                Ok(_) => {}
                Err(failure) => {
                    caught += 1;
                    assert!(
                        expected(sabotage).contains(&failure.broken.invariant),
                        "{} caught by another check: {failure}",
                        sabotage.name()
                    );
                }
            }
        }
        println!(
            "{}: caught on {caught} of {SABOTAGE_SEEDS} seeds; applied but not seen on {:?}",
            sabotage.name(),
            fired_unseen
        );
        assert!(caught > 0, "{} is never caught", sabotage.name());
        assert!(
            fired_unseen.is_empty(),
            "{} applied but not caught on seeds {fired_unseen:?}",
            sabotage.name()
        );
    }
}
