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

/// A small seeded generator (splitmix64). Load balancing needs spread, not
/// secrecy, and a seed makes every pick reproducible in tests.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n > 0`). Multiply-shift instead of modulo: one
    /// draw, and a bias of at most n / 2^64, far below what a load
    /// balancer could notice.
    pub fn below(&mut self, n: u64) -> u64 {
        debug_assert!(n > 0, "below(0) has no value to return");
        // The high half of a 64x64 product is below `n`, so it fits.
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }
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
        let mut ticket = rng.below(total);
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
                let first = rng.below(n) as usize;
                let mut second = rng.below(n - 1) as usize;
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
mod tests {
    //! Each algorithm's distribution, backups, drain, passive health and its
    //! backoff, `tried`, stale refs, per-IP counts, and a randomized run of
    //! every operation against a model of the open connections. No
    //! proptest in this crate: the randomized tests loop over fixed seeds.

    use super::*;

    const ALL: [LoadBalancing; 4] = [
        LoadBalancing::RoundRobin,
        LoadBalancing::Random,
        LoadBalancing::LeastConnections,
        LoadBalancing::PowerOfTwo,
    ];

    fn cluster(lb: LoadBalancing, max_connections_per_ip: u32) -> proto::Cluster {
        proto::Cluster {
            cluster_id: "c".into(),
            load_balancing: lb as i32,
            proxy_protocol: ProxyProtocol::None as i32,
            max_connections_per_ip,
        }
    }

    fn backend(id: &str, port: u16, weight: u32, backup: bool) -> proto::Backend {
        proto::Backend {
            cluster_id: "c".into(),
            backend_id: id.into(),
            address: format!("127.0.0.1:{port}"),
            weight: Some(weight),
            backup,
        }
    }

    /// A cluster with backends `(id, weight, backup)`, and their refs.
    fn with(lb: LoadBalancing, specs: &[(&str, u32, bool)]) -> (ClusterBackends, Vec<BackendRef>) {
        let mut c = ClusterBackends::new(&cluster(lb, 0));
        for (i, &(id, weight, backup)) in specs.iter().enumerate() {
            assert!(c.add(&backend(id, 9000 + i as u16, weight, backup)));
        }
        let refs = specs.iter().map(|&(id, ..)| by_id(&c, id)).collect();
        c.check_invariants();
        (c, refs)
    }

    fn by_id(c: &ClusterBackends, id: &str) -> BackendRef {
        let slot = c
            .slots
            .iter()
            .position(|s| s.backend.as_ref().is_some_and(|b| b.id == id))
            .expect("backend exists");
        c.backend_ref(slot)
    }

    fn health(c: &ClusterBackends, b: BackendRef) -> Health {
        c.get(b).expect("live").health
    }

    /// Picks `n` times without starting connections; the ids picked.
    fn picks(c: &mut ClusterBackends, now: Instant, rng: &mut Rng, n: usize) -> Vec<String> {
        (0..n)
            .map(|_| {
                let b = c.pick(now, rng, &[]).expect("a candidate");
                c.check_invariants();
                c.id(b).expect("live").to_owned()
            })
            .collect()
    }

    /// Fails `b` until it goes down; returns the change.
    fn take_down(c: &mut ClusterBackends, b: BackendRef, now: Instant) -> HealthChange {
        for _ in 1..FAILURES_TO_DOWN {
            assert_eq!(c.connect_failed(b, now), None);
        }
        c.connect_failed(b, now).expect("down on the last failure")
    }

    #[test]
    fn smooth_round_robin_gives_nginx_sequence_for_5_1_1() {
        let (mut c, _) = with(
            LoadBalancing::RoundRobin,
            &[("a", 5, false), ("b", 1, false), ("c", 1, false)],
        );
        let seq = picks(&mut c, Instant::now(), &mut Rng::new(1), 14).concat();
        assert_eq!(seq, "aabacaaaabacaa");
    }

