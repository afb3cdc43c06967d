//! Passive health: down after three failed connects, probes with a
//! doubling backoff, and what resets or extends it.

use super::*;

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
