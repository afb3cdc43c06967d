//! From a client's request to an answer: read-only requests are answered
//! from the state or from the workers' reports; state changes, loads and
//! stops go through their own paths.
//!
//! Owns: which request goes where. Must never: change the state (only the
//! state-change path in `changes` does).

use std::path::PathBuf;

use command::codes::ErrorCode;
use command::listing;
use command::proto::{self, request::RequestType, response_content::ContentType};
use command::state_file::save_state;

use super::changes::Job;
use super::clients::ClientRef;
use super::pending::Gathered;
use super::responses::{self, failure, ok, ok_with};
use super::{CommandServer, Purpose, StopKind};
use preread_worker::worker::orders::Order;

/// A read-only question for the workers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Query {
    Status,
    Metrics {
        series_only: bool,
    },
    /// The captured windows that match.
    Rejects(proto::QueryRejects),
}

impl CommandServer {
    /// Serves one request of `who`: answers it now, or marks `who` busy
    /// until its answer is ready.
    pub(super) fn handle(&mut self, who: ClientRef, request: proto::Request) {
        // Taken by value: a batch part may hold half a MiB of requests.
        let Some(kind) = request.request_type else {
            let answer = failure(
                ErrorCode::UnsupportedRequest.into(),
                "the request is empty: it names no command",
            );
            self.respond(who, &answer);
            return;
        };
        match kind {
            RequestType::Status(_) => self.query(who, Query::Status),
            RequestType::QueryMetrics(q) => self.query(
                who,
                Query::Metrics {
                    series_only: q.series_only,
                },
            ),
            RequestType::QueryRejects(filter) => self.query(who, Query::Rejects(filter)),
            RequestType::ListListeners(_) => {
                let answer = ok_with(responses::listeners(&self.state));
                self.respond(who, &answer);
            }
            RequestType::ListClusters(page) => {
                let page = listing::cluster_page(&self.state, &page);
                self.respond(who, &ok_with(ContentType::Clusters(page)));
            }
            RequestType::ListFrontends(page) => {
                let answer = match listing::frontend_page(&self.state, &page) {
                    Ok(page) => ok_with(ContentType::Frontends(page)),
                    Err(error) => failure(
                        error.code.into(),
                        format!(
                            "the page's starting point is not a frontend key: {}",
                            error.message
                        ),
                    ),
                };
                self.respond(who, &answer);
            }
            RequestType::ListSources(_) => {
                let answer = ok_with(self.sources.list());
                self.respond(who, &answer);
            }
            RequestType::ListBackends(page) => {
                let list = responses::backends(&self.state, &self.shared.registry, &page);
                self.respond(who, &ok_with(list));
            }
            RequestType::SaveState(save) => {
                let answer = self.save_to(&save.path);
                self.respond(who, &answer);
            }
            RequestType::LoadState(load) => self.enqueue(Some(who), Job::Load(load.path)),
            RequestType::SoftStop(_) => {
                let answer = ok(self.start_stop(StopKind::Soft));
                self.respond(who, &answer);
            }
            RequestType::HardStop(_) => {
                let answer = ok(self.start_stop(StopKind::Hard));
                self.respond(who, &answer);
            }
            change @ command::change_request!() => {
                let request = proto::Request {
                    request_type: Some(change),
                };
                self.enqueue(Some(who), Job::Change(request));
            }
            RequestType::ApplyChanges(batch) => self.batch_part(who, batch),
            RequestType::Upgrade(upgrade) => self.upgrade(who, upgrade),
            RequestType::ReloadFile(seen) => {
                let job = Job::Reload {
                    path: PathBuf::from(&seen.path),
                    seen: Some(seen),
                };
                self.enqueue(Some(who), job);
            }
        }
    }

    /// Asks every worker; `who` waits for the gathered answer.
    fn query(&mut self, who: ClientRef, query: Query) {
        self.set_busy(who);
        let order = match &query {
            Query::Status => Order::Status,
            Query::Metrics { .. } => Order::Metrics,
            Query::Rejects(filter) => Order::Rejects(filter.clone()),
        };
        let timeout = self.settings.order_timeout;
        self.broadcast(order, Purpose::Query { client: who, query }, None, timeout);
    }

    /// The answer to a query once every worker answered (or timed out).
    pub(super) fn query_response(
        &self,
        query: &Query,
        gathered: &Gathered<Purpose>,
    ) -> proto::Response {
        if let Some((_, code, message)) = gathered.first_failure() {
            return failure(code, message);
        }
        let content = match query {
            Query::Status => responses::status(
                self.started.elapsed(),
                self.workers.len(),
                &self.state,
                self.generation,
                &gathered.answers,
            ),
            Query::Metrics { series_only } => {
                let process = self.shared.counters.series(&self.shared.registry);
                let report = responses::metrics(&gathered.answers, process, self.generation);
                if *series_only {
                    responses::series_only(report)
                } else {
                    report
                }
            }
            Query::Rejects(_) => responses::rejects(&gathered.answers),
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
        if self.saved.is_saved_state(&path) {
            // The journal beside it must start over from this snapshot.
            return match self.saved.save_whole(&self.state) {
                Ok(count) => ok(format!(
                    "state saved to {} ({count} request(s))",
                    path.display()
                )),
                Err(error) => failure(error.code().into(), error.to_string()),
            };
        }
        let requests = self.state.generate_requests();
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
