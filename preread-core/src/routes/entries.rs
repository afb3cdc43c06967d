//! The entries of one kind of pattern in a [`RouteTable`](super::RouteTable),
//! found by the pattern's name.
//!
//! Owns: [`Entries`], a hash table whose key is the name inside each entry's
//! pattern, so a route's name is stored once, not a second time as a map
//! key (at 100,000 routes that copy cost one allocation and 16 bytes of
//! slot per route in every table). Must never: allocate or take time
//! proportional to the number of entries in [`Entries::get`], or hold two
//! entries of one name.

use core::hash::BuildHasher;

use hashbrown::{DefaultHashBuilder, HashTable};

use super::Entry;

/// The name an entry is found by.
fn key(entry: &Entry) -> &[u8] {
    entry.pattern.name().as_bytes()
}

/// Entries by the name of their pattern.
#[derive(Debug, Clone, Default)]
pub(super) struct Entries {
    table: HashTable<Entry>,
    hasher: DefaultHashBuilder,
}

impl Entries {
    fn hash(&self, name: &[u8]) -> u64 {
        self.hasher.hash_one(name)
    }

    /// The entry named `name`: one hash and one probe sequence.
    pub(super) fn get(&self, name: &[u8]) -> Option<&Entry> {
        self.table.find(self.hash(name), |e| key(e) == name)
    }

    pub(super) fn get_mut(&mut self, name: &[u8]) -> Option<&mut Entry> {
        let hash = self.hash(name);
        self.table.find_mut(hash, |e| key(e) == name)
    }

    /// Adds an entry whose name none of the entries has.
    pub(super) fn insert_new(&mut self, entry: Entry) {
        debug_assert!(self.get(key(&entry)).is_none(), "two entries of one name");
        let hash = self.hash(key(&entry));
        let hasher = &self.hasher;
        self.table
            .insert_unique(hash, entry, |e| hasher.hash_one(key(e)));
    }

    /// Drops the entry named `name`, if there is one.
    pub(super) fn remove(&mut self, name: &[u8]) {
        let hash = self.hash(name);
        if let Ok(found) = self.table.find_entry(hash, |e| key(e) == name) {
            found.remove();
        }
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = &Entry> {
        self.table.iter()
    }
}

/// Equal when they hold equal entries, whatever the order or seed.
impl PartialEq for Entries {
    fn eq(&self, other: &Self) -> bool {
        self.table.len() == other.table.len() && self.iter().all(|e| other.get(key(e)) == Some(e))
    }
}

impl Eq for Entries {}
