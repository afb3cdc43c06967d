//! One worker's metrics registry: counters, gauges and histograms keyed by
//! their labelled series, and the worker's snapshot of them (the series and
//! their flat view, `crate::metrics::flat`).
//!
//! Owns: the values of one worker, and leaving out of a snapshot (and
//! forgetting) the series of objects the worker no longer holds. Must
//! never: lock (one registry per worker), allocate when an existing series
//! is counted (its key holds shared ids), or leave out a series of an
//! object it holds: every series `super::configured` lists is in a
//! snapshot, at 0 until counted.

use std::collections::BTreeMap;

use command::proto::{MetricSeries, WorkerMetrics};
use hashbrown::HashMap;

use super::configured::Configured;
use crate::metrics::families::{Family, Kind};
use crate::metrics::flat;
use crate::metrics::series::Series;
use crate::vocabulary::fixed_names;

/// Observations of one histogram series, per bucket of its family's bounds
/// (not cumulative; the last one is +Inf), and their sum.
#[derive(Debug, Clone)]
struct Histogram {
    buckets: Box<[u64]>,
    sum: u64,
}

impl Histogram {
    fn of(family: Family) -> Self {
        let bounds = family.histogram().map_or(0, |(bounds, _)| bounds.len());
        Self {
            buckets: vec![0; bounds + 1].into_boxed_slice(),
            sum: 0,
        }
    }

    fn observe(&mut self, bounds: &[u64], value: u64) {
        // The first bound >= value: Prometheus buckets are `le` (≤).
        let bucket = bounds.partition_point(|&bound| bound < value);
        if let Some(n) = self.buckets.get_mut(bucket) {
            *n = n.saturating_add(1);
        }
        self.sum = self.sum.saturating_add(value);
    }
}

/// One worker's metrics. The maps hash with hashbrown's default
/// (foldhash, seeded per process): a routed connection counts a dozen
/// series, and SipHash over their labels was the largest of the worker's
/// own costs per connection in a profile (doc/performance.md, "The
/// kernel's floor"); the keys come from the configuration, never from the
/// wire.
#[derive(Debug)]
pub struct Metrics {
    worker_id: u32,
    values: HashMap<Series, i64>,
    histograms: HashMap<Series, Histogram>,
    /// What the counters of forgotten series had added to the process
    /// totals of the flat view (`tcp.accepted`, …): a removed listener's
    /// series go, but the worker's totals never go down.
    retired: BTreeMap<&'static str, i64>,
}

impl Metrics {
    /// An empty registry: the process-level series start at 0.
    pub fn new(worker_id: u32) -> Self {
        let values = [
            Family::BackendConnectLocalErrors,
            Family::SplicePipesCreated,
            Family::SplicePipesGrown,
            Family::SpliceFallbacks,
            Family::BuffersInUse,
            Family::SpliceBulkPipes,
            Family::AccessLogDropped,
        ]
        .into_iter()
        .map(|family| (Series::of(family), 0))
        .collect();
        Self {
            worker_id,
            values,
            histograms: HashMap::new(),
            retired: BTreeMap::new(),
        }
    }

    /// Adds one to a counter.
    pub fn incr(&mut self, series: Series) {
        self.add(series, 1);
    }

