//! What the control-plane simulation checks: the ledger of the
//! generations sent (who was sent each, who applied it, how it settled),
//! each client's answers against its requests, and the journal.
//!
//! Owns: `Ledger`, `ClientBook`, `Journal` and [`Broken`], and the
//! invariants they check as the run goes and once it is quiet. Must
//! never: predict what the coordinator decides; it checks what it decided
//! against what the world did.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use command::change::Change;
use command::generation::Generation;
use command::proto;
use command::state::ConfigState;
use coordinator::{Effect, JobId, OrderId, WorkerId};

use crate::control::script::Expect;
use crate::control::workers::Carried;

/// The invariants, as a failure names them.
pub const COMMIT_AFTER_ALL: &str = "a generation is committed only after every worker applied it";
pub const QUIET_ROUTING: &str =
    "once quiet, every live worker's routing equals the committed state";
pub const JOURNAL_ONCE: &str = "an acknowledged change is in the journal exactly once";
pub const REFUSED_NOWHERE: &str = "a refused or rolled-back change is in no worker";
pub const CLIENT_ORDER: &str = "each client's answers come in its request order, one per request";
pub const DEADLINES: &str = "nothing waits without a deadline";
pub const GONE_GETS_NOTHING: &str = "a gone worker is sent nothing more";

/// A broken invariant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Broken {
    /// Which (one of the constants of this module).
    pub invariant: &'static str,
    /// What was seen.
    pub detail: String,
}

pub(crate) fn broken(invariant: &'static str, detail: impl Into<String>) -> Broken {
    Broken {
        invariant,
        detail: detail.into(),
    }
}

/// One generation the coordinator sent.
#[derive(Debug)]
struct Record {
    generation: Arc<Generation>,
    /// The record it takes back, when it is an inverse.
    inverse_of: Option<usize>,
    sent_to: BTreeSet<WorkerId>,
    done_from: BTreeSet<WorkerId>,
    /// Committed (`true`) or not, once the coordinator said so.
    settled: Option<bool>,
    /// The boot's, which the state holds already.
    boot: bool,
}

/// Every generation sent. See the module documentation.
#[derive(Debug, Default)]
pub(crate) struct Ledger {
    records: Vec<Record>,
    by_pointer: HashMap<usize, usize>,
    by_order: HashMap<OrderId, usize>,
}

fn pointer(generation: &Arc<Generation>) -> usize {
    Arc::as_ptr(generation) as usize
}

impl Ledger {
    /// The record a generation not seen yet would take back: the last
    /// unsettled one whose inverse it is.
    fn inverse_target(&self, generation: &Generation) -> Option<usize> {
        self.records.iter().rposition(|r| {
            r.inverse_of.is_none() && r.settled.is_none() && r.generation.inverse() == *generation
        })
    }

    /// Whether no generation was sent yet (the first is the boot's).
    pub(crate) fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Whether `generation` takes back one that `worker` said it applied.
    pub(crate) fn undoes_on(&self, generation: &Arc<Generation>, worker: WorkerId) -> bool {
        let target = match self.by_pointer.get(&pointer(generation)) {
            Some(&index) => self.records[index].inverse_of,
            None => self.inverse_target(generation),
        };
        target.is_some_and(|t| self.records[t].done_from.contains(&worker))
    }

    /// `worker` is sent `generation` as `order`; `committed` for the boot's,
    /// which the state holds already.
    pub(crate) fn sent(
        &mut self,
        generation: &Arc<Generation>,
        order: OrderId,
        worker: WorkerId,
        committed: bool,
    ) -> Carried {
        let index = match self.by_pointer.get(&pointer(generation)) {
            Some(&index) => index,
            None => {
                let inverse_of = self.inverse_target(generation);
                self.records.push(Record {
                    generation: Arc::clone(generation),
                    inverse_of,
                    sent_to: BTreeSet::new(),
                    done_from: BTreeSet::new(),
                    settled: committed.then_some(true),
                    boot: committed,
                });
                let index = self.records.len() - 1;
                self.by_pointer.insert(pointer(generation), index);
                index
            }
        };
        self.by_order.insert(order, index);
        let record = &mut self.records[index];
        record.sent_to.insert(worker);
        match record.inverse_of {
            Some(target) => Carried::Inverse(target),
            None if record.boot => Carried::Boot(index),
            None => Carried::New(index),
        }
    }

    /// `worker`'s answer to `order` reached the coordinator.
    pub(crate) fn answered(&mut self, order: OrderId, worker: WorkerId, done: bool) {
        if let Some(&index) = self.by_order.get(&order)
            && done
        {
            self.records[index].done_from.insert(worker);
        }
    }

    /// The coordinator settled `generation`: a commit must follow every
    /// worker's `Done`.
    pub(crate) fn settled(
        &mut self,
        generation: &Arc<Generation>,
        committed: bool,
    ) -> Result<(), Broken> {
        let Some(&index) = self.by_pointer.get(&pointer(generation)) else {
            return Ok(());
        };
        let record = &mut self.records[index];
        record.settled = Some(committed);
        if committed && let Some(worker) = record.sent_to.difference(&record.done_from).next() {
            return Err(broken(
                COMMIT_AFTER_ALL,
                format!(
                    "a generation of {} change(s) was committed before worker {worker} answered",
                    record.generation.len()
                ),
            ));
        }
        Ok(())
    }

