//! Outside the event loop: the boot replay of the state on the workers,
//! the stop of a boot that failed, and the blocking wait both use.
//!
//! Owns: [`BootError`] and the bounded wait for one order's answers
//! before (or after) [`CommandServer::run`]. Must never: wait on a worker
//! without a deadline.

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::mpsc::RecvTimeoutError;
use std::time::Instant;

use command::generation::{Generation, plan};
use command::listener_key::ListenerKey;
use command::state::ConfigState;
use command::validate::ValidationError;
use coordinator::Input;

use super::{CommandServer, StopKind};
use preread_worker::answer_code::AnswerCode;
use preread_worker::worker::listen::ensure_unbound;

/// A boot request a worker refused (or did not answer).
#[derive(Debug, Clone)]
pub struct BootError {
    /// The request, as JSON.
    pub request: String,
    /// The worker that refused or did not answer.
    pub worker: u32,
    /// The worker's code, or [`AnswerCode::WorkerTimeout`].
    pub code: AnswerCode,
    /// What went wrong, naming the worker.
    pub message: String,
}

impl fmt::Display for BootError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "booting {}: {}: {}",
            self.request, self.code, self.message
        )
    }
}

impl std::error::Error for BootError {}

impl CommandServer {
    /// Replays the state on the workers as one generation. Returns how
    /// many requests it holds. A refusal (or a missing answer) fails the
    /// boot.
    pub fn boot(&mut self) -> Result<usize, BootError> {
        let state = self.coordinator.state();
        if self.settings.check_unbound {
            let fresh = newly_listening(&ConfigState::default(), state);
            for address in fresh.into_iter().filter(|a| !self.adopted.contains(a)) {
                if let Err(e) = ensure_unbound(address) {
                    return Err(BootError {
                        request: format!("listen on {address}"),
                        worker: 0,
                        code: AnswerCode::WorkerRefused,
                        message: format!("cannot listen on {address}: {e}"),
                    });
                }
            }
        }
        let generation = match Generation::replay(state) {
            Some(generation) => generation,
            None => {
                let requests = state.generate_requests();
                let mut scratch = ConfigState::default();
                let planned = plan::<ValidationError>(&mut scratch, requests, |_, _| Ok(()));
                if let Some((request, error)) = planned.skipped.first() {
                    return Err(BootError {
                        request: describe(request),
                        worker: 0,
                        code: error.code.into(),
                        message: error.message.clone(),
                    });
                }
                // Equal tables built on the scratch state would be a
                // second copy of every route: the workers share the state's.
                let mut generation = planned.generation;
                generation.share_routes_of(state);
                generation
            }
        };
        let count = generation.len();
        if count > 0 {
            self.booted = None;
            self.feed(Input::Boot {
                generation: Arc::new(generation),
            });
            self.wait_until(|server| server.booted.is_some());
            let refused = match self.booted.take() {
                Some(Ok(())) => None,
                Some(Err(refused)) => Some(refused),
                // The wait ended with no answer: no worker is left.
                None => Some((
                    0,
                    AnswerCode::WorkerRefused,
                    "no worker is left to boot".to_owned(),
                )),
            };
            if let Some((worker, code, message)) = refused {
                return Err(BootError {
                    request: format!("the state's {count} request(s)"),
                    worker,
                    code,
                    message,
                });
            }
        }
        self.shared
            .registry
            .sync(self.coordinator.state(), Instant::now());
        Ok(count)
    }

    /// Stops the workers and waits (bounded) for their answers, outside of
    /// [`run`](Self::run): for a boot that failed. Returns whether every
    /// worker answered.
    pub fn stop_workers(&mut self, kind: StopKind) -> bool {
        self.stopped = None;
        self.feed(Input::Stop(kind));
        self.wait_until(|server| server.coordinator.is_stopped());
        self.stopped.take().unwrap_or(false)
    }

    /// Blocks, feeding the coordinator the workers' answers and the time,
    /// until `done` or nothing is awaited any more (boot and stop outside
    /// of `run`). Every wait is bounded by an order's deadline.
    fn wait_until(&mut self, done: impl Fn(&Self) -> bool) {
        loop {
            while let Some(input) = self.inbox.pop_front() {
                self.feed(input);
            }
            if done(self) {
                return;
            }
            let Some(deadline) = self.coordinator.next_deadline() else {
                return;
            };
            let wait = deadline.saturating_duration_since(Instant::now());
            match self.replies.recv_timeout(wait) {
                Ok(reply) => self.feed(Input::WorkerAnswer {
                    worker: reply.worker,
                    order: reply.order,
                    answer: reply.answer,
                }),
                Err(RecvTimeoutError::Timeout) => self.feed(Input::Tick),
                Err(RecvTimeoutError::Disconnected) => {
                    // No worker can answer any more: each is gone.
                    for worker in self.worker_ids() {
                        self.workers.retain(|w| w.id != worker);
                        self.feed(Input::WorkerGone { worker });
                    }
                    while let Some(input) = self.inbox.pop_front() {
                        self.feed(input);
                    }
                    if !done(self) {
                        // Every worker is gone and counted as refused:
                        // nothing that is still awaited can come.
                        return;
                    }
                }
            }
        }
    }
}

/// The addresses of the TCP listeners `after` listens on (active
/// listeners) that `before` does not: the ones the workers are about to
/// bind. (The check binds TCP; a QUIC listener's UDP port is the workers'.)
fn newly_listening(before: &ConfigState, after: &ConfigState) -> Vec<SocketAddr> {
    let listening = |state: &ConfigState, key: &ListenerKey| {
        state.listener(key).is_some_and(|l| l.active != Some(false))
    };
    after
        .listeners()
        .filter_map(|l| ListenerKey::of_config(l).ok())
        .filter(|key| !key.quic && listening(after, key) && !listening(before, key))
        .map(|key| key.address)
        .collect()
}

/// A request as one line of JSON, for messages and logs.
fn describe(request: &command::proto::Request) -> String {
    serde_json::to_string(request).unwrap_or_else(|_| format!("{request:?}"))
}
