//! Outside the event loop: the boot replay of the state on the workers,
//! the stop of a boot that failed, and the blocking wait both use.
//!
//! Owns: [`BootError`] and the bounded wait for one order's answers
//! before (or after) [`CommandServer::run`]. Must never: wait on a worker
//! without a deadline.

use std::fmt;
use std::sync::Arc;
use std::sync::mpsc::RecvTimeoutError;
use std::time::{Duration, Instant};

use command::generation::{Generation, plan};
use command::state::ConfigState;
use command::validate::ValidationError;

use super::pending::Gathered;
use super::{CommandServer, Purpose, StopKind, changes, deadline_after, describe};
use preread_worker::answer_code::AnswerCode;
use preread_worker::worker::listen::ensure_unbound;
use preread_worker::worker::orders::{Order, OrderId};

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
        if self.settings.check_unbound {
            let fresh = changes::newly_listening(&ConfigState::default(), &self.state);
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
        let generation = match Generation::replay(&self.state) {
            Some(generation) => generation,
            None => {
                let requests = self.state.generate_requests();
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
                generation.share_routes_of(&self.state);
                generation
            }
        };
        let count = generation.len();
        if count == 0 {
            self.shared.registry.sync(&self.state, Instant::now());
            return Ok(0);
        }
        let id = self.broadcast(
            Order::Apply(Arc::new(generation)),
            Purpose::Boot,
            None,
            self.settings.order_timeout,
        );
        let gathered = self.wait_for(id);
        if let Some((worker, code, message)) = gathered.first_failure() {
            return Err(BootError {
                request: format!("the state's {count} request(s)"),
                worker,
                code,
                message,
            });
        }
        self.shared.registry.sync(&self.state, Instant::now());
        Ok(count)
    }

    /// Stops the workers and waits (bounded) for their answers, outside of
    /// [`run`](Self::run): for a boot that failed. Returns whether every
    /// worker answered.
    pub fn stop_workers(&mut self, kind: StopKind) -> bool {
        self.stopping = Some(kind);
        crate::notify::stopping(&format!("{kind:?} stop"));
        let id = self.send_stop(kind);
        let gathered = self.wait_for(id);
        gathered.missing.is_empty()
    }

    /// Blocks until order `id` is complete or timed out (boot and stop
    /// outside of `run`).
    pub(super) fn wait_for(&mut self, id: OrderId) -> Gathered<Purpose> {
        loop {
            if let Some(at) = self.completed.iter().position(|g| g.id == id)
                && let Some(gathered) = self.completed.remove(at)
            {
                return gathered;
            }
            let now = Instant::now();
            let wait = self
                .pending
                .next_deadline()
                .map_or(Duration::ZERO, |d| d.saturating_duration_since(now));
            match self.replies.recv_timeout(wait) {
                Ok(reply) => self.completed.extend(self.pending.record(reply)),
                Err(RecvTimeoutError::Timeout) => {
                    let expired = self.pending.expire(Instant::now());
                    if expired.is_empty() && self.pending.next_deadline().is_none() {
                        // Nothing open: `id` was never opened or already taken.
                        return Gathered {
                            id,
                            purpose: Purpose::Boot,
                            answers: Vec::new(),
                            missing: self.worker_ids(),
                        };
                    }
                    self.completed.extend(expired);
                }
                Err(RecvTimeoutError::Disconnected) => {
                    // No worker can answer any more: every open order is over.
                    let far = deadline_after(Duration::MAX);
                    self.completed.extend(self.pending.expire(far));
                    if !self.completed.iter().any(|g| g.id == id) {
                        return Gathered {
                            id,
                            purpose: Purpose::Boot,
                            answers: Vec::new(),
                            missing: self.worker_ids(),
                        };
                    }
                }
            }
        }
    }
}