    #[test]
    fn smooth_round_robin_cycle_is_exact_for_random_weights() {
        let now = Instant::now();
        for seed in 0..300 {
            let mut rng = Rng::new(seed);
            let n = 1 + rng.below(6) as usize;
            let ids: Vec<String> = (0..n).map(|i| format!("b{i}")).collect();
            let weights: Vec<u32> = (0..n).map(|_| rng.below(20) as u32).collect();
            let specs: Vec<_> = ids
                .iter()
                .zip(&weights)
                .map(|(id, &w)| (id.as_str(), w, false))
                .collect();
            let (mut c, _) = with(LoadBalancing::RoundRobin, &specs);
            let total: u32 = weights.iter().sum();
            if total == 0 {
                assert_eq!(c.pick(now, &mut rng, &[]), None, "seed {seed}");
                continue;
            }
            // Two cycles: the state returns to zero after each.
            for _ in 0..2 {
                let seq = picks(&mut c, now, &mut rng, total as usize);
                for (id, &w) in ids.iter().zip(&weights) {
                    let count = seq.iter().filter(|p| *p == id).count();
                    assert_eq!(count, w as usize, "seed {seed}, weights {weights:?}");
                }
                assert!(
                    c.slots
                        .iter()
                        .all(|s| s.backend.as_ref().is_none_or(|b| b.current == 0))
                );
            }
        }
    }

    #[test]
    fn weighted_random_follows_weights() {
        let (mut c, _) = with(
            LoadBalancing::Random,
            &[
                ("a", 1, false),
                ("b", 2, false),
                ("c", 3, false),
                ("d", 4, false),
            ],
        );
        let picks = picks(&mut c, Instant::now(), &mut Rng::new(42), 100_000);
        for (id, weight) in [("a", 1.0), ("b", 2.0), ("c", 3.0), ("d", 4.0)] {
            let share = picks.iter().filter(|p| *p == id).count() as f64 / 100_000.0;
            assert!((share - weight / 10.0).abs() < 0.01, "{id}: {share}");
        }
    }

    #[test]
    fn least_connections_picks_least_loaded() {
        let (mut c, refs) = with(
            LoadBalancing::LeastConnections,
            &[("a", 100, false), ("b", 100, false), ("c", 100, false)],
        );
        let (now, mut rng) = (Instant::now(), Rng::new(0));
        for _ in 0..3 {
            c.connect_started(refs[0]);
        }
        c.connect_started(refs[2]);
        assert_eq!(c.pick(now, &mut rng, &[]), Some(refs[1]));
        c.connect_started(refs[1]);
        // b and c now tie at 1; a (3) is never the answer until they reach 3.
        for _ in 0..4 {
            let b = c.pick(now, &mut rng, &[]).expect("a candidate");
            assert_ne!(b, refs[0]);
            c.connect_started(b);
            c.check_invariants();
        }
        assert_eq!(
            refs.iter()
                .map(|&b| c.get(b).expect("live").active)
                .collect::<Vec<_>>(),
            [3, 3, 3]
        );
    }

    #[test]
    fn least_connections_respects_weights() {
        let (mut c, refs) = with(
            LoadBalancing::LeastConnections,
            &[("a", 3, false), ("b", 1, false)],
        );
        let (now, mut rng) = (Instant::now(), Rng::new(0));
        for round in 1..=100 {
            for _ in 0..4 {
                let b = c.pick(now, &mut rng, &[]).expect("a candidate");
                c.connect_started(b);
            }
            c.check_invariants();
            let active: Vec<u32> = refs
                .iter()
                .map(|&b| c.get(b).expect("live").active)
                .collect();
            assert_eq!(active, [3 * round, round]);
        }
    }

    #[test]
    fn least_connections_rotates_ties() {
        let (mut c, _) = with(
            LoadBalancing::LeastConnections,
            &[("a", 1, false), ("b", 1, false), ("c", 1, false)],
        );
        let seq = picks(&mut c, Instant::now(), &mut Rng::new(0), 7).concat();
        assert_eq!(seq, "abcabca");
    }

    #[test]
    fn power_of_two_never_picks_the_more_loaded() {
        let (mut c, refs) = with(
            LoadBalancing::PowerOfTwo,
            &[("a", 1, false), ("b", 1, false), ("c", 1, false)],
        );
        c.connect_started(refs[1]);
        c.connect_started(refs[2]);
        c.connect_started(refs[2]);
        // Pairs {a,b} and {a,c} give a, {b,c} gives b; c always loses.
        let picks = picks(&mut c, Instant::now(), &mut Rng::new(7), 30_000);
        let share = |id: &str| picks.iter().filter(|p| *p == id).count() as f64 / 30_000.0;
        assert_eq!(share("c"), 0.0);
        assert!((share("a") - 2.0 / 3.0).abs() < 0.02, "{}", share("a"));
        assert!((share("b") - 1.0 / 3.0).abs() < 0.02, "{}", share("b"));

        // Two candidates: always both drawn, so always the lighter.
        let (mut c, refs) = with(
            LoadBalancing::PowerOfTwo,
            &[("a", 1, false), ("b", 1, false)],
        );
        c.connect_started(refs[0]);
        assert!(picks_only(&mut c, "b"));
        // Load is per unit of weight: a (weight 4, 2 active) beats b (1, 1).
        let (mut c, refs) = with(
            LoadBalancing::PowerOfTwo,
            &[("a", 4, false), ("b", 1, false)],
        );
        c.connect_started(refs[0]);
        c.connect_started(refs[0]);
        c.connect_started(refs[1]);
        assert!(picks_only(&mut c, "a"));
    }

