//! The JA4 fingerprint against the spec's worked example, against the
//! values `testdata/clienthellos/ja4.py` computed from the captures by code
//! of its own (`ja4.jsonl`), and its invariances: GREASE anywhere and the
//! order of ciphers and extensions change nothing.

mod common;

use preread_parser::proxy::{ProxyParsed, parse_proxy_header};
use preread_parser::tls::{
    ClientHello, Ja4, Ja4Facts, Ja4FormatError, Parsed, SectionHint, Transport, parse_client_hello,
};
use proptest::prelude::*;

/// A one-record ClientHello with these ciphers and extensions, in order.
fn hello(ciphers: &[u16], extensions: &[(u16, Vec<u8>)]) -> Vec<u8> {
    let mut body = vec![3, 3];
    body.extend([7; 32]);
    body.push(0);
    body.extend(((ciphers.len() * 2) as u16).to_be_bytes());
    ciphers.iter().for_each(|c| body.extend(c.to_be_bytes()));
    body.extend([1, 0]);
    let mut block = Vec::new();
    for (ext_type, data) in extensions {
        block.extend(ext_type.to_be_bytes());
        block.extend((data.len() as u16).to_be_bytes());
        block.extend(data);
    }
    if !extensions.is_empty() {
        body.extend((block.len() as u16).to_be_bytes());
        body.extend(block);
    }
    let mut message = vec![1];
    message.extend(&(body.len() as u32).to_be_bytes()[1..]);
    message.extend(body);
    let mut record = vec![22, 3, 1];
    record.extend((message.len() as u16).to_be_bytes());
    record.extend(message);
    record
}

fn u16_list(len_bytes: usize, values: &[u16]) -> Vec<u8> {
    let len = (values.len() * 2) as u16;
    let mut out = len.to_be_bytes()[2 - len_bytes..].to_vec();
    values.iter().for_each(|v| out.extend(v.to_be_bytes()));
    out
}

/// What the parser's own walk gathered for JA4, checked equal to what a
/// walk of the stored lists gathers (the two feed one cache).
fn parsers_facts<'h>(hello: &ClientHello<'h>, transport: Transport) -> Ja4Facts<'h> {
    let parsed = Ja4Facts::of_hello(hello, transport);
    assert_eq!(parsed, Ja4Facts::of(hello, transport));
    parsed
}

fn fingerprints(record: &[u8]) -> (String, String) {
    let mut scratch = Vec::new();
    match parse_client_hello(record, &mut scratch) {
        Ok(Parsed::Complete(hello)) => {
            let ja4 = Ja4::of(&hello, Transport::Tcp);
            assert_eq!(Ja4::of_facts(&parsers_facts(&hello, Transport::Tcp)), ja4);
            (
                ja4.to_string(),
                Ja4::raw(&hello, Transport::Tcp).to_string(),
            )
        }
        other => panic!("not a whole hello: {other:?}"),
    }
}

const SPEC_CIPHERS: [u16; 15] = [
    0x1301, 0x1302, 0x1303, 0xc02b, 0xc02f, 0xc02c, 0xc030, 0xcca9, 0xcca8, 0xc013, 0xc014, 0x009c,
    0x009d, 0x002f, 0x0035,
];
const SPEC_EXTENSIONS: [u16; 16] = [
    0x001b, 0x0000, 0x0033, 0x0010, 0x4469, 0x0017, 0x002d, 0x000d, 0x0005, 0x0023, 0x0012, 0x002b,
    0xff01, 0x000b, 0x000a, 0x0015,
];
const SPEC_SIGNATURES: [u16; 8] = [
    0x0403, 0x0804, 0x0401, 0x0503, 0x0805, 0x0501, 0x0806, 0x0601,
];

/// One extension of the spec's example hello: SNI `example.com`, ALPN
/// `h2`, TLS 1.3 offered, the spec's signature algorithms; `grease` is put
/// first in the lists that may hold it.
fn spec_extension(ext_type: u16, grease: Option<u16>) -> (u16, Vec<u8>) {
    let with_grease =
        |values: &[u16]| -> Vec<u16> { grease.into_iter().chain(values.iter().copied()).collect() };
    let data = match ext_type {
        0x0000 => {
            let mut d = vec![0, 14, 0, 0, 11];
            d.extend(b"example.com");
            d
        }
        0x0010 => {
            let mut d = vec![0, 12, 2];
            d.extend(b"h2");
            d.push(8);
            d.extend(b"http/1.1");
            d
        }
        0x002b => u16_list(1, &with_grease(&[0x0304, 0x0303])),
        0x000d => u16_list(2, &with_grease(&SPEC_SIGNATURES)),
        _ => Vec::new(),
    };
    (ext_type, data)
}

