//! PROXY protocol v1: the text line
//! `PROXY <TCP4|TCP6|UNKNOWN> <src> <dst> <sport> <dport>\r\n`.
//!
//! Owns: the line grammar (single spaces, strict decimal ports, addresses of
//! the declared family, the 107-byte limit, CR and LF only as the final CRLF)
//! and its early rejection: every field seen so far is checked as it arrives,
//! a finished field in full and the field still being received as a prefix.
//!
//! Must never: look past the CRLF, accept a line longer than 107 bytes, or
//! call a prefix that can never become a valid line "incomplete" (the one
//! leniency: an IPv6 address still being received is only checked for its
//! character set and length until its terminating space arrives).

use core::iter::Peekable;
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use core::slice::Split;

use nom::bytes::streaming::tag;

use super::{
    Addresses, Command, Needed, ProxyError, ProxyHeader, ProxyParsed, Transport, V1_MAX_LEN,
    V1_MIN_LEN, V1_SIGNATURE, V1Fault,
};

/// The protocol tokens v1 defines.
const PROTOCOLS: [&[u8]; 3] = [b"TCP4", b"TCP6", b"UNKNOWN"];

/// Longest textual IPv6 address without zone: six `ffff:` groups then a
/// dotted quad.
const MAX_IPV6_TEXT_LEN: usize = 45;

#[derive(Debug, Clone, Copy)]
enum Family {
    V4,
    V6,
}

type Fields<'a> = Peekable<Split<'a, u8, fn(&u8) -> bool>>;

enum Field<'a> {
    /// A field followed by a space, or the last one of a complete line.
    Whole(&'a [u8]),
    /// The last field of a line whose CRLF has not arrived: may still grow.
    Partial(&'a [u8]),
    /// The line ended before this field.
    End,
}

fn is_space(b: &u8) -> bool {
    *b == b' '
}

fn is_line_break(b: &u8) -> bool {
    *b == b'\r' || *b == b'\n'
}

pub(super) fn parse(window: &[u8]) -> Result<ProxyParsed<'_>, ProxyError> {
    match tag::<_, _, ()>(&V1_SIGNATURE[..])(window) {
        Ok(_) => {}
        Err(nom::Err::Incomplete(_)) => {
            return Ok(ProxyParsed::Incomplete(Needed::at_least(
                V1_MIN_LEN.saturating_sub(window.len()),
            )));
        }
        Err(_) => return Err(ProxyError::NotProxyProtocol),
    }
    // Nothing beyond the 107th byte can belong to the line.
    let scan = window.get(..V1_MAX_LEN).unwrap_or(window);
    let Some(end) = scan.iter().position(is_line_break) else {
        line(scan, false)?;
        if scan.len() >= V1_MAX_LEN {
            return Err(ProxyError::V1TooLong);
        }
        let to_min = V1_MIN_LEN.saturating_sub(window.len());
        return Ok(ProxyParsed::Incomplete(Needed::at_least(to_min.max(2))));
    };
    let content = scan.get(..end).unwrap_or(scan);
    // What precedes the first CR or LF must be a valid start of a line
    // whatever the terminator turns out to be.
    line(content, false)?;
    let len = end + 2;
    match (window.get(end), window.get(end + 1)) {
        // A CR whose LF would be byte 108 is too long whatever follows it:
        // deciding on the CR alone keeps the error the same however the
        // bytes were split into reads (a fuzzer found the flip).
        (Some(b'\r'), _) if len > V1_MAX_LEN => Err(ProxyError::V1TooLong),
        (Some(b'\r'), Some(b'\n')) => {
            let addresses = line(content, true)?.ok_or(V1Fault::MissingField)?;
            Ok(ProxyParsed::Complete(ProxyHeader {
                version: 1,
                len,
                command: Command::Proxy,
                addresses,
                tlvs: &[],
            }))
        }
        (Some(b'\r'), None) => Ok(ProxyParsed::Incomplete(Needed::at_least(1))),
        _ => Err(V1Fault::StrayLineBreak.into()),
    }
}

