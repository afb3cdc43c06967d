//! What the relay's socket calls cost on their own: one thread's CPU
//! (`RUSAGE_THREAD`, user + sys) per datagram, on loopback.
//!
//! - `send` on a socket connected to the sink, `send_to` on an unconnected
//!   one, `sendmmsg` in batches of [`BATCH`] on the connected one: the
//!   relay's two ways to a backend, and the batched one;
//! - `recv_from` one datagram a call, `recvmmsg` [`BATCH`] a call, on a
//!   socket another thread keeps filling: the listener's read.
//!
//! The sink of the sends is a socket nobody reads (past its buffer the
//! kernel drops: the sender's cost is the same).

use std::net::UdpSocket;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Datagrams per `sendmmsg`/`recvmmsg` call.
const BATCH: usize = 32;

/// This thread's CPU time so far (user + sys).
fn thread_cpu() -> Duration {
    // SAFETY: an all-zero rusage is a valid value of the plain C struct.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes into the struct it is given, and nothing
    // else.
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) };
    let time = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
    };
    time(usage.ru_utime) + time(usage.ru_stime)
}

/// Runs `step` (which handles some datagrams and says how many) for
/// `bound`: this thread's CPU ns per datagram, and datagrams per second.
fn per_datagram(bound: Duration, mut step: impl FnMut() -> usize) -> (f64, f64) {
    let (cpu, started) = (thread_cpu(), Instant::now());
    let mut count = 0_usize;
    while started.elapsed() < bound {
        count += step();
    }
    let cpu = thread_cpu() - cpu;
    let rate = count as f64 / started.elapsed().as_secs_f64();
    (cpu.as_nanos() as f64 / count.max(1) as f64, rate)
}

/// `sendmmsg` of `BATCH` copies of `datagram` on connected `socket`: how
/// many went.
fn send_batch(socket: &UdpSocket, datagram: &[u8]) -> usize {
    let mut iovecs = [libc::iovec {
        iov_base: datagram.as_ptr() as *mut libc::c_void,
        iov_len: datagram.len(),
    }; BATCH];
    // SAFETY: an all-zero mmsghdr is a valid value of the plain C struct.
    let mut messages: [libc::mmsghdr; BATCH] = unsafe { std::mem::zeroed() };
    for (message, iovec) in messages.iter_mut().zip(iovecs.iter_mut()) {
        message.msg_hdr.msg_iov = iovec;
        message.msg_hdr.msg_iovlen = 1;
    }
    // SAFETY: each message points at one iovec of `iovecs` over `datagram`,
    // all alive for the call; the kernel only reads them (and writes
    // `msg_len`).
    let sent = unsafe {
        libc::sendmmsg(
            socket.as_raw_fd(),
            messages.as_mut_ptr(),
            BATCH as libc::c_uint,
            0,
        )
    };
    usize::try_from(sent).unwrap_or(0)
}

/// `recvmmsg` of up to `BATCH` datagrams into `buffers` (one per
/// message): how many came.
fn recv_batch(socket: &UdpSocket, buffers: &mut [[u8; 2048]; BATCH]) -> usize {
    let mut iovecs: Vec<libc::iovec> = buffers
        .iter_mut()
        .map(|b| libc::iovec {
            iov_base: b.as_mut_ptr().cast(),
            iov_len: b.len(),
        })
        .collect();
    // SAFETY: an all-zero mmsghdr is a valid value of the plain C struct.
    let mut messages: [libc::mmsghdr; BATCH] = unsafe { std::mem::zeroed() };
    for (message, iovec) in messages.iter_mut().zip(iovecs.iter_mut()) {
        message.msg_hdr.msg_iov = iovec;
        message.msg_hdr.msg_iovlen = 1;
    }
    // SAFETY: each message points at one iovec over its own buffer of
    // `buffers`, alive and exclusively borrowed for the call; no address
    // or control buffer is asked for.
    let got = unsafe {
        libc::recvmmsg(
            socket.as_raw_fd(),
            messages.as_mut_ptr(),
            BATCH as libc::c_uint,
            0,
            std::ptr::null_mut(),
        )
    };
    usize::try_from(got).unwrap_or(0)
}

/// A thread that sends `datagram` to `to` as fast as it can until dropped.
struct Filler {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Filler {
    fn start(to: std::net::SocketAddr, datagram: Vec<u8>) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let Ok(socket) = UdpSocket::bind("127.0.0.1:0") else {
                return;
            };
            if socket.connect(to).is_err() {
                return;
            }
            while !stopping.load(Ordering::Relaxed) {
                send_batch(&socket, &datagram);
            }
        });
        Self {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Filler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Measures each call for `bound` with datagrams of `size` bytes and
/// prints a table.
pub(crate) fn run(bound: Duration, size: usize) {
    let datagram = vec![0x40_u8; size.min(2048)];
    let Ok(sink) = UdpSocket::bind("127.0.0.1:0") else {
        println!("no loopback socket");
        return;
    };
    let Ok(to) = sink.local_addr() else {
        return;
    };
    let (Ok(connected), Ok(unconnected)) = (
        UdpSocket::bind("127.0.0.1:0"),
        UdpSocket::bind("127.0.0.1:0"),
    ) else {
        return;
    };
    if connected.connect(to).is_err() {
        return;
    }
    println!("| call | datagram bytes | CPU ns/datagram | datagrams/s |");
    println!("|---|---|---|---|");
    let row = |name: &str, (ns, rate): (f64, f64)| {
        println!("| {name} | {} | {ns:.0} | {rate:.0} |", datagram.len());
    };
    row(
        "send (connected)",
        per_datagram(bound, || usize::from(connected.send(&datagram).is_ok())),
    );
    row(
        "send_to (unconnected)",
        per_datagram(bound, || {
            usize::from(unconnected.send_to(&datagram, to).is_ok())
        }),
    );
    row(
        "sendmmsg ×32 (connected)",
        per_datagram(bound, || send_batch(&connected, &datagram)),
    );
    let Ok(()) = sink.set_read_timeout(Some(Duration::from_millis(100))) else {
        return;
    };
    let filler = Filler::start(to, datagram.clone());
    let mut buffer = [0_u8; 2048];
    row(
        "recv_from",
        per_datagram(bound, || usize::from(sink.recv_from(&mut buffer).is_ok())),
    );
    let mut buffers = Box::new([[0_u8; 2048]; BATCH]);
    row(
        "recvmmsg ×32",
        per_datagram(bound, || recv_batch(&sink, &mut buffers)),
    );
    drop(filler);
}
