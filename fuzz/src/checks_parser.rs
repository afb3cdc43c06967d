//! Invariants of the wire parsers (`preread_parser`): the TLS ClientHello
//! and the PROXY protocol header, reader and v2 writer.
//!
//! Owns: [`check_clienthello`] and [`check_proxy_header`], which panic when
//! an invariant breaks. Included with `#[path]` by
//! `preread-parser/tests/fuzz_replay.rs`, so it may use only
//! `preread_parser` and std (no `arbitrary`: the parser's dev-dependencies
//! do not have it). Everything is derived from the input bytes: a crash
//! replays exactly.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use preread_parser::proxy::{
    Addresses, Command, Needed, ProxyHeader, ProxyParsed, ProxyWriteError, Transport, V1_MAX_LEN,
    V2_FIXED_LEN, parse_proxy_header, write_v2, write_v2_local,
};
use preread_parser::tls::{
    EchKind, HANDSHAKE_HEADER_LEN, MAX_RECORD_LEN, Parsed, RECORD_HEADER_LEN, TlsError,
    parse_client_hello,
};

/// A tiny deterministic generator seeded from the input, for chunk sizes
/// and cut points (a 64-bit LCG, Knuth's MMIX constants).
#[derive(Debug, Clone)]
pub struct Lcg(u64);

impl Lcg {
    /// Seeds from every byte of `data` (FNV-1a), so that a mutation anywhere
    /// changes the chunking too.
    pub fn from_data(data: &[u8]) -> Self {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for &b in data {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        Self(h)
    }

    /// The next value, from the high bits (the low bits of an LCG are weak).
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }

    /// A value in `lo..=hi` (`lo` when the range is empty).
    pub fn range(&mut self, lo: usize, hi: usize) -> usize {
        if hi <= lo {
            return lo;
        }
        let span = (hi - lo) as u64 + 1;
        lo + (self.next_u64() % span) as usize
    }
}

/// An owned copy of a parse outcome, so results from different windows and
/// scratch buffers can be compared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TlsOutcome {
    /// `Parsed::Complete`.
    Complete(HelloSummary),
    /// `Parsed::Incomplete`.
    Incomplete(Needed),
    /// An error.
    Error(TlsError),
}

/// The fields of a `ClientHello`, owned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HelloSummary {
    /// `legacy_version`.
    pub legacy_version: u16,
    /// `server_name`.
    pub server_name: Option<Vec<u8>>,
    /// The ALPN names, in order.
    pub alpn: Option<Vec<Vec<u8>>>,
    /// The `supported_versions` offer, in order.
    pub supported_versions: Option<Vec<u16>>,
    /// The ECH type.
    pub ech: Option<EchKind>,
    /// Offset past the last record.
    pub end: usize,
    /// Record count.
    pub records: usize,
    /// Handshake message length, header included.
    pub handshake_len: usize,
}

impl HelloSummary {
    /// The fields that do not depend on how the message was framed.
    fn content(&self) -> Self {
        Self {
            end: 0,
            records: 0,
            ..self.clone()
        }
    }
}

/// Parses `window` and copies the outcome out.
pub fn parse_tls(window: &[u8], scratch: &mut Vec<u8>) -> TlsOutcome {
    match parse_client_hello(window, scratch) {
        Ok(Parsed::Complete(h)) => TlsOutcome::Complete(HelloSummary {
            legacy_version: h.legacy_version,
            server_name: h.server_name.map(<[u8]>::to_vec),
            alpn: h.alpn.map(|a| a.iter().map(<[u8]>::to_vec).collect()),
            supported_versions: h.supported_versions.map(|v| v.iter().collect()),
            ech: h.ech,
            end: h.end,
            records: h.records,
            handshake_len: h.handshake_len,
        }),
        Ok(Parsed::Incomplete(needed)) => TlsOutcome::Incomplete(needed),
        Err(e) => TlsOutcome::Error(e),
    }
}

