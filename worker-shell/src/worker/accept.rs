//! Accepting connections: the accept loop of one listener, its admission
//! checks, and opening the session of each admitted client.
//!
//! Owns: the order of the checks at accept (the listener's access policy
//! on the TCP peer, refused with an access-log line naming the rule;
//! then `max_connections`, then a free
//! buffer in the pool, then the listener's `max_unrouted_per_ip` for the
//! client's address; each counted for the whole process, with one atomic
//! operation or one shard of a map, no lock across a syscall), what a
//! refused connection counts, how an accept
//! loop ends ([`Accepted`]: drained, or short of a resource, counted in
//! `tcp.accept.emfile` when it is descriptors), and the start of a session:
//! its front socket registered, its front idle timer, and the preread
//! step's first actions (the server-first timer, or a catch-all listener's
//! immediate route). Must never: read from the client (the preread's buffer
//! is taken on the first readable event), block, or end a loop on an error
//! that only concerns the connection being accepted.

use std::io;
use std::net::SocketAddr;
use std::time::{Instant, SystemTime};

use log::{debug, trace, warn};
use mio::Interest;
use mio::net::{TcpListener, TcpStream};
use preread_core::access::{DEFAULT_IPV6_PREFIX, source_key};
use preread_core::step::PrereadStep;
use slab::Slab;

use super::access::{self, Refused, Scope};
use super::close::close;
use super::ctx::{Ctx, Drive, TimerKind};
use super::preread;
use super::session::{Phase, Preread, Session};
use super::tokens::{Side, session_token};
use super::unrouted::{self, Full, Held};
use crate::access_log::{AccessLogEntry, QuicLog};
use crate::metrics::families::Family;
use crate::metrics::series::Series;
use crate::shared::admission::Slot;
use crate::shared::shortage::{is_connection_error, is_out_of_descriptors};
use crate::vocabulary::{Outcome, RefuseReason};

/// How an accept loop ended.
#[derive(Debug)]
pub(super) enum Accepted {
    /// The listener's queue is empty (`WouldBlock`).
    Drained,
    /// The proxy ran short (out of descriptors, of kernel memory, or an
    /// error the listener may recover from): clients stay queued, and the
    /// listener waits for a retry (`worker/accept_retry.rs`).
    Short(io::Error),
}

/// Accepts on `listener` (bound at `address`) until it would block or the
/// proxy runs short.
pub(super) fn accept(
    ctx: &mut Ctx,
    sessions: &mut Slab<Session>,
    address: SocketAddr,
    listener: &TcpListener,
) -> Accepted {
    loop {
        let (stream, client) = match listener.accept() {
            Ok(accepted) => accepted,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Accepted::Drained,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) if is_connection_error(&e) => {
                debug!("worker {}: accept on {address}: {e}; next", ctx.id);
                continue;
            }
            Err(e) => {
                if is_out_of_descriptors(&e) {
                    ctx.metrics
                        .incr(Series::on(Family::AcceptDescriptorErrors, address));
                }
                return Accepted::Short(e);
            }
        };
        ctx.metrics
            .incr(Series::on(Family::ConnectionsAccepted, address));
        if let Err(refused) = access_at_accept(ctx, address, client) {
            refuse_for_access(ctx, address, client, refused, None);
            continue;
        }
        let listener = ctx.runtime.tcp_listener(address);
        let limit = unrouted::limit(listener);
        let counted = source_key(
            client.ip(),
            listener.map_or(DEFAULT_IPV6_PREFIX, |l| l.ipv6_prefix),
        );
        let admitted = match ctx.shared.sessions.try_take() {
            None => Err(RefuseReason::MaxConnections),
            Some(_) if ctx.pool.is_exhausted() => Err(RefuseReason::PoolExhausted),
            Some(slot) => (ctx.unrouted.admit(address, counted, limit))
                .map(|held| (slot, held))
                .map_err(|Full| RefuseReason::UnroutedPerIp),
        };
        let (slot, held) = match admitted {
            Ok(admitted) => admitted,
            Err(reason) => {
                ctx.metrics
                    .incr(Series::on(Family::ConnectionsRefused, address).reason(reason.as_str()));
                debug!("refused {client} on {address}: {reason}");
                continue;
            }
        };
        open(ctx, sessions, address, stream, client, (slot, held));
    }
}

