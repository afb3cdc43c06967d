//! The route sources on the command thread: what each source last
//! reported, the config file's declarations every merge starts from, and
//! the merge, queued as a state-changing job when a source changes.
//!
//! Owns: [`RouteSources`]: the sources' reports (a failed read keeps the
//! last good fragments: logged once per episode, counted every time), the
//! first merge's wait for every source's first report (so a booting proxy
//! does not drop a source's routes before it was read), the coalescing of
//! reports into one queued merge, the fragments that hold routes (tried
//! first by the next merge), and the answer of `preread sources`. Must
//! never: apply anything itself (a merge is a job of `changes`, one
//! generation, like a reload), or record a merge's outcome before the
//! workers applied it: an excluded fragment, or one whose generation the
//! workers refused, is tried again on the next change of any source.

use std::collections::BTreeSet;
use std::io;
use std::path::Path;
use std::sync::mpsc::{self, Receiver};
use std::time::{SystemTime, UNIX_EPOCH};

use command::config::SourceSettings;
use command::proto::{self, response_content::ContentType};
use command::sources::{
    AppliedFragment, Exclusion, Fragment, FragmentId, Merged, SourceKind, merge,
};
use command::state::ConfigState;

use super::CommandServer;
use super::changes::Job;
use crate::sources::{SourceEvent, SourceThreads};

/// The most exclusions `preread sources` lists per source: with messages
/// of a few hundred bytes, the answer stays far below the frame limit.
const LISTED_EXCLUSIONS: usize = 200;

/// The config file, as the first entry of `preread sources`.
#[derive(Debug)]
struct FileEntry {
    path: String,
    synced: SystemTime,
    routes: usize,
}

/// One configured source.
#[derive(Debug)]
struct Slot {
    kind: SourceKind,
    location: String,
    /// It reported once (a whole read or a failure): the first merge waits
    /// for every source's first report.
    reported: bool,
    /// Its last whole read.
    fragments: Vec<Fragment>,
    synced: Option<SystemTime>,
    /// Why its last read failed, while it fails.
    error: Option<String>,
    errors: u64,
    /// The last committed merge's view of it.
    applied: Vec<AppliedFragment>,
    excluded: Vec<Exclusion>,
}

/// What a job's merge changes once the workers applied it.
#[derive(Debug)]
struct PendingMerge {
    /// A reload: how many frontends the file declares, and, when sources
    /// merge with it, its declarations (the next merges start from them).
    file: Option<(usize, Option<ConfigState>)>,
    /// The merge's applied and excluded fragments.
    outcome: Option<(Vec<AppliedFragment>, Vec<Exclusion>)>,
}

/// The route sources of the command server. See the module documentation.
#[derive(Debug)]
pub(super) struct RouteSources {
    file: FileEntry,
    /// The config file's declarations: kept only when a source is
    /// configured (at 100,000 routes, a copy of the state).
    base: Option<ConfigState>,
    slots: Vec<Slot>,
    events: Option<Receiver<SourceEvent>>,
    threads: Option<SourceThreads>,
    /// The fragments the running state holds.
    incumbents: BTreeSet<FragmentId>,
    /// A report changed something the running state does not show yet.
    dirty: bool,
    /// A merge job waits in the queue: later reports join it.
    queued: bool,
    pending: Option<PendingMerge>,
}

