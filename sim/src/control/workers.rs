//! The simulated workers: each takes the coordinator's orders from its
//! channel in order, applies a generation to its own copy of the routing
//! (through `ConfigState::dispatch`, the command crate's own way to apply
//! a change to a state), and answers. Each keeps the ledger of the
//! generations it holds.
//!
//! Owns: [`SimWorker`]: its channel, its routing copy, its ledger, and
//! whether it lives. Must never: look at the coordinator's state, or
//! decide for it (a refusal is the script's, or the routing's own: a
//! change its copy cannot take).

use std::collections::VecDeque;
use std::sync::Arc;

use command::answer_code::AnswerCode;
use command::generation::Generation;
use command::proto;
use command::state::{Applied, ConfigState};
use coordinator::{Answer, Order, OrderId, WorkerId};

use crate::control::script::WorkerPlan;

/// What the harness knows of a generation a worker was sent: the index of
/// its record, and whether it takes back another one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Carried {
    /// The boot's generation: record `.0`.
    Boot(usize),
    /// A job's generation: record `.0`.
    New(usize),
    /// The inverse of record `.0`.
    Inverse(usize),
}

/// A change of a generation the routing copy could not take: the copy
/// differs from the state the generation was planned on.
#[derive(Debug)]
struct Untaken {
    change: usize,
    why: String,
}

impl std::fmt::Display for Untaken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "change {} cannot apply: {}", self.change, self.why)
    }
}

/// One simulated worker. See the module documentation.
#[derive(Debug)]
pub(crate) struct SimWorker {
    pub(crate) id: WorkerId,
    pub(crate) plan: WorkerPlan,
    /// Orders sent, not taken yet.
    pub(crate) inbox: VecDeque<(OrderId, Order, Option<Carried>)>,
    /// A take of the next order is scheduled.
    pub(crate) scheduled: bool,
    /// Its routing, as its generations left it.
    pub(crate) routing: ConfigState,
    /// The records of the generations it holds, oldest first.
    pub(crate) held: Vec<usize>,
    /// Its thread ended (died, or exited after a stop).
    pub(crate) dead: bool,
    /// It exited on a stop order (as opposed to dying).
    pub(crate) exited: bool,
    /// The coordinator was told it is gone.
    pub(crate) gone_told: bool,
    /// A generation came after it exited: its routing may lag for good.
    pub(crate) missed: bool,
}

impl SimWorker {
    pub(crate) fn new(id: WorkerId, plan: WorkerPlan) -> Self {
        Self {
            id,
            plan,
            inbox: VecDeque::new(),
            scheduled: false,
            routing: ConfigState::default(),
            held: Vec::new(),
            dead: false,
            exited: false,
            gone_told: false,
            missed: false,
        }
    }

    /// Applies `generation` to a copy of the routing, change by change;
    /// keeps the copy only if every change took.
    fn apply(&mut self, generation: &Generation) -> Result<(), Untaken> {
        let mut routing = self.routing.clone();
        for (index, change) in generation.changes.iter().enumerate() {
            let why = match routing.dispatch(&change.to_request()) {
                Ok(Applied::Changed) => continue,
                Ok(Applied::Unchanged) => "it holds it already".to_owned(),
                Err(error) => error.message,
            };
            return Err(Untaken {
                change: index + 1,
                why,
            });
        }
        self.routing = routing;
        Ok(())
    }

    /// Whether its routing must equal the committed state once quiet: it
    /// lives, or it exited on a stop with every generation applied.
    pub(crate) fn is_current(&self) -> bool {
        !self.dead || (self.exited && !self.missed)
    }

    /// Takes the next order from the channel, and answers it (a stop
    /// order is answered, then the thread exits). `refuse` is the
    /// script's roll for refusing a new generation.
    pub(crate) fn take(&mut self, refuse: bool) -> Option<(OrderId, Answer)> {
        let (order, what, carried) = self.inbox.pop_front()?;
        let answer = match what {
            Order::Apply(generation) => self.take_generation(&generation, carried, refuse),
            Order::Metrics => Answer::Metrics(proto::WorkerMetrics {
                worker_id: self.id,
                ..Default::default()
            }),
            Order::Status => Answer::Status {
                sessions: 0,
                listeners: u32::try_from(self.routing.listeners().len()).unwrap_or(u32::MAX),
            },
            Order::Rejects(_) => Answer::Rejects(Vec::new()),
            Order::ExportListeners => Answer::Listeners(Arc::default()),
            Order::Resume => Answer::Done,
            Order::SoftStop { .. } | Order::HardStop => {
                self.dead = true;
                self.exited = true;
                self.missed |= self.inbox.iter().any(|(_, _, carried)| carried.is_some());
                self.inbox.clear();
                Answer::Done
            }
        };
        Some((order, answer))
    }

    fn take_generation(
        &mut self,
        generation: &Generation,
        carried: Option<Carried>,
        refuse: bool,
    ) -> Answer {
        let refused = |message: String| Answer::Refused {
            code: AnswerCode::WorkerRefused,
            message,
        };
        let new = matches!(carried, Some(Carried::New(_)));
        if refuse && new && !generation.is_empty() {
            return refused(format!("worker {} could not bind (simulated)", self.id));
        }
        if let Err(why) = self.apply(generation) {
            return refused(format!("worker {}: {why}", self.id));
        }
        match carried {
            Some(Carried::New(record) | Carried::Boot(record)) => self.held.push(record),
            Some(Carried::Inverse(record)) => {
                if let Some(at) = self.held.iter().rposition(|r| *r == record) {
                    self.held.remove(at);
                }
            }
            None => {}
        }
        Answer::Done
    }
}
