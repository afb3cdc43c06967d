//! The parsers under a byte cap (`parse_client_hello_within`,
//! `parse_proxy_header_within`): a length that announces more than the cap
//! is known as soon as it is read, nothing after it changes the answer, and
//! a window that can still fit is never counted past the cap.

use preread_parser::proxy::{ProxyParsed, parse_proxy_header, parse_proxy_header_within};
use preread_parser::tls::{
    MAX_RECORD_LEN, Needed, Parsed, RECORD_HEADER_LEN, TlsError, parse_client_hello,
    parse_client_hello_within,
};
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

const CURL_H2: &[u8] = vector!("curl_h2.bin");
const V2_TLV: &[u8] = vector!("gen_m_proxy_v2_tlv.bin");
const V1: &[u8] = vector!("gen_n_proxy_v1.bin");

/// Whether the TLS answer says the window cannot end within `limit`.
fn tls_beyond(window: &[u8], limit: usize) -> bool {
    let mut scratch = Vec::new();
    match parse_client_hello_within(window, limit, &mut scratch) {
        Ok(Parsed::Incomplete(Needed::AtLeast(n))) => window.len() + n.get() > limit,
        Ok(Parsed::Incomplete(Needed::Unknown)) => window.len() >= limit,
        Ok(Parsed::Complete(_)) | Err(_) => false,
    }
}

/// Whether the PROXY answer says the window cannot end within `limit`.
fn proxy_beyond(window: &[u8], limit: usize) -> bool {
    match parse_proxy_header_within(window, limit) {
        Ok(ProxyParsed::Incomplete(Needed::AtLeast(n))) => window.len() + n.get() > limit,
        Ok(ProxyParsed::Incomplete(Needed::Unknown)) => window.len() >= limit,
        Ok(ProxyParsed::Complete(_)) | Err(_) => false,
    }
}

/// `message` framed in records of at most `chunk` bytes.
fn framed(message: &[u8], chunk: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for part in message.chunks(chunk) {
        out.extend_from_slice(&[22, 3, 1]);
        out.extend_from_slice(&(part.len() as u16).to_be_bytes());
        out.extend_from_slice(part);
    }
    out
}

/// A handshake message of `total` bytes (header included) that is a
/// ClientHello by its type byte; its body is never looked at here.
fn message(total: usize) -> Vec<u8> {
    let body = total - 4;
    let mut m = vec![1, (body >> 16) as u8, (body >> 8) as u8, body as u8];
    m.resize(total, 0);
    m
}

#[test]
fn a_16_mib_handshake_is_beyond_at_its_header() {
    let mut hello = CURL_H2.to_vec();
    hello[6..9].copy_from_slice(&[0xff, 0xff, 0xff]);
    assert!(
        !tls_beyond(&hello[..8], 16_384),
        "the length is not read yet"
    );
    assert!(tls_beyond(&hello[..9], 16_384));
    assert!(tls_beyond(&hello, 16_384));
}

#[test]
fn nothing_after_the_announcing_length_is_examined() {
    let mut hello = CURL_H2.to_vec();
    hello[6..9].copy_from_slice(&[0x00, 0x42, 0x64]);
    // The record ends, then one of another content type.
    hello.extend_from_slice(&[23, 3, 3, 0, 1, 0]);
    let mut scratch = Vec::new();
    assert!(matches!(
        parse_client_hello(&hello, &mut scratch),
        Err(TlsError::MalformedRecord(_))
    ));
    assert!(
        tls_beyond(&hello, 16_384),
        "17000 bytes cannot end within 16384"
    );
    assert!(
        tls_beyond(&hello[..9], 16_384),
        "the same answer from 9 bytes"
    );
}

#[test]
fn a_record_that_ends_past_the_limit_is_beyond_at_its_header() {
    assert!(!tls_beyond(&CURL_H2[..4], 516));
    assert!(
        tls_beyond(&CURL_H2[..5], 516),
        "a 512-byte record needs 517"
    );
    for cut in 0..CURL_H2.len() {
        assert!(!tls_beyond(&CURL_H2[..cut], 517), "{cut} bytes, limit 517");
    }
}

