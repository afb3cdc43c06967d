//! The committed corpus of one fuzz target (`fuzz/corpus/<target>`),
//! replayed through that target's own check function by a plain `cargo
//! test` on stable, so every input a fuzzer ever kept (seeds, findings) is
//! re-checked in CI.
//!
//! Owns: reading a target's corpus (every file, sorted by name, at least
//! as many as the caller expects, so an emptied corpus fails rather than
//! passes) and running a check on each, naming the file whose check
//! panicked. Each crate's `*fuzz_replay` test includes this file by
//! `#[path]` and says only what its target must reach.
//!
//! Must never: be compiled into shipped code, or skip a file it cannot
//! read (a test that cannot read its corpus fails).

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

/// Every file of `fuzz/corpus/<target>`, sorted, with its bytes; fails
/// the test when there are fewer than `at_least`.
pub fn files(target: &str, at_least: usize) -> Vec<(PathBuf, Vec<u8>)> {
    // Every includer is a crate beside `fuzz/` in the repository.
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(target);
    let mut files: Vec<(PathBuf, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| {
            entry
                .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
                .path()
        })
        .filter(|path| path.is_file())
        .map(|path| {
            let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
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

/// `check` of every file of `target`'s corpus ([`files`]), in order;
/// a check that panics fails the test naming its file.
pub fn replay<T>(target: &str, at_least: usize, check: impl Fn(&[u8]) -> T) -> Vec<T> {
    files(target, at_least)
        .iter()
        .map(|(path, bytes)| {
            catch_unwind(AssertUnwindSafe(|| check(bytes)))
                .unwrap_or_else(|_| panic!("{} breaks an invariant", path.display()))
        })
        .collect()
}