/// Checks the line (without CRLF) field by field. `complete` says whether the
/// CRLF follows `content`; if not, the last field is checked as a prefix.
/// Returns the addresses once a complete line proves valid, `None` for a
/// valid prefix.
fn line(content: &[u8], complete: bool) -> Result<Option<Addresses<'static>>, V1Fault> {
    let after_signature = content.get(V1_SIGNATURE.len()..).unwrap_or_default();
    let mut fields: Fields<'_> = after_signature
        .split(is_space as fn(&u8) -> bool)
        .peekable();
    let family = match next_field(&mut fields, complete)? {
        Field::Partial(token) => {
            return if PROTOCOLS.iter().any(|p| p.starts_with(token)) {
                Ok(None)
            } else {
                Err(V1Fault::UnknownProtocol)
            };
        }
        // The spec says to ignore whatever follows UNKNOWN up to the CRLF.
        Field::Whole(b"UNKNOWN") => return Ok(complete.then_some(Addresses::Unspecified)),
        Field::Whole(b"TCP4") => Family::V4,
        Field::Whole(b"TCP6") => Family::V6,
        Field::Whole(_) => return Err(V1Fault::UnknownProtocol),
        Field::End => return Err(V1Fault::MissingField),
    };
    let Some(src) = value(
        &mut fields,
        complete,
        |f| ip(f, family),
        V1Fault::BadSourceAddress,
    )?
    else {
        return Ok(None);
    };
    let Some(dst) = value(
        &mut fields,
        complete,
        |f| ip(f, family),
        V1Fault::BadDestinationAddress,
    )?
    else {
        return Ok(None);
    };
    let Some(src_port) = value(&mut fields, complete, port, V1Fault::BadSourcePort)? else {
        return Ok(None);
    };
    let Some(dst_port) = value(&mut fields, complete, port, V1Fault::BadDestinationPort)? else {
        return Ok(None);
    };
    if fields.next().is_some() {
        return Err(V1Fault::TrailingData);
    }
    Ok(Some(Addresses::Inet {
        transport: Transport::Stream,
        source: SocketAddr::new(src, src_port),
        destination: SocketAddr::new(dst, dst_port),
    }))
}

fn next_field<'a>(fields: &mut Fields<'a>, complete: bool) -> Result<Field<'a>, V1Fault> {
    let Some(field) = fields.next() else {
        return Ok(Field::End);
    };
    if !complete && fields.peek().is_none() {
        return Ok(Field::Partial(field));
    }
    if field.is_empty() {
        return Err(V1Fault::EmptyField);
    }
    Ok(Field::Whole(field))
}

/// The next field parsed by `parse`, or `None` while it is still arriving
/// and `parse` says more bytes can make (or keep) it valid.
fn value<T>(
    fields: &mut Fields<'_>,
    complete: bool,
    parse: impl Fn(&[u8]) -> Parse<T>,
    fault: V1Fault,
) -> Result<Option<T>, V1Fault> {
    match next_field(fields, complete)? {
        Field::Whole(field) => match parse(field) {
            Parse::Valid(v) => Ok(Some(v)),
            Parse::Prefix | Parse::Invalid => Err(fault),
        },
        Field::Partial(field) => match parse(field) {
            Parse::Valid(_) | Parse::Prefix => Ok(None),
            Parse::Invalid => Err(fault),
        },
        Field::End => Err(V1Fault::MissingField),
    }
}

/// What a field parser makes of a field.
enum Parse<T> {
    /// A complete valid field (which may or may not be able to grow further).
    Valid(T),
    /// Not valid as is, but more bytes could make it valid.
    Prefix,
    /// No continuation can make it valid.
    Invalid,
}

fn ip(field: &[u8], family: Family) -> Parse<IpAddr> {
    if let Some(addr) = parse_ip(field, family) {
        return Parse::Valid(addr);
    }
    let could_grow = match family {
        Family::V4 => ipv4_prefix(field),
        Family::V6 => {
            field.len() < MAX_IPV6_TEXT_LEN
                && field
                    .iter()
                    .all(|&b| b.is_ascii_hexdigit() || b == b':' || b == b'.')
        }
    };
    if could_grow {
        Parse::Prefix
    } else {
        Parse::Invalid
    }
}

