//! Active health checks: every instance of every cluster with a
//! `health_check`, checked every `interval` on a thread of its own, all
//! checks in flight at once on one mio poll.
//!
//! Owns: the checker thread, the schedule (an instance is checked at once
//! when it appears, then `interval` after each check started, never two at
//! a time), each check's `timeout`, feeding each result to the instance's
//! health (where every worker reads it at once), and the ClientHello of
//! each TLS cluster, built once per SNI. Must never: block (every socket is
//! non-blocking), run on a worker thread, keep checking an instance the
//! state no longer holds, or blame a backend for this host's shortage (a
//! check that could not open its socket is no result).

mod hello;
mod probe;

use std::collections::HashMap;
use std::io;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::{Events, Poll, Token};
use slab::Slab;

use super::events::Counters;
use super::instance::{Instance, Observed, Source};
use super::registry::{CheckPlan, Registry};
use crate::shared::shortage::{ShortageLog, is_local};
use hello::{HelloError, client_hello};
use probe::{Checked, Probe};

/// The longest the checker sleeps: it looks for changes of the registry
/// (new backends, new addresses, new checks) at least this often.
const MAX_SLEEP: Duration = Duration::from_millis(100);

/// One instance the checker checks.
#[derive(Debug)]
struct Target {
    instance: Arc<Instance>,
    plan: Arc<CheckPlan>,
    /// When its next check starts.
    next: Instant,
    /// A check is in flight.
    probing: bool,
    /// The registry no longer lists it: dropped when its check ends.
    retired: bool,
}

/// Starts the checker thread.
pub fn spawn(registry: Arc<Registry>, counters: Arc<Counters>) -> io::Result<()> {
    let poll = Poll::new()?;
    let mut checker = Checker {
        poll,
        registry,
        counters,
        targets: HashMap::new(),
        probes: Slab::new(),
        seen: None,
        hellos: HashMap::new(),
        shortage: ShortageLog::default(),
    };
    std::thread::Builder::new()
        .name("preread-checker".into())
        .spawn(move || checker.run())?;
    Ok(())
}

struct Checker {
    poll: Poll,
    registry: Arc<Registry>,
    counters: Arc<Counters>,
    /// By the instance's address in memory: the `Arc` held here keeps it
    /// unique.
    targets: HashMap<usize, Target>,
    probes: Slab<Probe>,
    /// The registry version `targets` was taken from.
    seen: Option<u64>,
    /// ClientHellos by SNI (`None`: without SNI, which names no server).
    hellos: HashMap<Option<String>, Arc<[u8]>>,
    /// Keeps the warnings about checks this host could not run few.
    shortage: ShortageLog,
}

impl Checker {
    fn run(&mut self) {
        let mut events = Events::with_capacity(256);
        loop {
            let now = Instant::now();
            self.refresh(now);
            self.start_due(now);
            let wake = self
                .targets
                .values()
                .filter(|t| !t.probing && !t.retired)
                .map(|t| t.next)
                .chain(self.probes.iter().map(|(_, p)| p.deadline))
                .min()
                .map_or(MAX_SLEEP, |at| {
                    at.saturating_duration_since(Instant::now()).min(MAX_SLEEP)
                });
            if let Err(e) = self.poll.poll(&mut events, Some(wake)) {
                if e.kind() != io::ErrorKind::Interrupted {
                    log::error!("the health checker's poll failed, checks stop: {e}");
                    return;
                }
            }
            for event in &events {
                let Token(key) = event.token();
                let result = self.probes.get_mut(key).and_then(Probe::advance);
                if let Some(result) = result {
                    self.finish(key, result);
                }
            }
            let now = Instant::now();
            let expired: Vec<usize> = self
                .probes
                .iter()
                .filter(|(_, p)| p.deadline <= now)
                .map(|(key, _)| key)
                .collect();
            for key in expired {
                let why = self.probes.get(key).map(|probe| {
                    let timeout = self
                        .targets
                        .get(&probe.target)
                        .map_or(Duration::ZERO, |t| t.plan.timeout);
                    probe.timed_out(timeout)
                });
                if let Some(why) = why {
                    self.finish(key, Checked::Failed(why));
                }
            }
        }
    }