const SPEC_JA4: &str = "t13d1516h2_8daaf6152771_e5627efa2ab1";
const SPEC_JA4_R: &str = "t13d1516h2_002f,0035,009c,009d,1301,1302,1303,c013,c014,c02b,c02c,c02f,c030,cca8,cca9_0005,000a,000b,000d,0012,0015,0017,001b,0023,002b,002d,0033,4469,ff01_0403,0804,0401,0503,0805,0501,0806,0601";

#[test]
fn the_a_section_alone_is_the_fingerprints_first_ten() {
    let mut scratch = Vec::new();
    let mut seen = 0;
    for entry in &common::corpus() {
        let tls = &entry.bytes[entry.prefix_len()..];
        if let Ok(Parsed::Complete(hello)) = parse_client_hello(tls, &mut scratch) {
            for transport in [Transport::Tcp, Transport::Quic] {
                let whole = Ja4::of(&hello, transport);
                assert_eq!(Ja4::section_a_of(&hello, transport), whole.section_a());
                let parsed = parsers_facts(&hello, transport);
                assert_eq!(parsed.section_a(), whole.section_a());
                assert_eq!(Ja4::of_facts(&parsed), whole);
                assert_eq!(&whole.section_a(), &whole.as_str().as_bytes()[..10]);
                // The hint the parse gives for nothing is the section's:
                // a list prefiltered by hints never lets a listed one by.
                assert_eq!(
                    SectionHint::of_hello(&hello, transport),
                    Some(SectionHint::of_section(&whole.section_a())),
                    "{}",
                    entry.file
                );
            }
            seen += 1;
        }
    }
    assert!(seen > 30, "only {seen} hellos");
}

#[test]
fn the_specs_worked_example() {
    let extensions: Vec<_> = SPEC_EXTENSIONS
        .iter()
        .map(|&t| spec_extension(t, None))
        .collect();
    let (ja4, raw) = fingerprints(&hello(&SPEC_CIPHERS, &extensions));
    assert_eq!(ja4, SPEC_JA4);
    assert_eq!(raw, SPEC_JA4_R);

    // Over QUIC only the first letter changes.
    let record = hello(&SPEC_CIPHERS, &extensions);
    let mut scratch = Vec::new();
    let Ok(Parsed::Complete(parsed)) = parse_client_hello(&record, &mut scratch) else {
        panic!("the example parses");
    };
    assert_eq!(
        Ja4::of(&parsed, Transport::Quic).as_str(),
        format!("q{}", &SPEC_JA4[1..])
    );
}

#[test]
fn the_specs_rules_for_empty_lists_alpn_and_versions() {
    // No signature algorithms: the extension list alone is hashed (the
    // spec's `6d807ffa2a79`); no extensions at all: zeros, version from
    // legacy_version, no SNI, no ALPN.
    let without_signatures: Vec<_> = SPEC_EXTENSIONS
        .iter()
        .map(|&t| spec_extension(t, None))
        .map(|(t, d)| if t == 0x000d { (t, vec![0, 0]) } else { (t, d) })
        .collect();
    assert_eq!(
        fingerprints(&hello(&SPEC_CIPHERS, &without_signatures)).0,
        "t13d1516h2_8daaf6152771_6d807ffa2a79"
    );
    assert_eq!(
        fingerprints(&hello(&[0x002f], &[])).0,
        "t12i010000_ba72b8082249_000000000000"
    );
    // Only SNI and ALPN: counted in `a`, nothing left to hash in `c`.
    let only_named = [spec_extension(0x0000, None), spec_extension(0x0010, None)];
    assert_eq!(
        fingerprints(&hello(&[0x002f], &only_named)).0,
        "t12d0102h2_ba72b8082249_000000000000"
    );
    // An ALPN name that starts or ends outside [0-9A-Za-z] shows the first
    // and last hex digit of its bytes instead.
    for (name, shown) in [
        (&[0xab][..], "ab"),
        (&[0xab, 0xcd], "ad"),
        (&[0x30, 0xab], "3b"),
        (&[0x30, 0x31, 0xab, 0xcd], "3d"),
        (&[0x30, 0xab, 0xcd, 0x31], "01"),
        (b"x", "xx"),
    ] {
        let mut data = ((name.len() + 1) as u16).to_be_bytes().to_vec();
        data.push(name.len() as u8);
        data.extend(name);
        let (ja4, _) = fingerprints(&hello(&[0x002f], &[(0x0010, data)]));
        assert_eq!(&ja4[8..10], shown, "ALPN {name:02x?}");
    }
    // Unknown versions are 00; a supported_versions of GREASE alone too.
    let versions = |list: &[u16]| (0x002b, u16_list(1, list));
    assert_eq!(
        &fingerprints(&hello(&[0x002f], &[versions(&[0x7f1c])])).0[..3],
        "t00"
    );
    assert_eq!(
        &fingerprints(&hello(&[0x002f], &[versions(&[0x0a0a])])).0[..3],
        "t00"
    );
    assert_eq!(
        &fingerprints(&hello(&[0x002f], &[versions(&[0x0301, 0x0302])])).0[..3],
        "t11"
    );
}

