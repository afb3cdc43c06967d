//! The backend side of a session: the connect gate, picking and connecting
//! a backend, retries on the next one, and the switch to the pipe.
//!
//! Owns: the per-(cluster, source IP) admission, the non-blocking connect and
//! its timer, what a failed connect counts and reports to passive health
//! (the instance's, shared by every worker), what a backend socket this
//! host could not open counts and how it is retried (a local error:
//! `backend.connect.local_errors`, then `refused:local_resources` past
//! `connect_timeout`), deciding that a connect completed, and setting up
//! the pipe (the step's PROXY handoff plan, the lanes, the idle timer) once
//! it has.
//!
//! Must never: start before a route exists (only [`start`] opens the gate,
//! and only the preread step's `Next::Connect` leads there), try a backend
//! twice for one session or more than `max_connection_attempts`, blame a
//! backend for a local error (it never reaches health or its backoff), or
//! touch the client's window beyond what the handoff plan skips.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use command::proto::ProxyProtocol;
use log::{debug, trace, warn};
use mio::Interest;
use mio::net::TcpStream;
use preread_core::step::{ProxyMode, handoff};

use super::backends::NoBackend;
use super::ctx::{Ctx, Drive, TimerKind};
use super::io::Ready;
use super::keepalive;
use super::pipe::open_lanes;
use super::session::{Phase, Session};
use super::tokens::{Side, session_token};
use crate::metrics::families::Family;
use crate::metrics::series::Series;
use crate::shared::instance::Observed;
use crate::shared::shortage::{RETRY_EVERY, is_local};
use crate::vocabulary::{Outcome, RefuseReason};

/// Used only if the session's listener was removed mid-connect.
const FALLBACK_CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
const FALLBACK_BACK_TIMEOUT: Duration = Duration::from_secs(30);

fn refused(reason: RefuseReason) -> Drive {
    Drive::End(Outcome::Refused(reason))
}

/// The cluster's `proxy_protocol` in the step's words.
fn proxy_mode(protocol: ProxyProtocol) -> ProxyMode {
    match protocol {
        ProxyProtocol::None => ProxyMode::None,
        ProxyProtocol::Send => ProxyMode::Send,
        ProxyProtocol::Relay => ProxyMode::Relay,
    }
}

/// The connect gate, once a route exists: the per-(cluster, source IP)
/// limit, then a backend.
pub(super) fn start(ctx: &mut Ctx, key: usize, session: &mut Session, now: Instant) -> Drive {
    let Some(route) = session.route.clone() else {
        return refused(RefuseReason::ClusterUnknown);
    };
    let source: IpAddr = route.proxy_source.map_or(session.client.ip(), |a| a.ip());
    let Some(backends) = ctx.runtime.clusters.get_mut(&route.cluster) else {
        return refused(RefuseReason::ClusterUnknown);
    };
    // Known before the limit check, so a refusal names whose limit it was.
    session.cluster = Some(route.cluster.clone());
    match backends.admit_ip(source) {
        Ok(hold) => session.per_ip = Some(hold),
        Err(_) => return refused(RefuseReason::PerIpLimit),
    }
    session.phase = Phase::Connecting;
    next(ctx, key, session, now)
}

/// Picks a backend not tried yet and starts a non-blocking connect.
pub(super) fn next(ctx: &mut Ctx, key: usize, session: &mut Session, now: Instant) -> Drive {
    loop {
        let attempts = session.tried.len() as u32;
        let Some(cluster) = session.cluster.clone() else {
            return refused(RefuseReason::ClusterUnknown);
        };
        let Some(backends) = ctx.runtime.clusters.get_mut(&cluster) else {
            return refused(RefuseReason::ClusterUnknown);
        };
        if attempts >= ctx.settings.max_connection_attempts {
            return refused(RefuseReason::BackendUnavailable);
        }
        let lease = match backends.pick(now, &mut ctx.rng, &session.tried) {
            Ok(lease) => lease,
            Err(NoBackend::Full) => return refused(RefuseReason::BackendFull),
            Err(NoBackend::Unavailable) => return refused(RefuseReason::BackendUnavailable),
        };
        let instance = std::sync::Arc::clone(lease.instance());
        let address = instance.address();
        session.backend_id = Some(std::sync::Arc::clone(instance.backend_id()));
        if attempts > 0 {
            let retry = Series::backend(
                Family::BackendConnectRetries,
                instance.cluster_id(),
                instance.backend_id(),
            );
            ctx.metrics.incr(retry);
        }
        session.tried.push(instance);
        session.lease = Some(lease);
        match open_backend(ctx, key, session, address) {
            Ok(()) => {
                let timeout = ctx
                    .runtime
                    .listeners
                    .get(&session.listener)
                    .map_or(FALLBACK_CONNECT_TIMEOUT, |l| l.connect_timeout);
                session.timers.connect = Some(ctx.schedule(key, TimerKind::Connect, now + timeout));
                return Drive::Continue { progressed: true };
            }
            Err(OpenError::Backend(e)) => {
                debug!("connect to {address} failed at once: {e}");
                failed(
                    ctx,
                    session,
                    now,
                    &format!("connect to {address} failed: {e}"),
                );
            }
            Err(OpenError::Local(e)) => return local_error(ctx, key, session, &e, now),
        }
    }
}

