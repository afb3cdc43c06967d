//! State-changing jobs: queued in arrival order, run one at a time, each
//! planned on the committed state as one routing generation, applied on
//! every worker, then committed and journaled, or rolled back on the
//! workers that applied it.
//!
//! Owns: [`Jobs`] (the queue, the running job and its phase, the parts of
//! batches not complete yet) and the steps of a job up to its outcome.
//! Must never: commit a generation before every worker applied it; leave
//! a generation applied on some workers when another refused it; run two
//! jobs at once (an upgrade's handover included).

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use command::answer_code::AnswerCode;
use command::diff::diff;
use command::generation::{Generation, Planned, plan};
use command::listener_key::ListenerKey;
use command::proto;
use command::state::ConfigState;

use super::outcome::{Failure, Origin, Outcome};
use super::{Coordinator, Purpose};
use crate::effect::Effect;
use crate::input::{ClientId, JobId, UpgradeRequest};
use crate::orders::{Order, OrderId};
use crate::responses::{failure, ok};
use crate::sources::MergePlan;
use crate::turns::Ticket;

/// A state-changing job.
#[derive(Debug)]
#[allow(
    clippy::large_enum_variant,
    reason = "a job lives once per client request, queued a few at a time: boxing would add an allocation per request and save no memory worth it"
)]
pub(crate) enum Job {
    /// One add/update/remove/activate/deactivate request.
    Change(Box<proto::Request>),
    /// A batch of changes: the refused ones are skipped, the others
    /// applied together.
    Batch(Vec<proto::Request>),
    /// The declarations of `preread reload`: the diff from the running
    /// state to them is applied as a batch.
    Declarations(Vec<proto::Request>),
    /// Load a state file: apply the diff from the running state to it.
    Load(String),
    /// Reload a config file: the proxy's own on SIGHUP (`seen` unset), or
    /// the one `preread reload` saw.
    Reload {
        path: PathBuf,
        seen: Option<proto::ReloadFile>,
    },
    /// A route source changed: apply the diff from the running state to
    /// the merge of the file's declarations with every fragment.
    Sources,
    /// Hand the listeners and the state over to a successor.
    Upgrade(UpgradeRequest),
}

#[derive(Debug)]
struct Queued {
    id: JobId,
    client: Option<Ticket>,
    job: Job,
}

/// Where the running job is.
#[derive(Debug)]
pub(crate) enum Phase {
    /// The shell reads the config file of a reload.
    ReadingConfig { path: PathBuf, since: Instant },
    /// The shell reads the state file of a load.
    ReadingState { path: String },
    /// The workers apply the generation.
    Applying {
        order: OrderId,
        origin: Origin,
        /// The plan, its generation taken out into `generation`.
        planned: Planned<Failure>,
        generation: Arc<Generation>,
    },
    /// Committed; the shell appends it to the journal.
    Journaling(Outcome),
    /// The workers export their listening sockets for an upgrade.
    Exporting(UpgradeRequest),
    /// The shell hands over to the successor.
    HandingOver,
}

/// The job that runs.
#[derive(Debug)]
pub(crate) struct Running {
    pub(crate) id: JobId,
    pub(crate) client: Option<Ticket>,
    pub(crate) phase: Phase,
}

/// The most requests one batch may hold, all its parts together: a config
/// of a million routes, with room to spare.
pub const MAX_BATCH_REQUESTS: usize = 2_000_000;

/// The parts of a batch received so far from one client.
#[derive(Debug, Default)]
struct Parts {
    requests: Vec<proto::Request>,
    declarations: bool,
}

/// The state-change queue and the running job.
#[derive(Debug, Default)]
pub(crate) struct Jobs {
    queue: VecDeque<Queued>,
    pub(crate) running: Option<Running>,
    /// Batches whose last part has not come yet, by client.
    parts: HashMap<ClientId, Parts>,
    next_id: u64,
}

impl Jobs {
    /// Whether a job runs or waits.
    pub(crate) fn is_busy(&self) -> bool {
        self.running.is_some() || !self.queue.is_empty()
    }

    /// A client left: the parts it sent will not be completed.
    pub(crate) fn forget_parts(&mut self, who: ClientId) {
        self.parts.remove(&who);
    }

    fn push(&mut self, client: Option<Ticket>, job: Job) {
        let id = JobId(self.next_id);
        self.next_id += 1;
        self.queue.push_back(Queued { id, client, job });
    }

