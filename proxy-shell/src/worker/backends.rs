//! The backends of one cluster, as one worker sees them: which backend the
//! next connection goes to, and whether each backend is healthy.
//!
//! Owns: load balancing (smooth weighted round robin, weighted random,
//! weighted least connections, power of two choices), backup backends,
//! passive health (down after [`FAILURES_TO_DOWN`] failed connects in a row,
//! one half-open probe per backoff), the active-connection counts those
//! decisions need, and the per-source-IP admission counts of
//! `max_connections_per_ip`. Each worker has its own copy, so every count
//! and every health verdict here is per worker.
//!
//! Must never: do I/O, read a clock (the worker passes `now` in), draw
//! randomness it was not handed (the worker seeds one [`Rng`]), or panic on
//! a stale [`BackendRef`]: a connection may outlive its backend's removal.
//!
//! The worker's contract, for each connection attempt: `pick` then, at once,
//! `connect_started`; at most one of `connect_succeeded` or `connect_failed`
//! (none when the attempt was abandoned, for instance because the client
//! left); and exactly one `release` when the backend socket closes,
//! whatever the outcome, before or after the outcome is reported.

use std::cmp::Ordering;
use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU32, Ordering as Atomic};
use std::time::{Duration, Instant};

use command::proto::{self, LoadBalancing, ProxyProtocol};
use command::validate::DEFAULT_WEIGHT;
use preread_core::rng::Rng;

/// Consecutive failed connects that take a backend down.
pub const FAILURES_TO_DOWN: u32 = 3;
/// How long a backend stays down before its first probe.
pub const FIRST_BACKOFF: Duration = Duration::from_secs(1);
/// The longest wait between two probes of a down backend.
pub const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// A backend as a connection holds it: its cluster instance, its slot and
/// that slot's generation, so a reference to a removed backend never
/// reaches the backend that reuses its slot, even in a cluster removed and
/// added again.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct BackendRef {
    instance: u32,
    slot: usize,
    generation: u32,
}

/// Numbers the `ClusterBackends` instances of the process, for
/// [`BackendRef`]. Wraps after 2^32 clusters, long after any ref is gone.
static NEXT_INSTANCE: AtomicU32 = AtomicU32::new(0);

/// A health transition, reported exactly once per transition so the worker
/// can log it and count it.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum HealthChange {
    /// The backend failed [`FAILURES_TO_DOWN`] connects in a row; it gets
    /// no connection until a probe, `retry_in` from now.
    Down {
        backend_id: String,
        retry_in: Duration,
    },
    /// A connect to a down backend succeeded; it takes connections again.
    Up { backend_id: String },
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Health {
    /// Takes connections; `failures` counts the failed connects in a row
    /// so far, always below [`FAILURES_TO_DOWN`].
    Up { failures: u32 },
    /// Takes no connection until `backoff` after `since` (its last failure),
    /// then one probe at a time (`probing`).
    Down {
        since: Instant,
        backoff: Duration,
        probing: bool,
    },
}

impl Health {
    const HEALTHY: Health = Health::Up { failures: 0 };

    fn usable(self, now: Instant) -> bool {
        match self {
            Health::Up { .. } => true,
            // `saturating_duration_since`: an Instant the worker read before
            // `since` must not panic, only wait.
            Health::Down {
                since,
                backoff,
                probing,
            } => !probing && now.saturating_duration_since(since) >= backoff,
        }
    }
}

#[derive(Debug)]
struct Backend {
    id: String,
    address: SocketAddr,
    /// 0 drains the backend: never picked, its connections left alone.
    weight: u32,
    backup: bool,
    /// Connections started and not yet released.
    active: u32,
    /// Smooth weighted round robin's running weight.
    current: i64,
    health: Health,
}

impl Backend {
    /// Which of two backends is less loaded: fewer active connections per
    /// unit of weight (cross-multiplied, so no float and no division by a
    /// zero weight), then the heavier one. `Less` means `self` is preferred.
    fn lighter(&self, other: &Backend) -> Ordering {
        let mine = u64::from(self.active) * u64::from(other.weight);
        let theirs = u64::from(other.active) * u64::from(self.weight);
        mine.cmp(&theirs).then(other.weight.cmp(&self.weight))
    }
}

