//! Tests of one cluster's backends as a worker picks them: each
//! algorithm's distribution, backups, drain, `tried`, `max_connections`,
//! health and counts shared with another worker's view of the cluster, a
//! named backend's instances, and a randomized run of picks and releases
//! against the leases held. No proptest in this crate: the randomized
//! tests loop over fixed seeds.

use std::net::SocketAddr;

use super::*;
use crate::shared::health::{FIRST_BACKOFF, PASSIVE_FALL};
use command::backend_address::BackendAddress;
use command::change::HealthCheckSettings;

mod shared;
use crate::shared::instance::{Observed, Source};

const ALL: [LoadBalancing; 4] = [
    LoadBalancing::RoundRobin,
    LoadBalancing::Random,
    LoadBalancing::LeastConnections,
    LoadBalancing::PowerOfTwo,
];

fn cluster(lb: LoadBalancing, max_connections_per_ip: u32) -> ClusterSettings {
    ClusterSettings {
        id: "c".into(),
        load_balancing: lb,
        proxy_protocol: ProxyProtocol::None,
        max_connections_per_ip,
        health_check: None,
        quic: false,
        access: command::change::AccessSettings::default(),
    }
}

fn backend(id: &str, address: &str, weight: u32, backup: bool) -> BackendSettings {
    BackendSettings {
        cluster_id: "c".into(),
        backend_id: id.into(),
        address: BackendAddress::parse(id, address).expect("a test address"),
        weight,
        backup,
        max_connections: 0,
    }
}

/// Health-check settings with these counts.
fn checked(rise: u32, fall: u32) -> Option<HealthCheckSettings> {
    Some(HealthCheckSettings {
        tls: false,
        interval: std::time::Duration::from_secs(2),
        timeout: std::time::Duration::from_secs(1),
        rise,
        fall,
    })
}

/// A cluster of backends `(id, weight, backup)` at ports 9000, 9001, ….
fn with(lb: LoadBalancing, specs: &[(&str, u32, bool)]) -> ClusterBackends {
    let mut c = ClusterBackends::new(&cluster(lb, 0), &Arc::new(Registry::default()));
    for (i, &(id, weight, backup)) in specs.iter().enumerate() {
        let address = format!("127.0.0.1:{}", 9000 + i);
        c.add(&backend(id, &address, weight, backup), Instant::now());
    }
    c.check_invariants();
    c
}

/// Another worker's view of the same cluster.
fn other_worker(c: &ClusterBackends, specs: &[BackendSettings]) -> ClusterBackends {
    let mut other = ClusterBackends::new(
        &cluster(c.load_balancing, c.max_connections_per_ip),
        &c.registry,
    );
    for b in specs {
        other.add(b, Instant::now());
    }
    other
}

/// The (first) instance of backend `id`; out of bounds when there is none.
fn instance(c: &ClusterBackends, id: &str) -> Arc<Instance> {
    let at = c
        .backends
        .iter()
        .position(|b| &*b.id == id)
        .unwrap_or(usize::MAX);
    Arc::clone(&c.backends[at].instances[0])
}

/// Picks `n` times, each connection over at once; the backend ids picked.
fn picks(c: &mut ClusterBackends, now: Instant, rng: &mut Rng, n: usize) -> Vec<String> {
    (0..n)
        .map(|_| {
            let lease = c.pick(now, rng, &[]);
            c.check_invariants();
            lease.map_or_else(|e| format!("{e:?}"), |l| l.instance().backend().to_owned())
        })
        .collect()
}

/// Takes `instance` down with failed client connections.
fn take_down(instance: &Instance, now: Instant) {
    for _ in 0..PASSIVE_FALL {
        let _ = instance.observe(
            Source::Client(None),
            Observed::Failed("refused".into()),
            now,
        );
    }
    assert!(!instance.is_up());
}

fn picks_only(c: &mut ClusterBackends, id: &str) -> bool {
    let mut rng = Rng::new(3);
    picks(c, Instant::now(), &mut rng, 1_000)
        .iter()
        .all(|p| p == id)
}

#[test]
fn smooth_round_robin_gives_nginx_sequence_for_5_1_1() {
    let mut c = with(
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
        let n = 1 + rng.below_u64(6) as usize;
        let ids: Vec<String> = (0..n).map(|i| format!("b{i}")).collect();
        let weights: Vec<u32> = (0..n).map(|_| rng.below_u64(20) as u32).collect();
        let specs: Vec<_> = ids
            .iter()
            .zip(&weights)
            .map(|(id, &w)| (id.as_str(), w, false))
            .collect();
        let mut c = with(LoadBalancing::RoundRobin, &specs);
        let total: u32 = weights.iter().sum();
        if total == 0 {
            assert!(c.pick(now, &mut rng, &[]).is_err(), "seed {seed}");
            continue;
        }
        // Two cycles: the state returns to zero after each.
        for _ in 0..2 {
            let seq = picks(&mut c, now, &mut rng, total as usize);
            for (id, &w) in ids.iter().zip(&weights) {
                let count = seq.iter().filter(|p| *p == id).count();
                assert_eq!(count, w as usize, "seed {seed}, weights {weights:?}");
            }
            assert!(c.backends.iter().all(|b| b.current.iter().all(|&c| c == 0)));
        }
    }
}

