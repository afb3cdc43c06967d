//! The answers of the command server, built from the state and from what
//! the workers reported.
//!
//! Owns: the shape of every response (status, message, code, content).
//! Must never: change the state or talk to a worker.

use std::time::{Duration, UNIX_EPOCH};

use command::listing::fill_by;
use command::proto::{self, MetricSeries, response_content::ContentType};
use command::state::ConfigState;
use prost::Message;

use preread_worker::metrics::families::{Family, Label};
use preread_worker::metrics::flat;
use preread_worker::metrics::series::{family_total, plain, sum};
use preread_worker::shared::registry::Registry;
use preread_worker::worker::orders::Answer;

pub(crate) use coordinator::responses::{failure, ok, ok_with};

/// The listeners of the state, resolved, with their activation.
pub(crate) fn listeners(state: &ConfigState) -> ContentType {
    ContentType::Listeners(proto::ListenerList {
        listeners: state
            .listeners()
            .map(|config| proto::ListenerEntry {
                active: config.active.unwrap_or(true),
                config: Some(config.clone()),
            })
            .collect(),
    })
}

/// The status report from every worker's `Status` answer.
pub(crate) fn status(
    uptime: Duration,
    workers: usize,
    state: &ConfigState,
    generation: u64,
    answers: &[(u32, Answer)],
) -> ContentType {
    let sessions = answers
        .iter()
        .map(|(_, answer)| match answer {
            Answer::Status { sessions, .. } => *sessions,
            _ => 0,
        })
        .fold(0u64, u64::saturating_add);
    ContentType::Status(proto::StatusReport {
        uptime_ms: u64::try_from(uptime.as_millis()).unwrap_or(u64::MAX),
        workers: u32::try_from(workers).unwrap_or(u32::MAX),
        listeners: u32::try_from(state.listeners().len()).unwrap_or(u32::MAX),
        sessions,
        pid: std::process::id(),
        version: env!("CARGO_PKG_VERSION").to_owned(),
        generation,
    })
}

/// The page of backends after `request.after`, in backend id order, one
/// entry per instance (a name that resolved to nothing has one without an
/// address), with its health as the registry holds it. A backend's
/// instances are never split over two pages.
pub(crate) fn backends(
    state: &ConfigState,
    registry: &Registry,
    request: &proto::ListBackends,
) -> ContentType {
    let groups = state
        .backends_after(request.after.as_deref())
        .map(|backend| statuses(backend, registry));
    let mut page = Vec::new();
    let more = fill_by(groups, request.limit, &mut page, |group| {
        group.iter().map(|s| s.encoded_len() + 8).sum()
    });
    ContentType::Backends(proto::BackendList {
        backends: page.into_iter().flatten().collect(),
        more,
    })
}

/// The rows of one backend: one per instance.
fn statuses(backend: &proto::Backend, registry: &Registry) -> Vec<proto::BackendStatus> {
    let shared = registry.find(backend);
    let instances = shared.as_ref().map(|s| s.instances()).unwrap_or_default();
    if instances.is_empty() {
        let error = shared.and_then(|s| s.resolution().error);
        return vec![proto::BackendStatus {
            backend: Some(backend.clone()),
            instance: String::new(),
            up: false,
            since_ms: 0,
            last_error: error.unwrap_or_else(|| "not resolved yet".to_owned()),
            connections: 0,
        }];
    }
    instances
        .iter()
        .map(|instance| {
            let status = instance.status();
            proto::BackendStatus {
                backend: Some(backend.clone()),
                instance: instance.address().to_string(),
                up: status.up,
                since_ms: status
                    .since
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
                last_error: status.last_error.unwrap_or_default(),
                connections: status.connections,
            }
        })
        .collect()
}

/// The metrics of every worker, by worker id, and their total: flat
/// counters and gauges summed, histogram quantiles re-estimated from the
/// summed buckets (a sum of per-worker p99s means nothing), and the
/// labelled series summed; the process-wide series (`process`: health and
/// resolution), the config `generation` and each worker's open sessions are
/// in the total only.
pub(crate) fn metrics(
    answers: &[(u32, Answer)],
    process: Vec<MetricSeries>,
    generation: u64,
) -> ContentType {
    let mut workers: Vec<proto::WorkerMetrics> = answers
        .iter()
        .filter_map(|(worker, answer)| match answer {
            Answer::Metrics(metrics) => Some(proto::WorkerMetrics {
                worker_id: *worker,
                ..metrics.clone()
            }),
            _ => None,
        })
        .collect();
    let mut series = process;
    series.push(plain(
        Family::ConfigGeneration,
        &[],
        i64::try_from(generation).unwrap_or(i64::MAX),
    ));
    for worker in &workers {
        let active = family_total(&worker.series, Family::ConnectionsActive);
        let id = worker.worker_id.to_string();
        series.push(plain(
            Family::WorkerConnectionsActive,
            &[(Label::Worker, &id)],
            active,
        ));
    }
    let mut total = flat::totals(&workers);
    flat::view(&series, &mut total);
    series.extend(sum(workers.iter().flat_map(|w| &w.series)));
    for worker in &mut workers {
        worker.series.clear();
    }
    ContentType::Metrics(proto::MetricsReport {
        workers,
        total,
        series,
    })
}