    fn picks_only(c: &mut ClusterBackends, id: &str) -> bool {
        let mut rng = Rng::new(3);
        picks(c, Instant::now(), &mut rng, 1_000)
            .iter()
            .all(|p| p == id)
    }

    #[test]
    fn backups_only_when_no_primary_is_usable() {
        let t0 = Instant::now();
        for lb in ALL {
            let (mut c, refs) = with(lb, &[("p1", 1, false), ("k", 100, true), ("p2", 1, false)]);
            let (p1, k, p2) = (refs[0], refs[1], refs[2]);
            let mut rng = Rng::new(5);
            assert!(
                picks(&mut c, t0, &mut rng, 200).iter().all(|p| p != "k"),
                "{lb:?}"
            );
            // Tried primaries are not usable for this connection.
            assert_eq!(c.pick(t0, &mut rng, &[p1, p2]), Some(k), "{lb:?}");
            assert_eq!(c.pick(t0, &mut rng, &[p1, p2, k]), None, "{lb:?}");
            take_down(&mut c, p1, t0);
            assert!(
                picks(&mut c, t0, &mut rng, 50).iter().all(|p| p == "p2"),
                "{lb:?}"
            );
            take_down(&mut c, p2, t0);
            assert!(
                picks(&mut c, t0, &mut rng, 50).iter().all(|p| p == "k"),
                "{lb:?}"
            );
            // Once a primary is due for its probe, it is usable again.
            let later = t0 + FIRST_BACKOFF;
            assert!(
                picks(&mut c, later, &mut rng, 50).iter().all(|p| p != "k"),
                "{lb:?}"
            );
            c.check_invariants();
        }
    }

    #[test]
    fn weight_zero_is_never_picked() {
        let now = Instant::now();
        for lb in ALL {
            let (mut c, refs) = with(
                lb,
                &[("drained", 0, false), ("a", 5, false), ("b", 1, false)],
            );
            let mut rng = Rng::new(11);
            assert!(
                picks(&mut c, now, &mut rng, 1_000)
                    .iter()
                    .all(|p| p != "drained"),
                "{lb:?}"
            );
            assert_eq!(c.pick(now, &mut rng, &[refs[1], refs[2]]), None, "{lb:?}");
            // A drained primary is not usable: the backup takes over.
            let (mut c, _) = with(
                lb,
                &[("drained", 0, false), ("k", 1, true), ("kd", 0, true)],
            );
            assert!(
                picks(&mut c, now, &mut rng, 100).iter().all(|p| p == "k"),
                "{lb:?}"
            );
        }
    }

    #[test]
    fn down_after_three_failures_then_probe_with_doubling_backoff() {
        let (mut c, refs) = with(LoadBalancing::RoundRobin, &[("a", 1, false)]);
        let a = refs[0];
        let mut rng = Rng::new(0);
        let mut t = Instant::now();
        assert_eq!(
            take_down(&mut c, a, t),
            HealthChange::Down {
                backend_id: "a".into(),
                retry_in: FIRST_BACKOFF
            }
        );
        c.check_invariants();
        let mut backoff = FIRST_BACKOFF;
        for (round, expected) in [2, 4, 8, 16, 32, 60, 60].into_iter().enumerate() {
            assert_eq!(
                c.pick(t + backoff - Duration::from_millis(1), &mut rng, &[]),
                None
            );
            t += backoff;
            // Due: one probe, and no second one while it is in flight.
            assert_eq!(c.pick(t, &mut rng, &[]), Some(a));
            c.connect_started(a);
            assert_eq!(c.pick(t + MAX_BACKOFF, &mut rng, &[]), None);
            // The probe times out a while later; the worker may release it
            // before or after reporting the failure.
            t += Duration::from_millis(300);
            if round % 2 == 0 {
                c.release(a);
            }
            assert_eq!(
                c.connect_failed(a, t),
                None,
                "a failed probe is no transition"
            );
            if round % 2 == 1 {
                c.release(a);
            }
            backoff = Duration::from_secs(expected);
            assert_eq!(
                health(&c, a),
                Health::Down {
                    since: t,
                    backoff,
                    probing: false
                }
            );
            c.check_invariants();
        }
        t += backoff;
        assert_eq!(c.pick(t, &mut rng, &[]), Some(a));
        c.connect_started(a);
        assert_eq!(
            c.connect_succeeded(a, t),
            Some(HealthChange::Up {
                backend_id: "a".into()
            })
        );
        assert_eq!(health(&c, a), Health::HEALTHY);
        assert_eq!(c.pick(t, &mut rng, &[]), Some(a));
        c.release(a);
        // Up again with a clean count: the next down takes three failures.
        assert_eq!(
            c.connect_succeeded(a, t),
            None,
            "no transition when already up"
        );
        assert!(matches!(take_down(&mut c, a, t), HealthChange::Down { .. }));
        c.check_invariants();
    }

