//! From a client's request to the coordinator, and the answers the shell
//! renders itself: the listings and `state save` from the committed state,
//! and the queries from the workers' reports and the process's counters.
//!
//! Owns: the typing of a request at the edge ([`Request`]), and the
//! answers of [`Effect::Serve`](coordinator::Effect::Serve) and
//! [`Effect::Report`](coordinator::Effect::Report). Must never: change the
//! state (only the coordinator commits), or answer a client out of its
//! turn (every request goes through the coordinator, which says when).

use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

use command::codes::ErrorCode;
use command::listing;
use command::proto::{self, request::RequestType, response_content::ContentType};
use command::state_file::save_state;
use coordinator::{ClientId, Input, Query, Request, UpgradeRequest};

use super::clients::ClientRef;
use super::responses::{self, failure, ok, ok_with};
use super::{CommandServer, StopKind};
use preread_worker::worker::orders::Answer;

/// `request` as the coordinator takes it.
fn typed(request: proto::Request) -> Request {
    let Some(kind) = request.request_type else {
        return Request::Local(request);
    };
    match kind {
        RequestType::Status(_) => Request::Query(Query::Status),
        RequestType::QueryMetrics(q) => Request::Query(Query::Metrics {
            series_only: q.series_only,
        }),
        RequestType::QueryRejects(filter) => Request::Query(Query::Rejects(filter)),
        RequestType::LoadState(load) => Request::LoadState { path: load.path },
        RequestType::SoftStop(_) => Request::Stop(StopKind::Soft),
        RequestType::HardStop(_) => Request::Stop(StopKind::Hard),
        change @ command::change_request!() => Request::Change(proto::Request {
            request_type: Some(change),
        }),
        RequestType::ApplyChanges(batch) => Request::BatchPart(batch),
        RequestType::Upgrade(upgrade) => Request::Upgrade(UpgradeRequest {
            binary: (!upgrade.binary.is_empty()).then(|| PathBuf::from(&upgrade.binary)),
            takeover: (upgrade.timeout != 0)
                .then(|| Duration::from_secs(u64::from(upgrade.timeout))),
        }),
        RequestType::ReloadFile(seen) => Request::ReloadFile(seen),
        local @ (RequestType::ListListeners(_)
        | RequestType::ListClusters(_)
        | RequestType::ListFrontends(_)
        | RequestType::ListSources(_)
        | RequestType::ListBackends(_)
        | RequestType::SaveState(_)) => Request::Local(proto::Request {
            request_type: Some(local),
        }),
    }
}

impl CommandServer {
    /// Hands one request of `who` to the coordinator: `who` waits for its
    /// answer.
    pub(super) fn handle(&mut self, who: ClientRef, request: proto::Request) {
        // Taken by value: a batch part may hold half a MiB of requests.
        self.set_busy(who);
        let client = ClientId(who.serial());
        let request = typed(request);
        self.feed(Input::Request { client, request });
    }

    /// The answer of a request the shell serves itself, at its turn.
    pub(super) fn serve(&mut self, request: proto::Request) -> proto::Response {
        let state = self.coordinator.state();
        match request.request_type {
            Some(RequestType::ListListeners(_)) => ok_with(responses::listeners(state)),
            Some(RequestType::ListClusters(page)) => {
                ok_with(ContentType::Clusters(listing::cluster_page(state, &page)))
            }
            Some(RequestType::ListFrontends(page)) => match listing::frontend_page(state, &page) {
                Ok(page) => ok_with(ContentType::Frontends(page)),
                Err(error) => failure(
                    error.code.into(),
                    format!(
                        "the page's starting point is not a frontend key: {}",
                        error.message
                    ),
                ),
            },
            Some(RequestType::ListSources(_)) => ok_with(
                self.coordinator
                    .sources_list(Instant::now(), SystemTime::now()),
            ),
            Some(RequestType::ListBackends(page)) => {
                ok_with(responses::backends(state, &self.shared.registry, &page))
            }
            Some(RequestType::SaveState(save)) => self.save_to(&save.path),
            _ => failure(
                ErrorCode::UnsupportedRequest.into(),
                "the request is empty: it names no command",
            ),
        }
    }

    /// The answer to a query every worker answered.
    pub(super) fn query_response(
        &self,
        query: &Query,
        answers: &[(u32, Answer)],
    ) -> proto::Response {
        let generation = self.coordinator.generation();
        let content = match query {
            Query::Status => responses::status(
                self.started.elapsed(),
                self.workers.len(),
                self.coordinator.state(),
                generation,
                answers,
            ),
            Query::Metrics { series_only } => {
                let mut process = self.shared.counters.series(&self.shared.registry);
                if let Some(gauges) = self.etcd_gauges() {
                    process.extend(responses::etcd_series(gauges));
                }
                let report = responses::metrics(answers, process, generation);
                if *series_only {
                    responses::series_only(report)
                } else {
                    report
                }
            }
            Query::Rejects(_) => responses::rejects(answers),
        };
        ok_with(content)
    }

    /// Saves the committed state to `path` (the configured `saved_state`
    /// when empty).
    fn save_to(&mut self, path: &str) -> proto::Response {
        let path = if path.is_empty() {
            match &self.settings.saved_state {
                Some(path) => path.clone(),
                None => {
                    return failure(
                        ErrorCode::StateFileIo.into(),
                        "no path given and no saved_state configured",
                    );
                }
            }
        } else {
            PathBuf::from(path)
        };
        let state = self.coordinator.state();
        if self.saved.is_saved_state(&path) {
            // The journal beside it must start over from this snapshot.
            return match self.saved.save_whole(state) {
                Ok(count) => ok(format!(
                    "state saved to {} ({count} request(s))",
                    path.display()
                )),
                Err(error) => failure(error.code().into(), error.to_string()),
            };
        }
        let requests = state.generate_requests();
        match save_state(&path, &requests) {
            Ok(()) => ok(format!(
                "state saved to {} ({} request(s))",
                path.display(),
                requests.len()
            )),
            Err(error) => failure(error.code().into(), error.to_string()),
        }
    }
}
