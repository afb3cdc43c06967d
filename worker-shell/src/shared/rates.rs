//! The connection rate per source of `connection_rate_per_ip`, one table
//! for the whole process, so the limit is exact whatever `worker_count`
//! is.
//!
//! Owns: [`SharedRates`], `preread_core`'s bounded [`RateTable`] cut into
//! [`SharedRates::SHARDS`] shards by a keyed hash of the source, each
//! behind its own lock, held for one table call (a map operation, or a
//! sweep of one shard when it is full) and never across a syscall. Must
//! never: hold more than [`SharedRates::CAP`] buckets in all, or decide
//! anything the table and the bucket decide (both are pure, in
//! `preread_core::access`).

use std::fmt;
use std::hash::{BuildHasher, Hash};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use preread_core::access::{Rate, RateTable};

/// Buckets per source, shared by every worker.
pub struct SharedRates<K> {
    shards: Box<[Mutex<RateTable<K>>]>,
    /// SipHash with a random key: the sources come from clients, and a
    /// chosen spray must not land on one shard.
    hasher: std::collections::hash_map::RandomState,
}

impl<K> fmt::Debug for SharedRates<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedRates")
            .field("shards", &self.shards.len())
            .finish()
    }
}

impl<K: Eq + Hash> SharedRates<K> {
    /// Shards of the table: contention stays low with a few workers.
    pub const SHARDS: usize = 64;
    /// Buckets in all shards together.
    pub const CAP: usize = 65_536;

    #[must_use]
    pub fn new() -> Arc<Self> {
        let shards = (0..Self::SHARDS)
            .map(|_| Mutex::new(RateTable::new(Self::CAP / Self::SHARDS)))
            .collect();
        Arc::new(Self {
            shards,
            hasher: std::collections::hash_map::RandomState::new(),
        })
    }

    /// Takes a token of `key`'s bucket at `now`; `false`: refuse the
    /// connection.
    pub fn take(&self, key: K, rate: &Rate, now: Instant) -> bool {
        let shard = self.hasher.hash_one(&key) as usize % self.shards.len();
        self.shards[shard]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take(key, rate, now)
    }

    /// The buckets held now, in all shards.
    #[must_use]
    pub fn buckets(&self) -> usize {
        self.shards
            .iter()
            .map(|shard| shard.lock().unwrap_or_else(PoisonError::into_inner).len())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use std::net::{IpAddr, Ipv4Addr};
    use std::sync::Arc;
    use std::thread;
    use std::time::{Duration, Instant};

    use preread_core::access::Rate;

    use super::SharedRates;

    #[test]
    fn threads_taking_from_one_source_get_exactly_the_burst() {
        let rates = SharedRates::new();
        let rate = Rate::new(1, Duration::from_secs(60), 50).unwrap_or_else(|e| panic!("{e}"));
        let now = Instant::now();
        let source = IpAddr::from([10, 0, 0, 1]);
        let admitted: usize = (0..4)
            .map(|_| {
                let rates = Arc::clone(&rates);
                thread::spawn(move || (0..100).filter(|_| rates.take(source, &rate, now)).count())
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|t| t.join().unwrap_or(usize::MAX))
            .sum();
        assert_eq!(admitted, 50, "one bucket for every thread");
    }

    #[test]
    fn a_spray_never_passes_the_cap() {
        let rates = SharedRates::new();
        let rate = Rate::new(1, Duration::from_secs(60), 1).unwrap_or_else(|e| panic!("{e}"));
        let now = Instant::now();
        for n in 0..200_000u32 {
            assert!(rates.take(IpAddr::from(Ipv4Addr::from(n)), &rate, now));
        }
        assert!(
            rates.buckets() <= SharedRates::<IpAddr>::CAP,
            "{}",
            rates.buckets()
        );
    }
}
