//! The benchmark's clients. Every one sends the ClientHello first (the
//! proxies route on it; the direct connection gets the same bytes), then
//! speaks the [`super::backends`] protocol.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::backends::CHUNK;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The ClientHello followed by the request header.
pub(crate) fn request_head(hello: &[u8], upload: u64, download: u64) -> Vec<u8> {
    let mut head = Vec::with_capacity(hello.len() + 16);
    head.extend_from_slice(hello);
    head.extend_from_slice(&upload.to_le_bytes());
    head.extend_from_slice(&download.to_le_bytes());
    head
}

fn connect(addr: SocketAddr, io_timeout: Duration) -> Result<TcpStream, String> {
    let stream = TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT)
        .map_err(|e| format!("connect {addr}: {e}"))?;
    stream
        .set_read_timeout(Some(io_timeout))
        .and_then(|()| stream.set_write_timeout(Some(io_timeout)))
        .and_then(|()| stream.set_nodelay(true))
        .map_err(|e| format!("socket options: {e}"))?;
    Ok(stream)
}

/// One transfer of `bytes` from the client to the backend, which
/// acknowledges once it has read them all. Returns the time from the
/// connect to the acknowledgement. Each read or write is bounded by
/// `io_timeout`, the whole by `bound`.
pub(crate) fn upload(
    addr: SocketAddr,
    hello: &[u8],
    bytes: u64,
    io_timeout: Duration,
    bound: Duration,
) -> Result<Duration, String> {
    let start = Instant::now();
    let mut stream = connect(addr, io_timeout)?;
    stream
        .write_all(&request_head(hello, bytes, 8))
        .map_err(|e| format!("write head: {e}"))?;
    let chunk = vec![0u8; CHUNK];
    let mut sent = 0u64;
    while sent < bytes {
        if start.elapsed() > bound {
            return Err(format!("upload: {sent} of {bytes} bytes after {bound:?}"));
        }
        let n = usize::try_from(bytes - sent)
            .unwrap_or(usize::MAX)
            .min(CHUNK);
        stream
            .write_all(&chunk[..n])
            .map_err(|e| format!("upload after {sent} bytes: {e}"))?;
        sent += n as u64;
    }
    let mut ack = [0u8; 8];
    stream
        .read_exact(&mut ack)
        .map_err(|e| format!("read the acknowledgement: {e}"))?;
    let elapsed = start.elapsed();
    let received = u64::from_le_bytes(ack);
    if received != bytes {
        return Err(format!(
            "the backend acknowledged {received} of {bytes} bytes"
        ));
    }
    Ok(elapsed)
}

/// One transfer of `bytes` from the backend to the client. Returns the time
/// from the connect to the last byte read.
pub(crate) fn download(
    addr: SocketAddr,
    hello: &[u8],
    bytes: u64,
    io_timeout: Duration,
    bound: Duration,
) -> Result<Duration, String> {
    let start = Instant::now();
    let mut stream = connect(addr, io_timeout)?;
    stream
        .write_all(&request_head(hello, 0, bytes))
        .map_err(|e| format!("write head: {e}"))?;
    let mut buf = vec![0u8; CHUNK];
    let mut got = 0u64;
    while got < bytes {
        if start.elapsed() > bound {
            return Err(format!("download: {got} of {bytes} bytes after {bound:?}"));
        }
        match stream.read(&mut buf) {
            Ok(0) => return Err(format!("download: EOF after {got} of {bytes} bytes")),
            Ok(n) => got += n as u64,
            Err(e) => return Err(format!("download after {got} bytes: {e}")),
        }
    }
    Ok(start.elapsed())
}

/// What [`rate`] measured.
#[derive(Debug, Default)]
pub(crate) struct RateOutcome {
    pub(crate) ok: u64,
    pub(crate) failed: u64,
    pub(crate) elapsed: Duration,
    /// Per successful connection, connect to answer, µs.
    pub(crate) latencies_us: Vec<u32>,
    pub(crate) first_error: Option<String>,
}

