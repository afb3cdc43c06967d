//! The pipe step of a session: both directions moved until nothing moves,
//! each direction ([`Lane`]) copying through a pooled buffer or splicing
//! through a kernel pipe (`worker/splice.rs`), FINs forwarded once drained.
//!
//! Owns: [`pipe`] over a session's per-direction state (`Session::lanes`):
//! what each kind of lane does in a round, its fallback to copying when
//! `splice` is refused, and which side a failed socket operation belongs
//! to ([`PipeFault`]). One drive around it (lanes switched to splice,
//! buffers lent and given back) is [`turn`], in `turn.rs`. Must never: splice while
//! userspace bytes of that direction (the PROXY prefix, the inherited
//! window) are still queued, forward a FIN before every queued byte, in a
//! buffer or in a kernel pipe, reached the other side, or clear a readiness
//! flag on a "would block" that may come from a full kernel pipe rather
//! than the socket.

use std::io;
use std::net::Shutdown;
use std::time::Instant;

use log::debug;
use mio::net::TcpStream;

use super::io::{Ready, read_some, write_some};
use super::lanes::Lane;
use super::pool::Checkout;
use super::session::Session;
use super::splice::{SplicePipe, is_unsupported};
use super::tokens::Side;

/// Rounds of the pipe loop before a busy session yields to the others.
const PIPE_ROUNDS_PER_TURN: usize = 32;

/// What a pipe step concluded.
#[derive(Debug)]
pub enum PipeStep {
    /// Waiting for readiness; `moved` says whether any byte moved.
    Continue { moved: bool },
    /// Still busy after its share of the turn: drive it again next turn.
    Yield,
    /// Both directions finished: every byte delivered, both FINs forwarded.
    Done,
    /// A socket failed.
    Failed(PipeFault),
}

/// A failed socket operation of the pipe, and whose socket it was.
#[derive(Debug)]
pub struct PipeFault {
    /// The side whose socket failed: a read from it, a write or a
    /// shutdown towards it.
    pub(super) side: Side,
    pub(super) error: io::Error,
}

impl PipeFault {
    /// That side reset its connection: `ECONNRESET`, or `EPIPE` on a write
    /// after its reset was already reported.
    pub fn is_reset(&self) -> bool {
        matches!(
            self.error.kind(),
            io::ErrorKind::ConnectionReset | io::ErrorKind::BrokenPipe
        )
    }
}

impl std::fmt::Display for PipeFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let side = match self.side {
            Side::Front => "client",
            Side::Back => "backend",
        };
        write!(f, "the {side}'s socket: {}", self.error)
    }
}

/// Which socket of one direction an operation failed on.
#[derive(Debug, Clone, Copy)]
enum End {
    Source,
    Destination,
}

/// A failed operation of one direction's round.
type RoundFault = (End, io::Error);

fn at_source(error: io::Error) -> RoundFault {
    (End::Source, error)
}

fn at_destination(error: io::Error) -> RoundFault {
    (End::Destination, error)
}

/// Names the side of a round's fault: `source` is the side the direction
/// reads.
fn fault_of(source: Side, (end, error): RoundFault) -> PipeFault {
    let side = match (end, source) {
        (End::Source, side) => side,
        (End::Destination, Side::Front) => Side::Back,
        (End::Destination, Side::Back) => Side::Front,
    };
    PipeFault { side, error }
}

/// Moves bytes both ways until nothing moves, forwarding each FIN only
/// once the queue towards that side is empty (buffer and kernel pipe).
pub fn pipe(session: &mut Session, now: Instant) -> PipeStep {
    match pipe_inner(session, now) {
        Ok(step) => step,
        Err(e) => PipeStep::Failed(e),
    }
}

