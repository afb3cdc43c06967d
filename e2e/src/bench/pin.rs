//! `--pin`: the proxy and the load generator on separate CPUs, where the
//! machine has enough of them. The proxy's processes (every thread) get the
//! last `workers` CPUs this bench may use, the bench itself (its clients
//! and backends, every thread) the others; with no CPU left over (two
//! workers on two CPUs) nothing is pinned and the record says so.
//!
//! Uses `taskset -a -p` (util-linux), which sets the affinity of every
//! thread a process already has; threads started later inherit it.

use std::process::{Command, Stdio};

/// The bench's own CPUs before pinning, restored by [`Pinned::undo`].
#[derive(Debug)]
pub(crate) struct Pinned {
    all: String,
}

/// The CPUs this process may run on, in order.
fn allowed() -> Vec<usize> {
    // SAFETY: `set` is a zeroed `cpu_set_t` owned here, its size passed with
    // it; the kernel only writes into it. CPU_ISSET reads it in bounds.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &raw mut set) != 0 {
            return Vec::new();
        }
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&cpu| libc::CPU_ISSET(cpu, &set))
            .collect()
    }
}

fn list(cpus: &[usize]) -> String {
    cpus.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

fn taskset(cpus: &str, pid: u32) -> Result<(), String> {
    let status = Command::new("taskset")
        .args(["-a", "-p", "-c", cpus, &pid.to_string()])
        .stdout(Stdio::null())
        .status()
        .map_err(|e| format!("taskset: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("taskset -a -p -c {cpus} {pid}: {status}"))
    }
}

/// Pins `proxy` (its PIDs) to the last `workers` allowed CPUs and this
/// process to the rest. `Ok(None)`: not enough CPUs, nothing pinned.
pub(crate) fn apart(proxy: &[u32], workers: usize) -> Result<Option<Pinned>, String> {
    let cpus = allowed();
    if proxy.is_empty() || workers >= cpus.len() {
        return Ok(None);
    }
    let (bench, theirs) = cpus.split_at(cpus.len() - workers);
    let pinned = Pinned { all: list(&cpus) };
    for &pid in proxy {
        taskset(&list(theirs), pid)?;
    }
    taskset(&list(bench), std::process::id())?;
    Ok(Some(pinned))
}

impl Pinned {
    /// Gives this process back every CPU it had (the proxy is stopped
    /// after its measurement anyway).
    pub(crate) fn undo(self) {
        if let Err(e) = taskset(&self.all, std::process::id()) {
            eprintln!("bench: {e}");
        }
    }
}
