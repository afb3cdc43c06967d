//! Listeners that stopped accepting because the proxy ran short (out of
//! descriptors, of kernel memory), and when to try them again.
//!
//! A listener is edge-triggered: the connections already queued in its
//! backlog bring no new event once descriptors free up, so a listener whose
//! `accept` ran short would wait for the next client to connect, maybe
//! forever. Instead it is retried every [`RETRY_EVERY`], and at the end of
//! every turn in which a session of this worker closed (that freed
//! descriptors), until an `accept` drains its queue.
//!
//! Owns: one worker's pause episodes, per listening socket ([`Socket`]: an
//! address may have several after an upgrade): an episode starts at a
//! socket's first shortage and ends once it drained its queue and ran short
//! no more for [`CALM`]; its one warning at the start and its one line at
//! the end. Must never: accept (the event loop does, on the sockets this
//! names), count (the accept loop does), or log per failed accept.

use std::collections::BTreeMap;
use std::io;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use log::{info, warn};

use crate::shared::shortage::{RETRY_EVERY, is_out_of_descriptors};

/// A listening socket: its address, and its key in the worker's slab of
/// listeners.
pub(super) type Socket = (SocketAddr, usize);

/// How long a listener must accept without running short before its
/// episode ends: a shortage that comes back within it is the same episode,
/// with no new warning.
pub(super) const CALM: Duration = Duration::from_secs(1);

/// One listener's pause episode.
#[derive(Debug)]
struct Episode {
    started: Instant,
    /// Accepts that ran short in this episode.
    shortages: u64,
    /// The last accept ran short: the listener waits for a retry.
    paused: bool,
    /// Since when the listener drained its queue without running short.
    calm_since: Option<Instant>,
}

/// The pause episodes of one worker's listeners.
#[derive(Debug)]
pub(super) struct AcceptRetry {
    worker: u32,
    episodes: BTreeMap<Socket, Episode>,
    /// When the paused listeners are tried next.
    retry_at: Option<Instant>,
    /// A session closed since the last retry: descriptors were freed.
    freed: bool,
}

impl AcceptRetry {
    pub(super) fn new(worker: u32) -> Self {
        Self {
            worker,
            episodes: BTreeMap::new(),
            retry_at: None,
            freed: false,
        }
    }

    /// An accept on `socket` ran short with `error` at `now`: the socket
    /// pauses until the next retry. The first shortage of an episode warns.
    pub(super) fn short(&mut self, socket: Socket, error: &io::Error, now: Instant) {
        let worker = self.worker;
        let address = socket.0;
        let episode = self.episodes.entry(socket).or_insert_with(|| {
            let hint = if is_out_of_descriptors(error) {
                "; raise the descriptor limit (`ulimit -n`, systemd's LimitNOFILE=) or lower \
                 max_connections"
            } else {
                ""
            };
            warn!(
                "worker {worker}: accepting on {address} paused: {error}; queued clients wait, \
                 retried every {RETRY_EVERY:?} and whenever a session closes{hint}"
            );
            Episode {
                started: now,
                shortages: 0,
                paused: false,
                calm_since: None,
            }
        });
        episode.shortages += 1;
        episode.paused = true;
        episode.calm_since = None;
        let at = now + RETRY_EVERY;
        self.retry_at = Some(self.retry_at.map_or(at, |t| t.min(at)));
    }

    /// An accept on `socket` drained its queue (`WouldBlock`) at `now`.
    pub(super) fn drained(&mut self, socket: Socket, now: Instant) {
        if let Some(episode) = self.episodes.get_mut(&socket) {
            episode.paused = false;
            episode.calm_since.get_or_insert(now);
        }
    }

    /// A session closed: its descriptors may let a paused listener accept.
    pub(super) fn session_closed(&mut self) {
        self.freed = true;
    }

    /// `socket` no longer listens: its episode ends without a line.
    pub(super) fn forget(&mut self, socket: Socket) {
        self.episodes.remove(&socket);
    }

