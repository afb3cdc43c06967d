//! Running many scenarios and summing up what they did.
//!
//! Owns: [`run`] (every directed target first, then the random seeds),
//! [`Tally`] (outcomes per reason), [`Report`] and its summary table. Must
//! never: stop at the first failure (all of them are collected, up to a
//! bound) or let a failure go unreported.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use preread_core::{FallbackReason, RejectReason};

use crate::control::{ControlFailure, ControlSabotage, ControlTally, play_control};
use crate::driver::{DecidedBy, Failure, Outcome, play};
use crate::scenario::{Target, directed_seed, scenario};

/// How many failures a report keeps in full.
const KEPT_FAILURES: usize = 20;

/// Outcomes per reason.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tally {
    /// Routed by a frontend.
    pub routed: u64,
    /// Refused, per [`RejectReason::ALL`] position.
    pub rejected: [u64; RejectReason::ALL.len()],
    /// Sent to the default cluster, per [`FallbackReason::ALL`] position.
    pub fallback: [u64; FallbackReason::ALL.len()],
    /// Closed before the client spoke (not counted by the worker).
    pub silent: u64,
    /// Refused by the step: the client did not speak in time.
    pub silent_timeout: u64,
}

impl Tally {
    /// Counts one outcome.
    pub fn add(&mut self, outcome: &Outcome) {
        match outcome {
            Outcome::Routed { fallback: None } => self.routed += 1,
            Outcome::Routed { fallback: Some(f) } => {
                let i = FallbackReason::ALL.iter().position(|x| x == f).unwrap_or(0);
                self.fallback[i] += 1;
            }
            Outcome::Rejected(r) => {
                let i = RejectReason::ALL.iter().position(|x| x == r).unwrap_or(0);
                self.rejected[i] += 1;
            }
            Outcome::Silent => self.silent += 1,
            Outcome::SilentTimeout => self.silent_timeout += 1,
        }
    }

    /// The count of one target's outcome.
    pub fn count(&self, target: Target) -> u64 {
        match target {
            Target::Routed => self.routed,
            Target::SilentTimeout => self.silent_timeout,
            Target::Reject(r) => RejectReason::ALL
                .iter()
                .position(|x| *x == r)
                .map_or(0, |i| self.rejected[i]),
            Target::Fallback(f) => FallbackReason::ALL
                .iter()
                .position(|x| *x == f)
                .map_or(0, |i| self.fallback[i]),
        }
    }

    fn merged(&self, other: &Self) -> Self {
        let mut out = self.clone();
        out.routed += other.routed;
        out.silent += other.silent;
        out.silent_timeout += other.silent_timeout;
        for (a, b) in out.rejected.iter_mut().zip(other.rejected) {
            *a += b;
        }
        for (a, b) in out.fallback.iter_mut().zip(other.fallback) {
            *a += b;
        }
        out
    }
}

/// What to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunConfig {
    /// First random seed (directed scenarios use `start..start + directed`).
    pub start: u64,
    /// Random seeds to run.
    pub seeds: u64,
    /// Directed scenarios per target, run before the random seeds.
    pub directed_per_target: u64,
    /// Each random seed also plays its control-plane scenario (the
    /// coordinator), with this sabotage planted; `None`: the data plane
    /// only.
    pub control: Option<ControlSabotage>,
}

/// What a run did.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// Outcomes of the directed scenarios.
    pub directed: Tally,
    /// Outcomes of the random scenarios.
    pub random: Tally,
    /// Scenarios played.
    pub scenarios: u64,
    /// Inputs fed to the core.
    pub steps: u64,
    /// The first failures, in full.
    pub failures: Vec<Failure>,
    /// All failures, kept or not.
    pub failure_count: u64,
    /// Decisions per deciding input, per [`DecidedBy::ALL`] position.
    pub decided_by: [u64; 7],
    /// Directed `TooLarge` scenarios built to be decided by a length
    /// field below the cap, and how many of them were.
    pub announced: (u64, u64),
    /// Scenarios whose hello was compared with its original framing.
    pub reframed: u64,
    /// What the control-plane scenarios did.
    pub control: ControlTally,
    /// The first control-plane failures, in full (counted in
    /// `failure_count` too).
    pub control_failures: Vec<ControlFailure>,
    /// Wall-clock time of the run (for the summary only).
    pub elapsed: Duration,
}

impl Report {
    /// Directed and random outcomes together.
    pub fn total(&self) -> Tally {
        self.directed.merged(&self.random)
    }

