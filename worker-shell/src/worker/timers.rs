//! The worker's timers: a min-heap of deadlines with lazy cancellation.
//!
//! Owns: the order in which session timers fire (deadline, then schedule
//! order) and the bound on memory under schedule/cancel churn. Must never:
//! fire a cancelled timer, fire a timer twice, or let cancelled entries pile
//! up (at most half the heap is ever dead, past a small floor).
//!
//! A cancel only marks the timer dead (its slot forgets it); the dead heap
//! entry is dropped when it reaches the top, or by a compaction once dead
//! entries outnumber live ones. The top of the heap is always live, so
//! [`Timers::next_deadline`] is a plain peek.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::num::NonZeroU64;
use std::time::Instant;

/// Below this heap size, dead entries are left for the pops: compacting a
/// tiny heap costs more than it saves.
const COMPACT_FLOOR: usize = 64;

/// A slot that holds no live timer. Sequences never reach it.
const FREE: u64 = u64::MAX;

/// The handle of one scheduled timer, for [`Timers::cancel`]. A handle of a
/// timer that already fired or was cancelled is harmless.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimerId {
    slot: usize,
    /// Unique over the worker's life: a reused slot never revives a handle.
    /// Never 0, so that a session's `Option<TimerId>` costs no tag.
    seq: NonZeroU64,
}

#[derive(Debug)]
struct Entry<K> {
    at: Instant,
    seq: u64,
    slot: usize,
    key: K,
}

