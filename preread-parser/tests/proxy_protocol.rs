//! PROXY protocol headers against the corpus vectors, a counting allocator
//! proving parsing allocates nothing, and property tests: writer/parser
//! round trip, prefixes, and no panic on arbitrary input.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use preread_parser::proxy::{
    Addresses, Command, Needed, PP2_TYPE_AUTHORITY, PP2_TYPE_UNIQUE_ID, ProxyError, ProxyHeader,
    ProxyParsed, Transport, V1Fault, V2_SIGNATURE, parse_proxy_header, write_v2,
};
use preread_parser::tls::{Parsed, parse_client_hello};
use proptest::prelude::*;

macro_rules! vector {
    ($name:literal) => {
        include_bytes!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../testdata/clienthellos/",
            $name
        ))
        .as_slice()
    };
}

const V2_TLV: &[u8] = vector!("gen_m_proxy_v2_tlv.bin");
const V2_SHORT_ADDR_LEN: &[u8] = vector!("gen_m_proxy_v2_short_addr_len.bin");
const V1: &[u8] = vector!("gen_n_proxy_v1.bin");
const V1_BAD_PROTOCOL: &[u8] = vector!("gen_n_proxy_v1_bad_protocol.bin");

mod counting_alloc;

fn sa(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn complete(window: &[u8]) -> ProxyHeader<'_> {
    match parse_proxy_header(window) {
        Ok(ProxyParsed::Complete(h)) => h,
        other => panic!("{other:?}"),
    }
}

fn corpus_addresses() -> Addresses<'static> {
    Addresses::Inet {
        transport: Transport::Stream,
        source: sa("192.0.2.10:51234"),
        destination: sa("198.51.100.20:443"),
    }
}

/// The ClientHello must start exactly where the header ends.
fn assert_client_hello_follows(window: &[u8], header_len: usize) {
    let mut scratch = Vec::new();
    let payload = &window[header_len..];
    match parse_client_hello(payload, &mut scratch) {
        Ok(Parsed::Complete(hello)) => {
            assert_eq!(hello.server_name, Some(&b"a.example.com"[..]));
            assert_eq!(hello.end, payload.len());
        }
        other => panic!("{other:?}"),
    }
}

fn assert_strict_prefixes_incomplete(window: &[u8], header_len: usize) {
    for n in 0..header_len {
        match parse_proxy_header(&window[..n]) {
            Ok(ProxyParsed::Incomplete(Needed::AtLeast(k))) => {
                assert!(k.get() <= header_len - n, "needed {k} at {n}");
            }
            other => panic!("prefix {n}: {other:?}"),
        }
    }
    assert_eq!(complete(&window[..header_len]).len(), header_len);
}

#[test]
fn corpus_v2_with_tlvs() {
    let h = complete(V2_TLV);
    assert_eq!(h.version(), 2);
    assert_eq!(h.len(), 63);
    assert_eq!(h.command(), Command::Proxy);
    assert_eq!(h.addresses(), corpus_addresses());
    assert_eq!(h.source(), Some(sa("192.0.2.10:51234")));
    assert_eq!(h.authority(), Some(&b"a.example.com"[..]));
    assert_eq!(h.tlv(PP2_TYPE_UNIQUE_ID), Some(&b"conn-0001-corpus"[..]));
    assert_eq!(h.alpn(), None);
    let types: Vec<u8> = h.tlvs().map(|(t, _)| t).collect();
    assert_eq!(types, [PP2_TYPE_AUTHORITY, PP2_TYPE_UNIQUE_ID]);
    assert_client_hello_follows(V2_TLV, h.len());
    assert_strict_prefixes_incomplete(V2_TLV, 63);
}

#[test]
fn corpus_v1() {
    let h = complete(V1);
    assert_eq!(h.version(), 1);
    assert_eq!(h.len(), 47);
    assert_eq!(h.command(), Command::Proxy);
    assert_eq!(h.addresses(), corpus_addresses());
    assert_eq!(h.tlvs().count(), 0);
    assert_client_hello_follows(V1, h.len());
    assert_strict_prefixes_incomplete(V1, 47);
}

