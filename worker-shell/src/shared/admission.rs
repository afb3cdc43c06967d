//! The counts admission checks against, one for the whole process: the
//! sessions (`max_connections`), the pooled buffers (`max_buffers`), and
//! the connections per client address (`max_connections_per_ip`,
//! `max_unrouted_per_ip`).
//!
//! Owns: [`Slots`], a capped counter taken and given back with one atomic
//! operation each (no lock), [`Slot`], the one slot a session holds until
//! it is dropped, and [`PerIp`], counts per key in a sharded map whose
//! shard lock is held only for the map operation itself, never across a
//! syscall, with [`IpHold`], the one count a connection holds. Must never:
//! hand out more than the cap, give a count back twice (a hold is given
//! back by its drop, once), or keep a key at zero (the map would grow with
//! every address ever seen).

use std::fmt;
use std::hash::Hash;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use dashmap::DashMap;
use dashmap::mapref::entry::Entry;

/// A capped count, shared by every worker.
#[derive(Debug)]
pub struct Slots {
    taken: AtomicUsize,
    cap: usize,
}

impl Slots {
    #[must_use]
    pub fn new(cap: usize) -> Arc<Self> {
        Arc::new(Self {
            taken: AtomicUsize::new(0),
            cap,
        })
    }

    /// Takes one, or `false` when all `cap` are taken; each `true` needs
    /// one [`give_back`](Self::give_back).
    pub fn try_acquire(&self) -> bool {
        self.taken
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |taken| {
                (taken < self.cap).then_some(taken + 1)
            })
            .is_ok()
    }

    /// Gives back one taken by [`try_acquire`](Self::try_acquire).
    pub fn give_back(&self) {
        let before = self.taken.fetch_sub(1, Ordering::AcqRel);
        debug_assert!(before > 0, "a slot given back that was never taken");
    }

    /// Takes one that gives itself back when dropped.
    pub fn try_take(self: &Arc<Self>) -> Option<Slot> {
        self.try_acquire().then(|| Slot(Arc::clone(self)))
    }

    /// How many are taken now, by every worker.
    #[must_use]
    pub fn taken(&self) -> usize {
        self.taken.load(Ordering::Acquire)
    }

    #[must_use]
    pub fn cap(&self) -> usize {
        self.cap
    }

    /// All `cap` are taken.
    #[must_use]
    pub fn is_full(&self) -> bool {
        self.taken() >= self.cap
    }
}

/// One taken slot, given back when dropped.
#[derive(Debug)]
#[must_use = "a slot is given back as soon as it is dropped"]
pub struct Slot(Arc<Slots>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.give_back();
    }
}

/// The key already holds its limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Full;

/// Open connections per key (a client address, or a listener and a client
/// address), shared by every worker. The map hashes with SipHash (the
/// default), since the keys come from clients.
pub struct PerIp<K: Eq + Hash> {
    counts: DashMap<K, u32>,
}

impl<K: Eq + Hash + fmt::Debug> fmt::Debug for PerIp<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PerIp")
            .field("keys", &self.counts.len())
            .finish()
    }
}

impl<K: Eq + Hash + Clone> PerIp<K> {
    #[must_use]
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            counts: DashMap::new(),
        })
    }

    /// Counts one more connection of `key`, or refuses it when `key`
    /// already holds `limit` (0: no limit, always counted).
    pub fn admit(self: &Arc<Self>, key: K, limit: u32) -> Result<IpHold<K>, Full> {
        match self.counts.entry(key.clone()) {
            Entry::Occupied(mut entry) => {
                if limit != 0 && *entry.get() >= limit {
                    return Err(Full);
                }
                *entry.get_mut() += 1;
            }
            // A limit is at least 1, so the first connection always fits.
            Entry::Vacant(entry) => {
                entry.insert(1);
            }
        }
        Ok(IpHold {
            counts: Arc::clone(self),
            key,
        })
    }

    /// The connections `key` holds now.
    #[must_use]
    pub fn count(&self, key: &K) -> u32 {
        self.counts.get(key).map_or(0, |count| *count)
    }

    /// No key holds a connection.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.counts.is_empty()
    }

    fn release(&self, key: &K) {
        if let Entry::Occupied(mut entry) = self.counts.entry(key.clone()) {
            if *entry.get() <= 1 {
                entry.remove();
            } else {
                *entry.get_mut() -= 1;
            }
        } else {
            debug_assert!(false, "a hold of a key that holds nothing");
        }
    }
}

