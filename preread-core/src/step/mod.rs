//! The preread step: the whole policy of the shell around the core, as a
//! pure state machine. The worker performs its actions on real sockets, the
//! simulation on simulated ones, and `preread inspect` on a capture
//! delivered as reads: all three run this code, none models it.
//!
//! Owns: per connection, from accept to the end of the preread stage:
//! - the read budget (the effective cap, [`PrereadListener`]) and the
//!   window's growth up to it ([`PrereadStep::window_capacity`]);
//! - which core input an event becomes (bytes before the EOF that came with
//!   them; a close; a timer), with the whole window every time;
//! - the three timers: the server-first timer armed at accept and cancelled
//!   once the client spoke (a load balancer's PROXY header is not the
//!   client speaking), the silence timer armed at accept for the preread
//!   timeout and cancelled by the first byte, the preread timer armed once
//!   at the first deadline;
//! - leaving the stage exactly once (the gauge, the duration sample, both
//!   timers cancelled), whatever ends it;
//! - what ends it: connect to a cluster, close silently, refuse a client
//!   that stayed silent past a timeout, or close with a reject reason; a
//!   catch-all listener connects at accept, unread, or, behind a load
//!   balancer (`expect_proxy`), once its PROXY header is complete;
//! - what a rejected client is told ([`Farewell`]: the fatal alert a TLS
//!   server would send, a bare close, or a reset, per [`RejectWith`]);
//! - the PROXY handoff of the routed cluster ([`handoff`]).
//!
//! Must never: perform I/O, read a clock (`now` comes with every call),
//! draw randomness, or act on an event after the stage ended.

mod actions;
pub(crate) mod alert;
mod handoff;
mod listener;

use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

pub use actions::{Actions, Close, CoreCall, Fed, Left, Next, StepTimer, TimerAction, TimerPlan};
pub use alert::{Farewell, RejectWith};
pub use handoff::{Handoff, ProxyMode, handoff};
pub use listener::PrereadListener;

use crate::output::{Input, Output, Route};
use crate::preread::{SniPrereadCore, deadline_after};
use crate::reject::RejectReason;
use crate::window::{read_budget, window_capacity};

/// What happened to a session in the preread stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event<'a> {
    /// A read returned. `added` bytes grew the window to `window` (the
    /// whole window, from the connection's first byte). `eof` is set when
    /// the read also saw the client's FIN, or failed: the bytes that came
    /// with it are decided on first, and the caller sees the EOF again on
    /// its next read.
    Read {
        /// The whole window.
        window: &'a [u8],
        /// Bytes this read added.
        added: usize,
        /// The client closed (or the read failed).
        eof: bool,
    },
    /// One of the step's timers fired (the caller no longer holds it).
    Timer(StepTimer),
    /// The listener's front idle timeout expired.
    Idle,
}

/// Where the step is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Prereading: the core has not decided.
    Reading,
    /// Done. `preread_time` is from the first byte (or the accept) to the
    /// exit; `None` for a catch-all session, which never prereads.
    Left { preread_time: Option<Duration> },
}

/// Which of the step's timers the caller holds.
#[derive(Debug, Clone, Copy, Default)]
struct Armed {
    preread: bool,
    server_first: bool,
    /// The silence timer, with when it is due.
    silent: Option<Instant>,
}

/// One session's preread, from accept to its one exit.
#[derive(Debug)]
pub struct PrereadStep {
    /// Built at the first input: a connection that has sent nothing holds
    /// a pointer, not the core (a silent session stays small, and a
    /// catch-all one never needs it).
    core: Option<Box<SniPrereadCore>>,
    accepted_at: Instant,
    first_byte_at: Option<Instant>,
    armed: Armed,
    stage: Stage,
}

