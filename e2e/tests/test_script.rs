//! `./test.sh`, the README's test command, installs every tool the tests
//! drive: each `require_tool(tool, package)` in the e2e sources has its
//! `tool package` line in the script, so a fresh machine needs no manual
//! install and no test has to install one in the middle of the run; and
//! the README lists exactly the packages the script installs.

use std::collections::BTreeSet;
use std::path::Path;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace")
}

/// The `(tool, package)` pairs of the script's `TOOLS` list.
fn installed_by_script() -> BTreeSet<(String, String)> {
    let script = std::fs::read_to_string(root().join("test.sh")).expect("test.sh");
    let list = script
        .split_once("TOOLS=\"")
        .and_then(|(_, rest)| rest.split_once('"'))
        .map(|(list, _)| list)
        .expect("test.sh has a TOOLS=\"…\" list");
    list.lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            Some((words.next()?.to_owned(), words.next()?.to_owned()))
        })
        .collect()
}

/// The tools the e2e sources require, with their packages.
fn required_by_tests() -> BTreeSet<(String, String)> {
    let mut pairs = BTreeSet::new();
    for dir in ["e2e/src", "e2e/tests"] {
        for entry in std::fs::read_dir(root().join(dir)).expect("read dir") {
            let path = entry.expect("entry").path();
            if path.extension().is_none_or(|e| e != "rs") || path.ends_with("test_script.rs") {
                continue;
            }
            let text = std::fs::read_to_string(&path).expect("read source");
            // A table of pairs handed to `require_tool(tool, package)`.
            if text.contains("require_tool(tool, package)") {
                for line in text.lines() {
                    let line = line.trim();
                    if let Some(pair) = line
                        .strip_prefix("(\"")
                        .and_then(|l| l.strip_suffix("\"),"))
                    {
                        if let Some((tool, package)) = pair.split_once("\", \"") {
                            pairs.insert((tool.to_owned(), package.to_owned()));
                        }
                    }
                }
            }
            for call in text.split("require_tool(\"").skip(1) {
                let mut quoted = call.split('"');
                let tool = quoted.next().unwrap_or_default();
                let package = quoted.nth(1).unwrap_or_default();
                if !package.is_empty() {
                    pairs.insert((tool.to_owned(), package.to_owned()));
                }
            }
        }
    }
    pairs
}

#[test]
fn the_test_script_installs_every_tool_a_test_requires() {
    let script = installed_by_script();
    let tests = required_by_tests();
    assert!(
        tests.len() >= 4,
        "the tests' tools were not found: {tests:?}"
    );
    let missing: Vec<_> = tests.difference(&script).collect();
    assert!(missing.is_empty(), "test.sh does not install {missing:?}");
}

/// The packages the README says `./test.sh` installs: the words in
/// backquotes from "installs the Debian packages" to "Then it runs".
fn listed_in_readme() -> BTreeSet<String> {
    let readme = std::fs::read_to_string(root().join("README.md")).expect("README.md");
    let (_, rest) = readme
        .split_once("installs the Debian\npackages")
        .expect("the README says which Debian packages test.sh installs");
    let (list, _) = rest
        .split_once("Then it runs")
        .expect("the README's package list ends with \"Then it runs\"");
    list.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_readme_lists_the_packages_the_test_script_installs() {
    let script: BTreeSet<String> = installed_by_script()
        .into_iter()
        .map(|(_, package)| package)
        .collect();
    let readme = listed_in_readme();
    assert!(script.len() >= 4, "the script's packages: {script:?}");
    assert_eq!(
        readme, script,
        "README.md's list of the packages ./test.sh installs (left) is not test.sh's TOOLS (right)"
    );
}