    /// When the worker must wake for a retry or for the end of an episode.
    pub(super) fn next_wake(&self) -> Option<Instant> {
        let calm_ends = self
            .episodes
            .values()
            .filter_map(|e| e.calm_since)
            .map(|t| t + CALM)
            .min();
        let retry = self.retry_at.filter(|_| self.any_paused());
        match (calm_ends, retry) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The paused sockets to accept on at `now` (a retry is due, or a
    /// session closed); ends, with their line, the episodes calm for
    /// [`CALM`].
    pub(super) fn due(&mut self, now: Instant) -> Vec<Socket> {
        let worker = self.worker;
        self.episodes.retain(|(address, _), episode| {
            let Some(calm_since) = episode.calm_since else {
                return true;
            };
            if now < calm_since + CALM {
                return true;
            }
            info!(
                "worker {worker}: accepting on {address} again, after {:?} and {} accept(s) that \
                 ran short",
                calm_since.saturating_duration_since(episode.started),
                episode.shortages
            );
            false
        });
        let retry_due = self.freed || self.retry_at.is_some_and(|at| now >= at);
        if !self.any_paused() {
            self.retry_at = None;
            self.freed = false;
            return Vec::new();
        }
        if !retry_due {
            return Vec::new();
        }
        self.retry_at = None;
        self.freed = false;
        self.episodes
            .iter()
            .filter(|(_, episode)| episode.paused)
            .map(|(socket, _)| *socket)
            .collect()
    }

    fn any_paused(&self) -> bool {
        self.episodes.values().any(|episode| episode.paused)
    }
}

#[cfg(test)]
mod tests {
    use std::io;
    use std::net::SocketAddr;
    use std::time::{Duration, Instant};

    use super::{AcceptRetry, CALM, RETRY_EVERY, Socket};

    fn addr(port: u16) -> Socket {
        (SocketAddr::from(([127, 0, 0, 1], port)), usize::from(port))
    }

    fn emfile() -> io::Error {
        io::Error::from_raw_os_error(libc::EMFILE)
    }

    #[test]
    fn a_paused_listener_is_retried_on_the_timer_until_it_drains() {
        let t = Instant::now();
        let mut retry = AcceptRetry::new(0);
        assert_eq!(retry.next_wake(), None);
        retry.short(addr(1), &emfile(), t);
        assert_eq!(retry.next_wake(), Some(t + RETRY_EVERY));
        assert!(retry.due(t + RETRY_EVERY / 2).is_empty(), "not yet");
        assert_eq!(retry.due(t + RETRY_EVERY), [addr(1)]);
        assert_eq!(retry.next_wake(), None, "the retry is in progress");
        // Still short: paused again, next retry one period later.
        let t2 = t + RETRY_EVERY;
        retry.short(addr(1), &emfile(), t2);
        assert_eq!(retry.next_wake(), Some(t2 + RETRY_EVERY));
        assert_eq!(retry.due(t2 + RETRY_EVERY), [addr(1)]);
        // Drained: no more retries, only the end of the episode to wait for.
        let t3 = t2 + RETRY_EVERY;
        retry.drained(addr(1), t3);
        assert_eq!(retry.next_wake(), Some(t3 + CALM));
        assert!(retry.due(t3 + CALM - Duration::from_millis(1)).is_empty());
        assert_eq!(retry.episodes[&addr(1)].shortages, 2);
        assert!(retry.due(t3 + CALM).is_empty());
        assert!(retry.episodes.is_empty(), "the episode ended");
        assert_eq!(retry.next_wake(), None);
    }

    #[test]
    fn a_closed_session_brings_the_retry_forward() {
        let t = Instant::now();
        let mut retry = AcceptRetry::new(0);
        retry.session_closed();
        assert!(retry.due(t).is_empty(), "nothing paused");
        retry.short(addr(1), &emfile(), t);
        retry.short(addr(2), &emfile(), t);
        assert!(retry.due(t).is_empty());
        retry.session_closed();
        assert_eq!(retry.due(t), [addr(1), addr(2)]);
        assert!(retry.due(t).is_empty(), "one retry per close");
    }

    #[test]
    fn a_shortage_within_the_calm_is_the_same_episode() {
        let t = Instant::now();
        let mut retry = AcceptRetry::new(0);
        retry.short(addr(1), &emfile(), t);
        retry.drained(addr(1), t + RETRY_EVERY);
        let t2 = t + RETRY_EVERY + CALM / 2;
        assert!(retry.due(t2).is_empty());
        retry.short(addr(1), &emfile(), t2);
        let episode = &retry.episodes[&addr(1)];
        assert_eq!((episode.started, episode.shortages), (t, 2));
        assert_eq!(episode.calm_since, None, "the calm starts over");
        retry.drained(addr(1), t2);
        retry.drained(addr(1), t2 + CALM / 2);
        assert_eq!(
            retry.next_wake(),
            Some(t2 + CALM),
            "calm since the first drain"
        );
    }

    #[test]
    fn a_forgotten_listener_is_not_retried() {
        let t = Instant::now();
        let mut retry = AcceptRetry::new(0);
        retry.short(addr(1), &emfile(), t);
        retry.forget(addr(1));
        assert_eq!(retry.next_wake(), None);
        assert!(retry.due(t + RETRY_EVERY).is_empty());
    }
}
