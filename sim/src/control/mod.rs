//! The control plane simulated: the shipped sans-io [`Coordinator`]
//! (`coordinator::Coordinator::handle(input, now) -> effects`) driven by
//! simulated workers, clients, files, journal and successor, on a
//! simulated clock, one seeded scenario at a time.
//!
//! Each seed draws (module `script`) 1 to 4 workers that answer, refuse,
//! answer slowly and out of order, hang past the order timeout or die
//! mid-generation; 1 to 4 clients whose requests interleave (changes,
//! batches in parts, queries, listings, `state load`, `preread reload`,
//! upgrades, stops, a client that leaves); SIGHUP reloads; route-source
//! reports that queue merges; stop signals. The world (module `world`)
//! performs every effect the coordinator returns: a worker applies a
//! generation to its own copy of the routing with the command crate's
//! `ConfigState::dispatch` and keeps the ledger of the generations it
//! holds; the journal records each append.
//!
//! Checked on every seed (module `checks`), as it runs and once quiet:
//!
//! - a generation is committed only after every worker it was sent to
//!   applied it;
//! - once quiet, every live worker's routing equals the committed state,
//!   and holds no generation that was refused or rolled back;
//! - each committed generation is journaled exactly once, in commit order,
//!   and the journal replays from the boot state to the committed state;
//! - each client hears one answer per request, in its request order (an
//!   answer is told apart by its kind, and by the tokens its request put
//!   in it);
//! - every wait has a deadline within the order timeout and the grace,
//!   and once the world is quiet nothing waits;
//! - a worker known gone is sent nothing.
//!
//! [`ControlSabotage`] plants the six faults the checks must catch.
//!
//! Owns: [`play_control`], [`ControlSabotage`], [`Played`] and
//! [`ControlFailure`]. Must never: model the coordinator (it is called),
//! use real time, threads, sockets or files.
//!
//! [`Coordinator`]: coordinator::Coordinator

pub mod checks;
mod script;
mod workers;
mod world;

use std::fmt;

use coordinator::sabotage::Fault;
use coordinator::{Coordinator, Effect};

pub use checks::Broken;
use checks::Ledger;
use script::Script;

/// A fault planted for the checks to catch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ControlSabotage {
    /// The coordinator as shipped.
    None,
    /// The coordinator commits a generation before every worker answered
    /// (a hook of the coordinator's `sabotage` feature).
    CommitEarly,
    /// The first rollback skips one of the workers it is for, that applied
    /// the generation (its order is dropped).
    SkipRollback,
    /// The first answer owed to a client that stays is lost.
    LoseAnswer,
    /// The first journal append is performed twice.
    DoubleAppend,
    /// Two answers of one client, of different kinds, released together,
    /// come out swapped.
    ReorderAnswers,
    /// The coordinator lets deadlines pass unseen (a hook of its
    /// `sabotage` feature).
    MissDeadline,
}

impl ControlSabotage {
    /// Every planted fault.
    pub const ALL: [Self; 6] = [
        Self::CommitEarly,
        Self::SkipRollback,
        Self::LoseAnswer,
        Self::DoubleAppend,
        Self::ReorderAnswers,
        Self::MissDeadline,
    ];

    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::CommitEarly => "commit-early",
            Self::SkipRollback => "skip-rollback",
            Self::LoseAnswer => "lose-answer",
            Self::DoubleAppend => "double-append",
            Self::ReorderAnswers => "reorder-answers",
            Self::MissDeadline => "miss-deadline",
        }
    }

    /// The fault of that name.
    pub fn from_name(name: &str) -> Option<Self> {
        std::iter::once(Self::None)
            .chain(Self::ALL)
            .find(|s| s.name() == name)
    }

    fn plant(self, coordinator: &mut Coordinator) {
        let fault = match self {
            Self::CommitEarly => Some(Fault::CommitEarly),
            Self::MissDeadline => Some(Fault::MissDeadlines),
            _ => None,
        };
        coordinator.plant(fault);
    }

    /// Applies the filter faults to one batch of effects, once per seed.
    fn filter(
        self,
        effects: &mut Vec<Effect>,
        ledger: &Ledger,
        script: &Script,
        played: &mut Played,
    ) {
        if played.fired {
            return;
        }
        let client_of = |effect: &Effect| match effect {
            Effect::Answer { client, .. } => Some((client.0, 0)),
            Effect::Report { client, .. } => Some((client.0, 1)),
            Effect::Serve { client, .. } => Some((client.0, 2)),
            _ => None,
        };
        let hit = match self {
            // A worker that applied the generation, and lives on.
            Self::SkipRollback => effects.iter().position(|e| {
                matches!(e, Effect::Send { worker, what: coordinator::Order::Apply(g), .. }
                    if ledger.undoes_on(g, *worker) && script.lives_on(*worker))
            }),
            Self::LoseAnswer => effects
                .iter()
                .position(|e| client_of(e).is_some_and(|(client, _)| script.stays(client))),
            Self::DoubleAppend => effects
                .iter()
                .position(|e| matches!(e, Effect::AppendJournal { .. })),
            Self::ReorderAnswers => {
                let answers: Vec<(usize, (u64, u8))> = effects
                    .iter()
                    .enumerate()
                    .filter_map(|(i, e)| client_of(e).map(|c| (i, c)))
                    .collect();
                let pair = answers
                    .iter()
                    .enumerate()
                    .find_map(|(n, (i, (client, kind)))| {
                        answers[n + 1..]
                            .iter()
                            .find(|(_, (c, k))| c == client && k != kind)
                            .map(|(j, _)| (*i, *j))
                    });
                if let Some((i, j)) = pair {
                    effects.swap(i, j);
                    played.fired = true;
                }
                return;
            }
            Self::None | Self::CommitEarly | Self::MissDeadline => None,
        };
        let Some(index) = hit else {
            return;
        };
        played.fired = true;
        match self {
            Self::DoubleAppend => {
                if let Some(Effect::AppendJournal { job, changes }) = effects.get(index) {
                    let again = Effect::AppendJournal {
                        job: *job,
                        changes: changes.clone(),
                    };
                    effects.insert(index + 1, again);
                }
            }
            _ => {
                effects.remove(index);
            }
        }
    }
}