#[derive(Debug)]
struct Slot {
    /// Bumped on each removal, so refs to the old occupant go stale. Wraps
    /// after 2^32 removals from one slot, which no deployment reaches while
    /// a connection is still open.
    generation: u32,
    backend: Option<Backend>,
}

/// The backends of one cluster in one worker, with the cluster's settings.
#[derive(Debug)]
pub struct ClusterBackends {
    instance: u32,
    /// Never shrinks: a freed slot is reused by the next `add`, and slot
    /// indexes stay valid for the connections that hold them.
    slots: Vec<Slot>,
    load_balancing: LoadBalancing,
    proxy_protocol: ProxyProtocol,
    max_connections_per_ip: u32,
    /// The slot after least_connections' last pick: ties start there, so
    /// equally loaded backends take turns instead of the first taking all.
    cursor: usize,
    /// Open connections per source IP; an IP leaves the map at zero.
    /// SipHash (std's default) because the keys come from clients.
    per_ip: HashMap<IpAddr, u32>,
    /// `pick`'s candidate list, kept so that picking does not allocate.
    candidates: Vec<usize>,
}

impl ClusterBackends {
    pub fn new(cluster: &proto::Cluster) -> Self {
        let mut backends = Self {
            // Only uniqueness matters, nothing is ordered by it.
            instance: NEXT_INSTANCE.fetch_add(1, Atomic::Relaxed),
            slots: Vec::new(),
            load_balancing: LoadBalancing::RoundRobin,
            proxy_protocol: ProxyProtocol::None,
            max_connections_per_ip: 0,
            cursor: 0,
            per_ip: HashMap::new(),
            candidates: Vec::new(),
        };
        backends.update_settings(cluster);
        backends
    }

    /// Applies the cluster's settings. Backends, health and counts stay; a
    /// lowered `max_connections_per_ip` refuses new connections until the
    /// open ones drop below it.
    pub fn update_settings(&mut self, cluster: &proto::Cluster) {
        // The control plane only accepts known values; an unknown one from a
        // newer peer falls back to the defaults rather than failing.
        self.load_balancing = LoadBalancing::try_from(cluster.load_balancing).unwrap_or_default();
        self.proxy_protocol = ProxyProtocol::try_from(cluster.proxy_protocol).unwrap_or_default();
        self.max_connections_per_ip = cluster.max_connections_per_ip;
    }

    /// Adds a backend, or updates the one with the same id in place (its
    /// slot, connections and health stay, unless its address changed).
    /// Returns false, changing nothing, when the address is not an
    /// `ip:port`, which the control plane has already refused.
    pub fn add(&mut self, backend: &proto::Backend) -> bool {
        let Ok(address) = backend.address.parse::<SocketAddr>() else {
            return false;
        };
        let weight = backend.weight.unwrap_or(DEFAULT_WEIGHT);
        let existing = self
            .slots
            .iter_mut()
            .filter_map(|slot| slot.backend.as_mut())
            .find(|b| b.id == backend.backend_id);
        match existing {
            Some(b) => {
                if b.address != address {
                    // A new endpoint: the old one's failures say nothing.
                    b.health = Health::HEALTHY;
                }
                b.address = address;
                b.weight = weight;
                b.backup = backend.backup;
            }
            None => {
                let new = Backend {
                    id: backend.backend_id.clone(),
                    address,
                    weight,
                    backup: backend.backup,
                    active: 0,
                    current: 0,
                    health: Health::HEALTHY,
                };
                match self.slots.iter_mut().find(|slot| slot.backend.is_none()) {
                    Some(slot) => slot.backend = Some(new),
                    None => self.slots.push(Slot {
                        generation: 0,
                        backend: Some(new),
                    }),
                }
            }
        }
        self.restart_round_robin();
        true
    }

    /// Removes a backend. Its open connections keep their `BackendRef`,
    /// which is stale from now on: their `release` does nothing.
    pub fn remove(&mut self, backend_id: &str) -> bool {
        let Some(slot) = self
            .slots
            .iter_mut()
            .find(|slot| slot.backend.as_ref().is_some_and(|b| b.id == backend_id))
        else {
            return false;
        };
        slot.backend = None;
        slot.generation = slot.generation.wrapping_add(1);
        self.restart_round_robin();
        true
    }

