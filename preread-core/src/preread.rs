//! [`SniPrereadCore`]: one connection's preread, from its first byte to its
//! one decision.
//!
//! Owns: the latch (the first terminal output is the only one, replayed for
//! every later input), the deadline (armed once, on the first `Bytes` or on
//! a server-first timeout that must wait for a PROXY header; never moved),
//! and the server-first fallback. Must never: perform I/O, read a clock
//! (time comes in with the input), or let a later input change a decision.

use std::sync::Arc;
use std::time::{Duration, Instant};

use preread_parser::tls::{FrameCursor, Ja4, Ja4Input, Transport};

use crate::config::PrereadConfig;
use crate::fingerprint::DenyRule;
use crate::output::{Input, Output, Route};
use crate::reject::{FallbackReason, RejectReason};
use crate::sni::HostName;
use crate::summary::HelloSummary;
use crate::verdict::{self, Learned};

/// Stand-in for a timeout so large that `now + timeout` overflows `Instant`:
/// a year is "never" for a preread.
const FAR_FUTURE: Duration = Duration::from_secs(365 * 24 * 3600);

/// `now + timeout`, or a year from now where that overflows `Instant`:
/// the one rule for every preread deadline, the core's and the step's.
pub(crate) fn deadline_after(now: Instant, timeout: Duration) -> Instant {
    now.checked_add(timeout)
        .or_else(|| now.checked_add(FAR_FUTURE))
        .unwrap_or(now)
}

/// The per-connection preread state machine. Build one per accepted
/// connection with [`SniPrereadCore::new`]; drop it once it has decided.
#[derive(Debug, Default)]
pub struct SniPrereadCore {
    decided: Option<Output>,
    deadline: Option<Instant>,
    learned: Learned,
    /// The server-first timer fired before the load balancer's PROXY header
    /// was complete: a client still silent once it is goes to the default
    /// cluster at once.
    server_first_due: bool,
    /// Reassembly buffer for a ClientHello split over records; stays empty
    /// (unallocated) for the usual single-record hello.
    scratch: Vec<u8>,
    /// The records of the window already framed: a hello in many small
    /// records is walked once over all its reads, not once per read.
    cursor: FrameCursor,
}

impl SniPrereadCore {
    /// A core that has seen nothing yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds one input and returns what to do.
    ///
    /// Call with `Input::Bytes` after every read that grew the window (the
    /// whole window, from its first byte), with `Input::Timeout` when a timer
    /// armed from a `NeedMore` deadline (or the server-first timer) fires,
    /// and with `Input::FrontClosed` when the client goes away undecided.
    /// Once an output is terminal, every later call returns it again.
    pub fn handle_input(&mut self, config: &PrereadConfig, input: Input<'_>) -> Output {
        if let Some(decided) = &self.decided {
            return decided.clone();
        }
        let deadline_before = self.deadline;
        let output = match input {
            Input::Bytes { buf, now } => self.on_bytes(config, buf, now),
            Input::Timeout { now } => self.on_timeout(config, now),
            Input::FrontClosed => self.latch(Output::Reject(RejectReason::FrontClosed)),
        };
        debug_assert!(
            deadline_before.is_none() || self.deadline == deadline_before,
            "the deadline is armed once and never moves"
        );
        debug_assert!(!output.is_terminal() || self.decided.as_ref() == Some(&output));
        output
    }

    /// The deadline, once the first bytes armed it.
    pub fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// The latched decision, if any.
    pub fn decision(&self) -> Option<&Output> {
        self.decided.as_ref()
    }

    /// The normalized SNI of the ClientHello once one was parsed, whatever
    /// the decision: what an access log names for `SniUnmatched` or
    /// `AlpnUnmatched`.
    pub fn sni(&self) -> Option<&HostName> {
        match &self.decided {
            Some(Output::Routed(route)) => route.sni.as_ref(),
            _ => self.learned.sni.as_deref(),
        }
    }

    /// The client address of the inbound PROXY header, once a complete one
    /// gave one (`expect_proxy`): the real client behind a load balancer,
    /// for logs, whatever the decision.
    pub fn proxy_source(&self) -> Option<std::net::SocketAddr> {
        self.learned.preamble.and_then(|p| p.source)
    }

    /// Whether the client itself sent a byte: one past the inbound PROXY
    /// header with `expect_proxy` (a load balancer's header is not the
    /// client speaking), any byte without. A connection closed or timed out
    /// before that is a health check or an idle client, which the shell
    /// reports silently and keeps out of the duration percentiles; until
    /// then, a `Timeout` is the server-first timer's.
    pub fn client_spoke(&self) -> bool {
        self.learned.client_spoke
    }

    /// Whether the connection sent nothing, or exactly one complete inbound
    /// PROXY header and nothing after it: what a load balancer's health
    /// check sends. A partial header is not that: bytes came that never
    /// made a header, so a timeout or a close then is the client's fault
    /// (`Fragmented`, `FrontClosed`), logged and counted. The step closes
    /// silently only a connection that said nothing.
    pub fn said_nothing(&self) -> bool {
        !self.learned.client_spoke
            && (!self.learned.bytes_arrived || self.learned.preamble.is_some())
    }

