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

use std::sync::Arc;
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
        TimerKind::Preread => step(ctx, key, session, StepTimer::Preread, now),
        TimerKind::ServerFirst => step(ctx, key, session, StepTimer::ServerFirst, now),
        TimerKind::Silent => step(ctx, key, session, StepTimer::Silent, now),
        TimerKind::Connect => connect::timed_out(ctx, key, session, now),
        TimerKind::LocalRetry => connect::retry(ctx, key, session, now),
        TimerKind::FrontIdle | TimerKind::BackIdle => idle(ctx, key, session, kind, now),
    }
}

/// One of the preread step's timers fired; the session holds it no more.
fn step(ctx: &mut Ctx, key: usize, session: &mut Session, timer: StepTimer, now: Instant) -> Drive {
    if let Phase::Preread(preread) = &mut session.phase {
        let timers = &mut preread.timers;
        let slot = match timer {
            StepTimer::Preread => &mut timers.preread,
            StepTimer::ServerFirst => &mut timers.server_first,
            StepTimer::Silent => &mut timers.silent,
        };
        *slot = None;
    }
    let Some(listener) = ctx.runtime.tcp_listener(session.listener) else {
        return Drive::End(Outcome::Refused(RefuseReason::ListenerRemoved));
    };
    let actions = session
        .step
        .handle(&listener.preread, Event::Timer(timer), now);
    preread::perform(ctx, key, session, actions, now)
}

fn idle(ctx: &mut Ctx, key: usize, session: &mut Session, kind: TimerKind, now: Instant) -> Drive {
    let Some(listener) = ctx.runtime.tcp_listener(session.listener) else {
        return Drive::End(Outcome::Refused(RefuseReason::ListenerRemoved));
    };
    let (last, limit, slot) = match (kind, &mut session.phase) {
        (TimerKind::FrontIdle, _) => (
            session.front.last_activity,
            listener.front_timeout,
            &mut session.front_idle,
        ),
        (_, Phase::Piped(piped)) => (
            piped.pipe.back.last_activity,
            listener.back_timeout,
            &mut piped.back_idle,
        ),
        // A back idle timer is held only while piped.
        _ => return Drive::Continue { progressed: false },
    };
    let due = last + limit;
    if now < due {
        // Activity since the timer was armed: sleep until the new due time.
        *slot = Some(ctx.schedule(key, kind, due));
        return Drive::Continue { progressed: false };
    }
    *slot = None;
    debug!("{} idle for {limit:?}: closed", session.client);
    if let Phase::Preread(_) = session.phase {
        let actions = session.step.handle(&listener.preread, Event::Idle, now);
        return preread::perform(ctx, key, session, actions, now);
    }
    Drive::End(Outcome::of_route(session.route().map(Arc::as_ref)))
}
