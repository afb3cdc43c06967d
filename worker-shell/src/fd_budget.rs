//! The descriptors a config can need, against the process's limit, once at
//! start.
//!
//! Owns: [`Budget`] (what the config can hold open at once: two sockets per
//! session up to `max_connections`, two kernel pipes per spliced session,
//! the workers' idle pipes, one socket per listener and worker, each
//! worker's poll, and a reserve for the rest), the choice of [`plan`]
//! (enough, raise the soft `RLIMIT_NOFILE` towards the hard one, or short),
//! and [`check`], which carries it out and says so in the log. Must never:
//! lower a limit, fail the start (a short limit only warns: accepts pause
//! and backend sockets fail locally past it, they do not crash), or touch
//! the hard limit.

use std::fmt;

use command::config::GlobalSettings;
use rlimit::Resource;

use crate::worker::pipe_pool::MAX_IDLE_PIPES;

/// Descriptors kept for everything that is no session, listener or pipe:
/// the standard streams, the command socket and its clients, the command
/// server's poll and signal descriptors, the metrics endpoint, state-file
/// saves, an access-log file, and the health checker's poll and checks in
/// flight.
pub const RESERVE: u64 = 64;

/// The descriptors a config can hold open at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// The session cap, counted once for the whole process.
    pub connections: u64,
    pub splice: bool,
    pub workers: u64,
    pub listeners: u64,
}

impl Budget {
    /// The budget of `global` with `listeners` listeners to serve.
    pub fn of(global: &GlobalSettings, listeners: usize) -> Self {
        let workers = global.worker_count.max(1) as u64;
        Self {
            connections: global.max_connections as u64,
            splice: global.splice,
            workers,
            listeners: listeners as u64,
        }
    }

    /// Descriptors one session holds at most: its two sockets, and its two
    /// kernel pipes of two ends each when it splices.
    pub fn per_connection(&self) -> u64 {
        if self.splice { 6 } else { 2 }
    }

    /// Everything but the sessions: idle pipes, listeners, polls, reserve.
    pub fn fixed(&self) -> u64 {
        let idle_pipes = if self.splice {
            2 * MAX_IDLE_PIPES as u64 * self.workers
        } else {
            0
        };
        // Per worker: its poll, its waker and a socket per listener.
        idle_pipes + self.workers * (2 + self.listeners) + RESERVE
    }

    pub fn total(&self) -> u64 {
        self.connections * self.per_connection() + self.fixed()
    }

    /// The session cap that fits in `limit` descriptors.
    pub fn connections_within(&self, limit: u64) -> u64 {
        limit.saturating_sub(self.fixed()) / self.per_connection()
    }
}

impl fmt::Display for Budget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (what, idle) = if self.splice {
            ("2 sockets and 2 splice pipes", ", the idle splice pipes")
        } else {
            ("2 sockets", "")
        };
        write!(
            f,
            "{} per connection ({what}) × max_connections {}, plus {} for {} listener(s) × {} \
             worker(s), the workers' polls{idle} and {RESERVE} in reserve",
            self.per_connection(),
            self.connections,
            self.fixed(),
            self.listeners,
            self.workers,
        )
    }
}

/// What to do about the soft limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plan {
    /// The soft limit covers the budget.
    Enough,
    /// Raise the soft limit to this (the need, or the hard limit if lower).
    Raise(u64),
    /// Even the hard limit is short, and the soft one is at it already.
    Short,
}

/// The plan for needing `need` descriptors under `soft` and `hard` limits.
pub fn plan(need: u64, soft: u64, hard: u64) -> Plan {
    if soft >= need {
        Plan::Enough
    } else if soft < hard {
        Plan::Raise(need.min(hard))
    } else {
        Plan::Short
    }
}