    /// The parser's fault, when the window can never become a ClientHello:
    /// which rule it broke (for the alert a server would send).
    pub fn fault(&self) -> Option<preread_parser::tls::TlsError> {
        self.learned.fault
    }

    /// What a complete ClientHello showed of itself (its ECH extension, the
    /// highest version it offered, its size), whatever the decision; `None`
    /// until one was parsed whole, and on a catch-all listener, which
    /// never parses it.
    pub fn hello(&self) -> Option<HelloSummary> {
        self.learned.hello
    }

    /// The JA4 fingerprint of the complete ClientHello in `window` (the
    /// window the decision was taken on, or a longer one: it only grows);
    /// `None` until one was parsed whole. Computed here, after the
    /// decision, from where the decision saw the hello's fields.
    pub fn ja4(&self, window: &[u8]) -> Option<Ja4> {
        Some(crate::fingerprint::ja4(
            self.ja4_input(window)?,
            Transport::Tcp,
        ))
    }

    /// What JA4 reads of the complete ClientHello in `window`, for its
    /// raw form ([`Ja4::raw`]); `None` until one was parsed whole.
    pub fn ja4_input<'w>(&'w self, window: &'w [u8]) -> Option<Ja4Input<'w>> {
        let tls = window.get(self.content_offset()..)?;
        self.learned.spans.as_ref()?.input(tls, &self.scratch)
    }

    /// The access rule that refused the connection, when one did
    /// ([`RejectReason::AccessDenied`]).
    pub fn denied_by(&self) -> Option<DenyRule> {
        self.learned.denied_by
    }

    /// Whether a complete ClientHello offered TLS 1.3.
    pub fn offers_tls13(&self) -> bool {
        self.learned.offers_tls13
    }

    /// The record version of the client's first TLS record, once its
    /// header arrived.
    pub fn record_version(&self) -> Option<u16> {
        self.learned.record_version
    }

    /// Where the client's TLS bytes start in the window: past the inbound
    /// PROXY header once it is complete, else 0.
    pub fn content_offset(&self) -> usize {
        self.learned.preamble.map_or(0, |p| p.len)
    }

    fn latch(&mut self, output: Output) -> Output {
        debug_assert!(self.decided.is_none(), "a decision is taken once");
        debug_assert!(output.is_terminal());
        self.decided = Some(output.clone());
        output
    }

    fn arm_deadline(&mut self, config: &PrereadConfig, now: Instant) -> Instant {
        *self
            .deadline
            .get_or_insert_with(|| deadline_after(now, config.timeout))
    }

    fn on_bytes(&mut self, config: &PrereadConfig, buf: &[u8], now: Instant) -> Output {
        let deadline = self.arm_deadline(config, now);
        if now >= deadline {
            return self.latch(Output::Reject(RejectReason::Fragmented));
        }
        if buf.is_empty() {
            return Output::NeedMore { deadline };
        }
        let (scratch, cursor) = (&mut self.scratch, &mut self.cursor);
        if let Some(output) = verdict::decide(config, buf, scratch, cursor, &mut self.learned) {
            return self.latch(output);
        }
        if self.server_first_due
            && !self.learned.client_spoke
            && let Some(route) = self.server_first_route(config)
        {
            return self.latch(Output::Routed(Arc::new(route)));
        }
        Output::NeedMore { deadline }
    }

    fn on_timeout(&mut self, config: &PrereadConfig, now: Instant) -> Output {
        if !self.learned.client_spoke && config.server_first_timeout.is_some() {
            if let Some(route) = self.server_first_route(config) {
                return self.latch(Output::Routed(Arc::new(route)));
            }
            if config.expect_proxy && config.default_cluster.is_some() {
                // The load balancer has not finished its header: the route
                // needs it (a backend must not get it as data), so wait for
                // it, as long as a ClientHello would be waited for.
                self.server_first_due = true;
                let deadline = self.arm_deadline(config, now);
                if now < deadline {
                    return Output::NeedMore { deadline };
                }
            }
        }
        match self.deadline {
            // A timer that fired early (or a stale one) changes nothing.
            Some(deadline) if now < deadline => Output::NeedMore { deadline },
            _ => self.latch(Output::Reject(RejectReason::Fragmented)),
        }
    }

    /// The server-first fallback for a client that has not spoken, when the
    /// listener has one and the PROXY header (if expected) is complete: it
    /// carries the header's length and source like any other route.
    fn server_first_route(&self, config: &PrereadConfig) -> Option<Route> {
        config.server_first_timeout?;
        let cluster = config.default_cluster.as_ref()?;
        let mut route = Route::unread(cluster.clone(), Some(FallbackReason::ServerFirst));
        if config.expect_proxy {
            let preamble = self.learned.preamble?;
            route.content_offset = preamble.len;
            route.proxy_source = preamble.source;
        }
        Some(route)
    }
}
