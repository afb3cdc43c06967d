//! What the shipped parsers and route table read in a window, and whether
//! the core's answer to on-time bytes is explained by it: the half of
//! [`super::check_core`] that judges answers, apart from the half that
//! drives the step.
//!
//! Owns: [`Reading`] (the PROXY header, then the TLS records, as the
//! parsers read them under the listener's cap), [`explain`] and the
//! evidence each reason needs. Must never: decide a verdict of its own;
//! every fact comes from `preread_parser`, `HostName::normalize` or the
//! route table's lookup.

use std::net::SocketAddr;
use std::sync::Arc;

use preread_core::routes::Lookup;
use preread_core::sni::HostName;
use preread_core::{
    AlpnOffer, FallbackReason, Output, PrereadConfig, RejectReason, Route, SniPrereadCore,
};
use preread_parser::proxy::{ProxyParsed, parse_proxy_header, parse_proxy_header_within};
use preread_parser::tls::{
    Needed, Parsed, TlsError, parse_client_hello, parse_client_hello_within,
};

use super::DEFAULT_CLUSTER;

/// What a core learned of the windows it was fed, whatever it answered.
pub(super) fn learned(core: &SniPrereadCore) -> impl PartialEq + std::fmt::Debug + '_ {
    (
        core.client_spoke(),
        core.sni(),
        core.proxy_source(),
        core.fault(),
        core.offers_tls13(),
        core.record_version(),
        core.content_offset(),
    )
}

/// The complete PROXY header's length and source, `(0, None)` without
/// `expect_proxy`; `None` while it is not complete (or invalid).
pub(super) fn proxy_header(
    config: &PrereadConfig,
    window: &[u8],
) -> Option<(usize, Option<SocketAddr>)> {
    if !config.expect_proxy {
        return Some((0, None));
    }
    match parse_proxy_header(window) {
        Ok(ProxyParsed::Complete(header)) => Some((header.len(), header.source())),
        Ok(ProxyParsed::Incomplete(_)) | Err(_) => None,
    }
}

/// `client_spoke`, as the PROXY parser reads the window: a byte past a
/// complete header, or bytes that cannot be one; without `expect_proxy`,
/// any byte.
pub(super) fn client_spoke(config: &PrereadConfig, window: &[u8]) -> bool {
    if !config.expect_proxy {
        return !window.is_empty();
    }
    match parse_proxy_header(window) {
        Ok(ProxyParsed::Complete(header)) => window.len() > header.len(),
        Ok(ProxyParsed::Incomplete(_)) => false,
        Err(_) => true,
    }
}

/// The server-first fallback past a PROXY header of `offset` bytes.
pub(super) fn server_first_route(offset: usize, source: Option<SocketAddr>) -> Route {
    let mut route = Route::unread(
        Arc::from(DEFAULT_CLUSTER),
        Some(FallbackReason::ServerFirst),
    );
    route.content_offset = offset;
    route.proxy_source = source;
    route
}

/// Whether the stream holds a complete ClientHello (past a complete PROXY
/// header, with `expect_proxy`) that ends within `cap` bytes, as the
/// parsers read it with no cap at all: then no window of it is `TooLarge`.
pub(super) fn ends_within(config: &PrereadConfig, stream: &[u8], cap: usize) -> bool {
    let Some((offset, _)) = proxy_header(config, stream) else {
        return false;
    };
    let mut scratch = Vec::new();
    match parse_client_hello(&stream[offset..], &mut scratch) {
        Ok(Parsed::Complete(hello)) => offset + hello.end <= cap,
        Ok(Parsed::Incomplete(_)) | Err(_) => false,
    }
}

/// Whether a window of `have` bytes, which the parsers given the cap call
/// incomplete and `needed` short, can still end within `cap` (their count
/// passes the cap exactly when it cannot).
fn fits(have: usize, needed: Needed, cap: usize) -> bool {
    match needed {
        Needed::AtLeast(n) => have.saturating_add(n.get()) <= cap,
        Needed::Unknown => have < cap,
    }
}

/// What the shipped parsers read in a window under the listener's cap: the
/// PROXY header (with `expect_proxy`), then the TLS records after it.
#[derive(Debug)]
pub(super) struct Reading {
    proxy: Proxy,
    /// `None` while the PROXY header is incomplete or invalid.
    tls: Option<Tls>,
}

#[derive(Debug)]
enum Proxy {
    NotExpected,
    Invalid,
    /// `fits`: it can still end within the cap.
    Incomplete {
        fits: bool,
    },
    Complete {
        len: usize,
        source: Option<SocketAddr>,
    },
}

