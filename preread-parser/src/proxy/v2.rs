//! PROXY protocol v2: the binary header.
//!
//! Owns: the fixed 16 bytes (signature, version and command, family and
//! transport, length), read with nom's streaming parsers and judged byte by
//! byte as they arrive; then, once the whole header is in the window, the
//! address block and the TLVs after it, read with complete parsers.
//!
//! Must never: trust the length field further than the family allows (a
//! PROXY header whose length cannot hold its address block is rejected, so
//! the payload never starts inside the ports), accept TLVs that do not tile
//! the rest of the header exactly, or interpret TLV values.

use core::net::{Ipv4Addr, Ipv6Addr, SocketAddr};

use nom::Parser;
use nom::bytes::complete::take;
use nom::bytes::streaming::tag;
use nom::number::{complete, streaming};

use super::{
    Addresses, Command, Needed, ProxyError, ProxyHeader, ProxyParsed, Transport, V2_ADDR_LEN_INET,
    V2_ADDR_LEN_INET6, V2_ADDR_LEN_UNIX, V2_FIXED_LEN, V2_SIGNATURE, V2_UNIX_ADDR_LEN,
};

const VERSION_2: u8 = 2;
const CMD_LOCAL: u8 = 0x0;
const CMD_PROXY: u8 = 0x1;

/// The family/transport byte, as one of the seven valid combinations.
#[derive(Debug, Clone, Copy)]
enum Family {
    Unspec,
    Inet(Transport),
    Inet6(Transport),
    Unix(Transport),
}

impl Family {
    fn from_byte(fam: u8) -> Option<Self> {
        Some(match fam {
            0x00 => Self::Unspec,
            0x11 => Self::Inet(Transport::Stream),
            0x12 => Self::Inet(Transport::Dgram),
            0x21 => Self::Inet6(Transport::Stream),
            0x22 => Self::Inet6(Transport::Dgram),
            0x31 => Self::Unix(Transport::Stream),
            0x32 => Self::Unix(Transport::Dgram),
            _ => return None,
        })
    }

    fn address_block_len(self) -> usize {
        match self {
            Self::Unspec => 0,
            Self::Inet(_) => V2_ADDR_LEN_INET,
            Self::Inet6(_) => V2_ADDR_LEN_INET6,
            Self::Unix(_) => V2_ADDR_LEN_UNIX,
        }
    }
}

type Res<'a, O> = nom::IResult<&'a [u8], O, ()>;

/// Whether `window` holds a v2 header's fixed part, length field included:
/// from there its total is known (`V2_FIXED_LEN` plus that length).
pub(super) fn announced(window: &[u8]) -> bool {
    window.len() >= V2_FIXED_LEN && window.starts_with(V2_SIGNATURE)
}

pub(super) fn parse(window: &[u8]) -> Result<ProxyParsed<'_>, ProxyError> {
    let short = || {
        Ok(ProxyParsed::Incomplete(Needed::at_least(
            V2_FIXED_LEN.saturating_sub(window.len()),
        )))
    };
    let rest = match tag::<_, _, ()>(&V2_SIGNATURE[..])(window) {
        Ok((rest, _)) => rest,
        Err(nom::Err::Incomplete(_)) => return short(),
        Err(_) => return Err(ProxyError::NotProxyProtocol),
    };
    let Ok((rest, ver_cmd)) = streaming::be_u8::<_, ()>(rest) else {
        return short();
    };
    let version = ver_cmd >> 4;
    if version != VERSION_2 {
        return Err(ProxyError::V2BadVersion(version));
    }
    let command = match ver_cmd & 0x0f {
        CMD_LOCAL => Command::Local,
        CMD_PROXY => Command::Proxy,
        other => return Err(ProxyError::V2BadCommand(other)),
    };
    let Ok((rest, fam)) = streaming::be_u8::<_, ()>(rest) else {
        return short();
    };
    let family = Family::from_byte(fam).ok_or(ProxyError::V2BadFamily(fam))?;
    let Ok((rest, len)) = streaming::be_u16::<_, ()>(rest) else {
        return short();
    };
    // LOCAL headers carry no addresses worth reading: their block is skipped.
    let needed = match command {
        Command::Local => 0,
        Command::Proxy => family.address_block_len(),
    };
    if usize::from(len) < needed {
        return Err(ProxyError::V2AddressBlockTooShort {
            family: fam,
            len,
            needed,
        });
    }
    let Some(block) = rest.get(..usize::from(len)) else {
        return Ok(ProxyParsed::Incomplete(Needed::at_least(
            usize::from(len) - rest.len(),
        )));
    };
    let header_len = V2_FIXED_LEN + usize::from(len);
    let (addresses, tlvs) = match command {
        Command::Local => (Addresses::Unspecified, &[][..]),
        Command::Proxy => addresses(family, block).map_err(|()| {
            // Unreachable: the length check above proved the block long enough.
            ProxyError::V2AddressBlockTooShort {
                family: fam,
                len,
                needed,
            }
        })?,
    };
    check_tlvs(tlvs, header_len - tlvs.len())?;
    Ok(ProxyParsed::Complete(ProxyHeader {
        version: 2,
        len: header_len,
        command,
        addresses,
        tlvs,
    }))
}

