//! The buckets of every source of one listener or cluster, bounded.
//!
//! Owns: [`RateTable`]: a bucket per source, created full on first sight,
//! and the cap. A full bucket is the same as none (`bucket.rs`), so the
//! table forgets full buckets when it reaches its cap; if a spray of
//! sources keeps it full of buckets still refilling, it forgets an eighth
//! of the cap at once, those nearest full (the ones that owe least), so a
//! flood of distinct sources costs one sweep per eighth of the cap, never
//! one per connection. A forgotten source starts again with a full bucket:
//! under such a flood the limit fails open for the sources that owed
//! least, and memory stays at the cap.
//!
//! Must never: hold more than its cap of buckets, or lock (the worker
//! shards the table and locks one shard around one call).

use std::collections::HashMap;
use std::hash::Hash;
use std::time::Instant;

use super::bucket::{Bucket, Rate};

/// Buckets per source, at most `cap` of them. SipHash (the default
/// hasher): the keys come from clients.
#[derive(Debug, Clone)]
pub struct RateTable<K> {
    buckets: HashMap<K, Bucket>,
    cap: usize,
}

impl<K: Eq + Hash> RateTable<K> {
    /// A table of at most `cap` buckets (at least one).
    pub fn new(cap: usize) -> Self {
        Self {
            buckets: HashMap::new(),
            cap: cap.max(1),
        }
    }

    /// Takes a token from `key`'s bucket at `now`: `false` when the bucket
    /// is empty (refuse the connection).
    pub fn take(&mut self, key: K, rate: &Rate, now: Instant) -> bool {
        if let Some(bucket) = self.buckets.get_mut(&key) {
            return bucket.take(rate, now);
        }
        let mut fresh = Bucket::full(now);
        let admitted = fresh.take(rate, now);
        if self.buckets.capacity() == 0 {
            // Twice the cap: the map then always has room to rehash in
            // place and never reallocates, whatever it forgot.
            self.buckets.reserve(self.cap.saturating_mul(2));
        }
        if self.buckets.len() >= self.cap {
            self.make_room(now);
        }
        self.buckets.insert(key, fresh);
        admitted
    }

    /// Forgets the full buckets; if that frees less than an eighth of the
    /// cap, also the buckets nearest full, down to seven eighths.
    fn make_room(&mut self, now: Instant) {
        self.buckets.retain(|_, bucket| !bucket.is_full(now));
        let keep = self.cap - self.cap.div_ceil(8);
        if self.buckets.len() <= keep {
            return;
        }
        let mut due: Vec<Instant> = self.buckets.values().map(Bucket::full_at).collect();
        let excess = due.len() - keep;
        let (_, threshold, _) = due.select_nth_unstable(excess - 1);
        let threshold = *threshold;
        let mut to_drop = excess;
        self.buckets.retain(|_, bucket| {
            if to_drop > 0 && bucket.full_at() <= threshold {
                to_drop -= 1;
                false
            } else {
                true
            }
        });
    }

    /// The buckets held.
    pub fn len(&self) -> usize {
        self.buckets.len()
    }

    /// No bucket is held.
    pub fn is_empty(&self) -> bool {
        self.buckets.is_empty()
    }

    /// The most buckets the table holds.
    pub fn cap(&self) -> usize {
        self.cap
    }

    /// The buckets the map has room for without growing: its memory is
    /// about this many times a key and a bucket.
    pub fn capacity(&self) -> usize {
        self.buckets.capacity()
    }

    /// The bucket of `key`, if the table holds one.
    pub fn bucket(&self, key: &K) -> Option<Bucket> {
        self.buckets.get(key).copied()
    }
}

#[cfg(test)]
mod tests {
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
    use std::time::{Duration, Instant};

    use proptest::prelude::*;

    use super::RateTable;
    use crate::access::Rate;

    fn rate(rate: u32, per_ms: u64, burst: u32) -> Rate {
        Rate::new(rate, Duration::from_millis(per_ms), burst).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn sources_have_their_own_buckets() {
        let limit = rate(1, 1000, 2);
        let now = Instant::now();
        let mut table = RateTable::new(16);
        let (a, b) = (IpAddr::from([10, 0, 0, 1]), IpAddr::from([10, 0, 0, 2]));
        assert!(table.take(a, &limit, now) && table.take(a, &limit, now));
        assert!(!table.take(a, &limit, now), "a's burst is spent");
        assert!(table.take(b, &limit, now), "b is unaffected");
        assert!(
            table.take(a, &limit, now + Duration::from_secs(1)),
            "refilled"
        );
    }

    #[test]
    fn full_buckets_are_forgotten_first() {
        let limit = rate(1, 1000, 5);
        let start = Instant::now();
        let mut table = RateTable::new(4);
        let busy = IpAddr::from([10, 0, 0, 1]);
        for _ in 0..5 {
            table.take(busy, &limit, start);
        }
        for n in 2..5u8 {
            table.take(IpAddr::from([10, 0, 0, n]), &limit, start);
        }
        assert_eq!(table.len(), 4);
        // 1 s later the three single takes are full again, the busy source
        // still owes four tokens.
        let later = start + Duration::from_millis(1500);
        assert!(table.take(IpAddr::from([10, 0, 0, 9]), &limit, later));
        assert_eq!(table.len(), 2);
        assert!(!table.bucket(&busy).is_some_and(|b| b.is_full(later)));
        assert!(table.take(busy, &limit, later), "1.5 tokens came back");
        assert!(!table.take(busy, &limit, later), "its debt is remembered");
    }

    /// A spray of 250,000 distinct addresses, one connection each, 1 µs
    /// apart, never grows the table past its cap nor its map's allocation
    /// past the first one (10 million in `benches/access.rs`, measured in
    /// release).
    #[test]
    fn a_spray_of_distinct_sources_stays_at_the_cap() {
        let limit = rate(50, 1000, 50);
        let start = Instant::now();
        let cap = 4096;
        let mut table = RateTable::new(cap);
        let mut allocated = 0;
        for n in 0..250_000u32 {
            let source = IpAddr::from(Ipv4Addr::from(n));
            let now = start + Duration::from_micros(u64::from(n));
            assert!(
                table.take(source, &limit, now),
                "a new source has a full bucket"
            );
            assert!(table.len() <= cap);
            if n == 0 {
                allocated = table.capacity();
            }
            // Tombstones lower the free room until a rehash in place
            // restores it; a reallocation would raise it.
            assert!(table.capacity() <= allocated, "grew at source {n}");
        }
        assert!(allocated >= 2 * cap && allocated <= 4 * cap, "{allocated}");
    }

    proptest! {
        #[test]
        fn never_past_the_cap_and_a_held_bucket_is_exact(
            cap in 1usize..64,
            takes in proptest::collection::vec((0u16..200, 0u64..50), 1..600),
        ) {
            let limit = rate(10, 100, 3);
            let start = Instant::now();
            let mut table = RateTable::new(cap);
            let mut now = start;
            for (source, advance_ms) in takes {
                now += Duration::from_millis(advance_ms);
                let key = IpAddr::from(Ipv6Addr::from(u128::from(source)));
                let before = table.bucket(&key);
                let admitted = table.take(key, &limit, now);
                if let Some(mut bucket) = before {
                    prop_assert_eq!(admitted, bucket.take(&limit, now), "the table is the bucket");
                } else {
                    prop_assert!(admitted, "a forgotten source starts full");
                }
                prop_assert!(table.len() <= cap);
            }
        }
    }
}