impl PrereadStep {
    /// A connection just accepted on `listener`. On a catch-all listener
    /// without `expect_proxy` the answer is `Next::Connect` at once and the
    /// step never prereads; otherwise (a catch-all listener reads the PROXY
    /// header first, which the backend must not get as data) it is
    /// `Next::Read`, the session is in the preread stage
    /// ([`Self::is_reading`]: raise the gauge), the server-first timer is
    /// armed when the listener has one, and the silence timer (the preread
    /// timeout from now) unless a server-first timer at least as long sends
    /// a silent client elsewhere first.
    pub fn accept(listener: &PrereadListener, now: Instant) -> (Self, Actions) {
        let mut step = Self {
            core: None,
            accepted_at: now,
            first_byte_at: None,
            armed: Armed::default(),
            stage: Stage::Reading,
        };
        if let Some(cluster) = listener.catch_all()
            && !listener.config.expect_proxy
        {
            step.stage = Stage::Left { preread_time: None };
            let route = Route::unread(cluster.clone(), None);
            let actions = Actions {
                next: Next::Connect(Arc::new(route)),
                ..Actions::read()
            };
            return (step, actions);
        }
        let mut actions = Actions::read();
        let config = &listener.config;
        if let Some(wait) = config.server_first_timeout {
            step.armed.server_first = true;
            actions.timers.server_first = TimerAction::Arm(now.checked_add(wait).unwrap_or(now));
        }
        // An operator who lets silent clients wait longer for the
        // server-first route than for a hello asked for that wait.
        if config
            .server_first_timeout
            .is_none_or(|wait| wait < config.timeout)
        {
            let due = deadline_after(now, config.timeout);
            step.armed.silent = Some(due);
            actions.timers.silent = TimerAction::Arm(due);
        }
        (step, actions)
    }

    /// The step of a connection refused before it could preread (its
    /// listener is gone): it never enters the stage, so leaving it changes
    /// no gauge.
    pub fn refused(now: Instant) -> Self {
        Self {
            core: None,
            accepted_at: now,
            first_byte_at: None,
            armed: Armed::default(),
            stage: Stage::Left { preread_time: None },
        }
    }

    /// How many bytes the next read may add to a window of `buffered`
    /// bytes: never past the listener's cap, and nothing once decided.
    pub fn read_budget(&self, listener: &PrereadListener, buffered: usize) -> usize {
        match self.stage {
            Stage::Reading => read_budget(listener.cap(), buffered),
            Stage::Left { .. } => 0,
        }
    }

    /// The capacity the window's buffer needs before the next read, now
    /// holding `buffered` of `capacity` bytes: it grows only while the
    /// stage still reads and a full window still needs bytes, never past
    /// the cap ([`crate::window::window_capacity`]). The shell allocates
    /// what this says.
    pub fn window_capacity(
        &self,
        listener: &PrereadListener,
        capacity: usize,
        buffered: usize,
    ) -> usize {
        match self.stage {
            Stage::Reading => window_capacity(capacity, buffered, listener.cap()),
            Stage::Left { .. } => capacity,
        }
    }

    /// Acts on one event; see [`Event`] for when to call.
    pub fn handle(
        &mut self,
        listener: &PrereadListener,
        event: Event<'_>,
        now: Instant,
    ) -> Actions {
        if !self.is_reading() {
            return Actions::ignore();
        }
        let (fed, output) = match event {
            Event::Read { window, added, .. } if added > 0 => {
                self.first_byte_at.get_or_insert(now);
                let input = Input::Bytes { buf: window, now };
                (Fed::Bytes(window.len()), self.feed(listener, input))
            }
            Event::Read { eof: true, .. } => {
                (Fed::FrontClosed, self.feed(listener, Input::FrontClosed))
            }
            Event::Read { .. } => return Actions::read(),
            Event::Timer(StepTimer::Silent) => return self.silence(now),
            Event::Timer(StepTimer::Preread) => {
                self.armed.preread = false;
                (Fed::Timeout, self.feed(listener, Input::Timeout { now }))
            }
            Event::Timer(StepTimer::ServerFirst) => {
                self.armed.server_first = false;
                (Fed::Timeout, self.feed(listener, Input::Timeout { now }))
            }
            Event::Idle => {
                let close = if !self.core().said_nothing() {
                    Close::Rejected(RejectReason::Fragmented)
                } else {
                    Close::SilentTimeout
                };
                let actions = Actions {
                    next: Next::Close(close),
                    ..self.abandon(now)
                };
                return self.with_farewell(listener, actions, &[]);
            }
        };
        let mut actions = self.on_output(&output, now);
        actions.core = Some(CoreCall { fed, output });
        let window = match event {
            Event::Read { window, .. } => window,
            Event::Timer(_) | Event::Idle => &[],
        };
        self.with_farewell(listener, actions, window)
    }