    /// A live worker holds only committed generations.
    pub(crate) fn check_held(&self, worker: WorkerId, held: &[usize]) -> Result<(), Broken> {
        for &index in held {
            let record = &self.records[index];
            if record.settled != Some(true) {
                return Err(broken(
                    REFUSED_NOWHERE,
                    format!(
                        "worker {worker} holds a generation of {} change(s) settled as {:?} \
                         (first: {:?})",
                        record.generation.len(),
                        record.settled,
                        record.generation.changes.first()
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Generations the coordinator did not commit.
    pub(crate) fn refused(&self) -> usize {
        self.records
            .iter()
            .filter(|r| r.settled == Some(false))
            .count()
    }
}

/// What one client asked and heard.
#[derive(Debug, Default)]
pub(crate) struct ClientBook {
    pub(crate) expects: Vec<Expect>,
    pub(crate) heard: usize,
    pub(crate) gone: bool,
}

fn holds_one(message: &str, tokens: &[String]) -> bool {
    tokens.is_empty() || tokens.iter().any(|t| message.contains(t.as_str()))
}

impl ClientBook {
    /// One answer effect of this client: it must answer the oldest request
    /// not answered yet.
    pub(crate) fn hear(&mut self, client: u64, effect: &Effect) -> Result<(), Broken> {
        let index = self.heard;
        self.heard += 1;
        if self.gone {
            return Err(broken(
                CLIENT_ORDER,
                format!("client {client} left, and hears more"),
            ));
        }
        let Some(expect) = self.expects.get(index) else {
            return Err(broken(
                CLIENT_ORDER,
                format!(
                    "client {client} hears answer {} to {} request(s)",
                    index + 1,
                    index
                ),
            ));
        };
        let fits = match (expect, effect) {
            (Expect::Serve(asked), Effect::Serve { request, .. }) => **asked == *request,
            (Expect::Report(asked), Effect::Report { query, .. }) => asked == query,
            (Expect::Report(_), Effect::Answer { response, .. }) => !is_ok(response),
            (
                Expect::Answer {
                    ok,
                    may_fail,
                    failed,
                },
                Effect::Answer { response, .. },
            ) => {
                if is_ok(response) {
                    holds_one(&response.message, ok)
                } else {
                    *may_fail && holds_one(&response.message, failed)
                }
            }
            _ => false,
        };
        if fits {
            return Ok(());
        }
        Err(broken(
            CLIENT_ORDER,
            format!(
                "client {client}'s request {} ({expect:?}) is answered with {}",
                index + 1,
                shown(effect)
            ),
        ))
    }
}

fn is_ok(response: &proto::Response) -> bool {
    response.status == proto::ResponseStatus::Ok as i32
}

fn shown(effect: &Effect) -> String {
    match effect {
        Effect::Answer { response, .. } => format!(
            "an answer {} {:?}",
            if is_ok(response) { "OK" } else { "FAILURE" },
            response.message
        ),
        Effect::Report { query, .. } => format!("the report of {query:?}"),
        Effect::Serve { request, .. } => format!("the serve of {request:?}"),
        other => format!("{other:?}"),
    }
}

/// The simulated journal, and the generations it must hold.
#[derive(Debug, Default)]
pub(crate) struct Journal {
    /// Each append, in order.
    pub(crate) appends: Vec<(JobId, Vec<Change>)>,
    /// The changes of each committed generation that changed something.
    pub(crate) committed: Vec<Vec<Change>>,
}

impl Journal {
    /// Once quiet: each committed generation appended exactly once, in
    /// commit order, and the journal replays from the boot state to the
    /// committed state.
    pub(crate) fn check(&self, boot: &ConfigState, state: &ConfigState) -> Result<(), Broken> {
        let mut jobs = BTreeSet::new();
        for (job, _) in &self.appends {
            if !jobs.insert(*job) {
                return Err(broken(
                    JOURNAL_ONCE,
                    format!("job {job:?} is appended twice"),
                ));
            }
        }
        let appended: Vec<&Vec<Change>> = self.appends.iter().map(|(_, c)| c).collect();
        let committed: Vec<&Vec<Change>> = self.committed.iter().collect();
        if appended != committed {
            return Err(broken(
                JOURNAL_ONCE,
                format!(
                    "{} append(s) for {} committed generation(s)",
                    appended.len(),
                    committed.len()
                ),
            ));
        }
        let mut replayed = boot.clone();
        for change in appended.into_iter().flatten() {
            if let Err(error) = replayed.dispatch(&change.to_request()) {
                return Err(broken(
                    JOURNAL_ONCE,
                    format!("the journal does not replay: {change:?}: {}", error.message),
                ));
            }
        }
        if replayed != *state {
            return Err(broken(
                JOURNAL_ONCE,
                "the journal replays to a state other than the committed one",
            ));
        }
        Ok(())
    }
}
