//! The pipe step of a session: both directions moved until nothing moves,
//! each direction ([`Lane`]) copying through a pooled buffer or splicing
//! through a kernel pipe (`worker/splice.rs`), FINs forwarded once drained.
//!
//! Owns: `Session::pipe` and the per-direction state (`Session::lanes`): when
//! a direction splices, when it gives its pooled buffer back, and its
//! fallback to copying when `splice` is refused. Must never: splice while
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

use super::pipe_pool::PipePool;
use super::pool::Checkout;
use super::session::{Ready, Session, read_some, write_some};
use super::splice::{SplicePipe, is_unsupported};

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
    Failed(io::Error),
}

/// How one direction of the pipe moves its bytes.
#[derive(Debug, Default)]
pub enum Lane {
    /// Read into the direction's pooled buffer, written from it.
    #[default]
    Copy,
    /// Through a kernel pipe with `splice(2)`, no pooled buffer needed.
    /// Userspace bytes queued before (the PROXY prefix, the inherited
    /// window) go out first: nothing is spliced while one remains.
    Splice(SplicePipe),
    /// `splice` was refused (`EINVAL`/`ENOSYS`): the bytes left in the
    /// kernel pipe are read into the pooled buffer, then the direction
    /// copies ([`Lane::Copy`]).
    Unsplice(SplicePipe),
}

impl Lane {
    /// Bytes in this direction's kernel pipe.
    pub fn pending(&self) -> usize {
        match self {
            Lane::Copy => 0,
            Lane::Splice(pipe) | Lane::Unsplice(pipe) => pipe.pending(),
        }
    }

    /// Whether the direction currently splices.
    pub fn is_spliced(&self) -> bool {
        matches!(self, Lane::Splice(_))
    }

    /// Whether the direction needs a pooled buffer to move bytes.
    fn wants_buffer(&self) -> bool {
        !self.is_spliced()
    }
}

/// The two directions of a piped session.
#[derive(Debug, Default)]
pub struct Lanes {
    /// Client to backend.
    pub up: Lane,
    /// Backend to client.
    pub down: Lane,
    /// Directions that fell back from splice to copy and were not yet
    /// reported ([`Session::take_fallbacks`]).
    fallbacks: u32,
}

impl Lanes {
    /// The kernel pipes of both directions, for the worker's pool once the
    /// session is over.
    pub fn into_pipes(self) -> impl Iterator<Item = SplicePipe> {
        [self.up, self.down]
            .into_iter()
            .filter_map(|lane| match lane {
                Lane::Copy => None,
                Lane::Splice(pipe) | Lane::Unsplice(pipe) => Some(pipe),
            })
    }
}

impl Session {
    /// Chooses how each pipe direction moves bytes, once the backend is
    /// connected (never before routing): with a pipe pool (`splice` on), a
    /// kernel pipe per direction; a direction whose pipe cannot be had
    /// copies. Returns how many pipes had to be created.
    pub fn open_lanes(&mut self, pipes: Option<&mut PipePool>) -> u32 {
        let Some(pipes) = pipes else {
            return 0;
        };
        let mut created = 0;
        for (lane, direction) in [
            (&mut self.lanes.up, "client to backend"),
            (&mut self.lanes.down, "backend to client"),
        ] {
            match pipes.take() {
                Ok((pipe, new)) => {
                    created += u32::from(new);
                    *lane = Lane::Splice(pipe);
                }
                Err(e) => debug!(
                    "no splice pipe for {} ({direction}): {e}; copying",
                    self.client
                ),
            }
        }
        created
    }

    /// Pooled buffers the pipe needs and does not hold: one per copying
    /// direction without its buffer. Give them with [`Self::lend_buffer`].
    pub fn buffers_wanted(&self) -> usize {
        usize::from(self.front_buf.is_none() && self.lanes.up.wants_buffer())
            + usize::from(self.back_buf.is_none() && self.lanes.down.wants_buffer())
    }

    /// Takes a pooled buffer for the first direction that wants one.
    pub fn lend_buffer(&mut self, buf: Checkout) {
        if self.front_buf.is_none() && self.lanes.up.wants_buffer() {
            self.front_buf = Some(buf);
        } else {
            debug_assert!(self.back_buf.is_none(), "a buffer lent to no direction");
            self.back_buf = Some(buf);
        }
    }

