//! `cargo run -p sim --release -- --seeds N [--start S] [--directed K]
//! [--seed X] [--control-seed X] [--sabotage NAME]`: runs the simulation
//! (each random seed plays its data-plane scenario and its control-plane
//! scenario) and prints the summary table, or replays one seed.
//!
//! Owns: argument parsing and the exit code (1 when an invariant broke).
//! `--sabotage NAME` plants one of the coordinator faults of
//! [`ControlSabotage`] in every control-plane scenario: the run must then
//! fail.

use std::process::ExitCode;

use sim::control::{ControlSabotage, play_control};
use sim::{RunConfig, parse_seed, play, run, scenario};

const USAGE: &str = "usage: sim [--seeds N] [--start S] [--directed K] [--seed X] \
                     [--control-seed X] [--sabotage NAME]\n  sabotages: commit-early, \
                     skip-rollback, lose-answer, double-append, reorder-answers, miss-deadline";

fn replay(seed: u64) -> ExitCode {
    let sc = scenario(seed);
    println!("{}", sc.describe());
    match play(&sc) {
        Ok(played) => {
            for event in &played.trace {
                println!("  {event}");
            }
            println!("outcome: {:?}", played.outcome);
            ExitCode::SUCCESS
        }
        Err(failure) => {
            println!("{failure}");
            ExitCode::FAILURE
        }
    }
}

fn replay_control(seed: u64, sabotage: ControlSabotage) -> ExitCode {
    match play_control(seed, sabotage) {
        Ok(played) => {
            println!("coordinator seed {seed}: {played:?}");
            ExitCode::SUCCESS
        }
        Err(failure) => {
            println!("{failure}");
            ExitCode::FAILURE
        }
    }
}

fn main() -> ExitCode {
    let mut config = RunConfig {
        start: 0,
        seeds: 10_000,
        directed_per_target: 8,
        control: Some(ControlSabotage::None),
    };
    let mut replayed = None;
    let mut control_replayed = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let Some(text) = args.next() else {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        };
        if arg == "--sabotage" {
            match ControlSabotage::from_name(&text) {
                Some(sabotage) => config.control = Some(sabotage),
                None => {
                    eprintln!("no sabotage {text:?}\n{USAGE}");
                    return ExitCode::from(2);
                }
            }
            continue;
        }
        match (arg.as_str(), parse_seed(&text)) {
            ("--seeds", Some(v)) => config.seeds = v,
            ("--start", Some(v)) => config.start = v,
            ("--directed", Some(v)) => config.directed_per_target = v,
            ("--seed", Some(v)) => replayed = Some(v),
            ("--control-seed", Some(v)) => control_replayed = Some(v),
            _ => {
                eprintln!("{USAGE}");
                return ExitCode::from(2);
            }
        }
    }
    if let Some(seed) = replayed {
        return replay(seed);
    }
    if let Some(seed) = control_replayed {
        return replay_control(seed, config.control.unwrap_or(ControlSabotage::None));
    }
    let report = run(config);
    print!("{}", report.table());
    for failure in &report.failures {
        println!("{failure}");
    }
    for failure in &report.control_failures {
        println!("{failure}");
    }
    if report.failure_count > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