impl RateOutcome {
    /// The `permille`-th latency in µs (0 when none).
    pub(crate) fn latency_us(&self, permille: usize) -> u32 {
        if self.latencies_us.is_empty() {
            return 0;
        }
        let i = (self.latencies_us.len() - 1) * permille / 1000;
        self.latencies_us[i]
    }
}

/// `n` short connections, `concurrency` at a time (one thread each, a
/// closed loop): connect, send the hello + header + `payload` bytes in one
/// write, read the `answer` bytes, close. Stops after `n` or `bound`.
pub(crate) fn rate(
    addr: SocketAddr,
    hello: &[u8],
    n: u64,
    concurrency: usize,
    payload: u64,
    answer: u64,
    bound: Duration,
) -> RateOutcome {
    let mut request = request_head(hello, payload, answer);
    request.resize(request.len() + usize::try_from(payload).unwrap_or(0), b'x');
    let request = Arc::new(request);
    let tickets = Arc::new(AtomicU64::new(0));
    let first_error = Arc::new(Mutex::new(None::<String>));
    let start = Instant::now();
    let deadline = start + bound;
    let threads: Vec<JoinHandle<(u64, u64, Vec<u32>)>> = (0..concurrency)
        .map(|_| {
            let request = Arc::clone(&request);
            let tickets = Arc::clone(&tickets);
            let first_error = Arc::clone(&first_error);
            std::thread::spawn(move || {
                let (mut ok, mut failed, mut latencies) = (0u64, 0u64, Vec::new());
                let mut answer_buf = vec![0u8; usize::try_from(answer).unwrap_or(0)];
                while tickets.fetch_add(1, Ordering::Relaxed) < n && Instant::now() < deadline {
                    let t0 = Instant::now();
                    let result = connect(addr, Duration::from_secs(10)).and_then(|mut stream| {
                        stream
                            .write_all(&request)
                            .map_err(|e| format!("write: {e}"))?;
                        stream
                            .read_exact(&mut answer_buf)
                            .map_err(|e| format!("read the answer: {e}"))
                    });
                    match result {
                        Ok(()) => {
                            ok += 1;
                            let us = t0.elapsed().as_micros();
                            latencies.push(u32::try_from(us).unwrap_or(u32::MAX));
                        }
                        Err(e) => {
                            failed += 1;
                            first_error
                                .lock()
                                .unwrap_or_else(PoisonError::into_inner)
                                .get_or_insert(e);
                        }
                    }
                }
                (ok, failed, latencies)
            })
        })
        .collect();
    let mut outcome = RateOutcome::default();
    for thread in threads {
        // Each thread is bounded by `deadline` plus one connection's
        // timeouts.
        if let Ok((ok, failed, latencies)) = thread.join() {
            outcome.ok += ok;
            outcome.failed += failed;
            outcome.latencies_us.extend(latencies);
        }
    }
    outcome.elapsed = start.elapsed();
    outcome.latencies_us.sort_unstable();
    outcome.first_error = first_error
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .take();
    outcome
}

/// What the slow clients saw.
#[derive(Debug, Default)]
pub(crate) struct SlowOutcome {
    pub(crate) connects: u64,
    pub(crate) connect_errors: u64,
    /// Connections the proxy closed, with the seconds each lived (from the
    /// connect to the check that saw it closed, 1 s granularity).
    pub(crate) closed_after_s: Vec<f64>,
    /// Bytes dripped in all.
    pub(crate) bytes: u64,
    /// Most connections open at once.
    pub(crate) peak_open: usize,
}

/// `count` connections that each send the ClientHello one byte per second;
/// a connection the proxy closes is opened again. The first connects are
/// spread over `spread`. Runs until [`SlowClients::stop`] or `bound`.
#[derive(Debug)]
pub(crate) struct SlowClients {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<SlowOutcome>>,
}

struct Slot {
    stream: Option<TcpStream>,
    opened: Instant,
    sent: usize,
    due: Instant,
}