/// `p + needed` must not pass `complete_at`: `Needed` is a lower bound on
/// the bytes still missing.
fn check_needed(what: &str, p: usize, needed: Needed, complete_at: usize) {
    if let Needed::AtLeast(n) = needed {
        assert!(
            p + n.get() <= complete_at,
            "{what}: prefix of {p} bytes says at least {n} more are needed, \
             but the whole is complete at {complete_at}"
        );
    }
}

/// The TLS parser must never panic; a complete ClientHello must be
/// incomplete (not an error) at every shorter prefix, must ignore what
/// follows it, must come out the same when fed as growing prefixes in
/// data-derived chunks, and must keep its content when its handshake
/// message is re-framed into a different number of records. Returns the
/// one-shot outcome, so a replay can tell that it checked something.
pub fn check_clienthello(data: &[u8]) -> TlsOutcome {
    let mut rng = Lcg::from_data(data);
    let whole = check_tls_stream(data, &mut rng);
    // Re-frame: one record into 2-3, several into one.
    if let TlsOutcome::Complete(hello) = &whole {
        let message = handshake_message(data, hello);
        let minor = data[2];
        let trailer = &data[hello.end..];
        let mut pieces = Vec::new();
        if hello.records == 1 {
            let k = rng.range(2, 3).min(message.len());
            let mut cuts: Vec<usize> = (1..k).map(|_| rng.range(1, message.len() - 1)).collect();
            cuts.sort_unstable();
            cuts.dedup();
            let mut start = 0;
            for cut in cuts.into_iter().chain([message.len()]) {
                pieces.push(&message[start..cut]);
                start = cut;
            }
        } else if message.len() <= MAX_RECORD_LEN {
            pieces.push(&message[..]);
        }
        if !pieces.is_empty() {
            let (reframed, end) = frame_records(minor, &pieces, trailer);
            let again = check_tls_stream(&reframed, &mut rng);
            match again {
                TlsOutcome::Complete(h) => {
                    assert_eq!(h.records, pieces.len(), "re-framed record count");
                    assert_eq!(h.end, end, "re-framed end");
                    assert_eq!(
                        h.content(),
                        hello.content(),
                        "re-framing into {} records changed the ClientHello",
                        pieces.len()
                    );
                }
                other => panic!(
                    "re-framing a complete ClientHello ({} records) into {} gave {other:?}",
                    hello.records,
                    pieces.len()
                ),
            }
        }
    }
    whole
}

/// The handshake message of a complete ClientHello, reassembled from its records.
fn handshake_message(window: &[u8], hello: &HelloSummary) -> Vec<u8> {
    let mut message = Vec::with_capacity(hello.handshake_len);
    let mut pos = 0;
    for _ in 0..hello.records {
        let len = usize::from(u16::from_be_bytes([window[pos + 3], window[pos + 4]]));
        message.extend_from_slice(&window[pos + RECORD_HEADER_LEN..pos + RECORD_HEADER_LEN + len]);
        pos += RECORD_HEADER_LEN + len;
    }
    assert_eq!(pos, hello.end, "records tile the window up to end");
    assert_eq!(message.len(), hello.handshake_len);
    message
}

/// One handshake record per piece, then `trailer`; returns the bytes and
/// the offset past the last record.
fn frame_records(minor: u8, pieces: &[&[u8]], trailer: &[u8]) -> (Vec<u8>, usize) {
    let mut out = Vec::new();
    for piece in pieces {
        let len = u16::try_from(piece.len()).expect("pieces fit a record");
        out.extend_from_slice(&[22, 3, minor]);
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(piece);
    }
    let end = out.len();
    out.extend_from_slice(trailer);
    (out, end)
}