/// Splits the whole block into the addresses of `family` and the TLV area.
fn addresses(family: Family, block: &[u8]) -> Result<(Addresses<'_>, &[u8]), ()> {
    let inet = |source, destination, (sport, dport), transport| Addresses::Inet {
        transport,
        source: SocketAddr::new(source, sport),
        destination: SocketAddr::new(destination, dport),
    };
    let ports = || (complete::be_u16, complete::be_u16);
    let parsed: Res<'_, Addresses<'_>> = match family {
        Family::Unspec => Ok((block, Addresses::Unspecified)),
        Family::Inet(transport) => (complete::be_u32, complete::be_u32, ports())
            .map(|(src, dst, p)| {
                inet(
                    Ipv4Addr::from(src).into(),
                    Ipv4Addr::from(dst).into(),
                    p,
                    transport,
                )
            })
            .parse(block),
        Family::Inet6(transport) => (complete::be_u128, complete::be_u128, ports())
            .map(|(src, dst, p)| {
                inet(
                    Ipv6Addr::from(src).into(),
                    Ipv6Addr::from(dst).into(),
                    p,
                    transport,
                )
            })
            .parse(block),
        Family::Unix(transport) => (unix_address, unix_address)
            .map(|(source, destination)| Addresses::Unix {
                transport,
                source,
                destination,
            })
            .parse(block),
    };
    parsed
        .map(|(tlvs, addresses)| (addresses, tlvs))
        .map_err(|_| ())
}

fn unix_address(input: &[u8]) -> Res<'_, &[u8; V2_UNIX_ADDR_LEN]> {
    let (rest, raw) = take(V2_UNIX_ADDR_LEN)(input)?;
    let array = raw.try_into().map_err(|_| nom::Err::Error(()))?;
    Ok((rest, array))
}

