//! The entries of one kind of pattern in a [`RouteTable`](super::RouteTable),
//! found by the pattern's name.
//!
//! Owns: [`Entries`], hash tables (shards) each behind its own `Arc`, in
//! a list behind an `Arc` too, whose key is the name inside each entry's
//! pattern (a route's name is stored once, not a second time as a map
//! key). A clone shares the list (one reference count); a change copies
//! the list (a pointer per shard) and the one shard it touches when
//! another table still holds them. So the main thread and every worker
//! hold one copy of a listener's routes, and a change costs a shard (a few
//! hundred entries), never the table. Must never: allocate or take time proportional to the
//! number of entries in [`Entries::get`]; hold two entries of one name, or
//! an empty one; copy a shard for a change that leaves it as it is.

use core::hash::BuildHasher;
use std::sync::Arc;

use hashbrown::{DefaultHashBuilder, HashTable};

use super::Entry;

/// The average entries per shard past which the shards double. A change
/// to a shared table copies one shard, so this bounds its cost; fewer,
/// larger shards would make a snapshot (one reference count per shard)
/// cheaper and every change dearer.
const SHARD_ENTRIES: usize = 256;

type Shard = HashTable<Entry>;

/// The name an entry is found by.
fn key(entry: &Entry) -> &[u8] {
    entry.pattern.name().as_bytes()
}

/// The shard of `shards` (a power of two) that holds the entry of `hash`,
/// from bits 32 and up: a hash table takes its bucket from the low bits
/// and its tag from the top seven, so shards cut on either would crowd
/// their entries into one bucket or one tag.
#[inline]
fn shard_index(hash: u64, shards: usize) -> usize {
    // Truncation keeps the low bits of the upper half, which the mask takes.
    ((hash >> 32) as usize) & shards.wrapping_sub(1)
}

/// Entries by the name of their pattern.
#[derive(Debug, Clone, Default)]
pub(super) struct Entries {
    /// None while the table never held an entry, then a power of two. The
    /// list is shared too, so a snapshot of 100,000 routes is one count.
    shards: Arc<[Arc<Shard>]>,
    hasher: DefaultHashBuilder,
    /// The entries in all shards.
    len: usize,
}

impl Entries {
    #[inline]
    fn hash(&self, name: &[u8]) -> u64 {
        self.hasher.hash_one(name)
    }

    /// The entry named `name`: one hash, one shard, one probe sequence.
    /// Inlined: it runs up to once per label of every client's name.
    #[inline]
    pub(super) fn get(&self, name: &[u8]) -> Option<&Entry> {
        // Most listeners have no wildcard of one kind or the other: their
        // probes cost no hash.
        if self.len == 0 {
            return None;
        }
        let hash = self.hash(name);
        // A lone shard's address does not depend on the hash, so the loads
        // that reach its table overlap with hashing the name.
        let shard = match &*self.shards {
            [only] => only,
            shards => shards.get(shard_index(hash, shards.len()))?,
        };
        shard.find(hash, |e| key(e) == name)
    }

    /// Changes the entry named `name` with `change`, and drops it if that
    /// left it empty; `None` if there is no such entry. Its shard is
    /// copied first when another table shares it, so call it only for a
    /// change that does change the entry.
    pub(super) fn change<R>(
        &mut self,
        name: &[u8],
        change: impl FnOnce(&mut Entry) -> R,
    ) -> Option<R> {
        let hash = self.hash(name);
        let index = shard_index(hash, self.shards.len());
        self.shards.get(index)?.find(hash, |e| key(e) == name)?;
        let shard = Arc::make_mut(&mut self.shards).get_mut(index)?;
        let Ok(mut found) = Arc::make_mut(shard).find_entry(hash, |e| key(e) == name) else {
            return None;
        };
        let result = change(found.get_mut());
        if found.get().is_empty() {
            found.remove();
            self.len -= 1;
        }
        Some(result)
    }

    /// Adds an entry whose name none of the entries has.
    pub(super) fn insert_new(&mut self, entry: Entry) {
        debug_assert!(self.get(key(&entry)).is_none(), "two entries of one name");
        debug_assert!(!entry.is_empty(), "an empty entry added");
        if self.len >= self.shards.len() * SHARD_ENTRIES {
            self.grow();
        }
        let hash = self.hash(key(&entry));
        let index = shard_index(hash, self.shards.len());
        let hasher = &self.hasher;
        // `grow` left at least one shard, and the index is masked to them.
        let shard = &mut Arc::make_mut(&mut self.shards)[index];
        Arc::make_mut(shard).insert_unique(hash, entry, |e| hasher.hash_one(key(e)));
        self.len += 1;
    }

