//! What the coordinator decided, done: each [`Effect`] performed with the
//! socket, the channel, the file or the call it names.
//!
//! Owns: the translation of effects into I/O, and of its results into
//! the inputs that answer them (queued in the server's inbox, fed once
//! the batch is done). Must never: decide anything the coordinator
//! decides, or feed the coordinator from here (that would perform a
//! later batch in the middle of this one).

use std::time::Instant;

use command::state_file::load_state_requests;
use coordinator::{Effect, Input, Notice};

use super::reload_file;
use super::{CommandServer, clients::ClientRef};
use preread_worker::worker::orders::Order;

impl CommandServer {
    /// Performs `effects` in their order.
    pub(super) fn perform(&mut self, effects: Vec<Effect>) {
        for effect in effects {
            self.perform_one(effect);
        }
        if std::mem::take(&mut self.trim_due) {
            crate::heap::trim();
        }
    }

    fn perform_one(&mut self, effect: Effect) {
        match effect {
            Effect::Send {
                worker,
                order,
                what,
            } => self.send(worker, order, what),
            Effect::Answer { client, response } => {
                if let Some(who) = self.client_ref(client) {
                    self.respond(who, &response);
                }
            }
            Effect::Report {
                client,
                query,
                answers,
            } => {
                let response = self.query_response(&query, &answers);
                if let Some(who) = self.client_ref(client) {
                    self.respond(who, &response);
                }
            }
            Effect::Serve { client, request } => {
                let response = self.serve(request);
                if let Some(who) = self.client_ref(client) {
                    self.respond(who, &response);
                }
            }
            Effect::ReadConfig { job, path, seen } => {
                let read = reload_file::read(&path, seen.as_ref());
                self.inbox.push_back(Input::ConfigRead { job, read });
            }
            Effect::ReadStateFile { job, path } => {
                let read = load_state_requests(&path).map(|(state, _)| state);
                self.inbox.push_back(Input::StateFileRead { job, read });
            }
            Effect::AppendJournal { job, changes } => {
                let steps: Vec<_> = changes.iter().map(|change| change.to_request()).collect();
                let saved = self.saved.record(&steps, self.coordinator.state());
                self.inbox.push_back(Input::Journaled { job, saved });
            }
            Effect::Settled { generation, .. } => {
                // Committed or not, the registry follows the state: what a
                // refused generation created goes, what a committed one
                // removed goes.
                self.shared.registry.sync_changed(
                    self.coordinator.state(),
                    &generation.changes,
                    Instant::now(),
                );
                if self.untrimmed.settled(generation.len()) {
                    self.trim_due = true;
                }
            }
            Effect::StartUpgrade {
                job,
                request,
                exported,
            } => {
                let outcome = self.hand_over(&request, &exported);
                if let Ok(pid) = &outcome {
                    crate::notify::main_pid(*pid);
                    self.saved.retire();
                }
                let outcome = outcome.map_err(|why| Box::new(why) as coordinator::UpgradeFailure);
                self.inbox
                    .push_back(Input::UpgradeFinished { job, outcome });
            }
            Effect::Booted { refused } => self.booted = Some(refused.map_or(Ok(()), Err)),
            Effect::Stopped { answered, .. } => self.stopped = Some(answered),
            Effect::Notify(notice) => match notice {
                Notice::Reloading => crate::notify::reloading(),
                Notice::Ready(summary) => crate::notify::ready(&summary),
                Notice::Stopping(why) => crate::notify::stopping(&why),
            },
            Effect::SourceApplied {
                revision,
                generation,
                excluded,
                ..
            } => self.source_served(crate::sources::Served {
                revision,
                generation,
                excluded: excluded
                    .into_iter()
                    .map(|e| command::sources::etcd::ExcludedKey {
                        key: e.id.name,
                        code: e.code.as_str().to_owned(),
                        message: e.message,
                    })
                    .collect(),
            }),
            Effect::Log { level, message } => log::log!(level, "{message}"),
            Effect::LogElapsed {
                level,
                since,
                before,
                after,
            } => {
                let ms = since.elapsed().as_millis();
                log::log!(level, "{before}{ms} ms{after}");
            }
        }
    }

    /// Sends one order; a worker whose thread is gone is reported to the
    /// coordinator, which counts it as refused.
    fn send(&mut self, worker: u32, order: u64, what: Order) {
        let sent = self
            .workers
            .iter()
            .find(|w| w.id == worker)
            .is_some_and(|w| w.send(order, what).is_ok());
        if !sent {
            self.workers.retain(|w| w.id != worker);
            self.inbox.push_back(Input::WorkerGone { worker });
        }
    }

    /// The client the coordinator knows as `client`, if still connected.
    fn client_ref(&self, client: coordinator::ClientId) -> Option<ClientRef> {
        let key = *self.keys.get(&client.0)?;
        Some(ClientRef::new(key, client.0))
    }
}