#[test]
fn corpus_v2_length_too_short_for_tcp4() {
    let expected = ProxyError::V2AddressBlockTooShort {
        family: 0x11,
        len: 8,
        needed: 12,
    };
    assert_eq!(parse_proxy_header(V2_SHORT_ADDR_LEN), Err(expected));
    // Known as soon as the length field is in.
    assert_eq!(parse_proxy_header(&V2_SHORT_ADDR_LEN[..16]), Err(expected));
    assert!(matches!(
        parse_proxy_header(&V2_SHORT_ADDR_LEN[..15]),
        Ok(ProxyParsed::Incomplete(_))
    ));
}

#[test]
fn corpus_v1_bad_protocol() {
    let expected = ProxyError::V1Malformed(V1Fault::UnknownProtocol);
    assert_eq!(parse_proxy_header(V1_BAD_PROTOCOL), Err(expected));
    // Known as soon as "TCP9" cannot begin any protocol token.
    assert_eq!(parse_proxy_header(&V1_BAD_PROTOCOL[..10]), Err(expected));
    assert!(matches!(
        parse_proxy_header(&V1_BAD_PROTOCOL[..9]),
        Ok(ProxyParsed::Incomplete(_))
    ));
}

#[test]
fn tls_record_is_not_a_proxy_header() {
    assert_eq!(
        parse_proxy_header(&V2_TLV[63..]),
        Err(ProxyError::NotProxyProtocol)
    );
}

#[test]
fn parsing_allocates_nothing() {
    let mut unix = V2_SIGNATURE.to_vec();
    unix.extend_from_slice(&[0x21, 0x31, 0x00, 216 + 7]);
    unix.extend_from_slice(&[b'/'; 216]);
    unix.extend_from_slice(&[0x01, 0x00, 0x04, b'h', b't', b't', b'p']);
    let v6 = b"PROXY TCP6 2001:db8::1 2001:db8::2 1 2\r\n";
    let windows = [V2_TLV, V2_SHORT_ADDR_LEN, V1, V1_BAD_PROTOCOL, &unix, v6];
    let before = counting_alloc::allocations();
    let mut complete = 0;
    for window in windows {
        for cut in 0..=window.len().min(300) {
            if let Ok(ProxyParsed::Complete(h)) = parse_proxy_header(&window[..cut]) {
                std::hint::black_box((h.source(), h.authority(), h.alpn(), h.tlvs().count()));
                complete += 1;
            }
        }
    }
    let allocations = counting_alloc::allocations() - before;
    assert_eq!(allocations, 0);
    assert!(complete > 400, "only {complete} complete parses");
}

fn socket_addr() -> impl Strategy<Value = SocketAddr> {
    prop_oneof![
        (any::<[u8; 4]>(), any::<u16>())
            .prop_map(|(ip, port)| SocketAddr::new(Ipv4Addr::from(ip).into(), port)),
        (any::<[u8; 16]>(), any::<u16>())
            .prop_map(|(ip, port)| SocketAddr::new(Ipv6Addr::from(ip).into(), port)),
    ]
}

fn tlv_list() -> impl Strategy<Value = Vec<(u8, Vec<u8>)>> {
    prop::collection::vec(
        (any::<u8>(), prop::collection::vec(any::<u8>(), 0..300)),
        0..8,
    )
}

/// What the writer promises to put on the wire for an endpoint.
fn as_written(addr: SocketAddr, both_v4: bool) -> SocketAddr {
    match addr.ip() {
        IpAddr::V4(v4) if !both_v4 => SocketAddr::new(v4.to_ipv6_mapped().into(), addr.port()),
        _ => addr,
    }
}

