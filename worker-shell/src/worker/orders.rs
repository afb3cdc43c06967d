//! What the main thread tells a worker, and what the worker answers.
//!
//! Owns: the messages between the command server (main thread) and the
//! worker threads. Each order carries an id; the worker answers every order
//! exactly once, on the reply channel, then wakes the main thread. Must
//! never: carry anything the worker could block on.

use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, Sender};

use command::generation::Generation;
use command::proto;

use crate::answer_code::AnswerCode;
use mio::Waker;

/// Identifies one order across all workers, so answers can be gathered.
pub type OrderId = u64;

/// An order from the main thread.
#[derive(Debug, Clone)]
pub enum Order {
    /// Apply a routing generation the main thread's `ConfigState` already
    /// accepted (listeners, clusters, frontends, backends), all of it
    /// between two events, or none of it. Shared: every worker gets the
    /// same one.
    Apply(Arc<Generation>),
    /// Report this worker's metrics.
    Metrics,
    /// Report this worker's sessions and listeners.
    Status,
    /// Report the captured windows that match.
    Rejects(proto::QueryRejects),
    /// Hand copies (duplicates) of the listening sockets to the main
    /// thread, for an upgrade's successor. The worker keeps accepting.
    ExportListeners,
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
    Listeners(Arc<Vec<(SocketAddr, OwnedFd)>>),
    /// The worker's captured windows, newest first.
    Rejects(Vec<proto::CapturedWindow>),
}

/// One answer, tagged with the worker and the order it answers.
#[derive(Debug, Clone)]
pub struct Reply {
    pub worker: u32,
    pub order: OrderId,
    pub answer: Answer,
}

/// The main thread's end of one worker: send orders, wake it.
#[derive(Debug)]
pub struct WorkerHandle {
    pub id: u32,
    orders: Sender<(OrderId, Order)>,
    waker: Arc<Waker>,
}

impl WorkerHandle {
    pub fn new(id: u32, orders: Sender<(OrderId, Order)>, waker: Arc<Waker>) -> Self {
        Self { id, orders, waker }
    }

    /// Queues an order and wakes the worker. Fails only when the worker
    /// thread is gone.
    pub fn send(&self, order_id: OrderId, order: Order) -> Result<(), WorkerGone> {
        self.orders
            .send((order_id, order))
            .map_err(|_| WorkerGone { worker: self.id })?;
        // A failed wake means the worker's poll is gone too; the next send
        // reports it.
        let _ = self.waker.wake();
        Ok(())
    }
}

/// A worker's thread has ended: its order channel is closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkerGone {
    pub worker: u32,
}

impl std::fmt::Display for WorkerGone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "worker {} is gone", self.worker)
    }
}

impl std::error::Error for WorkerGone {}

/// The worker's end: take orders, send replies and wake the main thread.
#[derive(Debug)]
pub struct WorkerInbox {
    pub id: u32,
    pub orders: Receiver<(OrderId, Order)>,
    pub replies: Sender<Reply>,
    pub main_waker: Arc<Waker>,
}

impl WorkerInbox {
    /// Sends one answer and wakes the main thread.
    pub fn answer(&self, order: OrderId, answer: Answer) {
        // The main thread gone means the process is stopping; nothing to do.
        if self
            .replies
            .send(Reply {
                worker: self.id,
                order,
                answer,
            })
            .is_ok()
        {
            let _ = self.main_waker.wake();
        }
    }
}
