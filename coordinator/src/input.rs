//! What the shell tells the coordinator: [`Input`], and the typed values
//! it carries.
//!
//! Owns: the vocabulary of the shell's side of the coordinator. Must
//! never: hold a socket, a file or a channel: an input is a value, so the
//! simulation can make any of them.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use command::config::ConfigProblem;
use command::generation::Generation;
use command::proto;
use command::sources::{Fragment, SourceKind};
use command::state::ConfigState;
use command::state_file::StateFileError;

use crate::orders::{Answer, OrderId, WorkerId};

/// How the proxy stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopKind {
    /// Stop accepting, let sessions finish within the grace.
    Soft,
    /// Close everything now.
    Hard,
}

/// One client of the command socket, for as long as it is connected: the
/// shell never gives a later client the id of an earlier one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClientId(pub u64);

/// A job the coordinator asked the shell to do something for (a file to
/// read, a journal to append to, a handover to run): the input that
/// answers names it back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct JobId(pub u64);

/// A read-only question for the workers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Query {
    Status,
    Metrics {
        series_only: bool,
    },
    /// The captured windows that match.
    Rejects(proto::QueryRejects),
}

/// `preread upgrade`, as the coordinator queues it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UpgradeRequest {
    /// The binary to start; the running one's when `None`.
    pub binary: Option<PathBuf>,
    /// How long the successor has to take over; the shell's default when
    /// `None`.
    pub takeover: Option<Duration>,
}

/// A client's request, typed at the edge.
#[derive(Debug, Clone)]
pub enum Request {
    /// One add/update/remove/activate/deactivate request.
    Change(proto::Request),
    /// One part of a batch (`apply_changes`): queued with its last part.
    BatchPart(proto::ChangeBatch),
    /// `preread reload` of a file the proxy reads itself, the one the CLI
    /// saw.
    ReloadFile(proto::ReloadFile),
    /// `state load`.
    LoadState { path: String },
    /// A question for the workers.
    Query(Query),
    /// A soft or hard stop.
    Stop(StopKind),
    /// `preread upgrade`.
    Upgrade(UpgradeRequest),
    /// A request the shell answers itself from the committed state (the
    /// listings, `state save`): handed back in [`Effect::Serve`] at the
    /// client's turn.
    ///
    /// [`Effect::Serve`]: crate::Effect::Serve
    Local(proto::Request),
}

/// Why a reload read nothing it could apply.
#[derive(Debug)]
pub enum Unread {
    /// The file cannot be read, or is not the one the CLI saw: the CLI
    /// sends its declarations instead. The message says which.
    Unseen(String),
    /// The config has problems (each with its location and code).
    Refused(Vec<ConfigProblem>),
}

/// A route source's report.
#[derive(Debug, Clone)]
pub enum SourceReport {
    /// A whole read of the source.
    Synced {
        kind: SourceKind,
        fragments: Vec<Fragment>,
        at: SystemTime,
    },
    /// A read that failed: the last good fragments stay.
    Failed { kind: SourceKind, error: String },
    /// What changed in a source that says so (etcd): the fragments put
    /// (new or changed) and the names deleted, as of the store's
    /// `revision`. Merged incrementally: only these are tried again, with
    /// the fragments excluded so far.
    Changed {
        kind: SourceKind,
        revision: i64,
        put: Vec<Fragment>,
        deleted: Vec<String>,
        at: SystemTime,
    },
}

/// Why an upgrade's successor did not take over, as the shell words it.
pub type UpgradeFailure = Box<dyn std::error::Error + Send + Sync>;

/// What the shell tells the coordinator.
#[derive(Debug)]
#[allow(
    clippy::large_enum_variant,
    reason = "an input is handled at once and never stored: boxing the request would add an allocation per request and save nothing"
)]
pub enum Input {
    /// A client's request, in the order the client sent it.
    Request { client: ClientId, request: Request },
    /// A client left: its answers still owed are dropped, the parts of a
    /// batch it sent are forgotten; its running job still completes.
    ClientGone { client: ClientId },
    /// A worker's answer to an order.
    WorkerAnswer {
        worker: WorkerId,
        order: OrderId,
        answer: Answer,
    },
    /// A worker's thread is gone: it counts as refused for every order it
    /// owes, and is sent nothing more.
    WorkerGone { worker: WorkerId },
    /// Time passed: expire the orders whose deadline is due.
    Tick,
    /// The state a boot replays on the workers, as one generation
    /// (answered by [`Effect::Booted`](crate::Effect::Booted)).
    Boot { generation: Arc<Generation> },
    /// SIGHUP: reload the config file the proxy started from.
    Hangup,
    /// A stop for a reason of the shell (a signal, a boot that failed).
    Stop(StopKind),
    /// The text of the file an [`Effect::ReadConfig`](crate::Effect::ReadConfig)
    /// asked for.
    ConfigRead {
        job: JobId,
        read: Result<String, Unread>,
    },
    /// The state file an [`Effect::ReadStateFile`](crate::Effect::ReadStateFile)
    /// asked for.
    StateFileRead {
        job: JobId,
        read: Result<ConfigState, StateFileError>,
    },
    /// The journal append of an
    /// [`Effect::AppendJournal`](crate::Effect::AppendJournal) is synced,
    /// or failed.
    Journaled {
        job: JobId,
        saved: Result<(), StateFileError>,
    },
    /// A route source reported.
    SourceReport(SourceReport),
    /// The handover of an [`Effect::StartUpgrade`](crate::Effect::StartUpgrade)
    /// ended: the successor's pid, or why it did not take over.
    UpgradeFinished {
        job: JobId,
        outcome: Result<u32, UpgradeFailure>,
    },
}