fn pipe_inner(session: &mut Session, now: Instant) -> Result<PipeStep, PipeFault> {
    let Some(back) = session.back.as_mut() else {
        return Err(PipeFault {
            side: Side::Back,
            error: io::Error::other("pipe without its backend socket"),
        });
    };
    // The backend-to-client direction has no prefix.
    let mut no_prefix = Vec::new();
    let mut moved_any = false;
    for _ in 0..PIPE_ROUNDS_PER_TURN {
        let up = Flow {
            ends: Ends {
                src: &mut session.front,
                src_ready: &mut session.front_ready,
                dst: &mut *back,
                dst_ready: &mut session.back_ready,
            },
            prefix: &mut session.prefix,
            buf: &mut session.front_buf,
            lane: &mut session.lanes.up,
            eof: &mut session.front_eof,
        }
        .round()
        .map_err(|fault| fault_of(Side::Front, fault))?;
        session.bytes_in += up.read as u64;
        if up.read > 0 || up.eof {
            session.last_front_activity = now;
        }
        // An upload the backend only receives is backend activity too:
        // a long upload to a quiet backend must not hit back_timeout.
        if up.written > 0 {
            session.last_back_activity = now;
        }
        let down = Flow {
            ends: Ends {
                src: &mut *back,
                src_ready: &mut session.back_ready,
                dst: &mut session.front,
                dst_ready: &mut session.front_ready,
            },
            prefix: &mut no_prefix,
            buf: &mut session.back_buf,
            lane: &mut session.lanes.down,
            eof: &mut session.back_eof,
        }
        .round()
        .map_err(|fault| fault_of(Side::Back, fault))?;
        session.bytes_out += down.written as u64;
        if down.written > 0 {
            session.last_front_activity = now;
        }
        if down.read > 0 || down.eof {
            session.last_back_activity = now;
        }
        for (moved, direction) in [(&up, "client to backend"), (&down, "backend to client")] {
            if let Some(e) = &moved.fell_back {
                debug!(
                    "splice refused for {} ({direction}): {e}; copying",
                    session.client
                );
                session.lanes.note_fallback();
            }
        }
        if session.front_eof
            && session.prefix.is_empty()
            && session.front_buf.as_ref().is_none_or(Checkout::is_empty)
            && session.lanes.up.pending() == 0
            && !session.back_write_shut
        {
            // The last direction to finish needs no shutdown: the session
            // closes both sockets now, and a socket read to its EOF sends
            // a FIN on close (after every byte it still holds).
            if !session.front_write_shut {
                shutdown_write(back).map_err(|error| PipeFault {
                    side: Side::Back,
                    error,
                })?;
            }
            session.back_write_shut = true;
        }
        if session.back_eof
            && session.back_buf.as_ref().is_none_or(Checkout::is_empty)
            && session.lanes.down.pending() == 0
            && !session.front_write_shut
        {
            if !session.back_write_shut {
                shutdown_write(&session.front).map_err(|error| PipeFault {
                    side: Side::Front,
                    error,
                })?;
            }
            session.front_write_shut = true;
        }
        if session.back_write_shut && session.front_write_shut {
            return Ok(PipeStep::Done);
        }
        if up.total() + down.total() == 0 {
            return Ok(PipeStep::Continue { moved: moved_any });
        }
        moved_any = true;
    }
    Ok(PipeStep::Yield)
}

/// What one round of one direction did.
#[derive(Debug, Default)]
struct Moved {
    /// Bytes taken from the source socket.
    read: usize,
    /// Bytes given to the destination socket (prefix included).
    written: usize,
    /// Bytes moved from the kernel pipe into the buffer (after a fallback).
    shuffled: usize,
    /// The source's EOF was seen in this round.
    eof: bool,
    /// `splice` was refused in this round: the direction falls back.
    fell_back: Option<io::Error>,
}

impl Moved {
    fn total(&self) -> usize {
        self.read + self.written + self.shuffled
    }
}

/// The two sockets of one direction and their readiness.
struct Ends<'a> {
    src: &'a mut TcpStream,
    src_ready: &'a mut Ready,
    dst: &'a mut TcpStream,
    dst_ready: &'a mut Ready,
}

/// One direction of the pipe, borrowed out of the session for a round.
struct Flow<'a> {
    ends: Ends<'a>,
    /// Written before any other byte (a PROXY header; empty downstream).
    prefix: &'a mut Vec<u8>,
    buf: &'a mut Option<Checkout>,
    lane: &'a mut Lane,
    /// The source's EOF was seen.
    eof: &'a mut bool,
}

