//! Driving one session after events or a re-queue: the phase dispatch, the
//! loop guard, and what the pipe phase counts.
//!
//! Owns: which function drives each [`Phase`], the guard that closes a
//! session driven [`LOOP_GUARD`] times in a row without progress (so a
//! spurious wake-up cannot turn into a spin), and what the pipe phase does
//! around `pipe::turn` (the worker's pools and splice settings handed in,
//! the pipes created and the fallbacks counted, a reset of one side
//! relayed to the other, and handing each step to passive health). The
//! preread phase lives in `preread.rs`, the
//! connect phase in `connect.rs`.
//!
//! Must never: end a session itself (it answers [`Drive::End`] and the
//! event loop closes), or drive a session from inside another's drive.

use std::time::Instant;

use log::{debug, warn};

use super::connect;
use super::ctx::{Ctx, Drive};
use super::farewell;
use super::passive;
use super::pipe::{PipeFault, PipeStep, Splicing, turn};
use super::preread;
use super::session::{Phase, Session};
use super::tokens::Side;
use crate::metrics::families::Family;
use crate::metrics::series::Series;
use crate::vocabulary::{Outcome, RefuseReason};

/// Drives in a row without progress before a session is closed.
const LOOP_GUARD: u32 = 1_000;

/// One drive of `session` (slab key `key`).
pub(super) fn drive(ctx: &mut Ctx, key: usize, session: &mut Session) -> Drive {
    let now = Instant::now();
    let drive = match session.phase {
        Phase::Preread => preread::drive(ctx, key, session, now),
        Phase::Connecting => connect::drive(ctx, key, session, now),
        Phase::Pipe => drive_pipe(ctx, key, session, now),
    };
    match drive {
        Drive::Continue { progressed: true } => session.idle_drives = 0,
        Drive::Continue { progressed: false } => {
            session.idle_drives += 1;
            if session.idle_drives >= LOOP_GUARD {
                warn!(
                    "session of {} made no progress {LOOP_GUARD} times: closed",
                    session.client
                );
                return Drive::End(Outcome::Refused(RefuseReason::LoopGuard));
            }
        }
        Drive::End(_) => {}
    }
    drive
}

fn drive_pipe(ctx: &mut Ctx, key: usize, session: &mut Session, now: Instant) -> Drive {
    let splicing = ctx.settings.splice.then_some(Splicing {
        pipes: &mut ctx.pipes,
        threshold: ctx.settings.splice_threshold,
    });
    let Ok(done) = turn(session, now, &mut ctx.pool, splicing) else {
        return Drive::End(Outcome::Refused(RefuseReason::PoolExhausted));
    };
    if done.pipes_created > 0 {
        ctx.metrics.add(
            Series::of(Family::SplicePipesCreated),
            u64::from(done.pipes_created),
        );
    }
    let (step, fallbacks) = (done.step, done.fallbacks);
    let fault = match &step {
        PipeStep::Failed(fault) => Some(fault),
        _ => None,
    };
    passive::judge(ctx, session, fault, now);
    if fallbacks > 0 {
        ctx.metrics
            .add(Series::of(Family::SpliceFallbacks), u64::from(fallbacks));
        // The direction now copies and needs a buffer: the next drive
        // lends it, and no socket event may come to trigger that drive.
        if matches!(step, PipeStep::Continue { .. }) {
            ctx.requeue(key, session);
        }
    }
    match step {
        PipeStep::Continue { moved } => Drive::Continue { progressed: moved },
        PipeStep::Yield => {
            ctx.requeue(key, session);
            Drive::Continue { progressed: true }
        }
        PipeStep::Done => Drive::End(Outcome::of_route(session.route.as_deref())),
        PipeStep::Failed(fault) => {
            failed(ctx, session, &fault);
            Drive::End(Outcome::of_route(session.route.as_deref()))
        }
    }
}

/// A socket of the pipe failed. A reset is passed on: the other side is
/// reset too rather than closed with a FIN, which would pass a truncated
/// stream off as a complete one.
fn failed(ctx: &mut Ctx, session: &mut Session, fault: &PipeFault) {
    let reset = fault.is_reset();
    debug!(
        "pipe of {} failed on {fault}{}",
        session.client,
        if reset {
            "; resetting the other side"
        } else {
            ""
        }
    );
    if !reset {
        return;
    }
    match fault.side {
        Side::Back => {
            let reset = Series::on(Family::ConnectionsReset, session.listener);
            ctx.metrics.incr(reset.from("backend"));
            farewell::reset(&session.front);
        }
        Side::Front => {
            let reset = Series::on(Family::ConnectionsReset, session.listener);
            ctx.metrics.incr(reset.from("client"));
            if let Some(back) = &session.back {
                farewell::reset(back);
            }
        }
    }
}
