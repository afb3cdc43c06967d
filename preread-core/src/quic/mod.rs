//! The QUIC preread step: one UDP flow's preread, from its first datagram
//! to its one decision, as a pure state machine in the shape of the TCP
//! step ([`crate::step`]). The worker's UDP listener performs its actions;
//! the simulation and `preread inspect --quic` run the same code.
//!
//! Owns, per flow:
//! - reading the client's datagrams ([`preread_parser::quic::ClientInitials`]:
//!   Initial keys from the first DCID, coalesced packets, 0-RTT skipped,
//!   CRYPTO reassembled under the listener's cap);
//! - the decision latch: the first decision is the only one, and every
//!   later event gets [`QuicNext::Ignore`];
//! - the deadline, `quic_preread_timeout` from the first datagram, armed
//!   once ([`QuicActions::timer`]) and never moved;
//! - the verdict, through the TCP core's own route table and verdict code
//!   (SNI, then ALPN, then `default_cluster` for the reasons that fall
//!   back: `not_tls`, `no_sni`, `ech_outer_absent`, `sni_unmatched`);
//! - the reject reasons: the TCP ones with their meaning, plus
//!   `quic_undecryptable` and `quic_version`;
//! - the reply a refused client gets ([`QuicReject::reply`], by
//!   `reject_with`): a server Initial with CONNECTION_CLOSE (CRYPTO_ERROR
//!   `0x100 + alert`, the alert a TLS server sends for the same reason),
//!   or a Version Negotiation packet.
//!
//! Must never: perform I/O, read a clock, draw randomness, or hold a
//! client datagram. **The shell holds them**: it keeps every datagram of
//! an undecided flow (the step answered [`QuicNext::Wait`]), bounded per
//! flow and in total, and once the answer is [`QuicNext::Connect`] sends
//! them all to the backend in the order received, the one that decided
//! included, then relays. On [`QuicNext::Reject`] it sends the reply, if
//! any, drops the datagrams and forgets the flow at once: a client told
//! to change version starts over from the same address, as a new flow.
//!
//! # Events
//!
//! Build the step with the flow's first datagram
//! ([`QuicPrereadStep::first`]), call [`QuicPrereadStep::datagram`] with
//! each later one, and [`QuicPrereadStep::timeout`] when the timer it
//! armed fires (an early or stale fire changes nothing). A datagram the
//! shell cannot keep (its per-flow bound) is a decision of its own:
//! [`QuicPrereadStep::abandon`].

mod listener;
mod reply;
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::{Duration, Instant};

use preread_parser::quic::{ClientInitials, CryptoFault, QuicError, Version, parse_long_header};
use preread_parser::tls::{Ja4, Parsed, TlsError, Transport};

pub use listener::{QuicListener, QuicRejectWith};

use crate::fingerprint::DenyRule;
use crate::output::{Output, Route};
use crate::preread::deadline_after;
use crate::reject::RejectReason;
use crate::sni::HostName;
use crate::step::{Left, TimerAction};
use crate::summary::HelloSummary;
use crate::verdict::{self, Learned};

/// A refusal and what the client is sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuicReject {
    /// Why (the metric, the access log).
    pub reason: RejectReason,
    /// One datagram to send the client before forgetting the flow, if any.
    pub reply: Option<Vec<u8>>,
}

/// What the shell does after the timer change and the gauge (`left`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QuicNext {
    /// Undecided: keep this datagram with the flow's others, and wait.
    Wait,
    /// Routed: send every datagram of the flow, in order, to a backend of
    /// `route.cluster`, then relay both ways.
    Connect(Arc<Route>),
    /// Refused: send the reply, if any; drop the datagrams; forget the flow.
    Reject(QuicReject),
    /// Nothing: the flow was already decided (a later datagram is the
    /// relay's), or a timer fired early.
    Ignore,
}

/// Everything one event asks of the shell, in this order: the timer, the
/// gauge, then `next`.
#[must_use = "the caller must perform the step's actions"]
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct QuicActions {
    /// The preread deadline's timer: armed once, with the first datagram;
    /// cancelled with the decision.
    pub timer: TimerAction,
    /// Set on the one event that ends the preread stage.
    pub left: Option<Left>,
    /// What comes next.
    pub next: QuicNext,
}

impl QuicActions {
    fn ignore() -> Self {
        Self {
            timer: TimerAction::Keep,
            left: None,
            next: QuicNext::Ignore,
        }
    }
}