fn parse_ip(field: &[u8], family: Family) -> Option<IpAddr> {
    if !field.is_ascii() {
        return None;
    }
    let text = core::str::from_utf8(field).ok()?;
    match family {
        Family::V4 => text.parse::<Ipv4Addr>().ok().map(IpAddr::V4),
        Family::V6 => text.parse::<Ipv6Addr>().ok().map(IpAddr::V6),
    }
}

/// Whether `field` is the start of a dotted quad: at most four parts, every
/// finished part an octet, the part being typed empty or an octet (every
/// prefix of a valid octet is itself one).
fn ipv4_prefix(field: &[u8]) -> bool {
    let mut parts = field.split(|&b| b == b'.').peekable();
    let mut count = 0;
    while let Some(part) = parts.next() {
        count += 1;
        let last = parts.peek().is_none();
        let ok = (last && part.is_empty()) || decimal(part, 3).is_some_and(|n| n <= 255);
        if count > 4 || !ok {
            return false;
        }
    }
    true
}

fn port(field: &[u8]) -> Parse<u16> {
    match decimal(field, 5).map(u16::try_from) {
        Some(Ok(p)) => Parse::Valid(p),
        // Beyond 65535 with five digits: cannot shrink back.
        Some(Err(_)) => Parse::Invalid,
        None if field.is_empty() => Parse::Prefix,
        None => Parse::Invalid,
    }
}

/// A strict decimal: 1 to `max_digits` ASCII digits, no sign, no leading
/// zero unless the number is `0`.
fn decimal(field: &[u8], max_digits: usize) -> Option<u32> {
    let strict = match field {
        [] => false,
        [b'0', _, ..] => false,
        _ => field.len() <= max_digits && field.iter().all(u8::is_ascii_digit),
    };
    strict.then(|| field.iter().fold(0, |n, &d| n * 10 + u32::from(d - b'0')))
}

#[cfg(test)]
mod tests {
    use super::super::parse_proxy_header;
    use super::*;

    const TCP4: &[u8] = b"PROXY TCP4 192.0.2.10 198.51.100.20 51234 443\r\n";
    const TCP6: &[u8] = b"PROXY TCP6 2001:db8::1 ::ffff:192.0.2.1 0 65535\r\n";
    const UNKNOWN: &[u8] = b"PROXY UNKNOWN\r\n";
    /// The spec's worst case, exactly 107 bytes.
    const UNKNOWN_MAX: &[u8] = b"PROXY UNKNOWN ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff \
        ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff 65535 65535\r\n";
    const WORST_CASE: &[u8] = b"PROXY TCP6 ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff \
        ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff 65535 65535\r\n";

