//! What the preread step tells its caller to do.
//!
//! Owns: [`Actions`] and the vocabulary in it: timer changes ([`TimerPlan`],
//! [`TimerAction`]), leaving the preread stage ([`Left`]), what comes next
//! ([`Next`], [`Close`]), and the record of what the core was fed
//! ([`CoreCall`], [`Fed`]). Must never: hold a borrow of the window, or
//! carry anything the caller could act on twice (each action is one-shot).

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::output::{Output, Route};
use crate::reject::RejectReason;

use super::alert::Farewell;

/// One of the step's three timers. The caller holds at most one of each
/// per session and reports it with `Event::Timer` when it fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StepTimer {
    /// The preread deadline: the ClientHello must be complete by then.
    Preread,
    /// The listener's server-first timer, armed at accept.
    ServerFirst,
    /// The silence timer, armed at accept for the preread timeout: a
    /// client that has sent no byte by then is closed. Cancelled by the
    /// first byte, from when the preread deadline counts.
    Silent,
}

/// What to do with one timer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TimerAction {
    /// Leave it as it is.
    #[default]
    Keep,
    /// Arm it to fire at this instant (it is not armed now).
    Arm(Instant),
    /// Disarm it (it is armed now).
    Cancel,
}

/// The changes to the three timers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TimerPlan {
    /// The preread deadline's timer.
    pub preread: TimerAction,
    /// The server-first timer.
    pub server_first: TimerAction,
    /// The silence timer.
    pub silent: TimerAction,
}

impl TimerPlan {
    /// The action for `timer`.
    pub fn get(&self, timer: StepTimer) -> TimerAction {
        match timer {
            StepTimer::Preread => self.preread,
            StepTimer::ServerFirst => self.server_first,
            StepTimer::Silent => self.silent,
        }
    }
}

/// The session left the preread stage, once: lower the preread gauge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Left {
    /// The preread duration to record, from the first byte to the exit;
    /// `None` for a client that never spoke (a health check, an idle or
    /// server-first client), whose "duration" would only be a timeout.
    pub sample: Option<Duration>,
}

/// How a session ends without a backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Close {
    /// The client closed before it spoke: a health check. No reject is
    /// counted and no access-log line is written.
    Silent,
    /// The client has not spoken, and a timeout ran out: the silence timer
    /// (no byte since the accept), the preread deadline (a load balancer's
    /// PROXY header, then nothing) or the front idle timeout. The shell
    /// refuses it (`refused:silent_timeout`); it is no reject reason, since
    /// the client sent nothing to judge.
    SilentTimeout,
    /// Refused by the core (or timed out after speaking), for this reason.
    Rejected(RejectReason),
}

/// What the caller does after performing the timer and gauge changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// Still prereading: read again while the socket stays readable, with
    /// the budget of `PrereadStep::read_budget`.
    Read,
    /// Routed: connect to a backend of `route.cluster` and replay the
    /// window as [`crate::step::handoff`] plans it.
    Connect(Arc<Route>),
    /// Close the connection.
    Close(Close),
    /// Nothing to do: an event for a step that has already left preread.
    Ignore,
}

/// An input the step fed to the core, by kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fed {
    /// `Input::Bytes` with a window of this many bytes.
    Bytes(usize),
    /// `Input::Timeout`.
    Timeout,
    /// `Input::FrontClosed`.
    FrontClosed,
}

/// One call of the core: what it was fed and what it answered. The worker
/// does not need it; traces and the simulation's checks do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CoreCall {
    /// The input, by kind.
    pub fed: Fed,
    /// The core's answer.
    pub output: Output,
}

/// Everything one event asks of the caller, in this order: the timer
/// changes, the gauge (`left`), then `next`.
///
/// `#[non_exhaustive]`: the step may ask for more in later versions; a
/// caller reads the fields it acts on.
#[must_use = "the caller must perform the step's actions"]
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Actions {
    /// Timers to arm or cancel.
    pub timers: TimerPlan,
    /// Set on the one event that ends the preread stage.
    pub left: Option<Left>,
    /// What comes next.
    pub next: Next,
    /// With `Next::Close` of a reject: what the client's socket gets first.
    pub farewell: Farewell,
    /// The core call this event made, if any.
    pub core: Option<CoreCall>,
}

impl Actions {
    /// Nothing changes; read on.
    pub(crate) fn read() -> Self {
        Self {
            timers: TimerPlan::default(),
            left: None,
            next: Next::Read,
            farewell: Farewell::Fin,
            core: None,
        }
    }

    /// An event for a step that already left preread.
    pub(crate) fn ignore() -> Self {
        Self {
            next: Next::Ignore,
            ..Self::read()
        }
    }
}
