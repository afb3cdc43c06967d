//! The JA4 cases shared by the criterion bench (`benches/ja4.rs`) and its
//! burst-by-burst twin (`examples/ja4_ratio.rs`), so the two time the very
//! same configs and hellos. Per capture, on the 1,000-route corpus table:
//! no list (the baseline), a one-entry list of another `a` section, an
//! entry sharing the hello's `a` section (the fingerprint from the cache),
//! and the same with the first cipher changed on every connection (every
//! fingerprint missed). Must never: be used by the crate itself or its
//! tests.

#![allow(dead_code, unreachable_pub)]

use std::time::Instant;

use preread_core::{DenyJa4, Input, Output, PrereadConfig, SniPrereadCore};
use preread_parser::tls::{Ja4, Parsed, parse_client_hello};

use crate::tables::{CORPUS_ROUTES, corpus_dir, table};

/// The captures timed: a browser, curl, OpenSSL.
pub const FILES: [&str; 3] = ["chromium_a_1", "curl_h2", "openssl_tls13"];

/// Distinct values the cold case gives the changed cipher, in turn.
pub const COLD_VARIANTS: u16 = 4096;

/// The spec's worked example: an `a` section none of the captures has.
const OTHER_A: &str = "t13d1516h2_8daaf6152771_e5627efa2ab1";

/// Parse plus decision on a fresh core.
pub fn decide(config: &PrereadConfig, window: &[u8], now: Instant) -> (SniPrereadCore, Output) {
    let mut core = SniPrereadCore::new();
    let output = core.handle_input(config, Input::Bytes { buf: window, now });
    (core, output)
}

/// The configs and hellos of one capture's cases.
pub struct Cases {
    /// No `deny_ja4` list.
    pub plain: PrereadConfig,
    /// An entry of another `a` section.
    pub other_a: PrereadConfig,
    /// An entry sharing the hello's `a` section, other hashes.
    pub warm: PrereadConfig,
    /// The same for the hello with its first cipher changed.
    pub cold: PrereadConfig,
    /// The capture, one record.
    pub window: Vec<u8>,
    /// The capture whose first cipher [`Cases::vary`] rewrites.
    pub changed: Vec<u8>,
    /// Where that cipher lies.
    at: usize,
}

impl Cases {
    /// The cases of capture `file`; checks that each config routes it.
    pub fn of(file: &str, now: Instant) -> Self {
        let plain = PrereadConfig::new(table(CORPUS_ROUTES, 1_000));
        let spec = Ja4::parse(OTHER_A).expect("a fingerprint");
        let mut other_a = plain.clone();
        other_a.deny_ja4 = DenyJa4::new([spec]);
        let window = std::fs::read(corpus_dir().join(format!("{file}.bin"))).expect("capture");
        let (core, _) = decide(&plain, &window, now);
        let ja4 = core.ja4(&window).expect("a parsed hello");
        assert_ne!(ja4.section_a(), spec.section_a(), "{file}");
        let warm = same_a(&plain, ja4);
        let mut changed = window.clone();
        let at = first_cipher_at(&window);
        changed[at..at + 2].copy_from_slice(&0xe001u16.to_be_bytes());
        let (core, _) = decide(&plain, &changed, now);
        let cold = same_a(&plain, core.ja4(&changed).expect("a parsed hello"));
        for config in [&plain, &other_a, &warm, &cold] {
            let (_, output) = decide(config, &window, now);
            assert!(matches!(output, Output::Routed(_)), "{file}: {output:?}");
        }
        Self {
            plain,
            other_a,
            warm,
            cold,
            window,
            changed,
            at,
        }
    }

    /// Gives [`Cases::changed`] the next of [`COLD_VARIANTS`] first
    /// ciphers. 0xe000.. holds one GREASE value, 0xeaea: one turn in
    /// 4,096 has another `a` section and is not fingerprinted.
    pub fn vary(&mut self, turn: &mut u16) {
        *turn = (*turn + 1) % COLD_VARIANTS;
        self.changed[self.at..self.at + 2].copy_from_slice(&(0xe000 + *turn).to_be_bytes());
    }
}

/// Where the hello's first cipher lies in `window` (one record).
fn first_cipher_at(window: &[u8]) -> usize {
    let mut scratch = Vec::new();
    match parse_client_hello(window, &mut scratch) {
        Ok(Parsed::Complete(hello)) => hello.cipher_suites.as_ptr().addr() - window.as_ptr().addr(),
        other => panic!("not a whole hello: {other:?}"),
    }
}

/// A one-entry `deny_ja4` list that shares `ja4`'s `a` section only.
fn same_a(plain: &PrereadConfig, ja4: Ja4) -> PrereadConfig {
    let a = &ja4.as_str()[..10];
    let entry = Ja4::parse(&format!("{a}_000000000000_000000000000")).expect("a fingerprint");
    assert_ne!(entry, ja4);
    let mut config = plain.clone();
    config.deny_ja4 = DenyJa4::new([entry]);
    config
}
