//! `preread inspect` run as the real binary over the whole ClientHello
//! corpus, raw and as hex text, with and without `--expect-proxy`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn corpus_dir() -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../testdata/clienthellos"
    ))
}

fn manifest() -> Vec<Value> {
    let text = std::fs::read_to_string(corpus_dir().join("manifest.jsonl")).expect("manifest");
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("manifest line"))
        .collect()
}

fn ja4_lines() -> Vec<Value> {
    let text = std::fs::read_to_string(corpus_dir().join("ja4.jsonl")).expect("ja4.jsonl");
    text.lines()
        .map(|line| serde_json::from_str(line).expect("a JSON line"))
        .collect()
}

fn preread(args: &[&str], files: &[PathBuf]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_preread"))
        .args(args)
        .args(files)
        .output()
        .expect("run preread")
}

fn reports(output: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect()
}

/// What `parse` must say for a manifest entry.
fn expected_parse(expected: &str) -> &'static str {
    match expected {
        "routed" | "NoSni" | "EchOuterAbsent" => "complete",
        "NotTls" => "not_tls",
        "MalformedRecord" => "malformed_record",
        "MalformedHandshake" | "InvalidSni" => "malformed_handshake",
        "Incomplete" => "incomplete",
        "ProxyHeaderInvalid" => "proxy_header_invalid",
        other => panic!("unknown manifest verdict {other}"),
    }
}

fn check(entry: &Value, report: &Value, expect_proxy: bool) {
    let file = entry["file"].as_str().unwrap_or_default();
    let has_proxy = entry.get("proxy_protocol").is_some();
    let expected = match (has_proxy, expect_proxy) {
        (true, false) => entry["expected_if_proxy_protocol_disabled"]
            .as_str()
            .unwrap_or_default(),
        (false, true) => "ProxyHeaderInvalid",
        _ => entry["expected"].as_str().unwrap_or_default(),
    };
    let parse = expected_parse(expected);
    assert_eq!(
        report["parse"], parse,
        "{file} (expect_proxy={expect_proxy}): {report}"
    );
    assert_eq!(report["len"], entry["total_len"], "{file}: len");
    if parse != "complete" {
        assert_eq!(report["sni"], Value::Null, "{file}: no sni unless complete");
        assert_eq!(report["ja4"], Value::Null, "{file}: no ja4 unless complete");
        return;
    }
    // The fingerprints testdata/clienthellos/ja4.py computed on its own.
    let ja4 = ja4_lines()
        .into_iter()
        .find(|line| line["file"] == file)
        .unwrap_or_else(|| panic!("{file} parses but has no line in ja4.jsonl"));
    assert_eq!(report["ja4"], ja4["ja4"], "{file}: ja4");
    assert_eq!(report["ja4_r"], ja4["ja4_r"], "{file}: ja4_r");
    assert_eq!(report["sni"], entry["sni_normalized"], "{file}: sni");
    assert_eq!(report["alpn"], entry["alpn"], "{file}: alpn");
    assert_eq!(report["records"], entry["records"], "{file}: records");
    let ech_present = entry["ech_present"].as_bool().unwrap_or(false);
    assert_eq!(
        report["ech"] != "absent",
        ech_present,
        "{file}: ech {}",
        report["ech"]
    );
    if let Some(legacy) = entry["legacy_version"].as_str() {
        assert_eq!(
            report["legacy_version"],
            legacy.trim_start_matches("0x"),
            "{file}: legacy"
        );
    }
    if let Some(len) = entry["clienthello_len"].as_u64() {
        let prefix = entry["prefix_len"].as_u64().unwrap_or(0);
        assert_eq!(report["end"], prefix + len, "{file}: end");
    }
    if expect_proxy {
        assert_eq!(
            report["proxy"]["source"], entry["proxy_src"],
            "{file}: proxy source"
        );
        assert_eq!(
            report["proxy"]["destination"], entry["proxy_dst"],
            "{file}: proxy destination"
        );
    } else {
        assert_eq!(report["proxy"], Value::Null, "{file}: proxy");
    }
}

fn hex_copies(dir: &Path, files: &[PathBuf]) -> Vec<PathBuf> {
    files
        .iter()
        .map(|path| {
            let bytes = std::fs::read(path).expect("corpus file");
            let text: String = bytes
                .chunks(16)
                .map(|line| line.iter().map(|b| format!("{b:02x} ")).collect::<String>() + "\n")
                .collect();
            let out = dir.join(path.file_name().expect("file name"));
            std::fs::write(&out, text).expect("write hex");
            out
        })
        .collect()
}

