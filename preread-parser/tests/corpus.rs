//! Every captured and generated ClientHello against its manifest, whole and
//! as every prefix, plus multi-record and adversarial variants built here.

mod common;

use common::{Entry, corpus, record, reframe, split_single_record};
use preread_parser::tls::{
    ClientHello, EchKind, HandshakeFault, Needed, Parsed, RecordFault, TlsError, parse_client_hello,
};

/// The manifest's vocabulary for what a parse means to a router.
fn verdict(result: &Result<Parsed<'_>, TlsError>) -> &'static str {
    match result {
        Ok(Parsed::Complete(hello)) if hello.server_name.is_some() => "routed",
        Ok(Parsed::Complete(hello)) if hello.ech.is_some() => "EchOuterAbsent",
        Ok(Parsed::Complete(_)) => "NoSni",
        Ok(Parsed::Incomplete(_)) => "Incomplete",
        Err(TlsError::NotTls) => "NotTls",
        Err(TlsError::MalformedRecord(_)) => "MalformedRecord",
        Err(TlsError::MalformedHandshake(_)) => "MalformedHandshake",
        Err(_) => "unknown error",
    }
}

fn manifest_verdict(expected: &str) -> &str {
    // InvalidSni is a well-formed structure with a name that is not a DNS
    // name; our taxonomy calls that a malformed handshake.
    if expected == "InvalidSni" {
        "MalformedHandshake"
    } else {
        expected
    }
}

fn alpn_of(hello: &ClientHello<'_>) -> Option<Vec<Vec<u8>>> {
    hello
        .alpn
        .map(|alpn| alpn.iter().map(<[u8]>::to_vec).collect())
}

fn check_fields(entry: &Entry, hello: &ClientHello<'_>) {
    let file = &entry.file;
    let sni = entry.json["sni"].as_str().map(str::as_bytes);
    assert_eq!(hello.server_name, sni, "{file}: sni");
    assert_eq!(alpn_of(hello), entry.alpn(), "{file}: alpn");
    assert_eq!(
        hello.alpn.map(|alpn| alpn.list_bytes().to_vec()),
        entry.alpn_wire(),
        "{file}: ALPN list as on the wire"
    );
    if let Some(versions) = entry.supported_versions() {
        let parsed = hello
            .supported_versions
            .map(|offer| offer.iter().collect::<Vec<u16>>());
        assert_eq!(parsed, versions, "{file}: supported_versions");
    }
    let ech = entry.json["ech_present"].as_bool().unwrap_or(false);
    assert_eq!(hello.ech.is_some(), ech, "{file}: ech_present");
    assert_eq!(
        Some(hello.records),
        entry.usize_field("records"),
        "{file}: records"
    );
    if let Some(len) = entry.usize_field("clienthello_len") {
        assert_eq!(hello.end, len, "{file}: end of the ClientHello");
    }
    if let Some(legacy) = entry.str_field("legacy_version") {
        assert_eq!(
            format!("0x{:04x}", hello.legacy_version),
            legacy,
            "{file}: legacy_version"
        );
    }
}

#[test]
fn every_corpus_file_matches_its_manifest() {
    let mut scratch = Vec::new();
    let mut checked = 0;
    for entry in corpus() {
        let file = &entry.file;
        if let Some(without) = entry.str_field("expected_if_proxy_protocol_disabled") {
            let result = parse_client_hello(&entry.bytes, &mut scratch);
            assert_eq!(verdict(&result), without, "{file} without PROXY support");
            if entry.expected() == "ProxyHeaderInvalid" {
                continue;
            }
        }
        let tls = &entry.bytes[entry.prefix_len()..];
        let result = parse_client_hello(tls, &mut scratch);
        assert_eq!(
            verdict(&result),
            manifest_verdict(entry.expected()),
            "{file}: {result:?}"
        );
        if let Ok(Parsed::Complete(hello)) = result {
            check_fields(&entry, &hello);
        }
        checked += 1;
    }
    assert!(checked >= 44, "checked {checked} files");
}

/// Every prefix of `window` before the verdict is `Incomplete` with a lower
/// bound that holds; from the verdict on, the result equals the whole
/// window's (errors may come early, a ClientHello never does).
fn assert_prefix_invariance(name: &str, window: &[u8]) {
    let mut scratch = Vec::new();
    let mut other = Vec::new();
    let whole = parse_client_hello(window, &mut other);
    let end = match whole {
        Ok(Parsed::Complete(hello)) => hello.end,
        _ => window.len(),
    };
    let mut needed_until = 0;
    for cut in 0..=window.len() {
        let prefix = parse_client_hello(&window[..cut], &mut scratch);
        match prefix {
            Ok(Parsed::Incomplete(needed)) => {
                assert!(
                    cut < end || whole == prefix,
                    "{name}: incomplete at {cut} past end {end}"
                );
                if let Needed::AtLeast(n) = needed {
                    needed_until = needed_until.max(cut + n.get());
                }
            }
            _ => {
                // `Needed` bounds completion; an error may come sooner.
                if matches!(whole, Ok(Parsed::Complete(_))) {
                    assert!(
                        cut >= needed_until,
                        "{name}: complete at {cut} though {needed_until} were needed"
                    );
                    assert!(
                        cut >= end,
                        "{name}: early verdict {prefix:?} at {cut} of {end}"
                    );
                }
                assert_eq!(prefix, whole, "{name}: prefix of {cut} bytes");
            }
        }
    }
}

#[test]
fn every_prefix_of_every_corpus_file_is_incomplete_or_the_final_verdict() {
    for entry in corpus() {
        assert_prefix_invariance(&entry.file, &entry.bytes[entry.prefix_len()..]);
        assert_prefix_invariance(&entry.file, &entry.bytes);
    }
}

fn real_hello(name: &str) -> Entry {
    corpus()
        .into_iter()
        .find(|e| e.file == name)
        .expect("corpus file")
}

const REAL_BASES: [&str; 6] = [
    "chromium_a_1.bin",
    "curl_h2.bin",
    "openssl_alpn.bin",
    "openssl_tls12.bin",
    "node_tls_alpn.bin",
    "python_ssl_alpn.bin",
];

fn assert_same_hello(name: &str, framed: &[u8], base: &Entry, records: usize) {
    let mut scratch = Vec::new();
    let result = parse_client_hello(framed, &mut scratch);
    let Ok(Parsed::Complete(hello)) = result else {
        panic!("{name}: {result:?}");
    };
    let sni = base.json["sni"].as_str().map(str::as_bytes);
    assert_eq!(hello.server_name, sni, "{name}");
    assert_eq!(alpn_of(&hello), base.alpn(), "{name}");
    assert_eq!(hello.records, records, "{name}");
    assert_eq!(hello.end, framed.len(), "{name}");
    assert_prefix_invariance(name, framed);
}

#[test]
fn multi_record_variants_of_real_hellos_parse_like_the_original() {
    for base_name in REAL_BASES {
        let base = real_hello(base_name);
        let (version, message) = split_single_record(&base.bytes);
        let half = message.len() / 2;
        let cases: Vec<(String, Vec<u8>, usize)> = vec![
            (
                "two records".into(),
                reframe(message, &[half], &[version]),
                2,
            ),
            (
                "three records, handshake header split".into(),
                reframe(message, &[2, half], &[version]),
                3,
            ),
            (
                "header split 1+3".into(),
                reframe(message, &[1, 4], &[version]),
                3,
            ),
            (
                "mixed record versions".into(),
                reframe(message, &[3, 40, half], &[[3, 1], [3, 3], [3, 0], [3, 4]]),
                4,
            ),
            (
                "1-byte records".into(),
                reframe(message, &(1..message.len()).collect::<Vec<_>>(), &[version]),
                message.len(),
            ),
        ];
        for (what, framed, records) in cases {
            let name = format!("{base_name}: {what}");
            if records > 600 {
                // The prefix walk is quadratic; one-shot parse is enough here.
                let mut scratch = Vec::new();
                let result = parse_client_hello(&framed, &mut scratch);
                let Ok(Parsed::Complete(hello)) = result else {
                    panic!("{name}: {result:?}")
                };
                assert_eq!(hello.records, records, "{name}");
                assert_eq!(hello.end, framed.len(), "{name}");
                assert_eq!(
                    hello.server_name,
                    base.json["sni"].as_str().map(str::as_bytes)
                );
            } else {
                assert_same_hello(&name, &framed, &base, records);
            }
        }
    }
}

#[test]
fn trailing_bytes_after_a_multi_record_hello_are_left_alone() {
    let base = real_hello("curl_h2.bin");
    let (version, message) = split_single_record(&base.bytes);
    let mut framed = reframe(message, &[100], &[version]);
    let end = framed.len();
    framed.extend(record(20, [3, 3], &[1]));
    framed.extend(record(23, [3, 3], b"early data"));
    let mut scratch = Vec::new();
    let Ok(Parsed::Complete(hello)) = parse_client_hello(&framed, &mut scratch) else {
        panic!("trailing records after the hello must not matter");
    };
    assert_eq!(hello.end, end);
}

#[test]
fn a_record_of_another_type_inside_the_hello_is_malformed_record() {
    for base_name in REAL_BASES {
        let base_bytes = real_hello(base_name).bytes;
        let (version, message) = split_single_record(&base_bytes);
        let half = message.len() / 2;
        for (content_type, name) in [
            (20u8, "ChangeCipherSpec"),
            (21, "alert"),
            (23, "application data"),
        ] {
            let mut framed = record(22, version, &message[..half]);
            framed.extend(record(content_type, [3, 3], &[1]));
            framed.extend(record(22, version, &message[half..]));
            let mut scratch = Vec::new();
            assert_eq!(
                parse_client_hello(&framed, &mut scratch),
                Err(TlsError::MalformedRecord(
                    RecordFault::UnexpectedContentType(content_type)
                )),
                "{base_name}: {name} interleaved"
            );
            assert_prefix_invariance(name, &framed);
        }
        let mut framed = record(22, version, &message[..half]);
        framed.extend(record(22, [2, 0], &message[half..]));
        let mut scratch = Vec::new();
        assert_eq!(
            parse_client_hello(&framed, &mut scratch),
            Err(TlsError::MalformedRecord(RecordFault::BadVersion(2))),
        );
    }
}

/// Offsets of the extensions-length field inside a handshake message.
fn extensions_len_offset(message: &[u8]) -> usize {
    let mut pos = 4 + 2 + 32;
    pos += 1 + message[pos] as usize;
    pos += 2 + u16::from_be_bytes([message[pos], message[pos + 1]]) as usize;
    pos += 1 + message[pos] as usize;
    pos
}

/// A copy of `message` with one extension appended and every length fixed.
fn with_extension(message: &[u8], ext_type: u16, data: &[u8]) -> Vec<u8> {
    let mut out = message.to_vec();
    out.extend_from_slice(&ext_type.to_be_bytes());
    out.extend_from_slice(&(data.len() as u16).to_be_bytes());
    out.extend_from_slice(data);
    let at = extensions_len_offset(&out);
    let ext_len = u16::from_be_bytes([out[at], out[at + 1]]) as usize + 4 + data.len();
    out[at..at + 2].copy_from_slice(&(ext_len as u16).to_be_bytes());
    let body = (out.len() - 4) as u32;
    out[1..4].copy_from_slice(&body.to_be_bytes()[1..]);
    out
}

#[test]
fn a_hello_over_16_kib_spans_two_records_and_routes() {
    let base = real_hello("curl_h2.bin");
    let (version, message) = split_single_record(&base.bytes);
    let big = with_extension(message, 0xfe99, &vec![0xab; 20_000]);
    assert!(big.len() > 16_384);
    let framed = reframe(&big, &[16_384], &[version]);
    assert_same_hello("hello over 16 KiB", &framed, &base, 2);
    // The same message in one record is a record overflow.
    let mut scratch = Vec::new();
    let one = record(22, version, &big[..16_385]);
    assert_eq!(
        parse_client_hello(&one, &mut scratch),
        Err(TlsError::MalformedRecord(RecordFault::Oversized(16_385)))
    );
}

fn single(message: &[u8]) -> Vec<u8> {
    record(22, [3, 1], message)
}

#[test]
fn adversarial_extensions_built_from_a_real_hello() {
    let base_bytes = real_hello("curl_h2.bin").bytes;
    let (_, message) = split_single_record(&base_bytes);
    let host = |name: &[u8]| {
        let mut data = ((name.len() + 3) as u16).to_be_bytes().to_vec();
        data.push(0);
        data.extend_from_slice(&(name.len() as u16).to_be_bytes());
        data.extend_from_slice(name);
        data
    };
    let cases: Vec<(&str, Vec<u8>, HandshakeFault)> = vec![
        (
            "second ALPN extension",
            with_extension(message, 0x0010, &[0, 3, 2, b'h', b'2']),
            HandshakeFault::DuplicateExtension(0x0010),
        ),
        (
            "second server_name extension",
            with_extension(message, 0x0000, &host(b"b.example.com")),
            HandshakeFault::DuplicateExtension(0x0000),
        ),
        (
            "GREASE type twice",
            with_extension(&with_extension(message, 0x3a3a, &[]), 0x3a3a, &[0]),
            HandshakeFault::DuplicateExtension(0x3a3a),
        ),
        (
            "supported_versions twice",
            with_extension(message, 0x002b, &[2, 3, 4]),
            HandshakeFault::DuplicateExtension(0x002b),
        ),
        (
            "ECH with no type byte",
            with_extension(message, 0xfe0d, &[]),
            HandshakeFault::EmptyEch,
        ),
        (
            "ECH of unknown type",
            with_extension(message, 0xfe0d, &[7]),
            HandshakeFault::UnknownEchType(7),
        ),
    ];
    for (name, variant, fault) in cases {
        let mut scratch = Vec::new();
        assert_eq!(
            parse_client_hello(&single(&variant), &mut scratch),
            Err(TlsError::MalformedHandshake(fault)),
            "{name}"
        );
    }
}

/// Replaces the extensions of a real hello with exactly `extensions`.
fn with_only_extensions(message: &[u8], extensions: &[(u16, Vec<u8>)]) -> Vec<u8> {
    let at = extensions_len_offset(message);
    let mut out = message[..at].to_vec();
    out.extend_from_slice(&[0, 0]);
    for (ext_type, data) in extensions {
        out = with_extension(&out, *ext_type, data);
    }
    out
}

#[test]
fn server_name_and_alpn_rules() {
    let base_bytes = real_hello("curl_h2.bin").bytes;
    let (_, message) = split_single_record(&base_bytes);
    let entry = |name_type: u8, name: &[u8]| {
        let mut e = vec![name_type];
        e.extend_from_slice(&(name.len() as u16).to_be_bytes());
        e.extend_from_slice(name);
        e
    };
    let list = |entries: &[Vec<u8>]| {
        let body: Vec<u8> = entries.concat();
        let mut data = (body.len() as u16).to_be_bytes().to_vec();
        data.extend(body);
        data
    };
    let long = vec![b'a'; 256];
    let max = vec![b'a'; 255];
    // (what, extension data, the host_name or the fault)
    type Case<'a> = (&'a str, Vec<u8>, Result<Option<&'a [u8]>, HandshakeFault>);
    let cases: Vec<Case<'_>> = vec![
        (
            "plain",
            list(&[entry(0, b"x.example.com")]),
            Ok(Some(b"x.example.com")),
        ),
        ("255 bytes", list(&[entry(0, &max)]), Ok(Some(&max))),
        (
            "256 bytes",
            list(&[entry(0, &long)]),
            Err(HandshakeFault::BadHostName),
        ),
        (
            "empty name",
            list(&[entry(0, b"")]),
            Err(HandshakeFault::EmptyHostName),
        ),
        (
            "lone dot",
            list(&[entry(0, b".")]),
            Err(HandshakeFault::BadHostName),
        ),
        ("trailing dot", list(&[entry(0, b"a.")]), Ok(Some(b"a."))),
        (
            "space inside",
            list(&[entry(0, b"a b.com")]),
            Err(HandshakeFault::BadHostName),
        ),
        (
            "high bit",
            list(&[entry(0, b"\xc3\xa9.com")]),
            Err(HandshakeFault::BadHostName),
        ),
        (
            "two host names",
            list(&[entry(0, b"a.com"), entry(0, b"b.com")]),
            Err(HandshakeFault::DuplicateHostName),
        ),
        (
            "other type then host",
            list(&[entry(1, b"zzz"), entry(0, b"b.com")]),
            Ok(Some(b"b.com")),
        ),
        ("other type only", list(&[entry(1, b"zzz")]), Ok(None)),
        (
            "empty list",
            list(&[]),
            Err(HandshakeFault::BadServerNameList),
        ),
        (
            "no list at all",
            vec![],
            Err(HandshakeFault::BadServerNameList),
        ),
        (
            "entry cut short",
            vec![0, 4, 0, 0, 9, b'a'],
            Err(HandshakeFault::BadServerNameList),
        ),
    ];
    for (name, data, want) in cases {
        let variant = with_only_extensions(message, &[(0x0000, data)]);
        let mut scratch = Vec::new();
        let window = single(&variant);
        let got = match parse_client_hello(&window, &mut scratch) {
            Ok(Parsed::Complete(hello)) => Ok(hello.server_name),
            Err(TlsError::MalformedHandshake(fault)) => Err(fault),
            other => panic!("{name}: {other:?}"),
        };
        assert_eq!(got, want, "server_name {name}");
    }

    let alpn_cases: Vec<(&str, Vec<u8>, bool)> = vec![
        ("two names", vec![0, 6, 2, b'h', b'2', 2, b'h', b'3'], true),
        ("empty list", vec![0, 0], false),
        ("empty name", vec![0, 3, 0, 1, b'a'], false),
        (
            "list longer than extension",
            vec![0, 9, 2, b'h', b'2'],
            false,
        ),
        ("name overruns list", vec![0, 3, 5, b'h', b'2'], false),
    ];
    for (name, data, ok) in alpn_cases {
        let variant = with_only_extensions(message, &[(0x0010, data)]);
        let mut scratch = Vec::new();
        let window = single(&variant);
        let got = parse_client_hello(&window, &mut scratch);
        if ok {
            assert!(
                matches!(got, Ok(Parsed::Complete(_))),
                "alpn {name}: {got:?}"
            );
        } else {
            assert_eq!(
                got,
                Err(TlsError::MalformedHandshake(HandshakeFault::BadAlpn)),
                "alpn {name}"
            );
        }
    }
}