    /// Doubles the shards (one when there are none): the entries of a
    /// shard no other table holds move, those of a shared one are copied.
    /// Like a hash table's own growth, it runs once per doubling of the
    /// entries.
    fn grow(&mut self) {
        let count = (self.shards.len() * 2).max(1);
        let mut grown: Vec<Shard> = (0..count)
            .map(|_| HashTable::with_capacity(self.len / count))
            .collect();
        let hasher = &self.hasher;
        let mut place = |entry: Entry| {
            let hash = hasher.hash_one(key(&entry));
            grown[shard_index(hash, count)].insert_unique(hash, entry, |e| hasher.hash_one(key(e)));
        };
        match Arc::get_mut(&mut self.shards) {
            Some(owned) => {
                for slot in owned {
                    match Arc::get_mut(slot) {
                        Some(shard) => core::mem::take(shard).into_iter().for_each(&mut place),
                        None => slot.iter().cloned().for_each(&mut place),
                    }
                }
            }
            None => self
                .shards
                .iter()
                .flat_map(|shard| shard.iter())
                .cloned()
                .for_each(&mut place),
        }
        self.shards = grown.into_iter().map(Arc::new).collect();
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = &Entry> {
        self.shards.iter().flat_map(|shard| shard.iter())
    }

    /// Whether the two hold the very same shards: one is a clone of the
    /// other, and neither changed since.
    pub(super) fn same_storage(&self, other: &Self) -> bool {
        self.shards.len() == other.shards.len()
            && self
                .shards
                .iter()
                .zip(other.shards.iter())
                .all(|(a, b)| Arc::ptr_eq(a, b))
    }

    /// Checks the shards with `debug_assert!`: their count, the entry
    /// count, and every entry in the shard its hash picks.
    pub(super) fn check_invariants(&self) {
        let count = self.shards.len();
        debug_assert!(
            count == 0 || count.is_power_of_two(),
            "{count} shards, not a power of two"
        );
        debug_assert!(count > 0 || self.len == 0, "entries without a shard");
        let mut len = 0;
        for (index, shard) in self.shards.iter().enumerate() {
            for entry in shard.iter() {
                debug_assert_eq!(
                    shard_index(self.hash(key(entry)), count),
                    index,
                    "{} in another shard than its hash picks",
                    entry.pattern
                );
                len += 1;
            }
        }
        debug_assert_eq!(len, self.len, "entry count out of date");
    }
}

/// Equal when they hold equal entries, whatever the shards, order or seed.
impl PartialEq for Entries {
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len && self.iter().all(|e| other.get(key(e)) == Some(e))
    }
}

impl Eq for Entries {}

#[cfg(test)]
mod tests {
    use super::super::{AlpnSet, Entry};
    use super::*;
    use crate::pattern::{PatternError, validate_sni_pattern};

    fn entries(names: impl Iterator<Item = String>) -> Result<Entries, PatternError> {
        let mut entries = Entries::default();
        for name in names {
            let mut entry = Entry::new(validate_sni_pattern(&name)?);
            entry.add(AlpnSet::Any, "c".into());
            entries.insert_new(entry);
        }
        entries.check_invariants();
        Ok(entries)
    }

    fn shared(a: &Entries, b: &Entries) -> usize {
        a.shards
            .iter()
            .zip(b.shards.iter())
            .filter(|(a, b)| Arc::ptr_eq(a, b))
            .count()
    }

    #[test]
    fn shards_double_with_the_entries() -> Result<(), PatternError> {
        assert_eq!(entries(core::iter::empty())?.shards.len(), 0);
        assert_eq!(
            entries((0..1).map(|i| format!("n{i}.com")))?.shards.len(),
            1
        );
        let many = entries((0..10_000).map(|i| format!("n{i}.com")))?;
        // 10,000 entries: past 32 shards of 256, within 64.
        assert_eq!(many.shards.len(), 64);
        assert_eq!(many.len, 10_000);
        let fullest = many.shards.iter().map(|s| s.len()).max().unwrap_or(0);
        let emptiest = many.shards.iter().map(|s| s.len()).min().unwrap_or(0);
        // The hash spreads them: no shard far from the average of 156.
        assert!(fullest < 256 && emptiest > 64, "{emptiest}..{fullest}");
        Ok(())
    }

    #[test]
    fn a_changed_snapshot_grows_apart_from_the_table_it_shares_with()
    -> Result<(), Box<dyn core::error::Error>> {
        // 512 entries fill two shards: the next add doubles them.
        let original = entries((0..512).map(|i| format!("n{i}.com")))?;
        assert_eq!(original.shards.len(), 2);
        let mut changed = original.clone();
        // The change copies the list and one shard; the other is still
        // shared when the growth comes, so the growth moves the entries of
        // one shard and copies those of the other.
        let h2 = AlpnSet::protocols(["h2"])?;
        assert_eq!(
            changed.change(b"n0.com", |e| e.add(h2, "d".into())),
            Some(())
        );
        assert_eq!(shared(&original, &changed), 1);
        let mut entry = Entry::new(validate_sni_pattern("a.com")?);
        entry.add(AlpnSet::Any, "c".into());
        changed.insert_new(entry);
        assert_eq!((changed.shards.len(), changed.len), (4, 513));
        assert_eq!((original.shards.len(), original.len), (2, 512));
        changed.check_invariants();
        original.check_invariants();
        for i in 0..512 {
            let name = format!("n{i}.com");
            assert!(changed.get(name.as_bytes()).is_some(), "{name}");
            assert!(original.get(name.as_bytes()).is_some(), "{name}");
        }
        let listed = |e: &Entries| e.get(b"n0.com").map(|entry| entry.listed.len());
        assert_eq!((listed(&changed), listed(&original)), (Some(1), Some(0)));
        assert!(changed.get(b"a.com").is_some() && original.get(b"a.com").is_none());
        Ok(())
    }

    #[test]
    fn a_change_copies_only_the_shard_it_touches() -> Result<(), PatternError> {
        let original = entries((0..10_000).map(|i| format!("n{i}.com")))?;
        let mut changed = original.clone();
        assert_eq!(shared(&original, &changed), 64);
        assert_eq!(changed.change(b"missing.com", |_| ()), None);
        assert_eq!(shared(&original, &changed), 64);
        assert_eq!(
            changed.change(b"n7.com", |e| e.remove(&AlpnSet::Any)),
            Some(())
        );
        assert_eq!(shared(&original, &changed), 63);
        assert!(
            changed.get(b"n7.com").is_none(),
            "an emptied entry is dropped"
        );
        assert!(original.get(b"n7.com").is_some());
        assert_eq!((original.len, changed.len), (10_000, 9_999));
        changed.check_invariants();
        original.check_invariants();
        Ok(())
    }
}
