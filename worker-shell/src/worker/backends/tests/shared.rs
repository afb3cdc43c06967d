//! What a worker's view of a cluster shares with every other worker's:
//! instance health (a down instance skipped at once, one probe for the
//! process), `max_connections` and per-IP counts, a named backend's
//! instances, and the counts left exact by random picks and releases.

use super::*;

#[test]
fn with_nothing_up_the_answer_is_unavailable_at_once() {
    let now = Instant::now();
    let mut c = with(
        LoadBalancing::RoundRobin,
        &[("a", 1, false), ("b", 1, false)],
    );
    c.update_settings(&ClusterSettings {
        health_check: checked(2, 3),
        ..cluster(LoadBalancing::RoundRobin, 0)
    });
    take_down(&instance(&c, "a"), now);
    take_down(&instance(&c, "b"), now);
    // With checks, a down backend takes no probe however long it waits.
    let much_later = now + FIRST_BACKOFF * 100;
    assert_eq!(
        c.pick(much_later, &mut Rng::new(0), &[]).err(),
        Some(NoBackend::Unavailable)
    );
}

#[test]
fn max_connections_is_counted_over_every_worker() {
    let now = Instant::now();
    let limited = BackendSettings {
        max_connections: 2,
        ..backend("a", "127.0.0.1:9000", 1, false)
    };
    let backup = backend("k", "127.0.0.1:9001", 1, true);
    let mut c = ClusterBackends::new(
        &cluster(LoadBalancing::RoundRobin, 0),
        &Arc::new(Registry::default()),
    );
    c.add(&limited, now);
    let mut other = other_worker(&c, std::slice::from_ref(&limited));
    let mut rng = Rng::new(0);
    let first = c.pick(now, &mut rng, &[]);
    let second = other.pick(now, &mut rng, &[]);
    assert!(first.is_ok() && second.is_ok());
    assert_eq!(c.pick(now, &mut rng, &[]).err(), Some(NoBackend::Full));
    assert_eq!(other.pick(now, &mut rng, &[]).err(), Some(NoBackend::Full));
    // A full primary is not usable: the backup takes over.
    c.add(&backup, now);
    assert!(
        c.pick(now, &mut rng, &[])
            .is_ok_and(|l| l.instance().backend() == "k")
    );
    drop(first);
    assert!(
        other
            .pick(now, &mut rng, &[])
            .is_ok_and(|l| l.instance().backend() == "a")
    );
    drop(second);
    assert_eq!(instance(&c, "a").active(), 0);
}

#[test]
fn a_down_instance_is_skipped_by_every_worker_at_once() {
    let now = Instant::now();
    let specs = [
        backend("a", "127.0.0.1:9000", 1, false),
        backend("b", "127.0.0.1:9001", 1, false),
    ];
    let mut c = with(
        LoadBalancing::RoundRobin,
        &[("a", 1, false), ("b", 1, false)],
    );
    let mut other = other_worker(&c, &specs);
    take_down(&instance(&c, "a"), now);
    assert!(
        picks(&mut other, now, &mut Rng::new(0), 20)
            .iter()
            .all(|p| p == "b")
    );
    // One probe for the whole process, whichever worker takes it.
    let due = now + FIRST_BACKOFF;
    let tried = [instance(&c, "b")];
    let probe = c.pick(due, &mut Rng::new(0), &tried);
    assert!(probe.as_ref().is_ok_and(|l| l.instance().backend() == "a"));
    assert_eq!(
        other.pick(due, &mut Rng::new(0), &tried).err(),
        Some(NoBackend::Unavailable)
    );
    drop(probe);
    assert!(
        other.pick(due, &mut Rng::new(0), &tried).is_ok(),
        "an abandoned probe frees the next"
    );
}

