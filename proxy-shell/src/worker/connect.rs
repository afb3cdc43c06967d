//! The backend side of a session: the connect gate, picking and connecting
//! a backend, retries on the next one, and the switch to the pipe.
//!
//! Owns: the per-(cluster, source IP) admission, the non-blocking connect and
//! its timer, what a failed connect counts and reports to passive health,
//! the health-change logs, deciding that a connect completed, and setting up
//! the pipe (PROXY header plan, idle timer) once it has.
//!
//! Must never: start before the core has routed (only `start_connect` opens
//! the gate, and only `on_output` and `route_catch_all` call it), try a
//! backend twice for one session or more than `max_connection_attempts`, or
//! touch the client's window beyond what the handoff plan skips.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::time::Instant;

use log::{debug, info, trace, warn};
use mio::Interest;
use mio::net::TcpStream;
use preread_core::routes::ClusterId;

use super::backends::HealthChange;
use super::drive::Outcome;
use super::event_loop::{TimerKind, Worker};
use super::handoff::handoff;
use super::metrics::names;
use super::session::Phase;

impl Worker {
    /// The connect gate: runs only once a route exists. Checks the
    /// per-(cluster, source IP) limit, then picks and connects a backend.
    pub(super) fn start_connect(&mut self, key: usize, cluster: ClusterId, now: Instant) {
        let Some(session) = self.sessions.get_mut(key) else {
            return;
        };
        let source: IpAddr = session
            .route
            .as_ref()
            .and_then(|r| r.proxy_source)
            .map_or(session.client.ip(), |a| a.ip());
        let Some(backends) = self.runtime.clusters.get_mut(&cluster) else {
            self.close(key, Outcome::Refused("cluster_unknown"));
            return;
        };
        // Known before the limit check, so a refusal names whose limit it was.
        session.cluster = Some(cluster.clone());
        if !backends.admit_ip(source) {
            self.metrics.incr(names::TCP_REFUSED_PER_IP_LIMIT);
            self.close(key, Outcome::Refused("per_ip_limit"));
            return;
        }
        session.admitted_ip = Some(source);
        session.phase = Phase::Connecting;
        self.connect_next(key, now);
    }

    /// Picks a backend not tried yet and starts a non-blocking connect.
    pub(super) fn connect_next(&mut self, key: usize, now: Instant) {
        loop {
            let Some(session) = self.sessions.get_mut(key) else {
                return;
            };
            let attempts = session.tried.len() as u32;
            let Some(cluster) = session.cluster.clone() else {
                return;
            };
            let Some(backends) = self.runtime.clusters.get_mut(&cluster) else {
                self.close(key, Outcome::Refused("cluster_unknown"));
                return;
            };
            if attempts >= self.settings.max_connection_attempts {
                self.close(key, Outcome::Refused("backend_unavailable"));
                return;
            }
            let Some(backend) = backends.pick(now, &mut self.rng, &session.tried) else {
                self.close(key, Outcome::Refused("backend_unavailable"));
                return;
            };
            let (Some(address), Some(id)) = (backends.address(backend), backends.id(backend))
            else {
                self.close(key, Outcome::Refused("backend_unavailable"));
                return;
            };
            let id = id.to_owned();
            if attempts > 0 {
                self.metrics.incr(names::BACKEND_CONNECT_RETRIES);
            }
            backends.connect_started(backend);
            session.tried.push(backend);
            session.backend = Some(backend);
            session.backend_id = Some(id);
            match self.open_backend(key, address) {
                Ok(()) => {
                    let timeout = self
                        .runtime
                        .listeners
                        .get(&self.sessions[key].listener)
                        .map_or(std::time::Duration::from_secs(3), |l| l.connect_timeout);
                    let id = self
                        .timers
                        .schedule(now + timeout, (key, TimerKind::Connect));
                    self.sessions[key].timers.connect = Some(id);
                    return;
                }
                Err(e) => {
                    debug!("connect to {address} failed at once: {e}");
                    self.backend_failed(key, now);
                }
            }
        }
    }

    fn open_backend(&mut self, key: usize, address: SocketAddr) -> io::Result<()> {
        let mut stream = TcpStream::connect(address)?;
        self.poll.registry().register(
            &mut stream,
            mio::Token(key * 2 + 1),
            Interest::READABLE | Interest::WRITABLE,
        )?;
        let session = &mut self.sessions[key];
        session.back = Some(stream);
        session.back_ready = Default::default();
        Ok(())
    }