/// Proves that `area` is exactly a sequence of TLVs. `base` is the offset of
/// `area` from the start of the header, for the error report.
fn check_tlvs(area: &[u8], base: usize) -> Result<(), ProxyError> {
    let mut rest = area;
    while !rest.is_empty() {
        match super::tlv(rest) {
            Ok((after, _)) => rest = after,
            Err(_) => {
                return Err(ProxyError::V2BadTlv {
                    // `rest` is a suffix of `area`: no underflow.
                    offset: base + (area.len() - rest.len()),
                    remaining: rest.len(),
                });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::{
        PP2_TYPE_ALPN, PP2_TYPE_AUTHORITY, PP2_TYPE_NOOP, PP2_TYPE_UNIQUE_ID, parse_proxy_header,
    };
    use super::*;

    fn header(ver_cmd: u8, fam: u8, body: &[u8]) -> Vec<u8> {
        let mut out = V2_SIGNATURE.to_vec();
        out.push(ver_cmd);
        out.push(fam);
        out.extend_from_slice(&u16::try_from(body.len()).unwrap().to_be_bytes());
        out.extend_from_slice(body);
        out
    }

    fn tlv(t: u8, value: &[u8]) -> Vec<u8> {
        let mut out = vec![t];
        out.extend_from_slice(&u16::try_from(value.len()).unwrap().to_be_bytes());
        out.extend_from_slice(value);
        out
    }

    fn inet4_block() -> Vec<u8> {
        let mut b = vec![192, 0, 2, 10, 198, 51, 100, 20];
        b.extend_from_slice(&51234u16.to_be_bytes());
        b.extend_from_slice(&443u16.to_be_bytes());
        b
    }

    fn inet6_block() -> Vec<u8> {
        let mut b = "2001:db8::1".parse::<Ipv6Addr>().unwrap().octets().to_vec();
        b.extend_from_slice(&"2001:db8::2".parse::<Ipv6Addr>().unwrap().octets());
        b.extend_from_slice(&1u16.to_be_bytes());
        b.extend_from_slice(&65535u16.to_be_bytes());
        b
    }

    fn unix_block() -> Vec<u8> {
        let mut b = vec![0u8; V2_ADDR_LEN_UNIX];
        b[..10].copy_from_slice(b"/run/a.sck");
        b[108..118].copy_from_slice(b"/run/b.sck");
        b
    }

    fn some_tlvs() -> Vec<u8> {
        let mut t = tlv(PP2_TYPE_ALPN, b"h2");
        t.extend(tlv(PP2_TYPE_AUTHORITY, b"a.example.com"));
        t.extend(tlv(PP2_TYPE_NOOP, b""));
        t.extend(tlv(0xE0, &[7; 300]));
        t
    }

    fn complete(window: &[u8]) -> ProxyHeader<'_> {
        match parse_proxy_header(window) {
            Ok(ProxyParsed::Complete(h)) => h,
            other => panic!("{window:02x?}: {other:?}"),
        }
    }

    fn err(window: &[u8]) -> ProxyError {
        match parse_proxy_header(window) {
            Err(e) => e,
            other => panic!("{window:02x?}: {other:?}"),
        }
    }

    fn sa(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    /// Every valid header the tests below build.
    fn valid_headers() -> Vec<Vec<u8>> {
        let with = |block: Vec<u8>| [block, some_tlvs()].concat();
        vec![
            header(0x20, 0x00, b""),
            header(0x20, 0x11, &inet4_block()),
            header(0x20, 0x21, b"\x01\x02"),
            header(0x21, 0x00, b""),
            header(0x21, 0x00, &some_tlvs()),
            header(0x21, 0x11, &inet4_block()),
            header(0x21, 0x11, &with(inet4_block())),
            header(0x21, 0x12, &inet4_block()),
            header(0x21, 0x21, &inet6_block()),
            header(0x21, 0x22, &with(inet6_block())),
            header(0x21, 0x31, &unix_block()),
            header(0x21, 0x32, &with(unix_block())),
        ]
    }

    #[test]
    fn local() {
        let window = header(0x20, 0x00, b"");
        let h = complete(&window);
        assert_eq!(h.version(), 2);
        assert_eq!(h.len(), 16);
        assert_eq!(h.command(), Command::Local);
        assert_eq!(h.addresses(), Addresses::Unspecified);
        assert_eq!(h.source(), None);
    }

    #[test]
    fn local_skips_its_block_whatever_it_holds() {
        // An INET block, and garbage that would be a TLV overrun under PROXY.
        for body in [inet4_block(), vec![0xff; 5], vec![]] {
            let mut window = header(0x20, 0x11, &body);
            window.extend_from_slice(b"\x16\x03\x01");
            let h = complete(&window);
            assert_eq!(h.len(), 16 + body.len());
            assert_eq!(h.command(), Command::Local);
            assert_eq!(h.addresses(), Addresses::Unspecified);
            assert_eq!(h.tlvs().count(), 0);
        }
    }

    #[test]
    fn proxy_inet() {
        let mut window = header(0x21, 0x11, &inet4_block());
        window.extend_from_slice(b"\x16\x03\x01\x02\x00");
        let h = complete(&window);
        assert_eq!(h.len(), 28);
        assert_eq!(h.command(), Command::Proxy);
        assert_eq!(
            h.addresses(),
            Addresses::Inet {
                transport: Transport::Stream,
                source: sa("192.0.2.10:51234"),
                destination: sa("198.51.100.20:443"),
            }
        );
        assert_eq!(h.tlvs().next(), None);
        assert_eq!(h.alpn(), None);

        let window = header(0x21, 0x12, &inet4_block());
        let h = complete(&window);
        assert!(matches!(
            h.addresses(),
            Addresses::Inet {
                transport: Transport::Dgram,
                ..
            }
        ));
    }

    #[test]
    fn proxy_inet_with_tlvs() {
        let body = [inet4_block(), some_tlvs()].concat();
        let window = header(0x21, 0x11, &body);
        let h = complete(&window);
        assert_eq!(h.len(), 16 + body.len());
        assert_eq!(h.source(), Some(sa("192.0.2.10:51234")));
        let tlvs: Vec<_> = h.tlvs().collect();
        assert_eq!(
            tlvs,
            vec![
                (PP2_TYPE_ALPN, &b"h2"[..]),
                (PP2_TYPE_AUTHORITY, &b"a.example.com"[..]),
                (PP2_TYPE_NOOP, &b""[..]),
                (0xE0, &[7; 300][..]),
            ]
        );
        assert_eq!(h.alpn(), Some(&b"h2"[..]));
        assert_eq!(h.authority(), Some(&b"a.example.com"[..]));
        assert_eq!(h.tlv(PP2_TYPE_UNIQUE_ID), None);
    }

    #[test]
    fn proxy_inet6() {
        for tlvs in [vec![], some_tlvs()] {
            let body = [inet6_block(), tlvs.clone()].concat();
            let window = header(0x21, 0x21, &body);
            let h = complete(&window);
            assert_eq!(h.len(), 16 + 36 + tlvs.len());
            assert_eq!(
                h.addresses(),
                Addresses::Inet {
                    transport: Transport::Stream,
                    source: sa("[2001:db8::1]:1"),
                    destination: sa("[2001:db8::2]:65535"),
                }
            );
            assert_eq!(h.tlvs().as_bytes(), &tlvs[..]);
        }
    }

    #[test]
    fn proxy_unix() {
        for (fam, transport) in [(0x31, Transport::Stream), (0x32, Transport::Dgram)] {
            for tlvs in [vec![], some_tlvs()] {
                let body = [unix_block(), tlvs.clone()].concat();
                let window = header(0x21, fam, &body);
                let h = complete(&window);
                assert_eq!(h.len(), 16 + 216 + tlvs.len());
                let Addresses::Unix {
                    transport: t,
                    source,
                    destination,
                } = h.addresses()
                else {
                    panic!("{:?}", h.addresses());
                };
                assert_eq!(t, transport);
                assert_eq!(&source[..], &unix_block()[..108]);
                assert_eq!(&destination[..], &unix_block()[108..]);
                assert_eq!(h.source(), None);
                let authority = (!tlvs.is_empty()).then_some(&b"a.example.com"[..]);
                assert_eq!(h.authority(), authority);
            }
        }
    }

    #[test]
    fn proxy_unspec_block_is_all_tlvs() {
        let window = header(0x21, 0x00, &some_tlvs());
        let h = complete(&window);
        assert_eq!(h.addresses(), Addresses::Unspecified);
        assert_eq!(h.tlvs().count(), 4);
    }

    #[test]
    fn length_too_short_for_family() {
        for (fam, needed) in [
            (0x11u8, 12usize),
            (0x12, 12),
            (0x21, 36),
            (0x22, 36),
            (0x31, 216),
            (0x32, 216),
        ] {
            for len in [0, 4, needed - 1] {
                let full = header(0x21, fam, &vec![0; len]);
                let expected = ProxyError::V2AddressBlockTooShort {
                    family: fam,
                    len: u16::try_from(len).unwrap(),
                    needed,
                };
                // Decided from the fixed 16 bytes, without waiting for the block.
                assert_eq!(err(&full[..16]), expected);
                assert_eq!(err(&full), expected);
            }
        }
    }

    #[test]
    fn bad_version() {
        for ver_cmd in [0x11u8, 0x01, 0x31, 0xf1, 0x00] {
            let window = header(ver_cmd, 0x11, &inet4_block());
            // Decided at the 13th byte.
            assert_eq!(err(&window[..13]), ProxyError::V2BadVersion(ver_cmd >> 4));
            assert_eq!(err(&window), ProxyError::V2BadVersion(ver_cmd >> 4));
        }
    }

    #[test]
    fn bad_command() {
        for ver_cmd in [0x22u8, 0x2f, 0x23] {
            let window = header(ver_cmd, 0x11, &inet4_block());
            assert_eq!(err(&window[..13]), ProxyError::V2BadCommand(ver_cmd & 0xf));
            assert_eq!(err(&window), ProxyError::V2BadCommand(ver_cmd & 0xf));
        }
    }

    #[test]
    fn bad_family() {
        for fam in [0x01u8, 0x02, 0x10, 0x13, 0x20, 0x23, 0x30, 0x33, 0x41, 0xff] {
            for ver_cmd in [0x20, 0x21] {
                let window = header(ver_cmd, fam, &unix_block());
                // Decided at the 14th byte.
                assert_eq!(err(&window[..14]), ProxyError::V2BadFamily(fam));
                assert_eq!(err(&window), ProxyError::V2BadFamily(fam));
            }
        }
    }

    #[test]
    fn tlv_overrun() {
        let cases: &[(Vec<u8>, usize, usize)] = &[
            // Declares 14 bytes, holds 13.
            (
                [
                    inet4_block(),
                    tlv(PP2_TYPE_AUTHORITY, b"a.example.com")[..15].to_vec(),
                ]
                .concat(),
                28,
                15,
            ),
            // One good TLV, then a lone type byte.
            (
                [inet4_block(), tlv(PP2_TYPE_ALPN, b"h2"), vec![0x05]].concat(),
                33,
                1,
            ),
            // A type byte and half a length.
            ([inet4_block(), vec![0x05, 0x00]].concat(), 28, 2),
            // Length 0xffff in a tiny header.
            (
                [inet4_block(), vec![0x02, 0xff, 0xff, b'a']].concat(),
                28,
                4,
            ),
        ];
        for (body, offset, remaining) in cases {
            let mut window = header(0x21, 0x11, body);
            // Bytes after the header must not rescue an overrunning TLV.
            window.extend_from_slice(&[0xAA; 70000]);
            assert_eq!(
                err(&window),
                ProxyError::V2BadTlv {
                    offset: *offset,
                    remaining: *remaining,
                }
            );
        }
    }

    #[test]
    fn every_strict_prefix_is_incomplete() {
        for full in valid_headers() {
            for n in 0..full.len() {
                match parse_proxy_header(&full[..n]) {
                    Ok(ProxyParsed::Incomplete(Needed::AtLeast(k))) => {
                        assert!(k.get() <= full.len() - n, "needed {k} at {n}");
                    }
                    other => panic!("prefix {n} of {full:02x?}: {other:?}"),
                }
            }
            let mut window = full.clone();
            window.extend_from_slice(&V2_SIGNATURE[..]);
            assert_eq!(complete(&window).len(), full.len());
        }
    }

    #[test]
    fn signature_byte_flip_is_rejected_immediately() {
        for i in 0..V2_SIGNATURE.len() {
            for b in 0..=u8::MAX {
                if b == V2_SIGNATURE[i] || (i == 0 && b == b'P') {
                    continue;
                }
                let mut window = V2_SIGNATURE[..i].to_vec();
                window.push(b);
                assert_eq!(err(&window), ProxyError::NotProxyProtocol);
                window.extend_from_slice(&[0x21, 0x11, 0, 12]);
                assert_eq!(err(&window), ProxyError::NotProxyProtocol);
            }
        }
    }
}
