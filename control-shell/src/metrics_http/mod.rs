//! The optional Prometheus endpoint (`metrics_address`): `GET /metrics`
//! answers the labelled families of the workers' summed series, in the
//! Prometheus text format or, when the scrape's `Accept` asks for it,
//! OpenMetrics (`preread_worker::metrics::exposition`, encoded by
//! `prometheus-client`).
//!
//! Owns: the endpoint's listening socket and its threads: one accepts,
//! [`MAX_SCRAPES_IN_FLIGHT`] serve (one connection each, in `serve.rs`),
//! and at most [`MAX_WAITING`] accepted connections wait for them (past
//! that a connection is answered 503 at once). In an upgrade the socket is
//! handed over like the listeners ([`Slot::handover_copy`]): the successor
//! accepts on the very kernel socket, so the address never stops
//! listening and a connection queued in it is never refused. The old
//! process accepts until it exits, then stops ([`Slot::retire`]) and
//! answers every connection it accepted first; whichever process accepts a
//! scrape, the series come from the command socket's path, which the
//! successor holds.
//!
//! Must never: block a worker or the command server, serve more than
//! [`MAX_SCRAPES_IN_FLIGHT`] at once, make the shared socket non-blocking
//! (the other process's accept would spin), or end with an accepted scrape
//! unanswered before its deadline.

mod serve;

use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use socket2::SockRef;

pub use serve::{HEAD_DEADLINE, REQUEST_DEADLINE};

/// Scrapes served at once, each on a thread of its own.
pub const MAX_SCRAPES_IN_FLIGHT: usize = 4;

/// Accepted connections waiting for a serving thread.
pub const MAX_WAITING: usize = 16;

/// How long a waiting accept blocks before it looks whether the endpoint
/// retired (`SO_RCVTIMEO`, which bounds `accept` on Linux). It is set on
/// the socket, so both processes of an upgrade wake this often.
const ACCEPT_WAKE: Duration = Duration::from_millis(100);

/// An accepted connection and when it was accepted.
struct Accepted {
    stream: TcpStream,
    accepted: Instant,
}

/// Connections accepted and not yet answered.
#[derive(Default)]
struct Open {
    count: Mutex<usize>,
    none: Condvar,
}

impl Open {
    fn add(&self) {
        *self.count.lock().unwrap_or_else(PoisonError::into_inner) += 1;
    }

    fn done(&self) {
        let mut count = self.count.lock().unwrap_or_else(PoisonError::into_inner);
        *count = count.saturating_sub(1);
        if *count == 0 {
            self.none.notify_all();
        }
    }

    /// Waits until every accepted connection was answered, or `until`;
    /// whether they all were.
    fn wait_none(&self, until: Instant) -> bool {
        let mut count = self.count.lock().unwrap_or_else(PoisonError::into_inner);
        while *count > 0 {
            let wait = until.saturating_duration_since(Instant::now());
            if wait.is_zero() {
                return false;
            }
            count = match self.none.wait_timeout(count, wait) {
                Ok((count, _)) => count,
                Err(poisoned) => poisoned.into_inner().0,
            };
        }
        true
    }
}

/// A serving endpoint.
struct Endpoint {
    address: SocketAddr,
    /// This process's copy of the socket, duplicated for a successor.
    listener: TcpListener,
    stop: Arc<AtomicBool>,
    open: Arc<Open>,
    accepting: JoinHandle<()>,
}

impl Endpoint {
    /// Serves scrapes accepted on `listener`, a blocking listening socket.
    fn serve(listener: TcpListener, command_socket: PathBuf) -> io::Result<Self> {
        let address = listener.local_addr()?;
        SockRef::from(&listener).set_read_timeout(Some(ACCEPT_WAKE))?;
        let accepter = listener.try_clone()?;
        let (queue, waiting) = mpsc::sync_channel::<Accepted>(MAX_WAITING);
        let waiting = Arc::new(Mutex::new(waiting));
        let command_socket: Arc<Path> = Arc::from(command_socket);
        let open = Arc::new(Open::default());
        for n in 0..MAX_SCRAPES_IN_FLIGHT {
            let (waiting, command_socket, open) = (
                Arc::clone(&waiting),
                Arc::clone(&command_socket),
                Arc::clone(&open),
            );
            std::thread::Builder::new()
                .name(format!("preread-metrics-{n}"))
                .spawn(move || serve_queue(&waiting, &command_socket, &open))?;
        }
        let stop = Arc::new(AtomicBool::new(false));
        let accepting = {
            let (stop, open) = (Arc::clone(&stop), Arc::clone(&open));
            std::thread::Builder::new()
                .name("preread-metrics".into())
                .spawn(move || accept_loop(&accepter, &queue, &stop, &open))?
        };
        log::info!("metrics on http://{address}/metrics");
        Ok(Self {
            address,
            listener,
            stop,
            open,
            accepting,
        })
    }

    /// Stops accepting, then waits until `until` for the accepted
    /// connections to be answered; whether they all were.
    fn retire(self, until: Instant) -> bool {
        self.stop.store(true, Ordering::Relaxed);
        while !self.accepting.is_finished() {
            if Instant::now() >= until {
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        if self.accepting.join().is_err() {
            log::error!("the metrics accept thread panicked");
        }
        self.open.wait_none(until)
    }
}

/// Where the process's endpoint is, once it serves: the command server
/// takes the socket's copy for an upgrade from it, and the process retires
/// it on the way out. Filled later when the address is only free once an
/// old process exits.
#[derive(Clone, Default)]
pub struct Slot(Arc<Mutex<Option<Endpoint>>>);

impl std::fmt::Debug for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let address = self.lock().as_ref().map(|e| e.address);
        f.debug_tuple("Slot").field(&address).finish()
    }
}

