//! The shape the worker's code keeps: files small enough to read in one
//! sitting, and no import circle among its modules (each one can be read,
//! and changed, knowing only the ones below it).
//!
//! The graph is read from the sources: an edge `a -> b` for every
//! `super::b` (or `crate::worker::b`) in module `a`'s code outside its
//! tests, and `a -> mod` for a `super::item` that names no module (an item
//! of `worker/mod.rs`). Test modules are left out of the graph: a test
//! module reads its parent by nature.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// No file of the worker is longer than this.
const MAX_LINES: usize = 600;

fn worker_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src/worker")
}

/// Every `.rs` file under `dir`, recursively.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = fs::read_dir(dir).expect("the worker's folder is readable");
    for entry in entries {
        let path = entry.expect("a folder entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The worker module a file belongs to: `pipe/mod.rs` and `pipe/tests.rs`
/// are both `pipe`; `worker/mod.rs` is `mod`.
fn module_of(file: &Path) -> String {
    let relative = file.strip_prefix(worker_dir()).expect("under the worker");
    let first = relative
        .components()
        .next()
        .expect("a component")
        .as_os_str()
        .to_string_lossy()
        .into_owned();
    first.strip_suffix(".rs").unwrap_or(&first).to_owned()
}

/// The code of a file before its first `#[cfg(test)]`: the worker keeps
/// its tests at the end of a file, or in a `tests.rs` of their own.
fn code_without_tests(text: &str) -> &str {
    text.split("#[cfg(test)]").next().unwrap_or(text)
}

/// The names after each run of `super::` (and after `crate::worker::`).
fn referenced(code: &str) -> Vec<String> {
    let mut names = Vec::new();
    for marker in ["super::", "crate::worker::"] {
        let mut rest = code;
        while let Some(at) = rest.find(marker) {
            rest = &rest[at + marker.len()..];
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() && name != "super" && name != "self" {
                names.push(name);
            }
        }
    }
    // `use super::{a, b}` names several modules at once.
    let mut rest = code;
    while let Some(at) = rest.find("super::{") {
        rest = &rest[at + "super::{".len()..];
        let group = rest.split('}').next().unwrap_or_default();
        for part in group.split(',') {
            let name: String = part
                .trim()
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() && name != "self" {
                names.push(name);
            }
        }
    }
    names
}

fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(&worker_dir(), &mut files);
    let modules: BTreeSet<String> = files.iter().map(|f| module_of(f)).collect();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in &files {
        let module = module_of(file);
        let nested = file.parent() != Some(worker_dir().as_path());
        let stem = file.file_stem().map(|s| s.to_string_lossy().into_owned());
        if module == "mod" || (nested && stem.as_deref() != Some("mod")) {
            // `worker/mod.rs` is the root, and a nested file other than a
            // `mod.rs` is a test module of its parent.
            continue;
        }
        let text = fs::read_to_string(file).expect("a readable source file");
        let out = edges.entry(module.clone()).or_default();
        for name in referenced(code_without_tests(&text)) {
            let target = if modules.contains(&name) {
                name
            } else {
                "mod".to_owned()
            };
            if target != module {
                out.insert(target);
            }
        }
    }
    edges
}

/// A circle through `from`, as the path that closes it.
fn circle(
    edges: &BTreeMap<String, BTreeSet<String>>,
    node: &str,
    path: &mut Vec<String>,
    done: &mut BTreeSet<String>,
) -> Option<Vec<String>> {
    if let Some(at) = path.iter().position(|n| n == node) {
        let mut found = path[at..].to_vec();
        found.push(node.to_owned());
        return Some(found);
    }
    if done.contains(node) {
        return None;
    }
    path.push(node.to_owned());
    for next in edges.get(node).into_iter().flatten() {
        if let Some(found) = circle(edges, next, path, done) {
            return Some(found);
        }
    }
    path.pop();
    done.insert(node.to_owned());
    None
}

#[test]
fn no_worker_file_is_longer_than_600_lines() {
    let mut files = Vec::new();
    rust_files(&worker_dir(), &mut files);
    assert!(files.len() > 10, "found the worker's files: {files:?}");
    let long: Vec<String> = files
        .iter()
        .filter_map(|file| {
            let lines = fs::read_to_string(file).expect("readable").lines().count();
            (lines > MAX_LINES).then(|| format!("{}: {lines} lines", file.display()))
        })
        .collect();
    assert!(long.is_empty(), "over {MAX_LINES} lines: {long:#?}");
}

#[test]
fn the_worker_modules_import_no_circle() {
    let edges = graph();
    assert!(
        edges.get("event_loop").is_some_and(|e| e.contains("drive")),
        "the graph was read: {edges:#?}"
    );
    let mut done = BTreeSet::new();
    for node in edges.keys() {
        if let Some(found) = circle(&edges, node, &mut Vec::new(), &mut done) {
            panic!("an import circle: {}", found.join(" -> "));
        }
    }
}

#[test]
fn the_circle_finder_finds_a_circle() {
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    edges.entry("a".into()).or_default().insert("b".into());
    edges.entry("b".into()).or_default().insert("c".into());
    edges.entry("c".into()).or_default().insert("a".into());
    let found = circle(&edges, "a", &mut Vec::new(), &mut BTreeSet::new());
    assert_eq!(
        found,
        Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
    );
    assert_eq!(
        referenced("use super::{ctx::Ctx, io, pool::Checkout};\nsuper::super::x();"),
        ["x", "ctx", "io", "pool"]
    );
}
