//! The kernel pipe memory a config sets aside, against its user's
//! `fs.pipe-user-pages-soft`, once at start.
//!
//! Owns: [`PipeBudget`] (the pipe bytes the config holds beyond what each
//! spliced session takes: the workers' idle pipes and the grown pipes of
//! `splice_bulk_budget`), [`shortage`] (the warning when an unprivileged
//! process's soft limit does not cover it) and [`check`], which reads the
//! sysctl and the process's capabilities and logs. Why: the kernel counts
//! every pipe's whole size against its user, and past the soft limit it
//! refuses to grow a pipe and gives every new one 2 pages, so a budget
//! past the limit would shrink the pipes of every spliced session.
//!
//! Must never: fail the start or change a limit (smaller pipes still
//! splice), or warn a process the limit does not apply to (one with
//! `CAP_SYS_RESOURCE` or `CAP_SYS_ADMIN`).

use std::fmt;

use command::config::GlobalSettings;

use crate::worker::pipe_pool::{KERNEL_PIPE_SIZE, idle_pipes};

/// Where the kernel says how many pages of pipes a user may hold.
const SOFT_LIMIT: &str = "/proc/sys/fs/pipe-user-pages-soft";

/// Capability bits (`CapEff` in `/proc/self/status`) that lift the limit.
const CAP_SYS_ADMIN: u32 = 21;
const CAP_SYS_RESOURCE: u32 = 24;

/// The pipe bytes a config sets aside.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PipeBudget {
    /// The workers' idle pipes at most.
    pub idle: u64,
    /// The grown pipes at most (`splice_bulk_budget`, rounded down to
    /// whole pipes of `splice_bulk_pipe_size`).
    pub grown: u64,
}

impl PipeBudget {
    /// What `global` sets aside; nothing without `splice`.
    pub fn of(global: &GlobalSettings) -> Self {
        if !global.splice {
            return Self { idle: 0, grown: 0 };
        }
        let size = global.splice_pipe_size.unwrap_or(KERNEL_PIPE_SIZE);
        let per_worker = idle_pipes(global.splice_pipe_size) * size;
        let grown = global.bulk_pipe_slots() * global.splice_bulk_pipe_size;
        Self {
            idle: (per_worker * global.worker_count.max(1)) as u64,
            grown: grown as u64,
        }
    }

    pub fn total(&self) -> u64 {
        self.idle + self.grown
    }
}

/// An unprivileged process's soft limit that does not cover its
/// [`PipeBudget`]: the warning, written by [`fmt::Display`] in one line
/// that says what it means and what to change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shortage {
    budget: PipeBudget,
    soft_pages: u64,
    page: u64,
}

/// The shortage of a soft limit of `soft_pages` pages of `page` bytes
/// (0: no limit) against `budget`, if there is one.
pub fn shortage(budget: &PipeBudget, soft_pages: u64, page: u64) -> Option<Shortage> {
    let limit = soft_pages.saturating_mul(page);
    (soft_pages != 0 && budget.total() > limit).then_some(Shortage {
        budget: *budget,
        soft_pages,
        page,
    })
}

impl fmt::Display for Shortage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Self {
            budget,
            soft_pages,
            page,
        } = self;
        write!(
            f,
            "fs.pipe-user-pages-soft is {soft_pages} pages ({} bytes), less than the {} bytes \
             of kernel pipes this config sets aside ({} for the workers' idle pipes, {} for \
             splice_bulk_budget): past it the kernel refuses to grow a bulk transfer's pipe and \
             gives every new pipe 2 pages; raise fs.pipe-user-pages-soft to {} pages (twice that, \
             so that the sessions' own pipes fit too), or lower splice_bulk_budget, worker_count \
             or splice_pipe_size",
            soft_pages.saturating_mul(*page),
            budget.total(),
            budget.idle,
            budget.grown,
            budget.total().div_ceil((*page).max(1)) * 2,
        )
    }
}