impl Slot {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Endpoint>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Binds `address` and serves on it.
    pub fn bind(&self, address: SocketAddr, command_socket: PathBuf) -> io::Result<()> {
        self.adopt(TcpListener::bind(address)?, command_socket)
    }

    /// Binds `address` once it is free (an upgrade's old process that did
    /// not hand the endpoint over holds it until it exits), trying again
    /// until `until`, on a thread of its own.
    pub fn bind_once_free(&self, address: SocketAddr, command_socket: PathBuf, until: Instant) {
        let slot = self.clone();
        let spawned = std::thread::Builder::new()
            .name("preread-metrics-wait".to_owned())
            .spawn(move || {
                loop {
                    match slot.bind(address, command_socket.clone()) {
                        Ok(()) => return,
                        Err(error) if Instant::now() >= until => {
                            log::error!("cannot serve metrics on {address}: {error}");
                            return;
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(200)),
                    }
                }
            });
        if let Err(error) = spawned {
            log::error!("cannot serve metrics on {address}: {error}");
        }
    }

    /// Serves on `listener`: a blocking listening socket, this process's
    /// own or inherited from an upgrade's old process.
    pub fn adopt(&self, listener: TcpListener, command_socket: PathBuf) -> io::Result<()> {
        let endpoint = Endpoint::serve(listener, command_socket)?;
        *self.lock() = Some(endpoint);
        Ok(())
    }

    /// A duplicate of the serving socket, for an upgrade's successor;
    /// `None` when nothing serves.
    pub fn handover_copy(&self) -> Option<io::Result<(SocketAddr, OwnedFd)>> {
        self.lock().as_ref().map(|endpoint| {
            let copy = endpoint.listener.try_clone()?;
            Ok((endpoint.address, OwnedFd::from(copy)))
        })
    }

    /// Stops accepting and answers what was accepted, for at most
    /// `within`. A successor that inherited the socket goes on accepting
    /// on it.
    pub fn retire(&self, within: Duration) {
        let Some(endpoint) = self.lock().take() else {
            return;
        };
        let address = endpoint.address;
        if !endpoint.retire(Instant::now() + within) {
            log::warn!("metrics on {address}: scrapes still open after {within:?}; leaving them");
        }
    }
}

fn accept_loop(
    listener: &TcpListener,
    queue: &SyncSender<Accepted>,
    stop: &AtomicBool,
    open: &Open,
) {
    while !stop.load(Ordering::Relaxed) {
        let stream = match listener.accept() {
            Ok((stream, _)) => stream,
            // ACCEPT_WAKE passed without a connection.
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                continue;
            }
            Err(e) => {
                log::debug!("metrics accept failed: {e}");
                // Out of descriptors, say: let some close before trying again.
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
        };
        open.add();
        let accepted = Accepted {
            stream,
            accepted: Instant::now(),
        };
        match queue.try_send(accepted) {
            Ok(()) => {}
            Err(TrySendError::Full(accepted)) => {
                serve::refuse_busy(accepted.stream);
                open.done();
            }
            Err(TrySendError::Disconnected(_)) => {
                open.done();
                return;
            }
        }
    }
}

fn serve_queue(waiting: &Mutex<Receiver<Accepted>>, command_socket: &Path, open: &Open) {
    loop {
        let next = match waiting.lock() {
            Ok(receiver) => receiver.recv(),
            Err(_) => return,
        };
        let Ok(Accepted { stream, accepted }) = next else {
            return;
        };
        if accepted.elapsed() >= REQUEST_DEADLINE {
            log::debug!("metrics scrape dropped: its {REQUEST_DEADLINE:?} passed while it waited");
        } else if let Err(e) = serve::serve(stream, accepted, command_socket) {
            log::debug!("metrics scrape failed: {e}");
        }
        open.done();
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};

    use super::*;

    /// A scrape of `address` that reads to the close: the status line.
    fn status_line(address: SocketAddr) -> io::Result<String> {
        let mut stream = TcpStream::connect(address)?;
        stream.set_read_timeout(Some(Duration::from_secs(10)))?;
        stream.write_all(b"GET /nothing HTTP/1.0\r\n\r\n")?;
        let mut answer = String::new();
        stream.read_to_string(&mut answer)?;
        Ok(answer.lines().next().unwrap_or_default().to_owned())
    }

    #[test]
    fn a_retired_endpoint_leaves_its_socket_to_the_copy_that_serves_on() {
        let old = Slot::default();
        old.bind(
            "127.0.0.1:0".parse().expect("addr"),
            PathBuf::from("/nonexistent"),
        )
        .expect("bind");
        let (address, copy) = old.handover_copy().expect("serving").expect("copy");
        assert_eq!(
            status_line(address).expect("old serves"),
            "HTTP/1.1 404 Not Found"
        );
        let new = Slot::default();
        new.adopt(TcpListener::from(copy), PathBuf::from("/nonexistent"))
            .expect("adopt");
        old.retire(Duration::from_secs(5));
        assert!(old.handover_copy().is_none(), "retired");
        for _ in 0..20 {
            assert_eq!(
                status_line(address).expect("successor serves"),
                "HTTP/1.1 404 Not Found"
            );
        }
        new.retire(Duration::from_secs(5));
        assert!(TcpStream::connect(address).is_err(), "the last copy closed");
    }
}
