//! The coordinator stays sans-io: no line of code in its sources names a
//! module that does I/O, or reads a clock (its docs may say so, and its
//! test modules may take a real instant to start fake time from).

use std::fs;
use std::path::{Path, PathBuf};

/// What no coordinator source may contain.
const FORBIDDEN: &[&str] = &[
    "mio",
    "std::net",
    "std::fs",
    "std::thread",
    "std::process",
    "Instant::now",
    "SystemTime::now",
];

fn sources(dir: &Path, into: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            sources(&path, into)?;
        } else if path.extension().is_some_and(|e| e == "rs") {
            into.push(path);
        }
    }
    Ok(())
}

/// Whether `word` occurs in `line` as a path or a name of its own (not as
/// part of a longer identifier, like `mio` in `premio`).
fn names(line: &str, word: &str) -> bool {
    line.match_indices(word).any(|(at, _)| {
        let before = line[..at].chars().next_back();
        let after = line[at + word.len()..].chars().next();
        let ident = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
        !ident(before) && !ident(after)
    })
}

#[test]
fn no_io_and_no_clock_in_the_coordinator() -> std::io::Result<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&root, &mut files)?;
    assert!(files.len() > 3, "the coordinator's sources were not found");
    let mut found = Vec::new();
    for file in &files {
        let text = fs::read_to_string(file)?;
        for (number, line) in text.lines().enumerate() {
            // The tests below it may take a real instant to start fake
            // time from: they are not shipped.
            if line.trim() == "#[cfg(test)]" {
                break;
            }
            // Docs may say what the coordinator does not do.
            if line.trim_start().starts_with("//") {
                continue;
            }
            for word in FORBIDDEN {
                if names(line, word) {
                    found.push(format!("{}:{}: {word}", file.display(), number + 1));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "I/O or a clock in the coordinator:\n{}",
        found.join("\n")
    );
    Ok(())
}

#[test]
fn the_check_sees_what_it_looks_for() {
    assert!(names("use mio::Poll;", "mio"));
    assert!(names("let t = Instant::now();", "Instant::now"));
    assert!(!names("let premio = 1;", "mio"));
    assert!(!names("core::net::SocketAddr", "std::net"));
}
