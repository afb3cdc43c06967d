//! The coordinator itself: its settings, its state, and the one entry
//! point, [`Coordinator::handle`].
//!
//! Its children own the parts: `jobs` the queue and the phases of a
//! job, `outcome` a job's answer, `stop` the stops, `upgrade` the
//! handover's job, `reread` the config outline of a reload.
//!
//! Owns: the dispatch of each input to the part that owns it, the
//! broadcast of an order to the workers with its deadline, and what a
//! gathered order leads to. Must never: read the clock (`now` comes with
//! each input), do I/O, or send an order without a deadline.

use std::collections::VecDeque;
use std::io;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

use core::net::SocketAddr;

mod commit;
mod jobs;
mod outcome;
mod reads;
mod reread;
#[cfg(feature = "sabotage")]
pub mod sabotage;
mod stop;
mod upgrade;

pub use jobs::MAX_BATCH_REQUESTS;

use command::answer_code::AnswerCode;
use command::proto::response_content::ContentType;
use command::sources::SourceKind;
use command::state::ConfigState;
use log::Level;

use crate::effect::{Effect, log};
use crate::input::StopKind;
use crate::input::{ClientId, Input, Query, Request};
use crate::orders::{Answer, Order, OrderId, Reply, WorkerId};
use crate::pending::{Gathered, Pending, Recorded};
use crate::responses::{failure, ok};
use crate::sources::RouteSources;
use crate::turns::{Ticket, Turns};
use jobs::{Job, Jobs};
use reread::LastText;

/// What the coordinator needs to know.
#[derive(Debug, Clone)]
pub struct Settings {
    /// How long a worker may take to answer an order (a soft stop gets
    /// its grace on top).
    pub order_timeout: Duration,
    /// How long a soft stop lets sessions finish.
    pub soft_stop_grace: Duration,
    /// The config file the proxy started from: what SIGHUP reloads.
    pub config_path: Option<PathBuf>,
    /// This process's pid, for the answers of an upgrade.
    pub pid: u32,
}

/// Whether the workers could listen at an address a change opens: the
/// one question planning asks the system, answered by the shell (a bind
/// test) or by the simulation.
pub trait AddressCheck {
    /// `Ok` when nothing else listens at `address`.
    fn ensure_unbound(&mut self, address: SocketAddr) -> io::Result<()>;
}

/// Why an order was sent: what to do with its answers.
#[derive(Debug)]
pub(crate) enum Purpose {
    /// A client's status, metrics or rejects query.
    Query { ticket: Ticket, query: Query },
    /// The generation of the running job.
    Step,
    /// Undoing a refused generation on the workers that applied it.
    Rollback { changes: usize },
    /// A soft or hard stop.
    Stop(StopKind),
    /// The state replayed at boot.
    Boot,
    /// Duplicates of the listening sockets, for an upgrade's successor.
    Export,
    /// The workers read their QUIC sockets again after a failed upgrade.
    Resume,
}

/// The control plane's coordinator. See the crate documentation.
pub struct Coordinator {
    pub(crate) settings: Settings,
    pub(crate) state: ConfigState,
    pub(crate) workers: Vec<WorkerId>,
    pub(crate) check: Box<dyn AddressCheck + Send>,
    /// Generations committed since the start.
    pub(crate) generation: u64,
    pub(crate) stopping: Option<StopKind>,
    pub(crate) pending: Pending<Purpose>,
    /// Orders whose answers are all in, not yet acted on.
    pub(crate) completed: VecDeque<Gathered<Purpose>>,
    pub(crate) turns: Turns,
    pub(crate) jobs: Jobs,
    pub(crate) sources: RouteSources,
    pub(crate) last_text: LastText,
    #[cfg(feature = "sabotage")]
    pub(crate) fault: Option<sabotage::Fault>,
}

impl std::fmt::Debug for Coordinator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Coordinator")
            .field("settings", &self.settings)
            .field("workers", &self.workers)
            .field("generation", &self.generation)
            .field("stopping", &self.stopping)
            .field("pending", &self.pending)
            .field("jobs", &self.jobs)
            .finish_non_exhaustive()
    }
}

