//! The flat view of the labelled series: the dotted names of `preread
//! metrics get` (doc/configure.md §5.3), such as `tcp.accepted` or
//! `backend.<id>.bytes_in`, and their totals over the workers.
//!
//! Owns: which flat name each series adds to (a listener's series add up
//! to one name; a backend's to its own name and the sum), the flat
//! millisecond histogram `tcp.sni_preread.duration.*` with its estimated
//! p50/p99, and which flat names are gauges. Must never: count anything
//! itself: every flat value is read off a series, so the two views cannot
//! disagree.
//!
//! The flat histogram `h` is `h.count`, `h.sum_ms`, the cumulative buckets
//! `h.le_<ms>` (so worker snapshots add up) and the estimates `h.p50`,
//! `h.p99` (which do not: [`totals`] recomputes them).

use std::collections::BTreeMap;

use command::proto::{MetricSeries, WorkerMetrics};
use preread_core::{FallbackReason, RejectReason};

use super::families::{DURATION_BOUNDS_US, Family};
use crate::vocabulary::{
    self as names, QuicDrop, RefuseReason, SNI_PREREAD_DURATION, fallback, rejected,
};

/// A name ending in one of these is a gauge; every other name is a counter.
const GAUGE_SUFFIXES: [&str; 7] = [
    ".active",
    ".connections",
    ".in_use",
    ".p50",
    ".p99",
    ".up",
    ".generation",
];

/// The flat histogram's bucket bounds in milliseconds; a last bucket is
/// +Inf. Each is one of the series' bounds ([`DURATION_BOUNDS_US`]).
const BUCKETS_MS: [u64; 12] = [1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000];

/// The quantiles exported, as (suffix, permille).
const QUANTILES: [(&str, u64); 2] = [("p50", 500), ("p99", 990)];

/// Whether the flat name `name` is a gauge.
pub fn is_gauge(name: &str) -> bool {
    GAUGE_SUFFIXES.iter().any(|suffix| name.ends_with(suffix))
}

fn saturate(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn label<'a>(series: &'a MetricSeries, name: &str) -> &'a str {
    series.labels.get(name).map_or("", String::as_str)
}

fn refused(reason: &str) -> Option<&'static str> {
    RefuseReason::ALL
        .into_iter()
        .find(|r| r.as_str() == reason)
        .map(RefuseReason::metric_name)
}

fn rejected_by(reason: &str) -> Option<&'static str> {
    RejectReason::ALL
        .into_iter()
        .find(|r| r.as_str() == reason)
        .map(rejected)
}

fn dropped_by(reason: &str) -> Option<&'static str> {
    QuicDrop::ALL
        .into_iter()
        .find(|r| r.as_str() == reason)
        .map(QuicDrop::metric_name)
}

fn fallback_by(reason: &str) -> Option<&'static str> {
    FallbackReason::ALL
        .into_iter()
        .find(|r| r.as_str() == reason)
        .map(fallback)
}

