//! State changes: plan them on the committed state as one routing
//! generation, apply it on every worker, commit, save; or roll it back on
//! the workers that applied it.
//!
//! Owns: the queue of state-changing jobs (one request, a batch of
//! `preread reload`, a state load, a SIGHUP reload), run one at a time in
//! arrival order, each as one generation, and the answer of each. Must
//! never: commit a generation before every worker applied it; leave a
//! generation applied on some workers when another refused it.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use command::diff::diff;
use command::generation::{Generation, Planned, plan};
use command::proto;
use command::state::ConfigState;
use command::state_file::load_state_requests;
use command::validate::ValidationError;

mod answers;

use super::clients::ClientRef;
use super::pending::Gathered;
use super::reload_file::{self, Unread};
use super::responses::{failure, ok};
use super::{CommandServer, Purpose};
use preread_worker::answer_code::AnswerCode;
use preread_worker::worker::listen::ensure_unbound;
use preread_worker::worker::orders::{Order, OrderId};

/// A state-changing job.
#[derive(Debug)]
pub(super) enum Job {
    /// One add/update/remove/activate/deactivate request.
    Change(proto::Request),
    /// A batch of changes: the refused ones are skipped, the others
    /// applied together.
    Batch(Vec<proto::Request>),
    /// The declarations of `preread reload`: the diff from the running
    /// state to them is applied as a batch.
    Declarations(Vec<proto::Request>),
    /// Load a state file: apply the diff from the running state to it.
    Load(String),
    /// Reload a config file: the proxy's own on SIGHUP (`seen` unset), or
    /// the one `preread reload` saw: apply the diff from the running state
    /// to its declarations.
    Reload {
        path: PathBuf,
        seen: Option<proto::ReloadFile>,
    },
    /// A route source changed: apply the diff from the running state to
    /// the merge of the file's declarations with every fragment.
    Sources,
}

/// Where a job's changes came from: what its answer or log line says.
#[derive(Debug)]
enum Origin {
    /// One request of a client.
    Change,
    /// A batch of a client (`preread reload`).
    Batch,
    /// A state file (`state load`).
    Load(String),
    /// A config file the proxy read (SIGHUP, or `preread reload`), with
    /// its warnings (logged already; the CLI that asked prints them).
    Reload(PathBuf, Vec<String>),
    /// The route sources.
    Sources,
}

#[derive(Debug)]
struct Queued {
    client: Option<ClientRef>,
    job: Job,
}

/// Why a request of a job was not applied.
#[derive(Debug, Clone)]
struct Failure {
    code: AnswerCode,
    message: String,
}

impl From<ValidationError> for Failure {
    fn from(error: ValidationError) -> Self {
        Self {
            code: error.code.into(),
            message: error.message,
        }
    }
}

/// The job whose generation the workers are applying.
#[derive(Debug)]
struct Running {
    client: Option<ClientRef>,
    origin: Origin,
    order: OrderId,
    /// The plan, its generation taken out into `generation`.
    planned: Planned<Failure>,
    /// The generation, shared with the workers.
    generation: Arc<Generation>,
}

/// A job's end, for its answer.
#[derive(Debug)]
struct Outcome {
    client: Option<ClientRef>,
    origin: Origin,
    /// The plan, its generation taken out into `generation`.
    planned: Planned<Failure>,
    generation: Arc<Generation>,
    /// Why the workers did not apply the generation (it is not committed).
    refused: Option<Failure>,
}

/// The most requests one batch may hold, all its parts together: a config
/// of a million routes, with room to spare.
pub(super) const MAX_BATCH_REQUESTS: usize = 2_000_000;

/// The most entries each list of a `BatchReport` holds.
const REPORT_LIST_CAP: usize = 1_000;

/// The parts of a batch received so far from one client.
#[derive(Debug, Default)]
struct Parts {
    requests: Vec<proto::Request>,
    declarations: bool,
}

/// The state-change queue and the running job.
#[derive(Debug, Default)]
pub(super) struct Changes {
    queue: VecDeque<Queued>,
    running: Option<Running>,
    /// Batches whose last part has not come yet, by client.
    parts: HashMap<ClientRef, Parts>,
}

impl Changes {
    /// Whether a job runs or waits.
    pub(super) fn is_busy(&self) -> bool {
        self.running.is_some() || !self.queue.is_empty()
    }

    /// A client left: the parts it sent will not be completed.
    pub(super) fn forget_parts(&mut self, who: ClientRef) {
        self.parts.remove(&who);
    }
}

