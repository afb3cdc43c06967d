//! The preread stage of a session in the worker: I/O glue over the pure
//! step (`preread_core::step`), which decides everything.
//!
//! Owns: taking the window's buffer on the first readable event (an idle
//! connection holds none; a small first window), growing it to what the
//! step says before a read, the capped read the step budgets, and performing
//! the step's actions: its timers, the preread gauge and duration, the
//! unrouted count it gives back, the counters of routes, fallbacks and
//! rejects, the capture of a reject's or a fallback's window (`rejects.rs`),
//! a reject's farewell (the
//! alert or the reset, `farewell.rs`), the listener's access policy on the
//! PROXY header's client once the header is in (`expect_proxy`), and the
//! hand-over to the connect gate. Must never: decide anything the step decides (budget,
//! timers, exit, route), consume the window, or contact a backend itself.

use std::net::{IpAddr, SocketAddr};
use std::time::{Instant, SystemTime};

use log::debug;
use preread_core::RejectReason;
use preread_core::step::{Actions, Close, Event, Next, StepTimer};

use super::access::{self, Refused, Scope};
use super::connect;
use super::ctx::{Ctx, Drive};
use super::farewell;
use super::io::read_some;
use super::rejects::Captured;
use super::runtime::ListenerRuntime;
use super::session::{Phase, Session};
use crate::metrics::families::Family;
use crate::metrics::series::Series;
use crate::shared::rates::SharedRates;
use crate::vocabulary::{Outcome, RefuseReason};

/// One drive of a session in the preread stage, after readiness.
pub(super) fn drive(ctx: &mut Ctx, key: usize, session: &mut Session, now: Instant) -> Drive {
    let Some(listener) = ctx.runtime.listeners.get(&session.listener) else {
        return Drive::End(Outcome::Refused(RefuseReason::ListenerRemoved));
    };
    let Phase::Preread(preread) = &mut session.phase else {
        return Drive::Continue { progressed: false };
    };
    let front = &mut session.front;
    let buf = match &mut preread.window {
        Some(buf) => buf,
        None if !front.ready.readable => return Drive::Continue { progressed: false },
        None => match ctx.pool.checkout_window() {
            Some(buf) => preread.window.insert(buf),
            None => return Drive::End(Outcome::Refused(RefuseReason::PoolExhausted)),
        },
    };
    let capacity = session
        .step
        .window_capacity(&listener.preread, buf.capacity(), buf.len());
    if capacity > buf.capacity() {
        buf.grow(capacity);
    }
    let budget = session.step.read_budget(&listener.preread, buf.len());
    // At most the step's budget, never consuming the window; the step
    // gets the bytes added and whether the client closed.
    let (added, eof) = match read_some(&mut front.stream, buf, &mut front.ready, budget) {
        Ok(read) => read,
        Err(e) => {
            debug!("read from {} failed during preread: {e}", session.client);
            (0, true)
        }
    };
    if added > 0 {
        front.read += added as u64;
        front.last_activity = now;
    }
    debug_assert!(
        buf.len() <= listener.preread.cap(),
        "the window never passes the cap"
    );
    if added == 0 && !eof {
        return Drive::Continue { progressed: false };
    }
    let event = Event::Read {
        window: buf.data(),
        added,
        eof,
    };
    let mut actions = session.step.handle(&listener.preread, event, now);
    if let Err(refused) = header_access(listener, &ctx.shared.listener_rates, session, now) {
        // The step's timers and its exit are still performed; what it
        // would do next is not.
        actions.next = Next::Ignore;
        session.access_rule = Some(refused.rule);
        let _ = perform(ctx, key, session, actions, now);
        return Drive::End(Outcome::Refused(refused.reason));
    }
    perform(ctx, key, session, actions, now)
}

/// Behind `expect_proxy`, the listener's access policy is checked once,
/// as soon as the PROXY header is in, on the client it names (a `LOCAL`
/// header, a balancer's own check, names none: the TCP peer then).
fn header_access(
    listener: &ListenerRuntime,
    rates: &SharedRates<(SocketAddr, IpAddr)>,
    session: &mut Session,
    now: Instant,
) -> Result<(), Refused> {
    let Some(policy) = &listener.access else {
        return Ok(());
    };
    let core = session.step.core();
    if !listener.preread.config.expect_proxy
        || session.header_checked
        || core.content_offset() == 0
        || !matches!(session.phase, Phase::Preread(_))
    {
        return Ok(());
    }
    session.header_checked = true;
    let source = core.proxy_source().map_or(session.client.ip(), |a| a.ip());
    let address = listener.address;
    let rates = (rates, |source| (address, source));
    access::check(policy, Scope::Listener, source, rates, now)
}