#[test]
fn counts_stop_at_99() {
    let ciphers: Vec<u16> = (1..=300).collect();
    let (ja4, raw) = fingerprints(&hello(&ciphers, &[]));
    assert_eq!(&ja4[..10], "t12i990000");
    assert_eq!(
        raw.matches(',').count(),
        299,
        "the raw form lists every cipher"
    );
}

#[test]
fn every_capture_matches_the_independent_computation() {
    let expected =
        std::fs::read_to_string(common::corpus_dir().join("ja4.jsonl")).expect("ja4.jsonl");
    let expected: Vec<serde_json::Value> = expected
        .lines()
        .map(|line| serde_json::from_str(line).expect("a JSON line"))
        .collect();
    let mut scratch = Vec::new();
    let mut compared = 0;
    for entry in common::corpus() {
        let mut tls = &entry.bytes[..];
        if let Ok(ProxyParsed::Complete(header)) = parse_proxy_header(tls) {
            tls = &tls[header.len()..];
        }
        let want = expected.iter().find(|e| e["file"] == entry.file.as_str());
        match (parse_client_hello(tls, &mut scratch), want) {
            (Ok(Parsed::Complete(hello)), Some(want)) => {
                assert_eq!(
                    Ja4::of(&hello, Transport::Tcp).as_str(),
                    want["ja4"],
                    "{}",
                    entry.file
                );
                assert_eq!(
                    Ja4::raw(&hello, Transport::Tcp).to_string(),
                    want["ja4_r"],
                    "{}",
                    entry.file
                );
                compared += 1;
            }
            (Ok(Parsed::Complete(_)), None) => {
                panic!("{} parses but ja4.jsonl has no value", entry.file)
            }
            (other, Some(_)) => panic!(
                "ja4.jsonl has {} but it does not parse: {other:?}",
                entry.file
            ),
            (_, None) => {}
        }
    }
    assert_eq!(compared, expected.len());
    assert!(compared >= 30, "only {compared} captures compared");
}

#[test]
fn a_fingerprint_reads_back_and_a_malformed_one_says_where() {
    let ja4: Ja4 = SPEC_JA4.parse().expect("the spec's example");
    assert_eq!(ja4.as_str(), SPEC_JA4);
    assert_eq!(
        Ja4::parse("t13d1516h2_8daaf6152771"),
        Err(Ja4FormatError::Length(23))
    );
    for (text, at) in [
        ("x13d1516h2_8daaf6152771_e5627efa2ab1", 0),
        ("t14d1516h2_8daaf6152771_e5627efa2ab1", 1),
        ("t13x1516h2_8daaf6152771_e5627efa2ab1", 3),
        ("t13d15a6h2_8daaf6152771_e5627efa2ab1", 6),
        ("t13d1516h-_8daaf6152771_e5627efa2ab1", 9),
        ("t13d1516h2-8daaf6152771_e5627efa2ab1", 10),
        ("t13d1516h2_8DAAF6152771_e5627efa2ab1", 12),
        ("t13d1516h2_8daaf6152771_e5627efa2ab!", 35),
    ] {
        match Ja4::parse(text) {
            Err(Ja4FormatError::Character { at: got, .. }) => assert_eq!(got, at, "{text}"),
            other => panic!("{text}: {other:?}"),
        }
    }
    let message = Ja4::parse("t13d1516h2_8DAAF6152771_e5627efa2ab1")
        .map_err(|e| e.to_string())
        .unwrap_err();
    assert_eq!(
        message,
        "character 13 of a JA4 fingerprint must be a lower-case hex digit (the truncated SHA-256)"
    );
}

const GREASE: [u16; 16] = [
    0x0a0a, 0x1a1a, 0x2a2a, 0x3a3a, 0x4a4a, 0x5a5a, 0x6a6a, 0x7a7a, 0x8a8a, 0x9a9a, 0xaaaa, 0xbaba,
    0xcaca, 0xdada, 0xeaea, 0xfafa,
];

