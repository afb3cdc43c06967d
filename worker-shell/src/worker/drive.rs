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

use std::net::SocketAddr;
use std::time::Instant;

use log::{debug, warn};

use super::connect;
use super::ctx::{Ctx, Drive};
use super::farewell;
use super::io::Peer;
use super::passive;
use super::pipe::{Bulk, PipeFault, PipeStep, Splicing, turn};
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
        Phase::Preread(_) => preread::drive(ctx, key, session, now),
        // Refused as it left the preread: closed by the same turn.
        Phase::Gated(ref gated) => Drive::End(Outcome::Refused(gated.reason)),
        Phase::Connecting(_) => connect::drive(ctx, key, session, now),
        Phase::Piped(_) => drive_pipe(ctx, key, session, now),
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
    let Phase::Piped(piped) = &mut session.phase else {
        return Drive::Continue { progressed: false };
    };
    let splicing = ctx.settings.splice.then_some(Splicing {
        pipes: &mut ctx.pipes,
        threshold: ctx.settings.splice_threshold,
        bulk: Bulk {
            size: ctx.settings.splice_bulk_pipe_size,
            budget: &ctx.shared.bulk_pipes,
        },
    });
    let front = &mut session.front;
    let Ok(done) = turn(
        front,
        &mut piped.pipe,
        session.client,
        now,
        &mut ctx.pool,
        splicing,
    ) else {
        return Drive::End(Outcome::Refused(RefuseReason::PoolExhausted));
    };
    if done.pipes_created > 0 {
        ctx.metrics.add(
            Series::of(Family::SplicePipesCreated),
            u64::from(done.pipes_created),
        );
    }
    if done.grew.grown > 0 {
        ctx.pipes.count_grown(done.grew.grown);
        ctx.metrics.add(
            Series::of(Family::SplicePipesGrown),
            u64::from(done.grew.grown),
        );
    }
    if let Some(e) = &done.grew.refused {
        ctx.pipes
            .growth_refused(e, ctx.settings.splice_bulk_pipe_size);
    }
    let (step, fallbacks) = (done.step, done.fallbacks);
    let fault = match &step {
        PipeStep::Failed(fault) => Some(fault),
        _ => None,
    };
    passive::judge(ctx, piped, fault, now);
    let outcome = Outcome::of_route(Some(&piped.target.route));
    if let Some(fault) = fault {
        let at = (session.listener, session.client);
        failed(ctx, at, (front, &piped.pipe.back), fault);
    }
    if fallbacks > 0 {
        ctx.metrics
            .add(Series::of(Family::SpliceFallbacks), u64::from(fallbacks));
    }
    // A direction that fell back now copies and needs a buffer: the next
    // drive lends it, and no socket event may come to trigger that drive.
    let again = match step {
        PipeStep::Continue { .. } => fallbacks > 0,
        PipeStep::Yield => true,
        PipeStep::Done | PipeStep::Failed(_) => false,
    };
    if again {
        ctx.requeue(key, session);
    }
    match step {
        PipeStep::Continue { moved } => Drive::Continue { progressed: moved },
        PipeStep::Yield => Drive::Continue { progressed: true },
        PipeStep::Done | PipeStep::Failed(_) => Drive::End(outcome),
    }
}

/// A socket of the pipe failed. A reset is passed on: the other side is
/// reset too rather than closed with a FIN, which would pass a truncated
/// stream off as a complete one.
fn failed(
    ctx: &mut Ctx,
    (listener, client): (SocketAddr, SocketAddr),
    (front, back): (&Peer, &Peer),
    fault: &PipeFault,
) {
    let reset = fault.is_reset();
    debug!(
        "pipe of {client} failed on {fault}{}",
        if reset {
            "; resetting the other side"
        } else {
            ""
        }
    );
    if !reset {
        return;
    }
    let (from, other) = match fault.side {
        Side::Back => ("backend", front),
        Side::Front => ("client", back),
    };
    let reset = Series::on(Family::ConnectionsReset, listener);
    ctx.metrics.incr(reset.from(from));
    farewell::reset(&other.stream);
}