#[derive(Debug)]
enum Tls {
    /// `fits`: the hello can still end within the cap.
    Incomplete {
        fits: bool,
    },
    Refused(TlsError),
    /// Boxed: a `HostName` is 256 bytes.
    Hello(Box<Hello>),
}

/// A complete ClientHello, as far as the route needs it.
#[derive(Debug)]
struct Hello {
    /// In the window: past the PROXY header.
    end: usize,
    /// The `host_name`, normalized (`Some(None)`: it does not normalize).
    name: Option<Option<HostName>>,
    ech: bool,
    alpn: Option<AlpnOffer>,
}

impl Reading {
    pub(super) fn of(config: &PrereadConfig, window: &[u8]) -> Self {
        let cap = config.max_bytes;
        let proxy = if config.expect_proxy {
            match parse_proxy_header_within(window, cap) {
                Ok(ProxyParsed::Complete(header)) => Proxy::Complete {
                    len: header.len(),
                    source: header.source(),
                },
                Ok(ProxyParsed::Incomplete(needed)) => Proxy::Incomplete {
                    fits: fits(window.len(), needed, cap),
                },
                Err(_) => Proxy::Invalid,
            }
        } else {
            Proxy::NotExpected
        };
        let offset = match proxy {
            Proxy::NotExpected => 0,
            Proxy::Complete { len, .. } => len,
            Proxy::Invalid | Proxy::Incomplete { .. } => return Self { proxy, tls: None },
        };
        let mut scratch = Vec::new();
        let tls = &window[offset..];
        let limit = cap.saturating_sub(offset);
        let tls = match parse_client_hello_within(tls, limit, &mut scratch) {
            Ok(Parsed::Incomplete(needed)) => Tls::Incomplete {
                fits: fits(tls.len(), needed, limit),
            },
            Ok(Parsed::Complete(hello)) => Tls::Hello(Box::new(Hello {
                end: offset + hello.end,
                name: hello.server_name.map(HostName::normalize),
                ech: hello.ech.is_some(),
                alpn: hello.alpn.map(AlpnOffer::from),
            })),
            Err(e) => Tls::Refused(e),
        };
        Self {
            proxy,
            tls: Some(tls),
        }
    }

    pub(super) fn offset(&self) -> usize {
        match self.proxy {
            Proxy::Complete { len, .. } => len,
            Proxy::NotExpected | Proxy::Invalid | Proxy::Incomplete { .. } => 0,
        }
    }

    pub(super) fn source(&self) -> Option<SocketAddr> {
        match self.proxy {
            Proxy::Complete { source, .. } => source,
            Proxy::NotExpected | Proxy::Invalid | Proxy::Incomplete { .. } => None,
        }
    }

    /// The TLS parser's error, when it refused the window.
    pub(super) fn fault(&self) -> Option<TlsError> {
        match self.tls {
            Some(Tls::Refused(error)) => Some(error),
            _ => None,
        }
    }

    /// Incomplete, and `Some(fits)`: whether it can still end within the cap.
    fn incomplete(&self) -> Option<bool> {
        match (&self.proxy, &self.tls) {
            (Proxy::Incomplete { fits }, _) | (_, Some(Tls::Incomplete { fits })) => Some(*fits),
            _ => None,
        }
    }

    fn hello(&self) -> Option<&Hello> {
        match &self.tls {
            Some(Tls::Hello(hello)) => Some(hello),
            _ => None,
        }
    }

    /// The normalized name of a complete hello.
    pub(super) fn sni(&self) -> Option<HostName> {
        self.hello().and_then(|hello| hello.name.flatten())
    }

    /// The route table's answer for the hello's name and offer.
    fn lookup<'t>(&self, config: &'t PrereadConfig) -> Option<Lookup<'t>> {
        let hello = self.hello()?;
        let sni = hello.name.flatten()?;
        let offer = hello.alpn.iter().flat_map(AlpnOffer::iter);
        Some(config.routes.lookup(sni.as_bytes(), offer))
    }
}