proptest! {
    #[test]
    fn grease_and_order_change_nothing(
        extension_order in Just(SPEC_EXTENSIONS.to_vec()).prop_shuffle(),
        cipher_order in Just(SPEC_CIPHERS.to_vec()).prop_shuffle(),
        grease in prop::sample::subsequence(GREASE.to_vec(), 2),
        cipher_grease_at in 0..=SPEC_CIPHERS.len(),
        extension_grease_at in 0..=SPEC_EXTENSIONS.len(),
        in_lists in any::<bool>(),
    ) {
        let mut ciphers = cipher_order;
        ciphers.insert(cipher_grease_at, grease[0]);
        let in_list = in_lists.then_some(grease[1]);
        let mut extensions: Vec<_> =
            extension_order.iter().map(|&t| spec_extension(t, in_list)).collect();
        extensions.insert(extension_grease_at, (grease[0], vec![0]));
        extensions.push((grease[1], Vec::new()));
        let (ja4, raw) = fingerprints(&hello(&ciphers, &extensions));
        prop_assert_eq!(ja4, SPEC_JA4);
        prop_assert_eq!(raw, SPEC_JA4_R);
    }

    #[test]
    fn a_long_cipher_list_sorts_the_same_on_the_heap(
        ciphers in prop::collection::btree_set(1u16..0x0a00, 100..400),
        seed in any::<u64>(),
    ) {
        let sorted: Vec<u16> = ciphers.into_iter().collect();
        let mut shuffled = sorted.clone();
        let mut state = seed | 1;
        for i in (1..shuffled.len()).rev() {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            shuffled.swap(i, (state % (i as u64 + 1)) as usize);
        }
        let (ja4, raw) = fingerprints(&hello(&shuffled, &[]));
        let listed: Vec<String> = sorted.iter().map(|c| format!("{c:04x}")).collect();
        prop_assert_eq!(&raw[11..raw.len() - 1], listed.join(","));
        prop_assert_eq!((ja4, raw), fingerprints(&hello(&sorted, &[])));
    }
}

proptest! {
    /// Fingerprints order as their text does (a `deny_ja4` list is
    /// searched by bisection), however they differ: in any of the 36
    /// places, including the three the integer comparison splits at.
    #[test]
    fn fingerprints_order_as_their_text(
        base in "[tq]1[0-3][di][0-9]{4}[a-z0-9]{2}_[0-9a-f]{12}_[0-9a-f]{12}",
        at in 0usize..36,
        digit in "[0-9a-f]",
    ) {
        let one = Ja4::parse(&base).expect("a fingerprint");
        let mut text = base.clone().into_bytes();
        if text[at] != b'_' && at > 9 {
            text[at] = digit.as_bytes()[0];
        }
        let text = String::from_utf8(text).expect("ascii");
        let two = Ja4::parse(&text).expect("a fingerprint");
        prop_assert_eq!(one.cmp(&two), base.cmp(&text));
        prop_assert_eq!(one == two, base == text);
    }
}

proptest! {
    /// The hint the parse gives (`SectionHint::of_hello`) is the `a`
    /// section's, past 99 extensions (the count stops at 99) and with an
    /// ALPN name whose ends are not letters or digits (hex instead).
    #[test]
    fn the_parses_hint_is_the_sections(
        low in prop::collection::btree_set(1u16..0x0100, 0..130),
        high in prop::collection::btree_set(0x0100u16..0xff00, 0..=8),
        alpn in prop::option::of(prop::collection::vec(any::<u8>(), 1..6)),
    ) {
        // ALPN, supported_versions and ECH are validated by the parser
        // (ALPN is added below, with a name); GREASE types are not counted.
        let mut extensions: Vec<(u16, Vec<u8>)> = low
            .into_iter()
            .chain(high)
            .filter(|&t| !matches!(t, 0x0010 | 0x002b | 0xfe0d) && t & 0x0f0f != 0x0a0a)
            .map(|t| (t, Vec::new()))
            .collect();
        if let Some(name) = alpn {
            let mut list = vec![name.len() as u8];
            list.extend(&name);
            let mut data = (list.len() as u16).to_be_bytes().to_vec();
            data.extend(list);
            extensions.push((0x0010, data));
        }
        let record = hello(&[0x1301, 0x1302], &extensions);
        let mut scratch = Vec::new();
        let Ok(Parsed::Complete(parsed)) = parse_client_hello(&record, &mut scratch) else {
            return Err(TestCaseError::fail("the hello parses"));
        };
        for transport in [Transport::Tcp, Transport::Quic] {
            let a = Ja4::of(&parsed, transport).section_a();
            prop_assert_eq!(
                SectionHint::of_hello(&parsed, transport),
                Some(SectionHint::of_section(&a))
            );
        }
    }
}