    /// The buffers of spliced directions that hold nothing any more, for
    /// the pool: a spliced session holds no pooled memory once its
    /// inherited window went out.
    pub fn spare_buffers(&mut self) -> [Option<Checkout>; 2] {
        let spare = |lane: &Lane, slot: &mut Option<Checkout>| {
            if lane.is_spliced() && slot.as_ref().is_some_and(Checkout::is_empty) {
                slot.take()
            } else {
                None
            }
        };
        [
            spare(&self.lanes.up, &mut self.front_buf),
            spare(&self.lanes.down, &mut self.back_buf),
        ]
    }

    /// Directions that fell back from splice to copy since the last call.
    pub fn take_fallbacks(&mut self) -> u32 {
        std::mem::take(&mut self.lanes.fallbacks)
    }

    /// Moves bytes both ways until nothing moves, forwarding each FIN only
    /// once the queue towards that side is empty (buffer and kernel pipe).
    pub fn pipe(&mut self, now: Instant) -> PipeStep {
        match self.pipe_inner(now) {
            Ok(step) => step,
            Err(e) => PipeStep::Failed(e),
        }
    }

    fn pipe_inner(&mut self, now: Instant) -> io::Result<PipeStep> {
        let Some(back) = self.back.as_mut() else {
            return Err(io::Error::other("pipe without its backend socket"));
        };
        // The backend-to-client direction has no prefix.
        let mut no_prefix = Vec::new();
        let mut moved_any = false;
        for _ in 0..PIPE_ROUNDS_PER_TURN {
            let up = Flow {
                ends: Ends {
                    src: &mut self.front,
                    src_ready: &mut self.front_ready,
                    dst: &mut *back,
                    dst_ready: &mut self.back_ready,
                },
                prefix: &mut self.prefix,
                buf: &mut self.front_buf,
                lane: &mut self.lanes.up,
                eof: &mut self.front_eof,
            }
            .round()?;
            self.bytes_in += up.read as u64;
            if up.read > 0 || up.eof {
                self.last_front_activity = now;
            }
            // An upload the backend only receives is backend activity too:
            // a long upload to a quiet backend must not hit back_timeout.
            if up.written > 0 {
                self.last_back_activity = now;
            }
            let down = Flow {
                ends: Ends {
                    src: &mut *back,
                    src_ready: &mut self.back_ready,
                    dst: &mut self.front,
                    dst_ready: &mut self.front_ready,
                },
                prefix: &mut no_prefix,
                buf: &mut self.back_buf,
                lane: &mut self.lanes.down,
                eof: &mut self.back_eof,
            }
            .round()?;
            self.bytes_out += down.written as u64;
            if down.written > 0 {
                self.last_front_activity = now;
            }
            if down.read > 0 || down.eof {
                self.last_back_activity = now;
            }
            for (moved, direction) in [(&up, "client to backend"), (&down, "backend to client")] {
                if let Some(e) = &moved.fell_back {
                    debug!(
                        "splice refused for {} ({direction}): {e}; copying",
                        self.client
                    );
                    self.lanes.fallbacks += 1;
                }
            }
            if self.front_eof
                && self.prefix.is_empty()
                && self.front_buf.as_ref().is_none_or(Checkout::is_empty)
                && self.lanes.up.pending() == 0
                && !self.back_write_shut
            {
                shutdown_write(back)?;
                self.back_write_shut = true;
            }
            if self.back_eof
                && self.back_buf.as_ref().is_none_or(Checkout::is_empty)
                && self.lanes.down.pending() == 0
                && !self.front_write_shut
            {
                shutdown_write(&self.front)?;
                self.front_write_shut = true;
            }
            if self.back_write_shut && self.front_write_shut {
                return Ok(PipeStep::Done);
            }
            if up.total() + down.total() == 0 {
                return Ok(PipeStep::Continue { moved: moved_any });
            }
            moved_any = true;
        }
        Ok(PipeStep::Yield)
    }
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
    /// Writes what is queued, then takes what the source has, once.
    fn round(mut self) -> io::Result<Moved> {
        let mut moved = Moved::default();
        if !self.prefix.is_empty() {
            let n = write_some(self.ends.dst, self.prefix, self.ends.dst_ready)?;
            self.prefix.drain(..n);
            moved.written += n;
        }
        if self.prefix.is_empty()
            && let Some(buf) = self.buf.as_mut()
            && !buf.is_empty()
        {
            let n = write_some(self.ends.dst, buf.data(), self.ends.dst_ready)?;
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
                let n = pipe.read_into(space)?;
                buf.fill(n);
                moved.shuffled += n;
            }
            if pipe.pending() > 0 {
                return Ok(moved);
            }
            *self.lane = Lane::Copy;
        }
        match &mut *self.lane {
            Lane::Copy => {
                if let Some(buf) = self.buf.as_mut()
                    && !*self.eof
                {
                    let (n, eof) = read_some(self.ends.src, buf, self.ends.src_ready, usize::MAX)?;
                    *self.eof = eof;
                    moved.read += n;
                    moved.eof = eof;
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
                    Err(e) if is_unsupported(&e) => {
                        if let Lane::Splice(pipe) = std::mem::take(self.lane) {
                            *self.lane = Lane::Unsplice(pipe);
                        }
                        moved.fell_back = Some(e);
                    }
                    Err(e) => return Err(e),
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
) -> io::Result<()> {
    moved.written += drain_pipe(pipe, ends.dst, ends.dst_ready)?;
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
            moved.written += drain_pipe(pipe, ends.dst, ends.dst_ready)?;
        }
        // With bytes in the pipe, "would block" may mean a full pipe rather
        // than an empty socket: the flag stays until the pipe drained, or the
        // socket would never be read again (no new edge would come).
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
            if was_empty {
                ends.src_ready.readable = false;
            }
        }
        Err(e) => return Err(e),
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

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::{Shutdown, SocketAddr, TcpListener};
    use std::os::fd::AsRawFd;
    use std::thread::{self, JoinHandle};
    use std::time::{Duration, Instant};

    use mio::net::TcpStream;
    use mio::{Events, Interest, Poll, Token};

    use super::{Ends, Flow, Lane, PipeStep};
    use crate::worker::pipe_pool::PipePool;
    use crate::worker::pool::BufferPool;
    use crate::worker::session::{Phase, Ready, Session};
    use crate::worker::splice::SplicePipe;

    const BOUND: Duration = Duration::from_secs(20);

    /// A loopback connection: (the test's end, blocking with timeouts; the
    /// proxy's end, non-blocking).
    fn pair() -> (std::net::TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let peer =
            std::net::TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
        let (ours, _) = listener.accept().expect("accept");
        ours.set_nonblocking(true).expect("non-blocking");
        peer.set_read_timeout(Some(BOUND)).expect("read timeout");
        peer.set_write_timeout(Some(BOUND)).expect("write timeout");
        (peer, TcpStream::from_std(ours))
    }

    /// A session already in the pipe phase between `front` and `back`.
    fn session(front: TcpStream, back: TcpStream) -> Session {
        let now = Instant::now();
        let addr = SocketAddr::from(([127, 0, 0, 1], 1));
        let mut session = Session::accepted(addr, addr, addr, front, now);
        session.back = Some(back);
        session.phase = Phase::Pipe;
        session
    }

    /// Lends and takes back buffers around one pipe step, as `drive_pipe`.
    fn step(session: &mut Session, pool: &mut BufferPool) -> PipeStep {
        for _ in 0..session.buffers_wanted() {
            session.lend_buffer(pool.checkout().expect("a buffer"));
        }
        let step = session.pipe(Instant::now());
        for buf in session.spare_buffers().into_iter().flatten() {
            pool.give_back(buf);
        }
        step
    }

    /// Runs the pipe like the worker: readiness forced on at first (as
    /// `connected` does), then set only by edge-triggered events and
    /// cleared only by the pipe; a drive per event or yield, until `Done`.
    /// A readiness flag wrongly cleared shows as a stall: an error here.
    /// Returns the directions that fell back from splice.
    fn run(session: &mut Session, pool: &mut BufferPool) -> Result<u32, String> {
        let mut poll = Poll::new().map_err(|e| e.to_string())?;
        let both = Interest::READABLE | Interest::WRITABLE;
        poll.registry()
            .register(&mut session.front, Token(0), both)
            .map_err(|e| e.to_string())?;
        if let Some(back) = session.back.as_mut() {
            poll.registry()
                .register(back, Token(1), both)
                .map_err(|e| e.to_string())?;
        }
        session.front_ready = Ready {
            readable: true,
            writable: true,
        };
        session.back_ready = session.front_ready;
        let mut events = Events::with_capacity(16);
        let deadline = Instant::now() + BOUND;
        let mut drive = true;
        let mut fallbacks = 0;
        while Instant::now() < deadline {
            let wait = if drive {
                Duration::ZERO
            } else {
                Duration::from_millis(100)
            };
            poll.poll(&mut events, Some(wait))
                .map_err(|e| e.to_string())?;
            for event in &events {
                let ready = match event.token() {
                    Token(0) => &mut session.front_ready,
                    _ => &mut session.back_ready,
                };
                ready.readable |= event.is_readable() || event.is_read_closed() || event.is_error();
                ready.writable |=
                    event.is_writable() || event.is_write_closed() || event.is_error();
                drive = true;
            }
            if !drive {
                continue;
            }
            drive = false;
            let outcome = step(session, pool);
            let fell_back = session.take_fallbacks();
            if fell_back > 0 {
                fallbacks += fell_back;
                drive = true;
            }
            match outcome {
                PipeStep::Done => return Ok(fallbacks),
                PipeStep::Failed(e) => return Err(format!("the pipe failed: {e}")),
                PipeStep::Yield => drive = true,
                PipeStep::Continue { .. } => {}
            }
        }
        Err(format!("the pipe did not finish in {BOUND:?}: {session:?}"))
    }

    fn pattern(len: usize, salt: usize) -> Vec<u8> {
        (0..len).map(|i| ((i + salt) % 251) as u8).collect()
    }

    /// Reads until EOF on a thread.
    fn read_all(mut stream: std::net::TcpStream) -> JoinHandle<Vec<u8>> {
        thread::spawn(move || {
            let mut got = Vec::new();
            stream.read_to_end(&mut got).expect("read to EOF");
            got
        })
    }

    /// Writes `bytes` then FIN on a thread.
    fn write_all(mut stream: std::net::TcpStream, bytes: Vec<u8>) -> JoinHandle<()> {
        thread::spawn(move || {
            stream.write_all(&bytes).expect("write");
            stream.shutdown(Shutdown::Write).expect("FIN");
        })
    }

    /// A routed session: a PROXY-like prefix and an inherited window, with
    /// more bytes and the client's FIN already waiting in the socket; the
    /// backend reads to EOF, then answers 1 MiB and closes.
    fn inherited_window_then_answer(splice: bool) -> (Session, BufferPool) {
        let (mut client, front) = pair();
        let (mut server, back) = pair();
        let mut pool = BufferPool::new(16 * 1024, 4);
        let mut session = session(front, back);
        let mut window = pool.checkout().expect("a buffer");
        window.space()[..6].copy_from_slice(b"HELLO|");
        window.fill(6);
        session.front_buf = Some(window);
        session.prefix = b"PREFIX|".to_vec();
        let mut pipes = PipePool::new(4);
        session.open_lanes(splice.then_some(&mut pipes));
        client.write_all(b"LATER").expect("write");
        client.shutdown(Shutdown::Write).expect("FIN");
        let answer = pattern(1 << 20, 7);
        let backend = {
            let answer = answer.clone();
            thread::spawn(move || {
                let mut got = Vec::new();
                server.read_to_end(&mut got).expect("read to EOF");
                server.write_all(&answer).expect("answer");
                server.shutdown(Shutdown::Write).expect("FIN");
                got
            })
        };
        let from_backend = read_all(client);
        assert_eq!(run(&mut session, &mut pool).expect("the pipe ends"), 0);
        assert_eq!(backend.join().expect("backend"), b"PREFIX|HELLO|LATER");
        assert!(
            from_backend.join().expect("client") == answer,
            "the answer differs"
        );
        assert_eq!(
            session.bytes_in, 5,
            "only what the pipe read from the client"
        );
        assert_eq!(session.bytes_out, answer.len() as u64);
        assert!(session.prefix.is_empty());
        (session, pool)
    }

    #[test]
    fn splice_waits_for_the_prefix_and_the_window_then_gives_the_buffers_back() {
        let (session, pool) = inherited_window_then_answer(true);
        assert!(session.lanes.up.is_spliced() && session.lanes.down.is_spliced());
        assert!(session.front_buf.is_none() && session.back_buf.is_none());
        assert_eq!(pool.in_use(), 0, "a spliced session holds no pooled buffer");
    }

    #[test]
    fn without_splice_the_same_bytes_are_copied() {
        let (session, pool) = inherited_window_then_answer(false);
        assert!(matches!(
            (&session.lanes.up, &session.lanes.down),
            (Lane::Copy, Lane::Copy)
        ));
        assert_eq!(pool.in_use(), 2, "one buffer per copying direction");
    }

    /// 8 MiB each way at once, the readers starting late so that every
    /// socket buffer and kernel pipe fills up first.
    fn both_ways_under_backpressure(splice: bool) {
        const LEN: usize = 8 << 20;
        let (client, front) = pair();
        let (server, back) = pair();
        let mut pool = BufferPool::new(16 * 1024, 4);
        let mut session = session(front, back);
        let mut pipes = PipePool::new(4);
        session.open_lanes(splice.then_some(&mut pipes));
        let (up, down) = (pattern(LEN, 0), pattern(LEN, 100));
        let late = |stream: std::net::TcpStream| {
            thread::spawn(move || {
                thread::sleep(Duration::from_millis(200));
                read_all(stream).join().expect("reader")
            })
        };
        let client_gets = late(client.try_clone().expect("clone"));
        let server_gets = late(server.try_clone().expect("clone"));
        let client_sends = write_all(client, up.clone());
        let server_sends = write_all(server, down.clone());
        assert_eq!(run(&mut session, &mut pool).expect("the pipe ends"), 0);
        client_sends.join().expect("client writer");
        server_sends.join().expect("server writer");
        assert!(
            server_gets.join().expect("server reader") == up,
            "upload differs"
        );
        assert!(
            client_gets.join().expect("client reader") == down,
            "download differs"
        );
        assert_eq!(
            (session.bytes_in, session.bytes_out),
            (LEN as u64, LEN as u64)
        );
        assert_eq!(session.lanes.up.is_spliced(), splice);
        assert_eq!(session.lanes.down.is_spliced(), splice);
        assert_eq!(
            (session.lanes.up.pending(), session.lanes.down.pending()),
            (0, 0)
        );
    }

    #[test]
    fn spliced_both_ways_under_backpressure() {
        both_ways_under_backpressure(true);
    }

    #[test]
    fn copied_both_ways_under_backpressure() {
        both_ways_under_backpressure(false);
    }

    #[test]
    fn bytes_left_in_the_kernel_pipe_go_out_before_copied_ones() {
        let (mut client, front) = pair();
        let (server, back) = pair();
        let (mut feeder, source) = pair();
        let mut pipe = SplicePipe::new().expect("pipe");
        feeder.write_all(b"OLD|").expect("write");
        let deadline = Instant::now() + BOUND;
        while pipe.pending() < 4 && Instant::now() < deadline {
            match pipe.fill_from(&source) {
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    thread::sleep(Duration::from_millis(1));
                }
                Err(e) => panic!("fill: {e}"),
            }
        }
        assert_eq!(pipe.pending(), 4);
        let mut pool = BufferPool::new(16 * 1024, 4);
        let mut session = session(front, back);
        // As after a refused splice: the pipe's bytes still to deliver.
        session.lanes.up = Lane::Unsplice(pipe);
        client.write_all(b"NEW").expect("write");
        client.shutdown(Shutdown::Write).expect("FIN");
        let backend = thread::spawn(move || {
            let mut server = server;
            let mut got = Vec::new();
            server.read_to_end(&mut got).expect("read to EOF");
            server.shutdown(Shutdown::Write).expect("FIN");
            got
        });
        let from_backend = read_all(client);
        assert_eq!(run(&mut session, &mut pool).expect("the pipe ends"), 0);
        assert_eq!(backend.join().expect("backend"), b"OLD|NEW");
        assert_eq!(from_backend.join().expect("client"), b"");
        assert!(matches!(session.lanes.up, Lane::Copy));
        assert_eq!(session.bytes_in, 3);
    }

