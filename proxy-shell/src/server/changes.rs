//! State changes: validate on a copy, apply on every worker, commit, save;
//! or roll back on the workers that applied it.
//!
//! Owns: the queue of state-changing jobs (one request, or the steps of a
//! state load), run one at a time in arrival order, and the answer of each.
//! Must never: commit a step before every worker applied it; leave a step
//! applied on some workers when another refused it.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use command::config::load_config_file;
use command::diff::diff;
use command::proto;
use command::state::{Applied, ConfigState};
use command::state_file::{load_state_requests, save_state};
use command::validate::check_cap_fits_buffer;

use super::clients::ClientRef;
use super::pending::Gathered;
use super::responses::{failure, ok};
use super::{CommandServer, Purpose, describe};
use crate::answer_code::AnswerCode;
use crate::worker::listen::ensure_unbound;
use crate::worker::orders::{Order, OrderId};

/// A state-changing job.
#[derive(Debug)]
pub(super) enum Job {
    /// One add/update/remove/activate/deactivate request.
    Change(proto::Request),
    /// Load a state file: apply the diff from the running state to it.
    Load(String),
    /// Reload the config file (SIGHUP): apply the diff from the running
    /// state to its declarations, as `preread reload` does.
    Reload(PathBuf),
}

/// Where a job's steps came from: what its answer or log line says.
#[derive(Debug)]
enum Origin {
    /// One request of a client.
    Change,
    /// A state file (`state load`).
    Load(String),
    /// The config file, on SIGHUP.
    Reload(PathBuf),
}

#[derive(Debug)]
struct Queued {
    client: Option<ClientRef>,
    job: Job,
}

/// A step sent to the workers, awaiting their answers.
#[derive(Debug)]
struct InFlight {
    order: OrderId,
    request: proto::Request,
    /// The state once the step is committed.
    after: ConfigState,
}

/// A step that did not apply.
#[derive(Debug)]
struct Failure {
    request: proto::Request,
    code: AnswerCode,
    message: String,
}

/// The job being run.
#[derive(Debug)]
struct Running {
    client: Option<ClientRef>,
    origin: Origin,
    steps: VecDeque<proto::Request>,
    in_flight: Option<InFlight>,
    applied: usize,
    unchanged: usize,
    failures: Vec<Failure>,
}

impl Running {
    fn new(client: Option<ClientRef>, origin: Origin, steps: Vec<proto::Request>) -> Self {
        Self {
            client,
            origin,
            steps: steps.into(),
            in_flight: None,
            applied: 0,
            unchanged: 0,
            failures: Vec::new(),
        }
    }
}

/// The state-change queue and the running job.
#[derive(Debug, Default)]
pub(super) struct Changes {
    queue: VecDeque<Queued>,
    running: Option<Running>,
}

impl CommandServer {
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

    /// Runs jobs and steps until one waits for the workers or none is left.
    fn advance(&mut self) {
        loop {
            let mut run = match self.changes.running.take() {
                Some(run) => run,
                None => {
                    let Some(next) = self.changes.queue.pop_front() else {
                        return;
                    };
                    match self.begin(next) {
                        Some(run) => run,
                        None => continue,
                    }
                }
            };
            if run.in_flight.is_some() {
                self.changes.running = Some(run);
                return;
            }
            let Some(request) = run.steps.pop_front() else {
                self.finish(run);
                continue;
            };
            let mut after = self.state.clone();
            let checked = check_cap_fits_buffer(&request, self.settings.buffer_size)
                .and_then(|()| after.dispatch(&request));
            match checked {
                Err(error) => run.failures.push(Failure {
                    request,
                    code: error.code.into(),
                    message: error.message,
                }),
                Ok(Applied::Unchanged) => run.unchanged += 1,
                Ok(Applied::Changed) if let Err(message) = self.check_unbound(&after) => {
                    run.failures.push(Failure {
                        request,
                        code: AnswerCode::WorkerRefused,
                        message,
                    });
                }
                Ok(Applied::Changed) => {
                    let timeout = self.settings.order_timeout;
                    let order =
                        self.broadcast(Order::Apply(request.clone()), Purpose::Step, None, timeout);
                    run.in_flight = Some(InFlight {
                        order,
                        request,
                        after,
                    });
                }
            }
            self.changes.running = Some(run);
        }
    }

    /// Whether the addresses `after` listens on and the running state does
    /// not are free; the message names the first that is not.
    fn check_unbound(&self, after: &ConfigState) -> Result<(), String> {
        if !self.settings.check_unbound {
            return Ok(());
        }
        for address in newly_listening(&self.state, after) {
            ensure_unbound(address)
                .map_err(|e| format!("cannot listen on {address}: {e}; nothing changed"))?;
        }
        Ok(())
    }