/// The stream checks of [`check_clienthello`] on one window; returns its outcome.
fn check_tls_stream(data: &[u8], rng: &mut Lcg) -> TlsOutcome {
    // A dirty scratch: the parser must clear it before use.
    let mut scratch = vec![0xA5; 3];
    let whole = parse_tls(data, &mut scratch);
    assert_eq!(
        parse_tls(data, &mut Vec::new()),
        whole,
        "a fresh scratch buffer changed the outcome"
    );
    if let TlsOutcome::Error(e) = &whole {
        let _ = e.to_string();
    }
    if let TlsOutcome::Complete(hello) = &whole {
        assert!(hello.records >= 1);
        assert!(hello.handshake_len >= HANDSHAKE_HEADER_LEN);
        assert!(hello.end <= data.len(), "end past the window");
        assert_eq!(
            hello.end,
            hello.handshake_len + RECORD_HEADER_LEN * hello.records,
            "the records carry exactly the handshake message"
        );
        if let Some(name) = &hello.server_name {
            assert!(
                (1..=255).contains(&name.len())
                    && name.as_slice() != b"."
                    && name.iter().all(u8::is_ascii_graphic),
                "server_name {name:?} breaks the documented rules"
            );
        }
        if let Some(alpn) = &hello.alpn {
            assert!(!alpn.is_empty() && alpn.iter().all(|p| !p.is_empty()));
        }
        assert_eq!(
            parse_tls(&data[..hello.end], &mut scratch),
            whole,
            "the bytes after the ClientHello changed the outcome"
        );
        for p in 0..hello.end {
            match parse_tls(&data[..p], &mut scratch) {
                TlsOutcome::Incomplete(needed) => {
                    check_needed("ClientHello", p, needed, hello.end);
                }
                other => panic!(
                    "prefix of {p} bytes of a ClientHello complete at {} is {other:?}, \
                     not Incomplete",
                    hello.end
                ),
            }
        }
    }
    // Growing prefixes in data-derived chunks: once decided, the outcome
    // stays; the last one is the one-shot outcome.
    let max_step = [1, 7, 64, 1024][rng.range(0, 3)];
    let mut pos = 0;
    let mut decided: Option<TlsOutcome> = None;
    loop {
        let outcome = parse_tls(&data[..pos], &mut scratch);
        match &decided {
            Some(first) => assert_eq!(
                &outcome, first,
                "the outcome changed from {first:?} once {pos} bytes arrived"
            ),
            None if !matches!(outcome, TlsOutcome::Incomplete(_)) => {
                decided = Some(outcome.clone());
            }
            None => {}
        }
        if let (TlsOutcome::Incomplete(needed), TlsOutcome::Complete(h)) = (&outcome, &whole) {
            check_needed("ClientHello (chunked)", pos, *needed, h.end);
        }
        if pos == data.len() {
            assert_eq!(outcome, whole, "chunked feeding ended elsewhere");
            break;
        }
        pos = (pos + rng.range(1, max_step)).min(data.len());
    }
    whole
}

/// The PROXY header parser must never panic; a complete header fits the
/// window, ignores what follows it and is incomplete at every strict
/// prefix; an error stays an error whatever follows; and what `write_v2`
/// writes parses back to the same addresses and TLVs. Returns the header's
/// length when the input starts with a complete one.
pub fn check_proxy_header(data: &[u8]) -> Option<usize> {
    let mut rng = Lcg::from_data(data);
    let whole = parse_proxy_header(data);
    match &whole {
        Ok(ProxyParsed::Complete(header)) => check_complete_header(data, header),
        Ok(ProxyParsed::Incomplete(_)) => {}
        Err(e) => {
            let _ = e.to_string();
            for more in [&b"\r\n"[..], &[0], &data[..data.len().min(40)]] {
                let mut longer = data.to_vec();
                longer.extend_from_slice(more);
                assert_eq!(
                    parse_proxy_header(&longer).as_ref().err(),
                    Some(e),
                    "error {e:?} changed when more bytes came"
                );
            }
        }
    }
    // Growing prefixes: once decided, the verdict stays, errors included (a
    // header ignores what follows it). The corpus file
    // `finding_v1_cr_at_107_error_kind_flips.bin` once named two faults for
    // one line depending on where the read ended.
    let max_step = [1, 5, 32, 512][rng.range(0, 3)];
    let mut pos = 0;
    let mut decided = None;
    loop {
        let outcome = parse_proxy_header(&data[..pos]);
        match (&decided, &outcome) {
            (Some(first), _) => assert_eq!(
                &outcome, first,
                "the verdict changed from {first:?} once {pos} bytes arrived"
            ),
            (None, Ok(ProxyParsed::Incomplete(_))) => {}
            (None, _) => decided = Some(outcome),
        }
        if pos == data.len() {
            break;
        }
        pos = (pos + rng.range(1, max_step)).min(data.len());
    }
    check_v2_round_trip(data, &mut rng);
    match whole {
        Ok(ProxyParsed::Complete(header)) => Some(header.len()),
        _ => None,
    }
}