impl SlowClients {
    pub(crate) fn start(
        addr: SocketAddr,
        hello: Vec<u8>,
        count: usize,
        spread: Duration,
        bound: Duration,
    ) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || drip(addr, &hello, count, spread, bound, &stop))
        };
        Self {
            stop,
            thread: Some(thread),
        }
    }

    /// Stops, closes every connection, and returns what happened.
    pub(crate) fn stop(mut self) -> SlowOutcome {
        self.stop.store(true, Ordering::SeqCst);
        self.thread
            .take()
            .and_then(|thread| thread.join().ok())
            .unwrap_or_default()
    }
}

fn drip(
    addr: SocketAddr,
    hello: &[u8],
    count: usize,
    spread: Duration,
    bound: Duration,
    stop: &AtomicBool,
) -> SlowOutcome {
    let start = Instant::now();
    let step = spread / u32::try_from(count.max(1)).unwrap_or(u32::MAX);
    let mut slots: Vec<Slot> = (0..count)
        .map(|i| Slot {
            stream: None,
            opened: start,
            sent: 0,
            due: start + step * u32::try_from(i).unwrap_or(0),
        })
        .collect();
    let mut outcome = SlowOutcome::default();
    let mut peek = [0u8; 1];
    while !stop.load(Ordering::SeqCst) && start.elapsed() < bound {
        let now = Instant::now();
        let mut open = 0;
        for slot in &mut slots {
            if slot.due > now {
                open += usize::from(slot.stream.is_some());
                continue;
            }
            match &mut slot.stream {
                None => {
                    outcome.connects += 1;
                    match TcpStream::connect_timeout(&addr, Duration::from_secs(2)) {
                        Ok(stream) if stream.set_nonblocking(true).is_ok() => {
                            let _ = stream.set_nodelay(true);
                            slot.stream = Some(stream);
                            slot.opened = now;
                            slot.sent = 0;
                            // The first byte goes out on the next pass.
                            slot.due = now;
                            open += 1;
                        }
                        _ => {
                            outcome.connect_errors += 1;
                            slot.due = now + Duration::from_secs(1);
                        }
                    }
                }
                Some(stream) => {
                    let closed = match stream.peek(&mut peek) {
                        Ok(0) => true,
                        Ok(_) => false,
                        Err(e) => e.kind() != ErrorKind::WouldBlock,
                    };
                    let wrote = !closed
                        && matches!(stream.write(&hello[slot.sent % hello.len()..][..1]), Ok(1));
                    if wrote {
                        slot.sent += 1;
                        outcome.bytes += 1;
                        slot.due += Duration::from_secs(1);
                        open += 1;
                    } else {
                        outcome
                            .closed_after_s
                            .push(now.duration_since(slot.opened).as_secs_f64());
                        slot.stream = None;
                        slot.due = now;
                    }
                }
            }
        }
        outcome.peak_open = outcome.peak_open.max(open);
        std::thread::sleep(Duration::from_millis(10));
    }
    outcome
}

/// Opens `n` connections that send nothing.
pub(crate) fn open_idle(addr: SocketAddr, n: usize) -> Result<Vec<TcpStream>, String> {
    (0..n)
        .map(|i| {
            TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT)
                .map_err(|e| format!("idle connection {i}: {e}"))
        })
        .collect()
}

/// Opens `n` connections that send the ClientHello and then nothing.
pub(crate) fn open_established(
    addr: SocketAddr,
    hello: &[u8],
    n: usize,
) -> Result<Vec<TcpStream>, String> {
    (0..n)
        .map(|i| {
            let mut stream = TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT)
                .map_err(|e| format!("connection {i}: {e}"))?;
            stream
                .write_all(hello)
                .map_err(|e| format!("connection {i}: write the hello: {e}"))?;
            Ok(stream)
        })
        .collect()
}

/// How many of `streams` the peer has not closed (a non-blocking peek:
/// nothing to read yet = open).
pub(crate) fn still_open(streams: &[TcpStream]) -> usize {
    let mut peek = [0u8; 1];
    streams
        .iter()
        .filter(|stream| {
            stream.set_nonblocking(true).is_ok()
                && match stream.peek(&mut peek) {
                    Ok(n) => n > 0,
                    Err(e) => e.kind() == ErrorKind::WouldBlock,
                }
        })
        .count()
}