    /// Adds `n` to a counter.
    pub fn add(&mut self, series: Series, n: u64) {
        debug_assert_eq!(series.family().kind(), Kind::Counter, "{series:?}");
        self.bump(series, i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// Moves a gauge up or down.
    pub fn gauge_add(&mut self, series: Series, delta: i64) {
        debug_assert_eq!(series.family().kind(), Kind::Gauge, "{series:?}");
        self.bump(series, delta);
    }

    /// Sets a gauge that is sampled rather than tracked (buffers in use).
    pub fn gauge_set(&mut self, series: Series, value: i64) {
        debug_assert_eq!(series.family().kind(), Kind::Gauge, "{series:?}");
        debug_assert!(series.is_well_formed(), "{series:?}");
        match self.values.get_mut(&series) {
            Some(slot) => *slot = value,
            None => {
                self.values.insert(series, value);
            }
        }
    }

    /// Records one observation of a histogram, in its family's unit.
    pub fn observe(&mut self, series: Series, value: u64) {
        debug_assert!(series.is_well_formed(), "{series:?}");
        let Some((bounds, _)) = series.family().histogram() else {
            debug_assert!(false, "{series:?} is not a histogram");
            return;
        };
        match self.histograms.get_mut(&series) {
            Some(histogram) => histogram.observe(bounds, value),
            None => {
                let mut histogram = Histogram::of(series.family());
                histogram.observe(bounds, value);
                self.histograms.insert(series, histogram);
            }
        }
    }

    /// A counter or gauge; 0 when never touched.
    pub fn get(&self, series: &Series) -> i64 {
        self.values.get(series).copied().unwrap_or(0)
    }

    /// Every series of the objects `configured` lists, at 0 when never
    /// counted, and their flat view (the fixed flat names at 0 too). The
    /// series of an object no longer there (a removed backend's, or one a
    /// session closing after the removal counted again) are forgotten:
    /// the registry holds the live objects' series and those of objects
    /// removed since the last snapshot, never more.
    pub fn snapshot(&mut self, configured: &Configured) -> WorkerMetrics {
        self.retire(configured);
        self.values.retain(|key, _| configured.holds(key));
        self.histograms.retain(|key, _| configured.holds(key));
        let mut series: Vec<MetricSeries> = self
            .values
            .iter()
            .map(|(key, &value)| key.to_proto(value))
            .collect();
        series.extend(self.histograms.iter().map(|(key, histogram)| MetricSeries {
            buckets: histogram.buckets.to_vec(),
            sum: histogram.sum,
            ..key.to_proto(0)
        }));
        for key in configured.values() {
            if !self.values.contains_key(&key) {
                series.push(key.to_proto(0));
            }
        }
        for key in configured.histograms() {
            if !self.histograms.contains_key(&key) {
                series.push(MetricSeries {
                    buckets: Histogram::of(key.family()).buckets.to_vec(),
                    ..key.to_proto(0)
                });
            }
        }
        let mut values: BTreeMap<String, i64> =
            fixed_names().map(|name| (name.to_owned(), 0)).collect();
        flat::zero_histogram(&mut values);
        flat::view(&series, &mut values);
        for (name, retired) in &self.retired {
            if let Some(total) = values.get_mut(*name) {
                *total = total.saturating_add(*retired);
            }
        }
        WorkerMetrics {
            worker_id: self.worker_id,
            values,
            series,
        }
    }

    /// Keeps what the counters of the series about to be forgotten added to
    /// the process totals; only those (the fixed names): a removed
    /// backend's own names go with it.
    fn retire(&mut self, configured: &Configured) {
        let gone: Vec<MetricSeries> = self
            .values
            .iter()
            .filter(|(key, _)| key.family().kind() == Kind::Counter && !configured.holds(key))
            .map(|(key, &value)| key.to_proto(value))
            .collect();
        if gone.is_empty() {
            return;
        }
        let mut totals = BTreeMap::new();
        flat::view(&gone, &mut totals);
        for name in fixed_names() {
            if let Some(&value) = totals.get(name) {
                let slot = self.retired.entry(name).or_default();
                *slot = slot.saturating_add(value);
            }
        }
    }

    // The lookup by an existing key finds it without allocating; only a new
    // series (a cluster's or a backend's, once) allocates its slot.
    fn bump(&mut self, series: Series, n: i64) {
        debug_assert!(series.is_well_formed(), "{series:?}");
        match self.values.get_mut(&series) {
            Some(slot) => *slot = slot.saturating_add(n),
            None => {
                self.values.insert(series, n);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::sync::Arc;

    use preread_core::{FallbackReason, RejectReason};

    use super::Metrics;
    use crate::metrics::families::Family;
    use crate::metrics::series::{IN, OUT, Series};
    use crate::vocabulary::RefuseReason;
    use crate::worker::configured::Configured;

    fn listener() -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], 8443))
    }

    /// The listener alone, or with cluster `alpha` of backends `backends`
    /// (routed to from the listener).
    fn configured(backends: &[&str]) -> Configured {
        let alpha: Arc<str> = "alpha".into();
        if backends.is_empty() {
            return Configured::new([listener()], [], []);
        }
        let ids = backends.iter().map(|b| Arc::from(*b)).collect();
        Configured::new(
            [listener()],
            [(listener(), Arc::clone(&alpha))],
            [(alpha, ids)],
        )
    }

    fn value(
        snapshot: &command::proto::WorkerMetrics,
        family: Family,
        labels: &[(&str, &str)],
    ) -> Option<i64> {
        snapshot
            .series
            .iter()
            .find(|s| {
                s.family == family.name()
                    && labels
                        .iter()
                        .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
            })
            .map(|s| s.value)
    }

    #[test]
    fn a_removed_listeners_counts_stay_in_the_workers_totals() {
        let mut metrics = Metrics::new(0);
        metrics.incr(Series::on(Family::ConnectionsAccepted, listener()));
        metrics.incr(Series::on(Family::ConnectionsAccepted, listener()));
        assert_eq!(metrics.snapshot(&configured(&[])).values["tcp.accepted"], 2);
        let gone = metrics.snapshot(&Configured::default());
        assert!(
            gone.series.iter().all(|s| s.labels.is_empty()),
            "{:?}",
            gone.series
        );
        assert_eq!(gone.values["tcp.accepted"], 2, "the total went down");
        assert_eq!(
            metrics.snapshot(&Configured::default()).values["tcp.accepted"],
            2,
            "retired once, not on every snapshot"
        );
    }

    #[test]
    fn a_backends_series_exist_at_zero_and_go_with_it() {
        let mut metrics = Metrics::new(0);
        let snapshot = metrics.snapshot(&configured(&["alpha-0", "alpha-1"]));
        for backend in ["alpha-0", "alpha-1"] {
            for direction in [IN, OUT] {
                let labels = [("backend", backend), ("direction", direction)];
                assert_eq!(
                    value(&snapshot, Family::BackendBytes, &labels),
                    Some(0),
                    "{labels:?}"
                );
            }
            for family in [
                Family::BackendConnections,
                Family::BackendConnectErrors,
                Family::BackendConnectRetries,
            ] {
                assert_eq!(value(&snapshot, family, &[("backend", backend)]), Some(0));
            }
        }
        let listener = listener().to_string();
        let routed = [("listener", listener.as_str()), ("cluster", "alpha")];
        assert_eq!(value(&snapshot, Family::PrereadRouted, &routed), Some(0));
        assert_eq!(
            value(&snapshot, Family::ClusterBytes, &[("direction", "in")]),
            Some(0)
        );

        let (cluster, gone): (Arc<str>, Arc<str>) = ("alpha".into(), "alpha-1".into());
        metrics.add(
            Series::backend(Family::BackendBytes, &cluster, &gone).direction(IN),
            9,
        );
        let snapshot = metrics.snapshot(&configured(&["alpha-0"]));
        assert_eq!(
            value(&snapshot, Family::BackendBytes, &[("backend", "alpha-1")]),
            None
        );
        assert_eq!(
            value(
                &snapshot,
                Family::BackendConnections,
                &[("backend", "alpha-1")]
            ),
            None
        );
        assert_eq!(snapshot.values.get("backend.alpha-1.bytes_in"), None);
        assert_eq!(
            metrics.get(&Series::backend(Family::BackendBytes, &cluster, &gone).direction(IN)),
            0,
            "forgotten, not only left out"
        );

        let snapshot = metrics.snapshot(&Configured::default());
        assert!(
            snapshot.series.iter().all(|s| s.labels.is_empty()),
            "{:?}",
            snapshot.series
        );
    }

    #[test]
    fn every_fixed_name_and_listener_series_starts_at_zero() {
        let snapshot = Metrics::new(3).snapshot(&configured(&[]));
        let values = &snapshot.values;
        for name in [
            "tcp.sni_preread.active",
            "tcp.sni_preread.routed",
            "tcp.accepted",
            "tcp.active",
            "tcp.refused.pool_exhausted",
            "tcp.refused.per_ip_limit",
            "session.loop_guard",
            "backend.connections",
            "backend.connect.errors",
            "bytes_in",
            "bytes_out",
            "access_log.dropped_total",
            "tcp.sni_preread.duration.count",
            "tcp.sni_preread.duration.p99",
            "tcp.sni_preread.rejected.not_tls",
            "tcp.sni_preread.fallback.server_first",
        ] {
            assert_eq!(values.get(name), Some(&0), "{name}");
        }
        let of = |family: Family| {
            snapshot
                .series
                .iter()
                .filter(|s| s.family == family.name())
                .count()
        };
        assert_eq!(of(Family::PrereadRejected), RejectReason::ALL.len());
        assert_eq!(of(Family::PrereadFallback), FallbackReason::ALL.len());
        assert_eq!(of(Family::ConnectionsRefused), RefuseReason::ALL.len());
        assert_eq!(of(Family::PrereadDuration), 1);
        assert_eq!(of(Family::ClientHelloBytes), 1);
        assert_eq!(of(Family::SpliceFallbacks), 1);
        assert!(snapshot.series.iter().all(|s| s.value == 0));
        assert_eq!(snapshot.worker_id, 3);
    }

    #[test]
    fn counters_and_gauges_move_their_series_and_the_flat_names() {
        let mut metrics = Metrics::new(0);
        let accepted = Series::on(Family::ConnectionsAccepted, listener());
        metrics.incr(accepted.clone());
        metrics.incr(accepted.clone());
        assert_eq!(metrics.get(&accepted), 2);
        let active = Series::on(Family::ConnectionsActive, listener());
        metrics.gauge_add(active.clone(), 1);
        metrics.gauge_add(active.clone(), -2);
        assert_eq!(metrics.get(&active), -1, "gauges are signed");
        let (cluster, backend): (Arc<str>, Arc<str>) = ("alpha".into(), "alpha-0".into());
        metrics.add(
            Series::backend(Family::BackendBytes, &cluster, &backend).direction(IN),
            7,
        );
        metrics.gauge_set(Series::of(Family::BuffersInUse), 12);
        metrics.gauge_set(Series::of(Family::BuffersInUse), 5);
        let snapshot = metrics.snapshot(&configured(&["alpha-0"]));
        assert_eq!(snapshot.values["tcp.accepted"], 2);
        assert_eq!(snapshot.values["tcp.active"], -1);
        assert_eq!(snapshot.values["backend.alpha-0.bytes_in"], 7);
        assert_eq!(snapshot.values["buffers.in_use"], 5);
        let bytes = snapshot
            .series
            .iter()
            .find(|s| s.family == "preread_backend_bytes_total");
        assert_eq!(
            bytes.map(|s| (s.labels["backend"].as_str(), s.value)),
            Some(("alpha-0", 7))
        );
    }

    #[test]
    fn histograms_count_in_their_familys_buckets() {
        let mut metrics = Metrics::new(0);
        let hello = Series::on(Family::ClientHelloBytes, listener());
        for size in [300, 1_800, 1_800, 70_000] {
            metrics.observe(hello.clone(), size);
        }
        let duration = Series::on(Family::PrereadDuration, listener());
        metrics.observe(duration, 1_500);
        let snapshot = metrics.snapshot(&configured(&[]));
        let find = |family: Family| {
            snapshot
                .series
                .iter()
                .find(|s| s.family == family.name())
                .map(|s| (s.buckets.clone(), s.sum))
        };
        let (buckets, sum) = find(Family::ClientHelloBytes).unwrap_or_default();
        // (256, 512] holds 300; (1536, 2048] both 1,800s; +Inf 70,000.
        assert_eq!(buckets, vec![0, 1, 0, 0, 2, 0, 0, 0, 0, 0, 1]);
        assert_eq!(sum, 73_900);
        let (buckets, sum) = find(Family::PrereadDuration).unwrap_or_default();
        assert_eq!(buckets.iter().sum::<u64>(), 1);
        assert_eq!(sum, 1_500);
        assert_eq!(snapshot.values["tcp.sni_preread.duration.count"], 1);
        assert_eq!(snapshot.values["tcp.sni_preread.duration.le_1"], 0);
        assert_eq!(snapshot.values["tcp.sni_preread.duration.le_5"], 1);
    }
}
