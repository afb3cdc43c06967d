//! The backend side of a session: the connect gate, picking and connecting
//! a backend, retries on the next one, and the switch to the pipe.
//!
//! Owns: the session's way out of the preread (`Gated` when the gate
//! refuses, else `Connecting`, then `Piped` once connected: the only
//! places those phases are made), the cluster's access policy (its
//! `access_denied` farewell), the per-(cluster, source IP) admission,
//! the non-blocking connect and
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
use std::sync::Arc;
use std::time::{Duration, Instant};

use command::proto::ProxyProtocol;
use log::{debug, trace, warn};
use mio::Interest;
use mio::net::TcpStream;
use preread_core::Route;
use preread_core::routes::ClusterId;
use preread_core::step::{ProxyMode, RejectWith, access_denied, handoff};

use super::backend_socket;
use super::backends::{ClusterBackends, NoBackend};
use super::ctx::{Ctx, Drive, TimerKind};
use super::farewell;
use super::io::{Nodelay, Peer};
use super::keepalive;
use super::pipe::Pipe;
use super::pool::Checkout;
use super::runtime::Runtime;
use super::session::{Attempt, Connecting, Gated, Phase, Piped, Session, Target};
use super::tokens::{Side, session_token};
use crate::metrics::families::Family;
use crate::metrics::series::Series;
use crate::shared::instance::{Lease, Observed};
use crate::shared::shortage::{RETRY_EVERY, is_local};
use crate::vocabulary::{Outcome, RefuseReason};

/// Used only if the session's listener was removed mid-connect.
const FALLBACK_CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
const FALLBACK_BACK_TIMEOUT: Duration = Duration::from_secs(30);

const IDLE: Drive = Drive::Continue { progressed: false };

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

/// Whose connect it is: the listener it came on (for its timeouts) and
/// the client (for the logs).
#[derive(Debug, Clone, Copy)]
struct Whose {
    listener: SocketAddr,
    client: SocketAddr,
}

impl Whose {
    fn of(session: &Session) -> Self {
        Self {
            listener: session.listener,
            client: session.client,
        }
    }
}

fn connect_timeout(ctx: &Ctx, listener: SocketAddr) -> Duration {
    (ctx.runtime.tcp_listener(listener)).map_or(FALLBACK_CONNECT_TIMEOUT, |l| l.connect_timeout)
}

/// The routed cluster's backends: a reload may remove the cluster while
/// its session connects, and the session is refused then.
fn backends<'a>(
    runtime: &'a mut Runtime,
    cluster: &ClusterId,
) -> Result<&'a mut ClusterBackends, Drive> {
    (runtime.clusters.get_mut(cluster)).ok_or(refused(RefuseReason::ClusterUnknown))
}

/// The connect gate, once a route exists: the cluster's access policy
/// (a refused client reads `access_denied`, or what the listener's
/// `reject_with` says), the per-(cluster, source IP) limit, then a
/// backend. The session leaves the preread with `window`,
/// the bytes it read.
pub(super) fn start(
    ctx: &mut Ctx,
    key: usize,
    session: &mut Session,
    (route, window): (Arc<Route>, Option<Checkout>),
    now: Instant,
) -> Drive {
    let source: IpAddr = route.proxy_source.map_or(session.client.ip(), |a| a.ip());
    let ja4 = (window.as_ref())
        .filter(|_| ctx.access_log.is_on())
        .and_then(|buf| session.step.core().ja4(buf.data()));
    let admitted = match backends(&mut ctx.runtime, &route.cluster) {
        Err(drive) => Err((drive, None, RefuseReason::ClusterUnknown)),
        // Known before the checks, so a refusal names whose they were.
        Ok(backends) => match backends.check_access(source, now) {
            Err(denied) => {
                session.access_rule = Some(denied.rule);
                Err((
                    refused(denied.reason),
                    Some(route.cluster.clone()),
                    denied.reason,
                ))
            }
            Ok(()) => (backends.admit_ip(source)).map_err(|_| {
                let reason = RefuseReason::PerIpLimit;
                (refused(reason), Some(route.cluster.clone()), reason)
            }),
        },
    };
    let per_ip = match admitted {
        Ok(hold) => hold,
        Err((drive, cluster, reason)) => {
            if let Some(buf) = window {
                ctx.pool.give_back(buf);
            }
            if session.access_rule.is_some() {
                let with = (ctx.runtime.tcp_listener(session.listener))
                    .map_or(RejectWith::default(), |l| l.preread.reject_with);
                let goodbye = access_denied(with, session.step.core());
                farewell::say(&mut session.front.stream, goodbye);
            }
            session.phase = Phase::Gated(Box::new(Gated {
                route,
                cluster,
                reason,
                ja4,
            }));
            return drive;
        }
    };
    let mut connecting = Box::new(Connecting::new(Target { route, per_ip, ja4 }, window));
    let drive = next(ctx, key, &mut connecting, Whose::of(session), now);
    session.phase = Phase::Connecting(connecting);
    drive
}

