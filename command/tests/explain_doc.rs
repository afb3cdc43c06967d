//! What the config and `preread explain` know is documented in
//! `doc/configure.md`: every code has a row in the codes tables of §3 (the
//! `E` codes in §3, the `W` codes in §3.3), and the section its
//! explanation cites exists and speaks of it; every key a table of the
//! config accepts has its row in that table's section of §2, and every row
//! is a key. A new code or key without its documentation fails here, and
//! so does an explanation that sends the operator to a section that was
//! renumbered.

use std::path::Path;

use command::codes::ErrorCode;

/// One section of the document: its number (`"2.2"`), its heading's level
/// and its text up to the next heading of the same or a higher level.
struct Section {
    number: String,
    text: String,
}

/// `## 2. The config file` → `2`; `### 2.2 [[listeners]]` → `2.2`.
fn number_of(heading: &str) -> Option<(usize, String)> {
    let level = heading.bytes().take_while(|&b| b == b'#').count();
    let rest = heading.get(level..)?.strip_prefix(' ')?;
    let number: String = rest
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    let number = number.trim_end_matches('.').to_owned();
    (level >= 2 && !number.is_empty()).then_some((level, number))
}

fn sections(document: &str) -> Vec<Section> {
    let lines: Vec<&str> = document.lines().collect();
    let mut sections = Vec::new();
    let mut in_code = false;
    let mut headings = Vec::new();
    for (index, line) in lines.iter().enumerate() {
        if line.starts_with("```") {
            in_code = !in_code;
        }
        if !in_code && line.starts_with('#') {
            if let Some((level, number)) = number_of(line) {
                headings.push((index, level, number));
            }
        }
    }
    for (at, &(index, level, ref number)) in headings.iter().enumerate() {
        let end = headings[at + 1..]
            .iter()
            .find(|(_, other, _)| *other <= level)
            .map_or(lines.len(), |(next, _, _)| *next);
        sections.push(Section {
            number: number.clone(),
            text: lines[index..end].join("\n"),
        });
    }
    sections
}

#[test]
fn every_code_has_its_section_in_configure_md() -> Result<(), String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../doc/configure.md");
    let document =
        std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let sections = sections(&document);
    let section = |number: &str| sections.iter().find(|s| s.number == number);
    let codes_table = section("3").ok_or("no §3 in doc/configure.md")?;
    for code in ErrorCode::ALL {
        let text = code.as_str();
        assert!(
            codes_table.text.contains(&format!("| {text} |")),
            "{text} has no row in the codes tables of doc/configure.md §3"
        );
        let explanation = code.explain();
        let cited = section(explanation.section).ok_or_else(|| {
            format!(
                "{text} cites doc/configure.md §{}, which does not exist",
                explanation.section
            )
        })?;
        assert!(
            cited.text.contains(text),
            "{text} cites doc/configure.md §{}, which does not mention it",
            explanation.section
        );
        let shown = explanation.to_string();
        assert!(
            shown.contains(&format!("See: doc/configure.md §{}", explanation.section)),
            "{shown}"
        );
        for part in [explanation.meaning, explanation.accepted, explanation.fix] {
            assert!(!part.contains("INTERFACE"), "{text}: {part}");
        }
    }
    Ok(())
}

/// The reader of sections above, on a document of known shape, so that
/// the test cannot pass by finding nothing.
#[test]
fn sections_nest_and_skip_code_blocks() {
    let document = "# Title\n## 2. Two\nE001\n### 2.1 Two one\nE002\n```\n## 9. not a heading\n```\n\
                    ## 3. Three\nE003\n";
    let found = sections(document);
    let numbers: Vec<&str> = found.iter().map(|s| s.number.as_str()).collect();
    assert_eq!(numbers, ["2", "2.1", "3"]);
    assert!(
        found[0].text.contains("E002"),
        "a section holds its subsections"
    );
    assert!(!found[0].text.contains("E003"));
    assert!(found[1].text.contains("not a heading"));
    assert!(!found[1].text.contains("E001"));
}

/// The keys a table of the config accepts, as its unknown-key problem
/// lists them (read from the serde structs, the one list of keys).
fn accepted_keys(config: &str) -> Vec<String> {
    let problems = command::config::check_config(config);
    let Some(unknown) = problems.iter().find(|p| p.code == ErrorCode::UnknownKey) else {
        return Vec::new();
    };
    let Some((_, listed)) = unknown.message.split_once("valid here: ") else {
        return Vec::new();
    };
    listed
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

/// The keys a section's table documents: the first column, `| `key` |`.
fn documented_keys(section: &str) -> Vec<String> {
    section
        .lines()
        .filter_map(|line| line.strip_prefix("| `"))
        .filter_map(|rest| rest.split_once('`').map(|(key, _)| key.to_owned()))
        .collect()
}

/// Every key the config accepts is documented in its table of §2, and
/// every documented key is accepted: a key added to the structs without
/// its row (or a row left for a key that went) fails here.
#[test]
fn every_key_is_documented_in_its_table() -> Result<(), String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../doc/configure.md");
    let document =
        std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let sections = sections(&document);
    // A section documents its tables' keys, nested ones included.
    let tables: &[(&str, &[&str])] = &[
        ("2.1", &["zz_unknown = 1\n"]),
        (
            "2.2",
            &["[[listeners]]\naddress = \"127.0.0.1:1\"\nzz_unknown = 1\n"],
        ),
        (
            "2.3",
            &[
                "[clusters.a]\nzz_unknown = 1\n",
                "[clusters.a]\nhealth_check = { zz_unknown = 1 }\n",
            ],
        ),
        (
            "2.4",
            &["[clusters.a]\nfrontends = [{ address = \"127.0.0.1:1\", zz_unknown = 1 }]\n"],
        ),
        (
            "2.5",
            &["[clusters.a]\nbackends = [{ address = \"127.0.0.1:1\", zz_unknown = 1 }]\n"],
        ),
    ];
    for &(number, configs) in tables {
        let section = sections
            .iter()
            .find(|s| s.number == number)
            .ok_or_else(|| format!("no §{number}"))?;
        let mut accepted = Vec::new();
        for config in configs {
            let keys = accepted_keys(config);
            assert!(!keys.is_empty(), "§{number}: no key list from {config:?}");
            accepted.extend(keys);
        }
        let mut documented = documented_keys(&section.text);
        accepted.sort();
        documented.sort();
        assert_eq!(
            accepted, documented,
            "§{number}: keys accepted vs documented"
        );
    }
    Ok(())
}
