//! The backends of one cluster, as one worker sees them: which backend
//! instance the next connection goes to.
//!
//! Owns: load balancing over the instances of the cluster's backends
//! (smooth weighted round robin, weighted random, weighted least
//! connections, power of two choices; each instance weighs its backend's
//! weight), backup backends (only while no primary instance is a
//! candidate), a backend's `max_connections` (a full instance is no
//! candidate; one that fills up under another worker's pick is passed
//! over), taking a named backend's new instances when the resolver changed
//! them, and the cluster's settings (its `max_connections_per_ip`, counted
//! in the process-wide counts of the cluster, and its active checks).
//! Health and connection counts are the instances' own, shared by every
//! worker: a down instance is skipped by every worker at once.
//!
//! Must never: do I/O, read a clock (the worker passes `now` in), draw
//! randomness it was not handed (the worker seeds one [`Rng`]), or count a
//! connection anywhere but in the [`Lease`] it returns (which gives the
//! count back when dropped, whatever became of the backend).

use std::cmp::Ordering;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;

use command::change::{BackendSettings, ClusterSettings};
use command::proto::{LoadBalancing, ProxyProtocol};
use preread_core::access::{DEFAULT_IPV6_PREFIX, source_key};
use preread_core::rng::Rng;
use preread_parser::tls::Ja4;

use super::access::{self, AccessPolicy, Refused, Scope};

use crate::shared::admission::{Full, IpHold};
use crate::shared::health::Checks;
use crate::shared::instance::{Instance, Lease};
use crate::shared::registry::{Registry, SharedBackend, SharedCluster};

/// Why no backend took a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoBackend {
    /// Every candidate instance holds its backend's `max_connections`.
    Full,
    /// No instance is up (or due for a probe) that the connection has not
    /// tried.
    Unavailable,
}

#[derive(Debug)]
struct Backend {
    id: Arc<str>,
    /// 0 drains the backend: never picked, its connections left alone.
    weight: u32,
    backup: bool,
    /// Per instance; 0 is no limit.
    max_connections: u32,
    shared: Arc<SharedBackend>,
    /// `shared`'s version when `instances` was taken.
    version: u64,
    instances: Arc<[Arc<Instance>]>,
    /// Smooth weighted round robin's running weight, per instance.
    current: Vec<i64>,
}

impl Backend {
    /// Takes the backend's instances again if the resolver changed them.
    /// Returns whether it did.
    fn refresh(&mut self) -> bool {
        let version = self.shared.version();
        if version == self.version {
            return false;
        }
        self.version = version;
        self.instances = self.shared.instances();
        self.current = vec![0; self.instances.len()];
        true
    }
}

/// A candidate: (backend index, instance index).
type Candidate = (usize, usize);

/// The backends of one cluster in one worker, with the cluster's settings.
#[derive(Debug)]
pub struct ClusterBackends {
    shared: Arc<SharedCluster>,
    registry: Arc<Registry>,
    backends: Vec<Backend>,
    /// Where each backend is in `backends`, by id: an add at 10,000
    /// backends must not compare 10,000 ids.
    positions: HashMap<Arc<str>, usize>,
    /// The round robin restarts at the next pick: set by an add, so that a
    /// batch of adds restarts it once, not once per add.
    restart: bool,
    load_balancing: LoadBalancing,
    proxy_protocol: ProxyProtocol,
    max_connections_per_ip: u32,
    /// Who may use the cluster; `None`: everyone.
    access: Option<Arc<AccessPolicy>>,
    /// The prefix length an IPv6 source is counted under.
    ipv6_prefix: u8,
    /// The cluster's `deny_ja4`, which the listeners' decisions check.
    deny_ja4: Vec<Ja4>,
    checks: Option<Checks>,
    /// Where least_connections' ties start: it moves on each pick, so
    /// equally loaded instances take turns instead of the first taking all.
    cursor: usize,
    /// `pick`'s candidate list, kept so that picking does not allocate.
    candidates: Vec<Candidate>,
    /// The addresses in memory of the instances passed over during one
    /// pick (full, or their probe taken by another worker); only compared,
    /// and cleared before the pick returns.
    passed_over: Vec<usize>,
}

