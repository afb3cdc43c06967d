//! The alert of every malformed corpus file, and the order of faults: a
//! length that does not fit anywhere in the ClientHello is `decode_error`,
//! even after a field that decoded with a forbidden value.

mod common;

use common::{corpus, record, split_single_record};
use preread_parser::tls::{AlertDescription, HandshakeFault, TlsError, parse_client_hello};

#[test]
fn every_malformed_corpus_file_gets_the_alert_of_its_manifest() {
    let mut scratch = Vec::new();
    let mut checked = Vec::new();
    for entry in corpus() {
        let malformed = matches!(
            entry.expected(),
            "MalformedRecord" | "MalformedHandshake" | "InvalidSni"
        );
        let want = entry.str_field("alert");
        assert_eq!(
            malformed,
            want.is_some(),
            "{}: an `alert` exactly on malformed files",
            entry.file
        );
        let Some(want) = want else { continue };
        let tls = &entry.bytes[entry.prefix_len()..];
        let got = parse_client_hello(tls, &mut scratch);
        let alert = got
            .err()
            .and_then(TlsError::alert)
            .map(AlertDescription::as_str);
        assert_eq!(alert, Some(want), "{}: {got:?}", entry.file);
        checked.push(entry.file);
    }
    for file in [
        "gen_o_record_overflow_16385.bin",
        "gen_o_second_record_overflow_16385.bin",
        "gen_p_cipher_suites_len_2.bin",
        "gen_p_cipher_suites_len_12.bin",
        "gen_p_cipher_suites_len_14.bin",
        "gen_p_cipher_suites_len_2_no_ext.bin",
        "gen_p_cipher_suites_len_12_no_ext.bin",
        "gen_p_cipher_suites_len_14_no_ext.bin",
        "gen_q_compression_methods_len_0.bin",
        "gen_q_compression_methods_len_0_no_ext.bin",
        "gen_r_session_id_len_5.bin",
    ] {
        assert!(
            checked.iter().any(|f| f == file),
            "{file} not in the corpus"
        );
    }
}

/// The curl_h2 capture's handshake message with its extensions block
/// replaced by `extensions` (each a type and its data, the last one's
/// length declared `overrun` bytes longer than its data).
fn hello_with(extensions: &[(u16, &[u8])], overrun: u16) -> Vec<u8> {
    let capture = corpus()
        .into_iter()
        .find(|e| e.file == "curl_h2.bin")
        .expect("curl_h2.bin in the corpus");
    let (version, message) = split_single_record(&capture.bytes);
    let mut at = 4 + 2 + 32;
    at += 1 + usize::from(message[at]);
    at += 2 + usize::from(u16::from_be_bytes([message[at], message[at + 1]]));
    at += 1 + usize::from(message[at]);
    let mut block = Vec::new();
    for (i, (ext_type, data)) in extensions.iter().enumerate() {
        let lie = if i + 1 == extensions.len() {
            overrun
        } else {
            0
        };
        block.extend_from_slice(&ext_type.to_be_bytes());
        block.extend_from_slice(&(data.len() as u16 + lie).to_be_bytes());
        block.extend_from_slice(data);
    }
    let mut out = message[..at].to_vec();
    out.extend_from_slice(&(block.len() as u16).to_be_bytes());
    out.extend(block);
    let body = (out.len() - 4) as u32;
    out[1..4].copy_from_slice(&body.to_be_bytes()[1..]);
    record(22, version, &out)
}

/// A `server_name` extension's data holding `entries` (name type, name),
/// the last entry's length declared `overrun` bytes longer than its name.
fn server_name(entries: &[(u8, &[u8])], overrun: u16) -> Vec<u8> {
    let mut list = Vec::new();
    for (i, (name_type, name)) in entries.iter().enumerate() {
        let lie = if i + 1 == entries.len() { overrun } else { 0 };
        list.push(*name_type);
        list.extend_from_slice(&(name.len() as u16 + lie).to_be_bytes());
        list.extend_from_slice(name);
    }
    let mut data = (list.len() as u16).to_be_bytes().to_vec();
    data.extend(list);
    data
}