#[test]
fn fixed_field_rules() {
    let base_bytes = real_hello("openssl_tls12.bin").bytes;
    let (_, message) = split_single_record(&base_bytes);
    let sid_at = 4 + 2 + 32;
    let mut long_sid = message.to_vec();
    long_sid[sid_at] = 33;
    let mut scratch = Vec::new();
    let long_sid = single(&long_sid);
    let got = parse_client_hello(&long_sid, &mut scratch);
    assert!(
        matches!(got, Err(TlsError::MalformedHandshake(_))),
        "{got:?}"
    );

    // No extensions block at all is legal (TLS 1.2 and older): no SNI.
    let at = extensions_len_offset(message);
    let mut bare = message[..at].to_vec();
    let body = (bare.len() - 4) as u32;
    bare[1..4].copy_from_slice(&body.to_be_bytes()[1..]);
    let bare = single(&bare);
    let got = parse_client_hello(&bare, &mut scratch);
    assert!(
        matches!(
            got,
            Ok(Parsed::Complete(ClientHello {
                server_name: None,
                alpn: None,
                ..
            }))
        ),
        "{got:?}"
    );

    // Extra handshake bytes after the hello inside its record.
    let mut extra = message.to_vec();
    extra.extend_from_slice(&[1, 2, 3]);
    assert_eq!(
        parse_client_hello(&single(&extra), &mut scratch),
        Err(TlsError::MalformedHandshake(
            HandshakeFault::TrailingHandshakeData
        ))
    );

    // A zero-length ClientHello body.
    assert!(matches!(
        parse_client_hello(&single(&[1, 0, 0, 0]), &mut scratch),
        Err(TlsError::MalformedHandshake(HandshakeFault::Truncated))
    ));
}