/// Performs the step's actions, in their order: timers, the gauge, then
/// what comes next.
pub(super) fn perform(
    ctx: &mut Ctx,
    key: usize,
    session: &mut Session,
    actions: Actions,
    now: Instant,
) -> Drive {
    let Phase::Preread(preread) = &mut session.phase else {
        // Past the preread the step has left: it has nothing to perform.
        return Drive::Continue { progressed: false };
    };
    let timers = &mut preread.timers;
    ctx.step_timer(
        key,
        StepTimer::Preread,
        actions.timers.preread,
        &mut timers.preread,
    );
    ctx.step_timer(
        key,
        StepTimer::ServerFirst,
        actions.timers.server_first,
        &mut timers.server_first,
    );
    ctx.step_timer(
        key,
        StepTimer::Silent,
        actions.timers.silent,
        &mut timers.silent,
    );
    if let Some(left) = actions.left {
        let listener = session.listener;
        ctx.metrics
            .gauge_add(Series::on(Family::PrereadActive, listener), -1);
        if let Some(held) = preread.unrouted.take() {
            ctx.unrouted.release(*held);
        }
        if let Some(sample) = left.sample {
            let micros = u64::try_from(sample.as_micros()).unwrap_or(u64::MAX);
            ctx.metrics
                .observe(Series::on(Family::PrereadDuration, listener), micros);
        }
        if let Some(hello) = session.step.core().hello() {
            let size = u64::try_from(hello.len).unwrap_or(u64::MAX);
            ctx.metrics
                .observe(Series::on(Family::ClientHelloBytes, listener), size);
        }
    }
    match actions.next {
        Next::Read => {
            // More bytes may already wait (the budget or a full buffer
            // stopped the read); no new edge will say so.
            if session.front.ready.readable {
                ctx.requeue(key, session);
            }
            Drive::Continue { progressed: true }
        }
        Next::Ignore => Drive::Continue { progressed: true },
        Next::Close(Close::Silent) => Drive::End(Outcome::Silent),
        Next::Close(Close::SilentTimeout) => {
            Drive::End(Outcome::Refused(RefuseReason::SilentTimeout))
        }
        // A `deny_ja4` refusal is the access policy's, as an address list's
        // is: `refused:access_denied`, counted with the refusals at the close.
        Next::Close(Close::Rejected(RejectReason::AccessDenied)) => {
            let outcome = Outcome::Refused(RefuseReason::AccessDenied);
            capture(ctx, session, outcome);
            farewell::say(&mut session.front.stream, actions.farewell);
            Drive::End(outcome)
        }
        Next::Close(Close::Rejected(reason)) => {
            let rejected = Series::on(Family::PrereadRejected, session.listener);
            ctx.metrics.incr(rejected.reason(reason.as_str()));
            capture(ctx, session, Outcome::Rejected(reason));
            farewell::say(&mut session.front.stream, actions.farewell);
            Drive::End(Outcome::Rejected(reason))
        }
        Next::Connect(route) => {
            // A catch-all route matched no name: it counts as neither.
            match route.fallback {
                Some(reason) => {
                    let fallback = Series::on(Family::PrereadFallback, session.listener);
                    ctx.metrics.incr(fallback.reason(reason.as_str()));
                    capture(ctx, session, Outcome::Fallback(reason));
                }
                None if route.matched_sni.is_some() => {
                    let routed = Series::on(Family::PrereadRouted, session.listener);
                    ctx.metrics.incr(routed.cluster(&route.cluster));
                }
                None => {}
            }
            let window = session.take_window();
            connect::start(ctx, key, session, (route, window), now)
        }
    }
}

/// Keeps the session's window in the worker's ring of rejected and
/// fallback sessions, as it was at the decision.
fn capture(ctx: &mut Ctx, session: &Session, outcome: Outcome) {
    let window = session.window();
    let what = Captured {
        at: SystemTime::now(),
        listener: session.listener,
        client: session.client,
        proxy_client: session.step.core().proxy_source(),
        outcome,
        quic: false,
    };
    ctx.rejects.capture(window, what);
}
