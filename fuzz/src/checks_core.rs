//! Invariants of the routing core (`preread_core::SniPrereadCore`) under a
//! data-derived sequence of inputs and a data-derived listener config.
//!
//! Owns: [`check_core`], which panics when an invariant breaks. Included
//! with `#[path]` by `preread-core/tests/fuzz_replay.rs`, so it may use
//! `preread_core`, `preread_parser` (a dependency of the core) and
//! `arbitrary` (a dev-dependency there), and nothing of `checks_parser`.
//!
//! Input layout: the whole input is the client's byte stream; the control
//! bytes (config and the input sequence) are its last [`CONTROL_LEN`] bytes
//! read backwards. A raw ClientHello therefore makes a useful seed: its
//! first bytes stay a well-formed record while mutations of its tail (mostly
//! opaque extension data) steer the config and the chunking.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arbitrary::Unstructured;
use preread_core::pattern::validate_sni_pattern;
use preread_core::routes::{AlpnSet, ClusterId, Lookup, RouteTable};
use preread_core::sni::HostName;
use preread_core::{
    AlpnOffer, FallbackReason, Input, Output, PrereadConfig, RejectReason, Route, SniPrereadCore,
};
use preread_parser::proxy::{ProxyParsed, parse_proxy_header};
use preread_parser::tls::{Parsed, TlsError, parse_client_hello};

/// How many bytes at the end of the input steer the config and the inputs.
pub const CONTROL_LEN: usize = 64;

/// At most this many steered inputs before the closing ones.
const MAX_STEPS: usize = 24;

/// The pool the route table is drawn from: `(pattern, alpn, cluster)`, an
/// empty ALPN list meaning "any". Conflict-free in every subset. Names
/// cover the committed corpus (`testdata/clienthellos`). The one copy is
/// `testdata/route_pool.rs`, which every includer of this file declares as
/// `crate::route_pool`.
const ROUTES: &[(&str, &[&str], &str)] = crate::route_pool::POOL;

const DEFAULT_CLUSTER: &str = "default";

fn config(u: &mut Unstructured<'_>, data: &[u8]) -> PrereadConfig {
    // Control bytes of zero (a ClientHello's padding, an exhausted input)
    // pick the plain listener: every route, the largest cap, a 10 s timeout.
    let mask: u16 = !u.arbitrary::<u16>().unwrap_or(0);
    let mut routes = RouteTable::new();
    for (i, (pattern, alpn, cluster)) in ROUTES.iter().enumerate() {
        if mask & (1 << i) == 0 {
            continue;
        }
        let pattern = validate_sni_pattern(pattern).expect("valid pool pattern");
        let alpn = if alpn.is_empty() {
            AlpnSet::Any
        } else {
            AlpnSet::protocols(alpn.iter()).expect("valid pool ALPN")
        };
        routes
            .insert(pattern, alpn, Arc::from(*cluster))
            .expect("the route pool is conflict-free");
    }
    let mut config = PrereadConfig::new(routes);
    // Mostly the largest cap, so that real ClientHellos fit; now and then a
    // tiny one, to reach TooLarge inside the record header or PROXY header.
    config.max_bytes = match u.int_in_range(0..=3u8).unwrap_or(0) {
        0 | 1 => 4096,
        2 => u.int_in_range(5..=4096).unwrap_or(4096),
        _ => u.int_in_range(5..=64).unwrap_or(5),
    };
    config.timeout = match u.int_in_range(0..=15u8).unwrap_or(0) {
        // Overflows `Instant`: the core falls back to a far-future deadline.
        14 => Duration::MAX,
        15 => Duration::ZERO,
        _ => Duration::from_millis(10_000 - u.int_in_range(0..=9_999).unwrap_or(0)),
    };
    // Mostly what the stream looks like, so that seeds with and without a
    // PROXY header both reach the ClientHello; the other way now and then.
    let looks_proxy = matches!(data.first(), Some(b'P' | b'\r'));
    config.expect_proxy = looks_proxy != (u.int_in_range(0..=7u8).unwrap_or(0) == 7);
    if u.arbitrary().unwrap_or(false) {
        config.default_cluster = Some(Arc::from(DEFAULT_CLUSTER));
    }
    if u.arbitrary().unwrap_or(false) {
        config.server_first_timeout =
            Some(Duration::from_millis(u.int_in_range(1..=5000).unwrap_or(1)));
    }
    config
}