fn check_complete_header(data: &[u8], header: &ProxyHeader<'_>) {
    let len = header.len();
    assert!(
        len > 0 && len <= data.len(),
        "header length {len} out of the window"
    );
    match header.version() {
        1 => {
            assert!(len <= V1_MAX_LEN, "v1 line of {len} bytes");
            assert!(data[..len].ends_with(b"\r\n"));
            assert_eq!(header.command(), Command::Proxy, "v1 is always PROXY");
            assert!(header.tlvs().as_bytes().is_empty(), "v1 has no TLVs");
        }
        2 => assert!(len >= V2_FIXED_LEN, "v2 header of {len} bytes"),
        v => panic!("version {v}"),
    }
    if header.command() == Command::Local {
        assert_eq!(
            header.addresses(),
            Addresses::Unspecified,
            "LOCAL carries no addresses"
        );
        assert!(header.tlvs().as_bytes().is_empty(), "LOCAL has no TLVs");
    }
    match header.addresses() {
        Addresses::Inet {
            transport,
            source,
            destination,
        } => {
            assert_eq!(source.is_ipv4(), destination.is_ipv4(), "mixed families");
            if header.version() == 1 {
                assert_eq!(transport, Transport::Stream);
            }
            assert_eq!(header.source(), Some(source));
            assert_eq!(header.destination(), Some(destination));
        }
        Addresses::Unix { .. } | Addresses::Unspecified => {
            assert_eq!(header.source(), None);
            assert_eq!(header.destination(), None);
        }
    }
    // The TLV area is tiled exactly by the TLVs the iterator yields.
    let area = header.tlvs().as_bytes().len();
    let walked: usize = header.tlvs().map(|(_, v)| 3 + v.len()).sum();
    assert_eq!(walked, area, "TLV iteration does not cover the TLV area");
    if header.version() == 2 {
        assert!(V2_FIXED_LEN + area <= len);
    }
    assert_eq!(
        parse_proxy_header(&data[..len]),
        Ok(ProxyParsed::Complete(*header)),
        "the payload after the header changed it"
    );
    for p in 0..len {
        match parse_proxy_header(&data[..p]) {
            Ok(ProxyParsed::Incomplete(needed)) => check_needed("PROXY header", p, needed, len),
            other => panic!(
                "prefix of {p} bytes of a {len}-byte PROXY header is {other:?}, not Incomplete"
            ),
        }
    }
}

/// A byte source over the input that yields zeros once exhausted.
#[derive(Debug)]
struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    fn u8(&mut self) -> u8 {
        let b = self.data.get(self.pos).copied().unwrap_or(0);
        self.pos += 1;
        b
    }

    fn u16(&mut self) -> u16 {
        u16::from_be_bytes([self.u8(), self.u8()])
    }

    fn ip(&mut self, v6: bool) -> IpAddr {
        if v6 {
            let mut octets = [0; 16];
            octets.iter_mut().for_each(|o| *o = self.u8());
            IpAddr::V6(Ipv6Addr::from(octets))
        } else {
            IpAddr::V4(Ipv4Addr::new(self.u8(), self.u8(), self.u8(), self.u8()))
        }
    }
}

fn as_v6(ip: IpAddr) -> Ipv6Addr {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    }
}