impl ClusterBackends {
    /// The cluster `cluster`, sharing its counts through `registry`.
    pub fn new(cluster: &ClusterSettings, registry: &Arc<Registry>) -> Self {
        let mut backends = Self {
            shared: registry.cluster(&cluster.id),
            registry: Arc::clone(registry),
            backends: Vec::new(),
            positions: HashMap::new(),
            restart: false,
            load_balancing: LoadBalancing::RoundRobin,
            proxy_protocol: ProxyProtocol::None,
            max_connections_per_ip: 0,
            access: None,
            ipv6_prefix: DEFAULT_IPV6_PREFIX,
            deny_ja4: Vec::new(),
            checks: None,
            cursor: 0,
            candidates: Vec::new(),
            passed_over: Vec::new(),
        };
        backends.update_settings(cluster);
        backends
    }

    /// Applies the cluster's settings. Backends, health and counts stay; a
    /// lowered `max_connections_per_ip` refuses new connections until the
    /// open ones drop below it.
    pub fn update_settings(&mut self, cluster: &ClusterSettings) {
        self.load_balancing = cluster.load_balancing;
        self.proxy_protocol = cluster.proxy_protocol;
        self.max_connections_per_ip = cluster.max_connections_per_ip;
        self.access = AccessPolicy::of(&cluster.access);
        self.ipv6_prefix = cluster.access.ipv6_prefix;
        self.deny_ja4.clone_from(&cluster.access.deny_ja4);
        self.checks = cluster.health_check.map(|check| Checks {
            rise: check.rise.max(1),
            fall: check.fall.max(1),
        });
    }

    /// Adds a backend, or updates the one with the same id in place (its
    /// instances, connections and health stay, unless its address
    /// changed).
    pub fn add(&mut self, backend: &BackendSettings, now: Instant) {
        let weight = backend.weight;
        let max_connections = backend.max_connections;
        let shared =
            self.registry
                .backend(self.shared.id(), &backend.backend_id, &backend.address, now);
        let position = self.positions.get(backend.backend_id.as_str()).copied();
        match position.and_then(|at| self.backends.get_mut(at)) {
            Some(existing) => {
                if !Arc::ptr_eq(&existing.shared, &shared) {
                    // A new endpoint: the old one's instances say nothing.
                    existing.shared = shared;
                    existing.version = u64::MAX;
                }
                existing.weight = weight;
                existing.backup = backend.backup;
                existing.max_connections = max_connections;
                if existing.refresh() {
                    self.restart_round_robin();
                }
            }
            None => {
                let mut added = Backend {
                    id: Arc::clone(shared.id()),
                    weight,
                    backup: backend.backup,
                    max_connections,
                    version: u64::MAX,
                    instances: Arc::new([]),
                    current: Vec::new(),
                    shared,
                };
                added.refresh();
                self.positions
                    .insert(Arc::clone(&added.id), self.backends.len());
                self.backends.push(added);
            }
        }
        debug_assert_eq!(self.positions.len(), self.backends.len());
        // A new backend's running weights are 0: the cycle restarts at the
        // next pick (once for a batch of adds), which also refreshes the
        // others' instances, as after a resolution.
        self.restart = true;
    }

    /// Removes a backend. Its open connections keep their leases, which
    /// give their counts back to its instances when they end.
    pub fn remove(&mut self, backend_id: &str) -> bool {
        let before = self.backends.len();
        self.backends.retain(|b| *b.id != *backend_id);
        if self.backends.len() == before {
            return false;
        }
        self.positions = self
            .backends
            .iter()
            .enumerate()
            .map(|(at, b)| (Arc::clone(&b.id), at))
            .collect();
        self.restart_round_robin();
        true
    }

    /// The ids of the cluster's backends.
    pub fn backend_ids(&self) -> impl Iterator<Item = &Arc<str>> {
        self.backends.iter().map(|backend| &backend.id)
    }