// Ordered by (deadline, schedule order), reversed: `BinaryHeap` is a max-heap.
impl<K> Ord for Entry<K> {
    fn cmp(&self, other: &Self) -> Ordering {
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

impl<K> PartialOrd for Entry<K> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<K> PartialEq for Entry<K> {
    fn eq(&self, other: &Self) -> bool {
        self.seq == other.seq
    }
}

impl<K> Eq for Entry<K> {}

/// Timers keyed by `K` (a worker uses `(session key, timer kind)`).
#[derive(Debug)]
pub struct Timers<K> {
    heap: BinaryHeap<Entry<K>>,
    /// `slots[i]` is the sequence of the live timer in slot `i`, or `FREE`.
    slots: Vec<u64>,
    free: Vec<usize>,
    next_seq: u64,
}

impl<K: Copy> Default for Timers<K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: Copy> Timers<K> {
    pub fn new() -> Self {
        Self {
            heap: BinaryHeap::new(),
            slots: Vec::new(),
            free: Vec::new(),
            next_seq: 0,
        }
    }

    /// Arms a timer that [`Self::pop_expired`] returns once `now >= at`.
    pub fn schedule(&mut self, at: Instant, key: K) -> TimerId {
        let seq = NonZeroU64::MIN.saturating_add(self.next_seq);
        self.next_seq += 1;
        let slot = match self.free.pop() {
            Some(slot) => slot,
            None => {
                self.slots.push(FREE);
                self.slots.len() - 1
            }
        };
        debug_assert_eq!(self.slots[slot], FREE, "a free slot held a live timer");
        self.slots[slot] = seq.get();
        self.heap.push(Entry {
            at,
            seq: seq.get(),
            slot,
            key,
        });
        TimerId { slot, seq }
    }

    /// Disarms a timer; a no-op if it already fired or was cancelled.
    pub fn cancel(&mut self, id: TimerId) {
        if self.slots.get(id.slot) == Some(&id.seq.get()) {
            self.release(id.slot);
            self.settle();
        }
    }

    /// The earliest live deadline: how long the worker may sleep.
    pub fn next_deadline(&self) -> Option<Instant> {
        debug_assert!(
            self.heap.peek().is_none_or(|top| self.is_live(top)),
            "a dead top"
        );
        self.heap.peek().map(|top| top.at)
    }

    /// The key of the earliest timer due at `now`, removed; `None` when no
    /// timer is due. Call in a loop: one timer per call, deadline order.
    pub fn pop_expired(&mut self, now: Instant) -> Option<K> {
        if self.heap.peek()?.at > now {
            return None;
        }
        let entry = self.heap.pop()?;
        debug_assert!(self.is_live(&entry), "a dead top");
        self.release(entry.slot);
        self.settle();
        Some(entry.key)
    }

    /// Live (armed, not yet fired, not cancelled) timers.
    pub fn len(&self) -> usize {
        self.slots.len() - self.free.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn is_live(&self, entry: &Entry<K>) -> bool {
        self.slots[entry.slot] == entry.seq
    }

    fn release(&mut self, slot: usize) {
        self.slots[slot] = FREE;
        self.free.push(slot);
    }

    /// Restores the invariants after a timer died: a live top, and dead
    /// entries no more than half the heap (past the floor).
    fn settle(&mut self) {
        while self.heap.peek().is_some_and(|top| !self.is_live(top)) {
            self.heap.pop();
        }
        let dead = self.heap.len() - self.len();
        if self.heap.len() > COMPACT_FLOOR && dead * 2 > self.heap.len() {
            let slots = &self.slots;
            self.heap.retain(|entry| slots[entry.slot] == entry.seq);
        }
        debug_assert!(
            self.heap.len() >= self.len(),
            "a live timer without its entry"
        );
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::{COMPACT_FLOOR, TimerId, Timers};

    #[test]
    fn a_session_slot_for_a_timer_costs_no_tag() {
        // A session holds six `Option<TimerId>` for its whole life.
        assert_eq!(
            std::mem::size_of::<Option<TimerId>>(),
            std::mem::size_of::<TimerId>()
        );
        let mut timers = Timers::new();
        let now = Instant::now();
        let first = timers.schedule(now, 1u8);
        timers.cancel(first);
        let second = timers.schedule(now, 2u8);
        assert_ne!(first, second, "a reused slot gets a new handle");
        timers.cancel(first);
        assert_eq!(
            timers.pop_expired(now),
            Some(2),
            "a stale handle cancels nothing"
        );
    }

    fn ms(base: Instant, n: u64) -> Instant {
        base + Duration::from_millis(n)
    }

    fn drain(timers: &mut Timers<u32>, now: Instant) -> Vec<u32> {
        std::iter::from_fn(|| timers.pop_expired(now)).collect()
    }

    #[test]
    fn fires_in_deadline_order_only_when_due() {
        let base = Instant::now();
        let mut timers = Timers::new();
        for (at, key) in [(30, 3), (10, 1), (20, 2)] {
            timers.schedule(ms(base, at), key);
        }
        assert_eq!(timers.next_deadline(), Some(ms(base, 10)));
        assert_eq!(timers.pop_expired(ms(base, 9)), None);
        assert_eq!(drain(&mut timers, ms(base, 20)), [1, 2]);
        assert_eq!(timers.len(), 1);
        assert_eq!(drain(&mut timers, ms(base, 100)), [3]);
        assert!(timers.is_empty());
        assert_eq!(timers.next_deadline(), None);
    }

    #[test]
    fn equal_deadlines_fire_in_schedule_order() {
        let base = Instant::now();
        let mut timers = Timers::new();
        for key in [5, 1, 4, 2, 3] {
            timers.schedule(base, key);
        }
        assert_eq!(drain(&mut timers, base), [5, 1, 4, 2, 3]);
    }

    #[test]
    fn a_cancelled_timer_never_fires() {
        let base = Instant::now();
        let mut timers = Timers::new();
        let first = timers.schedule(ms(base, 1), 1);
        let middle = timers.schedule(ms(base, 2), 2);
        timers.schedule(ms(base, 3), 3);
        timers.cancel(middle);
        assert_eq!(timers.len(), 2);
        timers.cancel(first);
        assert_eq!(
            timers.next_deadline(),
            Some(ms(base, 3)),
            "the dead top was skipped"
        );
        timers.cancel(first);
        assert_eq!(drain(&mut timers, ms(base, 10)), [3]);
    }

    #[test]
    fn cancelling_a_fired_timer_leaves_its_reused_slot_alone() {
        let base = Instant::now();
        let mut timers = Timers::new();
        let fired = timers.schedule(base, 1);
        assert_eq!(timers.pop_expired(base), Some(1));
        let next = timers.schedule(ms(base, 5), 2);
        assert_eq!(next.slot, fired.slot, "the slot is reused");
        timers.cancel(fired);
        assert_eq!(timers.len(), 1);
        assert_eq!(drain(&mut timers, ms(base, 5)), [2]);
    }

    #[test]
    fn compaction_drops_dead_entries_and_keeps_live_ones() {
        let base = Instant::now();
        let mut timers = Timers::new();
        let ids: Vec<_> = (0..1_000)
            .map(|i| timers.schedule(ms(base, 1_000 - i), i as u32))
            .collect();
        // Cancel the latest deadlines: they sit deep in the heap, not on top.
        for id in &ids[..600] {
            timers.cancel(*id);
        }
        assert_eq!(timers.len(), 400);
        assert!(
            timers.heap.len() <= 2 * 400,
            "heap of {}",
            timers.heap.len()
        );
        let fired = drain(&mut timers, ms(base, 1_000));
        assert_eq!(fired, (600..1_000).rev().collect::<Vec<u32>>());
        assert!(timers.heap.is_empty());
    }

    #[test]
    fn churn_of_100k_timers_stays_bounded() {
        let base = Instant::now();
        let mut timers = Timers::new();
        let live = 100_000;
        let mut ids: Vec<_> = (0..live)
            .map(|i| timers.schedule(ms(base, 60_000 + i), i as u32))
            .collect();
        // Idle timers re-armed again and again, the way a busy worker does.
        for round in 0..5u64 {
            for (i, id) in ids.iter_mut().enumerate() {
                timers.cancel(*id);
                *id = timers.schedule(ms(base, 120_000 + round * 1_000 + i as u64), i as u32);
            }
            assert_eq!(timers.len(), live as usize);
            assert!(timers.heap.len() <= (2 * live as usize).max(COMPACT_FLOOR));
            assert_eq!(timers.slots.len(), live as usize, "slots are reused");
        }
        assert_eq!(timers.next_deadline(), Some(ms(base, 124_000)));
        assert_eq!(drain(&mut timers, ms(base, 1_000_000)).len(), live as usize);
        assert!(timers.heap.is_empty());
    }
}