/// A copy of `message` with its cipher suites replaced by `suites`.
fn with_cipher_suites(message: &[u8], suites: &[u8]) -> Vec<u8> {
    let mut at = 4 + 2 + 32;
    at += 1 + message[at] as usize;
    let old = u16::from_be_bytes([message[at], message[at + 1]]) as usize;
    let mut out = message[..at].to_vec();
    out.extend_from_slice(&(suites.len() as u16).to_be_bytes());
    out.extend_from_slice(suites);
    out.extend_from_slice(&message[at + 2 + old..]);
    let body = (out.len() - 4) as u32;
    out[1..4].copy_from_slice(&body.to_be_bytes()[1..]);
    out
}

#[test]
fn cipher_suites_must_be_a_non_empty_list_of_pairs() {
    let base = real_hello("curl_h2.bin");
    let (_, message) = split_single_record(&base.bytes);
    let sni = base.json["sni"].as_str().map(str::as_bytes);
    assert!(sni.is_some());
    let cases: [(&str, &[u8], bool); 5] = [
        ("one suite", &[0x13, 0x01], true),
        ("two suites", &[0x13, 0x01, 0x13, 0x02], true),
        ("empty", &[], false),
        ("one byte", &[0x13], false),
        ("three bytes", &[0x13, 0x01, 0x13], false),
    ];
    for (name, suites, ok) in cases {
        let window = single(&with_cipher_suites(message, suites));
        let mut scratch = Vec::new();
        let got = parse_client_hello(&window, &mut scratch);
        if ok {
            let Ok(Parsed::Complete(hello)) = got else {
                panic!("cipher suites {name}: {got:?}");
            };
            assert_eq!(hello.server_name, sni, "cipher suites {name}");
            assert_eq!(alpn_of(&hello), base.alpn(), "cipher suites {name}");
        } else {
            assert_eq!(
                got,
                Err(TlsError::MalformedHandshake(
                    HandshakeFault::BadCipherSuites
                )),
                "cipher suites {name}"
            );
        }
    }
}

