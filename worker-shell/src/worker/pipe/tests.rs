//! The pipe against real loopback sockets: copy and splice, backpressure,
//! refused splices, drain order and FINs.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener};
use std::os::fd::AsRawFd;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};

use std::sync::{Arc, LazyLock};

use super::{Bulk, Growth, Pipe, PipeStep, Splicing, Turn, turn};
use crate::shared::admission::Slots;
use crate::worker::io::{Peer, Ready};
use crate::worker::lanes::Lane;
use crate::worker::pipe_pool::PipePool;
use crate::worker::pool::BufferPool;
use crate::worker::splice::SplicePipe;

pub(super) const BOUND: Duration = Duration::from_secs(20);

/// A loopback connection: (the test's end, blocking with timeouts; the
/// proxy's end, non-blocking).
pub(super) fn pair() -> (std::net::TcpStream, TcpStream) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let peer = std::net::TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
    let (ours, _) = listener.accept().expect("accept");
    ours.set_nonblocking(true).expect("non-blocking");
    peer.set_read_timeout(Some(BOUND)).expect("read timeout");
    peer.set_write_timeout(Some(BOUND)).expect("write timeout");
    (peer, TcpStream::from_std(ours))
}

/// What the pipe phase of a session drives: the client's socket and the
/// pipe to the backend.
#[derive(Debug)]
pub(super) struct Piped {
    pub(super) front: Peer,
    pub(super) pipe: Pipe,
}

/// A session just piped between `front` and `back`, as the worker opens
/// it (`splice` as the worker's setting).
pub(super) fn session(front: TcpStream, back: TcpStream, splice: bool) -> Piped {
    let now = Instant::now();
    Piped {
        front: Peer::new(front, now),
        pipe: Pipe::new(Peer::new(back, now), splice),
    }
}

/// One drive of the worker's ([`turn`]) with `splice_threshold = 0`: a
/// warming lane splices from its first drive, as if it had always.
pub(super) fn step(session: &mut Piped, pool: &mut BufferPool) -> Turn {
    step_with(session, pool, 0)
}

/// A budget of no grown pipe.
static NO_BUDGET: LazyLock<Arc<Slots>> = LazyLock::new(|| Slots::new(0));

/// Growing off (`splice_bulk_pipe_size = 0`).
pub(super) fn no_bulk() -> Bulk<'static> {
    Bulk {
        size: 0,
        budget: &NO_BUDGET,
    }
}

/// One drive of the worker's with this `splice_threshold`.
pub(super) fn step_with(session: &mut Piped, pool: &mut BufferPool, threshold: u64) -> Turn {
    step_bulk(session, pool, threshold, no_bulk())
}

/// [`step_with`], growing bulk directions' pipes as `bulk` says.
pub(super) fn step_bulk(
    session: &mut Piped,
    pool: &mut BufferPool,
    threshold: u64,
    bulk: Bulk<'_>,
) -> Turn {
    let mut pipes = PipePool::new(0, None);
    let splicing = Splicing {
        pipes: &mut pipes,
        threshold,
        bulk,
    };
    let client = SocketAddr::from(([127, 0, 0, 1], 1));
    let (front, pipe) = (&mut session.front, &mut session.pipe);
    turn(front, pipe, client, Instant::now(), pool, Some(splicing)).expect("a buffer")
}

/// The two lanes of an ended session.
#[derive(Debug)]
pub(super) struct Lanes {
    pub(super) up: Lane,
    pub(super) down: Lane,
}

/// What a session looked like when its pipe was done, once its sockets
/// are closed as the worker closes them (the last FIN goes with the close).
pub(super) struct Ended {
    pub(super) fallbacks: u32,
    pub(super) pipes_created: u32,
    pub(super) bytes_in: u64,
    pub(super) bytes_out: u64,
    pub(super) lanes: Lanes,
    pub(super) prefix_left: usize,
    pub(super) buffers_held: (bool, bool),
    /// Buffers held plus parked claims: what the pool counts in use for it.
    pub(super) claims: usize,
    /// Whether each direction's pipe grew (up, down).
    pub(super) growth: [Growth; 2],
}