impl Coordinator {
    /// A coordinator of no worker yet, whose committed state is `state`,
    /// started at `now`.
    pub fn new(
        settings: Settings,
        state: ConfigState,
        check: Box<dyn AddressCheck + Send>,
        now: Instant,
    ) -> Self {
        let file = settings
            .config_path
            .as_ref()
            .map(|path| path.display().to_string())
            .unwrap_or_default();
        Self {
            settings,
            state,
            workers: Vec::new(),
            check,
            generation: 0,
            stopping: None,
            pending: Pending::new(),
            completed: VecDeque::new(),
            turns: Turns::default(),
            jobs: Jobs::default(),
            sources: RouteSources::new(file, now),
            last_text: LastText::default(),
            #[cfg(feature = "sabotage")]
            fault: None,
        }
    }

    /// Takes one input at `now`; returns what the shell must do, in order.
    pub fn handle(&mut self, input: Input, now: Instant) -> Vec<Effect> {
        let mut out = Vec::new();
        match input {
            Input::Request { client, request } => self.request(client, request, now, &mut out),
            Input::ClientGone { client } => {
                self.turns.forget(client);
                self.jobs.forget_parts(client);
            }
            Input::WorkerAnswer {
                worker,
                order,
                answer,
            } => self.record(
                Reply {
                    worker,
                    order,
                    answer,
                },
                &mut out,
            ),
            Input::WorkerGone { worker } => self.worker_gone(worker, &mut out),
            Input::Tick => {}
            Input::Boot { generation } => {
                let timeout = self.settings.order_timeout;
                self.broadcast(
                    Order::Apply(generation),
                    Purpose::Boot,
                    None,
                    timeout,
                    now,
                    &mut out,
                );
            }
            Input::Hangup => self.hangup(&mut out),
            Input::Stop(kind) => {
                self.start_stop(kind, true, now, &mut out);
            }
            Input::ConfigRead { job, read } => self.config_read(job, read, now, &mut out),
            Input::StateFileRead { job, read } => self.state_file_read(job, read, now, &mut out),
            Input::Journaled { job, saved } => self.journaled(job, saved, now, &mut out),
            Input::SourceReport(report) => self.sources.record(report, &mut out),
            Input::UpgradeFinished { job, outcome } => {
                self.upgrade_finished(job, outcome, now, &mut out);
            }
        }
        self.settle(now, &mut out);
        out
    }

    /// Acts on what is complete and due, and starts what can start, until
    /// nothing is left to do without an input.
    fn settle(&mut self, now: Instant, out: &mut Vec<Effect>) {
        loop {
            let due = self.pending.expire(now);
            #[cfg(feature = "sabotage")]
            let due = self.missed(due);
            for expired in due {
                log(
                    out,
                    Level::Error,
                    format!(
                        "order {} ({:?}): no answer from worker(s) {:?} in time",
                        expired.id, expired.purpose, expired.missing
                    ),
                );
                self.completed.push_back(expired);
            }
            if let Some(gathered) = self.completed.pop_front() {
                self.on_gathered(gathered, now, out);
                continue;
            }
            if self.stopping.is_none() && self.sources.merge_due(now) {
                self.enqueue(None, Job::Sources, out);
            }
            if !self.advance(now, out) {
                return;
            }
        }
    }

    fn request(&mut self, client: ClientId, request: Request, now: Instant, out: &mut Vec<Effect>) {
        let ticket = self.turns.take(client);
        match request {
            Request::Change(change) => {
                self.enqueue(Some(ticket), Job::Change(Box::new(change)), out)
            }
            Request::BatchPart(batch) => self.batch_part(ticket, batch, out),
            Request::ReloadFile(seen) => {
                let job = Job::Reload {
                    path: PathBuf::from(&seen.path),
                    seen: Some(seen),
                };
                self.enqueue(Some(ticket), job, out);
            }
            Request::LoadState { path } => self.enqueue(Some(ticket), Job::Load(path), out),
            Request::Upgrade(upgrade) => self.enqueue(Some(ticket), Job::Upgrade(upgrade), out),
            Request::Query(query) => {
                let order = match &query {
                    Query::Status => Order::Status,
                    Query::Metrics { .. } => Order::Metrics,
                    Query::Rejects(filter) => Order::Rejects(filter.clone()),
                };
                let timeout = self.settings.order_timeout;
                let purpose = Purpose::Query { ticket, query };
                self.broadcast(order, purpose, None, timeout, now, out);
            }
            Request::Stop(kind) => {
                let said = self.start_stop(kind, true, now, out);
                self.answer(ticket, ok(said), out);
            }
            Request::Local(request) => {
                let serve = Effect::Serve { client, request };
                self.turns.give(ticket, serve, out);
            }
        }
    }

