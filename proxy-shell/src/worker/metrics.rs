//! The per-worker metrics registry, the merge of worker snapshots into
//! totals, and the Prometheus text rendering of those totals.
//!
//! Owns: counters, gauges and millisecond histograms of one worker, their
//! flat export (`command::proto::WorkerMetrics`), and the naming rules of
//! doc/configure.md (`preread_` + dots→underscores in Prometheus; a name is a
//! gauge iff it ends in one of `GAUGE_SUFFIXES`). Must never: lock (one
//! registry per worker), allocate when an existing name is counted, or drop a
//! registered series (operators see zeros, not missing series).
//!
//! A histogram `h` is exported flat as `h.count`, `h.sum_ms`, the cumulative
//! buckets `h.le_<bound>` (so worker snapshots add up) and the estimates
//! `h.p50`, `h.p99` (which do not: [`totals`] recomputes them).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;

use command::proto::WorkerMetrics;

use super::vocabulary::{SNI_PREREAD_DURATION, fixed_names};

/// A name ending in one of these is a gauge; every other name is a counter.
/// One rule for the registry and the exporter, since worker snapshots reach
/// the exporter as bare names.
const GAUGE_SUFFIXES: [&str; 6] = [".active", ".connections", ".in_use", ".p50", ".p99", ".up"];

/// Histogram bucket upper bounds in milliseconds; a last bucket is +Inf.
const BUCKETS_MS: [u64; 12] = [1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000];

/// The quantiles exported, as (suffix, permille).
const QUANTILES: [(&str, u64); 2] = [("p50", 500), ("p99", 990)];

fn is_gauge(name: &str) -> bool {
    GAUGE_SUFFIXES.iter().any(|suffix| name.ends_with(suffix))
}

#[derive(Debug, Default, Clone)]
struct Histogram {
    count: u64,
    sum_ms: u64,
    /// Observations per bucket (not cumulative); the last one is +Inf.
    buckets: [u64; BUCKETS_MS.len() + 1],
}

impl Histogram {
    fn observe(&mut self, value_ms: u64) {
        // The first bound >= value: Prometheus buckets are `le` (≤).
        let bucket = BUCKETS_MS.partition_point(|&bound| bound < value_ms);
        self.buckets[bucket] += 1;
        self.count += 1;
        self.sum_ms = self.sum_ms.saturating_add(value_ms);
    }

    fn export(&self, name: &str, out: &mut BTreeMap<String, i64>) {
        let mut cumulative = [0; BUCKETS_MS.len()];
        let mut running = 0;
        for (slot, (bound, n)) in cumulative
            .iter_mut()
            .zip(BUCKETS_MS.iter().zip(self.buckets))
        {
            running += n;
            *slot = running;
            out.insert(format!("{name}.le_{bound}"), saturate(running));
        }
        out.insert(format!("{name}.count"), saturate(self.count));
        out.insert(format!("{name}.sum_ms"), saturate(self.sum_ms));
        for (suffix, permille) in QUANTILES {
            let estimate = quantile(&cumulative, self.count, permille);
            out.insert(format!("{name}.{suffix}"), saturate(estimate));
        }
    }
}