/// The listener's access policy for a client just accepted: checked on
/// the TCP peer, unless the listener expects a PROXY header, whose client
/// is checked once it is in (`preread.rs`).
fn access_at_accept(ctx: &Ctx, address: SocketAddr, client: SocketAddr) -> Result<(), Refused> {
    let Some(listener) = ctx.runtime.tcp_listener(address) else {
        return Ok(());
    };
    let Some(policy) = &listener.access else {
        return Ok(());
    };
    if listener.preread.config.expect_proxy {
        return Ok(());
    }
    let rates = (&*ctx.shared.listener_rates, |source| (address, source));
    access::check(policy, Scope::Listener, client.ip(), rates, Instant::now())
}

/// A connection the listener's access policy refused at accept (or a
/// QUIC datagram that would have started a flow: `quic` is its line's
/// QUIC part): counted and logged with its rule, then closed (dropped)
/// without a read.
pub(super) fn refuse_for_access(
    ctx: &mut Ctx,
    address: SocketAddr,
    client: SocketAddr,
    refused: Refused,
    quic: Option<QuicLog>,
) {
    let reason = refused.reason;
    ctx.metrics
        .incr(Series::on(Family::ConnectionsRefused, address).reason(reason.as_str()));
    debug!("refused {client} on {address}: {reason} ({})", refused.rule);
    let entry = AccessLogEntry {
        ts: SystemTime::now(),
        listener: address,
        client,
        sni: None,
        alpn: None,
        cluster: None,
        backend: None,
        outcome: Outcome::Refused(reason),
        bytes_in: 0,
        bytes_out: 0,
        duration_ms: 0,
        preread_ms: None,
        proxy_client: None,
        hello: None,
        ja4: None,
        rule: Some(refused.rule.as_str()),
        quic,
    };
    if ctx.access_log.submit(&entry).is_err() {
        ctx.metrics.incr(Series::of(Family::AccessLogDropped));
    }
}

/// Opens the session of an admitted client, which carries its place in
/// `max_connections` (`slot`) until it closes and its unrouted count
/// (`held`) until it leaves the preread stage.
fn open(
    ctx: &mut Ctx,
    sessions: &mut Slab<Session>,
    address: SocketAddr,
    mut front: TcpStream,
    client: SocketAddr,
    (slot, held): (Slot, Option<Held>),
) {
    let now = Instant::now();
    // TCP_NODELAY and keepalive come from the listening socket
    // (`listen::prepare`), and the local address is asked only by a PROXY
    // header that needs it (`Session::local_address`): no syscall here but
    // the registration.
    let entry = sessions.vacant_entry();
    let key = entry.key();
    if let Err(e) = ctx.registry.register(
        &mut front,
        session_token(key, Side::Front),
        Interest::READABLE | Interest::WRITABLE,
    ) {
        warn!("worker {}: cannot register {client}: {e}", ctx.id);
        if let Some(held) = held {
            ctx.unrouted.release(held);
        }
        return;
    }
    ctx.metrics
        .gauge_add(Series::on(Family::ConnectionsActive, address), 1);
    let Some(runtime) = ctx.runtime.tcp_listener(address) else {
        if let Some(held) = held {
            ctx.unrouted.release(held);
        }
        let step = PrereadStep::refused(now);
        let session = Session::accepted(address, client, front, step, now);
        close(
            ctx,
            key,
            session,
            Outcome::Refused(RefuseReason::ListenerRemoved),
        );
        return;
    };
    let front_timeout = runtime.front_timeout;
    let (step, actions) = PrereadStep::accept(&runtime.preread, now);
    let session = entry.insert(Session::accepted(address, client, front, step, now));
    session.slot = Some(slot);
    session.phase = Phase::Preread(Preread {
        unrouted: held.map(Box::new),
        ..Preread::default()
    });
    session.front_idle = Some(ctx.schedule(key, TimerKind::FrontIdle, now + front_timeout));
    if session.step.is_reading() {
        ctx.metrics
            .gauge_add(Series::on(Family::PrereadActive, address), 1);
    } else {
        trace!("{client} on {address}: catch-all, unread");
    }
    if let Drive::End(outcome) = preread::perform(ctx, key, session, actions, now) {
        let session = sessions.remove(key);
        close(ctx, key, session, outcome);
    }
}
