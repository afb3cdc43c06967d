//! What `/proc` says about a process: CPU time, resident memory, open
//! descriptors; and the machine's load average.

use std::time::Duration;

/// User and system CPU time of a whole process (all its threads), in clock
/// ticks, from fields 14 and 15 of `/proc/<pid>/stat`.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct CpuTicks {
    pub(crate) user: u64,
    pub(crate) sys: u64,
}

impl CpuTicks {
    /// The ticks spent since `earlier`.
    pub(crate) fn since(self, earlier: CpuTicks) -> CpuTicks {
        CpuTicks {
            user: self.user.saturating_sub(earlier.user),
            sys: self.sys.saturating_sub(earlier.sys),
        }
    }

    /// (user, sys) in seconds.
    pub(crate) fn secs(self) -> (f64, f64) {
        let hz = ticks_per_second() as f64;
        (self.user as f64 / hz, self.sys as f64 / hz)
    }
}

/// `sysconf(_SC_CLK_TCK)` (100 on Linux).
pub(crate) fn ticks_per_second() -> u64 {
    // SAFETY: sysconf reads a constant of the C library; no memory of ours
    // is touched.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u64::try_from(hz).ok().filter(|&hz| hz > 0).unwrap_or(100)
}

/// CPU ticks of process `pid` (`"self"` works through [`self_cpu`]).
pub(crate) fn cpu(pid: u32) -> Result<CpuTicks, String> {
    stat_cpu(&format!("/proc/{pid}/stat"))
}

/// CPU ticks of this process.
pub(crate) fn self_cpu() -> CpuTicks {
    stat_cpu("/proc/self/stat").unwrap_or_default()
}

fn stat_cpu(path: &str) -> Result<CpuTicks, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("read {path}: {e}"))?;
    // The command name (field 2) may hold spaces: fields restart after ')'.
    let rest = text
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .ok_or_else(|| format!("{path}: no ')'"))?;
    // rest starts at field 3 (state): utime is field 14, stime field 15.
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |n: usize| -> Result<u64, String> {
        fields
            .get(n - 3)
            .and_then(|f| f.parse().ok())
            .ok_or_else(|| format!("{path}: field {n} missing"))
    };
    Ok(CpuTicks {
        user: field(14)?,
        sys: field(15)?,
    })
}

/// A `kB` line of `/proc/<pid>/status` (e.g. `VmRSS`), in KiB.
pub(crate) fn status_kib(pid: u32, key: &str) -> Result<u64, String> {
    let path = format!("/proc/{pid}/status");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("read {path}: {e}"))?;
    text.lines()
        .find_map(|line| line.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|value| value.split_whitespace().next()?.parse().ok())
        .ok_or_else(|| format!("{path}: no {key}"))
}

/// A line of `/proc/meminfo` in KiB (0 when absent). Machine-wide: other
/// processes move it too.
pub(crate) fn meminfo_kib(key: &str) -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find_map(|line| line.strip_prefix(key)?.strip_prefix(':'))
                .and_then(|value| value.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}

/// Open descriptors of `pid`.
pub(crate) fn fd_count(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, Iterator::count)
}

/// Pipes among the open descriptors of `pid` (splice uses one pipe, two
/// descriptors, per direction).
pub(crate) fn pipe_fd_count(pid: u32) -> usize {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return 0;
    };
    dir.flatten()
        .filter(|entry| {
            std::fs::read_link(entry.path())
                .is_ok_and(|target| target.to_string_lossy().starts_with("pipe:"))
        })
        .count()
}

/// The 1-minute load average.
pub(crate) fn load1() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|text| text.split_whitespace().next()?.parse().ok())
        .unwrap_or(f64::NAN)
}

/// Waits until `VmRSS` of `pid` stops moving (two reads `step` apart within
/// 1%), at most `bound`; returns the last value.
pub(crate) fn settled_rss(pid: u32, step: Duration, bound: Duration) -> Result<u64, String> {
    let deadline = std::time::Instant::now() + bound;
    let mut last = status_kib(pid, "VmRSS")?;
    loop {
        std::thread::sleep(step);
        let now = status_kib(pid, "VmRSS")?;
        if now.abs_diff(last) * 100 <= last || std::time::Instant::now() >= deadline {
            return Ok(now);
        }
        last = now;
    }
}