    /// Targets no scenario of the run produced.
    pub fn missing(&self) -> Vec<String> {
        let total = self.total();
        Target::ALL
            .into_iter()
            .filter(|t| total.count(*t) == 0)
            .map(Target::name)
            .collect()
    }

    fn record(
        &mut self,
        sc: &crate::scenario::Scenario,
        result: Result<crate::driver::Played, Failure>,
    ) {
        let directed = sc.target.is_some();
        self.scenarios += 1;
        match result {
            Ok(played) => {
                self.steps += played.steps as u64;
                if let Some(i) = DecidedBy::ALL.iter().position(|d| *d == played.decided_by) {
                    self.decided_by[i] += 1;
                }
                self.reframed += u64::from(sc.reframing.is_some());
                if sc.target.is_some() && sc.truth.announced_at.is_some() {
                    self.announced.0 += 1;
                    self.announced.1 += u64::from(played.decided_by == DecidedBy::Announcement);
                }
                if directed {
                    self.directed.add(&played.outcome);
                } else {
                    self.random.add(&played.outcome);
                }
            }
            Err(failure) => {
                self.failure_count += 1;
                if self.failures.len() < KEPT_FAILURES {
                    self.failures.push(failure);
                }
            }
        }
    }

    /// The summary table: outcomes per reason, steps, time.
    pub fn table(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "{:<34} {:>9} {:>9} {:>9}",
            "outcome", "directed", "random", "total"
        );
        let row = |s: &mut String, name: &str, d: u64, r: u64| {
            let _ = writeln!(s, "{name:<34} {d:>9} {r:>9} {:>9}", d + r);
        };
        row(&mut s, "routed", self.directed.routed, self.random.routed);
        for (i, reason) in RejectReason::ALL.iter().enumerate() {
            row(
                &mut s,
                &format!("rejected.{reason}"),
                self.directed.rejected[i],
                self.random.rejected[i],
            );
        }
        for (i, reason) in FallbackReason::ALL.iter().enumerate() {
            row(
                &mut s,
                &format!("fallback.{reason}"),
                self.directed.fallback[i],
                self.random.fallback[i],
            );
        }
        row(
            &mut s,
            "silent (closed unspoken, not counted)",
            self.directed.silent,
            self.random.silent,
        );
        row(
            &mut s,
            "refused.silent_timeout",
            self.directed.silent_timeout,
            self.random.silent_timeout,
        );
        let by: Vec<String> = DecidedBy::ALL
            .iter()
            .zip(self.decided_by)
            .map(|(d, n)| format!("{d:?} {n}"))
            .collect();
        let _ = writeln!(s, "decided by: {}", by.join(", "));
        let _ = writeln!(
            s,
            "directed too_large built to be announced below the cap: {}, decided so: {}",
            self.announced.0, self.announced.1
        );
        let _ = writeln!(
            s,
            "re-framed hellos checked against their original framing: {}",
            self.reframed
        );
        if self.control.scenarios > 0 {
            let _ = writeln!(s, "{}", self.control.line());
        }
        let secs = self.elapsed.as_secs_f64();
        let _ = writeln!(
            s,
            "{} scenarios, {} core inputs, {:.2} s ({:.0} scenarios/s), {} failure(s)",
            self.scenarios,
            self.steps,
            secs,
            self.scenarios as f64 / secs.max(1e-9),
            self.failure_count
        );
        let missing = self.missing();
        if !missing.is_empty() {
            let _ = writeln!(s, "never produced: {}", missing.join(", "));
        }
        s
    }
}

/// Plays `directed_per_target` scenarios of every [`Target`], then the
/// random seeds `start..start + seeds` (and, with `control`, each seed's
/// control-plane scenario).
pub fn run(config: RunConfig) -> Report {
    let started = Instant::now();
    let mut report = Report::default();
    for target in Target::ALL {
        for n in 0..config.directed_per_target {
            let sc = scenario(directed_seed(target, config.start.wrapping_add(n)));
            report.record(&sc, play(&sc));
        }
    }
    for seed in config.start..config.start.saturating_add(config.seeds) {
        // Random seeds live below the directed bit.
        let sc = scenario(seed & !crate::scenario::DIRECTED_BIT);
        report.record(&sc, play(&sc));
        if let Some(sabotage) = config.control {
            match play_control(seed, sabotage) {
                Ok(played) => report.control.add(&played),
                Err(failure) => {
                    report.control.add_failed();
                    report.failure_count += 1;
                    if report.control_failures.len() < KEPT_FAILURES {
                        report.control_failures.push(failure);
                    }
                }
            }
        }
    }
    report.elapsed = started.elapsed();
    report
}
