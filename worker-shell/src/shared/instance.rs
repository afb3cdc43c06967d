//! One backend instance (one address a backend listens on) as the whole
//! process sees it: its open connections and its health, read by every
//! worker at once.
//!
//! Owns: [`Instance`] (the connection count, an `up` flag every worker
//! reads without a lock, and the [`Health`] machine with the last error and
//! the wall-clock time of the last change behind a mutex that is held for
//! the machine's step only, never across a syscall or a log line),
//! [`Lease`], the one connection a session holds to an instance (counted
//! against the backend's `max_connections`, its probe ended when dropped
//! without an outcome), and [`Transition`], what a report changed. Must
//! never: let an instance take more connections than its limit, or log
//! (the caller logs a transition, after the lock is released).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use super::health::{Change, Checks, Health};

/// What a report observed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Observed {
    /// A client connection got a byte back, or a check passed.
    Passed,
    /// A connect failed, a backend closed or reset before its first byte,
    /// or a check failed; the text says how, for `backend list`.
    Failed(String),
}

/// Who observed it, and the cluster's checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// A client's connection (passive health), in a cluster with these
    /// checks or none: without checks, a down instance learns from its
    /// probe; with checks, only they bring it back.
    Client(Option<Checks>),
    /// An active check.
    Check(Checks),
}

/// A state change, returned once by the report that made it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transition {
    pub change: Change,
    /// The failure that took it down; `None` for `Up`.
    pub error: Option<String>,
    /// When a down instance without checks takes its first probe.
    pub retry_in: Option<Duration>,
}

/// What `backend list` shows of an instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    pub up: bool,
    pub since: SystemTime,
    pub last_error: Option<String>,
    pub connections: u32,
}

#[derive(Debug)]
struct Record {
    health: Health,
    /// `health.since()` on the wall clock, for operators.
    since: SystemTime,
    last_error: Option<String>,
}

/// One address of a backend.
#[derive(Debug)]
pub struct Instance {
    cluster: Arc<str>,
    backend: Arc<str>,
    address: SocketAddr,
    /// Connections started and not yet ended, by every worker.
    active: AtomicU32,
    /// `record.health.is_up()`, readable without the lock.
    up: AtomicBool,
    record: Mutex<Record>,
}

impl Instance {
    /// A new instance, up.
    #[must_use]
    pub fn new(
        cluster: Arc<str>,
        backend: Arc<str>,
        address: SocketAddr,
        now: Instant,
    ) -> Arc<Self> {
        Arc::new(Self {
            cluster,
            backend,
            address,
            active: AtomicU32::new(0),
            up: AtomicBool::new(true),
            record: Mutex::new(Record {
                health: Health::new(now),
                since: SystemTime::now(),
                last_error: None,
            }),
        })
    }

    #[must_use]
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    #[must_use]
    pub fn cluster(&self) -> &str {
        &self.cluster
    }

    #[must_use]
    pub fn backend(&self) -> &str {
        &self.backend
    }

    /// The cluster's id, shared (a metric's label).
    #[must_use]
    pub fn cluster_id(&self) -> &Arc<str> {
        &self.cluster
    }

    /// The backend's id, shared (a session's and a metric's label).
    #[must_use]
    pub fn backend_id(&self) -> &Arc<str> {
        &self.backend
    }

    /// Connections open to it now, by every worker.
    #[must_use]
    pub fn active(&self) -> u32 {
        self.active.load(Ordering::Acquire)
    }

    #[must_use]
    pub fn is_up(&self) -> bool {
        self.up.load(Ordering::Acquire)
    }

    /// Whether a client connection may go to it now: it is up, or down and
    /// due for a probe.
    #[must_use]
    pub fn usable(&self, now: Instant, checks: Option<Checks>) -> bool {
        self.is_up() || self.record().health.probe_due(now, checks)
    }

    /// One more connection, within `max` (0: no limit). A down instance
    /// takes it as its probe, if the probe is due and free. `None` when
    /// it is full or not usable (another worker got there first).
    pub fn lease(
        self: &Arc<Self>,
        max: u32,
        now: Instant,
        checks: Option<Checks>,
    ) -> Option<Lease> {
        // Asked again under the lock: the instance may have come up since
        // the flag was read.
        let probe = !self.is_up() && {
            let mut record = self.record();
            if !record.health.is_up() && !record.health.start_probe(now, checks) {
                return None;
            }
            !record.health.is_up()
        };
        let counted = self
            .active
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |active| {
                (max == 0 || active < max).then_some(active + 1)
            })
            .is_ok();
        if !counted {
            if probe {
                self.record().health.abandon_probe();
            }
            return None;
        }
        Some(Lease {
            instance: Arc::clone(self),
            probe,
        })
    }

    /// One more connection that already runs: a flow an upgrade's old
    /// process handed over. Counted whatever the limit or the health, as
    /// the old process admitted it.
    pub fn adopt(self: &Arc<Self>) -> Lease {
        self.active.fetch_add(1, Ordering::AcqRel);
        Lease {
            instance: Arc::clone(self),
            probe: false,
        }
    }

    /// Feeds one observation to the health machine; the transition it
    /// made, if any.
    pub fn observe(&self, source: Source, observed: Observed, now: Instant) -> Option<Transition> {
        let mut record = self.record();
        let passed = observed == Observed::Passed;
        let (change, checks) = match source {
            Source::Client(checks) => (record.health.passive(passed, now, checks), checks),
            Source::Check(checks) => (record.health.checked(passed, now, checks), Some(checks)),
        };
        if let Observed::Failed(error) = observed {
            record.last_error = Some(error);
        }
        let change = change?;
        record.since = SystemTime::now();
        self.up.store(change == Change::Up, Ordering::Release);
        Some(Transition {
            change,
            error: (change == Change::Down)
                .then(|| record.last_error.clone())
                .flatten(),
            retry_in: record
                .health
                .probe_at(checks)
                .map(|at| at.saturating_duration_since(now)),
        })
    }

    /// What `backend list` shows.
    #[must_use]
    pub fn status(&self) -> Status {
        let record = self.record();
        Status {
            up: record.health.is_up(),
            since: record.since,
            last_error: record.last_error.clone(),
            connections: self.active(),
        }
    }

    /// The health machine's step only: a poisoned lock (a panic inside a
    /// step) still holds a consistent machine, since each step assigns it
    /// whole.
    fn record(&self) -> MutexGuard<'_, Record> {
        self.record.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// One connection to an instance, from its pick to its end.
#[derive(Debug)]
#[must_use = "a lease ends its connection's count as soon as it is dropped"]
pub struct Lease {
    instance: Arc<Instance>,
    /// This connection is the probe of a down instance, outcome unknown.
    probe: bool,
}

impl Lease {
    #[must_use]
    pub fn instance(&self) -> &Arc<Instance> {
        &self.instance
    }

    /// Reports what the connection observed, once it knows: the probe (if
    /// it was one) has its outcome.
    pub fn report(
        &mut self,
        observed: Observed,
        now: Instant,
        checks: Option<Checks>,
    ) -> Option<Transition> {
        self.probe = false;
        self.instance.observe(Source::Client(checks), observed, now)
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.instance.active.fetch_sub(1, Ordering::AcqRel);
        if self.probe {
            self.instance.record().health.abandon_probe();
        }
    }
}
