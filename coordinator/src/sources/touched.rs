//! The fragments an incremental merge must try: those changed since the
//! running state's merge, each with the version the running state holds.
//! Must never: forget a change a refused merge took (`restore` gives it
//! back).

use std::collections::{BTreeMap, BTreeSet};

use command::sources::{Fragment, FragmentId};

/// The fragments changed since the running state's merge, for the next
/// incremental merge.
#[derive(Debug, Default)]
pub(super) struct Touched {
    /// Their ids.
    pub(super) ids: BTreeSet<FragmentId>,
    /// Each one's version before its first change since then: what the
    /// running state holds, when it holds it.
    pub(super) before: BTreeMap<FragmentId, Fragment>,
}

impl Touched {
    /// Records that `id`, which was `before`, changes.
    pub(super) fn touch(&mut self, id: &FragmentId, before: Option<Fragment>) {
        if self.ids.insert(id.clone())
            && let Some(before) = before
        {
            self.before.insert(id.clone(), before);
        }
    }

    /// Puts back what a refused merge took: its versions are the older.
    pub(super) fn restore(&mut self, older: Touched) {
        self.ids.extend(older.ids);
        self.before.extend(older.before);
    }
}