#[test]
fn supported_versions_rules() {
    let base_bytes = real_hello("curl_h2.bin").bytes;
    let (_, message) = split_single_record(&base_bytes);
    // (what, extension data, the versions offered or None for BadSupportedVersions)
    type Case<'a> = (&'a str, Vec<u8>, Option<Vec<u16>>);
    let cases: Vec<Case<'_>> = vec![
        ("one version", vec![2, 3, 4], Some(vec![0x0304])),
        (
            "GREASE first",
            vec![6, 0x7a, 0x7a, 3, 4, 3, 3],
            Some(vec![0x7a7a, 0x0304, 0x0303]),
        ),
        ("empty list", vec![0], None),
        ("odd length", vec![3, 3, 4, 3], None),
        ("one byte", vec![1, 3], None),
        ("no list at all", vec![], None),
        ("list longer than extension", vec![4, 3, 4], None),
        ("list shorter than extension", vec![2, 3, 4, 3, 3], None),
    ];
    for (name, data, want) in cases {
        let variant = with_only_extensions(message, &[(0x002b, data)]);
        let mut scratch = Vec::new();
        let window = single(&variant);
        let got = match parse_client_hello(&window, &mut scratch) {
            Ok(Parsed::Complete(hello)) => {
                let offer = hello.supported_versions;
                Ok(offer.map(|offer| offer.iter().collect::<Vec<u16>>()))
            }
            Err(TlsError::MalformedHandshake(fault)) => Err(fault),
            other => panic!("{name}: {other:?}"),
        };
        let want = want.map(Some).ok_or(HandshakeFault::BadSupportedVersions);
        assert_eq!(got, want, "supported_versions {name}");
    }
}

