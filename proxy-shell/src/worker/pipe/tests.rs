//! The pipe against real loopback sockets: copy and splice, backpressure,
//! refused splices, drain order and FINs.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener};
use std::os::fd::AsRawFd;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};
use preread_core::step::PrereadStep;

use super::{Ends, Flow, PipeStep, buffers_wanted, lend_buffer, open_lanes, pipe, spare_buffers};
use crate::worker::io::Ready;
use crate::worker::lanes::Lane;
use crate::worker::pipe_pool::PipePool;
use crate::worker::pool::BufferPool;
use crate::worker::session::{Phase, Session};
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

/// A session already in the pipe phase between `front` and `back`.
pub(super) fn session(front: TcpStream, back: TcpStream) -> Session {
    let now = Instant::now();
    let addr = SocketAddr::from(([127, 0, 0, 1], 1));
    let step = PrereadStep::refused(now);
    let mut session = Session::accepted(addr, addr, addr, front, step, now);
    session.back = Some(back);
    session.phase = Phase::Pipe;
    session
}

/// Lends and takes back buffers around one pipe step, as `drive_pipe`.
pub(super) fn step(session: &mut Session, pool: &mut BufferPool) -> PipeStep {
    for _ in 0..buffers_wanted(session) {
        lend_buffer(session, pool.checkout().expect("a buffer"));
    }
    let step = pipe(session, Instant::now());
    for buf in spare_buffers(session).into_iter().flatten() {
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
            ready.writable |= event.is_writable() || event.is_write_closed() || event.is_error();
            drive = true;
        }
        if !drive {
            continue;
        }
        drive = false;
        let outcome = step(session, pool);
        let fell_back = session.lanes.take_fallbacks();
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
    let mut pool = BufferPool::new(16 * 1024, crate::shared::admission::Slots::new(4));
    let mut session = session(front, back);
    let mut window = pool.checkout().expect("a buffer");
    window.space()[..6].copy_from_slice(b"HELLO|");
    window.fill(6);
    session.front_buf = Some(window);
    session.prefix = b"PREFIX|".to_vec();
    let mut pipes = PipePool::new(4);
    open_lanes(&mut session, splice.then_some(&mut pipes));
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
    let mut pool = BufferPool::new(16 * 1024, crate::shared::admission::Slots::new(4));
    let mut session = session(front, back);
    let mut pipes = PipePool::new(4);
    open_lanes(&mut session, splice.then_some(&mut pipes));
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
    let mut pool = BufferPool::new(16 * 1024, crate::shared::admission::Slots::new(4));
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
    let mut pool = BufferPool::new(16 * 1024, crate::shared::admission::Slots::new(4));
    let mut session = session(front, back);
    open_lanes(&mut session, Some(&mut PipePool::new(4)));
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
    let mut pool = BufferPool::new(64, crate::shared::admission::Slots::new(1));
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
    let mut pool = BufferPool::new(64, crate::shared::admission::Slots::new(2));
    let mut session = session(front, back);
    open_lanes(&mut session, Some(&mut PipePool::new(4)));
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