    /// Chooses the backend for a connect, or None when no backend is a
    /// candidate. Candidates are the backends not in `tried` (the ones this
    /// connection already failed on), of non-zero weight, and up or due for
    /// a probe; the primaries among them, or the backups when there is no
    /// primary candidate. A primary in `tried` counts as not usable for this
    /// connection, so a connection that has tried every usable primary
    /// falls back to a backup. A down backend offered here is its probe.
    pub fn pick(
        &mut self,
        now: Instant,
        rng: &mut Rng,
        tried: &[BackendRef],
    ) -> Option<BackendRef> {
        let mut candidates = std::mem::take(&mut self.candidates);
        self.collect_candidates(now, tried, &mut candidates);
        let chosen = match self.load_balancing {
            LoadBalancing::RoundRobin => self.smooth_round_robin(&candidates),
            LoadBalancing::Random => self.weighted_random(&candidates, rng),
            LoadBalancing::LeastConnections => self.least_connections(&candidates),
            LoadBalancing::PowerOfTwo => self.power_of_two(&candidates, rng),
        };
        self.candidates = candidates;
        chosen.map(|slot| self.backend_ref(slot))
    }

    pub fn address(&self, b: BackendRef) -> Option<SocketAddr> {
        self.get(b).map(|backend| backend.address)
    }

    pub fn id(&self, b: BackendRef) -> Option<&str> {
        self.get(b).map(|backend| backend.id.as_str())
    }

    /// Counts a connection to `b` until its `release`. A connect to a down
    /// backend is its probe: no other is allowed until this one ends.
    pub fn connect_started(&mut self, b: BackendRef) {
        let Some(backend) = self.get_mut(b) else {
            return;
        };
        backend.active = backend.active.saturating_add(1);
        if let Health::Down { probing, .. } = &mut backend.health {
            debug_assert!(
                !*probing,
                "pick never offers a backend whose probe is in flight"
            );
            *probing = true;
        }
    }

    /// The connect to `b` completed: whatever its state, `b` is up with no
    /// failure counted. Returns `Up` when it was down. Success needs no
    /// time; `_now` keeps the worker's calls symmetric with
    /// `connect_failed`.
    pub fn connect_succeeded(&mut self, b: BackendRef, _now: Instant) -> Option<HealthChange> {
        let backend = self.get_mut(b)?;
        let was_down = matches!(backend.health, Health::Down { .. });
        backend.health = Health::HEALTHY;
        was_down.then(|| HealthChange::Up {
            backend_id: backend.id.clone(),
        })
    }

    /// The connect to `b` was refused, reset or timed out. Returns `Down`
    /// when this failure takes `b` down. A failed probe doubles the wait
    /// before the next one, up to [`MAX_BACKOFF`].
    pub fn connect_failed(&mut self, b: BackendRef, now: Instant) -> Option<HealthChange> {
        let backend = self.get_mut(b)?;
        match &mut backend.health {
            Health::Up { failures } => {
                *failures += 1;
                if *failures < FAILURES_TO_DOWN {
                    return None;
                }
                backend.health = Health::Down {
                    since: now,
                    backoff: FIRST_BACKOFF,
                    probing: false,
                };
                Some(HealthChange::Down {
                    backend_id: backend.id.clone(),
                    retry_in: FIRST_BACKOFF,
                })
            }
            Health::Down {
                since,
                backoff,
                probing,
            } => {
                // A probe starts only once the backend is due, so a failure
                // before that is a connect started before it went down, and
                // adds nothing. Keying on the time rather than on `probing`
                // keeps this right whether the worker releases the probe
                // before or after reporting its failure; a late straggler
                // may stand in for the probe, one step per backoff at most.
                if now.saturating_duration_since(*since) >= *backoff {
                    *since = now;
                    *backoff = (*backoff * 2).min(MAX_BACKOFF);
                    *probing = false;
                }
                None
            }
        }
    }

