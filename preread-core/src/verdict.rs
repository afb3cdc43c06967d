//! The decision for one window, as a pure function of the window and the
//! listener's config.
//!
//! Owns: the order of the checks (PROXY header, the catch-all, TLS
//! framing, ClientHello, SNI, route lookup, ALPN), the byte cap (reached, or announced past by a
//! length already read), and the default-cluster fallback.
//! Must never: keep state between calls (the latch and the deadline belong
//! to [`crate::SniPrereadCore`]), or route a malformed window anywhere.

use std::net::SocketAddr;
use std::sync::Arc;

use preread_parser::proxy::{ProxyParsed, parse_proxy_header_within};
use preread_parser::tls::{
    AlpnProtocols, ClientHello, FrameCursor, Needed, Parsed, TlsError, Transport,
    parse_client_hello_resuming,
};

use crate::alpn::AlpnOffer;
use crate::config::PrereadConfig;
use crate::fingerprint::{Cut, DenyRule, HelloSpans};
use crate::output::{Output, Route};
use crate::reject::{FallbackReason, RejectReason};
use crate::routes::Lookup;
use crate::sni::HostName;
use crate::summary::HelloSummary;

/// TLS 1.3 in `supported_versions`.
const TLS13: u16 = 0x0304;

/// What the core keeps of the windows it was fed, decided or not.
#[derive(Debug, Default)]
pub(crate) struct Learned {
    /// The normalized SNI of a complete ClientHello that was refused: what
    /// an access log names for a refused name (a routed one carries it in
    /// its `Route`). Boxed: inline, its 256 bytes would weigh on every
    /// connection a shell holds, most of which never need it.
    pub sni: Option<Box<HostName>>,
    /// The inbound PROXY header, once complete.
    pub preamble: Option<Preamble>,
    /// A byte of the client's own arrived: one past the inbound PROXY header
    /// (any byte without `expect_proxy`), or one that cannot be a header.
    /// Only ever goes from `false` to `true`, as the window only grows.
    pub client_spoke: bool,
    /// A byte arrived, a byte of an inbound PROXY header included. Only
    /// ever goes from `false` to `true`.
    pub bytes_arrived: bool,
    /// Why the window can never become a ClientHello, once it cannot.
    pub fault: Option<TlsError>,
    /// A complete ClientHello offered TLS 1.3 in `supported_versions`.
    pub offers_tls13: bool,
    /// What a complete ClientHello showed of itself (ECH, versions, size).
    pub hello: Option<HelloSummary>,
    /// The record version of the first record, once its header is in.
    pub record_version: Option<u16>,
    /// Where a complete ClientHello's fingerprinted fields lie.
    pub spans: Option<HelloSpans>,
    /// The access rule that refused the connection.
    pub denied_by: Option<DenyRule>,
}

/// A complete inbound PROXY header at the start of the window.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Preamble {
    /// Its length: where the client's own bytes start.
    pub len: usize,
    /// The client address it gave, if any.
    pub source: Option<SocketAddr>,
}

/// What was learned of the connection before the decision.
#[derive(Default)]
struct Seen<'a> {
    content_offset: usize,
    proxy_source: Option<SocketAddr>,
    hello_end: Option<usize>,
    sni: Option<HostName>,
    alpn: Option<AlpnProtocols<'a>>,
}

impl Seen<'_> {
    fn route(self, cluster: &crate::routes::ClusterId, fallback: Option<FallbackReason>) -> Route {
        Route {
            cluster: cluster.clone(),
            content_offset: self.content_offset,
            hello_end: self.hello_end,
            proxy_source: self.proxy_source,
            sni: self.sni,
            alpn: self.alpn.map(AlpnOffer::from),
            matched_sni: None,
            matched_alpn: None,
            fallback,
        }
    }
}

/// The terminal output for `window`, or `None` while more bytes are needed
/// and the cap is not reached. `scratch` is the parser's reassembly buffer
/// and `cursor` how far it framed earlier windows of the connection (the
/// answer is the same as without it, only cheaper); `learned` receives what the window shows whatever the answer (the name
/// of a refused hello, the PROXY header, whether the client spoke).
pub(crate) fn decide(
    config: &PrereadConfig,
    window: &[u8],
    scratch: &mut Vec<u8>,
    cursor: &mut FrameCursor,
    learned: &mut Learned,
) -> Option<Output> {
    learned.bytes_arrived |= !window.is_empty();
    let mut seen = Seen::default();
    if config.expect_proxy {
        match parse_proxy_header_within(window, config.max_bytes) {
            Ok(ProxyParsed::Complete(header)) => {
                seen.content_offset = header.len();
                seen.proxy_source = header.source();
                learned.preamble = Some(Preamble {
                    len: seen.content_offset,
                    source: seen.proxy_source,
                });
            }
            Ok(ProxyParsed::Incomplete(needed)) => return incomplete(config, window, needed),
            Err(_) => {
                learned.client_spoke = true;
                return Some(Output::Reject(RejectReason::ProxyHeaderInvalid));
            }
        }
    }
    learned.client_spoke |= window.len() > seen.content_offset;
    if let Some(cluster) = &config.catch_all {
        return Some(Output::Routed(Arc::new(seen.route(cluster, None))));
    }
    let tls = window.get(seen.content_offset..).unwrap_or_default();
    if let [_, major, minor, _, _, ..] = *tls {
        learned.record_version = Some(u16::from_be_bytes([major, minor]));
    }
    let limit = config.max_bytes.saturating_sub(seen.content_offset);
    match parse_client_hello_resuming(tls, limit, cursor, scratch) {
        Ok(Parsed::Complete(hello)) => {
            let cut = Cut::of(&hello);
            let output = routed_hello(config, &hello, seen, learned, Transport::Tcp);
            learned.spans = HelloSpans::locate(cut, tls, scratch);
            Some(output)
        }
        Ok(Parsed::Incomplete(needed)) => incomplete(config, window, needed),
        Err(error) => {
            learned.fault = Some(error);
            Some(match error {
                TlsError::NotTls => refuse(config, RejectReason::NotTls, seen),
                TlsError::MalformedRecord(_) => Output::Reject(RejectReason::MalformedRecord),
                _ => Output::Reject(RejectReason::MalformedHandshake),
            })
        }
    }
}