#[test]
fn ech_type_byte_is_outer_or_inner() {
    let base = real_hello("curl_h2.bin");
    let (_, message) = split_single_record(&base.bytes);
    let sni = base.json["sni"].as_str().map(str::as_bytes);
    assert!(sni.is_some() && !base.json["ech_present"].as_bool().unwrap_or(true));
    for (data, kind, name) in [
        (&[0u8, 0, 1, 0, 1][..], EchKind::Outer, "outer"),
        (&[0][..], EchKind::Outer, "outer"),
        (&[1][..], EchKind::Inner, "inner"),
    ] {
        let variant = with_extension(message, 0xfe0d, data);
        let mut scratch = Vec::new();
        let window = single(&variant);
        let got = parse_client_hello(&window, &mut scratch);
        let Ok(Parsed::Complete(hello)) = got else {
            panic!("ECH {data:?}: {got:?}");
        };
        assert_eq!(hello.ech, Some(kind), "ECH {data:?}");
        assert_eq!(kind.as_str(), name);
        assert_eq!(hello.server_name, sni, "ECH {data:?}");
    }
}

/// When the window stops inside a record header after the first record, the
/// rest of that header and the rest of the handshake message are missing.
#[test]
fn needed_inside_a_later_record_header_counts_the_rest_of_the_message() {
    for base_name in REAL_BASES {
        let base = real_hello(base_name);
        let (version, message) = split_single_record(&base.bytes);
        for first in [4, 40, message.len() / 2, message.len() - 1] {
            let framed = reframe(message, &[first], &[version]);
            let second = 5 + first;
            for seen in 0..5 {
                let mut scratch = Vec::new();
                let got = parse_client_hello(&framed[..second + seen], &mut scratch);
                let missing = (5 - seen) + (message.len() - first);
                assert_eq!(
                    got,
                    Ok(Parsed::Incomplete(Needed::AtLeast(
                        missing.try_into().expect("non-zero")
                    ))),
                    "{base_name}: first record of {first}, {seen} header bytes"
                );
            }
        }
    }
}