    #[test]
    fn success_resets_the_failure_count() {
        let (mut c, refs) = with(LoadBalancing::RoundRobin, &[("a", 1, false)]);
        let now = Instant::now();
        for _ in 0..10 {
            for _ in 1..FAILURES_TO_DOWN {
                assert_eq!(c.connect_failed(refs[0], now), None);
            }
            assert_eq!(c.connect_succeeded(refs[0], now), None);
            c.check_invariants();
        }
        assert_eq!(health(&c, refs[0]), Health::HEALTHY);
    }

    #[test]
    fn abandoned_probe_frees_the_next_one() {
        let (mut c, refs) = with(LoadBalancing::RoundRobin, &[("a", 1, false)]);
        let (t0, mut rng) = (Instant::now(), Rng::new(0));
        take_down(&mut c, refs[0], t0);
        let t = t0 + FIRST_BACKOFF;
        c.connect_started(refs[0]);
        assert_eq!(c.pick(t, &mut rng, &[]), None);
        // The client left before the connect completed: no outcome, only a release.
        c.release(refs[0]);
        assert_eq!(c.pick(t, &mut rng, &[]), Some(refs[0]));
        c.check_invariants();
    }

    #[test]
    fn failures_of_connects_started_before_down_do_not_extend_the_backoff() {
        let (mut c, refs) = with(LoadBalancing::RoundRobin, &[("a", 1, false)]);
        let (t0, a) = (Instant::now(), refs[0]);
        for _ in 0..5 {
            c.connect_started(a);
        }
        take_down(&mut c, a, t0);
        assert_eq!(c.connect_failed(a, t0 + Duration::from_millis(500)), None);
        assert_eq!(c.connect_failed(a, t0 + Duration::from_millis(900)), None);
        let down = |since, backoff| Health::Down {
            since,
            backoff,
            probing: false,
        };
        assert_eq!(health(&c, a), down(t0, FIRST_BACKOFF));
        // Once due, a late failure stands in for a probe, once per backoff.
        let late = t0 + Duration::from_millis(1_500);
        assert_eq!(c.connect_failed(a, late), None);
        assert_eq!(c.connect_failed(a, late + Duration::from_millis(100)), None);
        assert_eq!(health(&c, a), down(late, 2 * FIRST_BACKOFF));
        for _ in 0..5 {
            c.release(a);
        }
        let mut rng = Rng::new(0);
        assert_eq!(c.pick(late + FIRST_BACKOFF, &mut rng, &[]), None);
        assert_eq!(c.pick(late + 2 * FIRST_BACKOFF, &mut rng, &[]), Some(a));
        c.check_invariants();
    }

    #[test]
    fn tried_backends_are_not_picked_again() {
        let now = Instant::now();
        for lb in ALL {
            let (mut c, refs) = with(lb, &[("a", 1, false), ("b", 50, false), ("c", 3, false)]);
            let mut rng = Rng::new(9);
            for _ in 0..100 {
                let mut tried = Vec::new();
                while let Some(b) = c.pick(now, &mut rng, &tried) {
                    assert!(!tried.contains(&b), "{lb:?}");
                    tried.push(b);
                }
                assert_eq!(tried.len(), refs.len(), "{lb:?}");
                c.check_invariants();
            }
        }
    }