    /// Ends the preread stage for a reason of the caller's (the session is
    /// closed: pool exhausted, shutdown, a removed listener). Returns the
    /// timers to cancel and, the first time only, `left`; `next` is
    /// `Next::Ignore`. Harmless after the stage ended.
    pub fn abandon(&mut self, now: Instant) -> Actions {
        let mut actions = Actions::ignore();
        let Stage::Reading = self.stage else {
            return actions;
        };
        let since = self.first_byte_at.unwrap_or(self.accepted_at);
        let preread_time = now.saturating_duration_since(since);
        self.stage = Stage::Left {
            preread_time: Some(preread_time),
        };
        if std::mem::take(&mut self.armed.preread) {
            actions.timers.preread = TimerAction::Cancel;
        }
        if std::mem::take(&mut self.armed.server_first) {
            actions.timers.server_first = TimerAction::Cancel;
        }
        if self.armed.silent.take().is_some() {
            actions.timers.silent = TimerAction::Cancel;
        }
        actions.left = Some(Left {
            sample: self.core().client_spoke().then_some(preread_time),
        });
        actions
    }

    /// Whether the session is still in the preread stage.
    pub fn is_reading(&self) -> bool {
        self.stage == Stage::Reading
    }

    /// From the first byte (or the accept, for a client that never spoke)
    /// to the end of the preread stage; `None` while reading and for a
    /// catch-all session.
    pub fn preread_time(&self) -> Option<Duration> {
        match self.stage {
            Stage::Reading => None,
            Stage::Left { preread_time } => preread_time,
        }
    }

    /// The core, for what it learned (SNI, PROXY source, whether the client
    /// spoke) and its latched decision.
    pub fn core(&self) -> &SniPrereadCore {
        static UNFED: LazyLock<SniPrereadCore> = LazyLock::new(SniPrereadCore::new);
        self.core.as_deref().unwrap_or(&UNFED)
    }

    /// A reject's farewell, by the listener's `reject_with`.
    fn with_farewell(
        &self,
        listener: &PrereadListener,
        mut actions: Actions,
        window: &[u8],
    ) -> Actions {
        if let Next::Close(Close::Rejected(reason)) = actions.next {
            actions.farewell = alert::farewell(
                listener.reject_with,
                reason,
                self.core(),
                window,
                listener.cap(),
            );
        }
        actions
    }

    /// The silence timer fired. The first byte cancels it, so while it is
    /// held the client has sent nothing: refused, without asking the core.
    /// A fire the caller does not hold changes nothing; an early one is
    /// armed again for the same instant.
    fn silence(&mut self, now: Instant) -> Actions {
        let Some(due) = self.armed.silent.take() else {
            return Actions::read();
        };
        if now < due {
            self.armed.silent = Some(due);
            let mut actions = Actions::read();
            actions.timers.silent = TimerAction::Arm(due);
            return actions;
        }
        Actions {
            next: Next::Close(Close::SilentTimeout),
            ..self.abandon(now)
        }
    }

    fn feed(&mut self, listener: &PrereadListener, input: Input<'_>) -> Output {
        (self.core.get_or_insert_default()).handle_input(&listener.config, input)
    }

    fn on_output(&mut self, output: &Output, now: Instant) -> Actions {
        let next = match output {
            Output::NeedMore { deadline } => return self.need_more(*deadline),
            Output::Routed(route) => Next::Connect(route.clone()),
            // Nothing, or only a load balancer's whole header, came: a
            // health check's close, or an idle client's deadline. A cut
            // header is the client's reject like any cut hello.
            Output::Reject(RejectReason::FrontClosed) if self.core().said_nothing() => {
                Next::Close(Close::Silent)
            }
            Output::Reject(RejectReason::Fragmented) if self.core().said_nothing() => {
                Next::Close(Close::SilentTimeout)
            }
            Output::Reject(reason) => Next::Close(Close::Rejected(*reason)),
        };
        let actions = self.abandon(now);
        debug_assert!(actions.left.is_some(), "a decision leaves the stage once");
        Actions { next, ..actions }
    }

    /// Still undecided: the preread timer is armed once, at the deadline
    /// that never moves; the silence timer goes with the first byte (the
    /// deadline counts from there), the server-first timer once the client
    /// spoke.
    fn need_more(&mut self, deadline: Instant) -> Actions {
        let mut actions = Actions::read();
        if !self.armed.preread {
            self.armed.preread = true;
            actions.timers.preread = TimerAction::Arm(deadline);
        }
        if self.first_byte_at.is_some() && self.armed.silent.take().is_some() {
            actions.timers.silent = TimerAction::Cancel;
        }
        if self.core().client_spoke() && std::mem::take(&mut self.armed.server_first) {
            actions.timers.server_first = TimerAction::Cancel;
        }
        actions
    }
}

#[cfg(test)]
mod catch_all_tests;
#[cfg(test)]
pub(crate) mod test_hello;
#[cfg(test)]
mod tests;