/// Whether what the parsers read in the window is the evidence that
/// defines `reason`.
fn evidence(config: &PrereadConfig, reading: &Reading, reason: RejectReason) -> bool {
    let hello = reading.hello();
    match reason {
        RejectReason::ProxyHeaderInvalid => {
            config.expect_proxy && matches!(reading.proxy, Proxy::Invalid)
        }
        // At the cap, or a length read so far announces more than it holds.
        RejectReason::TooLarge => reading.incomplete() == Some(false),
        RejectReason::NotTls => matches!(reading.tls, Some(Tls::Refused(TlsError::NotTls))),
        RejectReason::MalformedRecord => {
            matches!(
                reading.tls,
                Some(Tls::Refused(TlsError::MalformedRecord(_)))
            )
        }
        RejectReason::MalformedHandshake => {
            matches!(
                reading.tls,
                Some(Tls::Refused(TlsError::MalformedHandshake(_)))
            ) || hello.is_some_and(|h| matches!(h.name, Some(None)))
        }
        RejectReason::NoSni => hello.is_some_and(|h| h.name.is_none() && !h.ech),
        RejectReason::EchOuterAbsent => hello.is_some_and(|h| h.name.is_none() && h.ech),
        RejectReason::SniUnmatched => {
            matches!(reading.lookup(config), Some(Lookup::SniUnmatched))
        }
        RejectReason::AlpnUnmatched => {
            matches!(reading.lookup(config), Some(Lookup::AlpnUnmatched { .. }))
        }
        // Never the answer to on-time bytes; the QUIC reasons never a
        // TCP listener's.
        RejectReason::Fragmented
        | RejectReason::FrontClosed
        | RejectReason::QuicUndecryptable
        | RejectReason::QuicVersion => false,
        // Only a `deny_ja4` list refuses a whole hello that would be routed.
        RejectReason::AccessDenied => !config.deny_ja4.is_empty() && hello.is_some(),
    }
}

/// The reason a fallback stands for.
fn refused_as(fallback: FallbackReason) -> Option<RejectReason> {
    let reason = match fallback {
        FallbackReason::NotTls => RejectReason::NotTls,
        FallbackReason::NoSni => RejectReason::NoSni,
        FallbackReason::SniUnmatched => RejectReason::SniUnmatched,
        FallbackReason::EchOuterAbsent => RejectReason::EchOuterAbsent,
        FallbackReason::ServerFirst => return None,
    };
    assert_eq!(
        reason.fallback(),
        Some(fallback),
        "{reason} falls back as {fallback}"
    );
    Some(reason)
}

/// The core's answer to on-time `Bytes` of `window`, against what the
/// parsers and the route table read there. `late_header`: the server-first
/// wait for the PROXY header is over with this window (§8).
pub(super) fn explain(
    config: &PrereadConfig,
    window: &[u8],
    reading: &Reading,
    output: &Output,
    late_header: bool,
) {
    let what = || {
        format!(
            "{output:?} for a {}-byte window read as {reading:?}",
            window.len()
        )
    };
    match output {
        Output::NeedMore { .. } => assert!(
            reading.incomplete() == Some(true) && window.len() < config.max_bytes,
            "{}",
            what()
        ),
        Output::Reject(reason) => {
            assert!(evidence(config, reading, *reason), "{}", what());
        }
        Output::Routed(route) => {
            let (offset, source) = (reading.offset(), reading.source());
            assert_eq!(route.content_offset, offset, "{}", what());
            assert_eq!(route.proxy_source, source, "{}", what());
            let hello = reading.hello();
            if let Some(end) = route.hello_end {
                assert!(
                    offset < end && end <= window.len() && hello.is_some_and(|h| h.end == end),
                    "hello_end outside the window: {}",
                    what()
                );
            }
            let Some(fallback) = route.fallback else {
                // Matched: by the lookup, on the hello's name and offer.
                let hello = hello.unwrap_or_else(|| panic!("matched without a hello: {}", what()));
                let Some(Lookup::Matched {
                    cluster,
                    pattern,
                    protocol,
                }) = reading.lookup(config)
                else {
                    panic!("routed, the lookup says otherwise: {}", what());
                };
                assert_eq!(&route.cluster, cluster, "{}", what());
                assert_eq!(route.matched_sni.as_ref(), Some(pattern), "{}", what());
                assert_eq!(route.matched_alpn.as_deref(), protocol, "{}", what());
                assert_eq!(route.sni, reading.sni(), "{}", what());
                assert_eq!(route.alpn, hello.alpn, "{}", what());
                assert_eq!(route.hello_end, Some(hello.end), "{}", what());
                return;
            };
            let Some(reason) = refused_as(fallback) else {
                assert!(late_header, "server-first on bytes, no wait: {}", what());
                assert!(
                    !matches!(reading.proxy, Proxy::Incomplete { .. } | Proxy::Invalid)
                        && window.len() == offset,
                    "{}",
                    what()
                );
                assert_eq!(**route, server_first_route(offset, source), "{}", what());
                return;
            };
            assert!(evidence(config, reading, reason), "{}", what());
            let mut want = Route::unread(Arc::from(DEFAULT_CLUSTER), Some(fallback));
            want.content_offset = offset;
            want.proxy_source = source;
            want.hello_end = hello.map(|h| h.end);
            want.sni = reading.sni();
            want.alpn = hello.and_then(|h| h.alpn.clone());
            assert_eq!(
                **route,
                want,
                "a fallback carries what was read: {}",
                what()
            );
        }
    }
}
