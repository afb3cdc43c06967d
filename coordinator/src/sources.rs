//! The route sources, as the coordinator knows them: what each source
//! last reported, the config file's declarations every merge starts from,
//! and the merge, queued as a state-changing job when a source changes.
//! (Their threads are the shell's: they report with
//! [`Input::SourceReport`](crate::Input::SourceReport).)
//!
//! Owns: [`RouteSources`]: the sources' reports (a failed read keeps the
//! last good fragments: logged once per episode, counted every time), the
//! first merge's wait for every source's first report (so a booting proxy
//! does not drop a source's routes before it was read), the coalescing of
//! reports into one queued merge, the fragments that hold routes (tried
//! first by the next merge), the incremental merge of a source that says
//! what changed (etcd: only the changed fragments and the excluded ones
//! are tried, against the running state, so a change costs what changed,
//! not what the sources hold), the revision each such source is served at
//! ([`Effect::SourceApplied`] once committed), and the answer of `preread
//! sources`. Must never: apply anything itself (a merge is a job of
//! `jobs`, one generation, like a reload), or record a merge's outcome
//! before the workers applied it: an excluded fragment, or one whose
//! generation the workers refused, is tried again on the next change of
//! any source (and a refused merge also one order timeout after the
//! refusal). A source that counts revisions and never synced holds back
//! every merge: a proxy booted while its store is unreachable serves its
//! saved state, not an empty one.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use command::proto::{self, response_content::ContentType};
use command::sources::{
    AppliedFragment, Candidate, Exclusion, Fragment, FragmentId, Merged, SourceKind, merge,
    merge_changes,
};
use command::state::ConfigState;

use crate::effect::{Effect, log};
use crate::input::SourceReport;
use log::Level;
use slot::Slot;
use touched::Touched;

mod slot;
mod touched;

/// The most exclusions `preread sources` lists per source: with messages
/// of a few hundred bytes, the answer stays far below the frame limit.
const LISTED_EXCLUSIONS: usize = 200;

/// The config file, as the first entry of `preread sources`.
#[derive(Debug)]
struct FileEntry {
    path: String,
    synced: Instant,
    routes: usize,
}

/// What a merge decided: all the applied and excluded fragments (a full
/// merge), or the touched ones' fate (an incremental one).
#[derive(Debug)]
enum Decided {
    Full(Vec<AppliedFragment>, Vec<Exclusion>),
    Changes {
        touched: BTreeSet<FragmentId>,
        applied: Vec<AppliedFragment>,
        excluded: Vec<Exclusion>,
    },
}

/// What a job's merge changes once the workers applied it.
#[derive(Debug)]
struct PendingMerge {
    /// A reload: how many frontends the file declares, and, when sources
    /// merge with it, its declarations (the next merges start from them).
    file: Option<(usize, Option<ConfigState>)>,
    /// The merge's applied and excluded fragments.
    outcome: Option<Decided>,
    /// The fragments changed before the merge began, given back when the
    /// workers refuse it.
    touched: Touched,
    /// The revision of each source that counts them, as merged.
    revisions: Vec<(SourceKind, i64)>,
}

/// A merge job's plan: the desired state (a full merge, diffed against
/// the running state), or the requests of an incremental one.
#[derive(Debug)]
pub(crate) enum MergePlan {
    Desired(ConfigState),
    Requests(Vec<proto::Request>),
}

/// The route sources. See the module documentation.
#[derive(Debug)]
pub(crate) struct RouteSources {
    file: FileEntry,
    /// The config file's declarations: kept only when a source is
    /// configured (at 100,000 routes, a copy of the state).
    base: Option<ConfigState>,
    slots: Vec<Slot>,
    /// A report changed something the running state does not show yet.
    dirty: bool,
    /// A merge job waits in the queue: later reports join it.
    queued: bool,
    pending: Option<PendingMerge>,
    /// The workers refused the last merge: when it is tried again.
    retry_at: Option<Instant>,
    /// The fragments changed since the running state's merge.
    touched: Touched,
    /// The next merge must be a full one: nothing merged yet, a source
    /// read whole, or a refused merge.
    full: bool,
}