    /// Starts a job; `None` when it is answered already (a state file that
    /// cannot be loaded).
    fn begin(&mut self, queued: Queued) -> Option<Running> {
        match queued.job {
            Job::Change(request) => {
                Some(Running::new(queued.client, Origin::Change, vec![request]))
            }
            Job::Reload(path) => match load_config_file(&path) {
                Ok(loaded) => {
                    let steps = diff(&self.state, &loaded.state);
                    Some(Running::new(queued.client, Origin::Reload(path), steps))
                }
                Err(problems) => {
                    for problem in &problems {
                        log::error!("reload: {}:{problem}", path.display());
                    }
                    let summary = format!(
                        "reload of {} refused: {} problem(s); nothing changed",
                        path.display(),
                        problems.len()
                    );
                    log::error!("{summary}");
                    crate::notify::ready(&summary);
                    None
                }
            },
            Job::Load(path) => match load_state_requests(&path) {
                Ok((loaded, _)) => {
                    let steps = diff(&self.state, &loaded);
                    Some(Running::new(queued.client, Origin::Load(path), steps))
                }
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

    /// Every worker answered the running step (or some did not in time):
    /// commit it, or roll it back on the workers that may have applied it.
    pub(super) fn step_done(&mut self, gathered: &Gathered<Purpose>) {
        let Some(mut run) = self.changes.running.take() else {
            log::error!(
                "answers to step {} with no state change running",
                gathered.id
            );
            return;
        };
        let in_flight = match run.in_flight.take() {
            Some(in_flight) if in_flight.order == gathered.id => in_flight,
            other => {
                log::error!("answers to step {} not in flight", gathered.id);
                run.in_flight = other;
                self.changes.running = Some(run);
                return;
            }
        };
        match gathered.first_failure() {
            None => {
                self.state = in_flight.after;
                self.state.check_invariants();
                self.generation += 1;
                run.applied += 1;
            }
            Some((_, code, message)) => {
                // Every worker but those that refused may hold the change (a
                // late one applies it before the inverse: orders are FIFO).
                let refused = gathered.refused_by();
                let undo_on: Vec<u32> = self
                    .worker_ids()
                    .into_iter()
                    .filter(|id| !refused.contains(id))
                    .collect();
                log::warn!(
                    "{}: {code}: {message}; undoing it on worker(s) {undo_on:?}",
                    describe(&in_flight.request)
                );
                if !undo_on.is_empty() {
                    let timeout = self.settings.order_timeout;
                    for inverse in diff(&in_flight.after, &self.state) {
                        let purpose = Purpose::Rollback {
                            request: describe(&inverse),
                        };
                        self.broadcast(Order::Apply(inverse), purpose, Some(&undo_on), timeout);
                    }
                }
                run.failures.push(Failure {
                    request: in_flight.request,
                    code,
                    message: if undo_on.is_empty() {
                        format!("{message}; nothing changed")
                    } else {
                        format!("{message}; undone on worker(s) {undo_on:?}, nothing changed")
                    },
                });
            }
        }
        self.changes.running = Some(run);
        self.advance();
    }

    /// Saves the state if the job changed it, and answers the job.
    fn finish(&mut self, run: Running) {
        let save_error = if run.applied > 0 {
            self.autosave()
        } else {
            None
        };
        let save_note = save_error
            .map(|e| format!("; but the state file was not saved: {e}"))
            .unwrap_or_default();
        let answer = match &run.origin {
            Origin::Reload(path) => {
                log_reload(path, &run, &save_note);
                return;
            }
            Origin::Change => match run.failures.first() {
                Some(failed) => failure(failed.code, failed.message.clone()),
                None if run.applied == 0 => {
                    ok("unchanged: the proxy already has this; nothing sent to the workers")
                }
                None => ok(format!(
                    "applied on {} worker(s){save_note}",
                    self.workers.len()
                )),
            },
            Origin::Load(path) => {
                let mut message = format!(
                    "state loaded from {path}: {} applied, {} unchanged, {} skipped{save_note}",
                    run.applied,
                    run.unchanged,
                    run.failures.len()
                );
                for failed in &run.failures {
                    message.push_str(&format!(
                        "\n  skipped {}: {}: {}",
                        describe(&failed.request),
                        failed.code,
                        failed.message
                    ));
                }
                match run.failures.first() {
                    Some(failed) => failure(failed.code, message),
                    None => ok(message),
                }
            }
        };
        if let Some(who) = run.client {
            self.respond(who, &answer);
        }
    }

    /// With `automatic_state_save`, rewrites the state file; the error, if
    /// any (logged), for the answer.
    fn autosave(&self) -> Option<String> {
        if !self.settings.automatic_state_save {
            return None;
        }
        let path = self.settings.saved_state.as_ref()?;
        match save_state(path, &self.state.generate_requests()) {
            Ok(()) => None,
            Err(error) => {
                log::error!("automatic state save to {} failed: {error}", path.display());
                Some(error.to_string())
            }
        }
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
                    "the proxy stopped before this finished ({} step(s) applied)",
                    run.applied
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

/// The summary of a SIGHUP reload, as `preread reload` prints it: each
/// skipped request with its code, then the counts.
fn log_reload(path: &Path, run: &Running, save_note: &str) {
    for failed in &run.failures {
        log::warn!(
            "reload of {}: skipped {}: {}: {}",
            path.display(),
            describe(&failed.request),
            failed.code,
            failed.message
        );
    }
    let summary = format!(
        "reload of {}: {} applied, {} unchanged, {} skipped{save_note}",
        path.display(),
        run.applied,
        run.unchanged,
        run.failures.len()
    );
    log::info!("{summary}");
    crate::notify::ready(&summary);
}