/// The flat names a counter's or gauge's series adds its value to.
fn names_of(series: &MetricSeries) -> Vec<String> {
    let Some(family) = Family::from_name(&series.family) else {
        return Vec::new();
    };
    let fixed = |name: Option<&str>| name.map(str::to_owned).into_iter().collect();
    let direction = label(series, "direction");
    let backend = label(series, "backend");
    match family {
        Family::ConnectionsAccepted => fixed(Some(names::TCP_ACCEPTED)),
        Family::ConnectionsActive => fixed(Some(names::TCP_ACTIVE)),
        Family::ConnectionsRefused => fixed(refused(label(series, "reason"))),
        Family::ConnectionsReset => match label(series, "from") {
            "backend" => fixed(Some(names::TCP_RESET_FROM_BACKEND)),
            "client" => fixed(Some(names::TCP_RESET_FROM_CLIENT)),
            _ => Vec::new(),
        },
        Family::AcceptDescriptorErrors => fixed(Some(names::TCP_ACCEPT_EMFILE)),
        Family::PrereadActive => fixed(Some(names::SNI_PREREAD_ACTIVE)),
        Family::PrereadRouted => fixed(Some(names::SNI_PREREAD_ROUTED)),
        Family::PrereadFallback => fixed(fallback_by(label(series, "reason"))),
        Family::PrereadRejected => fixed(rejected_by(label(series, "reason"))),
        Family::ClientBytes => match direction {
            "in" => fixed(Some(names::BYTES_IN)),
            "out" => fixed(Some(names::BYTES_OUT)),
            _ => Vec::new(),
        },
        Family::ClusterBytes => vec![names::cluster_bytes(label(series, "cluster"), direction)],
        Family::BackendConnections => vec![
            names::BACKEND_CONNECTIONS.to_owned(),
            names::backend_connections(backend),
        ],
        Family::BackendConnectErrors => fixed(Some(names::BACKEND_CONNECT_ERRORS)),
        Family::BackendConnectRetries => fixed(Some(names::BACKEND_CONNECT_RETRIES)),
        Family::BackendConnectLocalErrors => fixed(Some(names::BACKEND_CONNECT_LOCAL_ERRORS)),
        Family::BackendUp => vec![names::backend_up(backend)],
        Family::BackendBytes => vec![names::backend_bytes(backend, direction)],
        Family::BackendDown => fixed(Some(names::BACKEND_DOWN)),
        Family::BackendRecovered => fixed(Some(names::BACKEND_RECOVERED)),
        Family::BackendResolveErrors => fixed(Some(names::BACKEND_RESOLVE_ERRORS)),
        Family::SplicePipesCreated => fixed(Some(names::SPLICE_PIPES_CREATED)),
        Family::SplicePipesGrown => fixed(Some(names::SPLICE_PIPES_GROWN)),
        Family::SpliceFallbacks => fixed(Some(names::SPLICE_FALLBACKS)),
        Family::BuffersInUse => fixed(Some(names::BUFFERS_IN_USE)),
        Family::SpliceBulkPipes => fixed(Some(names::SPLICE_BULK_PIPES)),
        Family::AccessLogDropped => fixed(Some(names::ACCESS_LOG_DROPPED)),
        Family::ConfigGeneration => fixed(Some(names::CONFIG_GENERATION)),
        Family::QuicFlowsActive => fixed(Some(names::QUIC_FLOWS_ACTIVE)),
        Family::QuicDatagrams => match direction {
            "in" => fixed(Some(names::QUIC_DATAGRAMS_IN)),
            "out" => fixed(Some(names::QUIC_DATAGRAMS_OUT)),
            _ => Vec::new(),
        },
        Family::QuicDroppedDatagrams => fixed(dropped_by(label(series, "reason"))),
        // Shown per worker already; the size histogram is served only.
        Family::WorkerConnectionsActive
        | Family::PrereadDuration
        | Family::ClientHelloBytes
        | Family::SourceRevision
        | Family::SourceConnected => Vec::new(),
    }
}

/// Adds the flat view of `series` to `out`.
pub fn view(series: &[MetricSeries], out: &mut BTreeMap<String, i64>) {
    let mut duration: Option<(Vec<u64>, u64)> = None;
    for one in series {
        if one.family == Family::PrereadDuration.name() {
            let (buckets, sum) = duration.get_or_insert_with(|| (Vec::new(), 0));
            if buckets.len() < one.buckets.len() {
                buckets.resize(one.buckets.len(), 0);
            }
            for (total, n) in buckets.iter_mut().zip(&one.buckets) {
                *total = total.saturating_add(*n);
            }
            *sum = sum.saturating_add(one.sum);
            continue;
        }
        for name in names_of(one) {
            let slot = out.entry(name).or_default();
            *slot = slot.saturating_add(one.value);
        }
    }
    if let Some((buckets, sum_us)) = duration {
        export_duration(&buckets, sum_us, out);
    }
}

/// The flat duration histogram at 0, for a worker without listeners.
pub fn zero_histogram(out: &mut BTreeMap<String, i64>) {
    export_duration(&[], 0, out);
}