/// The handshake length is 24 bits: a ClientHello body over 64 KiB (cipher
/// suites and extensions each stop at 64 KiB, their sum does not) spans five
/// records, and is waited for in full rather than cut at 16 bits.
#[test]
fn a_hello_over_64_kib_is_framed_by_its_24_bit_length() {
    let base = real_hello("curl_h2.bin");
    let (version, message) = split_single_record(&base.bytes);
    let at = extensions_len_offset(message);
    let extensions = u16::from_be_bytes([message[at], message[at + 1]]) as usize;
    let pad = usize::from(u16::MAX) - extensions - 4;
    let big = with_extension(message, 0xfe99, &vec![0xab; pad]);
    assert!(big.len() - 4 >= 1 << 16, "body of {} bytes", big.len() - 4);
    let cuts: Vec<usize> = (1..)
        .map(|i| i * 16_384)
        .take_while(|&cut| cut < big.len())
        .collect();
    let framed = reframe(&big, &cuts, &[version]);
    let mut scratch = Vec::new();
    let first_record = &framed[..5 + 16_384];
    let missing = 5 + big.len() - 16_384;
    assert_eq!(
        parse_client_hello(first_record, &mut scratch),
        Ok(Parsed::Incomplete(Needed::AtLeast(
            missing.try_into().expect("non-zero")
        )))
    );
    assert_same_hello("hello over 64 KiB", &framed, &base, cuts.len() + 1);
}