/// Why a backend socket could not be opened.
#[derive(Debug)]
enum OpenError {
    /// The backend's fault (unreachable, refused at once).
    Backend(io::Error),
    /// This host ran short (`shortage::is_local`), or its poll refused the
    /// socket: no backend is to blame.
    Local(io::Error),
}

fn open_backend(
    ctx: &mut Ctx,
    key: usize,
    session: &mut Session,
    address: SocketAddr,
) -> Result<(), OpenError> {
    let mut stream = TcpStream::connect(address).map_err(|e| {
        if is_local(&e) {
            OpenError::Local(e)
        } else {
            OpenError::Backend(e)
        }
    })?;
    keepalive::apply(&stream, ctx.settings.tcp_keepalive.as_ref(), "backend");
    ctx.registry
        .register(
            &mut stream,
            session_token(key, Side::Back),
            Interest::READABLE | Interest::WRITABLE,
        )
        .map_err(OpenError::Local)?;
    session.back = Some(stream);
    session.back_ready = Ready::default();
    Ok(())
}

/// This host could not open or connect the backend socket: counted apart,
/// never reported to health, and the attempt undone (the backend may be
/// picked again). The session waits and tries again every
/// [`RETRY_EVERY`], since the shortage is most often brief (descriptors
/// about to be freed), for at most the listener's `connect_timeout` from
/// its first local error; then the client is refused as
/// `refused:local_resources`.
fn local_error(
    ctx: &mut Ctx,
    key: usize,
    session: &mut Session,
    error: &io::Error,
    now: Instant,
) -> Drive {
    ctx.metrics
        .incr(Series::of(Family::BackendConnectLocalErrors));
    let backend = session.backend_id.take().unwrap_or_default();
    match ctx.local_errors_log.admit(now) {
        Some(held_back) => warn!(
            "worker {}: cannot open a socket to backend {backend} for {}: {error}; this host is \
             short (descriptors, memory or local ports), not the backend; retried every \
             {RETRY_EVERY:?} ({held_back} more since the last warning; see \
             backend.connect.local_errors)",
            ctx.id, session.client
        ),
        None => debug!("cannot open a socket to backend {backend}: {error}"),
    }
    if let Some(mut back) = session.back.take() {
        let _ = ctx.registry.deregister(&mut back);
    }
    ctx.cancel(session.timers.connect.take());
    // Dropped unreported: the backend is not to blame, and its probe (if
    // it was one) is free again.
    if session.lease.take().is_some() {
        // Pushed by this attempt, which does not count as one.
        session.tried.pop();
    }
    let connect_timeout = ctx
        .runtime
        .listeners
        .get(&session.listener)
        .map_or(FALLBACK_CONNECT_TIMEOUT, |l| l.connect_timeout);
    let until = *session
        .local_retry_until
        .get_or_insert(now + connect_timeout);
    let at = now + RETRY_EVERY;
    if at > until {
        return refused(RefuseReason::LocalResources);
    }
    session.timers.connect = Some(ctx.schedule(key, TimerKind::LocalRetry, at));
    Drive::Continue { progressed: true }
}

/// A connect failed (refused, reset, timed out; `why` says which): count
/// it, tell the instance's health, drop the socket. The caller tries the
/// next one.
pub(super) fn failed(ctx: &mut Ctx, session: &mut Session, now: Instant, why: &str) {
    if let Some((cluster, backend)) = session.cluster.as_ref().zip(session.backend_id.as_ref()) {
        let errors = Series::backend(Family::BackendConnectErrors, cluster, backend);
        ctx.metrics.incr(errors);
    }
    if let Some(mut back) = session.back.take() {
        let _ = ctx.registry.deregister(&mut back);
    }
    ctx.cancel(session.timers.connect.take());
    session.backend_id = None;
    let Some(mut lease) = session.lease.take() else {
        return;
    };
    let checks = (session.cluster.as_ref())
        .and_then(|cluster| ctx.runtime.clusters.get(cluster))
        .and_then(|backends| backends.checks());
    if let Some(transition) = lease.report(Observed::Failed(why.to_owned()), now, checks) {
        ctx.shared
            .counters
            .announce(lease.instance(), &transition, "its clients' connections");
    }
}