    /// The running job, if it is `id` in a phase `phase` accepts; it is
    /// taken out.
    pub(crate) fn take_running(
        &mut self,
        id: JobId,
        phase: impl Fn(&Phase) -> bool,
    ) -> Option<Running> {
        match &self.running {
            Some(run) if run.id == id && phase(&run.phase) => self.running.take(),
            _ => None,
        }
    }
}

impl Coordinator {
    /// Takes one part of a batch: answers it at once when more follow,
    /// queues the whole batch with its last part.
    pub(crate) fn batch_part(
        &mut self,
        ticket: Ticket,
        batch: proto::ChangeBatch,
        out: &mut Vec<Effect>,
    ) {
        let who = ticket.client;
        let parts = self.jobs.parts.entry(who).or_insert_with(|| Parts {
            requests: Vec::new(),
            declarations: batch.declarations,
        });
        let problem = if parts.declarations != batch.declarations {
            Some("the parts of one batch disagree on `declarations`".to_owned())
        } else if parts.requests.len() + batch.requests.len() > MAX_BATCH_REQUESTS {
            Some(format!(
                "a batch holds at most {MAX_BATCH_REQUESTS} requests, all its parts together"
            ))
        } else {
            None
        };
        if let Some(problem) = problem {
            self.jobs.parts.remove(&who);
            let answer = failure(AnswerCode::BadBatch, format!("{problem}; nothing changed"));
            self.answer(ticket, answer, out);
            return;
        }
        parts.requests.extend(batch.requests);
        if batch.more {
            let answer = ok(format!(
                "part received: {} request(s) so far",
                parts.requests.len()
            ));
            self.answer(ticket, answer, out);
            return;
        }
        let Some(parts) = self.jobs.parts.remove(&who) else {
            return;
        };
        let job = if parts.declarations {
            Job::Declarations(parts.requests)
        } else {
            Job::Batch(parts.requests)
        };
        self.enqueue(Some(ticket), job, out);
    }

    /// Queues a state-changing job (of the client of `ticket`, which waits
    /// for its answer), unless the proxy is stopping.
    pub(crate) fn enqueue(&mut self, client: Option<Ticket>, job: Job, out: &mut Vec<Effect>) {
        if self.stopping.is_some() {
            if let Some(ticket) = client {
                let answer = match job {
                    Job::Upgrade(_) => self.upgrade_refusal("the proxy is stopping", out),
                    _ => stopping(),
                };
                self.answer(ticket, answer, out);
            }
            return;
        }
        self.jobs.push(client, job);
    }

    /// Starts the next queued job if none runs. Returns whether one was
    /// taken from the queue.
    pub(crate) fn advance(&mut self, now: Instant, out: &mut Vec<Effect>) -> bool {
        if self.jobs.running.is_some() {
            return false;
        }
        let Some(next) = self.jobs.queue.pop_front() else {
            return false;
        };
        self.begin(next, now, out);
        true
    }

    fn begin(&mut self, queued: Queued, now: Instant, out: &mut Vec<Effect>) {
        let Queued { id, client, job } = queued;
        let requests = match job {
            Job::Change(request) => (Origin::Change, vec![*request]),
            Job::Batch(requests) => (Origin::Batch, requests),
            Job::Declarations(requests) => match self.declared(&requests) {
                Ok(desired) => (Origin::Batch, diff(&self.state, &desired)),
                Err(refused) => {
                    if let Some(ticket) = client {
                        self.answer(ticket, failure(refused.code, refused.message), out);
                    }
                    return;
                }
            },
            Job::Sources => match self.sources.merge_job(&mut self.state) {
                Some(MergePlan::Desired(desired)) => (Origin::Sources, diff(&self.state, &desired)),
                Some(MergePlan::Requests(requests)) => (Origin::Sources, requests),
                None => return,
            },
            Job::Reload { path, seen } => {
                out.push(Effect::ReadConfig {
                    job: id,
                    path: path.clone(),
                    seen,
                });
                let phase = Phase::ReadingConfig { path, since: now };
                self.jobs.running = Some(Running { id, client, phase });
                return;
            }
            Job::Load(path) => {
                out.push(Effect::ReadStateFile {
                    job: id,
                    path: path.clone(),
                });
                let phase = Phase::ReadingState { path };
                self.jobs.running = Some(Running { id, client, phase });
                return;
            }
            Job::Upgrade(request) => {
                self.start_export(id, client, request, now, out);
                return;
            }
        };
        let (origin, requests) = requests;
        self.apply(id, client, origin, requests, now, out);
    }

