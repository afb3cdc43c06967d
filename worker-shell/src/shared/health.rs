//! The health of one backend instance, as a pure state machine fed with
//! what its clients' connections and its active checks observed.
//!
//! Owns: when an instance goes down (after [`PASSIVE_FALL`] failed client
//! connections in a row, or the cluster's `fall` failed checks in a row),
//! when it comes back (one client connection that gets a byte back, its
//! probe, when the cluster has no checks; `rise` passed checks in a row
//! when it has), and the probes of a down instance without checks: one at
//! a time, the first [`FIRST_BACKOFF`] after it went down, each failed one
//! doubling the wait up to [`MAX_BACKOFF`].
//!
//! Must never: do I/O, read a clock (`now` is handed in), or report a
//! transition twice: each [`Change`] is returned by the one call that made
//! it.

use std::time::{Duration, Instant};

/// Client connections failed in a row (a refused connect, a timeout, a
/// backend that closed or reset before its first byte) that take an
/// instance down.
pub const PASSIVE_FALL: u32 = 3;
/// How long a down instance without active checks waits for its first
/// probe.
pub const FIRST_BACKOFF: Duration = Duration::from_secs(1);
/// The longest wait between two probes of a down instance.
pub const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// A cluster's active checks, as far as health is concerned: how many
/// results in a row change the state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Checks {
    /// Passed checks in a row that bring a down instance up.
    pub rise: u32,
    /// Failed checks in a row that take an up instance down.
    pub fall: u32,
}

/// A transition, returned once by the call that made it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// The instance takes connections again.
    Up,
    /// The instance takes no connection (but its probe, without checks).
    Down,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Takes connections; the counts are of failures in a row so far,
    /// each below its threshold.
    Up {
        passive_failures: u32,
        check_failures: u32,
    },
    /// Takes no connection. `check_passes` counts the passed checks in a
    /// row; without checks, `probe_at` is when the next probe may start
    /// and `probing` whether one is in flight.
    Down {
        check_passes: u32,
        backoff: Duration,
        probe_at: Instant,
        probing: bool,
    },
}

/// One instance's health.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Health {
    state: State,
    /// When it went up or down last (its creation, at first).
    since: Instant,
}

impl Health {
    /// A new instance is up: traffic flows until something fails.
    #[must_use]
    pub fn new(now: Instant) -> Self {
        Self {
            state: State::Up {
                passive_failures: 0,
                check_failures: 0,
            },
            since: now,
        }
    }

    #[must_use]
    pub fn is_up(&self) -> bool {
        matches!(self.state, State::Up { .. })
    }

    /// When the current state began.
    #[must_use]
    pub fn since(&self) -> Instant {
        self.since
    }

    /// When a down instance without checks may take its next probe.
    #[must_use]
    pub fn probe_at(&self, checks: Option<Checks>) -> Option<Instant> {
        match self.state {
            State::Down { probe_at, .. } if checks.is_none() => Some(probe_at),
            _ => None,
        }
    }

    /// Whether a client connection may go to this down instance now, as
    /// its probe: never with checks (they decide), one at a time without.
    #[must_use]
    pub fn probe_due(&self, now: Instant, checks: Option<Checks>) -> bool {
        match self.state {
            State::Down {
                probe_at, probing, ..
            } => checks.is_none() && !probing && now >= probe_at,
            State::Up { .. } => false,
        }
    }

    /// Claims the probe of a down instance; false when it is not due or
    /// another is in flight.
    pub fn start_probe(&mut self, now: Instant, checks: Option<Checks>) -> bool {
        if !self.probe_due(now, checks) {
            return false;
        }
        if let State::Down { probing, .. } = &mut self.state {
            *probing = true;
        }
        true
    }

    /// A probe ended without an outcome (its client left): the next one
    /// may start.
    pub fn abandon_probe(&mut self) {
        if let State::Down { probing, .. } = &mut self.state {
            *probing = false;
        }
    }

    /// What a client connection observed: `passed` when the backend sent
    /// a byte, not when it failed before one.
    pub fn passive(
        &mut self,
        passed: bool,
        now: Instant,
        checks: Option<Checks>,
    ) -> Option<Change> {
        match &mut self.state {
            State::Up {
                passive_failures, ..
            } => {
                if passed {
                    *passive_failures = 0;
                    return None;
                }
                *passive_failures += 1;
                (*passive_failures >= PASSIVE_FALL).then(|| self.go_down(now))
            }
            // With checks, only they bring an instance back: a connection
            // seen now was opened before it went down.
            State::Down { .. } if checks.is_some() => None,
            State::Down { .. } if passed => Some(self.go_up(now)),
            State::Down {
                backoff,
                probe_at,
                probing,
                ..
            } => {
                // A failure before the probe was due is a connection opened
                // before the instance went down: it adds nothing. A later
                // one is the probe's (or stands in for it).
                if now >= *probe_at {
                    *backoff = (*backoff * 2).min(MAX_BACKOFF);
                    *probe_at = now + *backoff;
                    *probing = false;
                }
                None
            }
        }
    }

    /// What an active check observed.
    pub fn checked(&mut self, passed: bool, now: Instant, checks: Checks) -> Option<Change> {
        match &mut self.state {
            State::Up { check_failures, .. } => {
                if passed {
                    *check_failures = 0;
                    return None;
                }
                *check_failures += 1;
                (*check_failures >= checks.fall).then(|| self.go_down(now))
            }
            State::Down { check_passes, .. } => {
                if !passed {
                    *check_passes = 0;
                    return None;
                }
                *check_passes += 1;
                (*check_passes >= checks.rise).then(|| self.go_up(now))
            }
        }
    }