#[test]
fn weighted_random_follows_weights() {
    let mut c = with(
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
fn least_connections_picks_the_least_loaded_over_every_worker() {
    let mut c = with(
        LoadBalancing::LeastConnections,
        &[("a", 100, false), ("b", 100, false), ("c", 100, false)],
    );
    let specs: Vec<_> = ["a", "b", "c"]
        .iter()
        .enumerate()
        .map(|(i, id)| backend(id, &format!("127.0.0.1:{}", 9000 + i), 100, false))
        .collect();
    let mut other = other_worker(&c, &specs);
    let (now, mut rng) = (Instant::now(), Rng::new(0));
    // The other worker's connections count here too.
    let mut held: Vec<Lease> = Vec::new();
    for _ in 0..3 {
        held.extend(instance(&other, "a").lease(0, now, None));
    }
    held.extend(instance(&other, "c").lease(0, now, None));
    let lease = c.pick(now, &mut rng, &[]);
    assert_eq!(lease.as_ref().map(|l| l.instance().backend()), Ok("b"));
    held.extend(lease);
    // b and c now tie at 1; a (3) is never the answer until they reach 3.
    for _ in 0..4 {
        let lease = other.pick(now, &mut rng, &[]);
        assert!(lease.as_ref().is_ok_and(|l| l.instance().backend() != "a"));
        held.extend(lease);
    }
    let active: Vec<u32> = ["a", "b", "c"]
        .iter()
        .map(|id| instance(&c, id).active())
        .collect();
    assert_eq!(active, [3, 3, 3]);
    drop(held);
    assert!(
        ["a", "b", "c"]
            .iter()
            .all(|id| instance(&c, id).active() == 0)
    );
}

#[test]
fn least_connections_respects_weights() {
    let mut c = with(
        LoadBalancing::LeastConnections,
        &[("a", 3, false), ("b", 1, false)],
    );
    let (now, mut rng) = (Instant::now(), Rng::new(0));
    let mut held = Vec::new();
    for round in 1..=100 {
        for _ in 0..4 {
            held.extend(c.pick(now, &mut rng, &[]));
        }
        c.check_invariants();
        let active = [instance(&c, "a").active(), instance(&c, "b").active()];
        assert_eq!(active, [3 * round, round]);
    }
}

#[test]
fn least_connections_rotates_ties() {
    let mut c = with(
        LoadBalancing::LeastConnections,
        &[("a", 1, false), ("b", 1, false), ("c", 1, false)],
    );
    let seq = picks(&mut c, Instant::now(), &mut Rng::new(0), 7).concat();
    assert_eq!(seq, "abcabca");
}

#[test]
fn power_of_two_never_picks_the_more_loaded() {
    let now = Instant::now();
    let mut c = with(
        LoadBalancing::PowerOfTwo,
        &[("a", 1, false), ("b", 1, false), ("c", 1, false)],
    );
    let held: Vec<_> = [("b", 1), ("c", 2)]
        .iter()
        .flat_map(|&(id, n)| {
            (0..n)
                .filter_map(|_| instance(&c, id).lease(0, now, None))
                .collect::<Vec<_>>()
        })
        .collect();
    // Pairs {a,b} and {a,c} give a, {b,c} gives b; c always loses.
    let picks = picks(&mut c, now, &mut Rng::new(7), 30_000);
    let share = |id: &str| picks.iter().filter(|p| *p == id).count() as f64 / 30_000.0;
    assert_eq!(share("c"), 0.0);
    assert!((share("a") - 2.0 / 3.0).abs() < 0.02, "{}", share("a"));
    assert!((share("b") - 1.0 / 3.0).abs() < 0.02, "{}", share("b"));
    drop(held);

    // Two candidates: always both drawn, so always the lighter.
    let mut c = with(
        LoadBalancing::PowerOfTwo,
        &[("a", 1, false), ("b", 1, false)],
    );
    let _held = instance(&c, "a").lease(0, now, None);
    assert!(picks_only(&mut c, "b"));
    // Load is per unit of weight: a (weight 4, 2 active) beats b (1, 1).
    let mut c = with(
        LoadBalancing::PowerOfTwo,
        &[("a", 4, false), ("b", 1, false)],
    );
    let _held: Vec<_> = [instance(&c, "a"), instance(&c, "a"), instance(&c, "b")]
        .iter()
        .filter_map(|i| i.lease(0, now, None))
        .collect();
    assert!(picks_only(&mut c, "a"));
}

#[test]
fn backups_only_when_no_primary_is_usable() {
    let t0 = Instant::now();
    for lb in ALL {
        let mut c = with(lb, &[("p1", 1, false), ("k", 100, true), ("p2", 1, false)]);
        let (p1, k, p2) = (instance(&c, "p1"), instance(&c, "k"), instance(&c, "p2"));
        let mut rng = Rng::new(5);
        assert!(
            picks(&mut c, t0, &mut rng, 200).iter().all(|p| p != "k"),
            "{lb:?}"
        );
        // Tried primaries are not usable for this connection.
        let tried = [Arc::clone(&p1), Arc::clone(&p2)];
        let backup = c.pick(t0, &mut rng, &tried);
        assert!(
            backup.is_ok_and(|l| Arc::ptr_eq(l.instance(), &k)),
            "{lb:?}"
        );
        let all = [Arc::clone(&p1), Arc::clone(&p2), Arc::clone(&k)];
        assert_eq!(
            c.pick(t0, &mut rng, &all).err(),
            Some(NoBackend::Unavailable)
        );
        take_down(&p1, t0);
        assert!(
            picks(&mut c, t0, &mut rng, 50).iter().all(|p| p == "p2"),
            "{lb:?}"
        );
        take_down(&p2, t0);
        assert!(
            picks(&mut c, t0, &mut rng, 50).iter().all(|p| p == "k"),
            "{lb:?}"
        );
        // Once a primary is due for its probe, it is usable again.
        let later = t0 + FIRST_BACKOFF;
        let probe = c.pick(later, &mut rng, &[]);
        assert!(
            probe.as_ref().is_ok_and(|l| l.instance().backend() != "k"),
            "{lb:?}"
        );
        c.check_invariants();
    }
}

#[test]
fn weight_zero_is_never_picked() {
    let now = Instant::now();
    for lb in ALL {
        let mut c = with(
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
        let tried = [instance(&c, "a"), instance(&c, "b")];
        assert!(c.pick(now, &mut rng, &tried).is_err(), "{lb:?}");
        // A drained primary is not usable: the backup takes over.
        let mut c = with(
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
fn tried_instances_are_not_picked_again() {
    let now = Instant::now();
    for lb in ALL {
        let mut c = with(lb, &[("a", 1, false), ("b", 50, false), ("c", 3, false)]);
        let mut rng = Rng::new(9);
        for _ in 0..100 {
            let mut tried: Vec<Arc<Instance>> = Vec::new();
            while let Ok(lease) = c.pick(now, &mut rng, &tried) {
                assert!(
                    !tried.iter().any(|t| Arc::ptr_eq(t, lease.instance())),
                    "{lb:?}"
                );
                tried.push(Arc::clone(lease.instance()));
            }
            assert_eq!(tried.len(), 3, "{lb:?}");
            c.check_invariants();
        }
    }
}

#[test]
fn add_again_updates_in_place_and_a_new_address_is_a_new_instance() {
    let now = Instant::now();
    let mut c = with(
        LoadBalancing::RoundRobin,
        &[("a", 1, false), ("b", 1, false)],
    );
    let a = instance(&c, "a");
    take_down(&a, now);
    c.add(&backend("a", "127.0.0.1:9000", 7, true), now);
    assert!(
        Arc::ptr_eq(&instance(&c, "a"), &a),
        "same address: same instance, same health"
    );
    let entry = c
        .backends
        .iter()
        .find(|b| &*b.id == "a")
        .map(|b| (b.weight, b.backup));
    assert_eq!(entry, Some((7, true)));
    c.add(&backend("a", "127.0.0.1:9100", 7, true), now);
    assert!(instance(&c, "a").is_up(), "a new endpoint starts up");
    assert!(c.remove("a") && !c.remove("a"));
    assert!(!c.is_empty() && c.remove("b") && c.is_empty());
    c.check_invariants();
}

#[test]
fn settings_are_read_and_updated() {
    let mut c = with(LoadBalancing::RoundRobin, &[("a", 1, false)]);
    assert_eq!(
        (c.proxy_protocol(), c.checks()),
        (ProxyProtocol::None, None)
    );
    c.update_settings(&ClusterSettings {
        proxy_protocol: ProxyProtocol::Send,
        health_check: checked(4, 5),
        ..cluster(LoadBalancing::LeastConnections, 3)
    });
    assert_eq!(c.proxy_protocol(), ProxyProtocol::Send);
    assert_eq!(c.checks(), Some(Checks { rise: 4, fall: 5 }));
    assert_eq!(c.load_balancing, LoadBalancing::LeastConnections);
    assert_eq!(c.max_connections_per_ip, 3);
}
