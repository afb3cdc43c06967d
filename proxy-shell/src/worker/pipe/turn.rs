//! One drive of a piped session: the lanes that earned a kernel pipe take
//! one, the copying directions that have something to move get their
//! pooled buffers, the pipe runs, and the buffers that hold nothing go
//! back: a spliced direction's for good, a copying one's memory only (its
//! claim is parked, so an idle established session holds no buffer memory
//! and keeps its place under `max_buffers` for the buffers it needed at
//! once).
//!
//! Owns: [`open_lanes`] (how the lanes start), the end of the preread
//! window (parked once drained), when a direction needs a buffer, [`turn`]
//! and what it tells its caller ([`Turn`]): the pipes it had to create and
//! the fallbacks it saw. Must never: take a pipe for a direction that has
//! not earned one ([`Lane::wants_pipe`]), give back or park a buffer that
//! still holds a byte, hold more claims than its copying directions, or
//! count anything itself (the caller owns the metrics).

use std::time::Instant;

use log::debug;

use super::{PipeStep, pipe};
use crate::worker::lanes::Lane;
use crate::worker::pipe_pool::PipePool;
use crate::worker::pool::{BufferPool, Checkout};
use crate::worker::session::Session;

/// What splicing a drive may do: the worker's idle pipes, and the bytes a
/// direction copies before it splices (`splice_threshold`).
#[derive(Debug)]
pub struct Splicing<'a> {
    pub pipes: &'a mut PipePool,
    pub threshold: u64,
}

/// What one [`turn`] did.
#[derive(Debug)]
pub struct Turn {
    pub step: PipeStep,
    /// Kernel pipes created for lanes that switched to splice (the others
    /// came from the pool).
    pub pipes_created: u32,
    /// Directions that fell back from splice to copying.
    pub fallbacks: u32,
}

/// The buffer pool had no buffer for a copying direction.
#[derive(Debug)]
pub struct Exhausted;

/// How each direction starts, once the backend is connected: with
/// `splice`, warming up (copying until it has moved enough to splice);
/// else copying for good.
pub fn open_lanes(session: &mut Session, splice: bool) {
    if splice {
        let warm = || Lane::Warm {
            read: 0,
            filled: false,
        };
        session.lanes.up = warm();
        session.lanes.down = warm();
    }
}

/// One drive of the pipe; see the module.
pub fn turn(
    session: &mut Session,
    now: Instant,
    buffers: &mut BufferPool,
    splicing: Option<Splicing<'_>>,
) -> Result<Turn, Exhausted> {
    let pipes_created = splicing.map_or(0, |s| switch_lanes(session, s));
    // The preread window is the up direction's first buffer; once it went
    // out, a pooled buffer of the pipe's size replaces it when the
    // direction next has bytes to move (a small window would copy in small
    // reads, a grown one would hold its memory).
    if session
        .front_buf
        .as_ref()
        .is_some_and(|buf| buf.is_empty() && !buffers.is_pipe_sized(buf))
        && let Some(window) = session.front_buf.take()
    {
        buffers.park(window);
        session.parked += 1;
    }
    let up = wants_buffer(
        &session.lanes.up,
        &session.front_buf,
        session.front_ready.readable,
        session.front_eof,
    );
    let down = wants_buffer(
        &session.lanes.down,
        &session.back_buf,
        session.back_ready.readable,
        session.back_eof,
    );
    for (wanted, slot) in [(up, &mut session.front_buf), (down, &mut session.back_buf)] {
        if !wanted {
            continue;
        }
        *slot = Some(if session.parked > 0 {
            session.parked -= 1;
            buffers.unpark()
        } else {
            buffers.checkout().ok_or(Exhausted)?
        });
    }
    let step = pipe(session, now);
    settle_buffers(session, buffers);
    let fallbacks = session.lanes.take_fallbacks();
    Ok(Turn {
        step,
        pipes_created,
        fallbacks,
    })
}

/// Gives a kernel pipe to each direction that earned one. Bytes already
/// in its buffer still go first: nothing is spliced past them. A
/// direction whose pipe cannot be had copies for good.
fn switch_lanes(session: &mut Session, splicing: Splicing<'_>) -> u32 {
    let mut created = 0;
    for (lane, direction) in [
        (&mut session.lanes.up, "client to backend"),
        (&mut session.lanes.down, "backend to client"),
    ] {
        if !lane.wants_pipe(splicing.threshold) {
            continue;
        }
        *lane = match splicing.pipes.take() {
            Ok((pipe, new)) => {
                created += u32::from(new);
                Lane::Splice(pipe)
            }
            Err(e) => {
                debug!(
                    "no splice pipe for {} ({direction}): {e}; copying",
                    session.client
                );
                Lane::Copy
            }
        };
    }
    created
}

/// Whether a direction needs a pooled buffer for this drive: it copies, has
/// none, and has bytes to move (a readable source not at its EOF, or a
/// refused splice's pipe to drain).
fn wants_buffer(lane: &Lane, slot: &Option<Checkout>, readable: bool, eof: bool) -> bool {
    slot.is_none()
        && lane.wants_buffer()
        && (matches!(lane, Lane::Unsplice(_)) || (readable && !eof))
}

/// After the pipe: an empty buffer of a spliced direction goes back for
/// good; one of a copying direction is parked (its claim kept). Claims
/// past what the copying directions could use are given up.
fn settle_buffers(session: &mut Session, buffers: &mut BufferPool) {
    for (lane, slot) in [
        (&session.lanes.up, &mut session.front_buf),
        (&session.lanes.down, &mut session.back_buf),
    ] {
        let Some(buf) = slot.take_if(|buf| buf.is_empty()) else {
            continue;
        };
        if lane.is_spliced() {
            buffers.give_back(buf);
        } else {
            buffers.park(buf);
            session.parked += 1;
        }
    }
    let copying = [&session.lanes.up, &session.lanes.down]
        .into_iter()
        .filter(|lane| !lane.is_spliced())
        .count();
    let held = usize::from(session.front_buf.is_some()) + usize::from(session.back_buf.is_some());
    let excess = (held + usize::from(session.parked)).saturating_sub(copying.max(held));
    if excess > 0 {
        buffers.release_parked(excess);
        session.parked -= u8::try_from(excess).unwrap_or(session.parked);
    }
}