fn fault_of(window: &[u8]) -> Option<HandshakeFault> {
    let mut scratch = Vec::new();
    match parse_client_hello(window, &mut scratch) {
        Err(TlsError::MalformedHandshake(fault)) => Some(fault),
        _ => None,
    }
}

/// RFC 8446 §6: decode_error is for "errors where the message does not
/// conform to the formal protocol syntax", illegal_parameter for "errors
/// which conform to the formal protocol syntax but are otherwise
/// incorrect": a message that does not decode is the first answer,
/// wherever the lie is and whatever forbidden value came before it.
#[test]
fn a_length_that_does_not_fit_wins_over_a_forbidden_value_before_it() {
    let good_name = server_name(&[(0, b"a.example.com")], 0);
    let nul_name = server_name(&[(0, b"a\0.example.com")], 0);
    let alpn: &[u8] = &[0, 3, 2, b'h', b'2'];
    let bad_alpn: &[u8] = &[0, 4, 2, b'h', b'2'];
    let versions: &[u8] = &[2, 3, 4];
    // (what, window, fault with the lie, fault without it)
    let cases: [(&str, Vec<u8>, HandshakeFault, HandshakeFault); 5] = [
        (
            "a duplicate extension, then one that overruns the block",
            hello_with(&[(0x10, alpn), (0x10, alpn), (0x2b, versions)], 1),
            HandshakeFault::Truncated,
            HandshakeFault::DuplicateExtension(0x10),
        ),
        (
            "a bad host_name, then a bad ALPN list",
            hello_with(&[(0, &nul_name), (0x10, bad_alpn)], 0),
            HandshakeFault::BadAlpn,
            HandshakeFault::BadHostName,
        ),
        (
            "an unknown ECH type, then an extension that overruns the block",
            hello_with(&[(0, &good_name), (0xfe0d, &[7]), (0x2b, versions)], 2),
            HandshakeFault::Truncated,
            HandshakeFault::UnknownEchType(7),
        ),
        (
            "a bad host_name, then an entry that overruns the list",
            hello_with(&[(0, &server_name(&[(0, b"a b"), (1, b"other")], 1))], 0),
            HandshakeFault::BadServerNameList,
            HandshakeFault::BadHostName,
        ),
        (
            "two host_names, then an empty one",
            hello_with(
                &[(
                    0,
                    &server_name(&[(0, b"a.com"), (0, b"b.com"), (0, b"")], 0),
                )],
                0,
            ),
            HandshakeFault::EmptyHostName,
            HandshakeFault::DuplicateHostName,
        ),
    ];
    for (what, window, with_lie, alone) in cases {
        assert_eq!(fault_of(&window), Some(with_lie), "{what}");
        assert_eq!(with_lie.alert(), AlertDescription::DecodeError, "{what}");
        assert_eq!(alone.alert(), AlertDescription::IllegalParameter, "{what}");
    }
    // Without the lie, the forbidden value is the answer.
    let alone = [
        (
            hello_with(&[(0x10, alpn), (0x10, alpn), (0x2b, versions)], 0),
            HandshakeFault::DuplicateExtension(0x10),
        ),
        (
            hello_with(&[(0, &nul_name), (0x10, alpn)], 0),
            HandshakeFault::BadHostName,
        ),
        (
            hello_with(&[(0, &good_name), (0xfe0d, &[7]), (0x2b, versions)], 0),
            HandshakeFault::UnknownEchType(7),
        ),
        (
            hello_with(&[(0, &server_name(&[(0, b"a b"), (1, b"other")], 0))], 0),
            HandshakeFault::BadHostName,
        ),
        (
            hello_with(&[(0, &server_name(&[(0, b"a.com"), (0, b"b.com")], 0))], 0),
            HandshakeFault::DuplicateHostName,
        ),
    ];
    for (window, fault) in alone {
        assert_eq!(fault_of(&window), Some(fault));
    }
}
