//! Growing the kernel pipe of a bulk direction.
//!
//! Owns: when a spliced direction has proved a bulk transfer (at
//! [`BULK_FILLS`] of its fills the source had at least half a pipe
//! waiting), and [`grow_lanes`], which then grows its pipe to
//! `splice_bulk_pipe_size` (one `fcntl`, once per direction) under the
//! process-wide budget of grown pipes (`shared::Shared::bulk_pipes`).
//! Why: `splice` moves at most a pipe's worth per call, so a bulk transfer
//! through the kernel's 64 KiB pipe costs 16 times the calls of a 1 MiB
//! one, and about twice the CPU per byte (doc/performance.md, "Bulk");
//! but the kernel counts a pipe's whole size against its user's
//! `fs.pipe-user-pages-soft`, and past that budget it gives every new pipe
//! 2 pages. Growing only the directions that move bulk, within a budget,
//! gives those the large pipe and leaves the kernel's size to every other
//! session.
//!
//! Must never: hold a grown pipe without a budget slot (the slot lives in
//! the direction until the session ends; the pool shrinks the pipe back
//! before another session takes it), ask the kernel again after it
//! refused a direction's growth (that would be a syscall per turn), or
//! grow a direction that copies.

use std::io;
use std::sync::Arc;

use super::{Flow, Pipe};
use crate::shared::admission::{Slot, Slots};
use crate::worker::lanes::Lane;

/// Fills with at least half a pipe waiting that prove a bulk transfer:
/// more than a response of a few hundred KiB that happened to arrive at
/// once, nothing for a transfer of megabytes.
const BULK_FILLS: u8 = 4;

/// What growing may do: the size a bulk direction's pipe grows to
/// (`splice_bulk_pipe_size`, 0: never), and the process's budget of grown
/// pipes.
#[derive(Debug, Clone, Copy)]
pub struct Bulk<'a> {
    pub size: usize,
    pub budget: &'a Arc<Slots>,
}

/// Where a direction stands with growing its pipe.
#[derive(Debug, Default)]
pub enum Growth {
    /// Not grown (yet): not proven bulk, or the budget was spent when it
    /// was; asked again at the next turn.
    #[default]
    Ungrown,
    /// Grown; the slot is its share of the budget, given back with the
    /// session.
    Grown(Slot),
    /// The kernel refused, or the pipe is as large already: never asked
    /// again.
    Settled,
}

/// What [`grow_lanes`] did in one turn.
#[derive(Debug, Default)]
pub struct Grew {
    /// Pipes grown.
    pub grown: u32,
    /// The kernel's refusal of a growth, for the caller to log.
    pub refused: Option<io::Error>,
}

/// Grows the pipe of each spliced direction of `pipe` that proved a bulk
/// transfer, while the budget has a slot for it.
pub(super) fn grow_lanes(pipe: &mut Pipe, bulk: Bulk<'_>) -> Grew {
    let mut grew = Grew::default();
    if bulk.size == 0 {
        return grew;
    }
    for flow in [&mut pipe.up, &mut pipe.down] {
        grow_lane(flow, bulk, &mut grew);
    }
    grew
}

fn grow_lane(flow: &mut Flow, bulk: Bulk<'_>, grew: &mut Grew) {
    if !matches!(flow.growth, Growth::Ungrown) || flow.big_fills < BULK_FILLS {
        return;
    }
    let Lane::Splice(kernel_pipe) = &mut flow.lane else {
        return;
    };
    if kernel_pipe.capacity() >= bulk.size {
        flow.growth = Growth::Settled;
        return;
    }
    let Some(slot) = bulk.budget.try_take() else {
        return;
    };
    match kernel_pipe.grow(bulk.size) {
        Ok(()) => {
            flow.growth = Growth::Grown(slot);
            grew.grown += 1;
        }
        Err(e) => {
            flow.growth = Growth::Settled;
            grew.refused = Some(e);
        }
    }
}