impl Flow<'_> {
    /// Writes what is queued, then takes what the source has, once. An
    /// error of the kernel pipe itself counts with the source, whose bytes
    /// it holds; it is never a reset.
    fn round(mut self) -> Result<Moved, RoundFault> {
        let mut moved = Moved::default();
        if !self.prefix.is_empty() {
            let n = write_some(self.ends.dst, self.prefix, self.ends.dst_ready)
                .map_err(at_destination)?;
            self.prefix.drain(..n);
            moved.written += n;
        }
        if self.prefix.is_empty()
            && let Some(buf) = self.buf.as_mut()
            && !buf.is_empty()
        {
            let n = write_some(self.ends.dst, buf.data(), self.ends.dst_ready)
                .map_err(at_destination)?;
            buf.consume(n);
            moved.written += n;
        }
        if let Lane::Unsplice(pipe) = &mut *self.lane {
            // The pipe's bytes came before anything the source still holds:
            // the source waits until they are all in the buffer.
            let Some(buf) = self.buf.as_mut() else {
                // No buffer yet: the caller lends one on the next drive.
                return Ok(moved);
            };
            while pipe.pending() > 0 {
                let space = buf.space();
                if space.is_empty() {
                    break;
                }
                let n = pipe.read_into(space).map_err(at_source)?;
                buf.fill(n);
                moved.shuffled += n;
            }
            if pipe.pending() > 0 {
                return Ok(moved);
            }
            *self.lane = Lane::Copy;
        }
        match &mut *self.lane {
            lane @ (Lane::Copy | Lane::Warm { .. }) => {
                if let Some(buf) = self.buf.as_mut()
                    && !*self.eof
                {
                    let (n, eof) = read_some(self.ends.src, buf, self.ends.src_ready, usize::MAX)
                        .map_err(at_source)?;
                    *self.eof = eof;
                    moved.read += n;
                    moved.eof = eof;
                    lane.note_read(n, buf.len() == buf.capacity());
                }
            }
            Lane::Splice(pipe) => {
                let queued =
                    !self.prefix.is_empty() || self.buf.as_ref().is_some_and(|b| !b.is_empty());
                if queued {
                    // Never splice past userspace bytes: they go first.
                    return Ok(moved);
                }
                match splice_round(pipe, &mut self.ends, self.eof, &mut moved) {
                    Ok(()) => {}
                    Err((_, e)) if is_unsupported(&e) => {
                        if let Lane::Splice(pipe) = std::mem::take(self.lane) {
                            *self.lane = Lane::Unsplice(pipe);
                        }
                        moved.fell_back = Some(e);
                    }
                    Err(fault) => return Err(fault),
                }
            }
            // Handled above: still draining its pipe, it returned early.
            Lane::Unsplice(_) => {}
        }
        Ok(moved)
    }
}

/// Empties the kernel pipe towards the destination, then refills it from
/// the source and empties it again.
fn splice_round(
    pipe: &mut SplicePipe,
    ends: &mut Ends<'_>,
    eof: &mut bool,
    moved: &mut Moved,
) -> Result<(), RoundFault> {
    moved.written += drain_pipe(pipe, ends.dst, ends.dst_ready).map_err(at_destination)?;
    if *eof || !ends.src_ready.readable {
        return Ok(());
    }
    let was_empty = pipe.pending() == 0;
    match pipe.fill_from(ends.src) {
        Ok(0) => {
            *eof = true;
            moved.eof = true;
        }
        Ok(n) => {
            moved.read += n;
            moved.written += drain_pipe(pipe, ends.dst, ends.dst_ready).map_err(at_destination)?;
        }
        // With bytes in the pipe, "would block" may mean a full pipe rather
        // than an empty socket: the flag stays until the pipe drained, or the
        // socket would never be read again (no new edge would come).
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
            if was_empty {
                ends.src_ready.readable = false;
            }
        }
        Err(e) => return Err(at_source(e)),
    }
    Ok(())
}

/// Splices what the pipe holds to `dst`, as much as it takes now; a full
/// `dst` clears its writable flag.
fn drain_pipe(pipe: &mut SplicePipe, dst: &TcpStream, ready: &mut Ready) -> io::Result<usize> {
    if pipe.pending() == 0 || !ready.writable {
        return Ok(0);
    }
    match pipe.drain_to(dst) {
        Ok(n) => Ok(n),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
            ready.writable = false;
            Ok(0)
        }
        Err(e) => Err(e),
    }
}

fn shutdown_write(stream: &TcpStream) -> io::Result<()> {
    match stream.shutdown(Shutdown::Write) {
        // The peer already went away entirely: nothing left to tell it.
        Err(e) if e.kind() == io::ErrorKind::NotConnected => Ok(()),
        other => other,
    }
}

mod turn;
pub use turn::{Exhausted, Splicing, Turn, open_lanes, turn};

#[cfg(test)]
mod auto_tests;
#[cfg(test)]
mod fault_tests;
#[cfg(test)]
mod round_tests;
#[cfg(test)]
mod tests;