    #[test]
    fn removed_backend_refs_go_stale_and_release_is_harmless() {
        let (mut c, refs) = with(
            LoadBalancing::LeastConnections,
            &[("a", 1, false), ("b", 1, false)],
        );
        let (a, b) = (refs[0], refs[1]);
        let now = Instant::now();
        c.connect_started(a);
        c.connect_started(a);
        c.connect_started(b);
        assert!(c.remove("a"));
        assert!(!c.remove("a"));
        c.check_invariants();
        assert_eq!(c.address(a), None);
        assert_eq!(c.id(a), None);
        assert_eq!(c.connect_failed(a, now), None);
        assert_eq!(c.connect_succeeded(a, now), None);
        c.release(a);
        // The slot is reused by a new backend; the old ref does not reach it.
        assert!(c.add(&backend("c", 9100, 1, false)));
        let new = by_id(&c, "c");
        assert_eq!(new.slot, a.slot);
        assert_ne!(new, a);
        c.release(a);
        c.connect_started(a);
        assert_eq!(c.get(new).expect("live").active, 0);
        assert_eq!(c.get(b).expect("live").active, 1);
        assert_eq!(
            c.address(new),
            Some("127.0.0.1:9100".parse().expect("address"))
        );
        c.release(b);
        assert!(c.remove("b") && c.remove("c"));
        assert!(c.is_empty());
        assert_eq!(c.pick(now, &mut Rng::new(0), &[]), None);
        c.check_invariants();
    }

    #[test]
    fn refs_of_a_removed_cluster_do_not_reach_its_successor() {
        let specs = [("a", 1, false)];
        let (mut old, old_refs) = with(LoadBalancing::RoundRobin, &specs);
        old.connect_started(old_refs[0]);
        // The cluster is removed and added again while the connection lives.
        drop(old);
        let (mut new, new_refs) = with(LoadBalancing::RoundRobin, &specs);
        assert_ne!(old_refs[0], new_refs[0]);
        assert_eq!(new.id(old_refs[0]), None);
        new.release(old_refs[0]);
        assert_eq!(new.connect_failed(old_refs[0], Instant::now()), None);
        assert_eq!(new.get(new_refs[0]).expect("live").active, 0);
        assert_eq!(health(&new, new_refs[0]), Health::HEALTHY);
        new.check_invariants();
    }

    #[test]
    fn add_again_updates_in_place() {
        let (mut c, refs) = with(
            LoadBalancing::RoundRobin,
            &[("a", 1, false), ("b", 1, false)],
        );
        let (a, now) = (refs[0], Instant::now());
        c.connect_started(a);
        take_down(&mut c, a, now);
        // Same address: the slot, the connection and the health stay.
        assert!(c.add(&backend("a", 9000, 7, true)));
        assert_eq!(by_id(&c, "a"), a);
        let kept = c.get(a).expect("live");
        assert_eq!((kept.weight, kept.backup, kept.active), (7, true, 1));
        assert!(matches!(kept.health, Health::Down { .. }));
        // A new address: the old endpoint's health no longer applies.
        assert!(c.add(&backend("a", 9500, 7, true)));
        assert_eq!(health(&c, a), Health::HEALTHY);
        assert_eq!(
            c.address(a),
            Some("127.0.0.1:9500".parse().expect("address"))
        );
        let mut unparsable = backend("x", 1, 1, false);
        unparsable.address = "nowhere".into();
        assert!(!c.add(&unparsable));
        let default = proto::Backend {
            weight: None,
            ..backend("d", 9001, 0, false)
        };
        assert!(c.add(&default));
        assert_eq!(c.get(by_id(&c, "d")).expect("live").weight, DEFAULT_WEIGHT);
        c.check_invariants();
    }

    #[test]
    fn settings_are_read_and_updated() {
        let mut settings = cluster(LoadBalancing::PowerOfTwo, 4);
        settings.proxy_protocol = ProxyProtocol::Send as i32;
        let mut c = ClusterBackends::new(&settings);
        assert_eq!(c.load_balancing, LoadBalancing::PowerOfTwo);
        assert_eq!(c.proxy_protocol(), ProxyProtocol::Send);
        assert_eq!(c.max_connections_per_ip(), 4);
        assert!(c.is_empty());
        settings.load_balancing = 99;
        settings.proxy_protocol = 99;
        settings.max_connections_per_ip = 0;
        c.update_settings(&settings);
        assert_eq!(c.load_balancing, LoadBalancing::RoundRobin);
        assert_eq!(c.proxy_protocol(), ProxyProtocol::None);
        assert_eq!(c.max_connections_per_ip(), 0);
        c.check_invariants();
    }

