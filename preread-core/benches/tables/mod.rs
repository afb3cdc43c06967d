//! Route tables, fillers and ClientHello rewriting shared by the decision
//! bench (`benches/decision.rs`) and its callgrind twin
//! (`examples/decide_once.rs`), so the two measure the very same tables;
//! the framing bench (`benches/framing.rs`) takes its table from here too.
//! Must never: be used by the crate itself or its tests.

#![allow(dead_code, unreachable_pub)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use preread_core::pattern::validate_sni_pattern;
use preread_core::routes::{AlpnSet, RouteTable};

/// The fixed rows of every table, from the one set of route fixtures.
#[path = "../../../testdata/route_pool.rs"]
mod route_pool;

/// The frontends the shapes hit; every synthetic table holds them.
pub(crate) use route_pool::SHAPES as SHAPE_ROUTES;

/// The corpus names, as the core's tests route them.
pub(crate) use route_pool::CORPUS as CORPUS_ROUTES;

pub(crate) fn insert(table: &mut RouteTable, pattern: &str, alpn: &[&str], cluster: &str) {
    let pattern = validate_sni_pattern(pattern).expect("valid bench pattern");
    let alpn = if alpn.is_empty() {
        AlpnSet::Any
    } else {
        AlpnSet::protocols(alpn).expect("valid bench ALPN")
    };
    table
        .insert(pattern, alpn, Arc::from(cluster))
        .expect("no conflict in bench routes");
}

/// Filler frontend `i`: 60% exact `host-N.zone-M.example.com` (a third of
/// them listing `h2`), 20% `*.svc-N.zone-M.example.com`, 20%
/// `**.tenant-N.example.net` (a quarter of them listing `http/1.1`). No
/// filler matches a shape or corpus name.
pub(crate) fn filler(i: usize) -> (String, &'static [&'static str], String) {
    let zone = i % 100;
    match i % 10 {
        0..=5 => (
            format!("host-{i}.zone-{zone}.example.com"),
            if i % 3 == 0 { &["h2"] } else { &[] },
            format!("exact-{}", i % 50),
        ),
        6 | 7 => (
            format!("*.svc-{i}.zone-{zone}.example.com"),
            &[],
            format!("one-label-{}", i % 50),
        ),
        _ => (
            format!("**.tenant-{i}.example.net"),
            if i % 20 == 9 { &["http/1.1"] } else { &[] },
            format!("any-depth-{}", i % 50),
        ),
    }
}

/// `routes`, then fillers `0..size - routes.len()`.
pub(crate) fn table(routes: &[(&str, &[&str], &str)], size: usize) -> RouteTable {
    let mut table = RouteTable::new();
    for &(pattern, alpn, cluster) in routes {
        insert(&mut table, pattern, alpn, cluster);
    }
    for i in 0..size - routes.len() {
        let (pattern, alpn, cluster) = filler(i);
        insert(&mut table, &pattern, alpn, &cluster);
    }
    assert_eq!(table.len(), size);
    table
}

/// The exact filler names of `table(_, size)` of its most common length,
/// concatenated, and that length: names of one length can be written in
/// turn into one hello.
pub(crate) fn rotating_names(size: usize) -> (Vec<u8>, usize) {
    let mut by_len: Vec<Vec<u8>> = Vec::new();
    for i in 0..size - SHAPE_ROUTES.len() {
        let (name, _, _) = filler(i);
        if !name.starts_with('*') {
            if by_len.len() <= name.len() {
                by_len.resize(name.len() + 1, Vec::new());
            }
            by_len[name.len()].extend_from_slice(name.as_bytes());
        }
    }
    let (len, names) = by_len
        .into_iter()
        .enumerate()
        .filter(|(len, _)| *len > 0)
        .max_by_key(|(len, names)| names.len() / len)
        .expect("the table has exact fillers");
    (names, len)
}

pub(crate) fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/clienthellos")
}

/// A single-record ClientHello with its `host_name` replaced by `sni`; every
/// enclosing length is patched. Panics on anything else.
pub(crate) fn with_sni(hello: &[u8], sni: &str) -> Vec<u8> {
    let u16_at = |at: usize| usize::from(u16::from_be_bytes([hello[at], hello[at + 1]]));
    assert_eq!(hello[0], 22, "a handshake record");
    assert_eq!(u16_at(3) + 5, hello.len(), "one record, nothing after it");
    // record header (5), handshake header (4), legacy_version (2), random (32)
    let mut at = 5 + 4 + 2 + 32;
    at += 1 + usize::from(hello[at]); // session_id
    at += 2 + u16_at(at); // cipher_suites
    at += 1 + usize::from(hello[at]); // compression_methods
    let extensions_len_at = at;
    at += 2;
    while u16_at(at) != 0x0000 {
        at += 4 + u16_at(at + 2);
        assert!(at < hello.len(), "no server_name extension");
    }
    // type (2), length (2), list length (2), name_type (1), name length (2)
    let name_len_at = at + 7;
    let old_len = u16_at(name_len_at);
    let grow = |bytes: &mut [u8], at: usize, width: usize| {
        let mut value = 0usize;
        for b in &bytes[at..at + width] {
            value = value << 8 | usize::from(*b);
        }
        let value = value + sni.len() - old_len;
        for (i, b) in bytes[at..at + width].iter_mut().enumerate() {
            *b = (value >> (8 * (width - 1 - i))) as u8;
        }
    };
    let mut out = hello.to_vec();
    for (field, width) in [
        (3, 2),                 // record length
        (6, 3),                 // handshake length
        (extensions_len_at, 2), // extensions length
        (at + 2, 2),            // server_name extension length
        (at + 4, 2),            // server_name_list length
        (name_len_at, 2),       // host_name length
    ] {
        grow(&mut out, field, width);
    }
    let name = name_len_at + 2;
    out.splice(name..name + old_len, sni.bytes());
    out
}