    /// A connection to `b` closed (after `connect_started`). Harmless when
    /// `b` was removed meanwhile.
    pub fn release(&mut self, b: BackendRef) {
        let Some(backend) = self.get_mut(b) else {
            return;
        };
        debug_assert!(backend.active > 0, "release without connect_started");
        backend.active = backend.active.saturating_sub(1);
        // A probe abandoned before its outcome must not keep the backend
        // down forever. The connection released may instead be one opened
        // before the backend went down; then a second probe may start
        // while the first is in flight, which costs one connect at most.
        if let Health::Down { probing, .. } = &mut backend.health {
            *probing = false;
        }
    }

    pub fn proxy_protocol(&self) -> ProxyProtocol {
        self.proxy_protocol
    }

    pub fn max_connections_per_ip(&self) -> u32 {
        self.max_connections_per_ip
    }

    /// No backend at all (not: none usable).
    pub fn is_empty(&self) -> bool {
        self.slots.iter().all(|slot| slot.backend.is_none())
    }

    /// Admits one more connection from `ip`, or refuses it when `ip`
    /// already has `max_connections_per_ip` open (0: no limit). Each
    /// admission needs one `release_ip`. Counts are kept even without a
    /// limit, so that setting one later sees the connections already open.
    pub fn admit_ip(&mut self, ip: IpAddr) -> bool {
        let count = self.per_ip.entry(ip).or_insert(0);
        if self.max_connections_per_ip != 0 && *count >= self.max_connections_per_ip {
            // The limit is at least 1 here, so the entry held a connection
            // already: refusing leaves no zero count behind.
            return false;
        }
        *count += 1;
        true
    }

    pub fn release_ip(&mut self, ip: IpAddr) {
        // A missing entry is tolerated: a cluster removed and added again
        // starts with no counts while older connections still close.
        if let Entry::Occupied(mut entry) = self.per_ip.entry(ip) {
            *entry.get_mut() -= 1;
            if *entry.get() == 0 {
                entry.remove();
            }
        }
    }

    /// Panics when an internal invariant does not hold; for tests and
    /// debug builds.
    pub fn check_invariants(&self) {
        let mut ids = HashSet::new();
        let mut current_sum: i64 = 0;
        for backend in self.slots.iter().filter_map(|slot| slot.backend.as_ref()) {
            assert!(
                ids.insert(backend.id.as_str()),
                "backend id {} twice",
                backend.id
            );
            current_sum += backend.current;
            match backend.health {
                Health::Up { failures } => assert!(
                    failures < FAILURES_TO_DOWN,
                    "{} is up with {failures} failures",
                    backend.id
                ),
                Health::Down { backoff, .. } => assert!(
                    (FIRST_BACKOFF..=MAX_BACKOFF).contains(&backoff),
                    "{} has a backoff of {backoff:?}",
                    backend.id
                ),
            }
        }
        // Each round robin pick adds the candidates' total weight to them and
        // takes it back from the one picked; add and remove restart at 0.
        assert_eq!(current_sum, 0, "smooth round robin weights drifted");
        assert!(self.cursor <= self.slots.len(), "cursor past the slots");
        assert!(
            self.per_ip.values().all(|&count| count > 0),
            "a source IP with no connection is still counted"
        );
    }

    /// The ref to whatever occupies `slot` now.
    fn backend_ref(&self, slot: usize) -> BackendRef {
        BackendRef {
            instance: self.instance,
            slot,
            generation: self.slots[slot].generation,
        }
    }

    fn get(&self, b: BackendRef) -> Option<&Backend> {
        let slot = self.slots.get(b.slot)?;
        if b.instance != self.instance || slot.generation != b.generation {
            return None;
        }
        slot.backend.as_ref()
    }

    fn get_mut(&mut self, b: BackendRef) -> Option<&mut Backend> {
        let slot = self.slots.get_mut(b.slot)?;
        if b.instance != self.instance || slot.generation != b.generation {
            return None;
        }
        slot.backend.as_mut()
    }

    /// A new backend set starts a new round robin cycle, as nginx does on
    /// reload, so that one cycle gives each backend exactly its weight.
    fn restart_round_robin(&mut self) {
        for backend in self
            .slots
            .iter_mut()
            .filter_map(|slot| slot.backend.as_mut())
        {
            backend.current = 0;
        }
    }