/// A window that is still a valid prefix: wait, unless it cannot end within
/// the cap. The parsers, given the cap, count `needed` so that it takes the
/// window past the cap exactly then: at the cap, or as soon as a record,
/// handshake or PROXY v2 length announces more than the cap holds (waiting
/// for those bytes would only hold the buffer until the timeout).
pub(crate) fn incomplete(config: &PrereadConfig, window: &[u8], needed: Needed) -> Option<Output> {
    let fits = match needed {
        Needed::AtLeast(n) => window.len().saturating_add(n.get()) <= config.max_bytes,
        Needed::Unknown => window.len() < config.max_bytes,
    };
    (!fits).then_some(Output::Reject(RejectReason::TooLarge))
}

/// Refuses for `reason`, or sends to the default cluster when the listener
/// has one and the reason allows it.
fn refuse(config: &PrereadConfig, reason: RejectReason, seen: Seen<'_>) -> Output {
    match (reason.fallback(), &config.default_cluster) {
        (Some(fallback), Some(cluster)) => {
            Output::Routed(Arc::new(seen.route(cluster, Some(fallback))))
        }
        _ => Output::Reject(reason),
    }
}

/// The verdict on a whole ClientHello, `seen` what came before it: the
/// route, then the `deny_ja4` lists.
fn routed_hello<'a>(
    config: &PrereadConfig,
    hello: &ClientHello<'a>,
    seen: Seen<'a>,
    learned: &mut Learned,
    transport: Transport,
) -> Output {
    learned.offers_tls13 = hello
        .supported_versions
        .is_some_and(|versions| versions.iter().any(|v| v == TLS13));
    learned.hello = Some(HelloSummary::of(hello));
    let output = route(config, hello, seen, &mut learned.sni);
    deny_ja4(config, hello, output, learned, transport)
}

/// The verdict on a ClientHello that came without a record layer or a
/// PROXY header (QUIC's CRYPTO stream): the same checks, in the same order,
/// as a TCP window's from its ClientHello on, the JA4 a QUIC one (`q`).
/// The route's `hello_end` is the hello's length in the stream.
pub(crate) fn decide_hello(
    config: &PrereadConfig,
    hello: &ClientHello<'_>,
    learned: &mut Learned,
) -> Output {
    learned.bytes_arrived = true;
    learned.client_spoke = true;
    routed_hello(config, hello, Seen::default(), learned, Transport::Quic)
}

/// A flow refused for `reason` before any ClientHello was read (QUIC:
/// not a long header): the default cluster when the reason allows it.
pub(crate) fn refuse_unread(config: &PrereadConfig, reason: RejectReason) -> Output {
    refuse(config, reason, Seen::default())
}

/// A routed connection whose fingerprint a `deny_ja4` list of the
/// listener or of the routed cluster holds is refused
/// ([`crate::fingerprint::DenyJa4::refuses`] says how little it computes).
fn deny_ja4(
    config: &PrereadConfig,
    hello: &ClientHello<'_>,
    output: Output,
    learned: &mut Learned,
    transport: Transport,
) -> Output {
    let Output::Routed(route) = &output else {
        return output;
    };
    let Some(rule) = config.deny_ja4.refuses(hello, transport, &route.cluster) else {
        return output;
    };
    learned.denied_by = Some(rule);
    learned.sni = route.sni.map(Box::new);
    Output::Reject(RejectReason::AccessDenied)
}

fn route<'a>(
    config: &PrereadConfig,
    hello: &ClientHello<'a>,
    mut seen: Seen<'a>,
    refused_sni: &mut Option<Box<HostName>>,
) -> Output {
    seen.hello_end = Some(seen.content_offset + hello.end);
    seen.alpn = hello.alpn;
    let Some(raw) = hello.server_name else {
        let reason = if hello.ech.is_some() {
            RejectReason::EchOuterAbsent
        } else {
            RejectReason::NoSni
        };
        return refuse(config, reason, seen);
    };
    // The parser already enforces the same rules, so this only fails if the
    // two ever drift apart; refusing is the safe answer then.
    let Some(sni) = HostName::normalize(raw) else {
        return Output::Reject(RejectReason::MalformedHandshake);
    };
    seen.sni = Some(sni);
    let offer = hello.alpn.into_iter().flatten();
    let lookup = config.routes.lookup(sni.as_bytes(), offer.clone());
    debug_assert!(
        lookup == config.routes.lookup(sni.as_bytes(), offer),
        "route lookup must be a pure function of the name and the offer"
    );
    match lookup {
        Lookup::Matched {
            cluster,
            pattern,
            protocol,
        } => {
            let mut route = seen.route(cluster, None);
            route.matched_sni = Some(pattern.clone());
            route.matched_alpn = protocol.map(Box::from);
            Output::Routed(Arc::new(route))
        }
        Lookup::SniUnmatched => {
            let output = refuse(config, RejectReason::SniUnmatched, seen);
            if matches!(output, Output::Reject(_)) {
                *refused_sni = Some(Box::new(sni));
            }
            output
        }
        Lookup::AlpnUnmatched { .. } => {
            *refused_sni = Some(Box::new(sni));
            Output::Reject(RejectReason::AlpnUnmatched)
        }
    }
}
