//! The pipe step of a session: both directions moved until nothing moves,
//! each direction ([`Lane`]) copying through a pooled buffer or splicing
//! through a kernel pipe (`worker/splice.rs`), FINs forwarded once drained.
//!
//! Owns: [`Pipe`] (the backend's socket and both directions) and [`Flow`],
//! the one type of either direction, whose round, counts and FIN are
//! written once for both (and whose kernel pipe grows for a bulk transfer:
//! `grow.rs`); [`pipe`] over them: what each kind of lane does
//! in a round, its fallback to copying when `splice` is refused, and which
//! side a failed socket operation belongs to ([`PipeFault`]). One drive around it (lanes switched to splice,
//! buffers lent and given back) is [`turn`], in `turn.rs`. Must never: splice while
//! userspace bytes of that direction (the PROXY prefix, the inherited
//! window) are still queued, forward a FIN before every queued byte, in a
//! buffer or in a kernel pipe, reached the other side, or clear a readiness
//! flag on a "would block" that may come from a full kernel pipe rather
//! than the socket.

use std::io;
use std::net::{Shutdown, SocketAddr};
use std::time::Instant;

use log::debug;
use mio::net::TcpStream;

use super::io::{Peer, read_some};
use super::lanes::Lane;
use super::pool::Checkout;
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

/// The pipe of a piped session: the backend's socket and both directions.
#[derive(Debug)]
pub struct Pipe {
    pub back: Peer,
    /// Client to backend: its buffer starts as the preread window, its
    /// prefix is the PROXY header.
    pub up: Flow,
    /// Backend to client.
    pub down: Flow,
    /// Buffer claims this pipe holds without their memory (an idle copying
    /// direction parked its empty buffer); given back at close.
    pub parked: u8,
    /// Bytes written to the client: the session's `bytes_out`.
    pub bytes_out: u64,
}

/// One direction of the pipe.
#[derive(Debug, Default)]
pub struct Flow {
    /// Written before any other byte (a PROXY header; empty downstream,
    /// which costs no allocation).
    pub prefix: Vec<u8>,
    /// The queue towards the destination. A spliced direction gives it
    /// back once it is empty.
    pub buf: Option<Checkout>,
    pub lane: Lane,
    /// The source's EOF was seen.
    pub eof: bool,
    /// The FIN was forwarded to the destination (or needs no forwarding:
    /// the close sends it).
    pub shut: bool,
    /// Fills of its kernel pipe that found at least half a pipe waiting
    /// (counted up to 255): the mark of a bulk transfer (`grow.rs`).
    pub big_fills: u8,
    /// Whether its kernel pipe was grown for a bulk transfer.
    pub growth: Growth,
}

impl Pipe {
    /// The pipe of a backend just connected: each direction starts by
    /// [`Lane::opening`], nothing queued yet.
    pub fn new(back: Peer, splice: bool) -> Self {
        let flow = || Flow {
            lane: Lane::opening(splice),
            ..Flow::default()
        };
        Self {
            back,
            up: flow(),
            down: flow(),
            parked: 0,
            bytes_out: 0,
        }
    }
}

/// Moves bytes both ways until nothing moves, forwarding each FIN only
/// once the queue towards that side is empty (buffer and kernel pipe).
/// Returns the step and the directions that fell back from splice to
/// copying on the way (counted even when a later round failed).
pub fn pipe(
    front: &mut Peer,
    pipe: &mut Pipe,
    client: SocketAddr,
    now: Instant,
) -> (PipeStep, u32) {
    let mut fallbacks = 0;
    let step = match pipe_inner(front, pipe, client, now, &mut fallbacks) {
        Ok(step) => step,
        Err(e) => PipeStep::Failed(e),
    };
    (step, fallbacks)
}