impl CommandServer {
    /// Takes one part of a batch of `who`: answers it at once when more
    /// follow, queues the whole batch with its last part.
    pub(super) fn batch_part(&mut self, who: ClientRef, batch: proto::ChangeBatch) {
        let parts = self.changes.parts.entry(who).or_insert_with(|| Parts {
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
            self.changes.parts.remove(&who);
            let answer = failure(AnswerCode::BadBatch, format!("{problem}; nothing changed"));
            self.respond(who, &answer);
            return;
        }
        parts.requests.extend(batch.requests);
        if batch.more {
            let answer = ok(format!(
                "part received: {} request(s) so far",
                parts.requests.len()
            ));
            self.respond(who, &answer);
            return;
        }
        let Some(parts) = self.changes.parts.remove(&who) else {
            return;
        };
        let job = if parts.declarations {
            Job::Declarations(parts.requests)
        } else {
            Job::Batch(parts.requests)
        };
        self.enqueue(Some(who), job);
    }

    /// Queues a state-changing job of `client` (which waits for its
    /// answer) and runs what can run.
    pub(super) fn enqueue(&mut self, client: Option<ClientRef>, job: Job) {
        if let Some(who) = client {
            self.set_busy(who);
        }
        if self.stopping.is_some() {
            if let Some(who) = client {
                self.respond(who, &stopping());
            }
            return;
        }
        self.changes.queue.push_back(Queued { client, job });
        self.advance();
    }

    /// Starts queued jobs until one waits for the workers or none is left.
    fn advance(&mut self) {
        while self.changes.running.is_none() {
            let Some(next) = self.changes.queue.pop_front() else {
                return;
            };
            let Some((origin, requests)) = self.begin(&next) else {
                continue;
            };
            let mut planned = self.plan(requests);
            let generation = Arc::new(std::mem::take(&mut planned.generation));
            if generation.is_empty() {
                self.finish(Outcome {
                    client: next.client,
                    origin,
                    planned,
                    generation,
                    refused: None,
                });
                continue;
            }
            let timeout = self.settings.order_timeout;
            let order = self.broadcast(
                Order::Apply(Arc::clone(&generation)),
                Purpose::Step,
                None,
                timeout,
            );
            self.changes.running = Some(Running {
                client: next.client,
                origin,
                order,
                planned,
                generation,
            });
        }
    }

    /// The job's requests as one generation on the committed state (left
    /// as it was): each is validated, and a listener it opens checked free;
    /// the refused ones are skipped.
    fn plan(&mut self, requests: Vec<proto::Request>) -> Planned<Failure> {
        let check_unbound = self.settings.check_unbound;
        let listening_before: BTreeSet<SocketAddr> = self
            .state
            .listeners()
            .filter(|l| l.active != Some(false))
            .filter_map(|l| l.address.parse().ok())
            .collect();
        plan(&mut self.state, requests, |change, after| {
            match change.opened_at() {
                Some(address)
                    if check_unbound
                        && listens(after, address)
                        && !listening_before.contains(&address) =>
                {
                    ensure_unbound(address).map_err(|e| Failure {
                        code: AnswerCode::WorkerRefused,
                        message: format!("cannot listen on {address}: {e}; nothing changed"),
                    })
                }
                _ => Ok(()),
            }
        })
    }

    /// The requests of a job; `None` when it is answered already (a file
    /// that cannot be read).
    fn begin(&mut self, queued: &Queued) -> Option<(Origin, Vec<proto::Request>)> {
        match &queued.job {
            Job::Change(request) => Some((Origin::Change, vec![request.clone()])),
            Job::Batch(requests) => Some((Origin::Batch, requests.clone())),
            Job::Declarations(requests) => {
                // The file state becomes these declarations, of no text.
                self.last_text.forget();
                let mut desired = ConfigState::default();
                for (index, request) in requests.iter().enumerate() {
                    if let Err(error) = desired.dispatch(request) {
                        if let Some(who) = queued.client {
                            let answer = failure(
                                error.code.into(),
                                format!(
                                    "declaration {} of {} is refused: {}; nothing changed",
                                    index + 1,
                                    requests.len(),
                                    error.message
                                ),
                            );
                            self.respond(who, &answer);
                        }
                        return None;
                    }
                }
                let desired = self.sources.with_file(desired);
                Some((Origin::Batch, diff(&self.state, &desired)))
            }
            Job::Sources => {
                let desired = self.sources.merge_job()?;
                Some((Origin::Sources, diff(&self.state, &desired)))
            }
            Job::Reload { path, seen } => {
                let started = Instant::now();
                let reread = reload_file::read(path, seen.as_ref())
                    .and_then(|text| self.reread(&text).map_err(Unread::Refused));
                match reread {
                    Ok(reread) => {
                        let warnings: Vec<String> = reread
                            .warnings
                            .iter()
                            .map(|warning| format!("{}:{warning}", path.display()))
                            .collect();
                        for warning in &warnings {
                            log::warn!("reload: {warning}");
                        }
                        log::info!(
                            "reloading {}: read, checked and compared with the running state in {} ms{}",
                            path.display(),
                            started.elapsed().as_millis(),
                            reread.read_note()
                        );
                        Some((Origin::Reload(path.clone(), warnings), reread.changes))
                    }
                    Err(unread) => {
                        self.refuse_reload(queued.client, path, unread);
                        None
                    }
                }
            }
            Job::Load(path) => match load_state_requests(path) {
                Ok((loaded, _)) => Some((Origin::Load(path.clone()), diff(&self.state, &loaded))),
                Err(error) => {
                    if let Some(who) = queued.client {
                        let answer = failure(
                            error.code().into(),
                            format!("cannot load the state file {path}: {error}; nothing changed"),
                        );
                        self.respond(who, &answer);
                    }
                    None
                }
            },
        }
    }

    /// Every worker answered the running generation (or some did not in
    /// time): commit it, or roll it back on the workers that may have
    /// applied it.
    pub(super) fn step_done(&mut self, gathered: &Gathered<Purpose>) {
        let run = match self.changes.running.take() {
            Some(run) if run.order == gathered.id => run,
            other => {
                log::error!("answers to generation {} not in flight", gathered.id);
                self.changes.running = other;
                return;
            }
        };
        let refused = match gathered.first_failure() {
            None => {
                if let Err(error) = run.generation.apply_to(&mut self.state) {
                    // Planned on this very state, nothing committed since:
                    // a bug, and the operator must hear of it.
                    log::error!(
                        "committing a generation the workers applied was refused: {error}; \
                         the state may differ from the workers' until the proxy restarts"
                    );
                }
                self.state.check_invariants();
                self.generation += 1;
                None
            }
            Some((_, code, message)) => {
                // Every worker but those that refused may hold the
                // generation (a late one applies it before the inverse:
                // orders are FIFO); one that refused took it back itself.
                let refused = gathered.refused_by();
                let undo_on: Vec<u32> = self
                    .worker_ids()
                    .into_iter()
                    .filter(|id| !refused.contains(id))
                    .collect();
                log::warn!(
                    "generation of {} change(s): {code}: {message}; undoing it on worker(s) \
                     {undo_on:?}",
                    run.generation.len()
                );
                if !undo_on.is_empty() {
                    let inverse = Arc::new(run.generation.inverse());
                    let purpose = Purpose::Rollback {
                        changes: inverse.len(),
                    };
                    let timeout = self.settings.order_timeout;
                    self.broadcast(Order::Apply(inverse), purpose, Some(&undo_on), timeout);
                }
                Some(Failure {
                    code,
                    message: if undo_on.is_empty() {
                        format!("{message}; nothing changed")
                    } else {
                        format!("{message}; undone on worker(s) {undo_on:?}, nothing changed")
                    },
                })
            }
        };
        // Committed or not, the registry follows the state: what a refused
        // generation created goes, what a committed one removed goes.
        self.shared.registry.sync_changed(
            &self.state,
            &run.generation.changes,
            std::time::Instant::now(),
        );
        let large = run.generation.len() >= crate::heap::TRIM_AFTER_CHANGES;
        self.finish(Outcome {
            client: run.client,
            origin: run.origin,
            planned: run.planned,
            generation: run.generation,
            refused,
        });
        if large {
            crate::heap::trim();
        }
        self.advance();
    }

    /// A stop was ordered: the queued jobs will not run.
    pub(super) fn fail_queued_changes(&mut self) {
        let queued: Vec<Queued> = self.changes.queue.drain(..).collect();
        for job in queued {
            if let Some(who) = job.client {
                self.respond(who, &stopping());
            }
        }
    }

    /// The server stops with a job still running: answer its client.
    pub(super) fn fail_running_change(&mut self) {
        self.fail_queued_changes();
        if let Some(run) = self.changes.running.take()
            && let Some(who) = run.client
        {
            let answer = failure(
                AnswerCode::Stopping,
                format!(
                    "the proxy stopped before the workers applied this generation of {} \
                     change(s)",
                    run.generation.len()
                ),
            );
            self.respond(who, &answer);
        }
    }
}

fn stopping() -> proto::Response {
    failure(
        AnswerCode::Stopping,
        "the proxy is stopping: no state change is accepted",
    )
}

/// The addresses `after` listens on (active listeners) that `before` does
/// not: the ones the workers are about to bind.
pub(super) fn newly_listening(before: &ConfigState, after: &ConfigState) -> Vec<SocketAddr> {
    let listening = |state: &ConfigState, address: &SocketAddr| {
        state
            .listener(address)
            .is_some_and(|l| l.active != Some(false))
    };
    after
        .listeners()
        .filter_map(|l| l.address.parse::<SocketAddr>().ok())
        .filter(|address| listening(after, address) && !listening(before, address))
        .collect()
}

/// Whether `state` listens at `address` (an active listener).
fn listens(state: &ConfigState, address: SocketAddr) -> bool {
    state
        .listener(&address)
        .is_some_and(|l| l.active != Some(false))
}
