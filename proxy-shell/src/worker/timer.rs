//! What each session timer does when it fires.
//!
//! Owns: the preread, server-first and silence timers (handed to the
//! preread step), the connect timeout (the next backend), the retry of a
//! backend socket this host could not open, and the lazy idle timers: one
//! that fires early because of recent activity re-arms itself at `last
//! activity + timeout` instead of being rescheduled on every read.
//!
//! Must never: act on a timer whose slot the session no longer holds (the
//! timer wheel never fires a cancelled one), or end a session itself (it
//! answers [`Drive::End`] and the event loop closes).

use std::time::Instant;

use log::debug;
use preread_core::step::{Event, StepTimer};

use super::connect;
use super::ctx::{Ctx, Drive, TimerKind};
use super::preread;
use super::session::{Phase, Session};
use crate::vocabulary::{Outcome, RefuseReason};

/// Session `key`'s timer of `kind` fired at `now`.
pub(super) fn fired(
    ctx: &mut Ctx,
    key: usize,
    session: &mut Session,
    kind: TimerKind,
    now: Instant,
) -> Drive {
    match kind {
        TimerKind::Preread => {
            session.timers.preread = None;
            step(ctx, key, session, StepTimer::Preread, now)
        }
        TimerKind::ServerFirst => {
            session.timers.server_first = None;
            step(ctx, key, session, StepTimer::ServerFirst, now)
        }
        TimerKind::Silent => {
            session.timers.silent = None;
            step(ctx, key, session, StepTimer::Silent, now)
        }
        TimerKind::Connect => {
            session.timers.connect = None;
            if session.phase != Phase::Connecting {
                return Drive::Continue { progressed: false };
            }
            debug!(
                "connect of {} to {:?} timed out",
                session.client, session.backend_id
            );
            let timeout = ctx
                .runtime
                .listeners
                .get(&session.listener)
                .map(|l| l.connect_timeout);
            let why = match timeout {
                Some(timeout) => format!("connect not done within {timeout:?}"),
                None => "connect timed out".to_owned(),
            };
            connect::failed(ctx, session, now, &why);
            connect::next(ctx, key, session, now)
        }
        TimerKind::LocalRetry => {
            session.timers.connect = None;
            if session.phase != Phase::Connecting {
                return Drive::Continue { progressed: false };
            }
            connect::next(ctx, key, session, now)
        }
        TimerKind::FrontIdle | TimerKind::BackIdle => idle(ctx, key, session, kind, now),
    }
}

/// One of the preread step's timers fired; the session holds it no more.
fn step(ctx: &mut Ctx, key: usize, session: &mut Session, timer: StepTimer, now: Instant) -> Drive {
    let Some(listener) = ctx.runtime.listeners.get(&session.listener) else {
        return Drive::End(Outcome::Refused(RefuseReason::ListenerRemoved));
    };
    let actions = session
        .step
        .handle(&listener.preread, Event::Timer(timer), now);
    preread::perform(ctx, key, session, actions, now)
}

fn idle(ctx: &mut Ctx, key: usize, session: &mut Session, kind: TimerKind, now: Instant) -> Drive {
    let Some(listener) = ctx.runtime.listeners.get(&session.listener) else {
        return Drive::End(Outcome::Refused(RefuseReason::ListenerRemoved));
    };
    let (last, limit) = match kind {
        TimerKind::FrontIdle => (session.last_front_activity, listener.front_timeout),
        _ => (session.last_back_activity, listener.back_timeout),
    };
    let due = last + limit;
    if now < due {
        // Activity since the timer was armed: sleep until the new due time.
        let id = ctx.schedule(key, kind, due);
        match kind {
            TimerKind::FrontIdle => session.timers.front_idle = Some(id),
            _ => session.timers.back_idle = Some(id),
        }
        return Drive::Continue { progressed: false };
    }
    debug!("{} idle for {limit:?}: closed", session.client);
    match kind {
        TimerKind::FrontIdle => session.timers.front_idle = None,
        _ => session.timers.back_idle = None,
    }
    if session.phase == Phase::Preread {
        let actions = session.step.handle(&listener.preread, Event::Idle, now);
        return preread::perform(ctx, key, session, actions, now);
    }
    Drive::End(Outcome::of_route(session.route.as_deref()))
}