#[test]
fn inspect_matches_the_manifest_raw_and_hex() {
    let entries = manifest();
    let files: Vec<PathBuf> = entries
        .iter()
        .map(|e| corpus_dir().join(e["file"].as_str().unwrap_or_default()))
        .collect();
    let hex_dir = tempfile::Builder::new()
        .prefix("preread-inspect-")
        .tempdir()
        .expect("temp dir");
    let hex_files = hex_copies(hex_dir.path(), &files);
    for expect_proxy in [false, true] {
        let mut flags = vec!["inspect"];
        if expect_proxy {
            flags.push("--expect-proxy");
        }
        let raw = preread(&flags, &files);
        assert!(
            raw.status.success(),
            "{}",
            String::from_utf8_lossy(&raw.stderr)
        );
        flags.push("--hex");
        let hex = preread(&flags, &hex_files);
        assert!(
            hex.status.success(),
            "{}",
            String::from_utf8_lossy(&hex.stderr)
        );
        let (raw, hex) = (reports(&raw), reports(&hex));
        assert_eq!(raw.len(), entries.len());
        assert_eq!(hex.len(), entries.len());
        for ((entry, raw), hex) in entries.iter().zip(&raw).zip(&hex) {
            check(entry, raw, expect_proxy);
            let strip = |v: &Value| {
                let mut v = v.clone();
                v["file"] = Value::Null;
                v
            };
            assert_eq!(strip(raw), strip(hex), "hex and raw reports differ");
        }
    }
}

#[test]
fn an_unreadable_file_exits_2_and_the_others_are_still_reported() {
    let good = corpus_dir().join("curl_h2.bin");
    let missing = corpus_dir().join("no-such-capture.bin");
    let out = preread(&["inspect"], &[missing, good]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no-such-capture.bin"), "{stderr}");
    let reports = reports(&out);
    assert_eq!(reports.len(), 1);
    assert_eq!(reports[0]["sni"], "a.example.com");
}

#[test]
fn bad_hex_is_an_error_that_names_the_offset() {
    let dir = tempfile::Builder::new()
        .prefix("preread-badhex-")
        .tempdir()
        .expect("temp dir");
    let bad = dir.path().join("bad.hex");
    std::fs::write(&bad, "16 03 zz").expect("write");
    let out = preread(&["inspect", "--hex"], &[bad]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("offset 6"));
}

/// `--quic`: a flow's datagrams (length-prefixed, the second first) read
/// back to the hello and decided by the listener's routes; a cut file
/// exits 2 and the others are still reported.
#[test]
fn quic_flows_are_described_and_decided() {
    use preread_parser::quic::{Version, client_first_flight};

    let dir = tempfile::Builder::new()
        .prefix("preread-quic-")
        .tempdir()
        .expect("temp dir");
    let record = std::fs::read(corpus_dir().join("curl_h2.bin")).expect("capture");
    let flight = client_first_flight(Version::V1, &[7; 8], &[9; 4], &record[5..], 300);
    let mut file = Vec::new();
    for datagram in flight.iter().rev() {
        file.extend_from_slice(&(datagram.len() as u16).to_be_bytes());
        file.extend_from_slice(datagram);
    }
    let flow = dir.path().join("flow.bin");
    std::fs::write(&flow, &file).expect("write");
    let cut = dir.path().join("cut.bin");
    std::fs::write(&cut, &file[..file.len() - 1]).expect("write");
    let config = corpus_dir().join("../corpus-routes.toml");
    let config = config.to_str().expect("a UTF-8 path");
    let out = preread(&["-c", config, "inspect", "--quic"], &[cut, flow]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cut.bin"));
    let reports = reports(&out);
    assert_eq!(reports.len(), 1);
    let report = &reports[0];
    assert_eq!(report["protocol"], "quic");
    assert_eq!(report["sni"], "a.example.com");
    assert_eq!(report["quic"]["version"], "v1");
    assert_eq!(report["quic"]["dcid"], "0707070707070707");
    assert_eq!(report["quic"]["datagrams"], flight.len());
    assert_eq!(report["decision"]["verdict"], "routed");
    assert_eq!(report["decision"]["cluster"], "alpha");
}
