//! One round of one direction against real loopback sockets: nothing is
//! spliced past queued userspace bytes, and a full kernel pipe never
//! clears the source's readiness.

use std::io::Write;
use std::os::fd::AsRawFd;
use std::thread;
use std::time::{Duration, Instant};

use mio::net::TcpStream;

use super::tests::{BOUND, pair, pattern};
use super::{Ends, Flow};
use crate::worker::io::Ready;
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
        closing: false,
    };
    // The backend takes nothing now: the queued bytes stay queued.
    let mut dst_ready = Ready {
        readable: true,
        writable: false,
        closing: false,
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
        closing: false,
    };
    // The backend takes nothing: the pipe fills up and stays full.
    let mut dst_ready = Ready {
        readable: true,
        writable: false,
        closing: false,
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
        closing: false,
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
