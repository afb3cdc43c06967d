//! The committed ClientHello corpus (`testdata/clienthellos`), embedded at
//! compile time so the simulation reads nothing at run time.
//!
//! Owns: the list of files with the verdict class the manifest gives each
//! (checked by the directed scenarios, which assert the class), and their
//! decomposition into an optional PROXY header, the handshake message, and
//! the bytes after it, so a scenario can re-frame a real hello. Must never:
//! decide a verdict with the core; the classes are the manifest's.

use std::sync::OnceLock;

use preread_parser::proxy::{ProxyParsed, parse_proxy_header};

use crate::hello::split_flight;

/// What the manifest says a file is (without a PROXY-aware listener unless
/// the file itself starts with a PROXY header).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// Routes on its SNI (with the simulation's route pool).
    Routed,
    /// A well-formed hello without `host_name`.
    NoSni,
    /// No `host_name`, an ECH extension.
    EchOuterAbsent,
    /// Not a TLS handshake record.
    NotTls,
    /// A record-layer violation.
    MalformedRecord,
    /// A malformed ClientHello (or an unusable `host_name`).
    MalformedHandshake,
    /// A PROXY header that can never be valid.
    ProxyHeaderInvalid,
    /// A strict prefix of a hello.
    Incomplete,
}

macro_rules! corpus {
    ($(($name:literal, $class:ident)),* $(,)?) => {
        /// Every corpus file: name, bytes, manifest class.
        pub const FILES: &[(&str, &[u8], Class)] = &[
            $((
                $name,
                include_bytes!(concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata/clienthellos/", $name)),
                Class::$class,
            )),*
        ];
    };
}

corpus![
    ("chromium_a_1.bin", Routed),
    ("chromium_a_2.bin", Routed),
    ("chromium_ip_literal.bin", EchOuterAbsent),
    ("chromium_plain_http_bg.bin", NotTls),
    ("openssl_sni.bin", Routed),
    ("openssl_alpn.bin", Routed),
    ("openssl_tls12.bin", Routed),
    ("openssl_tls13.bin", Routed),
    ("openssl_noservername.bin", NoSni),
    ("openssl_ip_literal.bin", NoSni),
    ("openssl_sni_uppercase_trailing_dot.bin", Routed),
    ("openssl_psk_resumption.bin", Routed),
    ("openssl_psk_0rtt_full_flight.bin", Routed),
    ("curl_h2.bin", Routed),
    ("curl_http11.bin", Routed),
    ("curl_tls12.bin", Routed),
    ("curl_ip_literal_v4.bin", NoSni),
    ("curl_ip_literal_v6.bin", NoSni),
    ("curl_uppercase_url.bin", Routed),
    ("curl_trailing_dot_url.bin", Routed),
    ("curl_no_alpn.bin", Routed),
    ("python_ssl_alpn.bin", Routed),
    ("node_tls_alpn.bin", Routed),
    ("gen_b_sni_empty_list.bin", MalformedHandshake),
    ("gen_b_sni_empty_extension_data.bin", MalformedHandshake),
    ("gen_c_sni_nametype1_only.bin", NoSni),
    ("gen_d_ext_len_too_long.bin", MalformedHandshake),
    ("gen_d_ext_len_too_short.bin", MalformedHandshake),
    ("gen_e_sni_hostname_len_overrun.bin", MalformedHandshake),
    ("gen_e_sni_list_len_mismatch.bin", MalformedHandshake),
    ("gen_f_record_version_0300.bin", Routed),
    ("gen_f_record_version_0303.bin", Routed),
    ("gen_g_trailing_2k.bin", Routed),
    ("gen_i_ech_no_sni.bin", EchOuterAbsent),
    ("gen_j_ech_outer_public_name.bin", Routed),
    ("gen_k_sslv2_compat_hello.bin", NotTls),
    ("gen_l_http_get.bin", NotTls),
    ("gen_m_proxy_v2_tlv.bin", Routed),
    ("gen_m_proxy_v2_short_addr_len.bin", ProxyHeaderInvalid),
    ("gen_n_proxy_v1.bin", Routed),
    ("gen_n_proxy_v1_bad_protocol.bin", ProxyHeaderInvalid),
    ("gen_o_record_exactly_16384.bin", Routed),
    ("gen_o_record_overflow_16385.bin", MalformedRecord),
    ("gen_zero_length_handshake_record.bin", MalformedRecord),
    ("gen_handshake_type_2.bin", MalformedHandshake),
    ("gen_truncated_200_of_517.bin", Incomplete),
    ("gen_sni_embedded_nul.bin", MalformedHandshake),
    ("gen_o_second_record_overflow_16385.bin", MalformedRecord),
    ("gen_p_cipher_suites_len_2.bin", MalformedHandshake),
    ("gen_p_cipher_suites_len_12.bin", MalformedHandshake),
    ("gen_p_cipher_suites_len_14.bin", MalformedHandshake),
    ("gen_p_cipher_suites_len_2_no_ext.bin", MalformedHandshake),
    ("gen_p_cipher_suites_len_12_no_ext.bin", MalformedHandshake),
    ("gen_p_cipher_suites_len_14_no_ext.bin", MalformedHandshake),
    ("gen_q_compression_methods_len_0.bin", MalformedHandshake),
    (
        "gen_q_compression_methods_len_0_no_ext.bin",
        MalformedHandshake
    ),
    ("gen_r_session_id_len_5.bin", MalformedHandshake),
];

/// One corpus file, taken apart.
#[derive(Debug, Clone)]
pub struct Entry {
    /// The file name.
    pub name: &'static str,
    /// The manifest's class.
    pub class: Class,
    /// The whole file.
    pub raw: &'static [u8],
    /// Length of the file's own valid PROXY header (0 without one).
    pub own_prefix: usize,
    /// The handshake message when the framing after the PROXY header is
    /// clean, so the hello can be re-framed; `None` for raw-only files.
    pub message: Option<Vec<u8>>,
    /// Offset (after the own PROXY header) just past the hello's records.
    pub records_end: usize,
}

impl Entry {
    /// The bytes after the own PROXY header: records, then trailing bytes.
    pub fn tls(&self) -> &'static [u8] {
        &self.raw[self.own_prefix..]
    }

    /// The bytes after the hello's records (0-RTT data, junk).
    pub fn trailing(&self) -> &'static [u8] {
        &self.tls()[self.records_end..]
    }
}

