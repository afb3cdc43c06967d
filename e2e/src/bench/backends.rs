//! The benchmark's backends, on loopback.
//!
//! # `RpcBackend`: the request protocol
//!
//! A client (directly or through a proxy) sends:
//!
//! 1. the ClientHello (`hello_len` bytes, known to the backend; not parsed:
//!    it is only what the proxies route on);
//! 2. a 16-byte header: `upload` and `download`, two little-endian u64;
//! 3. `upload` bytes, which the backend reads and discards.
//!
//! The backend then writes `download` bytes: the first 8 (when
//! `download >= 8`) are the number of upload bytes it received (little
//! endian), the rest zeros. It then reads until the client closes, and
//! closes. So an upload is acknowledged only once every byte arrived, a
//! download is streamed by the backend, and a short request/answer is one
//! round trip; the client always closes first.
//!
//! A fixed pool of threads blocks in `accept` on one listener (no thread is
//! spawned per connection: that would cost as much CPU as the proxies).
//!
//! # `HoldBackend`
//!
//! Accepts, reads the ClientHello (non-blocking, polled) and keeps the
//! connection open and idle; counts the connections whose hello arrived
//! complete. One thread.

use std::io::{self, ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Read/write bound of a backend connection.
const IO_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a stop waits for the threads.
const JOIN_BOUND: Duration = Duration::from_secs(10);
/// The read/write chunk of big transfers.
pub(crate) const CHUNK: usize = 256 * 1024;

/// Waits at most `bound` for the threads; the unfinished ones are left
/// detached (each is bounded by its own socket timeouts).
fn join_bounded(threads: Vec<JoinHandle<()>>, bound: Duration) -> usize {
    let deadline = Instant::now() + bound;
    let mut left = 0;
    for thread in threads {
        while !thread.is_finished() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        if thread.is_finished() {
            let _ = thread.join();
        } else {
            left += 1;
        }
    }
    left
}

/// See the module documentation.
#[derive(Debug)]
pub(crate) struct RpcBackend {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    served: Arc<AtomicU64>,
    errors: Arc<AtomicU64>,
    first_error: Arc<Mutex<Option<String>>>,
    threads: Vec<JoinHandle<()>>,
}

impl RpcBackend {
    /// Listens on a fresh loopback port with `threads` accepting threads.
    pub(crate) fn start(hello_len: usize, threads: usize) -> io::Result<Self> {
        let listener = TcpListener::bind(("127.0.0.1", 0))?;
        let addr = listener.local_addr()?;
        let listener = Arc::new(listener);
        let stop = Arc::new(AtomicBool::new(false));
        let served = Arc::new(AtomicU64::new(0));
        let errors = Arc::new(AtomicU64::new(0));
        let first_error = Arc::new(Mutex::new(None));
        let mut handles = Vec::with_capacity(threads);
        for i in 0..threads {
            let listener = Arc::clone(&listener);
            let stop = Arc::clone(&stop);
            let served = Arc::clone(&served);
            let errors = Arc::clone(&errors);
            let first_error = Arc::clone(&first_error);
            let handle = std::thread::Builder::new()
                .name(format!("rpc-{i}"))
                .stack_size(256 * 1024)
                .spawn(move || {
                    let mut buf = vec![0u8; CHUNK];
                    while !stop.load(Ordering::SeqCst) {
                        let Ok((stream, _)) = listener.accept() else {
                            continue;
                        };
                        if stop.load(Ordering::SeqCst) {
                            break;
                        }
                        match serve(stream, hello_len, &mut buf) {
                            Ok(()) => {
                                served.fetch_add(1, Ordering::Relaxed);
                            }
                            Err(e) => {
                                errors.fetch_add(1, Ordering::Relaxed);
                                first_error
                                    .lock()
                                    .unwrap_or_else(PoisonError::into_inner)
                                    .get_or_insert(e.to_string());
                            }
                        }
                    }
                })?;
            handles.push(handle);
        }
        Ok(Self {
            addr,
            stop,
            served,
            errors,
            first_error,
            threads: handles,
        })
    }

    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// (served, failed, first error) so far.
    pub(crate) fn counts(&self) -> (u64, u64, Option<String>) {
        (
            self.served.load(Ordering::Relaxed),
            self.errors.load(Ordering::Relaxed),
            self.first_error
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone(),
        )
    }

    /// Stops the pool: each accepting thread is woken by a connection of
    /// its own and exits.
    pub(crate) fn stop(self) {
        self.stop.store(true, Ordering::SeqCst);
        for _ in 0..self.threads.len() {
            let _ = TcpStream::connect_timeout(&self.addr, Duration::from_millis(200));
        }
        let left = join_bounded(self.threads, JOIN_BOUND);
        if left > 0 {
            eprintln!("bench: {left} rpc backend threads still busy at stop (left detached)");
        }
    }
}

fn serve(mut stream: TcpStream, hello_len: usize, buf: &mut [u8]) -> io::Result<()> {
    stream.set_read_timeout(Some(IO_TIMEOUT))?;
    stream.set_write_timeout(Some(IO_TIMEOUT))?;
    stream.set_nodelay(true)?;
    let mut head = vec![0u8; hello_len + 16];
    stream.read_exact(&mut head)?;
    let upload = u64::from_le_bytes(head[hello_len..hello_len + 8].try_into().unwrap_or([0; 8]));
    let download = u64::from_le_bytes(head[hello_len + 8..].try_into().unwrap_or([0; 8]));
    let mut received = 0u64;
    while received < upload {
        let want = usize::try_from(upload - received)
            .unwrap_or(usize::MAX)
            .min(buf.len());
        let n = stream.read(&mut buf[..want])?;
        if n == 0 {
            return Err(io::Error::new(
                ErrorKind::UnexpectedEof,
                format!("upload: EOF after {received} of {upload} bytes"),
            ));
        }
        received += n as u64;
    }
    let mut sent = 0u64;
    if download >= 8 {
        let mut first = [0u8; 8];
        first.copy_from_slice(&received.to_le_bytes());
        stream.write_all(&first)?;
        sent = 8;
    }
    buf.fill(0);
    while sent < download {
        let n = usize::try_from(download - sent)
            .unwrap_or(usize::MAX)
            .min(buf.len());
        stream.write_all(&buf[..n])?;
        sent += n as u64;
    }
    // The client closes first; wait for it (bounded by the read timeout).
    loop {
        match stream.read(buf) {
            Ok(0) => return Ok(()),
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::ConnectionReset => return Ok(()),
            Err(e) => return Err(e),
        }
    }
}

/// See the module documentation.
#[derive(Debug)]
pub(crate) struct HoldBackend {
    addr: SocketAddr,
    complete: Arc<AtomicUsize>,
    clear: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

struct Held {
    stream: TcpStream,
    got: usize,
}

impl HoldBackend {
    /// Listens on a fresh loopback port; `hello_len` bytes make a complete
    /// session. The thread ends at [`HoldBackend::stop`] or after
    /// `lifetime`, whichever comes first.
    pub(crate) fn start(hello_len: usize, lifetime: Duration) -> io::Result<Self> {
        let listener = TcpListener::bind(("127.0.0.1", 0))?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let complete = Arc::new(AtomicUsize::new(0));
        let clear = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let complete = Arc::clone(&complete);
            let clear = Arc::clone(&clear);
            let stop = Arc::clone(&stop);
            std::thread::Builder::new()
                .name("hold".into())
                .spawn(move || {
                    let end = Instant::now() + lifetime;
                    let mut held: Vec<Held> = Vec::new();
                    let mut buf = [0u8; 4096];
                    while !stop.load(Ordering::SeqCst) && Instant::now() < end {
                        if clear.swap(false, Ordering::SeqCst) {
                            held.clear();
                            complete.store(0, Ordering::SeqCst);
                        }
                        while let Ok((stream, _)) = listener.accept() {
                            if stream.set_nonblocking(true).is_ok() {
                                held.push(Held { stream, got: 0 });
                            }
                        }
                        for h in held.iter_mut().filter(|h| h.got < hello_len) {
                            while let Ok(n) = h.stream.read(&mut buf) {
                                if n == 0 {
                                    break;
                                }
                                let before = h.got;
                                h.got += n;
                                if before < hello_len && h.got >= hello_len {
                                    complete.fetch_add(1, Ordering::SeqCst);
                                }
                            }
                        }
                        std::thread::sleep(Duration::from_millis(5));
                    }
                })?
        };
        Ok(Self {
            addr,
            complete,
            clear,
            stop,
            thread: Some(thread),
        })
    }

    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Sessions whose ClientHello arrived complete.
    pub(crate) fn complete(&self) -> usize {
        self.complete.load(Ordering::SeqCst)
    }

    /// Closes every held connection and resets the count (asynchronously:
    /// done within a few ms).
    pub(crate) fn clear(&self) {
        self.clear.store(true, Ordering::SeqCst);
        let deadline = Instant::now() + Duration::from_secs(2);
        while self.clear.load(Ordering::SeqCst) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    pub(crate) fn stop(mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            join_bounded(vec![thread], JOIN_BOUND);
        }
    }
}
