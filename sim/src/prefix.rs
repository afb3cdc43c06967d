//! PROXY protocol headers the generator puts before the client's bytes, as
//! a load balancer in front of the listener would.
//!
//! Owns: [`Prefix`] (bytes plus what they mean, known by construction),
//! [`valid`] (v1 TCP4/TCP6/UNKNOWN text lines, v2 PROXY headers written
//! with `preread_parser::proxy::write_v2`, v2 LOCAL), [`invalid`] (headers
//! that can never become valid) and [`announcing_v2`] (one too long for any
//! cap). Must never: ask the parser what a header
//! means.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use preread_parser::proxy::{
    PP2_TYPE_AUTHORITY, PP2_TYPE_NOOP, PP2_TYPE_UNIQUE_ID, V2_SIGNATURE, write_v2, write_v2_local,
};

use crate::rng::Rng;

/// A header and its meaning.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prefix {
    /// The header's bytes.
    pub bytes: Vec<u8>,
    /// Whether a correct parser accepts it (its length is then the content offset).
    pub valid: bool,
    /// The client address it carries (`None` for UNKNOWN and LOCAL).
    pub source: Option<SocketAddr>,
    /// A label for traces.
    pub kind: &'static str,
}

fn v4(rng: &mut Rng) -> Ipv4Addr {
    Ipv4Addr::from(rng.next_u64() as u32)
}

fn v6(rng: &mut Rng) -> Ipv6Addr {
    match rng.below(3) {
        // Short, compressed forms exercise the v1 text parser.
        0 => Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, rng.below(0x1_0000) as u16),
        1 => Ipv4Addr::from(rng.next_u64() as u32).to_ipv6_mapped(),
        _ => Ipv6Addr::from(u128::from(rng.next_u64()) << 64 | u128::from(rng.next_u64())),
    }
}

fn port(rng: &mut Rng) -> u16 {
    let any = rng.below(65_536) as u16;
    *rng.pick(&[0, 443, 65_535, any, any])
}

/// A header a correct parser accepts.
pub fn valid(rng: &mut Rng) -> Prefix {
    let ipv6 = rng.chance(30);
    let (src, dst): (IpAddr, IpAddr) = if ipv6 {
        (v6(rng).into(), v6(rng).into())
    } else {
        (v4(rng).into(), v4(rng).into())
    };
    let source = SocketAddr::new(src, port(rng));
    let destination = SocketAddr::new(dst, port(rng));
    match rng.below(10) {
        0..=3 => {
            let family = if ipv6 { "TCP6" } else { "TCP4" };
            let line = format!(
                "PROXY {family} {} {} {} {}\r\n",
                source.ip(),
                destination.ip(),
                source.port(),
                destination.port()
            );
            Prefix {
                bytes: line.into_bytes(),
                valid: true,
                source: Some(source),
                kind: "v1",
            }
        }
        4 => {
            let line = if rng.chance(50) {
                "PROXY UNKNOWN\r\n".to_owned()
            } else {
                format!("PROXY UNKNOWN {} {} 1 2\r\n", source.ip(), destination.ip())
            };
            Prefix {
                bytes: line.into_bytes(),
                valid: true,
                source: None,
                kind: "v1-unknown",
            }
        }
        5 => {
            let mut bytes = Vec::new();
            write_v2_local(&mut bytes);
            Prefix {
                bytes,
                valid: true,
                source: None,
                kind: "v2-local",
            }
        }
        _ => {
            let authority = b"lb.example.com".to_vec();
            let unique_len = rng.range(1, 16);
            let unique = rng.bytes(unique_len);
            let noop = vec![0; rng.range(0, 40)];
            let mut tlvs: Vec<(u8, &[u8])> = Vec::new();
            if rng.chance(50) {
                tlvs.push((PP2_TYPE_AUTHORITY, &authority));
            }
            if rng.chance(30) {
                tlvs.push((PP2_TYPE_UNIQUE_ID, &unique));
            }
            if rng.chance(20) {
                tlvs.push((PP2_TYPE_NOOP, &noop));
            }
            let mut bytes = Vec::new();
            // Same-family addresses and short TLVs: the writer cannot refuse.
            let written = write_v2(&mut bytes, source, destination, &tlvs).unwrap_or(0);
            debug_assert_eq!(written, bytes.len());
            Prefix {
                bytes,
                valid: true,
                source: Some(source),
                kind: "v2",
            }
        }
    }
}