/// How far the clock moves before the next input: mostly not at all.
fn time_step(u: &mut Unstructured<'_>) -> Duration {
    match u.int_in_range(0..=15u8).unwrap_or(0) {
        0..=10 => Duration::ZERO,
        11..=13 => Duration::from_millis(u.int_in_range(1..=100).unwrap_or(1)),
        14 => Duration::from_millis(u.int_in_range(1..=10_000).unwrap_or(1)),
        _ => Duration::from_secs(24 * 3600),
    }
}

/// Drives one [`SniPrereadCore`] over a data-derived sequence of inputs and
/// checks, after every input: the first terminal output is returned
/// unchanged for every later input; the deadline is armed once (by the
/// first `Bytes`, or by a server-first timeout that waits for the PROXY
/// header) and never moves; `client_spoke` follows the PROXY header; `NeedMore` carries `core.deadline()`; a Routed
/// output without fallback has `hello_end` within the window; and the output
/// is exactly what a model built from the parsers and the route table says
/// (so Malformed*, ProxyHeaderInvalid, TooLarge, Fragmented and FrontClosed
/// are never Routed, and only the four fallback shapes reach the default
/// cluster). Returns the decision, so a replay can tell what it exercised.
pub fn check_core(data: &[u8]) -> Output {
    let base = Instant::now();
    let control: Vec<u8> = data[data.len().saturating_sub(CONTROL_LEN)..]
        .iter()
        .rev()
        .copied()
        .collect();
    let mut u = Unstructured::new(&control);
    let config = config(&mut u, data);
    let mut run = Run {
        config: &config,
        core: SniPrereadCore::new(),
        latched: None,
        spoke: false,
        preamble: None,
        server_first_due: false,
        window_len: 0,
        scratch: Vec::new(),
    };
    let mut elapsed = Duration::ZERO;
    let mut end: usize = 0;
    for _ in 0..MAX_STEPS {
        if u.is_empty() {
            break;
        }
        elapsed += time_step(&mut u);
        let now = base + elapsed;
        match u.int_in_range(0..=31u8).unwrap_or(0) {
            0..=26 => {
                let grow = match u.int_in_range(0..=3u8).unwrap_or(0) {
                    0 => u.int_in_range(1..=16).unwrap_or(1),
                    1 => u.int_in_range(1..=512).unwrap_or(1),
                    2 => 0,
                    _ => data.len(),
                };
                end = end.saturating_add(grow).min(data.len());
                run.feed(Input::Bytes {
                    buf: &data[..end],
                    now,
                });
            }
            27..=30 => run.feed(Input::Timeout { now }),
            _ => run.feed(Input::FrontClosed),
        }
    }
    // Close the run: the whole stream, then the deadline's timer, which
    // must decide; then the latch must hold against every kind of input.
    let now = base + elapsed;
    run.feed(Input::Bytes { buf: data, now });
    if run.latched.is_none() {
        let deadline = run.core.deadline().expect("Bytes armed the deadline");
        run.feed(Input::Timeout { now: deadline });
    }
    assert!(
        run.latched.is_some(),
        "no decision after a timeout at the deadline"
    );
    let later = base + elapsed + Duration::from_secs(3600);
    run.feed(Input::Bytes {
        buf: data,
        now: later,
    });
    run.feed(Input::Timeout { now: later });
    run.feed(Input::FrontClosed);
    run.feed(Input::Bytes {
        buf: &[],
        now: base,
    });
    run.latched.expect("decided")
}

#[derive(Debug)]
struct Run<'c> {
    config: &'c PrereadConfig,
    core: SniPrereadCore,
    latched: Option<Output>,
    /// The model of `client_spoke`: a byte past a complete PROXY header (any
    /// byte without `expect_proxy`), or one that cannot be a header.
    spoke: bool,
    /// The complete PROXY header's length and source.
    preamble: Option<(usize, Option<SocketAddr>)>,
    /// A server-first timeout came before the PROXY header was complete.
    server_first_due: bool,
    /// Length of the window of the latest `Bytes`.
    window_len: usize,
    scratch: Vec<u8>,
}

