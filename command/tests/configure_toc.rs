//! doc/configure.md opens with a table of contents: every heading under
//! the title, in order, nested by level, each linking to the anchor a
//! Markdown renderer (GitHub's rule) gives that heading. A heading added,
//! renamed or moved without its entry fails here.

use std::path::Path;

fn configure_md() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../doc/configure.md");
    std::fs::read_to_string(path).expect("doc/configure.md")
}

/// The headings under the title (`##` and deeper) as (level, text),
/// outside fenced code blocks.
fn headings(doc: &str) -> Vec<(usize, String)> {
    let mut fenced = false;
    let mut found = Vec::new();
    for line in doc.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
            continue;
        }
        let level = line.chars().take_while(|c| *c == '#').count();
        if fenced || level < 2 {
            continue;
        }
        if let Some(text) = line[level..].strip_prefix(' ') {
            found.push((level, text.to_owned()));
        }
    }
    found
}

/// The anchor of a heading: its text without code marks, lower case,
/// punctuation other than `-` and `_` dropped, spaces as `-`.
fn anchor(text: &str) -> String {
    text.to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The contents' entries as (level, text, anchor): the list after
/// `**Contents**`, up to its first blank line after an entry.
fn contents(doc: &str) -> Vec<(usize, String, String)> {
    let (_, after) = doc
        .split_once("\n**Contents**\n\n")
        .expect("doc/configure.md has a **Contents** list");
    after
        .lines()
        .take_while(|line| !line.is_empty())
        .map(|line| {
            let indent = line.len() - line.trim_start().len();
            let entry = line
                .trim_start()
                .strip_prefix("- [")
                .and_then(|rest| rest.rsplit_once("](#"))
                .and_then(|(text, rest)| Some((text, rest.strip_suffix(')')?)))
                .unwrap_or_else(|| panic!("not a contents entry `- [text](#anchor)`: {line:?}"));
            (indent / 2 + 2, entry.0.to_owned(), entry.1.to_owned())
        })
        .collect()
}

#[test]
fn the_contents_list_every_heading_in_order_with_its_anchor() {
    let doc = configure_md();
    let headings = headings(&doc);
    assert!(headings.len() >= 30, "{headings:?}");
    let listed = contents(&doc);
    let wanted: Vec<(usize, String, String)> = headings
        .iter()
        .map(|(level, text)| (*level, text.clone(), anchor(text)))
        .collect();
    for (i, (entry, heading)) in listed.iter().zip(&wanted).enumerate() {
        assert_eq!(
            entry,
            heading,
            "contents entry {} (left) vs heading (right)",
            i + 1
        );
    }
    assert_eq!(
        listed.len(),
        wanted.len(),
        "the contents list {} entries for {} headings",
        listed.len(),
        wanted.len()
    );
    // A renderer suffixes a repeated anchor (`-1`): the entries assume none.
    let mut anchors: Vec<&str> = wanted.iter().map(|(_, _, a)| a.as_str()).collect();
    anchors.sort_unstable();
    anchors.dedup();
    assert_eq!(anchors.len(), wanted.len(), "two headings share an anchor");
}

#[test]
fn anchors_follow_the_renderers_rule() {
    assert_eq!(anchor("2.3 `[clusters.<id>]`"), "23-clustersid");
    assert_eq!(
        anchor("5.1 Reject reasons: `tcp.sni_preread.rejected.<reason>`"),
        "51-reject-reasons-tcpsni_prereadrejectedreason"
    );
    assert_eq!(
        anchor("4.5 Socket subcommands (need a running proxy)"),
        "45-socket-subcommands-need-a-running-proxy"
    );
}