fn pipe_inner(
    front: &mut Peer,
    pipe: &mut Pipe,
    client: SocketAddr,
    now: Instant,
    fallbacks: &mut u32,
) -> Result<PipeStep, PipeFault> {
    let Pipe {
        back,
        up,
        down,
        bytes_out,
        ..
    } = pipe;
    let mut moved_any = false;
    for _ in 0..PIPE_ROUNDS_PER_TURN {
        let went_up = up
            .round(front, back, now)
            .map_err(|fault| fault_of(Side::Front, fault))?;
        let went_down = down
            .round(back, front, now)
            .map_err(|fault| fault_of(Side::Back, fault))?;
        *bytes_out += went_down.written as u64;
        for (moved, direction) in [
            (&went_up, "client to backend"),
            (&went_down, "backend to client"),
        ] {
            if let Some(e) = &moved.fell_back {
                debug!("splice refused for {client} ({direction}): {e}; copying");
                *fallbacks += 1;
            }
        }
        up.forward_fin(&back.stream, down.shut)
            .map_err(|error| PipeFault {
                side: Side::Back,
                error,
            })?;
        down.forward_fin(&front.stream, up.shut)
            .map_err(|error| PipeFault {
                side: Side::Front,
                error,
            })?;
        if up.shut && down.shut {
            return Ok(PipeStep::Done);
        }
        if went_up.total() + went_down.total() == 0 {
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
    /// A fill of the kernel pipe found at least half a pipe waiting.
    big_fill: bool,
}

impl Moved {
    fn total(&self) -> usize {
        self.read + self.written + self.shuffled
    }
}

impl Flow {
    /// One round from `src` to `dst`, then what it tells of their
    /// activity, counted even when the round failed after moving bytes:
    /// bytes or the EOF from the source, bytes taken by the destination
    /// (an upload the backend only receives is backend activity too: a
    /// long upload to a quiet backend must not hit `back_timeout`).
    fn round(&mut self, src: &mut Peer, dst: &mut Peer, now: Instant) -> Result<Moved, RoundFault> {
        let mut moved = Moved::default();
        let done = self.move_bytes(src, dst, &mut moved);
        self.big_fills = self.big_fills.saturating_add(u8::from(moved.big_fill));
        src.read += moved.read as u64;
        if moved.read > 0 || moved.eof {
            src.last_activity = now;
        }
        if moved.written > 0 {
            dst.last_activity = now;
        }
        done.map(|()| moved)
    }

    /// Whether every byte of this direction reached its destination.
    fn drained(&self) -> bool {
        self.prefix.is_empty()
            && self.buf.as_ref().is_none_or(Checkout::is_empty)
            && self.lane.pending() == 0
    }

    /// Forwards the source's FIN to `dst` once drained. The last direction
    /// to finish (`other_shut`) needs no shutdown: the session closes both
    /// sockets now, and a socket read to its EOF sends a FIN on close
    /// (after every byte it still holds).
    fn forward_fin(&mut self, dst: &TcpStream, other_shut: bool) -> io::Result<()> {
        if self.eof && !self.shut && self.drained() {
            if !other_shut {
                shutdown_write(dst)?;
            }
            self.shut = true;
        }
        Ok(())
    }

    /// Writes what is queued, then takes what the source has, once. An
    /// error of the kernel pipe itself counts with the source, whose bytes
    /// it holds; it is never a reset.
    fn move_bytes(
        &mut self,
        src: &mut Peer,
        dst: &mut Peer,
        moved: &mut Moved,
    ) -> Result<(), RoundFault> {
        if !self.prefix.is_empty() {
            let n = dst.write(&self.prefix).map_err(at_destination)?;
            self.prefix.drain(..n);
            moved.written += n;
        }
        if self.prefix.is_empty()
            && let Some(buf) = self.buf.as_mut()
            && !buf.is_empty()
        {
            let n = dst.write(buf.data()).map_err(at_destination)?;
            buf.consume(n);
            moved.written += n;
        }
        if let Lane::Unsplice(pipe) = &mut self.lane {
            // The pipe's bytes came before anything the source still holds:
            // the source waits until they are all in the buffer.
            let Some(buf) = self.buf.as_mut() else {
                // No buffer yet: the caller lends one on the next drive.
                return Ok(());
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
                return Ok(());
            }
            self.lane = Lane::Copy;
        }
        match &mut self.lane {
            lane @ (Lane::Copy | Lane::Warm { .. }) => {
                if let Some(buf) = self.buf.as_mut()
                    && !self.eof
                {
                    let (n, eof) = read_some(&mut src.stream, buf, &mut src.ready, usize::MAX)
                        .map_err(at_source)?;
                    self.eof = eof;
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
                    return Ok(());
                }
                match splice_round(pipe, src, dst, &mut self.eof, moved) {
                    Ok(()) => {}
                    Err((_, e)) if is_unsupported(&e) => {
                        if let Lane::Splice(pipe) = std::mem::take(&mut self.lane) {
                            self.lane = Lane::Unsplice(pipe);
                        }
                        moved.fell_back = Some(e);
                    }
                    Err(fault) => return Err(fault),
                }
            }
            // Handled above: still draining its pipe, it returned early.
            Lane::Unsplice(_) => {}
        }
        Ok(())
    }
}

/// Empties the kernel pipe towards the destination, then refills it from
/// the source and empties it again.
fn splice_round(
    pipe: &mut SplicePipe,
    src: &mut Peer,
    dst: &mut Peer,
    eof: &mut bool,
    moved: &mut Moved,
) -> Result<(), RoundFault> {
    moved.written += drain_pipe(pipe, dst).map_err(at_destination)?;
    if *eof || !src.ready.readable {
        return Ok(());
    }
    let was_empty = pipe.pending() == 0;
    match pipe.fill_from(&src.stream) {
        Ok(0) => {
            *eof = true;
            moved.eof = true;
        }
        Ok(n) => {
            moved.read += n;
            moved.big_fill = n >= pipe.capacity() / 2;
            moved.written += drain_pipe(pipe, dst).map_err(at_destination)?;
        }
        // With bytes in the pipe, "would block" may mean a full pipe rather
        // than an empty socket: the flag stays until the pipe drained, or the
        // socket would never be read again (no new edge would come).
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
            if was_empty {
                src.ready.readable = false;
            }
        }
        Err(e) => return Err(at_source(e)),
    }
    Ok(())
}

/// Splices what the pipe holds to `dst`, as much as it takes now; a full
/// `dst` clears its writable flag.
fn drain_pipe(pipe: &mut SplicePipe, dst: &mut Peer) -> io::Result<usize> {
    if pipe.pending() == 0 || !dst.ready.writable {
        return Ok(0);
    }
    dst.before_write();
    match pipe.drain_to(&dst.stream) {
        Ok(n) => {
            dst.wrote(n);
            Ok(n)
        }
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
            dst.ready.writable = false;
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

mod grow;
mod turn;
pub use grow::{Bulk, Growth};
pub use turn::{Exhausted, Splicing, Turn, turn};

#[cfg(test)]
mod auto_tests;
#[cfg(test)]
mod fault_tests;
#[cfg(test)]
mod grow_tests;
#[cfg(test)]
mod round_tests;
#[cfg(test)]
mod tests;