proptest! {
    #[test]
    fn write_then_parse_round_trips(
        source in socket_addr(),
        destination in socket_addr(),
        tlvs in tlv_list(),
        trailing in prop::collection::vec(any::<u8>(), 0..64),
        cut in any::<prop::sample::Index>(),
    ) {
        let borrowed: Vec<(u8, &[u8])> = tlvs.iter().map(|(t, v)| (*t, v.as_slice())).collect();
        let mut window = Vec::new();
        let n = write_v2(&mut window, source, destination, &borrowed).unwrap();
        prop_assert_eq!(n, window.len());
        window.extend_from_slice(&trailing);

        let h = complete(&window);
        prop_assert_eq!(h.version(), 2);
        prop_assert_eq!(h.len(), n);
        prop_assert_eq!(h.command(), Command::Proxy);
        let both_v4 = source.is_ipv4() && destination.is_ipv4();
        prop_assert_eq!(h.addresses(), Addresses::Inet {
            transport: Transport::Stream,
            source: as_written(source, both_v4),
            destination: as_written(destination, both_v4),
        });
        prop_assert_eq!(h.tlvs().collect::<Vec<_>>(), borrowed.clone());
        let first_authority = borrowed.iter().find(|(t, _)| *t == PP2_TYPE_AUTHORITY).map(|(_, v)| *v);
        prop_assert_eq!(h.authority(), first_authority);

        // The trailing bytes change nothing; any strict prefix is incomplete.
        prop_assert_eq!(complete(&window[..n]), h);
        let cut = cut.index(n);
        prop_assert!(matches!(parse_proxy_header(&window[..cut]), Ok(ProxyParsed::Incomplete(_))));
    }

    #[test]
    fn v1_text_round_trips(
        (source, destination) in prop_oneof![
            (any::<[u8; 4]>(), any::<[u8; 4]>()).prop_map(|(s, d)| (IpAddr::from(s), IpAddr::from(d))),
            (any::<[u8; 16]>(), any::<[u8; 16]>()).prop_map(|(s, d)| (IpAddr::from(s), IpAddr::from(d))),
        ],
        sport in any::<u16>(),
        dport in any::<u16>(),
        trailing in prop::collection::vec(any::<u8>(), 0..64),
    ) {
        let proto = if source.is_ipv4() { "TCP4" } else { "TCP6" };
        let line = format!("PROXY {proto} {source} {destination} {sport} {dport}\r\n");
        let mut window = line.clone().into_bytes();
        window.extend_from_slice(&trailing);
        let h = complete(&window);
        prop_assert_eq!(h.len(), line.len());
        prop_assert_eq!(h.addresses(), Addresses::Inet {
            transport: Transport::Stream,
            source: SocketAddr::new(source, sport),
            destination: SocketAddr::new(destination, dport),
        });
    }

    /// Arbitrary bytes after either signature: no panic, a complete header
    /// lies inside the window, and a rejected prefix stays rejected.
    #[test]
    fn arbitrary_input_is_judged_consistently(
        start in prop_oneof![
            Just(Vec::new()),
            Just(b"PROXY ".to_vec()),
            Just(b"PROXY TCP4 1.2.3.4 ".to_vec()),
            Just(V2_SIGNATURE.to_vec()),
            Just([&V2_SIGNATURE[..], &[0x21, 0x11, 0x00]].concat()),
            Just([&V2_SIGNATURE[..], &[0x21, 0x00, 0x00]].concat()),
        ],
        tail in prop::collection::vec(any::<u8>(), 0..200),
        cut in any::<prop::sample::Index>(),
    ) {
        let window = [start, tail].concat();
        let cut = cut.index(window.len() + 1);
        match parse_proxy_header(&window) {
            Ok(ProxyParsed::Complete(h)) => {
                prop_assert!(h.len() <= window.len());
                prop_assert_eq!(complete(&window[..h.len()]), h);
            }
            Ok(ProxyParsed::Incomplete(_)) | Err(_) => {}
        }
        if parse_proxy_header(&window[..cut]).is_err() {
            prop_assert!(parse_proxy_header(&window).is_err());
        }
    }
}