/// What one seed did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Played {
    /// World events played.
    pub events: usize,
    /// Inputs fed to the coordinator.
    pub inputs: u64,
    /// Answers, reports and serves to clients.
    pub answers: u64,
    /// Generations committed that changed something.
    pub committed: usize,
    /// Generations refused or timed out (and rolled back).
    pub refused: usize,
    /// Workers that died.
    pub workers_lost: u64,
    /// Stop orders sent.
    pub stops: u64,
    /// Handovers started.
    pub upgrades: u64,
    /// SIGHUP reloads.
    pub reloads: u64,
    /// Route-source reports with fragments.
    pub merges: u64,
    /// State files read.
    pub loads: u64,
    /// A filter sabotage changed an effect (the hook ones do not say).
    pub fired: bool,
}

/// What many seeds did, for the summary table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ControlTally {
    /// Scenarios played, failed ones included.
    pub scenarios: u64,
    /// Scenarios that broke an invariant.
    pub failed: u64,
    /// The sums of what the passing ones did.
    pub inputs: u64,
    pub answers: u64,
    pub committed: u64,
    pub refused: u64,
    pub workers_lost: u64,
    pub stops: u64,
    pub upgrades: u64,
    pub reloads: u64,
    pub merges: u64,
    pub loads: u64,
}

impl ControlTally {
    /// Counts one passing scenario.
    pub fn add(&mut self, played: &Played) {
        self.scenarios += 1;
        self.inputs += played.inputs;
        self.answers += played.answers;
        self.committed += played.committed as u64;
        self.refused += played.refused as u64;
        self.workers_lost += played.workers_lost;
        self.stops += played.stops;
        self.upgrades += played.upgrades;
        self.reloads += played.reloads;
        self.merges += played.merges;
        self.loads += played.loads;
    }

    /// Counts one failed scenario.
    pub fn add_failed(&mut self) {
        self.scenarios += 1;
        self.failed += 1;
    }

    /// The summary table's line.
    pub fn line(&self) -> String {
        format!(
            "coordinator: {} scenarios, {} inputs, {} client answers, {} generations committed, \
             {} refused or rolled back, {} workers lost, {} stop orders, {} handovers, {} SIGHUP \
             reloads, {} source reports, {} state loads, {} failure(s)",
            self.scenarios,
            self.inputs,
            self.answers,
            self.committed,
            self.refused,
            self.workers_lost,
            self.stops,
            self.upgrades,
            self.reloads,
            self.merges,
            self.loads,
            self.failed
        )
    }
}

/// A broken invariant, with the seed that breaks it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControlFailure {
    pub seed: u64,
    pub sabotage: ControlSabotage,
    pub broken: Broken,
}

impl fmt::Display for ControlFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "coordinator seed {} (sabotage {}): {}: {}\n  replay: cargo run -p sim --release -- \
             --control-seed {} --sabotage {}",
            self.seed,
            self.sabotage.name(),
            self.broken.invariant,
            self.broken.detail,
            self.seed,
            self.sabotage.name()
        )
    }
}

/// Plays the control-plane scenario of `seed` with `sabotage` planted.
pub fn play_control(seed: u64, sabotage: ControlSabotage) -> Result<Played, ControlFailure> {
    let script = script::script(seed);
    world::World::new(&script, seed, sabotage)
        .run()
        .map_err(|broken| ControlFailure {
            seed,
            sabotage,
            broken,
        })
}