#[test]
fn a_named_backend_takes_each_resolution_and_keeps_known_addresses() {
    let now = Instant::now();
    let registry = Arc::new(Registry::default());
    let mut c = ClusterBackends::new(&cluster(LoadBalancing::RoundRobin, 0), &registry);
    c.add(&backend("db", "db.internal:5432", 1, false), now);
    let mut rng = Rng::new(0);
    assert_eq!(
        c.pick(now, &mut rng, &[]).err(),
        Some(NoBackend::Unavailable),
        "not resolved yet"
    );
    let shared = registry.backend(
        "c",
        "db",
        &command::backend_address::BackendAddress::Name {
            host: "db.internal".into(),
            port: 5432,
        },
        now,
    );
    let address = |last: u8| SocketAddr::from(([10, 0, 0, last], 5432));
    assert!(shared.set_addresses(&[address(2), address(1)], now));
    let seen: Vec<SocketAddr> = (0..4)
        .filter_map(|_| c.pick(now, &mut rng, &[]).ok())
        .map(|l| l.instance().address())
        .collect();
    assert_eq!(
        seen,
        [address(1), address(2), address(1), address(2)],
        "each address an instance"
    );
    let kept = Arc::clone(&shared.instances()[1]);
    take_down(&kept, now);
    assert!(shared.set_addresses(&[address(2), address(3)], now));
    assert!(
        !shared.set_addresses(&[address(3), address(2)], now),
        "the same set"
    );
    let instances = shared.instances();
    assert!(
        Arc::ptr_eq(&instances[0], &kept) && !instances[0].is_up(),
        "its health stays"
    );
    let seen: Vec<SocketAddr> = (0..3)
        .filter_map(|_| c.pick(now, &mut rng, &[]).ok())
        .map(|l| l.instance().address())
        .collect();
    assert_eq!(seen, [address(3); 3], "the down one is skipped");
    c.check_invariants();
}

#[test]
fn per_ip_counts_are_shared_by_every_worker_and_return_to_zero() {
    let registry = Arc::new(Registry::default());
    let c = ClusterBackends::new(&cluster(LoadBalancing::RoundRobin, 2), &registry);
    let other = ClusterBackends::new(&cluster(LoadBalancing::RoundRobin, 2), &registry);
    let ip: IpAddr = [10, 0, 0, 1].into();
    let first = c.admit_ip(ip);
    let second = other.admit_ip(ip);
    assert!(first.is_ok() && second.is_ok());
    assert!(c.admit_ip(ip).is_err() && other.admit_ip(ip).is_err());
    assert!(c.admit_ip([10, 0, 0, 2].into()).is_ok());
    drop(first);
    assert!(other.admit_ip(ip).is_ok());
    drop(second);
    assert!(registry.cluster("c").per_ip.is_empty());
}

#[test]
fn random_picks_and_releases_keep_every_count_exact() {
    let now = Instant::now();
    for seed in 0..50 {
        let mut rng = Rng::new(seed);
        let lb = ALL[rng.below_u64(4) as usize];
        let mut c = with(lb, &[("a", 1, false), ("b", 3, false), ("k", 1, true)]);
        let mut held: Vec<Lease> = Vec::new();
        for _ in 0..300 {
            match rng.below_u64(4) {
                0 | 1 => held.extend(c.pick(now, &mut rng, &[])),
                2 if !held.is_empty() => {
                    let at = rng.below_u64(held.len() as u64) as usize;
                    drop(held.swap_remove(at));
                }
                _ => {
                    let id = ["a", "b"][rng.below_u64(2) as usize];
                    c.remove(id);
                    c.add(
                        &backend(
                            id,
                            &format!("127.0.0.1:{}", 9000 + usize::from(id == "b")),
                            1 + 2 * u32::from(id == "b"),
                            false,
                        ),
                        now,
                    );
                }
            }
            c.check_invariants();
            for id in ["a", "b", "k"] {
                let instance = instance(&c, id);
                let leases = held
                    .iter()
                    .filter(|l| Arc::ptr_eq(l.instance(), &instance))
                    .count();
                assert_eq!(instance.active() as usize, leases, "seed {seed}: {id}");
            }
        }
    }
}