/// One UDP flow's preread.
#[derive(Debug)]
pub struct QuicPrereadStep {
    reader: ClientInitials,
    first_at: Instant,
    deadline: Instant,
    decided: Option<Output>,
    preread_time: Option<Duration>,
    learned: Learned,
    largest_datagram: usize,
    timer_armed: bool,
}

impl QuicPrereadStep {
    /// A flow whose first datagram just arrived: the deadline is armed
    /// from `now`, and the datagram read.
    pub fn first(listener: &QuicListener, datagram: &[u8], now: Instant) -> (Self, QuicActions) {
        let mut step = Self {
            reader: ClientInitials::new(listener.config.max_bytes),
            first_at: now,
            deadline: deadline_after(now, listener.config.timeout),
            decided: None,
            preread_time: None,
            learned: Learned::default(),
            largest_datagram: 0,
            timer_armed: false,
        };
        let actions = step.datagram(listener, datagram, now);
        (step, actions)
    }

    /// A later datagram of the flow, in the order received.
    pub fn datagram(
        &mut self,
        listener: &QuicListener,
        datagram: &[u8],
        now: Instant,
    ) -> QuicActions {
        if self.decided.is_some() {
            return QuicActions::ignore();
        }
        if now >= self.deadline {
            return self.decide(
                listener.reject_with,
                Output::Reject(RejectReason::Fragmented),
                None,
                now,
            );
        }
        self.largest_datagram = self.largest_datagram.max(datagram.len());
        let config = &listener.config;
        if let Some(cluster) = &config.catch_all {
            let route = Route::unread(cluster.clone(), None);
            return self.decide(
                listener.reject_with,
                Output::Routed(Arc::new(route)),
                None,
                now,
            );
        }
        let output = match self.reader.feed(datagram) {
            Err(QuicError::UnsupportedVersion(version)) => {
                let ids = parse_long_header(datagram).ok().filter(|_| version != 0);
                let ids = ids.map(|header| (header.dcid, header.scid));
                return self.decide(
                    listener.reject_with,
                    Output::Reject(RejectReason::QuicVersion),
                    ids,
                    now,
                );
            }
            Err(error) => refused(config, error),
            Ok(fed) if fed.closed.is_some() => Output::Reject(RejectReason::FrontClosed),
            Ok(_) => match self.reader.client_hello() {
                Ok(Parsed::Complete(hello)) => {
                    verdict::decide_hello(config, &hello, &mut self.learned)
                }
                Ok(Parsed::Incomplete(needed)) => {
                    match verdict::incomplete(config, self.reader.crypto_prefix(), needed) {
                        Some(output) => output,
                        None => return self.wait(),
                    }
                }
                Err(fault) => {
                    self.learned.fault = Some(fault);
                    Output::Reject(RejectReason::MalformedHandshake)
                }
            },
        };
        self.decide(listener.reject_with, output, None, now)
    }

    /// The timer the step armed fired at `now`.
    pub fn timeout(&mut self, listener: &QuicListener, now: Instant) -> QuicActions {
        if self.decided.is_some() || now < self.deadline {
            return QuicActions::ignore();
        }
        self.timer_armed = false;
        self.decide(
            listener.reject_with,
            Output::Reject(RejectReason::Fragmented),
            None,
            now,
        )
    }

    /// Ends the stage for a reason of the shell's (the flow's buffer is
    /// full, the listener went away): counted as `reason`, no reply.
    /// Harmless once decided.
    pub fn abandon(&mut self, reason: RejectReason, now: Instant) -> QuicActions {
        if self.decided.is_some() {
            return QuicActions::ignore();
        }
        self.decide(QuicRejectWith::Drop, Output::Reject(reason), None, now)
    }

    fn wait(&mut self) -> QuicActions {
        let timer = if std::mem::replace(&mut self.timer_armed, true) {
            TimerAction::Keep
        } else {
            TimerAction::Arm(self.deadline)
        };
        QuicActions {
            timer,
            left: None,
            next: QuicNext::Wait,
        }
    }

    fn decide(
        &mut self,
        reject_with: QuicRejectWith,
        output: Output,
        unknown_version: Option<(&[u8], &[u8])>,
        now: Instant,
    ) -> QuicActions {
        let preread_time = now.saturating_duration_since(self.first_at);
        self.preread_time = Some(preread_time);
        let next = match &output {
            Output::Routed(route) => QuicNext::Connect(route.clone()),
            Output::Reject(reason) => QuicNext::Reject(QuicReject {
                reason: *reason,
                reply: self.reply(reject_with, *reason, unknown_version),
            }),
            Output::NeedMore { .. } => return self.wait(),
        };
        self.decided = Some(output);
        let timer = if std::mem::take(&mut self.timer_armed) {
            TimerAction::Cancel
        } else {
            TimerAction::Keep
        };
        QuicActions {
            timer,
            left: Some(Left {
                sample: Some(preread_time),
            }),
            next,
        }
    }

