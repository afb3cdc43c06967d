//! What the coordinator asks the shell to do: [`Effect`].
//!
//! Owns: the vocabulary of the coordinator's side. Must never: ask for
//! something the shell could not bound in time (every read, append and
//! handover is bounded by the shell; every worker order by a deadline the
//! coordinator holds).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use command::answer_code::AnswerCode;
use command::change::Change;
use command::generation::Generation;
use command::proto;
use command::sources::{Exclusion, SourceKind};

use crate::input::{ClientId, JobId, Query, StopKind, UpgradeRequest};
use crate::orders::{Answer, Listeners, Order, OrderId, WorkerId};

/// What systemd hears (the shell sends it with `sd_notify`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notice {
    /// A SIGHUP reload begins.
    Reloading,
    /// A SIGHUP reload is over, with its summary.
    Ready(String),
    /// The proxy stops, and why.
    Stopping(String),
}

/// One thing for the shell to do. The shell performs a batch of effects
/// in its order.
#[derive(Debug)]
pub enum Effect {
    /// Send `what` to one worker, as order `order`. A send that fails
    /// (the worker is gone) is reported with [`Input::WorkerGone`].
    ///
    /// [`Input::WorkerGone`]: crate::Input::WorkerGone
    Send {
        worker: WorkerId,
        order: OrderId,
        what: Order,
    },
    /// Answer a client.
    Answer {
        client: ClientId,
        response: proto::Response,
    },
    /// Every worker answered a client's query: the shell renders the
    /// answer (it holds the process's counters) and sends it.
    Report {
        client: ClientId,
        query: Query,
        answers: Vec<(WorkerId, Answer)>,
    },
    /// The client's turn for a request the shell answers itself
    /// ([`Request::Local`](crate::Request::Local)), from the committed
    /// state as it is now.
    Serve {
        client: ClientId,
        request: proto::Request,
    },
    /// Read the config file at `path` (checked against what the CLI saw,
    /// when `seen` is given) and hand it back with
    /// [`Input::ConfigRead`](crate::Input::ConfigRead).
    ReadConfig {
        job: JobId,
        path: PathBuf,
        seen: Option<proto::ReloadFile>,
    },
    /// Read the state file at `path` and hand it back with
    /// [`Input::StateFileRead`](crate::Input::StateFileRead).
    ReadStateFile { job: JobId, path: String },
    /// A generation was committed: append its changes to the journal
    /// (`automatic_state_save`; a no-op without it), sync, and say so with
    /// [`Input::Journaled`](crate::Input::Journaled). The job is answered
    /// only then.
    AppendJournal { job: JobId, changes: Vec<Change> },
    /// A generation the workers were sent is over: committed (the state
    /// holds it) or not (what it created must go from what the process
    /// shares, the backend registry).
    Settled {
        generation: Arc<Generation>,
        committed: bool,
    },
    /// Every worker exported its listening sockets: start the successor
    /// with them, hand over, and say how it went with
    /// [`Input::UpgradeFinished`](crate::Input::UpgradeFinished). No
    /// change runs until then.
    StartUpgrade {
        job: JobId,
        request: UpgradeRequest,
        exported: Vec<(WorkerId, Listeners)>,
    },
    /// The boot's generation was answered: `None` when every worker
    /// applied it, else the first refusal (or missing answer).
    Booted {
        refused: Option<(WorkerId, AnswerCode, String)>,
    },
    /// A stop's order was answered by every worker (`answered`), or its
    /// deadline passed first.
    Stopped { kind: StopKind, answered: bool },
    /// Tell systemd.
    Notify(Notice),
    /// The routes of a source that counts revisions (etcd) are served as
    /// of `revision`, by routing generation `generation`, with these
    /// fragments left out: the shell publishes it (the status key, the
    /// metrics).
    SourceApplied {
        kind: SourceKind,
        revision: i64,
        generation: u64,
        excluded: Vec<Exclusion>,
    },
    /// A log line.
    Log { level: log::Level, message: String },
    /// A log line that says how long something took: `before`, the
    /// milliseconds from `since` to when the shell logs it, ` ms`, `after`.
    LogElapsed {
        level: log::Level,
        since: Instant,
        before: String,
        after: String,
    },
}

/// Pushes a log line onto `out`.
pub(crate) fn log(out: &mut Vec<Effect>, level: log::Level, message: impl Into<String>) {
    out.push(Effect::Log {
        level,
        message: message.into(),
    });
}