    /// Panics when an internal invariant does not hold; for tests.
    pub fn check_invariants(&self, checks: Option<Checks>) {
        match self.state {
            State::Up {
                passive_failures,
                check_failures,
            } => {
                assert!(passive_failures < PASSIVE_FALL, "up past the passive fall");
                if let Some(checks) = checks {
                    assert!(check_failures < checks.fall, "up past the fall");
                }
            }
            State::Down {
                check_passes,
                backoff,
                ..
            } => {
                assert!(
                    (FIRST_BACKOFF..=MAX_BACKOFF).contains(&backoff),
                    "a backoff of {backoff:?}"
                );
                if let Some(checks) = checks {
                    assert!(check_passes < checks.rise, "down past the rise");
                }
            }
        }
    }

    fn go_down(&mut self, now: Instant) -> Change {
        self.state = State::Down {
            check_passes: 0,
            backoff: FIRST_BACKOFF,
            probe_at: now + FIRST_BACKOFF,
            probing: false,
        };
        self.since = now;
        Change::Down
    }

    fn go_up(&mut self, now: Instant) -> Change {
        self.state = State::Up {
            passive_failures: 0,
            check_failures: 0,
        };
        self.since = now;
        Change::Up
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::{Change, Checks, FIRST_BACKOFF, Health, MAX_BACKOFF, PASSIVE_FALL};

    const CHECKS: Checks = Checks { rise: 2, fall: 3 };

    fn fail_passively(health: &mut Health, now: Instant, checks: Option<Checks>) -> Option<Change> {
        let mut last = None;
        for _ in 0..PASSIVE_FALL {
            last = health.passive(false, now, checks);
        }
        last
    }

    #[test]
    fn passive_failures_in_a_row_take_it_down_and_a_byte_resets_them() {
        let t = Instant::now();
        let mut health = Health::new(t);
        for _ in 1..PASSIVE_FALL {
            assert_eq!(health.passive(false, t, None), None);
        }
        assert_eq!(
            health.passive(true, t, None),
            None,
            "a byte resets the count"
        );
        for _ in 1..PASSIVE_FALL {
            assert_eq!(health.passive(false, t, None), None);
        }
        let later = t + Duration::from_secs(1);
        assert_eq!(health.passive(false, later, None), Some(Change::Down));
        assert!(!health.is_up());
        assert_eq!(health.since(), later);
        health.check_invariants(None);
    }

    #[test]
    fn without_checks_one_probe_at_a_time_with_a_doubling_backoff() {
        let mut t = Instant::now();
        let mut health = Health::new(t);
        assert_eq!(fail_passively(&mut health, t, None), Some(Change::Down));
        let mut backoff = FIRST_BACKOFF;
        for expected in [2, 4, 8, 16, 32, 60, 60] {
            assert!(!health.probe_due(t + backoff - Duration::from_millis(1), None));
            t += backoff;
            assert!(health.start_probe(t, None), "due");
            assert!(!health.start_probe(t + MAX_BACKOFF, None), "one at a time");
            t += Duration::from_millis(300);
            assert_eq!(health.passive(false, t, None), None, "no transition");
            backoff = Duration::from_secs(expected);
            assert_eq!(health.probe_at(None), Some(t + backoff));
            health.check_invariants(None);
        }
        t += backoff;
        assert!(health.start_probe(t, None));
        health.abandon_probe();
        assert!(
            health.start_probe(t, None),
            "an abandoned probe frees the next"
        );
        assert_eq!(health.passive(true, t, None), Some(Change::Up));
        assert!(health.is_up() && health.since() == t);
    }

    #[test]
    fn a_failure_before_the_probe_is_due_is_a_straggler() {
        let t = Instant::now();
        let mut health = Health::new(t);
        fail_passively(&mut health, t, None);
        let early = t + FIRST_BACKOFF / 2;
        assert_eq!(health.passive(false, early, None), None);
        assert_eq!(
            health.probe_at(None),
            Some(t + FIRST_BACKOFF),
            "the backoff did not move"
        );
    }

    #[test]
    fn checks_fall_and_rise_in_a_row() {
        let t = Instant::now();
        let mut health = Health::new(t);
        assert_eq!(health.checked(false, t, CHECKS), None);
        assert_eq!(health.checked(false, t, CHECKS), None);
        assert_eq!(health.checked(true, t, CHECKS), None, "a pass resets");
        for _ in 1..CHECKS.fall {
            assert_eq!(health.checked(false, t, CHECKS), None);
        }
        assert_eq!(health.checked(false, t, CHECKS), Some(Change::Down));
        health.check_invariants(Some(CHECKS));
        assert_eq!(health.checked(true, t, CHECKS), None);
        assert_eq!(health.checked(false, t, CHECKS), None, "a failure resets");
        assert_eq!(health.checked(true, t, CHECKS), None);
        assert_eq!(health.checked(true, t, CHECKS), Some(Change::Up));
        health.check_invariants(Some(CHECKS));
    }

    #[test]
    fn with_checks_clients_never_probe_and_only_checks_bring_it_up() {
        let t = Instant::now();
        let mut health = Health::new(t);
        assert_eq!(
            fail_passively(&mut health, t, Some(CHECKS)),
            Some(Change::Down),
            "passive failures take it down with checks too"
        );
        let late = t + MAX_BACKOFF;
        assert!(!health.probe_due(late, Some(CHECKS)));
        assert!(!health.start_probe(late, Some(CHECKS)));
        assert_eq!(health.probe_at(Some(CHECKS)), None);
        assert_eq!(health.passive(true, late, Some(CHECKS)), None);
        assert!(!health.is_up());
        assert_eq!(health.checked(true, late, CHECKS), None);
        assert_eq!(health.checked(true, late, CHECKS), Some(Change::Up));
    }
}