/// Picks a backend not tried yet and starts a non-blocking connect.
fn next(
    ctx: &mut Ctx,
    key: usize,
    connecting: &mut Connecting,
    whose: Whose,
    now: Instant,
) -> Drive {
    loop {
        let attempts = connecting.tried.len() as u32;
        let backends = match backends(&mut ctx.runtime, &connecting.target.route.cluster) {
            Ok(backends) => backends,
            Err(drive) => return drive,
        };
        if attempts >= ctx.settings.max_connection_attempts {
            return refused(RefuseReason::BackendUnavailable);
        }
        let at_once = ctx.settings.backend_delayed_ack
            && backend_socket::writes_at_once(
                proxy_mode(backends.proxy_protocol()),
                connecting.target.route.content_offset,
                connecting.window.as_ref().map_or(0, Checkout::len),
            );
        let lease = match backends.pick(now, &mut ctx.rng, &connecting.tried) {
            Ok(lease) => lease,
            Err(NoBackend::Full) => return refused(RefuseReason::BackendFull),
            Err(NoBackend::Unavailable) => return refused(RefuseReason::BackendUnavailable),
        };
        let instance = Arc::clone(lease.instance());
        let address = instance.address();
        if attempts > 0 {
            let retry = Series::backend(
                Family::BackendConnectRetries,
                instance.cluster_id(),
                instance.backend_id(),
            );
            ctx.metrics.incr(retry);
        }
        connecting.tried.push(instance);
        match open_backend(ctx, key, (address, at_once), now) {
            Ok(back) => {
                connecting.attempt = Some(Attempt { lease, back });
                let at = now + connect_timeout(ctx, whose.listener);
                connecting.timer = Some(ctx.schedule(key, TimerKind::Connect, at));
                return Drive::Continue { progressed: true };
            }
            Err(OpenError::Backend(e)) => {
                debug!("connect to {address} failed at once: {e}");
                let why = format!("connect to {address} failed: {e}");
                report_failure(ctx, &connecting.target.route.cluster, lease, now, &why);
            }
            Err(OpenError::Local(e)) => {
                return local_error(ctx, key, connecting, whose, (lease, &e), now);
            }
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
    (address, at_once): (SocketAddr, bool),
    now: Instant,
) -> Result<Peer, OpenError> {
    let mut stream = backend_socket::open(address, at_once).map_err(|e| {
        if is_local(&e) {
            OpenError::Local(e)
        } else {
            OpenError::Backend(e)
        }
    })?;
    keepalive::apply(&stream, ctx.settings.backend_keepalive.as_ref(), "backend");
    ctx.registry
        .register(
            &mut stream,
            session_token(key, Side::Back),
            Interest::READABLE | Interest::WRITABLE,
        )
        .map_err(OpenError::Local)?;
    let mut back = Peer::new(stream, now);
    back.nodelay = Nodelay::Unwritten;
    Ok(back)
}

/// This host could not open or connect the backend socket of `lease`:
/// counted apart, never reported to health, and the attempt undone (the
/// backend may be picked again). The session waits and tries again every
/// [`RETRY_EVERY`], since the shortage is most often brief (descriptors
/// about to be freed), for at most the listener's `connect_timeout` from
/// its first local error; then the client is refused as
/// `refused:local_resources`.
fn local_error(
    ctx: &mut Ctx,
    key: usize,
    connecting: &mut Connecting,
    whose: Whose,
    (lease, error): (Lease, &io::Error),
    now: Instant,
) -> Drive {
    ctx.metrics
        .incr(Series::of(Family::BackendConnectLocalErrors));
    let backend = lease.instance().backend_id();
    match ctx.local_errors_log.admit(now) {
        Some(held_back) => warn!(
            "worker {}: cannot open a socket to backend {backend} for {}: {error}; this host is \
             short (descriptors, memory or local ports), not the backend; retried every \
             {RETRY_EVERY:?} ({held_back} more since the last warning; see \
             backend.connect.local_errors)",
            ctx.id, whose.client
        ),
        None => debug!("cannot open a socket to backend {backend}: {error}"),
    }
    // Dropped unreported: the backend is not to blame, and its probe (if
    // it was one) is free again. Its attempt, pushed by this one, does not
    // count as one.
    drop(lease);
    connecting.tried.pop();
    ctx.cancel(connecting.timer.take());
    let until = *connecting
        .local_retry_until
        .get_or_insert(now + connect_timeout(ctx, whose.listener));
    let at = now + RETRY_EVERY;
    if at > until {
        return refused(RefuseReason::LocalResources);
    }
    connecting.timer = Some(ctx.schedule(key, TimerKind::LocalRetry, at));
    Drive::Continue { progressed: true }
}

/// Takes an attempt's socket out of the poll, handing back its lease.
fn undo(ctx: &mut Ctx, attempt: Attempt) -> Lease {
    let mut stream = attempt.back.stream;
    let _ = ctx.registry.deregister(&mut stream);
    attempt.lease
}

/// The connect in flight failed (refused, reset, timed out; `why` says
/// which): count it, tell the instance's health, drop the socket. The
/// caller tries the next one.
fn failed(ctx: &mut Ctx, connecting: &mut Connecting, attempt: Attempt, now: Instant, why: &str) {
    ctx.cancel(connecting.timer.take());
    let lease = undo(ctx, attempt);
    report_failure(ctx, &connecting.target.route.cluster, lease, now, why);
}

/// Counts a failed connect to the backend of `lease` and reports it to
/// the instance's health.
fn report_failure(ctx: &mut Ctx, cluster: &ClusterId, mut lease: Lease, now: Instant, why: &str) {
    let errors = Series::backend(
        Family::BackendConnectErrors,
        cluster,
        lease.instance().backend_id(),
    );
    ctx.metrics.incr(errors);
    let checks = (ctx.runtime.clusters.get(cluster)).and_then(|backends| backends.checks());
    if let Some(transition) = lease.report(Observed::Failed(why.to_owned()), now, checks) {
        ctx.shared
            .counters
            .announce(lease.instance(), &transition, "its clients' connections");
    }
}

/// The connect timeout of a connecting session fired: the next backend.
pub(super) fn timed_out(ctx: &mut Ctx, key: usize, session: &mut Session, now: Instant) -> Drive {
    let whose = Whose::of(session);
    let backend = session.backend_id().cloned();
    let Phase::Connecting(connecting) = &mut session.phase else {
        return IDLE;
    };
    connecting.timer = None;
    debug!("connect of {} to {backend:?} timed out", whose.client);
    let why = match ctx.runtime.tcp_listener(whose.listener) {
        Some(listener) => format!("connect not done within {:?}", listener.connect_timeout),
        None => "connect timed out".to_owned(),
    };
    if let Some(attempt) = connecting.attempt.take() {
        failed(ctx, connecting, attempt, now, &why);
    }
    next(ctx, key, connecting, whose, now)
}

/// The wait after a local error is over: try again.
pub(super) fn retry(ctx: &mut Ctx, key: usize, session: &mut Session, now: Instant) -> Drive {
    let whose = Whose::of(session);
    let Phase::Connecting(connecting) = &mut session.phase else {
        return IDLE;
    };
    connecting.timer = None;
    next(ctx, key, connecting, whose, now)
}

/// One drive of a session whose connect is in flight; once connected, the
/// session is piped.
pub(super) fn drive(ctx: &mut Ctx, key: usize, session: &mut Session, now: Instant) -> Drive {
    let phase = std::mem::take(&mut session.phase);
    let Phase::Connecting(connecting) = phase else {
        session.phase = phase;
        return IDLE;
    };
    match poll(ctx, key, session, connecting, now) {
        Polled::Connecting(connecting, drive) => {
            session.phase = Phase::Connecting(connecting);
            drive
        }
        Polled::Piped(piped) => {
            session.phase = Phase::Piped(piped);
            // The front's flags are still true to the socket: the preread
            // cleared `readable` only once the socket was drained, and
            // events during the connect were recorded. The pipe runs now,
            // since edge-triggered events will not repeat.
            ctx.requeue(key, session);
            Drive::Continue { progressed: true }
        }
    }
}

/// What a drive of a connecting session came to.
enum Polled {
    Connecting(Box<Connecting>, Drive),
    Piped(Box<Piped>),
}

/// Asks the connect in flight whether it completed (`session` is read for
/// its addresses only: its phase is out, in `connecting`).
fn poll(
    ctx: &mut Ctx,
    key: usize,
    session: &Session,
    mut connecting: Box<Connecting>,
    now: Instant,
) -> Polled {
    let whose = Whose::of(session);
    let Some(mut attempt) = connecting.attempt.take() else {
        return Polled::Connecting(connecting, IDLE);
    };
    // A non-blocking TCP connect raises its first writable edge once the
    // handshake is done; a failed one raises it with EPOLLERR (and HUP),
    // which set `closing`. Only then is the socket asked what happened.
    let connected = match attempt.back.ready {
        ready if !ready.writable => Ok(false),
        ready if !ready.closing => Ok(true),
        _ => settled(&attempt.back.stream),
    };
    let drive = match connected {
        Ok(true) => return connected_to_backend(ctx, key, session, connecting, attempt, now),
        Ok(false) => {
            attempt.back.ready.writable = false;
            connecting.attempt = Some(attempt);
            IDLE
        }
        Err(e) if is_local(&e) => {
            let lease = undo(ctx, attempt);
            local_error(ctx, key, &mut connecting, whose, (lease, &e), now)
        }
        Err(e) => {
            debug!(
                "connect of {} to {} failed: {e}",
                whose.client,
                attempt.lease.instance().backend_id()
            );
            let why = format!("connect failed: {e}");
            failed(ctx, &mut connecting, attempt, now, &why);
            next(ctx, key, &mut connecting, whose, now)
        }
    };
    Polled::Connecting(connecting, drive)
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

/// The connect completed: apply the handoff plan and start the pipe.
fn connected_to_backend(
    ctx: &mut Ctx,
    key: usize,
    session: &Session,
    mut connecting: Box<Connecting>,
    Attempt { lease, mut back }: Attempt,
    now: Instant,
) -> Polled {
    ctx.cancel(connecting.timer.take());
    let mode = match backends(&mut ctx.runtime, &connecting.target.route.cluster) {
        Ok(backends) => proxy_mode(backends.proxy_protocol()),
        Err(drive) => {
            connecting.attempt = Some(Attempt { lease, back });
            return Polled::Connecting(connecting, drive);
        }
    };
    let Connecting {
        target, mut window, ..
    } = *connecting;
    // Passive health waits for the backend's first byte (`passive.rs`): a
    // backend that accepts and closes at once must not pass for healthy.
    let backend = lease.instance().backend_id();
    let connections = Series::backend(Family::BackendConnections, &target.route.cluster, backend);
    ctx.metrics.gauge_add(connections, 1);
    let local = match mode {
        ProxyMode::Send => session.local_address(),
        ProxyMode::None | ProxyMode::Relay => session.listener,
    };
    let plan = handoff(mode, &target.route, session.client, local);
    if let Some(buf) = window.as_mut() {
        buf.consume(plan.replay_from.min(buf.len()));
    }
    let back_timeout = (ctx.runtime.tcp_listener(session.listener))
        .map_or(FALLBACK_BACK_TIMEOUT, |l| l.back_timeout);
    back.last_activity = now;
    let mut pipe = Pipe::new(back, ctx.settings.splice);
    pipe.up.prefix = plan.prefix;
    pipe.up.buf = window;
    let back_idle = Some(ctx.schedule(key, TimerKind::BackIdle, now + back_timeout));
    trace!("{} piped to {backend}", session.client);
    Polled::Piped(Box::new(Piped {
        target,
        lease,
        pipe,
        backend_judged: false,
        back_idle,
    }))
}
