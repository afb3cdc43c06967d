//! What a backend receives before the client's bytes: the PROXY handoff
//! decided by the routed cluster's `proxy_protocol`.
//!
//! Owns: which leading bytes of the window are dropped and which header is
//! written first. The listener's `expect_proxy` only says whether an inbound
//! header precedes the ClientHello (`Route::content_offset`); the cluster
//! decides what the backend sees:
//! - `none`: the inbound header, if any, is dropped; the backend gets the
//!   ClientHello and what follows, untouched.
//! - `relay`: the inbound header is replayed verbatim, then the rest.
//! - `send`: the inbound header is dropped; preread writes its own v2 header
//!   (source: the inbound header's source, else the client; TLVs AUTHORITY =
//!   the SNI and ALPN = the matched protocol), then the ClientHello.
//!
//! Must never: change a byte of the client's stream.

use std::net::SocketAddr;

use command::proto::ProxyProtocol;
use preread_core::Route;
use preread_parser::proxy::{PP2_TYPE_ALPN, PP2_TYPE_AUTHORITY, write_v2};

/// The handoff for one session.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Handoff {
    /// Bytes to write before the window (a PROXY v2 header in `send` mode).
    pub prefix: Vec<u8>,
    /// Leading bytes of the window not to forward (the inbound header).
    pub skip: usize,
}

/// The handoff for a routed session. `client` is the peer of the front
/// socket and `local` its local address, used when no inbound header said
/// otherwise.
pub fn handoff(
    mode: ProxyProtocol,
    route: &Route,
    client: SocketAddr,
    local: SocketAddr,
) -> Handoff {
    match mode {
        ProxyProtocol::Relay => Handoff::default(),
        ProxyProtocol::None => Handoff {
            prefix: Vec::new(),
            skip: route.content_offset,
        },
        ProxyProtocol::Send => {
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
                skip: route.content_offset,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use command::proto::ProxyProtocol;
    use preread_core::Route;
    use preread_core::sni::HostName;
    use preread_parser::proxy::{ProxyParsed, parse_proxy_header};

    use super::handoff;

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
            ProxyProtocol::Relay,
            &route(47, Some("192.0.2.10:51234")),
            client,
            local,
        );
        assert_eq!((relay.prefix.len(), relay.skip), (0, 0));
        let none = handoff(ProxyProtocol::None, &route(47, None), client, local);
        assert_eq!((none.prefix.len(), none.skip), (0, 47));

        let send = handoff(
            ProxyProtocol::Send,
            &route(47, Some("192.0.2.10:51234")),
            client,
            local,
        );
        assert_eq!(send.skip, 47);
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

        let direct = handoff(ProxyProtocol::Send, &route(0, None), client, local);
        let Ok(ProxyParsed::Complete(header)) = parse_proxy_header(&direct.prefix) else {
            panic!("send mode without an inbound header");
        };
        assert_eq!(header.source(), Some(client), "the client's own address");
        assert_eq!(direct.skip, 0);
    }
}