/// Writes a v2 header for data-derived endpoints and TLVs, and parses it back.
fn check_v2_round_trip(data: &[u8], rng: &mut Lcg) {
    // Read from the end so the round trip varies with other bytes than the
    // parser checks above mostly look at.
    let reversed: Vec<u8> = data.iter().rev().copied().collect();
    let mut r = Reader {
        data: &reversed,
        pos: 0,
    };
    let shape = r.u8();
    let (v6_src, v6_dst) = match shape % 8 {
        0..=3 => (false, false),
        4..=6 => (true, true),
        // A mixed pair: written as AF_INET6 with the IPv4 one mapped.
        _ => (shape & 0x80 != 0, shape & 0x80 == 0),
    };
    let source = SocketAddr::new(r.ip(v6_src), r.u16());
    let destination = SocketAddr::new(r.ip(v6_dst), r.u16());

    let count = usize::from(r.u8() % 6);
    let mut values: Vec<(u8, Vec<u8>)> = Vec::with_capacity(count);
    for _ in 0..count {
        let tlv_type = r.u8();
        let len_byte = r.u8();
        let len = if len_byte == 0xFF {
            // Now and then a huge value, to reach the 65535-byte limits.
            usize::from(r.u16())
        } else {
            usize::from(len_byte % 64)
        };
        let value: Vec<u8> = (0..len)
            .map(|i| reversed.get(i).copied().unwrap_or(0))
            .collect();
        values.push((tlv_type, value));
    }
    let tlvs: Vec<(u8, &[u8])> = values.iter().map(|(t, v)| (*t, v.as_slice())).collect();

    let prefix = &data[..data.len().min(rng.range(0, 8))];
    let mut out = prefix.to_vec();
    let both_v4 = source.is_ipv4() && destination.is_ipv4();
    let addr_len = if both_v4 { 12 } else { 36 };
    let body_len = addr_len + tlvs.iter().map(|(_, v)| 3 + v.len()).sum::<usize>();
    match write_v2(&mut out, source, destination, &tlvs) {
        Err(e) => {
            assert_eq!(out, prefix, "write_v2 appended on error {e:?}");
            assert_eq!(e, ProxyWriteError::HeaderTooLong { len: body_len });
            assert!(body_len > usize::from(u16::MAX));
            let _ = e.to_string();
        }
        Ok(n) => {
            assert!(
                body_len <= usize::from(u16::MAX),
                "write_v2 wrote {body_len} > 65535"
            );
            assert_eq!(n, V2_FIXED_LEN + body_len, "write_v2's returned length");
            assert_eq!(out.len(), prefix.len() + n);
            assert_eq!(
                &out[..prefix.len()],
                prefix,
                "write_v2 touched what was there"
            );
            // Payload after the header must not matter.
            out.extend_from_slice(&data[..data.len().min(24)]);
            let header = match parse_proxy_header(&out[prefix.len()..]) {
                Ok(ProxyParsed::Complete(h)) => h,
                other => panic!("write_v2 output parses as {other:?}"),
            };
            let (want_src, want_dst) = if both_v4 {
                (source, destination)
            } else {
                (
                    SocketAddr::new(IpAddr::V6(as_v6(source.ip())), source.port()),
                    SocketAddr::new(IpAddr::V6(as_v6(destination.ip())), destination.port()),
                )
            };
            assert_eq!(header.version(), 2);
            assert_eq!(header.len(), n);
            assert_eq!(header.command(), Command::Proxy);
            assert_eq!(
                header.addresses(),
                Addresses::Inet {
                    transport: Transport::Stream,
                    source: want_src,
                    destination: want_dst,
                }
            );
            let back: Vec<(u8, &[u8])> = header.tlvs().collect();
            assert_eq!(back, tlvs, "TLVs did not round-trip");
            check_complete_header(&out[prefix.len()..], &header);
        }
    }
    let mut local = Vec::new();
    let n = write_v2_local(&mut local);
    assert_eq!(n, local.len());
    match parse_proxy_header(&local) {
        Ok(ProxyParsed::Complete(h)) => {
            assert_eq!((h.len(), h.command()), (n, Command::Local));
            assert_eq!(h.addresses(), Addresses::Unspecified);
        }
        other => panic!("write_v2_local output parses as {other:?}"),
    }
}