/// The start of a v2 PROXY header (TCP over IPv4) whose length field
/// announces 65,535 bytes, with `extra` bytes of its address block: a valid
/// prefix, but no cap can hold the whole (a buffer holds at most 64 KiB),
/// so it never completes; `valid` is false, it is no header to route past.
pub fn announcing_v2(rng: &mut Rng, extra: usize) -> Prefix {
    let mut bytes = V2_SIGNATURE.to_vec();
    bytes.extend_from_slice(&[0x21, 0x11, 0xff, 0xff]);
    bytes.extend(rng.bytes(extra));
    Prefix {
        bytes,
        valid: false,
        source: None,
        kind: "v2-announcing-65535",
    }
}

/// A header no suffix can make valid.
pub fn invalid(rng: &mut Rng) -> Prefix {
    let (bytes, kind): (Vec<u8>, &'static str) = match rng.below(8) {
        0 => (
            b"PROXY TCP9 192.0.2.10 198.51.100.20 51234 443\r\n".to_vec(),
            "v1-bad-protocol",
        ),
        1 => (
            b"PROXY TCP4 192.0.2.300 198.51.100.20 51234 443\r\n".to_vec(),
            "v1-bad-address",
        ),
        2 => (
            b"PROXY TCP4 192.0.2.10 198.51.100.20 051234 443\r\n".to_vec(),
            "v1-bad-port",
        ),
        3 => {
            let mut line = b"PROXY UNKNOWN ".to_vec();
            line.extend(std::iter::repeat_n(b'x', 110));
            line.extend_from_slice(b"\r\n");
            (line, "v1-too-long")
        }
        4..=7 => {
            let mut bytes = Vec::new();
            let source = SocketAddr::new(v4(rng).into(), port(rng));
            let destination = SocketAddr::new(v4(rng).into(), port(rng));
            write_v2(&mut bytes, source, destination, &[]).unwrap_or(0);
            let kind = match rng.below(4) {
                0 => {
                    bytes[12] = 0x31; // version 3
                    "v2-bad-version"
                }
                1 => {
                    bytes[12] = 0x2f; // command 15
                    "v2-bad-command"
                }
                2 => {
                    bytes[13] = 0x41; // family 4
                    "v2-bad-family"
                }
                _ => {
                    // Length 8: shorter than the 12-byte AF_INET block.
                    bytes[14..16].copy_from_slice(&8u16.to_be_bytes());
                    bytes.truncate(16 + 8);
                    "v2-short-address"
                }
            };
            (bytes, kind)
        }
        _ => unreachable!("below(8)"),
    };
    Prefix {
        bytes,
        valid: false,
        source: None,
        kind,
    }
}

#[cfg(test)]
mod tests {
    use preread_parser::proxy::{ProxyParsed, parse_proxy_header};

    use super::{invalid, valid};
    use crate::rng::Rng;

    #[test]
    fn valid_headers_parse_whole_and_invalid_ones_never_do() {
        let mut rng = Rng::new(11);
        for _ in 0..500 {
            let p = valid(&mut rng);
            let mut stream = p.bytes.clone();
            stream.extend_from_slice(&[22, 3, 1]);
            match parse_proxy_header(&stream) {
                Ok(ProxyParsed::Complete(h)) => {
                    assert_eq!(h.len(), p.bytes.len(), "{}", p.kind);
                    assert_eq!(h.source(), p.source, "{}", p.kind);
                }
                other => panic!("{}: {other:?}", p.kind),
            }
            let bad = invalid(&mut rng);
            assert!(parse_proxy_header(&bad.bytes).is_err(), "{}", bad.kind);
        }
    }
}
