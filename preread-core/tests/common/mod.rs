//! Test support for the core: route tables from short specs, a ClientHello
//! builder, and the captured corpus.

#![allow(dead_code, unreachable_pub)]

use std::path::PathBuf;
use std::sync::Arc;

use preread_core::PrereadConfig;
use preread_core::pattern::validate_sni_pattern;
use preread_core::routes::{AlpnSet, RouteTable};

#[path = "../../../testdata/route_pool.rs"]
mod route_pool;

/// `(pattern, alpn, cluster)`; an empty ALPN list means "any".
pub fn table(routes: &[(&str, &[&str], &str)]) -> RouteTable {
    let mut table = RouteTable::new();
    for (pattern, alpn, cluster) in routes {
        let pattern = validate_sni_pattern(pattern).expect("valid test pattern");
        let alpn = if alpn.is_empty() {
            AlpnSet::Any
        } else {
            AlpnSet::protocols(alpn.iter()).expect("valid test ALPN")
        };
        table
            .insert(pattern, alpn, Arc::from(*cluster))
            .expect("no conflict in test routes");
    }
    table
}

pub fn config(routes: &[(&str, &[&str], &str)]) -> PrereadConfig {
    PrereadConfig::new(table(routes))
}

fn ext(out: &mut Vec<u8>, ext_type: u16, data: &[u8]) {
    out.extend_from_slice(&ext_type.to_be_bytes());
    out.extend_from_slice(&(data.len() as u16).to_be_bytes());
    out.extend_from_slice(data);
}

/// A minimal, well-formed ClientHello record with the given SNI, ALPN offer
/// and (optionally) an outer ECH extension.
pub fn hello(sni: Option<&str>, alpn: Option<&[&str]>, ech: bool) -> Vec<u8> {
    let mut extensions = Vec::new();
    if let Some(name) = sni {
        let mut data = ((name.len() + 3) as u16).to_be_bytes().to_vec();
        data.push(0);
        data.extend_from_slice(&(name.len() as u16).to_be_bytes());
        data.extend_from_slice(name.as_bytes());
        ext(&mut extensions, 0x0000, &data);
    }
    if let Some(protocols) = alpn {
        let list: Vec<u8> = protocols
            .iter()
            .flat_map(|p| std::iter::once(p.len() as u8).chain(p.bytes()))
            .collect();
        let mut data = (list.len() as u16).to_be_bytes().to_vec();
        data.extend(list);
        ext(&mut extensions, 0x0010, &data);
    }
    ext(&mut extensions, 0x002b, &[2, 3, 4]);
    if ech {
        ext(&mut extensions, 0xfe0d, &[0, 0, 1, 0, 1, 0x2a, 0, 0, 0, 0]);
    }
    let mut body = vec![3, 3];
    body.extend_from_slice(&[7; 32]);
    body.push(0);
    body.extend_from_slice(&[0, 2, 0x13, 0x01, 1, 0]);
    body.extend_from_slice(&(extensions.len() as u16).to_be_bytes());
    body.extend(extensions);
    let mut message = vec![1];
    message.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
    message.extend(body);
    let mut record = vec![22, 3, 1];
    record.extend_from_slice(&(message.len() as u16).to_be_bytes());
    record.extend(message);
    record
}

pub fn corpus_dir() -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../testdata/clienthellos"
    ))
}

pub fn corpus_file(name: &str) -> Vec<u8> {
    std::fs::read(corpus_dir().join(name)).expect("corpus file")
}

pub fn manifest() -> Vec<serde_json::Value> {
    std::fs::read_to_string(corpus_dir().join("manifest.jsonl"))
        .expect("manifest")
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("manifest line"))
        .collect()
}

/// Routes every name the corpus routes on, each to a cluster of its own
/// name, so a verdict shows which name won.
pub use route_pool::CORPUS as CORPUS_ROUTES;
