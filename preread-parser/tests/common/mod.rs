//! Test support shared by the parser's integration tests: the ClientHello
//! corpus with its manifest, and re-framing of a hello over several records.

#![allow(dead_code, unreachable_pub)]

use std::path::PathBuf;

pub fn corpus_dir() -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../testdata/clienthellos"
    ))
}

/// One line of `manifest.jsonl`.
pub struct Entry {
    pub file: String,
    pub bytes: Vec<u8>,
    pub json: serde_json::Value,
}

impl Entry {
    pub fn expected(&self) -> &str {
        self.json["expected"].as_str().unwrap_or_default()
    }

    pub fn str_field(&self, key: &str) -> Option<&str> {
        self.json[key].as_str()
    }

    pub fn usize_field(&self, key: &str) -> Option<usize> {
        self.json[key].as_u64().map(|n| n as usize)
    }

    pub fn prefix_len(&self) -> usize {
        self.usize_field("prefix_len").unwrap_or(0)
    }

    pub fn alpn(&self) -> Option<Vec<Vec<u8>>> {
        self.json["alpn"].as_array().map(|list| {
            list.iter()
                .map(|p| p.as_str().unwrap_or_default().as_bytes().to_vec())
                .collect()
        })
    }

    /// The ALPN names of the manifest as a `ProtocolNameList` body on the wire.
    pub fn alpn_wire(&self) -> Option<Vec<u8>> {
        self.alpn().map(|names| {
            names
                .iter()
                .flat_map(|name| std::iter::once(name.len() as u8).chain(name.iter().copied()))
                .collect()
        })
    }

    /// The manifest's `supported_versions`: `None` when the entry says
    /// nothing, `Some(None)` when it says the extension is absent.
    pub fn supported_versions(&self) -> Option<Option<Vec<u16>>> {
        let field = self.json.get("supported_versions")?;
        Some(field.as_array().map(|list| {
            list.iter()
                .map(|v| {
                    let hex = v.as_str().and_then(|s| s.strip_prefix("0x"));
                    u16::from_str_radix(hex.expect("0x-prefixed version"), 16).expect("version")
                })
                .collect()
        }))
    }
}

pub fn corpus() -> Vec<Entry> {
    let dir = corpus_dir();
    let manifest = std::fs::read_to_string(dir.join("manifest.jsonl")).expect("manifest.jsonl");
    let entries: Vec<Entry> = manifest
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let json: serde_json::Value = serde_json::from_str(line).expect("manifest line");
            let file = json["file"].as_str().expect("file").to_string();
            let bytes = std::fs::read(dir.join(&file)).expect("corpus file");
            Entry { file, bytes, json }
        })
        .collect();
    assert!(entries.len() >= 40, "corpus has {} files", entries.len());
    entries
}

/// A real single-record hello: its record header version and handshake message.
pub fn split_single_record(bytes: &[u8]) -> ([u8; 2], &[u8]) {
    assert_eq!(bytes[0], 22);
    let len = u16::from_be_bytes([bytes[3], bytes[4]]) as usize;
    ([bytes[1], bytes[2]], &bytes[5..5 + len])
}

pub fn record(content_type: u8, version: [u8; 2], payload: &[u8]) -> Vec<u8> {
    let mut out = vec![content_type, version[0], version[1]];
    out.extend_from_slice(&(payload.len() as u16).to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// Re-frames a handshake message into records cut at `cuts` (offsets into
/// the message), the i-th record using `versions[i % versions.len()]`.
pub fn reframe(message: &[u8], cuts: &[usize], versions: &[[u8; 2]]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut start = 0;
    for (i, &end) in cuts
        .iter()
        .chain(std::iter::once(&message.len()))
        .enumerate()
    {
        out.extend(record(
            22,
            versions[i % versions.len()],
            &message[start..end],
        ));
        start = end;
    }
    out
}