    /// Answers the request of `ticket` (in its client's order).
    pub(crate) fn answer(
        &mut self,
        ticket: Ticket,
        response: command::proto::Response,
        out: &mut Vec<Effect>,
    ) {
        let client = ticket.client;
        self.turns
            .give(ticket, Effect::Answer { client, response }, out);
    }

    /// Sends `what` to `to` (every live worker when `None`), due by `now`
    /// plus `timeout`. With no worker to ask, it is complete at once.
    pub(crate) fn broadcast(
        &mut self,
        what: Order,
        purpose: Purpose,
        to: Option<&[WorkerId]>,
        timeout: Duration,
        now: Instant,
        out: &mut Vec<Effect>,
    ) -> OrderId {
        let targets: Vec<WorkerId> = to.map_or_else(|| self.workers.clone(), <[_]>::to_vec);
        let id = self.pending.open(
            purpose,
            targets.iter().copied(),
            deadline_after(now, timeout),
        );
        for worker in targets {
            out.push(Effect::Send {
                worker,
                order: id,
                what: what.clone(),
            });
        }
        self.completed.extend(self.pending.take_complete(id));
        id
    }

    fn record(&mut self, reply: Reply, out: &mut Vec<Effect>) {
        let (worker, order) = (reply.worker, reply.order);
        match self.pending.record(reply) {
            Recorded::Complete(gathered) => self.completed.push_back(gathered),
            Recorded::Waiting => {
                #[cfg(feature = "sabotage")]
                self.commit_early(order);
            }
            Recorded::Stale => log(
                out,
                Level::Debug,
                format!(
                    "worker {worker} answered order {order} that is no longer awaited (timed out?)"
                ),
            ),
            Recorded::Unasked => log(
                out,
                Level::Warn,
                format!("worker {worker} answered order {order} twice, or was not asked"),
            ),
        }
    }

    /// A gone worker is sent nothing more, and refuses what it owes.
    fn worker_gone(&mut self, worker: WorkerId, out: &mut Vec<Effect>) {
        self.workers.retain(|w| *w != worker);
        for order in self.pending.owed_by(worker) {
            let answer = Answer::Refused {
                code: AnswerCode::WorkerRefused,
                message: format!("worker {worker} is gone"),
            };
            self.record(
                Reply {
                    worker,
                    order,
                    answer,
                },
                out,
            );
        }
    }

    fn on_gathered(&mut self, gathered: Gathered<Purpose>, now: Instant, out: &mut Vec<Effect>) {
        match gathered.purpose {
            Purpose::Query { ticket, ref query } => {
                let answer = match gathered.first_failure() {
                    Some((_, code, message)) => Effect::Answer {
                        client: ticket.client,
                        response: failure(code, message),
                    },
                    None => Effect::Report {
                        client: ticket.client,
                        query: query.clone(),
                        answers: gathered.answers,
                    },
                };
                self.turns.give(ticket, answer, out);
            }
            Purpose::Step => self.step_done(&gathered, now, out),
            Purpose::Rollback { changes } => {
                if let Some((_, code, message)) = gathered.first_failure() {
                    log(
                        out,
                        Level::Error,
                        format!(
                            "undoing a generation of {changes} change(s): {code}: {message}; \
                             that worker's routing may differ from the state until the proxy \
                             restarts"
                        ),
                    );
                }
            }
            Purpose::Stop(kind) => {
                match gathered.first_failure() {
                    Some((_, code, message)) => {
                        log(
                            out,
                            Level::Warn,
                            format!("{kind:?} stop: {code}: {message}"),
                        );
                    }
                    None => log(
                        out,
                        Level::Info,
                        format!("{kind:?} stop: every worker is done"),
                    ),
                }
                out.push(Effect::Stopped {
                    kind,
                    answered: gathered.missing.is_empty(),
                });
            }
            Purpose::Boot => out.push(Effect::Booted {
                refused: gathered.first_failure(),
            }),
            Purpose::Export => self.exported(gathered, now, out),
            Purpose::Resume => {
                if let Some((worker, code, message)) = gathered.first_failure() {
                    log(
                        out,
                        Level::Error,
                        format!("worker {worker} did not resume its QUIC flows: {code}: {message}"),
                    );
                }
            }
        }
    }

