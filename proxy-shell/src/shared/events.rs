//! What the process says about backend health and name resolution: the
//! log lines and the counters, once per event for the whole process.
//!
//! Owns: [`Counters`] (`backend.down`, `backend.recovered`,
//! `backend.resolve.errors`, counted by whichever thread saw the event),
//! the process-wide metrics merged into the total of `metrics get`
//! ([`Counters::metrics`], with each backend's `backend.<id>.up`), and the
//! wording of the health log lines. Must never: name a metric itself (the
//! names are the worker vocabulary's), or be called with a lock held (each
//! announcement logs, a write to stderr).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

use super::health::Change;
use super::instance::{Instance, Transition};
use super::registry::Registry;
use crate::worker::vocabulary::{
    BACKEND_DOWN, BACKEND_RECOVERED, BACKEND_RESOLVE_ERRORS, backend_up,
};

/// The process-wide counters.
#[derive(Debug, Default)]
pub struct Counters {
    down: AtomicU64,
    recovered: AtomicU64,
    resolve_errors: AtomicU64,
}

impl Counters {
    /// Logs and counts a health transition of `instance`.
    pub fn announce(&self, instance: &Instance, transition: &Transition, by: &str) {
        let (backend, cluster, address) =
            (instance.backend(), instance.cluster(), instance.address());
        match transition.change {
            Change::Down => {
                self.down.fetch_add(1, Ordering::Relaxed);
                let why = transition.error.as_deref().unwrap_or("it failed");
                let next = match transition.retry_in {
                    Some(wait) => format!("; a client connection probes it in {wait:?}"),
                    None => "; its checks bring it back".to_owned(),
                };
                log::warn!(
                    "backend {backend} of {cluster} is down: {why} (instance {address}, seen by \
                     {by}){next}"
                );
            }
            Change::Up => {
                self.recovered.fetch_add(1, Ordering::Relaxed);
                log::info!(
                    "backend {backend} of {cluster} is up again (instance {address}, seen by {by})"
                );
            }
        }
    }

    /// Counts a failed resolution (the caller logs it).
    pub fn resolve_failed(&self) {
        self.resolve_errors.fetch_add(1, Ordering::Relaxed);
    }

    /// The process-wide metrics: these counters, and `backend.<id>.up`
    /// for every backend of `registry`.
    #[must_use]
    pub fn metrics(&self, registry: &Registry) -> BTreeMap<String, i64> {
        let count = |n: &AtomicU64| i64::try_from(n.load(Ordering::Relaxed)).unwrap_or(i64::MAX);
        let mut metrics = BTreeMap::from([
            (BACKEND_DOWN.to_owned(), count(&self.down)),
            (BACKEND_RECOVERED.to_owned(), count(&self.recovered)),
            (
                BACKEND_RESOLVE_ERRORS.to_owned(),
                count(&self.resolve_errors),
            ),
        ]);
        for backend in registry.backends() {
            let up = backend.instances().iter().filter(|i| i.is_up()).count();
            metrics.insert(
                backend_up(backend.id()),
                i64::try_from(up).unwrap_or(i64::MAX),
            );
        }
        metrics
    }
}