    fn complete(window: &[u8]) -> ProxyHeader<'_> {
        match parse_proxy_header(window) {
            Ok(ProxyParsed::Complete(h)) => h,
            other => panic!("{:?}: {other:?}", String::from_utf8_lossy(window)),
        }
    }

    fn err(window: &[u8]) -> ProxyError {
        match parse_proxy_header(window) {
            Err(e) => e,
            other => panic!("{:?}: {other:?}", String::from_utf8_lossy(window)),
        }
    }

    fn sa(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    fn pad_unknown(total: usize) -> Vec<u8> {
        let mut line = b"PROXY UNKNOWN ".to_vec();
        line.resize(total - 2, b'x');
        line.extend_from_slice(b"\r\n");
        line
    }

    #[test]
    fn tcp4() {
        let mut window = TCP4.to_vec();
        window.extend_from_slice(&[0x16, 0x03, 0x01]);
        let h = complete(&window);
        assert_eq!(h.version(), 1);
        assert_eq!(h.len(), TCP4.len());
        assert_eq!(h.command(), Command::Proxy);
        assert_eq!(
            h.addresses(),
            Addresses::Inet {
                transport: Transport::Stream,
                source: sa("192.0.2.10:51234"),
                destination: sa("198.51.100.20:443"),
            }
        );
        assert_eq!(h.source(), Some(sa("192.0.2.10:51234")));
        assert_eq!(h.destination(), Some(sa("198.51.100.20:443")));
        assert_eq!(h.tlvs().count(), 0);
        assert_eq!(h.authority(), None);
    }

    #[test]
    fn tcp6() {
        let h = complete(TCP6);
        assert_eq!(h.len(), TCP6.len());
        assert_eq!(h.source(), Some(sa("[2001:db8::1]:0")));
        assert_eq!(h.destination(), Some(sa("[::ffff:192.0.2.1]:65535")));
        let h = complete(WORST_CASE);
        assert_eq!(h.len(), WORST_CASE.len());
        assert_eq!(h.len(), 104);
    }

    #[test]
    fn unknown_ignores_the_rest_of_the_line() {
        for line in [
            UNKNOWN,
            UNKNOWN_MAX,
            b"PROXY UNKNOWN  \x01\xff garbage \r\n",
        ] {
            let h = complete(line);
            assert_eq!(h.len(), line.len());
            assert_eq!(h.addresses(), Addresses::Unspecified);
            assert_eq!(h.source(), None);
        }
        assert_eq!(UNKNOWN_MAX.len(), 107);
    }

    #[test]
    fn limit_is_107_bytes_crlf_included() {
        assert_eq!(complete(&pad_unknown(107)).len(), 107);
        // Valid fields, but 116 bytes: the 107-byte limit wins.
        let v6_max = "ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255";
        let long = format!("PROXY TCP6 {v6_max} {v6_max} 65535 65535\r\n");
        assert_eq!(long.len(), 116);
        assert_eq!(err(long.as_bytes()), ProxyError::V1TooLong);
        assert_eq!(err(&pad_unknown(108)), ProxyError::V1TooLong);
        // CR as the 107th byte: the LF could only be the 108th.
        assert_eq!(err(&pad_unknown(108)[..107]), ProxyError::V1TooLong);
        let mut no_crlf = pad_unknown(200);
        no_crlf.truncate(107);
        assert_eq!(err(&no_crlf), ProxyError::V1TooLong);
        assert_eq!(err(&pad_unknown(200)), ProxyError::V1TooLong);
        no_crlf.truncate(106);
        assert!(matches!(
            parse_proxy_header(&no_crlf),
            Ok(ProxyParsed::Incomplete(_))
        ));
    }

    #[rustfmt::skip]
    const INVALID: &[(&[u8], V1Fault)] = &[
        (b"PROXY TCP9 192.0.2.10 198.51.100.20 51234 443\r\n", V1Fault::UnknownProtocol),
        (b"PROXY tcp4 192.0.2.10 198.51.100.20 51234 443\r\n", V1Fault::UnknownProtocol),
        (b"PROXY UNKNOWNX\r\n", V1Fault::UnknownProtocol),
        (b"PROXY UDP4 192.0.2.10 198.51.100.20 51234 443\r\n", V1Fault::UnknownProtocol),
        (b"PROXY TCP4 192.0.2.256 198.51.100.20 51234 443\r\n", V1Fault::BadSourceAddress),
        (b"PROXY TCP4 192.0.2 198.51.100.20 51234 443\r\n", V1Fault::BadSourceAddress),
        (b"PROXY TCP4 192.0.02.10 198.51.100.20 51234 443\r\n", V1Fault::BadSourceAddress),
        (b"PROXY TCP4 1.2.3.4.5 198.51.100.20 51234 443\r\n", V1Fault::BadSourceAddress),
        (b"PROXY TCP4 2001:db8::1 198.51.100.20 51234 443\r\n", V1Fault::BadSourceAddress),
        (b"PROXY TCP4 192.0.2.10\t198.51.100.20 51234 443\r\n", V1Fault::BadSourceAddress),
        (b"PROXY TCP4 192.0.2.10 198.51.100.x 51234 443\r\n", V1Fault::BadDestinationAddress),
        (b"PROXY TCP6 192.0.2.10 2001:db8::2 51234 443\r\n", V1Fault::BadSourceAddress),
        (b"PROXY TCP6 2001:db8::1 198.51.100.20 51234 443\r\n", V1Fault::BadDestinationAddress),
        (b"PROXY TCP6 2001:db8::1%eth0 2001:db8::2 1 2\r\n", V1Fault::BadSourceAddress),
        (b"PROXY TCP6 [2001:db8::1] 2001:db8::2 1 2\r\n", V1Fault::BadSourceAddress),
        (b"PROXY TCP6 2001:db8:::1 2001:db8::2 1 2\r\n", V1Fault::BadSourceAddress),
        (b"PROXY TCP4 192.0.2.10 198.51.100.20 01 443\r\n", V1Fault::BadSourcePort),
        (b"PROXY TCP4 192.0.2.10 198.51.100.20 00 443\r\n", V1Fault::BadSourcePort),
        (b"PROXY TCP4 192.0.2.10 198.51.100.20 +1 443\r\n", V1Fault::BadSourcePort),
        (b"PROXY TCP4 192.0.2.10 198.51.100.20 -1 443\r\n", V1Fault::BadSourcePort),
        (b"PROXY TCP4 192.0.2.10 198.51.100.20 65536 443\r\n", V1Fault::BadSourcePort),
        (b"PROXY TCP4 192.0.2.10 198.51.100.20 123456 443\r\n", V1Fault::BadSourcePort),
        (b"PROXY TCP4 192.0.2.10 198.51.100.20 51234 0443\r\n", V1Fault::BadDestinationPort),
        (b"PROXY TCP4 192.0.2.10 198.51.100.20 51234 99999\r\n", V1Fault::BadDestinationPort),
        (b"PROXY TCP4 192.0.2.10 198.51.100.20 51234 44a\r\n", V1Fault::BadDestinationPort),
        (b"PROXY  TCP4 192.0.2.10 198.51.100.20 51234 443\r\n", V1Fault::EmptyField),
        (b"PROXY TCP4  192.0.2.10 198.51.100.20 51234 443\r\n", V1Fault::EmptyField),
        (b"PROXY TCP4 192.0.2.10 198.51.100.20  51234 443\r\n", V1Fault::EmptyField),
        (b"PROXY TCP4 192.0.2.10 198.51.100.20 51234  443\r\n", V1Fault::EmptyField),
        (b"PROXY \r\n", V1Fault::EmptyField),
        (b"PROXY TCP4 192.0.2.10 198.51.100.20 51234 443 \r\n", V1Fault::TrailingData),
        (b"PROXY TCP4 192.0.2.10 198.51.100.20 51234 443 80\r\n", V1Fault::TrailingData),
        (b"PROXY TCP4 192.0.2.10 198.51.100.20 51234\r\n", V1Fault::MissingField),
        (b"PROXY TCP4\r\n", V1Fault::MissingField),
        (b"PROXY TCP4 192.0.2.10 198.51.100.20 51234 443\n", V1Fault::StrayLineBreak),
        (b"PROXY TCP4 192.0.2.10 198.51.100.20 51234 443\rX", V1Fault::StrayLineBreak),
        (b"PROXY UNKNOWN foo\rbar\r\n", V1Fault::StrayLineBreak),
    ];

    const NOT_PROXY: &[&[u8]] = &[b"PROXY\r\n", b"PROXy TCP4", b"GET / HTTP/1.1\r\n"];

    #[test]
    fn invalid_lines() {
        for (line, fault) in INVALID {
            let expected = ProxyError::V1Malformed(*fault);
            assert_eq!(err(line), expected, "{:?}", String::from_utf8_lossy(line));
        }
        for line in NOT_PROXY {
            assert_eq!(err(line), ProxyError::NotProxyProtocol);
        }
    }

    /// An invalid line is rejected as soon as the offending field is
    /// recognisably wrong, before its CRLF arrives.
    #[test]
    fn invalid_fields_are_rejected_before_crlf() {
        let early: &[(&[u8], V1Fault)] = &[
            (b"PROXY TCP9", V1Fault::UnknownProtocol),
            (b"PROXY X", V1Fault::UnknownProtocol),
            (b"PROXY TCP4 256", V1Fault::BadSourceAddress),
            (b"PROXY TCP4 1..", V1Fault::BadSourceAddress),
            (b"PROXY TCP4 01", V1Fault::BadSourceAddress),
            (b"PROXY TCP4 1.2.3.4.", V1Fault::BadSourceAddress),
            (b"PROXY TCP4 ::", V1Fault::BadSourceAddress),
            (b"PROXY TCP6 2001:db8::g", V1Fault::BadSourceAddress),
            (b"PROXY TCP4 1.2.3.4 5.6.7.8 01", V1Fault::BadSourcePort),
            (b"PROXY TCP4 1.2.3.4 5.6.7.8 65536", V1Fault::BadSourcePort),
            (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2 ", V1Fault::TrailingData),
            (b"PROXY TCP4  ", V1Fault::EmptyField),
        ];
        // "0" alone is a valid port, and so are the starts of valid fields.
        for prefix in [
            &b"PROXY TCP4 1.2.3.4 5.6.7.8 0"[..],
            b"PROXY TCP4 1.2.3.",
            b"PROXY TCP6 ::ffff:1.2.",
            b"PROXY UNK",
        ] {
            assert!(matches!(
                parse_proxy_header(prefix),
                Ok(ProxyParsed::Incomplete(_))
            ));
        }
        for (prefix, fault) in early {
            assert_eq!(
                err(prefix),
                ProxyError::V1Malformed(*fault),
                "{:?}",
                String::from_utf8_lossy(prefix)
            );
        }
    }

    /// No IPv6 text is longer than 45 bytes, so a 45-byte field that is not
    /// an address can never become one: rejected before its space arrives,
    /// while a valid 45-byte address still waits for the rest of the line.
    #[test]
    fn ipv6_field_of_the_longest_length_is_decided_without_its_space() {
        let longest = "ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255";
        let not_an_address = "ffff:".repeat(9);
        assert_eq!(longest.len(), MAX_IPV6_TEXT_LEN);
        assert_eq!(not_an_address.len(), MAX_IPV6_TEXT_LEN);
        for (before, fault) in [
            ("PROXY TCP6 ", V1Fault::BadSourceAddress),
            ("PROXY TCP6 ::1 ", V1Fault::BadDestinationAddress),
        ] {
            let valid = format!("{before}{longest}");
            assert!(matches!(
                parse_proxy_header(valid.as_bytes()),
                Ok(ProxyParsed::Incomplete(_))
            ));
            let invalid = format!("{before}{not_an_address}");
            assert_eq!(err(invalid.as_bytes()), ProxyError::V1Malformed(fault));
        }
    }

    /// Once a prefix is rejected, every longer window is rejected too.
    #[test]
    fn rejection_is_final() {
        for line in INVALID
            .iter()
            .map(|(line, _)| *line)
            .chain(NOT_PROXY.iter().copied())
        {
            let first_err = (0..=line.len()).find(|&n| parse_proxy_header(&line[..n]).is_err());
            let Some(first_err) = first_err else {
                panic!("never rejected: {:?}", String::from_utf8_lossy(line))
            };
            for n in first_err..=line.len() {
                assert!(parse_proxy_header(&line[..n]).is_err());
            }
        }
    }

    #[test]
    fn every_strict_prefix_is_incomplete() {
        let too_long_ok = pad_unknown(107);
        for line in [TCP4, TCP6, UNKNOWN, UNKNOWN_MAX, WORST_CASE, &too_long_ok] {
            for n in 0..line.len() {
                match parse_proxy_header(&line[..n]) {
                    Ok(ProxyParsed::Incomplete(Needed::AtLeast(k))) => {
                        assert!(k.get() <= line.len() - n, "needed {k} at {n} of {line:?}");
                    }
                    other => panic!("prefix {n} of {line:?}: {other:?}"),
                }
            }
            let mut window = line.to_vec();
            window.extend_from_slice(b"\r\n\x16\x03 trailing");
            assert_eq!(complete(&window).len(), line.len());
        }
    }

    #[test]
    fn signature_byte_flip_is_rejected_immediately() {
        for i in 0..V1_SIGNATURE.len() {
            for b in 0..=u8::MAX {
                if b == V1_SIGNATURE[i] || (i == 0 && b == b'\r') {
                    continue;
                }
                let mut window = V1_SIGNATURE[..i].to_vec();
                window.push(b);
                assert_eq!(err(&window), ProxyError::NotProxyProtocol);
            }
        }
    }

    #[test]
    fn strict_decimal() {
        assert_eq!(decimal(b"0", 5), Some(0));
        assert_eq!(decimal(b"65535", 5), Some(65535));
        assert_eq!(decimal(b"99999", 5), Some(99999));
        assert_eq!(decimal(b"", 5), None);
        assert_eq!(decimal(b"00", 5), None);
        assert_eq!(decimal(b"123456", 5), None);
        assert_eq!(decimal(b"1 ", 5), None);
    }
}
