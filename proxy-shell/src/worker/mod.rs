//! The worker: one thread with its own mio `Poll`, its own `SO_REUSEPORT`
//! listening sockets and its own copy of the routing state.
//!
//! Owns: every data-path socket and session of its thread. Must never:
//! share a session or a buffer with another thread, or block.

pub mod access_log;
pub mod backends;
mod close;
mod connect;
mod drive;
mod event_loop;
pub mod handoff;
pub mod listen;
pub mod metrics;
pub mod orders;
pub mod pipe;
pub mod pipe_pool;
pub mod pool;
pub mod runtime;
pub mod session;
pub mod splice;
pub mod timers;

use std::io;
use std::sync::Arc;
use std::sync::mpsc::{self, Sender};
use std::thread::JoinHandle;

use command::config::{AccessLogFormat, AccessLogTarget, GlobalSettings};
use mio::{Poll, Token, Waker};

use orders::{Reply, WorkerHandle, WorkerInbox};

/// The token of the worker's waker (orders from the main thread).
const WAKER_TOKEN: Token = Token(usize::MAX);

/// What a worker needs from the global settings.
#[derive(Debug, Clone)]
pub struct WorkerSettings {
    pub buffer_size: usize,
    /// This worker's share of the global buffer pool.
    pub max_buffers: usize,
    /// This worker's share of the global session cap.
    pub max_connections: usize,
    pub splice: bool,
    pub max_connection_attempts: u32,
    pub access_logs: AccessLogTarget,
    pub access_log_format: AccessLogFormat,
}

impl WorkerSettings {
    /// The settings of one worker out of `worker_count`: the pool and the
    /// session cap are split evenly (rounded up), since each worker admits
    /// on its own without locks.
    pub fn from_global(global: &GlobalSettings) -> Self {
        let workers = global.worker_count.max(1);
        Self {
            buffer_size: global.buffer_size,
            max_buffers: global.max_buffers.div_ceil(workers),
            max_connections: global.max_connections.div_ceil(workers),
            splice: global.splice,
            max_connection_attempts: global.max_connection_attempts.max(1),
            access_logs: global.access_logs.clone(),
            access_log_format: global.access_log_format,
        }
    }
}

/// Starts worker `id` on its own thread. It answers every order on
/// `replies` and wakes `main_waker` after each answer.
pub fn spawn(
    id: u32,
    settings: WorkerSettings,
    replies: Sender<Reply>,
    main_waker: Arc<Waker>,
) -> io::Result<(WorkerHandle, JoinHandle<()>)> {
    let poll = Poll::new()?;
    let waker = Arc::new(Waker::new(poll.registry(), WAKER_TOKEN)?);
    let (orders_tx, orders_rx) = mpsc::channel();
    let inbox = WorkerInbox {
        id,
        orders: orders_rx,
        replies,
        main_waker,
    };
    let mut worker = event_loop::Worker::new(id, poll, settings, inbox)?;
    let thread = std::thread::Builder::new()
        .name(format!("preread-worker-{id}"))
        .spawn(move || worker.run())?;
    Ok((WorkerHandle::new(id, orders_tx, waker), thread))
}