/// Runs the pipe like the worker ([`drive`]), then drops the session:
/// its sockets close, as in `close.rs`.
fn run(session: Piped, pool: &mut BufferPool) -> Result<Ended, String> {
    run_with(session, pool, 0)
}

/// [`run`] with this `splice_threshold`.
pub(super) fn run_with(
    session: Piped,
    pool: &mut BufferPool,
    threshold: u64,
) -> Result<Ended, String> {
    run_bulk(session, pool, threshold, no_bulk())
}

/// [`run_with`], growing bulk directions' pipes as `bulk` says.
pub(super) fn run_bulk(
    mut session: Piped,
    pool: &mut BufferPool,
    threshold: u64,
    bulk: Bulk<'_>,
) -> Result<Ended, String> {
    let (fallbacks, pipes_created) = drive(&mut session, pool, threshold, bulk)?;
    let pipe = &mut session.pipe;
    let held = (pipe.up.buf.is_some(), pipe.down.buf.is_some());
    Ok(Ended {
        fallbacks,
        pipes_created,
        bytes_in: session.front.read,
        bytes_out: pipe.bytes_out,
        lanes: Lanes {
            up: std::mem::take(&mut pipe.up.lane),
            down: std::mem::take(&mut pipe.down.lane),
        },
        prefix_left: pipe.up.prefix.len(),
        buffers_held: held,
        claims: usize::from(held.0) + usize::from(held.1) + usize::from(pipe.parked),
        growth: [
            std::mem::take(&mut pipe.up.growth),
            std::mem::take(&mut pipe.down.growth),
        ],
    })
}

/// Drives the pipe like the worker: readiness forced on at first (as
/// `connected` does), then set only by edge-triggered events and
/// cleared only by the pipe; a drive per event or yield, until `Done`.
/// A readiness flag wrongly cleared shows as a stall: an error here.
/// Returns the directions that fell back from splice and the pipes made.
fn drive(
    session: &mut Piped,
    pool: &mut BufferPool,
    threshold: u64,
    bulk: Bulk<'_>,
) -> Result<(u32, u32), String> {
    let mut poll = Poll::new().map_err(|e| e.to_string())?;
    let both = Interest::READABLE | Interest::WRITABLE;
    poll.registry()
        .register(&mut session.front.stream, Token(0), both)
        .map_err(|e| e.to_string())?;
    poll.registry()
        .register(&mut session.pipe.back.stream, Token(1), both)
        .map_err(|e| e.to_string())?;
    session.front.ready = Ready {
        readable: true,
        writable: true,
        closing: false,
    };
    session.pipe.back.ready = session.front.ready;
    let mut events = Events::with_capacity(16);
    let deadline = Instant::now() + BOUND;
    let mut drive = true;
    let (mut fallbacks, mut created) = (0, 0);
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
                Token(0) => &mut session.front.ready,
                _ => &mut session.pipe.back.ready,
            };
            ready.merge(Ready::of_event(event));
            drive = true;
        }
        if !drive {
            continue;
        }
        drive = false;
        let done = step_bulk(session, pool, threshold, bulk);
        let (outcome, fell_back) = (done.step, done.fallbacks);
        created += done.pipes_created;
        if fell_back > 0 {
            fallbacks += fell_back;
            drive = true;
        }
        match outcome {
            PipeStep::Done => return Ok((fallbacks, created)),
            PipeStep::Failed(e) => return Err(format!("the pipe failed: {e}")),
            PipeStep::Yield => drive = true,
            PipeStep::Continue { .. } => {}
        }
    }
    Err(format!("the pipe did not finish in {BOUND:?}: {session:?}"))
}

