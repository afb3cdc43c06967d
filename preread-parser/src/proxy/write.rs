//! The v2 header writer, for when the proxy itself tells a backend who the
//! client is.
//!
//! Owns: [`write_v2`] (a PROXY-command STREAM header with optional TLVs) and
//! [`write_v2_local`] (a LOCAL header), and the rule for mixed families: an
//! IPv4 endpoint paired with an IPv6 one is written in its IPv4-mapped IPv6
//! form (`::ffff:a.b.c.d`) under AF_INET6, as a dual-stack socket would
//! report it, rather than refused.
//!
//! Must never: leave a partial header in the output (every size check runs
//! before the first byte is appended), or write a length field that
//! disagrees with what follows it.

use core::fmt;
use core::net::{IpAddr, Ipv6Addr, SocketAddr};

use super::{V2_ADDR_LEN_INET, V2_ADDR_LEN_INET6, V2_FIXED_LEN, V2_SIGNATURE};

/// Version 2, command PROXY.
const VER_CMD_PROXY: u8 = 0x21;
/// Version 2, command LOCAL.
const VER_CMD_LOCAL: u8 = 0x20;
/// AF_INET over STREAM.
const FAM_TCP4: u8 = 0x11;
/// AF_INET6 over STREAM.
const FAM_TCP6: u8 = 0x21;
/// AF_UNSPEC, UNSPEC transport.
const FAM_UNSPEC: u8 = 0x00;
/// Type byte and 16-bit length that precede each TLV value.
const TLV_HEADER_LEN: usize = 3;

/// Why a v2 header could not be written. Nothing was appended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProxyWriteError {
    /// A TLV value longer than 65535 bytes.
    TlvTooLong {
        /// The TLV's type.
        tlv_type: u8,
        /// The value's length.
        len: usize,
    },
    /// Addresses and TLVs together exceed the 65535 bytes the length field can say.
    HeaderTooLong {
        /// What the length field would have to say.
        len: usize,
    },
}

impl fmt::Display for ProxyWriteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TlvTooLong { tlv_type, len } => write!(
                f,
                "PROXY v2 TLV 0x{tlv_type:02x} value of {len} bytes exceeds 65535"
            ),
            Self::HeaderTooLong { len } => write!(
                f,
                "PROXY v2 addresses and TLVs take {len} bytes, more than the 65535 the length field allows"
            ),
        }
    }
}

impl core::error::Error for ProxyWriteError {}

/// Appends a v2 PROXY-command STREAM header for `source` → `destination`,
/// followed by `tlvs` in order, and returns the number of bytes appended.
///
/// Two IPv4 endpoints are written as AF_INET; otherwise both are written as
/// AF_INET6, an IPv4 one in its IPv4-mapped form, so a parser gives back
/// `::ffff:a.b.c.d` for it. On error `out` is left untouched.
pub fn write_v2(
    out: &mut Vec<u8>,
    source: SocketAddr,
    destination: SocketAddr,
    tlvs: &[(u8, &[u8])],
) -> Result<usize, ProxyWriteError> {
    let (fam, addr_len) = match (source.ip(), destination.ip()) {
        (IpAddr::V4(_), IpAddr::V4(_)) => (FAM_TCP4, V2_ADDR_LEN_INET),
        _ => (FAM_TCP6, V2_ADDR_LEN_INET6),
    };
    let mut body_len = addr_len;
    for &(tlv_type, value) in tlvs {
        if u16::try_from(value.len()).is_err() {
            return Err(ProxyWriteError::TlvTooLong {
                tlv_type,
                len: value.len(),
            });
        }
        body_len = body_len.saturating_add(TLV_HEADER_LEN + value.len());
    }
    let Ok(len_field) = u16::try_from(body_len) else {
        return Err(ProxyWriteError::HeaderTooLong { len: body_len });
    };

    let total = V2_FIXED_LEN + body_len;
    out.reserve(total);
    out.extend_from_slice(V2_SIGNATURE);
    out.extend_from_slice(&[VER_CMD_PROXY, fam]);
    out.extend_from_slice(&len_field.to_be_bytes());
    match (source.ip(), destination.ip()) {
        (IpAddr::V4(src), IpAddr::V4(dst)) => {
            out.extend_from_slice(&src.octets());
            out.extend_from_slice(&dst.octets());
        }
        (src, dst) => {
            out.extend_from_slice(&as_v6(src).octets());
            out.extend_from_slice(&as_v6(dst).octets());
        }
    }
    out.extend_from_slice(&source.port().to_be_bytes());
    out.extend_from_slice(&destination.port().to_be_bytes());
    for &(tlv_type, value) in tlvs {
        out.push(tlv_type);
        // Checked above: every value length fits in u16.
        out.extend_from_slice(&u16::try_from(value.len()).unwrap_or(u16::MAX).to_be_bytes());
        out.extend_from_slice(value);
    }
    Ok(total)
}