#[test]
fn a_hello_over_several_records_counts_a_header_per_record() {
    // 40000 bytes need three records, so 40015 bytes on the wire at least:
    // the bound is exact for full records and never counts past the limit
    // for a window that can still fit.
    let wire = framed(&message(40_000), MAX_RECORD_LEN);
    assert_eq!(wire.len(), 40_000 + 3 * RECORD_HEADER_LEN);
    for cut in (0..wire.len())
        .step_by(97)
        .chain([9, 16_389, 16_394, 40_014])
    {
        assert!(
            !tls_beyond(&wire[..cut], 40_015),
            "{cut} bytes, limit 40015"
        );
    }
    assert!(
        tls_beyond(&wire[..9], 40_014),
        "one byte short, known at once"
    );
    // Smaller records need more headers: each one read raises the bound.
    let small = framed(&message(2_000), 500);
    assert_eq!(small.len(), 2_000 + 4 * RECORD_HEADER_LEN);
    assert!(
        !tls_beyond(&small[..9], 2_014),
        "9 bytes show one header: 2010 at least"
    );
    assert!(tls_beyond(&small[..9], 2_009));
    assert!(
        tls_beyond(&small[..510], 2_014),
        "the second header says 2015"
    );
    assert!(!tls_beyond(&small[..2_019], 2_020));
}

#[test]
fn without_a_length_only_the_limit_itself_is_beyond() {
    // One-byte records: the handshake length is unknown until 4 records in.
    let mut wire = Vec::new();
    for byte in &CURL_H2[5..9] {
        wire.extend_from_slice(&[22, 3, 1, 0, 1, *byte]);
    }
    assert!(!tls_beyond(&wire[..11], 12));
    assert!(tls_beyond(&wire[..12], 12), "at the limit");
    // A limit inside the record header: the count never passes it early.
    assert!(!tls_beyond(&[22, 3], 3));
    assert!(tls_beyond(&[22, 3, 1], 3));
}

#[test]
fn a_proxy_v2_length_past_the_limit_is_beyond_at_its_header() {
    let mut header = V2_TLV.to_vec();
    header[14..16].copy_from_slice(&[0xff, 0xff]);
    assert!(!proxy_beyond(&header[..15], 1_000));
    assert!(proxy_beyond(&header[..16], 1_000));
    assert!(proxy_beyond(&header[..16], 65_550));
    assert!(!proxy_beyond(&header[..16], 65_551), "exactly 16 + 65535");
}

#[test]
fn a_proxy_header_before_its_length_is_never_beyond_early() {
    // A v2 signature and a v1 line announce nothing: bytes still to come
    // may prove them invalid, so only the limit itself is beyond.
    assert!(!proxy_beyond(&V2_TLV[..10], 12));
    assert!(proxy_beyond(&V2_TLV[..12], 12));
    assert!(!proxy_beyond(&V1[..6], 10));
    assert!(proxy_beyond(&V1[..10], 10));
}

proptest! {
    /// Under a limit no smaller than the window, the capped parsers agree
    /// with the plain ones on every complete header and every error they
    /// report, and any window they call beyond the limit is one whose
    /// whole stream cannot end within it.
    #[test]
    fn capped_answers_agree_with_the_plain_parsers(
        cut in 0usize..600,
        limit in 5usize..700,
        flip in proptest::option::of((0usize..20, any::<u8>())),
    ) {
        let mut stream = CURL_H2.to_vec();
        if let Some((at, byte)) = flip {
            stream[at] = byte;
        }
        let window = &stream[..cut.min(stream.len()).min(limit)];
        let mut a = Vec::new();
        let mut b = Vec::new();
        let plain = parse_client_hello(window, &mut a);
        let capped = parse_client_hello_within(window, limit, &mut b);
        match (&plain, &capped) {
            (Ok(Parsed::Complete(x)), Ok(Parsed::Complete(y))) => prop_assert_eq!(x, y),
            (Err(x), Err(y)) => prop_assert_eq!(x, y),
            (_, Ok(Parsed::Incomplete(_))) => {}
            other => prop_assert!(false, "{:?}", other),
        }
        if tls_beyond(window, limit) {
            let mut c = Vec::new();
            let whole = parse_client_hello(&stream, &mut c);
            prop_assert!(
                !matches!(whole, Ok(Parsed::Complete(h)) if h.end <= limit),
                "beyond {} but the stream completes within it", limit
            );
        }
        let proxy = &V2_TLV[..cut.min(V2_TLV.len()).min(limit)];
        let plain = parse_proxy_header(proxy);
        let capped = parse_proxy_header_within(proxy, limit);
        match (&plain, &capped) {
            (Ok(ProxyParsed::Incomplete(_)), Ok(ProxyParsed::Incomplete(_))) => {}
            (x, y) => prop_assert_eq!(x, y),
        }
    }
}
