//! What a backend receives before the client's bytes: the PROXY handoff
//! decided by the routed cluster's mode.
//!
//! Owns: [`ProxyMode`], [`Handoff`] and [`handoff`]: which leading bytes of
//! the window are dropped, and which header is synthesized. The listener's
//! `expect_proxy` only says whether an inbound header precedes the
//! ClientHello (`Route::content_offset`); the cluster decides what the
//! backend sees:
//! - `None`: the inbound header, if any, is dropped; the backend gets the
//!   ClientHello and what follows, untouched.
//! - `Relay`: the inbound header is replayed verbatim, then the rest.
//! - `Send`: the inbound header is dropped; the proxy writes its own v2
//!   header (source: the inbound header's source, else the client; TLVs
//!   AUTHORITY = the SNI and ALPN = the matched protocol), then the hello.
//!
//! Must never: change a byte of the client's stream.

use std::net::SocketAddr;

use preread_parser::proxy::{PP2_TYPE_ALPN, PP2_TYPE_AUTHORITY, write_v2};

use crate::output::Route;

/// A cluster's `proxy_protocol`: what its backends expect first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ProxyMode {
    /// No PROXY header: the backend gets the client's TLS bytes only.
    #[default]
    None,
    /// The proxy's own PROXY v2 header, then the client's TLS bytes.
    Send,
    /// The load balancer's inbound header, verbatim, then the rest.
    Relay,
}

/// The handoff for one routed session.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Handoff {
    /// Written to the backend before the window: a synthesized PROXY v2
    /// header in `Send` mode, else empty.
    pub prefix: Vec<u8>,
    /// Where the window's replay starts: the leading bytes before it (the
    /// inbound header) are not forwarded.
    pub replay_from: usize,
}

/// The handoff for a routed session. `client` is the peer of the front
/// socket and `local` its local address, used when no inbound header said
/// otherwise.
pub fn handoff(mode: ProxyMode, route: &Route, client: SocketAddr, local: SocketAddr) -> Handoff {
    match mode {
        ProxyMode::Relay => Handoff::default(),
        ProxyMode::None => Handoff {
            prefix: Vec::new(),
            replay_from: route.content_offset,
        },
        ProxyMode::Send => {
            let source = route.proxy_source.unwrap_or(client);
            let mut tlvs: Vec<(u8, &[u8])> = Vec::with_capacity(2);
            if let Some(sni) = &route.sni {
                tlvs.push((PP2_TYPE_AUTHORITY, sni.as_bytes()));
            }
            if let Some(alpn) = &route.matched_alpn {
                tlvs.push((PP2_TYPE_ALPN, alpn));
            }
            let mut prefix = Vec::with_capacity(64);
            // An SNI is at most 255 bytes and an ALPN name 255: the header
            // always fits in the v2 length field, so the writer cannot refuse.
            if write_v2(&mut prefix, source, local, &tlvs).is_err() {
                prefix.clear();
            }
            Handoff {
                prefix,
                replay_from: route.content_offset,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use preread_parser::proxy::{ProxyParsed, parse_proxy_header};

    use super::{ProxyMode, handoff};
    use crate::output::Route;
    use crate::sni::HostName;

    fn route(content_offset: usize, proxy_source: Option<&str>) -> Route {
        Route {
            cluster: Arc::from("c"),
            content_offset,
            hello_end: Some(content_offset + 517),
            proxy_source: proxy_source.map(|s| s.parse().expect("addr")),
            sni: HostName::normalize(b"a.example.com"),
            alpn: None,
            matched_sni: None,
            matched_alpn: Some(Box::from(&b"h2"[..])),
            fallback: None,
        }
    }

    #[test]
    fn each_mode_drops_relays_or_replaces_the_inbound_header() {
        let client = "10.0.0.1:5000".parse().expect("addr");
        let local = "127.0.0.1:8443".parse().expect("addr");
        let relay = handoff(
            ProxyMode::Relay,
            &route(47, Some("192.0.2.10:51234")),
            client,
            local,
        );
        assert_eq!((relay.prefix.len(), relay.replay_from), (0, 0));
        let none = handoff(ProxyMode::None, &route(47, None), client, local);
        assert_eq!((none.prefix.len(), none.replay_from), (0, 47));

        let send = handoff(
            ProxyMode::Send,
            &route(47, Some("192.0.2.10:51234")),
            client,
            local,
        );
        assert_eq!(send.replay_from, 47);
        let Ok(ProxyParsed::Complete(header)) = parse_proxy_header(&send.prefix) else {
            panic!("send mode writes a valid v2 header");
        };
        assert_eq!(header.len(), send.prefix.len());
        assert_eq!(
            header.source(),
            Some("192.0.2.10:51234".parse().expect("addr"))
        );
        assert_eq!(header.destination(), Some(local));
        assert_eq!(header.authority(), Some(&b"a.example.com"[..]));
        assert_eq!(header.alpn(), Some(&b"h2"[..]));

        let direct = handoff(ProxyMode::Send, &route(0, None), client, local);
        let Ok(ProxyParsed::Complete(header)) = parse_proxy_header(&direct.prefix) else {
            panic!("send mode without an inbound header");
        };
        assert_eq!(header.source(), Some(client), "the client's own address");
        assert_eq!(direct.replay_from, 0);
    }

    #[test]
    fn send_mode_without_sni_or_alpn_writes_no_tlv() {
        let client = "10.0.0.1:5000".parse().expect("addr");
        let local = "127.0.0.1:8443".parse().expect("addr");
        let bare = Route::unread(Arc::from("c"), None);
        let plan = handoff(ProxyMode::Send, &bare, client, local);
        let Ok(ProxyParsed::Complete(header)) = parse_proxy_header(&plan.prefix) else {
            panic!("a valid v2 header");
        };
        assert_eq!(header.tlvs().count(), 0);
        assert_eq!(header.authority(), None);
    }
}