/// Appends a v2 LOCAL header (AF_UNSPEC, no addresses, no TLVs), as for a
/// health check, and returns the number of bytes appended (16).
pub fn write_v2_local(out: &mut Vec<u8>) -> usize {
    out.extend_from_slice(V2_SIGNATURE);
    out.extend_from_slice(&[VER_CMD_LOCAL, FAM_UNSPEC, 0, 0]);
    V2_FIXED_LEN
}

fn as_v6(ip: IpAddr) -> Ipv6Addr {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    }
}

#[cfg(test)]
mod tests {
    use super::super::{
        Addresses, Command, PP2_TYPE_AUTHORITY, ProxyHeader, ProxyParsed, Transport,
        parse_proxy_header,
    };
    use super::*;

    fn sa(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    fn parsed(window: &[u8]) -> ProxyHeader<'_> {
        match parse_proxy_header(window) {
            Ok(ProxyParsed::Complete(h)) => h,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn tcp4_matches_the_wire_format() {
        let mut out = b"keep".to_vec();
        let n = write_v2(
            &mut out,
            sa("192.0.2.10:51234"),
            sa("198.51.100.20:443"),
            &[(PP2_TYPE_AUTHORITY, b"a.example.com")],
        )
        .unwrap();
        assert_eq!(n, 16 + 12 + 3 + 13);
        assert_eq!(out.len(), 4 + n);
        let expected: &[u8] = b"keep\r\n\r\n\0\r\nQUIT\n\x21\x11\x00\x1c\
            \xc0\x00\x02\x0a\xc6\x33\x64\x14\xc8\x22\x01\xbb\
            \x02\x00\x0da.example.com";
        assert_eq!(out, expected);
    }

    #[test]
    fn mixed_families_use_v4_mapped_ipv6() {
        let mut out = Vec::new();
        let n = write_v2(&mut out, sa("192.0.2.10:1"), sa("[2001:db8::1]:2"), &[]).unwrap();
        assert_eq!(n, 16 + 36);
        let h = parsed(&out);
        assert_eq!(
            h.addresses(),
            Addresses::Inet {
                transport: Transport::Stream,
                source: sa("[::ffff:192.0.2.10]:1"),
                destination: sa("[2001:db8::1]:2"),
            }
        );
    }

    #[test]
    fn local() {
        let mut out = Vec::new();
        assert_eq!(write_v2_local(&mut out), 16);
        let h = parsed(&out);
        assert_eq!(h.len(), 16);
        assert_eq!(h.command(), Command::Local);
        assert_eq!(h.addresses(), Addresses::Unspecified);
    }

    #[test]
    fn size_limits() {
        let big = vec![0u8; 65536];
        let src = sa("192.0.2.10:1");
        let dst = sa("192.0.2.11:2");
        let mut out = b"x".to_vec();
        assert_eq!(
            write_v2(&mut out, src, dst, &[(0xE0, &big)]),
            Err(ProxyWriteError::TlvTooLong {
                tlv_type: 0xE0,
                len: 65536
            })
        );
        // 12 + 3 + 65521 = 65536: one byte too many for the length field.
        assert_eq!(
            write_v2(&mut out, src, dst, &[(0xE0, &big[..65521])]),
            Err(ProxyWriteError::HeaderTooLong { len: 65536 })
        );
        assert_eq!(
            write_v2(
                &mut out,
                src,
                dst,
                &[(1, &big[..40000]), (2, &big[..40000])]
            ),
            Err(ProxyWriteError::HeaderTooLong { len: 80018 })
        );
        assert_eq!(out, b"x", "nothing appended on error");
        // Exactly 65535 is fine, and parses back.
        let n = write_v2(&mut out, src, dst, &[(0xE0, &big[..65520])]).unwrap();
        assert_eq!(n, 16 + 65535);
        let h = parsed(&out[1..]);
        assert_eq!(h.len(), n);
        assert_eq!(h.tlv(0xE0).map(<[u8]>::len), Some(65520));
    }

    #[test]
    fn errors_display() {
        assert_eq!(
            ProxyWriteError::TlvTooLong {
                tlv_type: 2,
                len: 70000
            }
            .to_string(),
            "PROXY v2 TLV 0x02 value of 70000 bytes exceeds 65535"
        );
    }
}
