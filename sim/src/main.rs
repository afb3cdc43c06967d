//! `cargo run -p sim --release -- --seeds N [--start S] [--directed K]
//! [--seed X]`: runs the simulation and prints the summary table, or
//! replays one seed with its trace.
//!
//! Owns: argument parsing and the exit code (1 when an invariant broke).

use std::process::ExitCode;

use sim::{RunConfig, parse_seed, play, run, scenario};

const USAGE: &str = "usage: sim [--seeds N] [--start S] [--directed K] [--seed X]";

fn main() -> ExitCode {
    let mut config = RunConfig {
        start: 0,
        seeds: 10_000,
        directed_per_target: 8,
    };
    let mut replay = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let value = args.next().and_then(|v| parse_seed(&v));
        match (arg.as_str(), value) {
            ("--seeds", Some(v)) => config.seeds = v,
            ("--start", Some(v)) => config.start = v,
            ("--directed", Some(v)) => config.directed_per_target = v,
            ("--seed", Some(v)) => replay = Some(v),
            _ => {
                eprintln!("{USAGE}");
                return ExitCode::from(2);
            }
        }
    }
    if let Some(seed) = replay {
        let sc = scenario(seed);
        println!("{}", sc.describe());
        return match play(&sc) {
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
        };
    }
    let report = run(config);
    print!("{}", report.table());
    for failure in &report.failures {
        println!("{failure}");
    }
    if report.failure_count > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
