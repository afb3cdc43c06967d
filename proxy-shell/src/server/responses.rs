//! The answers of the command server, built from the state and from what
//! the workers reported.
//!
//! Owns: the shape of every response (status, message, code, content).
//! Must never: change the state or talk to a worker.

use std::collections::BTreeMap;
use std::time::{Duration, UNIX_EPOCH};

use command::proto::{self, response_content::ContentType};
use command::state::ConfigState;

use crate::answer_code::AnswerCode;
use crate::shared::registry::Registry;
use crate::worker::orders::Answer;

/// An OK answer with a message and no content.
pub(crate) fn ok(message: impl Into<String>) -> proto::Response {
    proto::Response {
        status: proto::ResponseStatus::Ok as i32,
        message: message.into(),
        error_code: String::new(),
        content: None,
    }
}

/// An OK answer carrying `content`.
pub(crate) fn ok_with(content: ContentType) -> proto::Response {
    proto::Response {
        content: Some(proto::ResponseContent {
            content_type: Some(content),
        }),
        ..ok("")
    }
}

/// A FAILURE answer with a stable code (may be empty) and a message.
pub(crate) fn failure(code: AnswerCode, message: impl Into<String>) -> proto::Response {
    proto::Response {
        status: proto::ResponseStatus::Failure as i32,
        message: message.into(),
        error_code: code.as_str().to_owned(),
        content: None,
    }
}

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

/// Every backend of the state, one entry per instance (a name that
/// resolved to nothing has one without an address), with its health as
/// the registry holds it.
pub(crate) fn backends(state: &ConfigState, registry: &Registry) -> ContentType {
    let mut list = Vec::new();
    for backend in state.backends() {
        let shared = registry.find(backend);
        let instances = shared.as_ref().map(|s| s.instances()).unwrap_or_default();
        if instances.is_empty() {
            let error = shared.and_then(|s| s.resolution().error);
            list.push(proto::BackendStatus {
                backend: Some(backend.clone()),
                instance: String::new(),
                up: false,
                since_ms: 0,
                last_error: error.unwrap_or_else(|| "not resolved yet".to_owned()),
                connections: 0,
            });
            continue;
        }
        for instance in instances.iter() {
            let status = instance.status();
            list.push(proto::BackendStatus {
                backend: Some(backend.clone()),
                instance: instance.address().to_string(),
                up: status.up,
                since_ms: status
                    .since
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
                last_error: status.last_error.unwrap_or_default(),
                connections: status.connections,
            });
        }
    }
    ContentType::Backends(proto::BackendList { backends: list })
}

/// The metrics of every worker, by worker id, and their total: counters
/// and gauges summed, histogram quantiles re-estimated from the summed
/// buckets (a sum of per-worker p99s means nothing), with the process-wide
/// ones (`process`: health and resolution) in the total only.
pub(crate) fn metrics(answers: &[(u32, Answer)], process: BTreeMap<String, i64>) -> ContentType {
    let workers: Vec<proto::WorkerMetrics> = answers
        .iter()
        .filter_map(|(worker, answer)| match answer {
            Answer::Metrics(metrics) => Some(proto::WorkerMetrics {
                worker_id: *worker,
                values: metrics.values.clone(),
            }),
            _ => None,
        })
        .collect();
    let mut total = crate::worker::metrics::totals(&workers);
    total.extend(process);
    ContentType::Metrics(proto::MetricsReport { workers, total })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn worker(values: &[(&str, i64)]) -> Answer {
        Answer::Metrics(proto::WorkerMetrics {
            worker_id: 99,
            values: values.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect(),
        })
    }

    #[test]
    fn metrics_total_is_a_per_name_sum() {
        let process = BTreeMap::from([("backend.down".to_owned(), 2)]);
        let ContentType::Metrics(report) = metrics(
            &[
                (0, worker(&[("a", 1), ("b", 2)])),
                (1, worker(&[("b", 3), ("c", 4)])),
            ],
            process,
        ) else {
            panic!("not metrics");
        };
        let total: Vec<(&str, i64)> = report.total.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        assert_eq!(
            total,
            vec![("a", 1), ("b", 5), ("backend.down", 2), ("c", 4)],
            "the process-wide names are in the total"
        );
        assert!(
            report
                .workers
                .iter()
                .all(|w| !w.values.contains_key("backend.down")),
            "and in no worker's column"
        );
        let ids: Vec<u32> = report.workers.iter().map(|w| w.worker_id).collect();
        assert_eq!(ids, vec![0, 1], "the reply's worker id wins");
    }
}