fn unix_ms(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn count(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

fn listed(excluded: &[Exclusion]) -> Vec<proto::ExcludedFragment> {
    excluded
        .iter()
        .take(LISTED_EXCLUSIONS)
        .map(|e| proto::ExcludedFragment {
            name: e.id.name.clone(),
            error_code: e.code.as_str().to_owned(),
            message: e.message.clone(),
        })
        .collect()
}

impl RouteSources {
    /// No source yet, for the config file at `path`.
    pub(super) fn new(path: Option<&Path>) -> Self {
        Self {
            file: FileEntry {
                path: path.map(|p| p.display().to_string()).unwrap_or_default(),
                synced: SystemTime::now(),
                routes: 0,
            },
            base: None,
            slots: Vec::new(),
            events: None,
            threads: None,
            incumbents: BTreeSet::new(),
            dirty: false,
            queued: false,
            pending: None,
        }
    }

    fn slot(&mut self, kind: SourceKind) -> Option<&mut Slot> {
        self.slots.iter_mut().find(|slot| slot.kind == kind)
    }

    /// Takes in one report; marks a merge due when it is a source's first
    /// or its fragments changed.
    fn record(&mut self, event: SourceEvent) {
        let (kind, first, changed) = match event {
            SourceEvent::Synced {
                kind,
                fragments,
                at,
            } => {
                let Some(slot) = self.slot(kind) else { return };
                slot.synced = Some(at);
                if let Some(was) = slot.error.take() {
                    log::info!(
                        "{kind} source {}: read again after {} failed attempt(s) (the last: {was})",
                        slot.location,
                        slot.errors
                    );
                }
                let changed = slot.fragments != fragments;
                slot.fragments = fragments;
                (kind, !std::mem::replace(&mut slot.reported, true), changed)
            }
            SourceEvent::Failed { kind, error } => {
                let Some(slot) = self.slot(kind) else { return };
                slot.errors += 1;
                if slot.error.is_none() {
                    log::warn!(
                        "{error}; its last good fragments stay applied (retrying; `preread \
                         sources` counts the attempts)"
                    );
                } else {
                    log::debug!("{error}");
                }
                slot.error = Some(error);
                (kind, !std::mem::replace(&mut slot.reported, true), false)
            }
        };
        if first || changed {
            log::debug!("{kind} source: a merge is due");
            self.dirty = true;
        }
    }

    fn all_reported(&self) -> bool {
        self.slots.iter().all(|slot| slot.reported)
    }

    /// The merge of `file` with every source's fragments.
    fn merged(&self, file: &ConfigState) -> Merged {
        let fragments = self.slots.iter().flat_map(|slot| &slot.fragments);
        merge(file, fragments, &self.incumbents)
    }

    /// The desired state of a merge job, the outcome kept for
    /// [`commit`](Self::commit); `None` without a source.
    pub(super) fn merge_job(&mut self) -> Option<ConfigState> {
        self.queued = false;
        let merged = self.merged(self.base.as_ref()?);
        self.pending = Some(PendingMerge {
            file: None,
            outcome: Some((merged.applied, merged.excluded)),
        });
        Some(merged.state)
    }

    /// Whether a source is configured: a reload's desired state is then
    /// the merge of the file's declarations with the fragments.
    pub(super) fn merges(&self) -> bool {
        !self.slots.is_empty()
    }

    /// The config file's declarations every merge starts from, when a
    /// source is configured.
    pub(super) fn base(&self) -> Option<&ConfigState> {
        self.base.as_ref()
    }

    /// A reload without a source, of a file that declares `routes`
    /// frontends: `preread sources` counts them once it is applied.
    pub(super) fn with_file_routes(&mut self, routes: usize) {
        self.pending = Some(PendingMerge {
            file: Some((routes, None)),
            outcome: None,
        });
    }

    /// The desired state of a reload whose config file declares `file`:
    /// `file` itself without a source, else its merge with the fragments.
    pub(super) fn with_file(&mut self, file: ConfigState) -> ConfigState {
        if !self.merges() {
            self.with_file_routes(file.frontends().len());
            return file;
        }
        let routes = file.frontends().len();
        let merged = self.merged(&file);
        self.pending = Some(PendingMerge {
            file: Some((routes, Some(file))),
            outcome: Some((merged.applied, merged.excluded)),
        });
        merged.state
    }

    /// The workers applied the job's generation: its merge is the running
    /// state's now.
    pub(super) fn commit(&mut self) {
        let Some(pending) = self.pending.take() else {
            return;
        };
        if let Some((routes, file)) = pending.file {
            self.file.routes = routes;
            self.file.synced = SystemTime::now();
            if file.is_some() {
                self.base = file;
            }
        }
        let Some((applied, excluded)) = pending.outcome else {
            return;
        };
        for exclusion in &excluded {
            let known = self
                .slots
                .iter()
                .any(|slot| slot.excluded.contains(exclusion));
            if !known {
                log::warn!(
                    "route source fragment {} excluded: {}: {} (retried on the next change of \
                     any source)",
                    exclusion.id,
                    exclusion.code,
                    exclusion.message
                );
            }
        }
        for fragment in &applied {
            let was_excluded = self
                .slots
                .iter()
                .any(|slot| slot.excluded.iter().any(|e| e.id == fragment.id));
            if was_excluded {
                log::info!("route source fragment {} applies now", fragment.id);
            }
        }
        self.incumbents = applied.iter().map(|f| f.id.clone()).collect();
        for slot in &mut self.slots {
            slot.applied = applied
                .iter()
                .filter(|f| f.id.kind == slot.kind)
                .cloned()
                .collect();
            slot.excluded = excluded
                .iter()
                .filter(|e| e.id.kind == slot.kind)
                .cloned()
                .collect();
        }
    }

    /// The workers refused the job's generation: nothing of its merge is
    /// recorded, so the next change tries it all again.
    pub(super) fn abandon(&mut self) {
        if self.pending.take().is_some_and(|p| p.outcome.is_some()) {
            self.dirty = true;
        }
    }

    /// The answer of `preread sources`.
    pub(super) fn list(&self) -> ContentType {
        let mut sources = vec![proto::SourceEntry {
            kind: "file".to_owned(),
            location: self.file.path.clone(),
            last_sync_unix_ms: unix_ms(self.file.synced),
            routes: count(self.file.routes),
            fragments: 1,
            excluded: Vec::new(),
            error: String::new(),
            errors: 0,
            excluded_total: 0,
        }];
        sources.extend(self.slots.iter().map(|slot| proto::SourceEntry {
            kind: slot.kind.as_str().to_owned(),
            location: slot.location.clone(),
            last_sync_unix_ms: slot.synced.map_or(0, unix_ms),
            routes: count(slot.applied.iter().map(|f| f.routes).sum()),
            fragments: count(slot.applied.len()),
            excluded: listed(&slot.excluded),
            error: slot.error.clone().unwrap_or_default(),
            errors: slot.errors,
            excluded_total: count(slot.excluded.len()),
        }));
        ContentType::Sources(proto::SourceList { sources })
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
        self.sources.file.routes = routes;
        self.sources.file.synced = SystemTime::now();
        let Some(file) = file.filter(|_| settings.any()) else {
            return Ok(());
        };
        let mut slots = Vec::new();
        if let Some(socket) = &settings.docker {
            slots.push((SourceKind::Docker, format!("unix://{}", socket.display())));
        }
        if let Some(path) = &settings.directory {
            slots.push((SourceKind::Directory, path.display().to_string()));
        }
        let (tx, rx) = mpsc::channel();
        let threads = SourceThreads::spawn(settings, tx, self.waker())?;
        let sources = &mut self.sources;
        sources.slots = slots
            .into_iter()
            .map(|(kind, location)| Slot {
                kind,
                location,
                reported: false,
                fragments: Vec::new(),
                synced: None,
                error: None,
                errors: 0,
                applied: Vec::new(),
                excluded: Vec::new(),
            })
            .collect();
        sources.base = Some(file);
        sources.events = Some(rx);
        sources.threads = Some(threads);
        Ok(())
    }

    /// Takes the sources' reports in, and queues a merge when one changed
    /// something and every source has reported once.
    pub(super) fn take_source_events(&mut self) {
        let Some(events) = &self.sources.events else {
            return;
        };
        let received: Vec<SourceEvent> = events.try_iter().collect();
        for event in received {
            self.sources.record(event);
        }
        let sources = &self.sources;
        if sources.dirty && sources.all_reported() && !sources.queued && self.stopping.is_none() {
            self.sources.dirty = false;
            self.sources.queued = true;
            self.enqueue(None, Job::Sources);
        }
    }

    /// Ends the source threads (the proxy stops).
    pub(super) fn stop_sources(&mut self) {
        if let Some(mut threads) = self.sources.threads.take() {
            threads.stop();
        }
    }
}