/// One counted connection of a key, given back when dropped.
#[must_use = "a count is given back as soon as it is dropped"]
pub struct IpHold<K: Eq + Hash + Clone> {
    counts: Arc<PerIp<K>>,
    key: K,
}

impl<K: Eq + Hash + Clone + fmt::Debug> fmt::Debug for IpHold<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("IpHold").field(&self.key).finish()
    }
}

impl<K: Eq + Hash + Clone> IpHold<K> {
    /// The key this hold counts in.
    pub fn key(&self) -> &K {
        &self.key
    }
}

impl<K: Eq + Hash + Clone> Drop for IpHold<K> {
    fn drop(&mut self) {
        self.counts.release(&self.key);
    }
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;
    use std::sync::Arc;
    use std::thread;

    use super::{Full, PerIp, Slots};

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap_or(IpAddr::from([0, 0, 0, 0]))
    }

    #[test]
    fn slots_never_pass_their_cap_and_come_back_on_drop() {
        let slots = Slots::new(2);
        let a = slots.try_take();
        let b = slots.try_take();
        assert!(a.is_some() && b.is_some());
        assert!(slots.try_take().is_none() && slots.is_full());
        drop(a);
        assert_eq!(slots.taken(), 1);
        assert!(slots.try_acquire());
        slots.give_back();
        drop(b);
        assert_eq!(slots.taken(), 0);
    }

    #[test]
    fn threads_racing_for_slots_get_exactly_the_cap() {
        let slots = Slots::new(5);
        let taken: usize = (0..8)
            .map(|_| {
                let slots = Arc::clone(&slots);
                thread::spawn(move || (0..100).filter(|_| slots.try_acquire()).count())
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|t| t.join().unwrap_or(usize::MAX))
            .sum();
        assert_eq!(taken, 5);
        assert_eq!(slots.taken(), 5);
    }

    #[test]
    fn per_ip_refuses_past_the_limit_and_forgets_a_key_at_zero() {
        let counts = PerIp::new();
        let (client, other) = (ip("10.0.0.1"), ip("10.0.0.2"));
        let first = counts.admit(client, 2);
        let second = counts.admit(client, 2);
        assert!(first.is_ok() && second.is_ok());
        assert_eq!(counts.admit(client, 2).err(), Some(Full));
        assert!(counts.admit(other, 2).is_ok(), "and dropped at once");
        assert_eq!(counts.count(&client), 2);
        drop(first);
        assert_eq!(counts.count(&client), 1);
        drop(second);
        assert!(counts.is_empty(), "no key left at zero");
    }

    #[test]
    fn without_a_limit_every_connection_is_counted() {
        let counts = PerIp::new();
        let holds: Vec<_> = (0..10).map(|_| counts.admit(ip("10.0.0.1"), 0)).collect();
        assert!(holds.iter().all(Result::is_ok));
        assert_eq!(counts.count(&ip("10.0.0.1")), 10);
        assert_eq!(
            counts.admit(ip("10.0.0.1"), 10).err(),
            Some(Full),
            "a limit set later sees them"
        );
    }

    #[test]
    fn threads_racing_for_one_address_get_exactly_the_limit() {
        let counts = PerIp::new();
        let admitted: Vec<_> = (0..8)
            .map(|_| {
                let counts = Arc::clone(&counts);
                thread::spawn(move || {
                    (0..50)
                        .filter_map(|_| counts.admit(ip("10.0.0.1"), 3).ok())
                        .collect::<Vec<_>>()
                })
            })
            .collect::<Vec<_>>()
            .into_iter()
            .flat_map(|t| t.join().unwrap_or_default())
            .collect();
        assert_eq!(admitted.len(), 3);
        drop(admitted);
        assert!(counts.is_empty());
    }
}
