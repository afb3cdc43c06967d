//! What the tests of the `preread` binary share: the repository root and
//! `preread inspect --config testdata/corpus-routes.toml` run for real.

#![allow(dead_code, unreachable_pub)]

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// The repository's root (test data lives under it).
pub fn root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

/// The `decision` objects `preread inspect` prints for `files` on
/// `listener` of `testdata/corpus-routes.toml`, one per file, in order.
pub fn decisions<P: AsRef<Path>>(listener: &str, files: &[P]) -> Vec<Value> {
    let out = Command::new(env!("CARGO_BIN_EXE_preread"))
        .args(["inspect", "-c"])
        .arg(root().join("testdata/corpus-routes.toml"))
        .args(["--listener", listener])
        .args(files.iter().map(AsRef::as_ref))
        .output()
        .expect("run preread");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("JSON line")["decision"].clone())
        .collect()
}
