//! The route sources' threads, on the command thread's side: started with
//! the config's `[sources]`, their reports handed to the coordinator.
//!
//! Owns: [`SourceFeed`]: the threads ([`crate::sources`]) and the channel
//! of their reports. Must never: merge or apply anything (the coordinator
//! keeps what each source reported, and queues the merge).

use std::io;
use std::sync::mpsc::{self, Receiver};
use std::time::Instant;

use command::config::SourceSettings;
use command::sources::SourceKind;
use command::state::ConfigState;
use coordinator::{Input, SourceReport};

use super::CommandServer;
use crate::sources::{SourceEvent, SourceThreads};

/// The route sources' threads and their reports.
#[derive(Debug, Default)]
pub(super) struct SourceFeed {
    events: Option<Receiver<SourceEvent>>,
    threads: Option<SourceThreads>,
}

fn report(event: SourceEvent) -> SourceReport {
    match event {
        SourceEvent::Synced {
            kind,
            fragments,
            at,
        } => SourceReport::Synced {
            kind,
            fragments,
            at,
        },
        SourceEvent::Failed { kind, error } => SourceReport::Failed { kind, error },
        SourceEvent::Changed {
            kind,
            revision,
            put,
            deleted,
            at,
        } => SourceReport::Changed {
            kind,
            revision,
            put,
            deleted,
            at,
        },
    }
}

impl CommandServer {
    /// Starts the route sources of `settings`, merged with `file`, the
    /// config file's declarations (`None` without a source: no copy is
    /// kept). The file declares `routes` frontends.
    pub fn start_sources(
        &mut self,
        routes: usize,
        file: Option<ConfigState>,
        settings: &SourceSettings,
    ) -> io::Result<()> {
        let now = Instant::now();
        let Some(file) = file.filter(|_| settings.any()) else {
            self.coordinator
                .start_sources(routes, None, Vec::new(), now);
            return Ok(());
        };
        let mut slots = Vec::new();
        if let Some(socket) = &settings.docker {
            slots.push((SourceKind::Docker, format!("unix://{}", socket.display())));
        }
        if let Some(path) = &settings.directory {
            slots.push((SourceKind::Directory, path.display().to_string()));
        }
        if let Some(etcd) = &settings.etcd {
            let location = format!("{} {}", etcd.endpoints.join(","), etcd.prefix);
            slots.push((SourceKind::Etcd, location));
        }
        let (tx, rx) = mpsc::channel();
        let threads = SourceThreads::spawn(settings, tx, self.waker())?;
        self.coordinator
            .start_sources(routes, Some(file), slots, now);
        self.sources.events = Some(rx);
        self.sources.threads = Some(threads);
        Ok(())
    }

    /// Hands the sources' reports to the coordinator (fed from the inbox).
    pub(super) fn take_source_events(&mut self) {
        let Some(events) = &self.sources.events else {
            return;
        };
        let received: Vec<SourceEvent> = events.try_iter().collect();
        self.inbox.extend(
            received
                .into_iter()
                .map(|event| Input::SourceReport(report(event))),
        );
    }

    /// Tells the etcd source what the proxy serves of it.
    pub(super) fn source_served(&self, served: crate::sources::Served) {
        if let Some(threads) = &self.sources.threads {
            threads.served(served);
        }
    }

    /// The etcd source's gauges, when it runs.
    pub(super) fn etcd_gauges(&self) -> Option<&std::sync::Arc<crate::sources::EtcdGauges>> {
        self.sources.threads.as_ref()?.etcd_gauges()
    }

    /// Ends the source threads (the proxy stops).
    pub(super) fn stop_sources(&mut self) {
        if let Some(mut threads) = self.sources.threads.take() {
            threads.stop();
        }
    }
}