fn saturate(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// The `permille` quantile estimated from cumulative bucket counts, by
/// linear interpolation inside the bucket that holds it; the last finite
/// bound when it lies in +Inf (as Prometheus' `histogram_quantile` does).
fn quantile(cumulative: &[u64; BUCKETS_MS.len()], count: u64, permille: u64) -> u64 {
    if count == 0 {
        return 0;
    }
    let rank = count.saturating_mul(permille).div_ceil(1000).max(1);
    let mut below = (0, 0); // (bound, cumulative count) of the previous bucket
    for (&bound, &seen) in BUCKETS_MS.iter().zip(cumulative) {
        if seen >= rank {
            let (lower, before) = below;
            let width = u128::from(bound - lower);
            let into = u128::from(rank - before);
            // `seen >= rank > before`, so the bucket is not empty.
            let inside = u128::from(seen - before);
            // Rounded up: whole milliseconds, and never under-reporting.
            return lower + u64::try_from((width * into).div_ceil(inside)).unwrap_or(bound - lower);
        }
        below = (bound, seen);
    }
    BUCKETS_MS[BUCKETS_MS.len() - 1]
}

/// One worker's metrics.
#[derive(Debug)]
pub struct Metrics {
    worker_id: u32,
    values: HashMap<Box<str>, i64>,
    histograms: HashMap<Box<str>, Histogram>,
}

impl Metrics {
    /// A registry with every fixed, reject, fallback and refusal name at 0.
    pub fn new(worker_id: u32) -> Self {
        let values = fixed_names().map(|name| (Box::from(name), 0)).collect();
        let histograms = [(Box::from(SNI_PREREAD_DURATION), Histogram::default())].into();
        Self {
            worker_id,
            values,
            histograms,
        }
    }

    /// Adds one to a counter.
    pub fn incr(&mut self, name: &str) {
        self.add(name, 1);
    }

    /// Adds `n` to a counter.
    pub fn add(&mut self, name: &str, n: i64) {
        debug_assert!(!is_gauge(name), "{name} is a gauge: use gauge_add");
        self.bump(name, n);
    }

    /// Moves a gauge up or down.
    pub fn gauge_add(&mut self, name: &str, delta: i64) {
        debug_assert!(is_gauge(name), "{name} is not named as a gauge");
        self.bump(name, delta);
    }

    /// Sets a gauge that is sampled rather than tracked (e.g. buffers in use).
    pub fn gauge_set(&mut self, name: &str, value: i64) {
        debug_assert!(is_gauge(name), "{name} is not named as a gauge");
        match self.values.get_mut(name) {
            Some(slot) => *slot = value,
            None => {
                self.values.insert(name.into(), value);
            }
        }
    }

    /// Records one observation of a millisecond histogram.
    pub fn observe_ms(&mut self, name: &str, value_ms: u64) {
        match self.histograms.get_mut(name) {
            Some(histogram) => histogram.observe(value_ms),
            None => {
                let mut histogram = Histogram::default();
                histogram.observe(value_ms);
                self.histograms.insert(name.into(), histogram);
            }
        }
    }

    /// A counter or gauge; 0 when never touched.
    pub fn get(&self, name: &str) -> i64 {
        self.values.get(name).copied().unwrap_or(0)
    }

    /// Every value, flat, histograms expanded (see the module doc).
    pub fn snapshot(&self) -> WorkerMetrics {
        let mut values: BTreeMap<String, i64> = self
            .values
            .iter()
            .map(|(name, &value)| (name.to_string(), value))
            .collect();
        for (name, histogram) in &self.histograms {
            histogram.export(name, &mut values);
        }
        WorkerMetrics {
            worker_id: self.worker_id,
            values,
        }
    }

    // The lookup by `&str` finds an existing name without allocating; only a
    // new name (a per-cluster or per-backend one, once) allocates its key.
    fn bump(&mut self, name: &str, n: i64) {
        match self.values.get_mut(name) {
            Some(slot) => *slot = slot.saturating_add(n),
            None => {
                self.values.insert(name.into(), n);
            }
        }
    }
}

/// The sum of the workers' snapshots, with the histogram quantiles
/// re-estimated from the summed buckets (a sum of medians is no median).
pub fn totals(workers: &[WorkerMetrics]) -> BTreeMap<String, i64> {
    let mut total: BTreeMap<String, i64> = BTreeMap::new();
    for worker in workers {
        for (name, value) in &worker.values {
            let slot = total.entry(name.clone()).or_default();
            *slot = slot.saturating_add(*value);
        }
    }
    let bases: Vec<String> = histogram_bases(&total).map(str::to_owned).collect();
    for base in bases {
        let cumulative = BUCKETS_MS.map(|bound| {
            let value = total
                .get(&format!("{base}.le_{bound}"))
                .copied()
                .unwrap_or(0);
            u64::try_from(value).unwrap_or(0)
        });
        let count =
            u64::try_from(total.get(&format!("{base}.count")).copied().unwrap_or(0)).unwrap_or(0);
        for (suffix, permille) in QUANTILES {
            let estimate = quantile(&cumulative, count, permille);
            total.insert(format!("{base}.{suffix}"), saturate(estimate));
        }
    }
    total
}

/// The histograms among flat names: every `h` with an `h.sum_ms`.
fn histogram_bases(values: &BTreeMap<String, i64>) -> impl Iterator<Item = &str> {
    values
        .keys()
        .filter_map(|name| name.strip_suffix(".sum_ms"))
}

/// The Prometheus name: `preread_` + the name with every character outside
/// `[A-Za-z0-9_]` (dots, and the `-` or `:` an id may hold) made `_`.
fn prometheus_name(name: &str) -> String {
    let mut out = String::with_capacity(8 + name.len());
    out.push_str("preread_");
    out.extend(name.chars().map(|c| {
        if c.is_ascii_alphanumeric() || c == '_' {
            c
        } else {
            '_'
        }
    }));
    out
}

/// Renders totals in the Prometheus text exposition format (0.0.4):
/// counters and gauges as plain samples, each histogram as a `histogram`
/// family (`_bucket{le=…}`, `_sum`, `_count`, in milliseconds) with its
/// quantile estimates as gauges. Two names that sanitize to one Prometheus
/// name (ids `a-0` and `a_0`) keep the first; the second is left out with a
/// comment, since a repeated family makes the whole page invalid.
pub fn prometheus_text(totals: &BTreeMap<String, i64>) -> String {
    let histograms: BTreeSet<&str> = histogram_bases(totals).collect();
    let in_histogram = |name: &str| {
        let base = name
            .strip_suffix(".count")
            .or_else(|| name.strip_suffix(".sum_ms"))
            .or_else(|| name.rsplit_once(".le_").map(|(base, _)| base));
        base.is_some_and(|base| histograms.contains(base))
    };
    let mut out = String::new();
    let mut taken = BTreeSet::new();
    for (name, value) in totals.iter().filter(|(name, _)| !in_histogram(name)) {
        let family = prometheus_name(name);
        if !taken.insert(family.clone()) {
            let _ = writeln!(out, "# skipped: a second series named {family}");
            continue;
        }
        let kind = if is_gauge(name) { "gauge" } else { "counter" };
        let _ = writeln!(out, "# TYPE {family} {kind}\n{family} {value}");
    }
    for base in histograms {
        let family = prometheus_name(base);
        let samples = ["_bucket", "_sum", "_count"].map(|suffix| format!("{family}{suffix}"));
        if taken.contains(&family) || samples.iter().any(|sample| taken.contains(sample)) {
            let _ = writeln!(out, "# skipped: a second series named {family}");
            continue;
        }
        taken.insert(family.clone());
        taken.extend(samples);
        let get = |field: &str| totals.get(&format!("{base}.{field}")).copied().unwrap_or(0);
        let _ = writeln!(out, "# TYPE {family} histogram");
        for bound in BUCKETS_MS {
            let _ = writeln!(
                out,
                "{family}_bucket{{le=\"{bound}\"}} {}",
                get(&format!("le_{bound}"))
            );
        }
        let count = get("count");
        let _ = writeln!(out, "{family}_bucket{{le=\"+Inf\"}} {count}");
        let _ = writeln!(
            out,
            "{family}_sum {}\n{family}_count {count}",
            get("sum_ms")
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use command::proto::WorkerMetrics;
    use preread_core::{FallbackReason, RejectReason};

    use super::super::vocabulary::{
        self as names, SNI_PREREAD_ACTIVE, SNI_PREREAD_DURATION, fallback, rejected,
    };
    use super::{Metrics, prometheus_text, totals};

    #[test]
    fn every_fixed_and_reason_name_starts_at_zero() {
        let values = Metrics::new(3).snapshot().values;
        let reasons = RejectReason::ALL.map(rejected);
        let fallbacks = FallbackReason::ALL.map(fallback);
        for name in reasons.iter().chain(&fallbacks).chain(&[
            SNI_PREREAD_ACTIVE,
            "tcp.sni_preread.routed",
            "tcp.accepted",
            "tcp.active",
            "tcp.refused.pool_exhausted",
            "tcp.refused.max_connections",
            "tcp.refused.per_ip_limit",
            "tcp.refused.unrouted_per_ip",
            "tcp.refused.silent_timeout",
            "backend.connections",
            "backend.connect.errors",
            "backend.connect.retries",
            "tcp.refused.backend_full",
            "bytes_in",
            "bytes_out",
            "session.loop_guard",
            "access_log.dropped_total",
            "tcp.sni_preread.duration.count",
            "tcp.sni_preread.duration.p99",
        ]) {
            assert_eq!(values.get(*name), Some(&0), "{name}");
        }
    }

    #[test]
    fn counters_add_up_and_new_names_appear() {
        let mut metrics = Metrics::new(0);
        metrics.incr(names::TCP_ACCEPTED);
        metrics.incr(names::TCP_ACCEPTED);
        metrics.add(names::BYTES_IN, 40);
        metrics.add("cluster.alpha.bytes_in", 7);
        metrics.add("cluster.alpha.bytes_in", 3);
        assert_eq!(metrics.get(names::TCP_ACCEPTED), 2);
        assert_eq!(metrics.get(names::BYTES_IN), 40);
        assert_eq!(metrics.get("cluster.alpha.bytes_in"), 10);
        assert_eq!(metrics.get("never.touched"), 0);
    }

    #[test]
    fn gauges_go_up_and_down() {
        let mut metrics = Metrics::new(0);
        metrics.gauge_add(names::TCP_ACTIVE, 1);
        metrics.gauge_add(names::TCP_ACTIVE, 1);
        metrics.gauge_add(names::TCP_ACTIVE, -1);
        assert_eq!(metrics.get(names::TCP_ACTIVE), 1);
        metrics.gauge_add("backend.alpha-0.connections", -1);
        assert_eq!(
            metrics.get("backend.alpha-0.connections"),
            -1,
            "gauges are signed"
        );
        metrics.gauge_set(names::BUFFERS_IN_USE, 12);
        metrics.gauge_set(names::BUFFERS_IN_USE, 5);
        assert_eq!(metrics.get(names::BUFFERS_IN_USE), 5);
    }

    #[test]
    fn histogram_count_sum_and_estimates() {
        let mut metrics = Metrics::new(0);
        // 100 observations: 1..=100 ms.
        for value in 1..=100 {
            metrics.observe_ms(SNI_PREREAD_DURATION, value);
        }
        let values = metrics.snapshot().values;
        let get = |field: &str| values[&format!("{SNI_PREREAD_DURATION}.{field}")];
        assert_eq!(get("count"), 100);
        assert_eq!(get("sum_ms"), 5050);
        assert_eq!((get("le_1"), get("le_5"), get("le_10")), (1, 5, 10));
        assert_eq!(
            (get("le_50"), get("le_100"), get("le_10000")),
            (50, 100, 100)
        );
        // Rank 50 is the last of (25, 50]: interpolation lands on 50 exactly.
        assert_eq!(get("p50"), 50);
        // Rank 99 is the 49th of 50 in (50, 100]: 50 + 50 * 49 / 50.
        assert_eq!(get("p99"), 99);
    }

    #[test]
    fn histogram_edges() {
        let mut metrics = Metrics::new(0);
        metrics.observe_ms("h", 0);
        metrics.observe_ms("h", 60_000);
        let values = metrics.snapshot().values;
        assert_eq!(values["h.le_1"], 1, "0 ms is in the first bucket");
        assert_eq!(values["h.le_10000"], 1, "a minute is only in +Inf");
        assert_eq!(
            values["h.p50"], 1,
            "the bound of the bucket holding the median"
        );
        assert_eq!(
            values["h.p99"], 10_000,
            "+Inf reports the last finite bound"
        );
    }

    #[test]
    fn snapshot_carries_the_worker_and_every_value() {
        let mut metrics = Metrics::new(7);
        metrics.incr(rejected(RejectReason::NoSni));
        let snapshot = metrics.snapshot();
        assert_eq!(snapshot.worker_id, 7);
        assert_eq!(snapshot.values["tcp.sni_preread.rejected.no_sni"], 1);
        assert_eq!(snapshot.values["tcp.sni_preread.rejected.not_tls"], 0);
        // 17 fixed, 11 rejects, 5 fallbacks, 12 refusals, 12 + 4 histogram
        // fields.
        assert_eq!(snapshot.values.len(), 17 + 11 + 5 + 12 + 16);
    }

    #[test]
    fn totals_sum_workers_and_re_estimate_quantiles() {
        let worker = |id: u32, value: u64| {
            let mut metrics = Metrics::new(id);
            metrics.incr(names::TCP_ACCEPTED);
            for _ in 0..10 {
                metrics.observe_ms("h", value);
            }
            metrics.snapshot()
        };
        let total = totals(&[worker(0, 1), worker(1, 1), worker(2, 1000)]);
        assert_eq!(total[names::TCP_ACCEPTED], 3);
        assert_eq!(total["h.count"], 30);
        assert_eq!(total["h.le_1"], 20);
        // Summed, the medians would say 1 + 1 + 1000.
        assert_eq!(total["h.p50"], 1);
        assert_eq!(total["h.p99"], 1000);
        assert!(totals(&[] as &[WorkerMetrics]).is_empty());
    }

    #[test]
    fn prometheus_text_is_one_sample_per_name_with_its_type() {
        let mut metrics = Metrics::new(0);
        metrics.incr(names::TCP_ACCEPTED);
        metrics.gauge_add(names::TCP_ACTIVE, 2);
        metrics.add("backend.alpha-0.bytes_in", 5);
        metrics.observe_ms(SNI_PREREAD_DURATION, 3);
        let total = totals(&[metrics.snapshot()]);
        let text = prometheus_text(&total);
        assert!(
            text.contains("# TYPE preread_tcp_accepted counter\npreread_tcp_accepted 1\n"),
            "{text}"
        );
        assert!(text.contains("# TYPE preread_tcp_active gauge\npreread_tcp_active 2\n"));
        assert!(text.contains("preread_backend_alpha_0_bytes_in 5\n"));
        assert!(text.contains("# TYPE preread_tcp_sni_preread_duration_p99 gauge\n"));
        let histogram = "# TYPE preread_tcp_sni_preread_duration histogram\n\
            preread_tcp_sni_preread_duration_bucket{le=\"1\"} 0\n\
            preread_tcp_sni_preread_duration_bucket{le=\"5\"} 1\n";
        assert!(text.contains(histogram), "{text}");
        assert!(text.contains("preread_tcp_sni_preread_duration_bucket{le=\"+Inf\"} 1\n"));
        assert!(text.contains(
            "preread_tcp_sni_preread_duration_sum 3\npreread_tcp_sni_preread_duration_count 1\n"
        ));

        let mut families = std::collections::BTreeSet::new();
        let mut samples = 0;
        for line in text.lines() {
            if let Some(declared) = line.strip_prefix("# TYPE ") {
                let family = declared.split(' ').next().unwrap_or_default();
                assert!(
                    families.insert(family.to_owned()),
                    "{family} declared twice"
                );
                continue;
            }
            let (name, value) = line.rsplit_once(' ').unwrap_or_default();
            let name = name.split('{').next().unwrap_or_default();
            assert!(name.starts_with("preread_"), "{line}");
            assert!(
                name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
                "{line}"
            );
            assert!(value.parse::<i64>().is_ok(), "{line}");
            samples += 1;
        }
        // Every plain name once; the histogram's 4 flat fields become 15 samples.
        let plain = total.len() - (12 + 2);
        assert_eq!(samples, plain + 12 + 1 + 2);
    }

    #[test]
    fn prometheus_text_skips_a_name_that_collides_once_sanitized() {
        let total: BTreeMap<String, i64> = [
            ("backend.a-0.bytes_in".to_owned(), 1),
            ("backend.a_0.bytes_in".to_owned(), 2),
        ]
        .into();
        let text = prometheus_text(&total);
        assert_eq!(
            text,
            "# TYPE preread_backend_a_0_bytes_in counter\npreread_backend_a_0_bytes_in 1\n\
             # skipped: a second series named preread_backend_a_0_bytes_in\n"
        );
    }
}