/// The flat duration histogram from the series' microsecond buckets.
fn export_duration(buckets: &[u64], sum_us: u64, out: &mut BTreeMap<String, i64>) {
    let count: u64 = buckets.iter().fold(0, |n, b| n.saturating_add(*b));
    let mut cumulative = [0u64; BUCKETS_MS.len()];
    for (slot, bound_ms) in cumulative.iter_mut().zip(BUCKETS_MS) {
        let bound_us = bound_ms * 1000;
        *slot = DURATION_BOUNDS_US
            .iter()
            .zip(buckets)
            .take_while(|(bound, _)| **bound <= bound_us)
            .fold(0, |n, (_, b)| n.saturating_add(*b));
    }
    let base = SNI_PREREAD_DURATION;
    for (bound, seen) in BUCKETS_MS.iter().zip(cumulative) {
        out.insert(format!("{base}.le_{bound}"), saturate(seen));
    }
    out.insert(format!("{base}.count"), saturate(count));
    out.insert(format!("{base}.sum_ms"), saturate(sum_us / 1000));
    for (suffix, permille) in QUANTILES {
        let estimate = quantile(&cumulative, count, permille);
        out.insert(format!("{base}.{suffix}"), saturate(estimate));
    }
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

/// The sum of the workers' flat values, with the histogram quantiles
/// re-estimated from the summed buckets (a sum of medians is no median).
pub fn totals(workers: &[WorkerMetrics]) -> BTreeMap<String, i64> {
    let mut total: BTreeMap<String, i64> = BTreeMap::new();
    for worker in workers {
        for (name, value) in &worker.values {
            let slot = total.entry(name.clone()).or_default();
            *slot = slot.saturating_add(*value);
        }
    }
    let bases: Vec<String> = total
        .keys()
        .filter_map(|name| name.strip_suffix(".sum_ms"))
        .map(str::to_owned)
        .collect();
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use command::proto::{MetricSeries, WorkerMetrics};

    use super::{Family, is_gauge, totals, view};
    use crate::metrics::families::DURATION_BOUNDS_US;
    use crate::metrics::families::Label;
    use crate::metrics::series::plain;

    fn durations_ms(values: impl IntoIterator<Item = u64>) -> MetricSeries {
        let mut buckets = vec![0u64; DURATION_BOUNDS_US.len() + 1];
        let mut sum = 0;
        for ms in values {
            let us = ms * 1000;
            buckets[DURATION_BOUNDS_US.partition_point(|&b| b < us)] += 1;
            sum += us;
        }
        MetricSeries {
            family: Family::PrereadDuration.name().to_owned(),
            buckets,
            sum,
            ..MetricSeries::default()
        }
    }

    #[test]
    fn listener_series_add_up_to_one_flat_name() {
        let series = [
            plain(Family::ConnectionsAccepted, &[(Label::Listener, "a:1")], 2),
            plain(Family::ConnectionsAccepted, &[(Label::Listener, "b:1")], 3),
            plain(
                Family::PrereadRejected,
                &[(Label::Listener, "a:1"), (Label::Reason, "not_tls")],
                4,
            ),
            plain(
                Family::ConnectionsRefused,
                &[(Label::Listener, "a:1"), (Label::Reason, "loop_guard")],
                1,
            ),
            plain(
                Family::BackendConnections,
                &[(Label::Cluster, "c"), (Label::Backend, "c-0")],
                2,
            ),
            plain(
                Family::BackendBytes,
                &[
                    (Label::Cluster, "c"),
                    (Label::Backend, "c-0"),
                    (Label::Direction, "in"),
                ],
                9,
            ),
        ];
        let mut flat = BTreeMap::new();
        view(&series, &mut flat);
        assert_eq!(flat["tcp.accepted"], 5);
        assert_eq!(flat["tcp.sni_preread.rejected.not_tls"], 4);
        assert_eq!(flat["session.loop_guard"], 1);
        assert_eq!(flat["backend.connections"], 2);
        assert_eq!(flat["backend.c-0.connections"], 2);
        assert_eq!(flat["backend.c-0.bytes_in"], 9);
        assert_eq!(flat.len(), 6);
    }

    #[test]
    fn the_flat_histogram_is_read_off_the_series_buckets() {
        let mut flat = BTreeMap::new();
        view(&[durations_ms(1..=100)], &mut flat);
        let get = |field: &str| flat[&format!("tcp.sni_preread.duration.{field}")];
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

        let mut edges = BTreeMap::new();
        view(&[durations_ms([0, 60_000])], &mut edges);
        assert_eq!(edges["tcp.sni_preread.duration.le_1"], 1);
        assert_eq!(edges["tcp.sni_preread.duration.le_10000"], 1);
        assert_eq!(edges["tcp.sni_preread.duration.p99"], 10_000);
    }

    #[test]
    fn totals_sum_workers_and_re_estimate_quantiles() {
        let worker = |id: u32, ms: u64| {
            let mut values = BTreeMap::from([("tcp.accepted".to_owned(), 1)]);
            view(&[durations_ms([ms; 10])], &mut values);
            WorkerMetrics {
                worker_id: id,
                values,
                series: Vec::new(),
            }
        };
        let total = totals(&[worker(0, 1), worker(1, 1), worker(2, 1000)]);
        assert_eq!(total["tcp.accepted"], 3);
        let h = |field: &str| total[&format!("tcp.sni_preread.duration.{field}")];
        assert_eq!(h("count"), 30);
        assert_eq!(h("le_1"), 20);
        // Summed, the medians would say 1 + 1 + 1000.
        assert_eq!(h("p50"), 1);
        assert_eq!(h("p99"), 1000);
        assert!(totals(&[]).is_empty());
    }

    #[test]
    fn gauges_are_named_as_gauges() {
        for gauge in [
            "tcp.active",
            "backend.a-0.connections",
            "buffers.in_use",
            "backend.a-0.up",
            "config.generation",
        ] {
            assert!(is_gauge(gauge), "{gauge}");
        }
        assert!(!is_gauge("tcp.accepted"));
        assert!(!is_gauge("backend.a-0.bytes_in"));
    }
}