/// One drive of a session whose connect is in flight.
pub(super) fn drive(ctx: &mut Ctx, key: usize, session: &mut Session, now: Instant) -> Drive {
    let Some(back) = session.back.as_ref() else {
        return Drive::Continue { progressed: false };
    };
    if !session.back_ready.writable {
        return Drive::Continue { progressed: false };
    }
    // A non-blocking TCP connect raises its first writable edge once the
    // handshake is done; a failed one raises it with EPOLLERR (and HUP),
    // which set `closing`. Only then is the socket asked what happened.
    let connected = if !session.back_ready.closing {
        Ok(true)
    } else {
        settled(back)
    };
    finish_connect(ctx, key, session, connected, now)
}

/// What a connect whose socket reported an error or a hang-up came to:
/// mio's rule, done only once no error is pending and the peer address is
/// known (a backend that accepted and closed at once is still connected).
fn settled(back: &TcpStream) -> io::Result<bool> {
    match back.take_error() {
        Ok(None) => match back.peer_addr() {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotConnected => Ok(false),
            Err(e) => Err(e),
        },
        Ok(Some(e)) | Err(e) => Err(e),
    }
}

fn finish_connect(
    ctx: &mut Ctx,
    key: usize,
    session: &mut Session,
    connected: io::Result<bool>,
    now: Instant,
) -> Drive {
    match connected {
        Ok(false) => {
            session.back_ready.writable = false;
            Drive::Continue { progressed: false }
        }
        Err(e) if is_local(&e) => local_error(ctx, key, session, &e, now),
        Err(e) => {
            debug!(
                "connect of {} to {:?} failed: {e}",
                session.client, session.backend_id
            );
            let why = format!("connect failed: {e}");
            failed(ctx, session, now, &why);
            next(ctx, key, session, now)
        }
        Ok(true) => connected_to_backend(ctx, key, session, now),
    }
}

/// The connect completed: apply the handoff plan and start the pipe.
fn connected_to_backend(ctx: &mut Ctx, key: usize, session: &mut Session, now: Instant) -> Drive {
    ctx.cancel(session.timers.connect.take());
    if let Some(back) = &session.back {
        let _ = back.set_nodelay(true);
    }
    if session.lease.is_none() {
        return refused(RefuseReason::BackendUnavailable);
    }
    let Some(cluster) = session.cluster.as_ref() else {
        return refused(RefuseReason::ClusterUnknown);
    };
    let Some(backends) = ctx.runtime.clusters.get(cluster) else {
        return refused(RefuseReason::ClusterUnknown);
    };
    // Passive health waits for the backend's first byte (`passive.rs`): a
    // backend that accepts and closes at once must not pass for healthy.
    let mode = proxy_mode(backends.proxy_protocol());
    if let Some(id) = &session.backend_id {
        let connections = Series::backend(Family::BackendConnections, cluster, id);
        ctx.metrics.gauge_add(connections, 1);
    }
    if let Some(route) = &session.route {
        let local = match mode {
            ProxyMode::Send => session.local_address(),
            ProxyMode::None | ProxyMode::Relay => session.listener,
        };
        let plan = handoff(mode, route, session.client, local);
        session.prefix = plan.prefix;
        if let Some(buf) = session.front_buf.as_mut() {
            buf.consume(plan.replay_from.min(buf.len()));
        }
    }
    let back_timeout = ctx
        .runtime
        .listeners
        .get(&session.listener)
        .map_or(FALLBACK_BACK_TIMEOUT, |l| l.back_timeout);
    session.last_back_activity = now;
    open_lanes(session, ctx.settings.splice);
    session.phase = Phase::Pipe;
    // The front's flags are still true to the socket: the preread cleared
    // `readable` only once the socket was drained, and events during the
    // connect were recorded. The pipe runs now, since edge-triggered
    // events will not repeat.
    session.timers.back_idle = Some(ctx.schedule(key, TimerKind::BackIdle, now + back_timeout));
    trace!("{} piped to {:?}", session.client, session.backend_id);
    ctx.requeue(key, session);
    Drive::Continue { progressed: true }
}
