//! One configured route source, as the coordinator knows it: what it
//! last reported, and what of it the running state holds.
//!
//! Owns: [`Slot`] and the count of its applied routes. Must never: decide
//! a merge (`sources` does).

use std::collections::BTreeMap;
use std::time::SystemTime;

use command::sources::{AppliedFragment, Exclusion, Fragment, FragmentId, SourceKind};

/// One configured source.
#[derive(Debug)]
pub(super) struct Slot {
    pub(super) kind: SourceKind,
    pub(super) location: String,
    /// It reported once (a whole read or a failure): the first merge waits
    /// for every source's first report.
    pub(super) reported: bool,
    /// Its fragments as last reported, by name.
    pub(super) fragments: BTreeMap<FragmentId, Fragment>,
    pub(super) synced: Option<SystemTime>,
    /// The store revision of its last report (a source that counts them).
    pub(super) revision: Option<i64>,
    /// The revision the running state serves.
    pub(super) applied_revision: Option<i64>,
    /// Why its last read failed, while it fails.
    pub(super) error: Option<String>,
    pub(super) errors: u64,
    /// The fragments the running state holds (the last committed merge
    /// applied them), with their routes: kept by id, so a merge of a few
    /// changed fragments commits in their count, not the source's.
    pub(super) applied: BTreeMap<FragmentId, usize>,
    /// Their routes, summed.
    pub(super) routes: usize,
    /// The fragments the last committed merge left out.
    pub(super) excluded: Vec<Exclusion>,
}

impl Slot {
    /// The running state no longer holds fragment `id`.
    pub(super) fn unapply(&mut self, id: &FragmentId) {
        if let Some(routes) = self.applied.remove(id) {
            self.routes = self.routes.saturating_sub(routes);
        }
    }

    /// The running state holds `fragment`.
    pub(super) fn apply(&mut self, fragment: AppliedFragment) {
        self.routes = self.routes.saturating_add(fragment.routes);
        if let Some(before) = self.applied.insert(fragment.id, fragment.routes) {
            self.routes = self.routes.saturating_sub(before);
        }
    }
}