    fn reply(
        &self,
        reject_with: QuicRejectWith,
        reason: RejectReason,
        unknown_version: Option<(&[u8], &[u8])>,
    ) -> Option<Vec<u8>> {
        let facts = reply::Facts {
            reader: &self.reader,
            fault: self.learned.fault,
            offers_tls13: self.learned.offers_tls13,
            largest_datagram: self.largest_datagram,
            unknown_version,
        };
        reply::reply(reject_with, reason, &facts)
    }

    /// A routed flow the shell refuses after the decision (its cluster's
    /// `allow`, `deny` or `connection_rate_per_ip`): the datagram the
    /// client is sent, as for a refusal of the step's own,
    /// CONNECTION_CLOSE with CRYPTO_ERROR `0x100 + access_denied`, the
    /// alert a TCP client reads for the same policy. `None` before the
    /// decision, with `reject_with = "drop"`, or when the client's
    /// datagrams were too small to answer.
    pub fn access_denied_reply(&self, reject_with: QuicRejectWith) -> Option<Vec<u8>> {
        self.decided.as_ref()?;
        self.reply(reject_with, RejectReason::AccessDenied, None)
    }

    /// The JA4 of the ClientHello (`q…`), once one was read whole;
    /// computed on demand (the access log), through the thread's cache.
    pub fn ja4(&self) -> Option<Ja4> {
        self.learned.hello?;
        match self.reader.client_hello() {
            Ok(Parsed::Complete(hello)) => Some(crate::fingerprint::ja4(&hello, Transport::Quic)),
            _ => None,
        }
    }

    /// The `deny_ja4` rule that refused the flow, when one did.
    pub fn denied_by(&self) -> Option<DenyRule> {
        self.learned.denied_by
    }

    /// The latched decision, once taken.
    pub fn decision(&self) -> Option<&Output> {
        self.decided.as_ref()
    }

    /// Whether the flow is still undecided.
    pub fn is_reading(&self) -> bool {
        self.decided.is_none()
    }

    /// When the deadline falls.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// From the first datagram to the decision; `None` while undecided.
    pub fn preread_time(&self) -> Option<Duration> {
        self.preread_time
    }

    /// The normalized SNI of a ClientHello read whole, whatever the decision.
    pub fn sni(&self) -> Option<&HostName> {
        match &self.decided {
            Some(Output::Routed(route)) if route.sni.is_some() => route.sni.as_ref(),
            _ => self.learned.sni.as_deref(),
        }
    }

    /// What a whole ClientHello showed of itself (ECH, version, length).
    pub fn hello(&self) -> Option<HelloSummary> {
        self.learned.hello
    }

    /// The ClientHello's fault, when it was refused as malformed.
    pub fn fault(&self) -> Option<TlsError> {
        self.learned.fault
    }

    /// The flow's QUIC version, once an Initial opened.
    pub fn version(&self) -> Option<Version> {
        self.reader.version()
    }

    /// The reader: the first DCID, the client's SCID, the counts of
    /// packets and datagrams read.
    pub fn initials(&self) -> &ClientInitials {
        &self.reader
    }
}

/// The decision on a flow whose datagrams can never yield a ClientHello:
/// the reason of [`reject_reason`], or the default cluster when it falls
/// back.
fn refused(config: &crate::config::PrereadConfig, error: QuicError) -> Output {
    match reject_reason(error) {
        RejectReason::NotTls => verdict::refuse_unread(config, RejectReason::NotTls),
        reason => Output::Reject(reason),
    }
}

/// The reject reason of a reader's error: not a long header is `not_tls`,
/// a packet-level fault `malformed_record` (QUIC's packets are its record
/// layer), the cap `too_large`, and the two QUIC reasons. `preread
/// inspect --quic` names its parse results by it.
pub fn reject_reason(error: QuicError) -> RejectReason {
    match error {
        QuicError::NotLongHeader => RejectReason::NotTls,
        QuicError::UnsupportedVersion(_) => RejectReason::QuicVersion,
        QuicError::Undecryptable => RejectReason::QuicUndecryptable,
        QuicError::Crypto(CryptoFault::BeyondCap { .. } | CryptoFault::TooManyGaps(_)) => {
            RejectReason::TooLarge
        }
        _ => RejectReason::MalformedRecord,
    }
}