/// The etcd source's series: the revision served, and whether a member
/// answers.
pub(crate) fn etcd_series(gauges: &crate::sources::EtcdGauges) -> [MetricSeries; 2] {
    use std::sync::atomic::Ordering;
    let source = [(Label::Source, "etcd")];
    [
        plain(
            Family::SourceRevision,
            &source,
            gauges.revision.load(Ordering::Relaxed),
        ),
        plain(
            Family::SourceConnected,
            &source,
            i64::from(gauges.connected.load(Ordering::Relaxed)),
        ),
    ]
}

/// `report` with only its labelled series: what `GET /metrics` serves.
pub(crate) fn series_only(report: ContentType) -> ContentType {
    match report {
        ContentType::Metrics(report) => ContentType::Metrics(proto::MetricsReport {
            workers: Vec::new(),
            total: Default::default(),
            series: report.series,
        }),
        other => other,
    }
}

/// Room for the windows in one answer, under the channel's 1 MiB frame
/// with what else the answer holds.
const REJECTS_BUDGET: usize = 960 * 1024;

/// The captured windows of every worker, newest first, as many as fit in
/// one answer; the rest are counted.
pub(crate) fn rejects(answers: &[(u32, Answer)]) -> ContentType {
    let mut windows: Vec<&proto::CapturedWindow> = answers
        .iter()
        .filter_map(|(_, answer)| match answer {
            Answer::Rejects(windows) => Some(windows),
            _ => None,
        })
        .flatten()
        .collect();
    windows.sort_by_key(|w| std::cmp::Reverse((w.at_unix_ms, w.seq, w.worker)));
    let mut room = REJECTS_BUDGET;
    let mut kept = Vec::new();
    let mut left_out = 0u32;
    for window in windows {
        // The bytes and a generous allowance for the fields around them.
        let size = window.window.len() + 256;
        if size <= room {
            room -= size;
            kept.push(window.clone());
        } else {
            left_out = left_out.saturating_add(1);
        }
    }
    ContentType::Rejects(proto::RejectList {
        windows: kept,
        left_out,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn worker(values: &[(&str, i64)], active: i64) -> Answer {
        Answer::Metrics(proto::WorkerMetrics {
            worker_id: 99,
            values: values.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect(),
            series: vec![plain(
                Family::ConnectionsActive,
                &[(Label::Listener, "127.0.0.1:1")],
                active,
            )],
        })
    }

    /// A state of cluster `c` with backends `b0`, `b1` at `127.0.0.1` and
    /// `b2` at a name, and a registry in step with it.
    fn with_backends() -> Result<(ConfigState, Registry), Box<dyn std::error::Error>> {
        use command::proto::request::RequestType;
        let mut state = ConfigState::default();
        let cluster = proto::Cluster {
            cluster_id: "c".into(),
            ..Default::default()
        };
        let mut requests = vec![RequestType::AddCluster(cluster)];
        for (id, address) in [
            ("b0", "127.0.0.1:9000"),
            ("b1", "127.0.0.1:9001"),
            ("b2", "db.internal:5432"),
        ] {
            requests.push(RequestType::AddBackend(proto::Backend {
                cluster_id: "c".into(),
                backend_id: id.into(),
                address: address.into(),
                ..Default::default()
            }));
        }
        for kind in requests {
            let request = proto::Request {
                request_type: Some(kind),
            };
            let _applied = state.dispatch(&request)?;
        }
        let registry = Registry::default();
        registry.sync(&state, std::time::Instant::now());
        Ok((state, registry))
    }

    fn page(
        state: &ConfigState,
        registry: &Registry,
        after: Option<&str>,
        limit: u32,
    ) -> proto::BackendList {
        let request = proto::ListBackends {
            after: after.map(str::to_owned),
            limit,
        };
        match backends(state, registry, &request) {
            ContentType::Backends(list) => list,
            _ => proto::BackendList::default(),
        }
    }

    #[test]
    fn backends_come_in_pages_with_a_row_per_instance() -> Result<(), Box<dyn std::error::Error>> {
        let (state, registry) = with_backends()?;
        let first = page(&state, &registry, None, 2);
        let ids: Vec<&str> = first
            .backends
            .iter()
            .filter_map(|s| s.backend.as_ref().map(|b| b.backend_id.as_str()))
            .collect();
        assert_eq!((ids, first.more), (vec!["b0", "b1"], true));
        assert!(
            first
                .backends
                .iter()
                .all(|s| s.up && s.instance.starts_with("127.0.0.1:"))
        );
        let rest = page(&state, &registry, Some("b1"), 0);
        assert!(!rest.more);
        assert_eq!(rest.backends.len(), 1, "{rest:?}");
        let unresolved = &rest.backends[0];
        assert_eq!(
            (
                unresolved.instance.as_str(),
                unresolved.up,
                unresolved.since_ms
            ),
            ("", false, 0),
            "a name not resolved yet has one row, down, with no address"
        );
        assert_eq!(unresolved.last_error, "not resolved yet");
        assert_eq!(page(&state, &registry, None, 0).backends.len(), 3);
        Ok(())
    }

    #[test]
    fn metrics_total_is_a_per_name_and_per_series_sum() {
        let process = vec![plain(Family::BackendDown, &[], 2)];
        let ContentType::Metrics(report) = metrics(
            &[
                (0, worker(&[("a", 1), ("b", 2)], 3)),
                (1, worker(&[("b", 3), ("c", 4)], 4)),
            ],
            process,
            17,
        ) else {
            panic!("not metrics");
        };
        let total: Vec<(&str, i64)> = report.total.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        assert_eq!(
            total,
            vec![
                ("a", 1),
                ("b", 5),
                ("backend.down", 2),
                ("c", 4),
                ("config.generation", 17)
            ],
            "the process-wide names are in the total"
        );
        assert!(
            report
                .workers
                .iter()
                .all(|w| !w.values.contains_key("backend.down") && w.series.is_empty()),
            "and in no worker's column; the series are summed once"
        );
        let ids: Vec<u32> = report.workers.iter().map(|w| w.worker_id).collect();
        assert_eq!(ids, vec![0, 1], "the reply's worker id wins");
        let value = |family: Family, worker: Option<&str>| {
            report
                .series
                .iter()
                .find(|s| {
                    s.family == family.name()
                        && worker
                            .is_none_or(|w| s.labels.get("worker").map(String::as_str) == Some(w))
                })
                .map(|s| s.value)
        };
        assert_eq!(value(Family::ConnectionsActive, None), Some(7));
        assert_eq!(value(Family::WorkerConnectionsActive, Some("0")), Some(3));
        assert_eq!(value(Family::WorkerConnectionsActive, Some("1")), Some(4));
        assert_eq!(value(Family::ConfigGeneration, None), Some(17));
        assert_eq!(value(Family::BackendDown, None), Some(2));
    }

    fn captured(worker: u32, at_unix_ms: u64, len: usize) -> proto::CapturedWindow {
        proto::CapturedWindow {
            worker,
            at_unix_ms,
            window: vec![0x16; len],
            ..Default::default()
        }
    }

    #[test]
    fn rejects_are_merged_newest_first_and_cut_to_one_frame()
    -> Result<(), Box<dyn std::error::Error>> {
        let answers = [
            (
                0,
                Answer::Rejects(vec![captured(0, 30, 10), captured(0, 10, 10)]),
            ),
            (1, Answer::Rejects(vec![captured(1, 20, 10)])),
        ];
        let ContentType::Rejects(list) = rejects(&answers) else {
            return Err("not a list of captured windows".into());
        };
        let order: Vec<(u32, u64)> = list
            .windows
            .iter()
            .map(|w| (w.worker, w.at_unix_ms))
            .collect();
        assert_eq!(order, [(0, 30), (1, 20), (0, 10)]);
        assert_eq!(list.left_out, 0);

        let big = REJECTS_BUDGET / 2;
        let answers = [(
            0,
            Answer::Rejects(vec![
                captured(0, 3, big),
                captured(0, 2, big),
                captured(0, 1, 10),
            ]),
        )];
        let ContentType::Rejects(list) = rejects(&answers) else {
            return Err("not a list of captured windows".into());
        };
        let kept: Vec<u64> = list.windows.iter().map(|w| w.at_unix_ms).collect();
        assert_eq!(
            kept,
            [3, 1],
            "the second large window does not fit; the small one does"
        );
        assert_eq!(list.left_out, 1);
        Ok(())
    }
}
