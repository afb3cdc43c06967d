//! The route fixtures of the harnesses (`testdata/route_pool.rs`, compiled
//! in here) and the routes file of the `inspect` tests
//! (`testdata/corpus-routes.toml`, loaded and decided by the real `preread
//! inspect`) must not drift apart: both route every routed capture of the
//! corpus through the same SNI pattern.
//!
//! They differ on purpose in two ways, and only these are allowed: the file
//! names its clusters for operators (`alpha`, `bravo`...) where `CORPUS`
//! names each after its pattern, and the file may narrow a pattern to some
//! protocols (`d.example.com` takes only `h2`, so that `inspect` shows an
//! `alpn_unmatched` refusal). Its PROXY and default-cluster listeners route
//! only `a.example.com` by design; the plain listener is the one compared.

// Shared by crates that each use some of its tables (SHAPES is the bench's).
#[allow(dead_code, unreachable_pub)]
#[path = "../../testdata/route_pool.rs"]
mod route_pool;

mod common;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;

use command::config::load_config_file;
use command::proto::request::RequestType;
use preread_core::pattern::validate_sni_pattern;
use preread_core::routes::{AlpnSet, Lookup, RouteTable};
use route_pool::RouteSpec;
use serde_json::Value;

use common::{decisions, root};

/// The plain listener of `corpus-routes.toml`.
const PLAIN_LISTENER: &str = "127.0.0.1:8443";

fn routes_file() -> PathBuf {
    root().join("testdata/corpus-routes.toml")
}

fn table(routes: &[RouteSpec]) -> RouteTable {
    let mut table = RouteTable::new();
    for &(pattern, alpn, cluster) in routes {
        let pattern = validate_sni_pattern(pattern).expect("valid fixture pattern");
        let alpn = if alpn.is_empty() {
            AlpnSet::Any
        } else {
            AlpnSet::protocols(alpn).expect("valid fixture ALPN")
        };
        table
            .insert(pattern, alpn, Arc::from(cluster))
            .expect("no conflict in the fixture");
    }
    table
}

/// A routed capture without a PROXY header, as the manifest describes it.
#[derive(Debug)]
struct Capture {
    file: String,
    name: String,
    /// `None`: no ALPN extension.
    offer: Option<Vec<String>>,
}

impl Capture {
    fn offer(&self) -> impl Iterator<Item = &[u8]> {
        self.offer.iter().flatten().map(|p| p.as_bytes())
    }
}

fn routed_captures() -> Vec<Capture> {
    let text = std::fs::read_to_string(root().join("testdata/clienthellos/manifest.jsonl"))
        .expect("manifest");
    let captures: Vec<Capture> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str::<Value>(l).expect("manifest line"))
        .filter(|e| e["expected"] == "routed" && e.get("proxy_protocol").is_none())
        .map(|e| Capture {
            file: e["file"].as_str().expect("file").to_owned(),
            name: e["sni_normalized"]
                .as_str()
                .expect("routed name")
                .to_owned(),
            offer: e["alpn"].as_array().map(|list| {
                list.iter()
                    .map(|p| p.as_str().expect("protocol").to_owned())
                    .collect()
            }),
        })
        .collect();
    assert!(!captures.is_empty(), "the corpus has routed captures");
    captures
}

/// `(pattern, ALPN list)` of every frontend of the plain listener.
fn file_frontends() -> Vec<(String, Vec<String>)> {
    let loaded = load_config_file(routes_file()).expect("corpus-routes.toml loads");
    loaded
        .requests()
        .filter_map(|r| match &r.request_type {
            Some(RequestType::AddTcpFrontend(f)) if f.address == PLAIN_LISTENER => {
                Some((f.sni.clone().expect("an SNI frontend"), f.alpn.clone()))
            }
            _ => None,
        })
        .collect()
}

/// The decisions of the real `preread inspect` on the plain listener.
fn inspect(captures: &[Capture]) -> Vec<Value> {
    let dir = root().join("testdata/clienthellos");
    let files: Vec<PathBuf> = captures.iter().map(|c| dir.join(&c.file)).collect();
    decisions(PLAIN_LISTENER, &files)
}

#[test]
fn the_file_and_the_fixture_have_the_same_patterns() {
    let in_file: BTreeSet<String> = file_frontends().into_iter().map(|(p, _)| p).collect();
    let in_fixture: BTreeSet<String> = route_pool::CORPUS
        .iter()
        .map(|&(p, _, _)| p.to_owned())
        .collect();
    assert_eq!(
        in_file, in_fixture,
        "corpus-routes.toml ({PLAIN_LISTENER}) and route_pool::CORPUS differ"
    );
}

#[test]
fn every_routed_capture_takes_the_same_pattern_in_both() {
    let fixture = table(route_pool::CORPUS);
    let frontends = file_frontends();
    let captures = routed_captures();
    let decisions = inspect(&captures);
    assert_eq!(decisions.len(), captures.len());
    for (capture, decision) in captures.iter().zip(&decisions) {
        let file = &capture.file;
        // CORPUS names every cluster after its pattern.
        let pattern = match fixture.lookup(capture.name.as_bytes(), capture.offer()) {
            Lookup::Matched { cluster, .. } => &**cluster,
            other => panic!("{file}: route_pool::CORPUS does not route it: {other:?}"),
        };
        if decision["verdict"] == "routed" {
            assert_eq!(decision["matched_sni"], pattern, "{file}: {decision}");
            continue;
        }
        assert_eq!(decision["reason"], "alpn_unmatched", "{file}: {decision}");
        // Only a narrowing of that very pattern may refuse what CORPUS routes.
        let lists: Vec<&Vec<String>> = frontends
            .iter()
            .filter(|(p, _)| p == pattern)
            .map(|(_, alpn)| alpn)
            .collect();
        assert!(
            !lists.is_empty() && lists.iter().all(|alpn| !alpn.is_empty()),
            "{file}: refused, but {pattern} takes any offer in the file"
        );
    }
}

#[test]
fn the_pool_matches_every_routed_capture_name() {
    let pool = table(route_pool::POOL);
    for capture in routed_captures() {
        let lookup = pool.lookup(capture.name.as_bytes(), capture.offer());
        assert!(
            !matches!(lookup, Lookup::SniUnmatched),
            "{}: no pattern of route_pool::POOL matches {}",
            capture.file,
            capture.name
        );
    }
}
