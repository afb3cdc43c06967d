//! What the process says about backend health and name resolution: the
//! log lines and the counters, once per event for the whole process.
//!
//! Owns: [`Counters`] (`backend.down`, `backend.recovered`,
//! `backend.resolve.errors`, counted by whichever thread saw the event),
//! the process-wide series merged into the report of `metrics get`
//! ([`Counters::series`], with each backend's `preread_backend_up`), and
//! the wording of the health log lines. Must never: name a metric itself
//! (the families are `crate::metrics`'), or be called with a lock held
//! (each announcement logs, a write to stderr).

use std::sync::atomic::{AtomicU64, Ordering};

use command::proto::MetricSeries;

use super::health::Change;
use super::instance::{Instance, Transition};
use super::registry::Registry;
use crate::metrics::families::Family;
use crate::metrics::series::{Series, plain};

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

    /// The process-wide series: these counters, and `preread_backend_up`
    /// for every backend of `registry`.
    #[must_use]
    pub fn series(&self, registry: &Registry) -> Vec<MetricSeries> {
        let count = |n: &AtomicU64| i64::try_from(n.load(Ordering::Relaxed)).unwrap_or(i64::MAX);
        let mut series = vec![
            plain(Family::BackendDown, &[], count(&self.down)),
            plain(Family::BackendRecovered, &[], count(&self.recovered)),
            plain(
                Family::BackendResolveErrors,
                &[],
                count(&self.resolve_errors),
            ),
        ];
        for backend in registry.backends() {
            let up = backend.instances().iter().filter(|i| i.is_up()).count();
            let key = Series::backend(Family::BackendUp, backend.cluster(), backend.id());
            series.push(key.to_proto(i64::try_from(up).unwrap_or(i64::MAX)));
        }
        series
    }
}