impl Run<'_> {
    fn feed(&mut self, input: Input<'_>) {
        let deadline_before = self.core.deadline();
        let out = self.core.handle_input(self.config, input);
        assert!(
            deadline_before.is_none() || self.core.deadline() == deadline_before,
            "the deadline moved from {deadline_before:?} to {:?} on {input:?}",
            self.core.deadline()
        );
        if let Some(first) = &self.latched {
            assert_eq!(
                &out, first,
                "{input:?} after the terminal output changed it"
            );
            assert_eq!(self.core.decision(), Some(first));
            assert_eq!(self.core.client_spoke(), self.spoke);
            return;
        }
        let waits_for_header = !self.spoke
            && self.config.expect_proxy
            && self.preamble.is_none()
            && self.config.server_first_timeout.is_some()
            && self.config.default_cluster.is_some();
        match input {
            Input::Bytes { buf, now } => {
                if deadline_before.is_none() {
                    let armed = self
                        .core
                        .deadline()
                        .expect("the first Bytes arms the deadline");
                    match now.checked_add(self.config.timeout) {
                        Some(want) => assert_eq!(armed, want, "deadline is now + timeout"),
                        None => assert!(armed >= now, "far-future deadline before now"),
                    }
                }
                self.window_len = buf.len();
            }
            Input::Timeout { now } if waits_for_header && deadline_before.is_none() => {
                let armed = self
                    .core
                    .deadline()
                    .expect("a server-first timeout before the PROXY header arms the deadline");
                match now.checked_add(self.config.timeout) {
                    Some(want) => assert_eq!(armed, want, "deadline is now + timeout"),
                    None => assert!(armed >= now, "far-future deadline before now"),
                }
            }
            Input::Timeout { .. } | Input::FrontClosed => assert_eq!(
                self.core.deadline(),
                deadline_before,
                "only Bytes (or a server-first timeout waiting for the PROXY header) arms the deadline"
            ),
        }

        match &out {
            Output::NeedMore { deadline } => {
                assert_eq!(
                    Some(*deadline),
                    self.core.deadline(),
                    "NeedMore carries the armed deadline"
                );
                assert_eq!(self.core.decision(), None);
            }
            terminal => {
                assert_eq!(
                    self.core.decision(),
                    Some(terminal),
                    "the decision is latched"
                );
                self.latched = Some(terminal.clone());
            }
        }
        match &out {
            Output::Routed(route) => {
                match route.fallback {
                    None => {
                        let end = route.hello_end.expect("a matched route parsed a hello");
                        assert!(
                            route.content_offset < end && end <= self.window_len,
                            "hello_end {end} outside the window of {} bytes",
                            self.window_len
                        );
                        assert!(route.sni.is_some() && route.matched_sni.is_some());
                    }
                    Some(_) => assert_eq!(
                        route.cluster.as_ref(),
                        DEFAULT_CLUSTER,
                        "a fallback goes to the default cluster"
                    ),
                }
                if let Some(end) = route.hello_end {
                    assert!(end <= self.window_len);
                }
            }
            Output::Reject(reason) => assert!(
                reason.fallback().is_none() || self.config.default_cluster.is_none(),
                "{reason} refused although a default cluster is configured"
            ),
            Output::NeedMore { .. } => {}
        }
        let want = self.model(input);
        assert_eq!(out, want, "the core disagrees with the model on {input:?}");
        assert_eq!(
            self.core.client_spoke(),
            self.spoke,
            "client_spoke after {input:?}"
        );
    }

    /// What the core learns of a window it parses: the PROXY header, and
    /// whether the client spoke.
    fn learn(&mut self, buf: &[u8]) {
        if !self.config.expect_proxy {
            self.spoke |= !buf.is_empty();
            return;
        }
        match parse_proxy_header(buf) {
            Ok(ProxyParsed::Complete(header)) => {
                self.preamble = Some((header.len(), header.source()));
                self.spoke |= buf.len() > header.len();
            }
            Ok(ProxyParsed::Incomplete(_)) => {}
            Err(_) => self.spoke = true,
        }
    }

    /// The server-first fallback, past the PROXY header when one is
    /// expected; `None` while that header is incomplete.
    fn server_first_route(&self, cluster: &ClusterId) -> Option<Output> {
        let mut route = Route::unread(cluster.clone(), Some(FallbackReason::ServerFirst));
        if self.config.expect_proxy {
            let (len, source) = self.preamble?;
            route.content_offset = len;
            route.proxy_source = source;
        }
        Some(Output::Routed(Arc::new(route)))
    }

    /// What the core must answer to `input` while undecided, from the
    /// documented contract: the parsers' verdicts, the byte cap, the
    /// deadline, the route table and the default cluster.
    fn model(&mut self, input: Input<'_>) -> Output {
        let config = self.config;
        match input {
            Input::FrontClosed => Output::Reject(RejectReason::FrontClosed),
            Input::Timeout { now } => {
                if !self.spoke
                    && config.server_first_timeout.is_some()
                    && let Some(cluster) = &config.default_cluster
                {
                    if let Some(route) = self.server_first_route(cluster) {
                        return route;
                    }
                    self.server_first_due = true;
                }
                match self.core.deadline() {
                    Some(deadline) if now < deadline => Output::NeedMore { deadline },
                    _ => Output::Reject(RejectReason::Fragmented),
                }
            }
            Input::Bytes { buf, now } => {
                let deadline = self.core.deadline().expect("armed");
                if now >= deadline {
                    return Output::Reject(RejectReason::Fragmented);
                }
                if buf.is_empty() {
                    return Output::NeedMore { deadline };
                }
                self.learn(buf);
                let out = self.model_window(buf, deadline);
                if out == (Output::NeedMore { deadline })
                    && self.server_first_due
                    && !self.spoke
                    && let Some(cluster) = &config.default_cluster
                    && let Some(route) = self.server_first_route(cluster)
                {
                    return route;
                }
                out
            }
        }
    }

    /// The verdict on one window from the parsers and the route table alone.
    fn model_window(&mut self, buf: &[u8], deadline: Instant) -> Output {
        let config = self.config;
        let incomplete = if buf.len() >= config.max_bytes {
            Output::Reject(RejectReason::TooLarge)
        } else {
            Output::NeedMore { deadline }
        };
        let mut base = Route {
            cluster: Arc::from(DEFAULT_CLUSTER),
            content_offset: 0,
            hello_end: None,
            proxy_source: None,
            sni: None,
            alpn: None,
            matched_sni: None,
            matched_alpn: None,
            fallback: None,
        };
        if config.expect_proxy {
            match parse_proxy_header(buf) {
                Ok(ProxyParsed::Complete(header)) => {
                    base.content_offset = header.len();
                    base.proxy_source = header.source();
                }
                Ok(ProxyParsed::Incomplete(_)) => return incomplete,
                Err(_) => return Output::Reject(RejectReason::ProxyHeaderInvalid),
            }
        }
        let hello = match parse_client_hello(&buf[base.content_offset..], &mut self.scratch) {
            Ok(Parsed::Complete(hello)) => hello,
            Ok(Parsed::Incomplete(_)) => return incomplete,
            Err(TlsError::NotTls) => return refuse(config, RejectReason::NotTls, base),
            Err(TlsError::MalformedRecord(_)) => {
                return Output::Reject(RejectReason::MalformedRecord);
            }
            Err(_) => return Output::Reject(RejectReason::MalformedHandshake),
        };
        base.hello_end = Some(base.content_offset + hello.end);
        base.alpn = hello.alpn.map(AlpnOffer::from);
        let Some(raw) = hello.server_name else {
            let reason = if hello.ech.is_some() {
                RejectReason::EchOuterAbsent
            } else {
                RejectReason::NoSni
            };
            return refuse(config, reason, base);
        };
        let Some(sni) = HostName::normalize(raw) else {
            return Output::Reject(RejectReason::MalformedHandshake);
        };
        base.sni = Some(sni);
        let offer = hello.alpn.into_iter().flatten();
        match config.routes.lookup(sni.as_bytes(), offer) {
            Lookup::Matched {
                cluster,
                pattern,
                protocol,
            } => Output::Routed(std::sync::Arc::new(Route {
                cluster: ClusterId::clone(cluster),
                matched_sni: Some(pattern.clone()),
                matched_alpn: protocol.map(Box::from),
                ..base
            })),
            Lookup::SniUnmatched => refuse(config, RejectReason::SniUnmatched, base),
            Lookup::AlpnUnmatched { .. } => Output::Reject(RejectReason::AlpnUnmatched),
        }
    }
}

/// The model's refusal: the default cluster for the four fallback shapes
/// when configured, a reject otherwise.
fn refuse(config: &PrereadConfig, reason: RejectReason, base: Route) -> Output {
    match (reason.fallback(), &config.default_cluster) {
        (Some(fallback), Some(cluster)) => Output::Routed(std::sync::Arc::new(Route {
            cluster: cluster.clone(),
            fallback: Some(fallback),
            ..base
        })),
        _ => Output::Reject(reason),
    }
}