    /// Sets `O_APPEND` on a socket: `send` ignores it, but `splice` into a
    /// file opened for append is refused with `EINVAL`, as for a socket
    /// type without splice support.
    fn refuse_splice_into(stream: &TcpStream) {
        let fd = stream.as_raw_fd();
        // SAFETY: fcntl on a descriptor `stream` owns and keeps open; the
        // flags are plain integers.
        let rc = unsafe {
            libc::fcntl(
                fd,
                libc::F_SETFL,
                libc::fcntl(fd, libc::F_GETFL) | libc::O_APPEND,
            )
        };
        assert_eq!(rc, 0, "fcntl: {}", std::io::Error::last_os_error());
    }

    /// 1 MiB up then 1 MiB down, with splice refused into the backend
    /// socket (and into the client socket when `both`): the bytes already in
    /// the kernel pipe are delivered first, then the direction copies.
    fn refused_splice(both: bool) {
        const LEN: usize = 1 << 20;
        let (client, front) = pair();
        let (mut server, back) = pair();
        refuse_splice_into(&back);
        if both {
            refuse_splice_into(&front);
        }
        let mut pool = BufferPool::new(16 * 1024, 4);
        let mut session = session(front, back);
        session.open_lanes(Some(&mut PipePool::new(4)));
        let (up, down) = (pattern(LEN, 3), pattern(LEN, 5));
        let client_gets = read_all(client.try_clone().expect("clone"));
        let client_sends = write_all(client, up.clone());
        let backend = {
            let down = down.clone();
            thread::spawn(move || {
                let mut got = Vec::new();
                server.read_to_end(&mut got).expect("read to EOF");
                server.write_all(&down).expect("answer");
                server.shutdown(Shutdown::Write).expect("FIN");
                got
            })
        };
        let fallbacks = run(&mut session, &mut pool).expect("the pipe ends");
        client_sends.join().expect("client writer");
        assert!(backend.join().expect("backend") == up, "upload differs");
        assert!(
            client_gets.join().expect("client reader") == down,
            "download differs"
        );
        assert_eq!(fallbacks, 1 + u32::from(both));
        assert!(matches!(session.lanes.up, Lane::Copy));
        assert_eq!(session.lanes.down.is_spliced(), !both);
        assert_eq!(
            (session.bytes_in, session.bytes_out),
            (LEN as u64, LEN as u64)
        );
        assert_eq!(pool.in_use(), 1 + usize::from(both));
    }