    /// A connect failed (refused, reset, timed out): count it, mark the
    /// backend's health, drop the socket. The caller tries the next one.
    pub(super) fn backend_failed(&mut self, key: usize, now: Instant) {
        self.metrics.incr(names::BACKEND_CONNECT_ERRORS);
        let Some(session) = self.sessions.get_mut(key) else {
            return;
        };
        if let Some(mut back) = session.back.take() {
            let _ = self.poll.registry().deregister(&mut back);
        }
        if let Some(id) = session.timers.connect.take() {
            self.timers.cancel(id);
        }
        let (Some(cluster), Some(backend)) = (session.cluster.clone(), session.backend.take())
        else {
            return;
        };
        session.backend_id = None;
        if let Some(backends) = self.runtime.clusters.get_mut(&cluster) {
            backends.release(backend);
            let change = backends.connect_failed(backend, now);
            self.health_changed(&cluster, change);
        }
    }

    fn health_changed(&mut self, cluster: &str, change: Option<HealthChange>) {
        match change {
            Some(HealthChange::Down {
                backend_id,
                retry_in,
            }) => {
                self.metrics.incr(names::BACKEND_DOWN);
                warn!("backend {backend_id} of {cluster} is down; next try in {retry_in:?}");
            }
            Some(HealthChange::Up { backend_id }) => {
                info!("backend {backend_id} of {cluster} is up again");
            }
            None => {}
        }
    }

    pub(super) fn drive_connect(&mut self, key: usize) -> bool {
        let now = Instant::now();
        let Some(session) = self.sessions.get_mut(key) else {
            return false;
        };
        let Some(back) = session.back.as_ref() else {
            return false;
        };
        if !session.back_ready.writable {
            return false;
        }
        // mio: a non-blocking connect is done only once no error is pending
        // and the peer address is known.
        let connected = match back.take_error() {
            Ok(None) => match back.peer_addr() {
                Ok(_) => Ok(true),
                Err(e) if e.kind() == io::ErrorKind::NotConnected => Ok(false),
                Err(e) => Err(e),
            },
            Ok(Some(e)) | Err(e) => Err(e),
        };
        match connected {
            Ok(false) => {
                session.back_ready.writable = false;
                false
            }
            Err(e) => {
                debug!(
                    "connect of {} to {:?} failed: {e}",
                    session.client, session.backend_id
                );
                self.backend_failed(key, now);
                self.connect_next(key, now);
                true
            }
            Ok(true) => {
                self.connected(key, now);
                true
            }
        }
    }

    fn connected(&mut self, key: usize, now: Instant) {
        let Some(session) = self.sessions.get_mut(key) else {
            return;
        };
        if let Some(id) = session.timers.connect.take() {
            self.timers.cancel(id);
        }
        if let Some(back) = &session.back {
            let _ = back.set_nodelay(true);
        }
        let (Some(cluster), Some(backend)) = (session.cluster.clone(), session.backend) else {
            return;
        };
        let Some(backends) = self.runtime.clusters.get_mut(&cluster) else {
            self.close(key, Outcome::Refused("cluster_unknown"));
            return;
        };
        let change = backends.connect_succeeded(backend, now);
        let mode = backends.proxy_protocol();
        self.health_changed(&cluster, change);
        self.metrics.gauge_add(names::BACKEND_CONNECTIONS, 1);
        let Some(session) = self.sessions.get_mut(key) else {
            return;
        };
        if let Some(id) = &session.backend_id {
            self.metrics
                .gauge_add(&format!("backend.{id}.connections"), 1);
        }
        if let Some(route) = &session.route {
            let plan = handoff(mode, route, session.client, session.local);
            session.prefix = plan.prefix;
            if let Some(buf) = session.front_buf.as_mut() {
                buf.consume(plan.skip.min(buf.len()));
            }
        }
        let back_timeout = self
            .runtime
            .listeners
            .get(&session.listener)
            .map_or(std::time::Duration::from_secs(30), |l| l.back_timeout);
        session.last_back_activity = now;
        let created = session.open_lanes(self.settings.splice.then_some(&mut self.pipes));
        if created > 0 {
            self.metrics
                .add(names::SPLICE_PIPES_CREATED, i64::from(created));
        }
        session.phase = Phase::Pipe;
        // The front may still hold readiness from before; the pipe must run
        // now, since edge-triggered events will not repeat.
        session.front_ready.readable = true;
        session.front_ready.writable = true;
        let id = self
            .timers
            .schedule(now + back_timeout, (key, TimerKind::BackIdle));
        session.timers.back_idle = Some(id);
        trace!("{} piped to {:?}", session.client, session.backend_id);
        self.requeue(key);
    }
}
