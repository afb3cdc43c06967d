//! Everything a worker's sessions share: the context every drive, connect
//! and close runs against, and what one of them concludes.
//!
//! Owns: [`Ctx`] (the poll registry, the routing runtime, the buffer and
//! pipe pools, the timers, the metrics, the access-log queue, the ring of
//! rejected windows, the load-balancing generator, the unrouted counts, the
//! process-wide shared state, the dirty list and the gate of the shortage
//! warnings), the kinds of session timer, and [`Drive`]. Must
//! never: hold a session (sessions live in the event loop's slab, and are
//! handed to each function beside the context), or block.

use std::sync::Arc;
use std::time::Instant;

use mio::Registry;
use preread_core::rng::Rng;
use preread_core::step::{StepTimer, TimerAction};

use super::metrics::Metrics;
use super::pipe_pool::PipePool;
use super::pool::BufferPool;
use super::rejects::RejectRing;
use super::runtime::Runtime;
use super::session::Session;
use super::settings::WorkerSettings;
use super::timers::{TimerId, Timers};
use super::unrouted::Unrouted;
use crate::access_log::AccessLogQueue;
use crate::shared::Shared;
use crate::shared::shortage::ShortageLog;
use crate::vocabulary::Outcome;

/// Why a session timer was armed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TimerKind {
    Preread,
    ServerFirst,
    Silent,
    Connect,
    /// A backend socket this host could not open is tried again.
    LocalRetry,
    FrontIdle,
    BackIdle,
}

impl From<StepTimer> for TimerKind {
    fn from(timer: StepTimer) -> Self {
        match timer {
            StepTimer::Preread => Self::Preread,
            StepTimer::ServerFirst => Self::ServerFirst,
            StepTimer::Silent => Self::Silent,
        }
    }
}

/// A timer names its session (by slab key) and why it was armed.
pub(super) type TimerKey = (usize, TimerKind);

/// What one drive, timer or connect step concluded for its session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Drive {
    /// The session lives on; `progressed` says whether anything moved (the
    /// loop guard counts drives that did not).
    Continue { progressed: bool },
    /// The session is over: the caller closes it with this outcome.
    End(Outcome),
}

/// The context of one worker's sessions.
#[derive(Debug)]
pub(super) struct Ctx {
    pub(super) id: u32,
    pub(super) registry: Registry,
    pub(super) settings: WorkerSettings,
    pub(super) runtime: Runtime,
    pub(super) pool: BufferPool,
    pub(super) pipes: PipePool,
    pub(super) timers: Timers<TimerKey>,
    pub(super) metrics: Metrics,
    /// Where closed sessions' lines are offered to the access-log writer.
    pub(super) access_log: AccessLogQueue,
    /// The last rejected and fallback windows, for `preread rejects`.
    pub(super) rejects: RejectRing,
    pub(super) rng: Rng,
    /// Unrouted connections per listener and client IP.
    pub(super) unrouted: Unrouted,
    /// The session cap, the health and the counts every worker shares.
    pub(super) shared: Arc<Shared>,
    /// Sessions to drive in this turn.
    pub(super) dirty: Vec<usize>,
    /// Keeps the warnings about backend sockets this host could not open
    /// to one per period.
    pub(super) local_errors_log: ShortageLog,
}

impl Ctx {
    /// Queues session `key` for a drive in this turn, once.
    pub(super) fn requeue(&mut self, key: usize, session: &mut Session) {
        if !session.dirty {
            session.dirty = true;
            self.dirty.push(key);
        }
    }

    /// Arms a timer of session `key`.
    pub(super) fn schedule(&mut self, key: usize, kind: TimerKind, at: Instant) -> TimerId {
        self.timers.schedule(at, (key, kind))
    }

    /// Disarms a timer, if one is held.
    pub(super) fn cancel(&mut self, timer: Option<TimerId>) {
        if let Some(id) = timer {
            self.timers.cancel(id);
        }
    }

    /// Performs one of the preread step's timer actions on the slot that
    /// holds that timer.
    pub(super) fn step_timer(
        &mut self,
        key: usize,
        timer: StepTimer,
        action: TimerAction,
        slot: &mut Option<TimerId>,
    ) {
        match action {
            TimerAction::Keep => {}
            TimerAction::Arm(at) => {
                debug_assert!(slot.is_none(), "the step arms a timer it does not hold");
                *slot = Some(self.schedule(key, timer.into(), at));
            }
            TimerAction::Cancel => self.cancel(slot.take()),
        }
    }
}