    #[test]
    fn per_ip_counts_return_to_zero() {
        let mut c = ClusterBackends::new(&cluster(LoadBalancing::RoundRobin, 2));
        let (x, y): (IpAddr, IpAddr) = (
            "192.0.2.1".parse().expect("ip"),
            "2001:db8::1".parse().expect("ip"),
        );
        assert!(c.admit_ip(x) && c.admit_ip(x));
        assert!(!c.admit_ip(x), "at the limit");
        assert!(c.admit_ip(y));
        c.check_invariants();
        c.release_ip(x);
        assert!(c.admit_ip(x));
        c.release_ip(x);
        c.release_ip(x);
        c.release_ip(y);
        assert!(c.per_ip.is_empty());
        c.release_ip(y);
        assert!(
            c.per_ip.is_empty(),
            "a release with no admission changes nothing"
        );
        // Unlimited still counts, so a limit set later sees open connections.
        c.update_settings(&cluster(LoadBalancing::RoundRobin, 0));
        for _ in 0..1_000 {
            assert!(c.admit_ip(x));
        }
        c.update_settings(&cluster(LoadBalancing::RoundRobin, 10));
        assert!(!c.admit_ip(x));
        for _ in 0..1_000 {
            c.release_ip(x);
        }
        assert!(c.per_ip.is_empty());
        c.check_invariants();
    }

    #[test]
    fn random_operations_keep_counts_consistent() {
        let t0 = Instant::now();
        for seed in 0..200 {
            let mut rng = Rng::new(seed);
            let lb = ALL[rng.below(4) as usize];
            let mut c = ClusterBackends::new(&cluster(lb, 3));
            // The model: every connection started and not yet released.
            let mut open: Vec<BackendRef> = Vec::new();
            let mut ips: Vec<IpAddr> = Vec::new();
            let mut t = t0;
            for step in 0..400 {
                t += Duration::from_millis(rng.below(400));
                match rng.below(9) {
                    0 => {
                        let id = format!("b{}", rng.below(6));
                        let spec = backend(
                            &id,
                            9000 + rng.below(3) as u16,
                            rng.below(4) as u32,
                            rng.below(4) == 0,
                        );
                        assert!(c.add(&spec));
                    }
                    1 => {
                        c.remove(&format!("b{}", rng.below(6)));
                    }
                    2..=4 => {
                        let tried: Vec<BackendRef> =
                            open.iter().copied().take(rng.below(3) as usize).collect();
                        if let Some(b) = c.pick(t, &mut rng, &tried) {
                            assert!(!tried.contains(&b));
                            let chosen = c.get(b).expect("picked a live backend");
                            assert!(chosen.weight > 0 && chosen.health.usable(t));
                            c.connect_started(b);
                            open.push(b);
                        }
                    }
                    5 if !open.is_empty() => {
                        let b = open[rng.below(open.len() as u64) as usize];
                        if rng.below(2) == 0 {
                            c.connect_failed(b, t);
                        } else {
                            c.connect_succeeded(b, t);
                        }
                    }
                    6 if !open.is_empty() => {
                        let b = open.swap_remove(rng.below(open.len() as u64) as usize);
                        c.release(b);
                    }
                    7 => {
                        let ip = IpAddr::from([10, 0, 0, rng.below(4) as u8]);
                        if c.admit_ip(ip) {
                            ips.push(ip);
                        }
                    }
                    _ if !ips.is_empty() => {
                        c.release_ip(ips.swap_remove(rng.below(ips.len() as u64) as usize));
                    }
                    _ => {}
                }
                c.check_invariants();
                for (slot, s) in c.slots.iter().enumerate() {
                    if let Some(b) = &s.backend {
                        let r = c.backend_ref(slot);
                        let expected = open.iter().filter(|&&o| o == r).count() as u32;
                        assert_eq!(b.active, expected, "seed {seed} step {step}");
                    }
                }
                for (ip, &count) in &c.per_ip {
                    assert_eq!(count as usize, ips.iter().filter(|&i| i == ip).count());
                    assert!(count <= 3);
                }
            }
            for b in open.drain(..) {
                c.release(b);
            }
            for ip in ips.drain(..) {
                c.release_ip(ip);
            }
            assert!(c.per_ip.is_empty());
            assert!(
                c.slots
                    .iter()
                    .all(|s| s.backend.as_ref().is_none_or(|b| b.active == 0))
            );
            c.check_invariants();
        }
    }
}