#[test]
fn not_tls_is_decided_on_the_first_or_second_byte() {
    let mut scratch = Vec::new();
    for first in 0..=255u8 {
        let window = [first];
        let got = parse_client_hello(&window, &mut scratch);
        if first == 22 {
            assert!(matches!(got, Ok(Parsed::Incomplete(_))));
        } else {
            assert_eq!(got, Err(TlsError::NotTls), "first byte {first}");
        }
    }
    for second in 0..=255u8 {
        let window = [22, second];
        let got = parse_client_hello(&window, &mut scratch);
        assert_eq!(second == 3, got.is_ok(), "second byte {second}");
    }
}

mod mutations {
    use std::sync::OnceLock;

    use super::common::{Entry, corpus};
    use preread_parser::tls::{Parsed, parse_client_hello};
    use proptest::prelude::*;

    fn files() -> &'static [Entry] {
        static FILES: OnceLock<Vec<Entry>> = OnceLock::new();
        FILES.get_or_init(corpus)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// Corrupting real hellos byte by byte never panics, and a complete
        /// parse always describes bytes inside the window with a valid name.
        #[test]
        fn mutated_hellos_never_panic_and_stay_consistent(
            pick in any::<prop::sample::Index>(),
            edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
            cut in any::<prop::sample::Index>(),
        ) {
            let files = files();
            let entry = &files[pick.index(files.len())];
            let mut bytes = entry.bytes.clone();
            for (at, value) in edits {
                let i = at.index(bytes.len());
                bytes[i] = value;
            }
            let len = cut.index(bytes.len() + 1);
            let window = &bytes[..len];
            let mut scratch = Vec::new();
            if let Ok(Parsed::Complete(hello)) = parse_client_hello(window, &mut scratch) {
                prop_assert!(hello.end <= window.len());
                prop_assert!(hello.records >= 1);
                prop_assert!(hello.handshake_len >= 4);
                if let Some(name) = hello.server_name {
                    prop_assert!(!name.is_empty() && name.len() <= 255);
                    prop_assert!(name.iter().all(u8::is_ascii_graphic));
                }
                if let Some(alpn) = hello.alpn {
                    prop_assert!(alpn.iter().all(|p| !p.is_empty()));
                }
            }
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..3000), first in 20u8..24) {
            let mut window = bytes;
            if let Some(b) = window.first_mut() { *b = first; }
            if window.len() > 1 { window[1] = 3; }
            let mut scratch = Vec::new();
            let _ = parse_client_hello(&window, &mut scratch);
        }
    }
}