pub(super) fn pattern(len: usize, salt: usize) -> Vec<u8> {
    (0..len).map(|i| ((i + salt) % 251) as u8).collect()
}

/// Reads until EOF on a thread.
pub(super) fn read_all(mut stream: std::net::TcpStream) -> JoinHandle<Vec<u8>> {
    thread::spawn(move || {
        let mut got = Vec::new();
        stream.read_to_end(&mut got).expect("read to EOF");
        got
    })
}

/// Writes `bytes` then FIN on a thread.
pub(super) fn write_all(mut stream: std::net::TcpStream, bytes: Vec<u8>) -> JoinHandle<()> {
    thread::spawn(move || {
        stream.write_all(&bytes).expect("write");
        stream.shutdown(Shutdown::Write).expect("FIN");
    })
}

/// A routed session: a PROXY-like prefix and an inherited window, with
/// more bytes and the client's FIN already waiting in the socket; the
/// backend reads to EOF, then answers 1 MiB and closes.
fn inherited_window_then_answer(splice: bool) -> (Ended, BufferPool) {
    let (mut client, front) = pair();
    let (mut server, back) = pair();
    let mut pool = BufferPool::new(16 * 1024, crate::shared::admission::Slots::new(4));
    let mut session = session(front, back, splice);
    let mut window = pool.checkout().expect("a buffer");
    window.space()[..6].copy_from_slice(b"HELLO|");
    window.fill(6);
    session.pipe.up.buf = Some(window);
    session.pipe.up.prefix = b"PREFIX|".to_vec();
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
    let ended = run(session, &mut pool).expect("the pipe ends");
    assert_eq!(ended.fallbacks, 0);
    assert_eq!(backend.join().expect("backend"), b"PREFIX|HELLO|LATER");
    assert!(
        from_backend.join().expect("client") == answer,
        "the answer differs"
    );
    assert_eq!(ended.bytes_in, 5, "only what the pipe read from the client");
    assert_eq!(ended.bytes_out, answer.len() as u64);
    assert_eq!(ended.prefix_left, 0);
    (ended, pool)
}

#[test]
fn splice_waits_for_the_prefix_and_the_window_then_gives_the_buffers_back() {
    let (ended, pool) = inherited_window_then_answer(true);
    assert!(ended.lanes.up.is_spliced() && ended.lanes.down.is_spliced());
    assert_eq!(ended.buffers_held, (false, false));
    assert_eq!(pool.in_use(), 0, "a spliced session holds no pooled buffer");
}

#[test]
fn without_splice_the_same_bytes_are_copied() {
    let (ended, pool) = inherited_window_then_answer(false);
    assert!(matches!(
        (&ended.lanes.up, &ended.lanes.down),
        (Lane::Copy, Lane::Copy)
    ));
    assert_eq!(pool.in_use(), 2, "one claim per copying direction");
    assert_eq!(ended.claims, 2);
    assert_eq!(
        ended.buffers_held,
        (false, false),
        "an ended copying session holds no buffer memory: both are parked"
    );
}

