//! One drive of a piped session: the lanes that earned a kernel pipe take
//! one, the copying directions that have something to move get their
//! pooled buffers, the pipe runs, and the buffers that hold nothing go
//! back: a spliced direction's for good, a copying one's memory only (its
//! claim is parked, so an idle established session holds no buffer memory
//! and keeps its place under `max_buffers` for the buffers it needed at
//! once).
//!
//! Owns: the end of the preread
//! window (parked once drained), when a direction needs a buffer, [`turn`]
//! and what it tells its caller ([`Turn`]): the pipes it had to create,
//! the fallbacks it saw and the pipes it grew (`grow.rs`, after the pipe
//! ran: the next turn splices through the grown pipe). Must never: take a pipe for a direction that has
//! not earned one ([`Lane::wants_pipe`]), give back or park a buffer that
//! still holds a byte, hold more claims than its copying directions, or
//! count anything itself (the caller owns the metrics).

use std::net::SocketAddr;
use std::time::Instant;

use log::debug;

use super::grow::{Bulk, Grew, grow_lanes};
use super::{Flow, Pipe, PipeStep};
use crate::worker::io::Peer;
use crate::worker::lanes::Lane;
use crate::worker::pipe_pool::PipePool;
use crate::worker::pool::BufferPool;

/// What splicing a drive may do: the worker's idle pipes, the bytes a
/// direction copies before it splices (`splice_threshold`), and how a bulk
/// direction's pipe grows.
#[derive(Debug)]
pub struct Splicing<'a> {
    pub pipes: &'a mut PipePool,
    pub threshold: u64,
    pub bulk: Bulk<'a>,
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
    /// Kernel pipes grown for a bulk transfer, and the kernel's refusal
    /// of a growth.
    pub grew: Grew,
}

/// The buffer pool had no buffer for a copying direction.
#[derive(Debug)]
pub struct Exhausted;

/// One drive of the pipe; see the module.
pub fn turn(
    front: &mut Peer,
    pipe: &mut Pipe,
    client: SocketAddr,
    now: Instant,
    buffers: &mut BufferPool,
    splicing: Option<Splicing<'_>>,
) -> Result<Turn, Exhausted> {
    let bulk = splicing.as_ref().map(|s| s.bulk);
    let pipes_created = splicing.map_or(0, |s| switch_lanes(pipe, client, s));
    // The preread window is the up direction's first buffer; once it went
    // out, a pooled buffer of the pipe's size replaces it when the
    // direction next has bytes to move (a small window would copy in small
    // reads, a grown one would hold its memory).
    if let Some(window) = pipe
        .up
        .buf
        .take_if(|buf| buf.is_empty() && !buffers.is_pipe_sized(buf))
    {
        buffers.park(window);
        pipe.parked += 1;
    }
    let up = wants_buffer(&pipe.up, front.ready.readable);
    let down = wants_buffer(&pipe.down, pipe.back.ready.readable);
    for (wanted, slot) in [(up, &mut pipe.up.buf), (down, &mut pipe.down.buf)] {
        if !wanted {
            continue;
        }
        *slot = Some(if pipe.parked > 0 {
            pipe.parked -= 1;
            buffers.unpark()
        } else {
            buffers.checkout().ok_or(Exhausted)?
        });
    }
    let (step, fallbacks) = super::pipe(front, pipe, client, now);
    settle_buffers(pipe, buffers);
    // A pipe that is done or failed closes now: no growth for it.
    let grew = match (&step, bulk) {
        (PipeStep::Continue { .. } | PipeStep::Yield, Some(bulk)) => grow_lanes(pipe, bulk),
        _ => Grew::default(),
    };
    Ok(Turn {
        step,
        pipes_created,
        fallbacks,
        grew,
    })
}

/// Gives a kernel pipe to each direction that earned one. Bytes already
/// in its buffer still go first: nothing is spliced past them. A
/// direction whose pipe cannot be had copies for good.
fn switch_lanes(pipe: &mut Pipe, client: SocketAddr, splicing: Splicing<'_>) -> u32 {
    let mut created = 0;
    for (lane, direction) in [
        (&mut pipe.up.lane, "client to backend"),
        (&mut pipe.down.lane, "backend to client"),
    ] {
        if !lane.wants_pipe(splicing.threshold) {
            continue;
        }
        *lane = match splicing.pipes.take() {
            Ok((kernel_pipe, new)) => {
                created += u32::from(new);
                Lane::Splice(kernel_pipe)
            }
            Err(e) => {
                debug!("no splice pipe for {client} ({direction}): {e}; copying");
                Lane::Copy
            }
        };
    }
    created
}

/// Whether a direction needs a pooled buffer for this drive: it copies, has
/// none, and has bytes to move (a `readable` source not at its EOF, or a
/// refused splice's pipe to drain).
fn wants_buffer(flow: &Flow, readable: bool) -> bool {
    flow.buf.is_none()
        && flow.lane.wants_buffer()
        && (matches!(flow.lane, Lane::Unsplice(_)) || (readable && !flow.eof))
}

/// After the pipe: an empty buffer of a spliced direction goes back for
/// good; one of a copying direction is parked (its claim kept). Claims
/// past what the copying directions could use are given up.
fn settle_buffers(pipe: &mut Pipe, buffers: &mut BufferPool) {
    for flow in [&mut pipe.up, &mut pipe.down] {
        let Some(buf) = flow.buf.take_if(|buf| buf.is_empty()) else {
            continue;
        };
        if flow.lane.is_spliced() {
            buffers.give_back(buf);
        } else {
            buffers.park(buf);
            pipe.parked += 1;
        }
    }
    let copying = [&pipe.up, &pipe.down]
        .into_iter()
        .filter(|flow| !flow.lane.is_spliced())
        .count();
    let held = usize::from(pipe.up.buf.is_some()) + usize::from(pipe.down.buf.is_some());
    let excess = (held + usize::from(pipe.parked)).saturating_sub(copying.max(held));
    if excess > 0 {
        buffers.release_parked(excess);
        pipe.parked -= u8::try_from(excess).unwrap_or(pipe.parked);
    }
}