    /// Fills `out` with the slots `pick` may choose, in slot order.
    fn collect_candidates(&self, now: Instant, tried: &[BackendRef], out: &mut Vec<usize>) {
        out.clear();
        for backups in [false, true] {
            out.extend(self.slots.iter().enumerate().filter_map(|(i, slot)| {
                let backend = slot.backend.as_ref()?;
                let b = self.backend_ref(i);
                (backend.backup == backups
                    && backend.weight > 0
                    && backend.health.usable(now)
                    && !tried.contains(&b))
                .then_some(i)
            }));
            if !out.is_empty() {
                return;
            }
        }
    }

    /// The backend of a candidate slot. Candidates are collected from live
    /// slots within the same `pick`, so the slot cannot be empty.
    fn backend(&self, slot: usize) -> &Backend {
        self.slots[slot]
            .backend
            .as_ref()
            .expect("candidates are live slots")
    }

    /// nginx's smooth weighted round robin: every candidate gains its
    /// weight, the richest is picked and pays the candidates' total. Over
    /// one cycle each backend is picked exactly its weight's share, spread
    /// out rather than in bursts.
    fn smooth_round_robin(&mut self, candidates: &[usize]) -> Option<usize> {
        let mut total: i64 = 0;
        let mut best: Option<(usize, i64)> = None;
        for &slot in candidates {
            let Some(backend) = self.slots[slot].backend.as_mut() else {
                continue;
            };
            backend.current += i64::from(backend.weight);
            total += i64::from(backend.weight);
            if best.is_none_or(|(_, richest)| backend.current > richest) {
                best = Some((slot, backend.current));
            }
        }
        let (slot, _) = best?;
        if let Some(backend) = self.slots[slot].backend.as_mut() {
            backend.current -= total;
        }
        Some(slot)
    }

    /// Each candidate with probability weight / total weight.
    fn weighted_random(&self, candidates: &[usize], rng: &mut Rng) -> Option<usize> {
        let total: u64 = candidates
            .iter()
            .map(|&s| u64::from(self.backend(s).weight))
            .sum();
        if total == 0 {
            return None;
        }
        let mut ticket = rng.below_u64(total);
        for &slot in candidates {
            let weight = u64::from(self.backend(slot).weight);
            if ticket < weight {
                return Some(slot);
            }
            ticket -= weight;
        }
        // Not reached: `ticket < total`, the sum of the weights walked.
        None
    }

    /// The candidate with the fewest active connections per unit of weight;
    /// ties go to the heavier, then to the first from the slot after the
    /// last pick.
    fn least_connections(&mut self, candidates: &[usize]) -> Option<usize> {
        let start = candidates.partition_point(|&slot| slot < self.cursor);
        let mut best: Option<usize> = None;
        for k in 0..candidates.len() {
            let slot = candidates[(start + k) % candidates.len()];
            if best.is_none_or(|b| self.backend(slot).lighter(self.backend(b)) == Ordering::Less) {
                best = Some(slot);
            }
        }
        let slot = best?;
        self.cursor = slot + 1;
        Some(slot)
    }

    /// Two distinct candidates drawn uniformly; the less loaded wins, as
    /// least_connections compares them (per unit of weight, then the
    /// heavier), then the first drawn. Uniform draws keep it the cheap,
    /// herd-free choice it is meant to be; weights still count through the
    /// comparison, so under load traffic follows them.
    fn power_of_two(&self, candidates: &[usize], rng: &mut Rng) -> Option<usize> {
        let n = candidates.len() as u64;
        match n {
            0 => None,
            1 => Some(candidates[0]),
            _ => {
                let first = rng.below_u64(n) as usize;
                let mut second = rng.below_u64(n - 1) as usize;
                if second >= first {
                    second += 1;
                }
                let (a, b) = (candidates[first], candidates[second]);
                Some(
                    if self.backend(b).lighter(self.backend(a)) == Ordering::Less {
                        b
                    } else {
                        a
                    },
                )
            }
        }
    }
}

#[cfg(test)]
mod tests;