    #[test]
    fn a_refused_splice_drains_the_kernel_pipe_then_copies_that_direction() {
        refused_splice(false);
    }

    #[test]
    fn a_refused_splice_both_ways() {
        refused_splice(true);
    }

    /// Bytes the kernel holds unread on `stream`.
    fn unread(stream: &TcpStream) -> usize {
        let mut n: libc::c_int = 0;
        // SAFETY: FIONREAD writes one int through the pointer, to a live
        // local; the descriptor is open for the call.
        let rc = unsafe { libc::ioctl(stream.as_raw_fd(), libc::FIONREAD, &mut n) };
        assert_eq!(rc, 0, "FIONREAD: {}", std::io::Error::last_os_error());
        usize::try_from(n).unwrap_or(0)
    }

    /// One round of one direction, with the readiness given.
    fn round(
        src: &mut TcpStream,
        dst: &mut TcpStream,
        ready: (&mut Ready, &mut Ready),
        lane: &mut Lane,
        prefix: &mut Vec<u8>,
        buf: &mut Option<crate::worker::pool::Checkout>,
    ) -> super::Moved {
        let mut eof = false;
        Flow {
            ends: Ends {
                src,
                src_ready: ready.0,
                dst,
                dst_ready: ready.1,
            },
            prefix,
            buf,
            lane,
            eof: &mut eof,
        }
        .round()
        .expect("a round")
    }

