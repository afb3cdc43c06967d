//! What the coordinator tells a worker, and what the worker answers.
//!
//! Owns: the vocabulary between the control plane and the worker threads:
//! [`Order`], [`Answer`], [`Reply`] and their ids. Each order carries an
//! id; a worker answers every order exactly once. Must never: carry
//! anything a worker could block on, or a request the worker would have
//! to parse (a generation holds typed changes).

use std::os::fd::OwnedFd;
use std::sync::Arc;

// `core::net` holds the address type only: no socket can be opened from it.
use core::net::SocketAddr;

use command::answer_code::AnswerCode;
use command::generation::Generation;
use command::proto;

/// Identifies one order across all workers, so answers can be gathered.
pub type OrderId = u64;

/// A worker, by the id it was added with.
pub type WorkerId = u32;

/// Duplicates of one worker's listening sockets, for an upgrade.
pub type Listeners = Arc<Exported>;

/// What one worker hands to an upgrade's successor.
#[derive(Debug, Default)]
pub struct Exported {
    /// Its listening TCP sockets, by address.
    pub tcp: Vec<(SocketAddr, OwnedFd)>,
    /// Its QUIC listeners' UDP sockets, each with its decided flows.
    pub quic: Vec<QuicExport>,
}

/// One QUIC listener's UDP socket of one worker, and the decided flows
/// read on it, each with its socket connected to the backend. The worker
/// reads none of them until [`Order::Resume`] (the upgrade failed).
#[derive(Debug)]
pub struct QuicExport {
    pub address: SocketAddr,
    pub socket: OwnedFd,
    /// Each flow's `backend_fd` is left 0: the shell numbers the
    /// descriptors it passes.
    pub flows: Vec<(proto::HandedFlow, OwnedFd)>,
}

/// An order from the control plane.
#[derive(Debug, Clone)]
pub enum Order {
    /// Apply a routing generation the committed state already accepted
    /// (listeners, clusters, frontends, backends), all of it between two
    /// events, or none of it. Shared: every worker gets the same one.
    Apply(Arc<Generation>),
    /// Report this worker's metrics.
    Metrics,
    /// Report this worker's sessions and listeners.
    Status,
    /// Report the captured windows that match.
    Rejects(proto::QueryRejects),
    /// Hand copies (duplicates) of the listening sockets to the main
    /// thread, for an upgrade's successor. The worker keeps accepting TCP
    /// connections; it stops reading its QUIC sockets and hands their
    /// decided flows over with them, until a [`Order::Resume`] or a stop.
    ExportListeners,
    /// The upgrade failed: read the QUIC sockets and flows again. A no-op
    /// for a worker that exported nothing.
    Resume,
    /// Stop accepting; finish the open sessions, then exit within `grace`.
    SoftStop { grace_ms: u64 },
    /// Close everything now and exit.
    HardStop,
}

/// What a worker answers to one order.
#[derive(Debug, Clone)]
pub enum Answer {
    /// The order was applied (or was a no-op for this worker).
    Done,
    /// The worker could not apply it (a bind that failed, for instance).
    Refused { code: AnswerCode, message: String },
    /// The worker's counters and gauges.
    Metrics(proto::WorkerMetrics),
    /// The worker's live figures.
    Status { sessions: u64, listeners: u32 },
    /// Duplicates of the worker's listening sockets, by address.
    Listeners(Listeners),
    /// The worker's captured windows, newest first.
    Rejects(Vec<proto::CapturedWindow>),
}

/// One answer, tagged with the worker and the order it answers.
#[derive(Debug, Clone)]
pub struct Reply {
    pub worker: WorkerId,
    pub order: OrderId,
    pub answer: Answer,
}