    /// A lease on the instance for a connect, or why there is none.
    /// Candidates are the instances not in `tried` (the ones this
    /// connection already failed on) of backends of non-zero weight, up or
    /// due for a probe, and below their backend's `max_connections`; the
    /// primaries' among them, or the backups' when no primary instance is
    /// one. A primary in `tried` counts as not usable for this connection,
    /// so a connection that has tried every usable primary falls back to a
    /// backup. A down instance leased here is its probe.
    pub fn pick(
        &mut self,
        now: Instant,
        rng: &mut Rng,
        tried: &[Arc<Instance>],
    ) -> Result<Lease, NoBackend> {
        let refreshed = self
            .backends
            .iter_mut()
            .fold(false, |any, b| b.refresh() | any);
        if refreshed || std::mem::take(&mut self.restart) {
            self.restart_round_robin();
        }
        let mut candidates = std::mem::take(&mut self.candidates);
        let mut full = false;
        let leased = loop {
            full |= self.collect_candidates(now, tried, &mut candidates);
            let chosen = match self.load_balancing {
                LoadBalancing::RoundRobin => self.smooth_round_robin(&candidates),
                LoadBalancing::Random => self.weighted_random(&candidates, rng),
                LoadBalancing::LeastConnections => self.least_connections(&candidates),
                LoadBalancing::PowerOfTwo => self.power_of_two(&candidates, rng),
            };
            let Some((b, i)) = chosen else {
                break Err(if full {
                    NoBackend::Full
                } else {
                    NoBackend::Unavailable
                });
            };
            let backend = &self.backends[b];
            let instance = &backend.instances[i];
            match instance.lease(backend.max_connections, now, self.checks) {
                Some(lease) => break Ok(lease),
                // Another worker took its last place, or its probe, since
                // the candidates were read.
                None => {
                    full |= backend.max_connections != 0
                        && instance.active() >= backend.max_connections;
                    self.passed_over.push(Arc::as_ptr(instance) as usize);
                }
            }
        };
        self.passed_over.clear();
        self.candidates = candidates;
        leased
    }

    /// A lease on the instance at `address` of backend `backend`, for a
    /// connection an upgrade handed over ([`Instance::adopt`]); `None` when
    /// this state has no such instance.
    pub fn adopt(&mut self, backend: &str, address: SocketAddr) -> Option<Lease> {
        let at = *self.positions.get(backend)?;
        let backend = self.backends.get_mut(at)?;
        self.restart |= backend.refresh();
        backend
            .instances
            .iter()
            .find(|instance| instance.address() == address)
            .map(Instance::adopt)
    }

    pub fn proxy_protocol(&self) -> ProxyProtocol {
        self.proxy_protocol
    }

    /// The cluster's active checks, which decide how a client connection's
    /// outcome counts (see `shared::health`).
    pub fn checks(&self) -> Option<Checks> {
        self.checks
    }

    /// No backend at all (not: none usable).
    pub fn is_empty(&self) -> bool {
        self.backends.is_empty()
    }

    /// The cluster's `deny_ja4`.
    pub fn deny_ja4(&self) -> &[Ja4] {
        &self.deny_ja4
    }

    /// Admits one more connection from `ip`, or refuses it when `ip`
    /// already holds `max_connections_per_ip` in this cluster, counted over
    /// every worker (0: no limit). Counts are kept even without a limit, so
    /// that setting one later sees the connections already open.
    /// An IPv6 source is counted per `ipv6_prefix` network.
    pub fn admit_ip(&self, ip: IpAddr) -> Result<IpHold<IpAddr>, Full> {
        let counted = source_key(ip, self.ipv6_prefix);
        self.shared
            .per_ip
            .admit(counted, self.max_connections_per_ip)
    }

    /// Whether `source`, routed here, may use the cluster: its `allow`
    /// and `deny`, then its `connection_rate_per_ip`, counted over every
    /// worker.
    pub fn check_access(&self, source: IpAddr, now: Instant) -> Result<(), Refused> {
        let Some(policy) = &self.access else {
            return Ok(());
        };
        let rates = (self.shared.rates(), |counted| counted);
        access::check(policy, Scope::Cluster, source, rates, now)
    }

    /// Panics when an internal invariant does not hold; for tests and
    /// debug builds.
    pub fn check_invariants(&self) {
        let mut ids = std::collections::HashSet::new();
        let mut current_sum: i64 = 0;
        for backend in &self.backends {
            assert!(ids.insert(&*backend.id), "backend id {} twice", backend.id);
            assert_eq!(
                backend.current.len(),
                backend.instances.len(),
                "{}: one running weight per instance",
                backend.id
            );
            current_sum += backend.current.iter().sum::<i64>();
        }
        // Each round robin pick adds the candidates' total weight to them and
        // takes it back from the one picked; a new set restarts at 0.
        assert_eq!(current_sum, 0, "smooth round robin weights drifted");
        assert!(self.passed_over.is_empty(), "a pick left instances behind");
    }

    /// A new set of backends or instances starts a new round robin cycle,
    /// as nginx does on reload, so that one cycle gives each backend
    /// exactly its weight.
    fn restart_round_robin(&mut self) {
        for backend in &mut self.backends {
            backend.current.iter_mut().for_each(|c| *c = 0);
        }
    }

