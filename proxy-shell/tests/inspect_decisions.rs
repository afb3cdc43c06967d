//! `preread inspect --config` over the whole corpus: the decision the real
//! core takes under `testdata/corpus-routes.toml`, for every capture, on
//! the plain listener, the PROXY listener and the default-cluster listener.

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::{decisions, root};
use serde_json::Value;

fn manifest() -> Vec<Value> {
    let text = std::fs::read_to_string(root().join("testdata/clienthellos/manifest.jsonl"))
        .expect("manifest");
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("manifest line"))
        .collect()
}

/// The cluster corpus-routes.toml sends a normalized name to.
fn cluster_for(sni: &str, alpn: &Value) -> &'static str {
    match sni {
        "a.example.com" => "alpha",
        "c.example.com" => "charlie",
        "psk.example.com" => "psk",
        "public.example.net" => "public",
        // d.example.com only takes h2: an offer without it is refused.
        "d.example.com" if alpn.as_array().is_some_and(|a| a.iter().any(|p| p == "h2")) => {
            "delta-h2"
        }
        "d.example.com" => "alpn_unmatched",
        s if s.ends_with(".b.example.com") => "bravo",
        s if s.ends_with(".example.com") => "wild",
        other => panic!("no route for {other} in corpus-routes.toml"),
    }
}

fn reason(expected: &str) -> &'static str {
    match expected {
        "NotTls" => "not_tls",
        "MalformedRecord" => "malformed_record",
        "MalformedHandshake" | "InvalidSni" => "malformed_handshake",
        "NoSni" => "no_sni",
        "EchOuterAbsent" => "ech_outer_absent",
        "ProxyHeaderInvalid" => "proxy_header_invalid",
        other => panic!("unknown manifest verdict {other}"),
    }
}

fn check(entry: &Value, decision: &Value, default_cluster: bool) {
    let file = entry["file"].as_str().unwrap_or_default();
    let expected = entry["expected"].as_str().unwrap_or_default();
    match expected {
        "routed" => {
            let sni = entry["sni_normalized"].as_str().unwrap_or_default();
            let want = cluster_for(sni, &entry["alpn"]);
            if want == "alpn_unmatched" {
                assert_eq!(decision["verdict"], "rejected", "{file}");
                assert_eq!(decision["reason"], "alpn_unmatched", "{file}");
            } else if default_cluster && want != "alpha" {
                // Only a.example.com is routed on the default-cluster listener.
                assert_eq!(decision["cluster"], "fallback", "{file}: {decision}");
                assert_eq!(decision["fallback"], "sni_unmatched", "{file}");
            } else {
                assert_eq!(decision["verdict"], "routed", "{file}: {decision}");
                assert_eq!(decision["cluster"], want, "{file}");
                assert_eq!(decision["fallback"], Value::Null, "{file}");
            }
        }
        "Incomplete" => assert_eq!(decision["verdict"], "need_more", "{file}"),
        other => {
            let reason = reason(other);
            if default_cluster && ["not_tls", "no_sni", "ech_outer_absent"].contains(&reason) {
                assert_eq!(decision["verdict"], "routed", "{file}");
                assert_eq!(decision["cluster"], "fallback", "{file}");
                assert_eq!(decision["fallback"], reason, "{file}");
            } else {
                assert_eq!(decision["verdict"], "rejected", "{file}: {decision}");
                assert_eq!(decision["reason"], reason, "{file}");
            }
        }
    }
}

#[test]
fn every_corpus_file_gets_the_right_decision() {
    let entries = manifest();
    let (proxied, plain): (Vec<&Value>, Vec<&Value>) = entries
        .iter()
        .partition(|e| e.get("proxy_protocol").is_some());
    let paths = |list: &[&Value]| -> Vec<PathBuf> {
        list.iter()
            .map(|e| {
                root()
                    .join("testdata/clienthellos")
                    .join(e["file"].as_str().unwrap_or_default())
            })
            .collect()
    };
    for (listener, default_cluster) in [("127.0.0.1:8443", false), ("127.0.0.1:8445", true)] {
        let got = decisions(listener, &paths(&plain));
        assert_eq!(got.len(), plain.len());
        for (entry, decision) in plain.iter().zip(&got) {
            check(entry, decision, default_cluster);
        }
    }
    let got = decisions("127.0.0.1:8444", &paths(&proxied));
    assert_eq!(got.len(), proxied.len());
    for (entry, decision) in proxied.iter().zip(&got) {
        check(entry, decision, false);
        if entry["expected"] == "routed" {
            assert_eq!(
                decision["content_offset"], entry["prefix_len"],
                "{}",
                entry["file"]
            );
        }
    }
    // Without PROXY support the PROXY-prefixed files are not TLS.
    for decision in decisions("127.0.0.1:8443", &paths(&proxied)) {
        assert_eq!(decision["reason"], "not_tls");
    }
}

#[test]
fn an_unknown_listener_or_an_invalid_config_is_exit_2() {
    let out = Command::new(env!("CARGO_BIN_EXE_preread"))
        .args(["inspect", "-c"])
        .arg(root().join("testdata/corpus-routes.toml"))
        .args(["--listener", "127.0.0.1:1"])
        .arg(root().join("testdata/clienthellos/curl_h2.bin"))
        .output()
        .expect("run preread");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no listener 127.0.0.1:1"));
    let broken = root().join("command/tests/data/bad_sni_pattern.toml");
    let out = Command::new(env!("CARGO_BIN_EXE_preread"))
        .args(["inspect", "-c"])
        .arg(&broken)
        .arg(root().join("testdata/clienthellos/curl_h2.bin"))
        .output()
        .expect("run preread");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("E201"));
}

#[test]
fn a_rejected_capture_shows_the_alert_its_client_reads() {
    let dir = root().join("testdata/clienthellos");
    let files: Vec<PathBuf> = [
        "gen_d_ext_len_too_long.bin",
        "gen_handshake_type_2.bin",
        "openssl_noservername.bin",
        "gen_l_http_get.bin",
        "curl_h2.bin",
    ]
    .iter()
    .map(|f| dir.join(f))
    .collect();
    let alerts: Vec<Value> = decisions("127.0.0.1:8443", &files)
        .iter()
        .map(|d| d["alert"].clone())
        .collect();
    assert_eq!(
        alerts,
        [
            Value::from("decode_error"),
            Value::from("unexpected_message"),
            Value::from("missing_extension"),
            Value::Null,
            Value::Null,
        ],
        "a lying length, no ClientHello, a TLS 1.3 hello without a name, \
         plain HTTP, a routed hello"
    );
}