/// Compares `RLIMIT_NOFILE` with what `global` and `listeners` listeners
/// can need; raises the soft limit when that helps, and warns in one line
/// ([`shortage`]) when the limit is still short.
pub fn check(global: &GlobalSettings, listeners: usize) {
    let budget = Budget::of(global, listeners);
    let need = budget.total();
    let (soft, hard) = match Resource::NOFILE.get() {
        Ok(limits) => limits,
        Err(e) => {
            log::warn!("cannot read the descriptor limit (RLIMIT_NOFILE): {e}; not checked");
            return;
        }
    };
    let limit = match plan(need, soft, hard) {
        Plan::Enough => {
            log::debug!("descriptor limit {soft} covers the {need} this config can need");
            return;
        }
        Plan::Raise(to) => match rlimit::increase_nofile_limit(to) {
            Ok(raised) => {
                log::info!(
                    "raised the descriptor limit (RLIMIT_NOFILE) from {soft} to {raised} (hard \
                     limit {hard}): this config can need {need}"
                );
                raised
            }
            Err(e) => {
                log::warn!("cannot raise the descriptor limit from {soft} to {to}: {e}");
                soft
            }
        },
        Plan::Short => soft,
    };
    if limit < need {
        log::warn!("{}", shortage(&budget, limit, hard));
        log::debug!("descriptors this config can need: {budget}");
    }
}

/// The warning for a limit under the budget, in one line: what it means
/// (past how many connections accepting pauses) and what to change.
pub fn shortage(budget: &Budget, limit: u64, hard: u64) -> String {
    let need = budget.total();
    let fits = budget.connections_within(limit);
    format!(
        "the descriptor limit (RLIMIT_NOFILE) is {limit} (hard limit {hard}), enough for \
         {fits} of max_connections {}: past {fits} connections, accepting pauses \
         (tcp.accept.emfile) and backend connects fail here; raise the hard limit to {need} \
         (systemd's LimitNOFILE={need}, `ulimit -Hn {need}`) or set max_connections = {fits}",
        budget.connections
    )
}

#[cfg(test)]
mod tests {
    use command::config::GlobalSettings;

    use super::{Budget, Plan, RESERVE, plan};
    use crate::worker::pipe_pool::MAX_IDLE_PIPES;

    #[test]
    fn the_budget_counts_sockets_pipes_listeners_and_the_reserve() {
        let global = GlobalSettings {
            max_connections: 10_000,
            worker_count: 3,
            splice: true,
            ..GlobalSettings::default()
        };
        let spliced = Budget::of(&global, 2);
        // One cap for the process, whatever the number of workers.
        assert_eq!(spliced.connections, 10_000);
        let idle = 2 * MAX_IDLE_PIPES as u64 * 3;
        assert_eq!(spliced.fixed(), idle + 3 * (2 + 2) + RESERVE);
        assert_eq!(spliced.total(), 6 * 10_000 + spliced.fixed());
        let copied = Budget::of(
            &GlobalSettings {
                splice: false,
                ..global
            },
            2,
        );
        assert_eq!(copied.total(), 2 * 10_000 + 3 * 4 + RESERVE);
        assert_eq!(copied.connections_within(copied.total()), 10_000);
        assert_eq!(copied.connections_within(10), 0);
        let text = spliced.to_string();
        assert!(
            text.starts_with(
                "6 per connection (2 sockets and 2 splice pipes) × max_connections 10000"
            ),
            "{text}"
        );
    }

    #[test]
    fn a_shortage_is_one_line_with_what_fits_and_what_to_change() {
        let budget = Budget::of(
            &GlobalSettings {
                max_connections: 10_000,
                worker_count: 1,
                splice: false,
                ..GlobalSettings::default()
            },
            1,
        );
        let text = super::shortage(&budget, 4096, 4096);
        assert_eq!(
            text,
            "the descriptor limit (RLIMIT_NOFILE) is 4096 (hard limit 4096), enough for 2014 of \
             max_connections 10000: past 2014 connections, accepting pauses (tcp.accept.emfile) \
             and backend connects fail here; raise the hard limit to 20067 (systemd's \
             LimitNOFILE=20067, `ulimit -Hn 20067`) or set max_connections = 2014"
        );
        assert!(!text.contains('\n'));
    }

    #[test]
    fn the_soft_limit_is_raised_only_towards_the_hard_one() {
        assert_eq!(plan(100, 100, 100), Plan::Enough);
        assert_eq!(plan(100, 1024, 4096), Plan::Enough);
        assert_eq!(plan(60_000, 1024, 1 << 20), Plan::Raise(60_000));
        assert_eq!(plan(60_000, 1024, 4096), Plan::Raise(4096));
        assert_eq!(plan(60_000, 4096, 4096), Plan::Short);
    }
}