fn unix_ms(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Whether a source of `kind` counts revisions (its store's): until its
/// first report of one, no merge runs.
fn counts_revisions(kind: SourceKind) -> bool {
    kind == SourceKind::Etcd
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
    /// No source yet, for the config file at `path` (empty without one),
    /// read at `now`.
    pub(crate) fn new(path: String, now: Instant) -> Self {
        Self {
            file: FileEntry {
                path,
                synced: now,
                routes: 0,
            },
            base: None,
            slots: Vec::new(),
            dirty: false,
            queued: false,
            pending: None,
            retry_at: None,
            touched: Touched::default(),
            full: true,
        }
    }

    fn slot(&mut self, kind: SourceKind) -> Option<&mut Slot> {
        self.slots.iter_mut().find(|slot| slot.kind == kind)
    }

    /// Starts from the config file's declarations `file` (which declares
    /// `routes` frontends), read at `now`, merged with the sources at
    /// `slots` (kind and location) once each reported.
    pub(crate) fn start(
        &mut self,
        routes: usize,
        file: Option<ConfigState>,
        slots: Vec<(SourceKind, String)>,
        now: Instant,
    ) {
        self.file.routes = routes;
        self.file.synced = now;
        let Some(file) = file.filter(|_| !slots.is_empty()) else {
            return;
        };
        self.slots = slots
            .into_iter()
            .map(|(kind, location)| Slot {
                kind,
                location,
                reported: false,
                fragments: BTreeMap::new(),
                synced: None,
                revision: None,
                applied_revision: None,
                error: None,
                errors: 0,
                applied: BTreeMap::new(),
                routes: 0,
                excluded: Vec::new(),
            })
            .collect();
        self.base = Some(file);
    }

    /// Takes in one report; marks a merge due when it is a source's first
    /// or its fragments changed.
    pub(crate) fn record(&mut self, report: SourceReport, out: &mut Vec<Effect>) {
        let (kind, first, changed) = match report {
            SourceReport::Synced {
                kind,
                fragments,
                at,
            } => {
                let Some(slot) = self.slot(kind) else { return };
                slot.synced = Some(at);
                if let Some(was) = slot.error.take() {
                    log(
                        out,
                        Level::Info,
                        format!(
                            "{kind} source {}: read again after {} failed attempt(s) (the \
                             last: {was})",
                            slot.location, slot.errors
                        ),
                    );
                }
                let fragments: BTreeMap<FragmentId, Fragment> =
                    fragments.into_iter().map(|f| (f.id.clone(), f)).collect();
                let changed = slot.fragments != fragments;
                slot.fragments = fragments;
                let first = !std::mem::replace(&mut slot.reported, true);
                if changed {
                    self.full = true;
                }
                (kind, first, changed)
            }
            SourceReport::Changed {
                kind,
                revision,
                put,
                deleted,
                at,
            } => {
                let Some(slot) = self.slots.iter_mut().find(|slot| slot.kind == kind) else {
                    return;
                };
                slot.synced = Some(at);
                slot.revision = Some(revision);
                if let Some(was) = slot.error.take() {
                    log(
                        out,
                        Level::Info,
                        format!(
                            "{kind} source {}: connected again after {} failed attempt(s) \
                             (the last: {was})",
                            slot.location, slot.errors
                        ),
                    );
                }
                for name in deleted {
                    let id = FragmentId::new(kind, name);
                    if let Some(before) = slot.fragments.remove(&id) {
                        self.touched.touch(&id, Some(before));
                    }
                }
                for fragment in put {
                    let id = fragment.id.clone();
                    let before = slot.fragments.insert(id.clone(), fragment);
                    self.touched.touch(&id, before);
                }
                // A revision with no change of a fragment is merged too:
                // the revision served moves on with it.
                (kind, !std::mem::replace(&mut slot.reported, true), true)
            }
            SourceReport::Failed { kind, error } => {
                let Some(slot) = self.slot(kind) else { return };
                slot.errors += 1;
                if slot.error.is_none() {
                    log(
                        out,
                        Level::Warn,
                        format!(
                            "{error}; its last good fragments stay applied (retrying; \
                             `preread sources` counts the attempts)"
                        ),
                    );
                } else {
                    log(out, Level::Debug, error.clone());
                }
                slot.error = Some(error);
                (kind, !std::mem::replace(&mut slot.reported, true), false)
            }
        };
        if first || changed {
            log(out, Level::Debug, format!("{kind} source: a merge is due"));
            self.dirty = true;
        }
    }

    /// Whether a merge job should be queued at `now`: a report changed
    /// something or a refused merge's retry is due, every source reported
    /// once, and none is queued yet. Marks it queued when so.
    pub(crate) fn merge_due(&mut self, now: Instant) -> bool {
        if self.retry_at.is_some_and(|at| at <= now) {
            self.retry_at = None;
            self.dirty = true;
        }
        let due = self.dirty
            && !self.queued
            && self.slots.iter().all(|slot| {
                slot.reported && (!counts_revisions(slot.kind) || slot.revision.is_some())
            });
        if due {
            self.dirty = false;
            self.queued = true;
        }
        due
    }

    /// Whether the running state holds fragment `id`.
    fn incumbent(&self, id: &FragmentId) -> bool {
        self.slots
            .iter()
            .any(|slot| slot.kind == id.kind && slot.applied.contains_key(id))
    }

    /// The merge of `file` with every source's fragments.
    fn merged(&self, file: &ConfigState) -> Merged {
        let fragments = self.slots.iter().flat_map(|slot| slot.fragments.values());
        let incumbents: BTreeSet<FragmentId> = self
            .slots
            .iter()
            .flat_map(|slot| slot.applied.keys().cloned())
            .collect();
        merge(file, fragments, &incumbents)
    }

    /// The revision of each source that counts them, as reported.
    fn revisions(&self) -> Vec<(SourceKind, i64)> {
        self.slots
            .iter()
            .filter_map(|slot| Some((slot.kind, slot.revision?)))
            .collect()
    }

    /// The plan of a merge job on the running state `running` (left as it
    /// was), the outcome kept for [`commit`](Self::commit); `None` without
    /// a source.
    pub(crate) fn merge_job(&mut self, running: &mut ConfigState) -> Option<MergePlan> {
        self.queued = false;
        let base = self.base.as_ref()?;
        let touched = std::mem::take(&mut self.touched);
        let revisions = self.revisions();
        if std::mem::replace(&mut self.full, false) {
            let merged = self.merged(base);
            self.pending = Some(PendingMerge {
                file: None,
                outcome: Some(Decided::Full(merged.applied, merged.excluded)),
                touched,
                revisions,
            });
            return Some(MergePlan::Desired(merged.state));
        }
        let leaving = touched
            .before
            .iter()
            .filter(|(id, _)| self.incumbent(id))
            .map(|(_, fragment)| fragment);
        let excluded: BTreeSet<&FragmentId> = self
            .slots
            .iter()
            .flat_map(|slot| slot.excluded.iter().map(|e| &e.id))
            .collect();
        let candidates = self
            .slots
            .iter()
            .flat_map(|slot| {
                slot.fragments
                    .iter()
                    .filter(|(id, _)| touched.ids.contains(*id) || excluded.contains(id))
            })
            .map(|(id, fragment)| Candidate {
                fragment,
                incumbent: self.incumbent(id),
            });
        let changes = merge_changes(running, leaving, candidates);
        self.pending = Some(PendingMerge {
            file: None,
            outcome: Some(Decided::Changes {
                touched: touched.ids.clone(),
                applied: changes.applied,
                excluded: changes.excluded,
            }),
            touched,
            revisions,
        });
        Some(MergePlan::Requests(changes.requests))
    }

    /// Whether a source is configured: a reload's desired state is then
    /// the merge of the file's declarations with the fragments.
    pub(crate) fn merges(&self) -> bool {
        !self.slots.is_empty()
    }

    /// The config file's declarations every merge starts from, when a
    /// source is configured.
    pub(crate) fn base(&self) -> Option<&ConfigState> {
        self.base.as_ref()
    }

    /// A reload without a source, of a file that declares `routes`
    /// frontends: `preread sources` counts them once it is applied.
    pub(crate) fn with_file_routes(&mut self, routes: usize) {
        self.pending = Some(PendingMerge {
            file: Some((routes, None)),
            outcome: None,
            touched: Touched::default(),
            revisions: Vec::new(),
        });
    }

    /// The desired state of a reload whose config file declares `file`:
    /// `file` itself without a source, else its merge with the fragments.
    pub(crate) fn with_file(&mut self, file: ConfigState) -> ConfigState {
        if !self.merges() {
            self.with_file_routes(file.frontends().len());
            return file;
        }
        let routes = file.frontends().len();
        let merged = self.merged(&file);
        self.pending = Some(PendingMerge {
            file: Some((routes, Some(file))),
            outcome: Some(Decided::Full(merged.applied, merged.excluded)),
            touched: std::mem::take(&mut self.touched),
            revisions: self.revisions(),
        });
        merged.state
    }

    /// The workers applied the job's generation at `now`, as routing
    /// generation `generation`: its merge is the running state's now.
    pub(crate) fn commit(&mut self, now: Instant, generation: u64, out: &mut Vec<Effect>) {
        let Some(pending) = self.pending.take() else {
            return;
        };
        let revisions = pending.revisions;
        if let Some((routes, file)) = pending.file {
            self.file.routes = routes;
            self.file.synced = now;
            if file.is_some() {
                self.base = file;
            }
        }
        let Some(decided) = pending.outcome else {
            return;
        };
        let (applied, excluded, touched) = match decided {
            Decided::Full(applied, excluded) => (applied, excluded, None),
            Decided::Changes {
                touched,
                applied,
                excluded,
            } => (applied, excluded, Some(touched)),
        };
        for exclusion in &excluded {
            let known = self
                .slots
                .iter()
                .any(|slot| slot.excluded.contains(exclusion));
            if !known {
                log(
                    out,
                    Level::Warn,
                    format!(
                        "route source fragment {} excluded: {}: {} (retried on the next change \
                         of any source)",
                        exclusion.id, exclusion.code, exclusion.message
                    ),
                );
            }
        }
        for fragment in &applied {
            let was_excluded = self
                .slots
                .iter()
                .any(|slot| slot.excluded.iter().any(|e| e.id == fragment.id));
            if was_excluded {
                log(
                    out,
                    Level::Info,
                    format!("route source fragment {} applies now", fragment.id),
                );
            }
        }
        // A full merge decided every fragment; an incremental one the
        // touched ones (and the excluded ones it tried again): the others
        // stay as they were.
        for slot in &mut self.slots {
            match &touched {
                None => {
                    slot.applied.clear();
                    slot.routes = 0;
                }
                Some(touched) => {
                    let kind = slot.kind;
                    for id in touched.iter().filter(|id| id.kind == kind) {
                        slot.unapply(id);
                    }
                }
            }
        }
        for fragment in applied {
            if let Some(slot) = self.slot(fragment.id.kind) {
                slot.apply(fragment);
            }
        }
        for slot in &mut self.slots {
            slot.excluded = excluded
                .iter()
                .filter(|e| e.id.kind == slot.kind)
                .cloned()
                .collect();
            if let Some(&(_, revision)) = revisions.iter().find(|(kind, _)| *kind == slot.kind) {
                slot.applied_revision = Some(revision);
                out.push(Effect::SourceApplied {
                    kind: slot.kind,
                    revision,
                    generation,
                    excluded: slot.excluded.clone(),
                });
            }
        }
    }

    /// The workers refused the job's generation at `now`: nothing of its
    /// merge is recorded, and it is tried again `after` that (the order
    /// timeout: a refusal that lasts costs one attempt per timeout, not a
    /// loop), or at the next change of a source.
    pub(crate) fn abandon(&mut self, now: Instant, after: Duration) {
        if let Some(pending) = self.pending.take() {
            self.touched.restore(pending.touched);
            if pending.outcome.is_some() {
                self.retry_at = Some(now + after);
                self.full = true;
            }
        }
    }

    /// When a refused merge is tried again.
    pub(crate) fn retry_at(&self) -> Option<Instant> {
        self.retry_at
    }

    /// The answer of `preread sources`, at `now`, which the wall clock
    /// reads `wall`.
    pub(crate) fn list(&self, now: Instant, wall: SystemTime) -> ContentType {
        let file_synced = wall
            .checked_sub(now.saturating_duration_since(self.file.synced))
            .unwrap_or(UNIX_EPOCH);
        let mut sources = vec![proto::SourceEntry {
            kind: "file".to_owned(),
            location: self.file.path.clone(),
            last_sync_unix_ms: unix_ms(file_synced),
            routes: count(self.file.routes),
            fragments: 1,
            excluded: Vec::new(),
            error: String::new(),
            errors: 0,
            excluded_total: 0,
            revision: 0,
        }];
        sources.extend(self.slots.iter().map(|slot| proto::SourceEntry {
            kind: slot.kind.as_str().to_owned(),
            location: slot.location.clone(),
            last_sync_unix_ms: slot.synced.map_or(0, unix_ms),
            routes: count(slot.routes),
            fragments: count(slot.applied.len()),
            excluded: listed(&slot.excluded),
            error: slot.error.clone().unwrap_or_default(),
            errors: slot.errors,
            excluded_total: count(slot.excluded.len()),
            revision: slot.applied_revision.unwrap_or(0),
        }));
        ContentType::Sources(proto::SourceList { sources })
    }
}
