//! The worker: one thread with its own mio `Poll`, its own `SO_REUSEPORT`
//! listening sockets and its own copy of the routing state; what the
//! workers must agree on (caps, per-IP counts, backend health) they share
//! through `crate::shared`.
//!
//! Owns: every data-path socket and session of its thread. Must never:
//! share a session or a buffer with another thread, or block.

mod accept;
mod accept_retry;
pub mod access;
mod backend_socket;
pub mod backends;
mod close;
pub mod configured;
mod connect;
mod ctx;
mod defer;
mod drive;
mod event_loop;
mod farewell;
pub mod io;
mod keepalive;
pub mod lanes;
pub mod listen;
pub mod metrics;
pub mod orders;
mod passive;
pub mod pipe;
pub mod pipe_pool;
pub mod pool;
mod preread;
pub mod quic;
pub mod rejects;
pub mod runtime;
pub mod session;
mod settings;
pub mod splice;
mod timer;
pub mod timers;
mod tokens;
pub mod unrouted;

use std::io as stdio;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::mpsc::{self, Sender};
use std::thread::JoinHandle;

use mio::{Poll, Waker};

use crate::access_log::AccessLogQueue;
use crate::shared::Shared;

use orders::{Reply, WorkerHandle, WorkerInbox};
pub use settings::WorkerSettings;
use tokens::WAKER_TOKEN;

/// What an upgrade's old process hands one worker of its successor.
#[derive(Debug, Default)]
pub struct Inheritance {
    /// Listening TCP sockets, by address.
    pub tcp: Vec<(SocketAddr, std::net::TcpListener)>,
    /// QUIC listeners' UDP sockets, with their decided flows.
    pub quic: Vec<quic::upgrade::InheritedQuic>,
}

/// Starts worker `id` on its own thread, sharing `shared` with the other
/// workers. It answers every order on `replies` and wakes `main_waker`
/// after each answer. `inherited` are sockets (and QUIC flows) an upgrade
/// handed over: the worker listens on them when the state says to listen
/// at their address, instead of binding. Its sessions' access-log lines go
/// to `access_log`.
pub fn spawn(
    id: u32,
    settings: (WorkerSettings, Arc<Shared>),
    replies: Sender<Reply>,
    main_waker: Arc<Waker>,
    inherited: Inheritance,
    access_log: AccessLogQueue,
) -> stdio::Result<(WorkerHandle, JoinHandle<()>)> {
    let poll = Poll::new()?;
    let waker = Arc::new(Waker::new(poll.registry(), WAKER_TOKEN)?);
    let (orders_tx, orders_rx) = mpsc::channel();
    let inbox = WorkerInbox {
        id,
        orders: orders_rx,
        replies,
        main_waker,
    };
    let mut worker = event_loop::Worker::new(id, poll, settings, inbox, access_log, inherited)?;
    let thread = std::thread::Builder::new()
        .name(format!("preread-worker-{id}"))
        .spawn(move || worker.run())?;
    Ok((WorkerHandle::new(id, orders_tx, waker), thread))
}