    fn hangup(&mut self, out: &mut Vec<Effect>) {
        if self.stopping.is_some() {
            log(out, Level::Warn, "SIGHUP during a stop: no reload");
            return;
        }
        let Some(path) = self.settings.config_path.clone() else {
            log(
                out,
                Level::Warn,
                "SIGHUP: this proxy was started without a config file; nothing to reload",
            );
            return;
        };
        log(
            out,
            Level::Info,
            format!("SIGHUP: reloading {}", path.display()),
        );
        out.push(Effect::Notify(crate::Notice::Reloading));
        self.enqueue(None, Job::Reload { path, seen: None }, out);
    }

    /// Adds a worker: every later order goes to it too.
    pub fn add_worker(&mut self, worker: WorkerId) {
        self.workers.push(worker);
    }

    /// Starts counting generations from `generation` (an upgrade's
    /// successor goes on from its predecessor's).
    pub fn resume_generation(&mut self, generation: u64) {
        self.generation = generation;
    }

    /// Starts the route sources at `slots` (their kind and location),
    /// merged with `file`, the config file's declarations (`None` without
    /// a source), which declare `routes` frontends and were read at `now`.
    pub fn start_sources(
        &mut self,
        routes: usize,
        file: Option<ConfigState>,
        slots: Vec<(SourceKind, String)>,
        now: Instant,
    ) {
        self.sources.start(routes, file, slots, now);
    }

    /// The answer of `preread sources` at `now`, which the wall clock reads
    /// `wall`.
    pub fn sources_list(&self, now: Instant, wall: SystemTime) -> ContentType {
        self.sources.list(now, wall)
    }

    /// The live workers.
    pub fn workers(&self) -> &[WorkerId] {
        &self.workers
    }

    /// The committed state.
    pub fn state(&self) -> &ConfigState {
        &self.state
    }

    /// Generations committed since the start (or since the predecessor's
    /// start, after an upgrade).
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The stop under way, if any.
    pub fn stopping(&self) -> Option<StopKind> {
        self.stopping
    }

    /// Whether a stop was ordered and every worker answered it (or its
    /// deadline passed): the shell may end.
    pub fn is_stopped(&self) -> bool {
        self.stopping.is_some() && !self.pending.any(|p| matches!(p, Purpose::Stop(_)))
    }

    /// Whether a state-changing job runs or waits (the simulation's
    /// check that nothing waits once its world is quiet).
    pub fn is_busy(&self) -> bool {
        self.jobs.is_busy()
    }

    /// When the next [`Input::Tick`] is due: the earliest deadline of an
    /// open order, or the retry of a refused merge of the route sources.
    /// `None` when nothing waits.
    pub fn next_deadline(&self) -> Option<Instant> {
        let retry = self.sources.retry_at().filter(|_| self.stopping.is_none());
        match (self.pending.next_deadline(), retry) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// How many answers the clients are owed.
    pub fn answers_owed(&self) -> usize {
        self.turns.owed()
    }

    /// The shell ends: the running and queued jobs will not finish, and
    /// their clients hear so.
    pub fn close(&mut self) -> Vec<Effect> {
        let mut out = Vec::new();
        self.fail_running(&mut out);
        out
    }
}

/// `timeout` after `now`, capped at a year (an `Instant` cannot hold any
/// duration).
pub(crate) fn deadline_after(now: Instant, timeout: Duration) -> Instant {
    const YEAR: Duration = Duration::from_secs(365 * 24 * 3600);
    now + timeout.min(YEAR)
}

/// A request as one line of JSON, for messages and logs.
pub(crate) fn describe(request: &command::proto::Request) -> String {
    serde_json::to_string(request).unwrap_or_else(|_| format!("{request:?}"))
}
