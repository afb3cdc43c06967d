//! Replays the committed corpus of the `command` fuzz target on stable, so
//! CI exercises the channel decoder and `ConfigState::dispatch` the way the
//! fuzzer does.

#[path = "../../fuzz/src/checks_command.rs"]
#[allow(unreachable_pub)]
mod checks;

use std::path::PathBuf;

fn corpus() -> Vec<(String, Vec<u8>)> {
    let dir = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../fuzz/corpus/command"
    ));
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .filter_map(|entry| entry.ok())
        .map(|entry| {
            let bytes = std::fs::read(entry.path()).unwrap_or_default();
            (entry.file_name().to_string_lossy().into_owned(), bytes)
        })
        .collect();
    files.sort();
    files
}

#[test]
fn command_corpus_replays() {
    let files = corpus();
    assert!(files.len() >= 10, "only {} corpus files", files.len());
    // Real frames start with a zero byte, which the target reads as
    // 1-byte chunks: the example's whole request sequence goes through the
    // decoder byte by byte, then through dispatch and replay.
    assert!(
        files
            .iter()
            .any(|(name, bytes)| name == "example_all_frames.bin" && bytes[0] == 0)
    );
    for (name, bytes) in &files {
        eprintln!("{name}");
        checks::check_command(bytes);
    }
}