    /// The state the declarations of a batch ask for (merged with the
    /// route sources), or why they are refused.
    fn declared(&mut self, requests: &[proto::Request]) -> Result<ConfigState, Failure> {
        // The file state becomes these declarations, of no text.
        self.last_text.forget();
        let mut desired = ConfigState::default();
        for (index, request) in requests.iter().enumerate() {
            if let Err(error) = desired.dispatch(request) {
                return Err(Failure {
                    code: error.code.into(),
                    message: format!(
                        "declaration {} of {} is refused: {}; nothing changed",
                        index + 1,
                        requests.len(),
                        error.message
                    ),
                });
            }
        }
        Ok(self.sources.with_file(desired))
    }

    /// Plans `requests` and sends the generation to every worker (or ends
    /// the job at once when it changes nothing).
    pub(crate) fn apply(
        &mut self,
        id: JobId,
        client: Option<Ticket>,
        origin: Origin,
        requests: Vec<proto::Request>,
        now: Instant,
        out: &mut Vec<Effect>,
    ) {
        let mut planned = self.plan(requests);
        let generation = Arc::new(std::mem::take(&mut planned.generation));
        if generation.is_empty() {
            let outcome = Outcome {
                client,
                origin,
                planned,
                generation,
                refused: None,
            };
            self.finish(outcome, None, now, out);
            return;
        }
        let timeout = self.settings.order_timeout;
        let what = Order::Apply(Arc::clone(&generation));
        let order = self.broadcast(what, Purpose::Step, None, timeout, now, out);
        let phase = Phase::Applying {
            order,
            origin,
            planned,
            generation,
        };
        self.jobs.running = Some(Running { id, client, phase });
    }

    /// The job's requests as one generation on the committed state (left
    /// as it was): each is validated, and a listener it opens checked free;
    /// the refused ones are skipped.
    fn plan(&mut self, requests: Vec<proto::Request>) -> Planned<Failure> {
        let listening_before: BTreeSet<ListenerKey> = self
            .state
            .listeners()
            .filter(|l| l.active != Some(false))
            .filter_map(|l| ListenerKey::of_config(l).ok())
            .collect();
        let check = &mut self.check;
        plan(&mut self.state, requests, |change, after| {
            match change.opened_at() {
                // The check binds a TCP socket: a QUIC listener's UDP port
                // is the workers' to bind (a TCP listener may hold the
                // same address).
                Some(key)
                    if !key.quic && listens(after, key) && !listening_before.contains(&key) =>
                {
                    let address = key.address;
                    check.ensure_unbound(address).map_err(|e| Failure {
                        code: AnswerCode::WorkerRefused,
                        message: format!("cannot listen on {address}: {e}; nothing changed"),
                    })
                }
                _ => Ok(()),
            }
        })
    }

    /// The shell ends with jobs queued or running: their clients hear so.
    pub(crate) fn fail_running(&mut self, out: &mut Vec<Effect>) {
        self.fail_queued(out);
        let Some(run) = self.jobs.running.take() else {
            return;
        };
        let Some(ticket) = run.client else {
            return;
        };
        let answer = match run.phase {
            Phase::Applying { generation, .. } => failure(
                AnswerCode::Stopping,
                format!(
                    "the proxy stopped before the workers applied this generation of {} \
                     change(s)",
                    generation.len()
                ),
            ),
            _ => stopping(),
        };
        self.answer(ticket, answer, out);
    }

    /// A stop was ordered: the queued jobs will not run.
    pub(crate) fn fail_queued(&mut self, out: &mut Vec<Effect>) {
        let queued: Vec<Queued> = self.jobs.queue.drain(..).collect();
        for job in queued {
            if let Some(ticket) = job.client {
                let answer = match job.job {
                    Job::Upgrade(_) => self.upgrade_refusal("the proxy is stopping", out),
                    _ => stopping(),
                };
                self.answer(ticket, answer, out);
            }
        }
    }
}

fn stopping() -> proto::Response {
    failure(
        AnswerCode::Stopping,
        "the proxy is stopping: no state change is accepted",
    )
}

/// Whether `state` listens at `address` (an active listener).
fn listens(state: &ConfigState, address: ListenerKey) -> bool {
    state
        .listener(&address)
        .is_some_and(|l| l.active != Some(false))
}