/// The corpus, decomposed once.
pub fn entries() -> &'static [Entry] {
    static ENTRIES: OnceLock<Vec<Entry>> = OnceLock::new();
    ENTRIES.get_or_init(|| {
        FILES
            .iter()
            .map(|&(name, raw, class)| {
                let own_prefix = match raw.first() {
                    Some(b'P' | b'\r') => match parse_proxy_header(raw) {
                        Ok(ProxyParsed::Complete(header)) => header.len(),
                        _ => 0,
                    },
                    _ => 0,
                };
                let split = if class == Class::ProxyHeaderInvalid {
                    None
                } else {
                    split_flight(&raw[own_prefix..])
                };
                let (message, records_end) = match split {
                    Some((message, end)) => (Some(message), end),
                    None => (None, 0),
                };
                Entry {
                    name,
                    class,
                    raw,
                    own_prefix,
                    message,
                    records_end,
                }
            })
            .collect()
    })
}

/// The entries of one class.
pub fn of_class(class: Class) -> Vec<&'static Entry> {
    entries().iter().filter(|e| e.class == class).collect()
}

#[cfg(test)]
mod tests {
    use super::{Class, entries};

    #[test]
    fn the_corpus_is_taken_apart_as_the_manifest_says() {
        let all = entries();
        assert_eq!(all.len(), 57);
        for entry in all {
            match entry.class {
                Class::Routed
                | Class::NoSni
                | Class::EchOuterAbsent
                | Class::MalformedHandshake => {
                    // Every one of these has clean framing (gen_handshake_type_2
                    // included: its framing is fine, its type byte is not).
                    assert!(entry.message.is_some(), "{}", entry.name);
                }
                Class::NotTls | Class::MalformedRecord | Class::Incomplete => {
                    assert!(entry.message.is_none(), "{}", entry.name);
                }
                Class::ProxyHeaderInvalid => assert_eq!(entry.own_prefix, 0),
            }
        }
        let v1 = all
            .iter()
            .find(|e| e.name == "gen_n_proxy_v1.bin")
            .expect("v1");
        assert_eq!(v1.own_prefix, 47);
        let v2 = all
            .iter()
            .find(|e| e.name == "gen_m_proxy_v2_tlv.bin")
            .expect("v2");
        assert_eq!(v2.own_prefix, 63);
        let trailing = all
            .iter()
            .find(|e| e.name == "gen_g_trailing_2k.bin")
            .expect("g");
        assert_eq!(trailing.trailing().len(), 2048);
    }
}