/// 8 MiB each way at once, the readers starting late so that every
/// socket buffer and kernel pipe fills up first.
fn both_ways_under_backpressure(splice: bool) {
    const LEN: usize = 8 << 20;
    let (client, front) = pair();
    let (server, back) = pair();
    let mut pool = BufferPool::new(16 * 1024, crate::shared::admission::Slots::new(4));
    let session = session(front, back, splice);
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
    let ended = run(session, &mut pool).expect("the pipe ends");
    assert_eq!(ended.fallbacks, 0);
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
    assert_eq!((ended.bytes_in, ended.bytes_out), (LEN as u64, LEN as u64));
    assert_eq!(ended.lanes.up.is_spliced(), splice);
    assert_eq!(ended.lanes.down.is_spliced(), splice);
    assert_eq!(
        (ended.lanes.up.pending(), ended.lanes.down.pending()),
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
    let mut pipe = SplicePipe::new(None).expect("pipe").0;
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
    let mut pool = BufferPool::new(16 * 1024, crate::shared::admission::Slots::new(4));
    let mut session = session(front, back, false);
    // As after a refused splice: the pipe's bytes still to deliver.
    session.pipe.up.lane = Lane::Unsplice(pipe);
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
    let ended = run(session, &mut pool).expect("the pipe ends");
    assert_eq!(ended.fallbacks, 0);
    assert_eq!(backend.join().expect("backend"), b"OLD|NEW");
    assert_eq!(from_backend.join().expect("client"), b"");
    assert!(matches!(ended.lanes.up, Lane::Copy));
    assert_eq!(ended.bytes_in, 3);
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
    let mut pool = BufferPool::new(16 * 1024, crate::shared::admission::Slots::new(4));
    let session = session(front, back, true);
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
    let ended = run(session, &mut pool).expect("the pipe ends");
    client_sends.join().expect("client writer");
    assert!(backend.join().expect("backend") == up, "upload differs");
    assert!(
        client_gets.join().expect("client reader") == down,
        "download differs"
    );
    assert_eq!(ended.fallbacks, 1 + u32::from(both));
    assert!(matches!(ended.lanes.up, Lane::Copy));
    assert_eq!(ended.lanes.down.is_spliced(), !both);
    assert_eq!((ended.bytes_in, ended.bytes_out), (LEN as u64, LEN as u64));
    // Claims are taken when a copying direction has bytes to move, and
    // never more than one per copying direction.
    assert_eq!(pool.in_use(), ended.claims);
    assert!((1..=1 + usize::from(both)).contains(&ended.claims));
}

#[test]
fn a_refused_splice_drains_the_kernel_pipe_then_copies_that_direction() {
    refused_splice(false);
}

#[test]
fn a_refused_splice_both_ways() {
    refused_splice(true);
}

#[test]
fn a_fin_waits_until_the_kernel_pipe_drained() {
    let (mut client, front) = pair();
    let (mut server, back) = pair();
    let mut pool = BufferPool::new(64, crate::shared::admission::Slots::new(2));
    let mut session = session(front, back, true);
    client.write_all(b"DATA").expect("write");
    client.shutdown(Shutdown::Write).expect("FIN");
    server.write_all(b"ANSWER").expect("write");
    server.shutdown(Shutdown::Write).expect("FIN");
    // Both sockets readable, neither takes a byte (no writable flag):
    // the data goes into the pipes and stays there while both EOFs are
    // seen.
    let deadline = Instant::now() + BOUND;
    while !(session.pipe.up.eof && session.pipe.down.eof) && Instant::now() < deadline {
        session.front.ready.readable = true;
        session.pipe.back.ready.readable = true;
        assert!(matches!(
            step(&mut session, &mut pool).step,
            PipeStep::Continue { .. }
        ));
        thread::sleep(Duration::from_millis(1));
    }
    let pipe = &session.pipe;
    assert!(pipe.up.eof && pipe.down.eof, "both EOFs seen");
    assert_eq!((pipe.up.lane.pending(), pipe.down.lane.pending()), (4, 6));
    assert!(
        !pipe.up.shut && !pipe.down.shut,
        "a FIN went out before the bytes in the pipe"
    );
    // Both sides take bytes again: the pipes drain, then the FINs follow.
    session.front.ready.writable = true;
    session.pipe.back.ready.writable = true;
    assert!(matches!(step(&mut session, &mut pool).step, PipeStep::Done));
    assert_eq!((session.front.read, session.pipe.bytes_out), (4, 6));
    // The last FIN goes with the close, as in the worker.
    drop(session);
    let mut got = Vec::new();
    server.read_to_end(&mut got).expect("read to EOF");
    assert_eq!(got, b"DATA");
    got.clear();
    client.read_to_end(&mut got).expect("read to EOF");
    assert_eq!(got, b"ANSWER");
    assert_eq!(pool.in_use(), 0);
}