    /// Fills `out` with the instances `pick` may choose, in order; returns
    /// whether an instance was left out for being full.
    fn collect_candidates(
        &self,
        now: Instant,
        tried: &[Arc<Instance>],
        out: &mut Vec<Candidate>,
    ) -> bool {
        out.clear();
        let mut full = false;
        for backups in [false, true] {
            for (b, backend) in self.backends.iter().enumerate() {
                if backend.backup != backups || backend.weight == 0 {
                    continue;
                }
                for (i, instance) in backend.instances.iter().enumerate() {
                    let skipped = tried.iter().any(|t| Arc::ptr_eq(t, instance))
                        || self.passed_over.contains(&(Arc::as_ptr(instance) as usize))
                        || !instance.usable(now, self.checks);
                    if skipped {
                        continue;
                    }
                    if backend.max_connections != 0 && instance.active() >= backend.max_connections
                    {
                        full = true;
                        continue;
                    }
                    out.push((b, i));
                }
            }
            if !out.is_empty() {
                break;
            }
        }
        full
    }

    fn weight(&self, (b, _): Candidate) -> u32 {
        self.backends[b].weight
    }

    fn active(&self, (b, i): Candidate) -> u32 {
        self.backends[b].instances[i].active()
    }

    /// Which of two candidates is less loaded: fewer active connections
    /// per unit of weight (cross-multiplied, so no float and no division by
    /// a zero weight), then the heavier one. `Less` means `a` is preferred.
    fn lighter(&self, a: Candidate, b: Candidate) -> Ordering {
        let mine = u64::from(self.active(a)) * u64::from(self.weight(b));
        let theirs = u64::from(self.active(b)) * u64::from(self.weight(a));
        mine.cmp(&theirs).then(self.weight(b).cmp(&self.weight(a)))
    }

    /// nginx's smooth weighted round robin: every candidate gains its
    /// weight, the richest is picked and pays the candidates' total. Over
    /// one cycle each instance is picked exactly its weight's share, spread
    /// out rather than in bursts.
    fn smooth_round_robin(&mut self, candidates: &[Candidate]) -> Option<Candidate> {
        let mut total: i64 = 0;
        let mut best: Option<(Candidate, i64)> = None;
        for &(b, i) in candidates {
            let backend = &mut self.backends[b];
            let weight = i64::from(backend.weight);
            let current = &mut backend.current[i];
            *current += weight;
            total += weight;
            if best.is_none_or(|(_, richest)| *current > richest) {
                best = Some(((b, i), *current));
            }
        }
        let ((b, i), _) = best?;
        self.backends[b].current[i] -= total;
        Some((b, i))
    }

    /// Each candidate with probability weight / total weight.
    fn weighted_random(&self, candidates: &[Candidate], rng: &mut Rng) -> Option<Candidate> {
        let total: u64 = candidates.iter().map(|&c| u64::from(self.weight(c))).sum();
        if total == 0 {
            return None;
        }
        let mut ticket = rng.below_u64(total);
        for &candidate in candidates {
            let weight = u64::from(self.weight(candidate));
            if ticket < weight {
                return Some(candidate);
            }
            ticket -= weight;
        }
        // Not reached: `ticket < total`, the sum of the weights walked.
        None
    }

    /// The candidate with the fewest active connections per unit of weight;
    /// ties go to the heavier, then to the first from a start that moves on
    /// each pick.
    fn least_connections(&mut self, candidates: &[Candidate]) -> Option<Candidate> {
        if candidates.is_empty() {
            return None;
        }
        let start = self.cursor % candidates.len();
        let mut best: Option<Candidate> = None;
        for k in 0..candidates.len() {
            let candidate = candidates[(start + k) % candidates.len()];
            if best.is_none_or(|b| self.lighter(candidate, b) == Ordering::Less) {
                best = Some(candidate);
            }
        }
        self.cursor = self.cursor.wrapping_add(1);
        best
    }

    /// Two distinct candidates drawn uniformly; the less loaded wins, as
    /// least_connections compares them (per unit of weight, then the
    /// heavier), then the first drawn. Uniform draws keep it the cheap,
    /// herd-free choice it is meant to be; weights still count through the
    /// comparison, so under load traffic follows them.
    fn power_of_two(&self, candidates: &[Candidate], rng: &mut Rng) -> Option<Candidate> {
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
                Some(if self.lighter(b, a) == Ordering::Less {
                    b
                } else {
                    a
                })
            }
        }
    }
}

#[cfg(test)]
mod tests;
