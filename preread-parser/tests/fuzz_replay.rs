//! Replays the committed fuzz corpus (`fuzz/corpus/clienthello`,
//! `fuzz/corpus/proxy_header`) through the fuzz targets' own check
//! functions, so every input the fuzzers ever kept (seeds, findings) is
//! re-checked by a plain `cargo test` on stable.

#[allow(dead_code, unreachable_pub)]
#[path = "../../fuzz/src/checks_parser.rs"]
mod checks;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

use checks::TlsOutcome;

fn corpus(target: &str, at_least: usize) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(target);
    let mut files: Vec<(PathBuf, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("corpus entry").path())
        .filter(|path| path.is_file())
        .map(|path| {
            let bytes = std::fs::read(&path).expect("corpus file");
            (path, bytes)
        })
        .collect();
    files.sort();
    assert!(
        files.len() >= at_least,
        "fuzz/corpus/{target} holds {} files, expected at least {at_least}",
        files.len()
    );
    files
}

/// Runs `check` on every file, naming the file that broke an invariant.
fn replay<T>(target: &str, at_least: usize, check: fn(&[u8]) -> T) -> Vec<T> {
    corpus(target, at_least)
        .iter()
        .map(|(path, bytes)| {
            catch_unwind(AssertUnwindSafe(|| check(bytes)))
                .unwrap_or_else(|_| panic!("{} breaks an invariant", path.display()))
        })
        .collect()
}

#[test]
fn clienthello_corpus() {
    let outcomes = replay("clienthello", 40, checks::check_clienthello);
    let complete = outcomes
        .iter()
        .filter(|o| matches!(o, TlsOutcome::Complete(_)))
        .count();
    let multi_record = outcomes
        .iter()
        .filter(|o| matches!(o, TlsOutcome::Complete(h) if h.records > 1))
        .count();
    let errors = outcomes
        .iter()
        .filter(|o| matches!(o, TlsOutcome::Error(_)))
        .count();
    println!(
        "{} files: {complete} complete ({multi_record} multi-record), {errors} errors",
        outcomes.len()
    );
    assert!(
        complete >= 20 && multi_record >= 1 && errors >= 5,
        "the replay must reach whole, multi-record and refused ClientHellos: \
         {complete} complete ({multi_record} multi-record), {errors} errors"
    );
}

#[test]
fn proxy_header_corpus() {
    let complete = replay("proxy_header", 10, checks::check_proxy_header)
        .into_iter()
        .flatten()
        .count();
    assert!(
        complete >= 8,
        "only {complete} complete PROXY headers replayed"
    );
}

/// Each target must also hold up on the other's inputs.
#[test]
fn crossed_corpora() {
    replay("proxy_header", 10, checks::check_clienthello);
    replay("clienthello", 40, checks::check_proxy_header);
}

/// Short inputs of every first byte, which the seeds do not start with.
#[test]
fn tiny_inputs() {
    for b in 0..=255u8 {
        for data in [
            &[b][..],
            &[0x16, 3, 1, 0, b],
            b"PROXY ",
            b"\r\n\r\n\0\r\nQUIT\n",
        ] {
            let _ = checks::check_clienthello(data);
            let _ = checks::check_proxy_header(data);
        }
    }
}
