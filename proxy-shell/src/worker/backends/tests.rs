//! Tests of one cluster's backends: each algorithm's distribution, backups,
//! drain, passive health and its backoff, `tried`, stale refs, per-IP
//! counts, and a randomized run of every operation against a model of the
//! open connections. No proptest in this crate: the randomized tests loop
//! over fixed seeds.

use super::*;

mod health;

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
        let n = 1 + rng.below_u64(6) as usize;
        let ids: Vec<String> = (0..n).map(|i| format!("b{i}")).collect();
        let weights: Vec<u32> = (0..n).map(|_| rng.below_u64(20) as u32).collect();
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
        let lb = ALL[rng.below_u64(4) as usize];
        let mut c = ClusterBackends::new(&cluster(lb, 3));
        // The model: every connection started and not yet released.
        let mut open: Vec<BackendRef> = Vec::new();
        let mut ips: Vec<IpAddr> = Vec::new();
        let mut t = t0;
        for step in 0..400 {
            t += Duration::from_millis(rng.below_u64(400));
            match rng.below_u64(9) {
                0 => {
                    let id = format!("b{}", rng.below_u64(6));
                    let spec = backend(
                        &id,
                        9000 + rng.below_u64(3) as u16,
                        rng.below_u64(4) as u32,
                        rng.below_u64(4) == 0,
                    );
                    assert!(c.add(&spec));
                }
                1 => {
                    c.remove(&format!("b{}", rng.below_u64(6)));
                }
                2..=4 => {
                    let tried: Vec<BackendRef> = open
                        .iter()
                        .copied()
                        .take(rng.below_u64(3) as usize)
                        .collect();
                    if let Some(b) = c.pick(t, &mut rng, &tried) {
                        assert!(!tried.contains(&b));
                        let chosen = c.get(b).expect("picked a live backend");
                        assert!(chosen.weight > 0 && chosen.health.usable(t));
                        c.connect_started(b);
                        open.push(b);
                    }
                }
                5 if !open.is_empty() => {
                    let b = open[rng.below_u64(open.len() as u64) as usize];
                    if rng.below_u64(2) == 0 {
                        c.connect_failed(b, t);
                    } else {
                        c.connect_succeeded(b, t);
                    }
                }
                6 if !open.is_empty() => {
                    let b = open.swap_remove(rng.below_u64(open.len() as u64) as usize);
                    c.release(b);
                }
                7 => {
                    let ip = IpAddr::from([10, 0, 0, rng.below_u64(4) as u8]);
                    if c.admit_ip(ip) {
                        ips.push(ip);
                    }
                }
                _ if !ips.is_empty() => {
                    c.release_ip(ips.swap_remove(rng.below_u64(ips.len() as u64) as usize));
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