/// Whether the effective capabilities of `/proc/self/status`'s text
/// `status` lift the pipe limit; `false` when it does not say.
pub fn privileged(status: &str) -> bool {
    status
        .lines()
        .find_map(|line| line.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .is_some_and(|caps| caps & (1 << CAP_SYS_ADMIN | 1 << CAP_SYS_RESOURCE) != 0)
}

/// Compares what `global` sets aside with the user's soft pipe limit and
/// warns when an unprivileged process's limit is short.
pub fn check(global: &GlobalSettings) {
    let budget = PipeBudget::of(global);
    if budget.total() == 0 {
        return;
    }
    if std::fs::read_to_string("/proc/self/status").is_ok_and(|status| privileged(&status)) {
        log::debug!("pipe limit not checked: the process may exceed fs.pipe-user-pages-soft");
        return;
    }
    let soft = match std::fs::read_to_string(SOFT_LIMIT) {
        Ok(text) => match text.trim().parse::<u64>() {
            Ok(pages) => pages,
            Err(e) => {
                log::debug!("{SOFT_LIMIT} holds {text:?}: {e}; not checked");
                return;
            }
        },
        Err(e) => {
            log::debug!("cannot read {SOFT_LIMIT}: {e}; not checked");
            return;
        }
    };
    // SAFETY: sysconf reads a constant of the system; no memory is touched.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    let page = u64::try_from(page).ok().filter(|&p| p > 0).unwrap_or(4096);
    if let Some(warning) = shortage(&budget, soft, page) {
        log::warn!("{warning}");
    }
}

#[cfg(test)]
mod tests {
    use command::config::GlobalSettings;

    use super::{PipeBudget, privileged, shortage};

    #[test]
    fn the_defaults_fit_the_kernels_default_limit() {
        let budget = PipeBudget::of(&GlobalSettings::default());
        // 64 idle pipes of 64 KiB, and 32 grown ones of 1 MiB.
        assert_eq!(budget.idle, 64 * 64 * 1024);
        assert_eq!(budget.grown, 32 << 20);
        assert_eq!(shortage(&budget, 16_384, 4096), None);
    }

    #[test]
    fn a_budget_past_the_limit_says_what_to_change() {
        let global = GlobalSettings {
            splice_bulk_budget: 64 << 20,
            ..GlobalSettings::default()
        };
        let budget = PipeBudget::of(&global);
        let warning = shortage(&budget, 16_384, 4096)
            .expect("68 MiB > 64 MiB")
            .to_string();
        assert!(warning.contains("splice_bulk_budget"), "{warning}");
        assert!(warning.contains("fs.pipe-user-pages-soft"), "{warning}");
        // No limit at all, or one that covers it.
        assert_eq!(shortage(&budget, 0, 4096), None);
        assert_eq!(shortage(&budget, 1 << 20, 4096), None);
    }

    /// The shared cap of grown pipes and this check reckon one budget:
    /// whole pipes of `splice_bulk_pipe_size`, none when pipes never grow.
    #[test]
    fn the_grown_budget_is_whole_pipes_and_none_without_growth() {
        let global = GlobalSettings {
            splice_bulk_budget: (5 << 20) + 1,
            ..GlobalSettings::default()
        };
        assert_eq!(global.bulk_pipe_slots(), 5);
        assert_eq!(PipeBudget::of(&global).grown, 5 << 20);
        let never = GlobalSettings {
            splice_bulk_pipe_size: 0,
            ..global
        };
        assert_eq!(never.bulk_pipe_slots(), 0);
        assert_eq!(PipeBudget::of(&never).grown, 0);
    }

    #[test]
    fn without_splice_nothing_is_set_aside() {
        let global = GlobalSettings {
            splice: false,
            ..GlobalSettings::default()
        };
        assert_eq!(PipeBudget::of(&global).total(), 0);
    }

    #[test]
    fn the_capabilities_that_lift_the_limit() {
        let status = |caps: &str| format!("Name:\tpreread\nCapInh:\t0\nCapEff:\t{caps}\n");
        assert!(privileged(&status("000001ffffffffff")), "root");
        assert!(privileged(&status("0000000001000000")), "CAP_SYS_RESOURCE");
        assert!(privileged(&status("0000000000200000")), "CAP_SYS_ADMIN");
        assert!(
            !privileged(&status("0000000000000400")),
            "CAP_NET_BIND_SERVICE"
        );
        assert!(!privileged("Name:\tpreread\n"), "not said");
        assert!(!privileged(&status("zz")), "not hex");
    }
}