    #[test]
    fn nothing_is_spliced_while_the_prefix_or_the_window_waits() {
        let (mut client, mut front) = pair();
        let (_server, mut back) = pair();
        client.write_all(b"must wait").expect("write");
        let deadline = Instant::now() + BOUND;
        while unread(&front) < 9 && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(1));
        }
        let mut pool = BufferPool::new(64, 1);
        let mut lane = Lane::Splice(SplicePipe::new().expect("pipe"));
        let mut src_ready = Ready {
            readable: true,
            writable: true,
        };
        // The backend takes nothing now: the queued bytes stay queued.
        let mut dst_ready = Ready {
            readable: true,
            writable: false,
        };
        let mut window = pool.checkout().expect("a buffer");
        window.space()[..6].copy_from_slice(b"HELLO|");
        window.fill(6);
        let mut buf = Some(window);
        for prefix in [b"PREFIX|".to_vec(), Vec::new()] {
            let mut prefix = prefix;
            let moved = round(
                &mut front,
                &mut back,
                (&mut src_ready, &mut dst_ready),
                &mut lane,
                &mut prefix,
                &mut buf,
            );
            assert_eq!(moved.total(), 0);
            assert_eq!(lane.pending(), 0, "spliced past queued userspace bytes");
            assert_eq!(unread(&front), 9, "the client's bytes wait in the socket");
        }
        // Once the window went out, splicing starts.
        dst_ready.writable = true;
        let moved = round(
            &mut front,
            &mut back,
            (&mut src_ready, &mut dst_ready),
            &mut lane,
            &mut Vec::new(),
            &mut buf,
        );
        assert_eq!((moved.written, moved.read), (6 + 9, 9));
        assert_eq!((lane.pending(), unread(&front)), (0, 0));
    }

    #[test]
    fn a_full_kernel_pipe_keeps_the_source_readable() {
        let (client, mut front) = pair();
        let (_server, mut back) = pair();
        // Fill every buffer on the way: the client's send buffer and the
        // proxy's receive buffer.
        client.set_nonblocking(true).expect("non-blocking");
        let chunk = pattern(64 * 1024, 0);
        let mut client = client;
        for _ in 0..4096 {
            match client.write(&chunk) {
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => panic!("write: {e}"),
            }
        }
        let mut lane = Lane::Splice(SplicePipe::new().expect("pipe"));
        let mut src_ready = Ready {
            readable: true,
            writable: true,
        };
        // The backend takes nothing: the pipe fills up and stays full.
        let mut dst_ready = Ready {
            readable: true,
            writable: false,
        };
        let mut last = usize::MAX;
        for _ in 0..1000 {
            last = round(
                &mut front,
                &mut back,
                (&mut src_ready, &mut dst_ready),
                &mut lane,
                &mut Vec::new(),
                &mut None,
            )
            .read;
            if last == 0 {
                break;
            }
        }
        assert_eq!(last, 0, "the pipe filled up");
        assert!(lane.pending() > 0);
        assert!(unread(&front) > 0, "the socket still holds bytes");
        // "Would block" came from the full pipe, not from the socket: had
        // the flag been cleared, no new edge would ever announce these bytes.
        assert!(src_ready.readable);
        // With the pipe empty, "would block" is the socket's: cleared.
        let mut empty = Lane::Splice(SplicePipe::new().expect("pipe"));
        let (_idle, mut quiet) = pair();
        let mut quiet_ready = Ready {
            readable: true,
            writable: true,
        };
        round(
            &mut quiet,
            &mut back,
            (&mut quiet_ready, &mut dst_ready),
            &mut empty,
            &mut Vec::new(),
            &mut None,
        );
        assert!(!quiet_ready.readable);
    }

    #[test]
    fn a_fin_waits_until_the_kernel_pipe_drained() {
        let (mut client, front) = pair();
        let (mut server, back) = pair();
        let mut pool = BufferPool::new(64, 2);
        let mut session = session(front, back);
        session.open_lanes(Some(&mut PipePool::new(4)));
        client.write_all(b"DATA").expect("write");
        client.shutdown(Shutdown::Write).expect("FIN");
        server.write_all(b"ANSWER").expect("write");
        server.shutdown(Shutdown::Write).expect("FIN");
        // Both sockets readable, neither takes a byte (no writable flag):
        // the data goes into the pipes and stays there while both EOFs are
        // seen.
        let deadline = Instant::now() + BOUND;
        while !(session.front_eof && session.back_eof) && Instant::now() < deadline {
            session.front_ready.readable = true;
            session.back_ready.readable = true;
            assert!(matches!(
                step(&mut session, &mut pool),
                PipeStep::Continue { .. }
            ));
            thread::sleep(Duration::from_millis(1));
        }
        assert!(session.front_eof && session.back_eof, "both EOFs seen");
        assert_eq!(
            (session.lanes.up.pending(), session.lanes.down.pending()),
            (4, 6)
        );
        assert!(
            !session.back_write_shut && !session.front_write_shut,
            "a FIN went out before the bytes in the pipe"
        );
        // Both sides take bytes again: the pipes drain, then the FINs follow.
        session.front_ready.writable = true;
        session.back_ready.writable = true;
        assert!(matches!(step(&mut session, &mut pool), PipeStep::Done));
        let mut got = Vec::new();
        server.read_to_end(&mut got).expect("read to EOF");
        assert_eq!(got, b"DATA");
        got.clear();
        client.read_to_end(&mut got).expect("read to EOF");
        assert_eq!(got, b"ANSWER");
        assert_eq!((session.bytes_in, session.bytes_out), (4, 6));
        assert_eq!(pool.in_use(), 0);
    }
}
