//! The channels between the command server (main thread) and the worker
//! threads. What travels on them is the coordinator's vocabulary
//! ([`coordinator::orders`]): each order carries an id; the worker answers
//! every order exactly once, on the reply channel, then wakes the main
//! thread.
//!
//! Owns: [`WorkerHandle`] and [`WorkerInbox`], the two ends. Must never:
//! carry anything the worker could block on.

use std::sync::Arc;
use std::sync::mpsc::{Receiver, Sender};

pub use coordinator::orders::{Answer, Order, OrderId, Reply};
use mio::Waker;

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