    /// Takes the registry's list again when it changed: new instances are
    /// due at once, known ones keep their schedule, gone ones are dropped
    /// (a check in flight ends as usual, and is dropped then).
    fn refresh(&mut self, now: Instant) {
        let version = self.registry.version();
        if self.seen == Some(version) {
            return;
        }
        self.seen = Some(version);
        let mut targets = HashMap::new();
        for (plan, backends) in self.registry.checked() {
            let plan = Arc::new(plan);
            for backend in backends {
                for instance in backend.instances().iter() {
                    let key = Arc::as_ptr(instance) as usize;
                    let (next, probing) = self
                        .targets
                        .remove(&key)
                        .map_or((now, false), |old| (old.next, old.probing));
                    targets.insert(
                        key,
                        Target {
                            instance: Arc::clone(instance),
                            plan: Arc::clone(&plan),
                            next,
                            probing,
                            retired: false,
                        },
                    );
                }
            }
        }
        // Instances still being checked stay until their check ends.
        for (key, target) in self.targets.drain() {
            if target.probing {
                targets.entry(key).or_insert(Target {
                    retired: true,
                    ..target
                });
            }
        }
        self.targets = targets;
    }

    fn start_due(&mut self, now: Instant) {
        let due: Vec<usize> = self
            .targets
            .iter()
            .filter(|(_, t)| !t.probing && !t.retired && t.next <= now)
            .map(|(key, _)| *key)
            .collect();
        for key in due {
            let Some(target) = self.targets.get_mut(&key) else {
                continue;
            };
            target.probing = true;
            target.next = now + target.plan.interval;
            let (address, plan) = (target.instance.address(), Arc::clone(&target.plan));
            let hello = match plan.tls {
                true => match self.hello(plan.sni.as_deref(), address.ip()) {
                    Ok(hello) => Some(hello),
                    Err(why) => {
                        self.result(key, Checked::Failed(why.to_string()));
                        continue;
                    }
                },
                false => None,
            };
            let token = Token(self.probes.vacant_key());
            match Probe::start(
                self.poll.registry(),
                token,
                key,
                address,
                hello,
                now + plan.timeout,
            ) {
                Ok(probe) => {
                    self.probes.insert(probe);
                }
                Err(e) => {
                    let why = format!("connect to {address} failed: {e}");
                    let checked = if is_local(&e) {
                        Checked::Local(why)
                    } else {
                        Checked::Failed(why)
                    };
                    self.result(key, checked);
                }
            }
        }
    }

    /// The ClientHello for `sni`, built on its first use.
    fn hello(&mut self, sni: Option<&str>, ip: IpAddr) -> Result<Arc<[u8]>, HelloError> {
        let key = sni.map(str::to_owned);
        if let Some(hello) = self.hellos.get(&key) {
            return Ok(Arc::clone(hello));
        }
        let built: Arc<[u8]> = client_hello(sni, ip)?.into();
        self.hellos.insert(key, Arc::clone(&built));
        Ok(built)
    }

    /// A probe is over: its socket closes, its result goes to health.
    fn finish(&mut self, key: usize, result: Checked) {
        if let Some(probe) = self.probes.try_remove(key) {
            let target = probe.target;
            probe.finish(self.poll.registry());
            self.result(target, result);
        }
    }

    fn result(&mut self, key: usize, result: Checked) {
        let Some(target) = self.targets.get_mut(&key) else {
            return;
        };
        target.probing = false;
        if target.retired {
            self.targets.remove(&key);
            return;
        }
        let observed = match result {
            Checked::Passed => Observed::Passed,
            Checked::Failed(why) => {
                log::debug!(
                    "check of backend {} ({}) failed: {why}",
                    target.instance.backend(),
                    target.instance.address()
                );
                Observed::Failed(format!("check: {why}"))
            }
            Checked::Local(why) => {
                if let Some(held_back) = self.shortage.admit(Instant::now()) {
                    log::warn!(
                        "cannot check backend {} ({}): {why}; this host is short (descriptors, \
                         memory or local ports), not the backend, which keeps its health \
                         ({held_back} more since the last warning)",
                        target.instance.backend(),
                        target.instance.address()
                    );
                }
                return;
            }
        };
        let source = Source::Check(target.plan.checks);
        if let Some(transition) = target.instance.observe(source, observed, Instant::now()) {
            self.counters
                .announce(&target.instance, &transition, "its health checks");
        }
    }
}
