//! Syscalls per connection: `strace -c -f` attached to a running proxy for
//! a fixed number of short connections, and its summary table parsed into
//! counts per syscall.
//!
//! Owns: starting strace on a PID the bench started (and only that one),
//! stopping it by its own PID with SIGINT so that it writes its summary,
//! and reading that summary. Must never: attach to a process the bench did
//! not start, leave strace running (every exit path stops it), or time
//! anything (strace slows the traced process; only counts are kept).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// One syscall's line of the summary.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Count {
    pub(crate) calls: u64,
    pub(crate) errors: u64,
}

/// strace attached to one process; stopped by [`Tracer::finish`] or on drop.
pub(crate) struct Tracer {
    child: Option<Child>,
}

impl Tracer {
    /// Attaches `strace -c -f` to `pids` (every thread of each), writing
    /// its summary to `out`. Returns once strace has had time to attach.
    pub(crate) fn attach(pids: &[u32], out: &Path) -> Result<Self, String> {
        if pids.is_empty() {
            return Err("no proxy process".to_owned());
        }
        let mut command = Command::new("strace");
        command.args(["-c", "-f", "-qq", "-o"]).arg(out);
        for pid in pids {
            command.args(["-p", &pid.to_string()]);
        }
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("strace: {e} (apt-get install strace)"))?;
        // strace prints nothing on attach with -qq; half a second is ample
        // for it to seize a handful of threads.
        std::thread::sleep(Duration::from_millis(500));
        Ok(Self { child: Some(child) })
    }

    /// Detaches (SIGINT, as strace expects), waits at most 10 s for the
    /// summary, and parses it.
    pub(crate) fn finish(mut self, out: &Path) -> Result<BTreeMap<String, Count>, String> {
        self.stop();
        let text = std::fs::read_to_string(out).map_err(|e| format!("{}: {e}", out.display()))?;
        let counts = parse_summary(&text);
        if counts.is_empty() {
            return Err(format!("{}: no strace summary", out.display()));
        }
        Ok(counts)
    }

    fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        if let Ok(pid) = i32::try_from(child.id()) {
            // SAFETY: kill(2) touches no memory of ours; `pid` is our own
            // unreaped child, so it cannot name another process.
            unsafe { libc::kill(pid, libc::SIGINT) };
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        if matches!(child.try_wait(), Ok(None)) {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Tracer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The rows of an `strace -c` table: `% time, seconds, usecs/call, calls,
/// [errors,] syscall`. The `total` row and the rules are left out.
pub(crate) fn parse_summary(text: &str) -> BTreeMap<String, Count> {
    let mut counts = BTreeMap::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (calls, errors, name) = match fields.as_slice() {
            [_, _, _, calls, name] => (*calls, "0", *name),
            [_, _, _, calls, errors, name] => (*calls, *errors, *name),
            _ => continue,
        };
        let (Ok(calls), Ok(errors)) = (calls.parse::<u64>(), errors.parse::<u64>()) else {
            continue;
        };
        if name == "total" {
            continue;
        }
        counts.insert(name.to_owned(), Count { calls, errors });
    }
    counts
}

/// `name calls/conn (errors)` for the syscalls of one target, largest first.
pub(crate) fn breakdown(per_conn: &[(String, f64, f64)]) -> String {
    let mut rows: Vec<&(String, f64, f64)> = per_conn.iter().filter(|r| r.1 >= 0.005).collect();
    rows.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    rows.iter()
        .map(|(name, calls, errors)| {
            if *errors >= 0.005 {
                format!("{name} {calls:.2} ({errors:.2} err)")
            } else {
                format!("{name} {calls:.2}")
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::{Count, breakdown, parse_summary};

    #[test]
    fn the_summary_rows_are_read_with_and_without_errors() {
        let text = "\
% time     seconds  usecs/call     calls    errors syscall
------ ----------- ----------- --------- --------- ----------------
 40.00    0.000400           4       100        20 recvfrom
 30.00    0.000300           3       100           sendto
  0.00    0.000000           0         3           epoll_wait
------ ----------- ----------- --------- --------- ----------------
100.00    0.001000           4       203        20 total
";
        let counts = parse_summary(text);
        assert_eq!(counts.len(), 3);
        assert_eq!(
            counts["recvfrom"],
            Count {
                calls: 100,
                errors: 20
            }
        );
        assert_eq!(counts["sendto"].errors, 0);
        assert!(!counts.contains_key("total"));
        let rows: Vec<_> = counts
            .iter()
            .map(|(n, c)| (n.clone(), c.calls as f64 / 100.0, c.errors as f64 / 100.0))
            .collect();
        assert_eq!(
            breakdown(&rows),
            "recvfrom 1.00 (0.20 err), sendto 1.00, epoll_wait 0.03"
        );
    }
}
