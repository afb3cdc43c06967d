//! One round of one direction against real loopback sockets: nothing is
//! spliced past queued userspace bytes, and a full kernel pipe never
//! clears the source's readiness.

use std::io::Write;
use std::os::fd::AsRawFd;
use std::thread;
use std::time::{Duration, Instant};

use mio::net::TcpStream;

use super::Flow;
use super::tests::{BOUND, pair, pattern};
use crate::worker::io::{Peer, Ready};
use crate::worker::lanes::Lane;
use crate::worker::pool::BufferPool;
use crate::worker::splice::SplicePipe;

/// Bytes the kernel holds unread on `stream`.
fn unread(stream: &TcpStream) -> usize {
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD writes one int through the pointer, to a live
    // local; the descriptor is open for the call.
    let rc = unsafe { libc::ioctl(stream.as_raw_fd(), libc::FIONREAD, &mut n) };
    assert_eq!(rc, 0, "FIONREAD: {}", std::io::Error::last_os_error());
    usize::try_from(n).unwrap_or(0)
}

/// A socket with the readiness given.
fn peer(stream: TcpStream, ready: Ready) -> Peer {
    Peer {
        ready,
        ..Peer::new(stream, Instant::now())
    }
}

/// One round of `flow` from `src` to `dst`.
fn round(flow: &mut Flow, src: &mut Peer, dst: &mut Peer) -> super::Moved {
    flow.round(src, dst, Instant::now()).expect("a round")
}

/// A direction moving through `lane`, with `prefix` and `buf` queued.
fn flow(lane: Lane, prefix: &[u8], buf: Option<crate::worker::pool::Checkout>) -> Flow {
    Flow {
        prefix: prefix.to_vec(),
        buf,
        lane,
        ..Flow::default()
    }
}

#[test]
fn nothing_is_spliced_while_the_prefix_or_the_window_waits() {
    let (mut client, front) = pair();
    let (_server, back) = pair();
    client.write_all(b"must wait").expect("write");
    let deadline = Instant::now() + BOUND;
    while unread(&front) < 9 && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(1));
    }
    let mut pool = BufferPool::new(64, crate::shared::admission::Slots::new(1));
    let mut front = peer(
        front,
        Ready {
            readable: true,
            writable: true,
            closing: false,
        },
    );
    // The backend takes nothing now: the queued bytes stay queued.
    let mut back = peer(
        back,
        Ready {
            readable: true,
            writable: false,
            closing: false,
        },
    );
    let mut window = pool.checkout().expect("a buffer");
    window.space()[..6].copy_from_slice(b"HELLO|");
    window.fill(6);
    let lane = Lane::Splice(SplicePipe::new(None).expect("pipe").0);
    let mut up = flow(lane, b"PREFIX|", Some(window));
    for prefix in [&b"PREFIX|"[..], b""] {
        up.prefix = prefix.to_vec();
        let moved = round(&mut up, &mut front, &mut back);
        assert_eq!(moved.total(), 0);
        assert_eq!(up.lane.pending(), 0, "spliced past queued userspace bytes");
        assert_eq!(
            unread(&front.stream),
            9,
            "the client's bytes wait in the socket"
        );
    }
    // Once the window went out, splicing starts.
    back.ready.writable = true;
    let moved = round(&mut up, &mut front, &mut back);
    assert_eq!((moved.written, moved.read), (6 + 9, 9));
    assert_eq!((up.lane.pending(), unread(&front.stream)), (0, 0));
    assert_eq!(front.read, 9, "the round counts what it read");
}

#[test]
fn a_full_kernel_pipe_keeps_the_source_readable() {
    let (client, front) = pair();
    let (_server, back) = pair();
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
    let both = Ready {
        readable: true,
        writable: true,
        closing: false,
    };
    let mut front = peer(front, both);
    // The backend takes nothing: the pipe fills up and stays full.
    let mut back = peer(
        back,
        Ready {
            readable: true,
            writable: false,
            closing: false,
        },
    );
    let mut up = flow(
        Lane::Splice(SplicePipe::new(None).expect("pipe").0),
        b"",
        None,
    );
    let mut last = usize::MAX;
    for _ in 0..1000 {
        last = round(&mut up, &mut front, &mut back).read;
        if last == 0 {
            break;
        }
    }
    assert_eq!(last, 0, "the pipe filled up");
    assert!(up.lane.pending() > 0);
    assert!(unread(&front.stream) > 0, "the socket still holds bytes");
    // "Would block" came from the full pipe, not from the socket: had
    // the flag been cleared, no new edge would ever announce these bytes.
    assert!(front.ready.readable);
    // With the pipe empty, "would block" is the socket's: cleared.
    let mut empty = flow(
        Lane::Splice(SplicePipe::new(None).expect("pipe").0),
        b"",
        None,
    );
    let (_idle, quiet) = pair();
    let mut quiet = peer(quiet, both);
    round(&mut empty, &mut quiet, &mut back);
    assert!(!quiet.ready.readable);
}
