//! Named backends (`address = "name:port"`): resolved by the system
//! resolver on a thread of their own, at load and every
//! `resolve_interval`.
//!
//! Owns: the resolver thread, when each name is resolved (a new one at
//! once, then every interval, a failed one again after an interval too),
//! what a result does (the addresses become the backend's instances; a
//! failure, or an answer with no address, keeps the last good set, and is
//! logged and counted in `backend.resolve.errors`), and the first round's
//! end, which `preread start` waits for (bounded) so that a named backend
//! serves from the first connection. Must never: run on a worker thread,
//! block one (workers take the new instances at their next pick), or drop
//! the instances of a name that stopped resolving.

use std::fmt;
use std::io;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use command::backend_address::BackendAddress;
use command::duration::shown_duration;

use super::events::Counters;
use super::registry::{Registry, SharedBackend};

/// The longest the resolver sleeps with nothing due: a new name wakes it
/// at once, this only bounds a missed wake-up.
const IDLE_WAIT: Duration = Duration::from_secs(1);

/// The end of the resolver's first round, which `preread start` waits for.
#[derive(Debug)]
pub struct FirstRound(Receiver<()>);

impl FirstRound {
    /// Waits at most `timeout` for every name of the boot state to have
    /// been tried once; false when the round is still going.
    pub fn wait(&self, timeout: Duration) -> bool {
        !matches!(self.0.recv_timeout(timeout), Err(RecvTimeoutError::Timeout))
    }
}

/// Starts the resolver thread.
pub fn spawn(
    registry: Arc<Registry>,
    counters: Arc<Counters>,
    interval: Duration,
) -> io::Result<FirstRound> {
    let (done, first) = mpsc::channel();
    std::thread::Builder::new()
        .name("preread-resolver".into())
        .spawn(move || {
            let mut done = Some(done);
            loop {
                let next = round(&registry, &counters, interval);
                if let Some(done) = done.take() {
                    // `start` may have stopped waiting: nobody to tell.
                    let _ = done.send(());
                }
                let wait = next.map_or(IDLE_WAIT, |at| {
                    at.saturating_duration_since(Instant::now()).min(IDLE_WAIT)
                });
                registry.wait_for_names(wait);
            }
        })?;
    Ok(FirstRound(first))
}

/// Resolves every name that is due; returns when the next one is.
fn round(registry: &Registry, counters: &Counters, interval: Duration) -> Option<Instant> {
    let mut next: Option<Instant> = None;
    for backend in registry.backends() {
        let BackendAddress::Name { host, port } = backend.address() else {
            continue;
        };
        let now = Instant::now();
        let due = backend.resolution().due.unwrap_or(now);
        if due > now {
            next = Some(next.map_or(due, |n| n.min(due)));
            continue;
        }
        let answer = lookup(host, *port);
        let now = Instant::now();
        let at = now + interval;
        match answer {
            Ok(addresses) => {
                if backend.set_addresses(&addresses, now) {
                    registry.changed();
                    log::info!(
                        "backend {} of {}: {host} resolves to {}",
                        backend.id(),
                        backend.cluster(),
                        shown(&addresses)
                    );
                }
                backend.resolved(None, at);
            }
            Err(error) => {
                counters.resolve_failed();
                log::warn!("{}", failure(&backend, host, *port, &error, interval));
                backend.resolved(Some(format!("cannot resolve {host}: {error}")), at);
            }
        }
        next = Some(next.map_or(at, |n| n.min(at)));
    }
    next
}

/// Why a name gave no address: the operator reads it after `cannot
/// resolve HOST:PORT:`, followed by what the backend does meanwhile.
#[derive(Debug)]
enum LookupError {
    /// The system resolver failed (no such name, no DNS server...).
    Resolver(io::Error),
    /// It answered, with no address.
    NoAddress,
}

impl fmt::Display for LookupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Resolver(error) => error.fmt(f),
            Self::NoAddress => f.write_str("the resolver answered no address"),
        }
    }
}

impl core::error::Error for LookupError {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        match self {
            Self::Resolver(error) => Some(error),
            Self::NoAddress => None,
        }
    }
}

/// The system resolver's addresses for `host`; an answer without any is
/// an error too.
fn lookup(host: &str, port: u16) -> Result<Vec<SocketAddr>, LookupError> {
    let addresses: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .map_err(LookupError::Resolver)?
        .collect();
    if addresses.is_empty() {
        return Err(LookupError::NoAddress);
    }
    Ok(addresses)
}

/// What an operator reads when a name does not resolve.
fn failure(
    backend: &SharedBackend,
    host: &str,
    port: u16,
    error: &LookupError,
    interval: Duration,
) -> String {
    let kept = backend.instances();
    let consequence = if kept.is_empty() {
        "it takes no connection until it resolves".to_owned()
    } else {
        format!(
            "it keeps its last addresses ({})",
            shown(&kept.iter().map(|i| i.address()).collect::<Vec<_>>())
        )
    };
    format!(
        "backend {} of {}: cannot resolve {host}:{port}: {error}; {consequence}, and it is \
         tried again every {} (resolve_interval); the other backends and clusters serve",
        backend.id(),
        backend.cluster(),
        shown_duration(interval)
    )
}

fn shown(addresses: &[SocketAddr]) -> String {
    addresses
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use command::backend_address::BackendAddress;

    use super::{LookupError, lookup, round};
    use crate::shared::events::Counters;
    use crate::shared::registry::Registry;

    #[test]
    fn localhost_resolves_and_a_reserved_name_does_not() {
        let resolved = lookup("localhost", 9001);
        assert!(
            resolved
                .as_ref()
                .is_ok_and(|a| a.iter().all(|a| a.ip().is_loopback() && a.port() == 9001)),
            "{resolved:?}"
        );
        // RFC 6761: `.invalid` never resolves.
        let refused = lookup("nothing.invalid", 9001);
        assert!(
            matches!(refused, Err(LookupError::Resolver(_))),
            "{refused:?}"
        );
        assert_eq!(
            LookupError::NoAddress.to_string(),
            "the resolver answered no address"
        );
    }

    #[test]
    fn a_round_resolves_what_is_due_and_keeps_the_last_good_set() {
        let registry = Registry::default();
        let counters = Counters::default();
        let name = |host: &str| BackendAddress::Name {
            host: host.into(),
            port: 9001,
        };
        let good = registry.backend("c", "good", &name("localhost"), Instant::now());
        let bad = registry.backend("c", "bad", &name("nothing.invalid"), Instant::now());
        let interval = Duration::from_secs(30);
        let next = round(&registry, &counters, interval);
        assert!(next.is_some_and(|at| at > Instant::now()));
        assert!(!good.instances().is_empty());
        assert!(good.resolution().error.is_none());
        assert!(bad.instances().is_empty());
        assert!(
            bad.resolution()
                .error
                .is_some_and(|e| e.contains("nothing.invalid"))
        );
        let before = good.instances();
        round(&registry, &counters, interval);
        assert!(
            Arc::ptr_eq(&before, &good.instances()),
            "nothing was due: no second lookup"
        );
        let series = counters.series(&registry);
        let errors = series
            .iter()
            .find(|s| s.family == "preread_backend_resolve_errors_total");
        assert_eq!(errors.map(|s| s.value), Some(1));
    }
}
