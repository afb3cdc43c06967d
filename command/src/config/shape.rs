//! The file's shape, checked in one pass: every unknown key, wrong type and
//! missing key is reported, not just the first one serde meets.
//!
//! Owns: turning the text into its serde shape (the config file's
//! `RawConfig`, or a watched directory's fragment) whatever its shape problems
//! (each problem's entry is set aside and deserialization resumes), the
//! dotted path of a key (`clusters.www.frontends[0].alpn`), and the wording
//! of shape problems in the config's vocabulary, with the closest valid key
//! for a typo.
//!
//! Must never: hold a list of keys or types of its own. The serde structs
//! of `raw` are the one schema; this module only reads their errors, so a
//! key added there is checked here with nothing to change. Only a TOML
//! syntax error stops the check, since past it the file's structure is
//! unknown.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;

use serde::de::DeserializeOwned;
use toml::Spanned;
use toml::de::{DeArray, DeTable, DeValue};

use super::lines::LineIndex;
use super::{ConfigProblem, Location};
use crate::codes::ErrorCode;
use crate::spelling::quoted;

/// Past this many shape problems the check stops: each one costs a pass
/// over the file, and a file this broken is better fixed from the top.
pub(super) const MAX_SHAPE_PROBLEMS: usize = 100;

/// The file's serde shape, with the entries that did not fit set aside,
/// and one problem per entry set aside. `raw` is `None` when the check had
/// to stop (a syntax error, or [`MAX_SHAPE_PROBLEMS`]).
pub(super) struct Shaped<T> {
    pub(super) raw: Option<T>,
    pub(super) problems: Vec<ConfigProblem>,
    /// Where the tables start that lost an entry: what they declare is
    /// not what the file says, so their refusals would mislead.
    pub(super) damaged: BTreeSet<Location>,
}

pub(super) fn shape<T: DeserializeOwned>(text: &str, lines: &LineIndex<'_>) -> Shaped<T> {
    // A file that fits, the usual case, is read once.
    if let Ok(raw) = toml::from_str::<T>(text) {
        return Shaped {
            raw: Some(raw),
            problems: Vec::new(),
            damaged: BTreeSet::new(),
        };
    }
    let mut table = match DeTable::parse(text) {
        Ok(table) => table,
        Err(syntax) => {
            let at = syntax.span().map_or(0, |span| span.start);
            return Shaped {
                raw: None,
                damaged: BTreeSet::new(),
                problems: vec![ConfigProblem {
                    location: Some(lines.location(at)),
                    code: ErrorCode::InvalidToml,
                    message: format!(
                        "invalid TOML: {}; the check stopped here, since the rest of the file \
                         cannot be read past a syntax error: fix it and run the check again",
                        syntax.message().trim_end()
                    ),
                }],
            };
        }
    };
    let mut problems = Vec::new();
    let mut damaged = BTreeSet::new();
    let mut removed = Removed::default();
    while problems.len() < MAX_SHAPE_PROBLEMS {
        let error = match T::deserialize(toml::de::Deserializer::from(table.clone())) {
            Ok(raw) => {
                return Shaped {
                    raw: Some(raw),
                    problems,
                    damaged,
                };
            }
            Err(error) => error,
        };
        let span = error.span().unwrap_or(0..0);
        let unknown = error
            .message()
            .strip_prefix("unknown field `")
            .and_then(|rest| rest.split_once('`'))
            .map(|(key, _)| key);
        let found = Found::of(&table, &span, unknown);
        let as_written = Found {
            path: removed.original(&found.path),
            value: found.value.clone(),
        };
        problems.push(ConfigProblem {
            location: Some(lines.location(span.start)),
            code: code(error.message()),
            message: word(text, error.message(), &as_written),
        });
        let Some((gone, parent)) = set_aside(&mut table, &found, error.message()) else {
            break;
        };
        if let Some(parent) = parent {
            damaged.insert(lines.location(parent));
        }
        removed.record(&gone);
    }
    let count = problems.len();
    if let Some(last) = problems.last_mut() {
        last.message.push_str(&format!(
            "; the check stopped here ({count} problems of the file's shape): fix these and \
             run it again"
        ));
    }
    Shaped {
        raw: None,
        problems,
        damaged,
    }
}

/// The tables taken out of lists so far, by their index in the file, so
/// that a later problem in the same list is named by its index as written
/// (`listeners[2]`), not by its place in what is left.
#[derive(Default)]
struct Removed(BTreeMap<Vec<Step>, Vec<usize>>);

impl Removed {
    /// `index` of the list at `list`, as now, to its index in the file.
    fn in_file(&self, list: &[Step], index: usize) -> usize {
        let mut original = index;
        for &gone in self.0.get(list).into_iter().flatten() {
            if gone <= original {
                original += 1;
            }
        }
        original
    }

    fn original(&self, path: &[Step]) -> Vec<Step> {
        path.iter()
            .enumerate()
            .map(|(at, step)| match step {
                Step::Index(index) => Step::Index(self.in_file(&path[..at], *index)),
                Step::Key(_) => step.clone(),
            })
            .collect()
    }

    /// Notes a removed entry when it was an item of a list.
    fn record(&mut self, gone: &[Step]) {
        if let Some((Step::Index(index), list)) = gone.split_last() {
            let original = self.in_file(list, *index);
            let removed = self.0.entry(list.to_vec()).or_default();
            let at = removed.partition_point(|&r| r < original);
            removed.insert(at, original);
        }
    }
}

/// One step of a path into the file.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Step {
    Key(String),
    Index(usize),
}

/// The deepest entry of the file at an error's span (on its key for an
/// unknown key, else on its value): its path and its value's span.
#[derive(Debug, Default)]
struct Found {
    path: Vec<Step>,
    value: Option<Range<usize>>,
}

impl Found {
    /// For an unknown key, only an entry of that name can be the one
    /// (the span of a `[[listeners]]` header covers its first table too).
    fn of(table: &Spanned<DeTable<'_>>, span: &Range<usize>, unknown: Option<&str>) -> Self {
        let mut search = Search {
            span,
            unknown,
            found: Self::default(),
            path: Vec::new(),
        };
        search.table(table.get_ref());
        search.found
    }
}

fn covers(outer: &Range<usize>, inner: &Range<usize>) -> bool {
    outer.start <= inner.start && inner.end <= outer.end && outer.start < outer.end
}

/// A value's span covers `span`, or one of its items' does (a list of
/// `[[tables]]` has no span of its own).
fn value_covers(value: &Spanned<DeValue<'_>>, span: &Range<usize>) -> bool {
    covers(&value.span(), span)
        || matches!(value.get_ref(), DeValue::Array(items)
            if items.iter().any(|item| covers(&item.span(), span)))
}

/// Walks every entry (a table header's span is the header alone, so a
/// parent's span is no guide) and keeps the deepest one at the span.
struct Search<'s> {
    span: &'s Range<usize>,
    unknown: Option<&'s str>,
    found: Found,
    path: Vec<Step>,
}

impl Search<'_> {
    fn keep(&mut self, value: &Spanned<DeValue<'_>>) {
        self.found = Found {
            path: self.path.clone(),
            value: Some(value.span()),
        };
    }

    fn table(&mut self, table: &DeTable<'_>) {
        for (key, value) in table {
            self.path.push(Step::Key(key.get_ref().to_string()));
            let deeper = self.path.len() >= self.found.path.len();
            let here = match self.unknown {
                Some(unknown) => {
                    **key.get_ref() == *unknown
                        && (covers(&key.span(), self.span) || value_covers(value, self.span))
                }
                None => covers(&key.span(), self.span),
            };
            if here && deeper {
                self.keep(value);
            }
            self.value(value);
            self.path.pop();
        }
    }

    fn value(&mut self, value: &Spanned<DeValue<'_>>) {
        let deeper = self.path.len() > self.found.path.len();
        if self.unknown.is_none() && deeper && covers(&value.span(), self.span) {
            self.keep(value);
        }
        match value.get_ref() {
            DeValue::Table(table) => self.table(table),
            DeValue::Array(array) => {
                for (index, item) in array.iter().enumerate() {
                    self.path.push(Step::Index(index));
                    self.value(item);
                    self.path.pop();
                }
            }
            _ => {}
        }
    }
}

/// Removes what the error is about, so that the next pass gets past it: the
/// entry with the unknown key or the wrong value; for a missing key, the
/// table that lacks it; a wrong item of a list of values takes its list
/// with it (the list's meaning is unknown without it), while a table of a
/// list of tables goes alone, so that its siblings are still checked.
/// Returns the path removed and where the table that lost an entry
/// starts (`None` for the file's root, or when a whole table of a list
/// went), or `None` when nothing could be removed.
fn set_aside(
    table: &mut Spanned<DeTable<'_>>,
    found: &Found,
    message: &str,
) -> Option<(Vec<Step>, Option<usize>)> {
    let mut path = found.path.clone();
    let missing = message.starts_with("missing field");
    while let Some(Step::Index(_)) = path.last() {
        let is_table = value_at(table.get_ref(), &path)
            .is_some_and(|item| matches!(item.get_ref(), DeValue::Table(_)));
        if missing || is_table {
            break;
        }
        path.pop();
    }
    let (last, parent) = path.split_last()?;
    let damaged = match last {
        Step::Key(_) if !parent.is_empty() => {
            value_at(table.get_ref(), parent).map(|parent| parent.span().start)
        }
        _ => None,
    };
    remove(table.get_mut(), &path).then_some((path, damaged))
}

fn value_at<'t, 'i>(table: &'t DeTable<'i>, path: &[Step]) -> Option<&'t Spanned<DeValue<'i>>> {
    let (Step::Key(key), rest) = path.split_first()? else {
        return None;
    };
    let mut value = table.get(key.as_str())?;
    for step in rest {
        value = match (step, value.get_ref()) {
            (Step::Key(key), DeValue::Table(table)) => table.get(key.as_str())?,
            (Step::Index(index), DeValue::Array(array)) => array.get(*index)?,
            _ => return None,
        };
    }
    Some(value)
}

fn remove(table: &mut DeTable<'_>, path: &[Step]) -> bool {
    match path {
        [Step::Key(key)] => table.remove(key.as_str()).is_some(),
        [Step::Key(key), rest @ ..] => table
            .get_mut(key.as_str())
            .is_some_and(|value| remove_in(value.get_mut(), rest)),
        _ => false,
    }
}

fn remove_in(value: &mut DeValue<'_>, path: &[Step]) -> bool {
    match (value, path) {
        (DeValue::Table(table), path) => remove(table, path),
        (DeValue::Array(array), [Step::Index(index)]) => {
            if *index >= array.len() {
                return false;
            }
            let items = std::mem::replace(array, DeArray::new());
            *array = items
                .into_iter()
                .enumerate()
                .filter(|(at, _)| at != index)
                .map(|(_, item)| item)
                .collect();
            true
        }
        (DeValue::Array(array), [Step::Index(index), rest @ ..]) => array
            .get_mut(*index)
            .is_some_and(|item| remove_in(item.get_mut(), rest)),
        _ => false,
    }
}

fn code(serde: &str) -> ErrorCode {
    if serde.starts_with("unknown field") {
        ErrorCode::UnknownKey
    } else {
        ErrorCode::InvalidToml
    }
}

/// `clusters.www.frontends[0].alpn`; a key that is not a bare TOML key is
/// quoted, as the file must write it (`clusters."api.v2"`).
fn dotted(path: &[Step]) -> String {
    let mut shown = String::new();
    for step in path {
        match step {
            Step::Key(key) => {
                if !shown.is_empty() {
                    shown.push('.');
                }
                let bare = !key.is_empty()
                    && key
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
                if bare {
                    shown.push_str(key);
                } else {
                    shown.push_str(&quoted(key));
                }
            }
            Step::Index(index) => shown.push_str(&format!("[{index}]")),
        }
    }
    shown
}

/// A value as the file writes it, shortened past 40 characters.
fn as_written(text: &str, span: &Range<usize>) -> String {
    let written = text.get(span.clone()).unwrap_or("").trim();
    let mut chars = written.chars();
    let short: String = chars.by_ref().take(40).collect();
    if chars.next().is_some() {
        format!("{short}…")
    } else {
        short
    }
}

/// serde's message in the config's words.
fn word(text: &str, serde: &str, found: &Found) -> String {
    let serde = serde.trim_end();
    let at = dotted(&found.path);
    if serde.starts_with("unknown field") {
        let parent = found
            .path
            .split_last()
            .map_or(&[][..], |(_, parent)| parent);
        return unknown_key(serde, &dotted(parent));
    }
    if let Some(rest) = serde.strip_prefix("missing field ") {
        let table = if at.is_empty() { "the file" } else { &at };
        return format!(
            "{table} lacks the required key {rest}: add it (doc/configure.md lists what each \
             table needs)"
        );
    }
    let expected = serde
        .rsplit_once(", expected ")
        .map(|(_, expected)| config_words(expected));
    match (expected, &found.value) {
        (Some(expected), Some(value)) => {
            let written = as_written(text, value);
            let hint = if expected.starts_with("a list") && written.starts_with('"') {
                format!(": write [{written}]")
            } else {
                String::new()
            };
            let key = if at.is_empty() { "the file" } else { &at };
            format!("{key}: expected {expected}, found {written}{hint}")
        }
        _ if at.is_empty() => serde.to_owned(),
        _ => format!("{at}: {serde}"),
    }
}

/// serde's names of types, as the config documentation says them.
fn config_words(expected: &str) -> String {
    let expected = expected.trim();
    let integer = expected.len() > 1
        && (expected.starts_with('i') || expected.starts_with('u'))
        && expected[1..].bytes().all(|b| b.is_ascii_digit());
    if integer {
        return "an integer".to_owned();
    }
    match expected {
        "f32" | "f64" => "a number".to_owned(),
        "a boolean" => "true or false".to_owned(),
        "a sequence" => "a list".to_owned(),
        "a map" => "a table".to_owned(),
        other => other.to_owned(),
    }
}

/// serde's "unknown field `x`, expected one of `a`, `b`" in the config's
/// words, with the closest valid key when one is close enough to be a typo.
fn unknown_key(serde: &str, table: &str) -> String {
    let quoted: Vec<&str> = serde.split('`').skip(1).step_by(2).collect();
    let Some((key, valid)) = quoted.split_first() else {
        return serde.to_owned();
    };
    let closest = valid
        .iter()
        .map(|candidate| (strsim::damerau_levenshtein(key, candidate), *candidate))
        .filter(|(distance, candidate)| *distance <= 2.max(candidate.len() / 4))
        .min();
    let listed = valid
        .iter()
        .map(|k| format!("`{k}`"))
        .collect::<Vec<_>>()
        .join(", ");
    let place = if table.is_empty() {
        String::new()
    } else {
        format!(" in {table}")
    };
    let valid_here = if listed.is_empty() {
        "no key is valid here".to_owned()
    } else {
        format!("valid here: {listed}")
    };
    match closest {
        Some((_, suggestion)) => {
            format!("unknown key `{key}`{place}: did you mean `{suggestion}`? ({valid_here})")
        }
        None => format!("unknown key `{key}`{place} ({valid_here})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::config::raw::RawConfig;

    fn problems(text: &str) -> Vec<ConfigProblem> {
        shape::<RawConfig>(text, &LineIndex::new(text)).problems
    }

    #[test]
    fn an_unknown_key_gets_the_closest_valid_one() {
        let serde = "unknown field `worker_cuont`, expected one of `worker_count`, `buffer_size`";
        assert_eq!(
            unknown_key(serde, ""),
            "unknown key `worker_cuont`: did you mean `worker_count`? (valid here: \
             `worker_count`, `buffer_size`)"
        );
        let far = "unknown field `colour`, expected one of `worker_count`, `buffer_size`";
        assert_eq!(
            unknown_key(far, "listeners[0]"),
            "unknown key `colour` in listeners[0] (valid here: `worker_count`, `buffer_size`)"
        );
        assert_eq!(unknown_key("unknown field", ""), "unknown field");
    }

    #[test]
    fn every_shape_problem_is_reported_in_one_pass() {
        let text = "worker_cuont = 2\nbuffer_size = \"big\"\n[[listeners]]\n\
                    address = \"127.0.0.1:8443\"\ncolour = 1\n[[listeners]]\nexpect_proxy = 1\n\
                    [clusters.www]\nfrontends = [{ address = \"127.0.0.1:8443\", alpn = \"h2\" }]\n";
        let found = problems(text);
        let shown: Vec<String> = found.iter().map(ToString::to_string).collect();
        assert_eq!(found.len(), 6, "{shown:#?}");
        let has = |needle: &str| {
            let found = shown.iter().any(|line| line.contains(needle));
            assert!(found, "{needle} not in {shown:#?}");
            found
        };
        assert!(has(
            "1:1: E002: unknown key `worker_cuont`: did you mean `worker_count`?"
        ));
        assert!(has(
            "2:15: E001: buffer_size: expected an integer, found \"big\""
        ));
        assert!(has("E002: unknown key `colour` in listeners[0]"));
        assert!(has(
            "E001: listeners[1].expect_proxy: expected true or false, found 1"
        ));
        assert!(has("E001: listeners[1] lacks the required key `address`"));
        assert!(has(
            "9:51: E001: clusters.www.frontends[0].alpn: expected a list, found \"h2\": write [\"h2\"]"
        ));
    }

    /// A table taken out of its list (it lacks a key) does not renumber
    /// the ones after it in later messages.
    #[test]
    fn list_items_keep_their_index_in_the_file() {
        let text = "[[listeners]]\naddress = \"127.0.0.1:1\"\n[[listeners]]\nexpect_proxy = true\n\
                    [[listeners]]\nexpect_proxy = true\n[[listeners]]\naddress = \"127.0.0.1:4\"\n\
                    colour = 1\n";
        let found = problems(text);
        let shown: Vec<&str> = found.iter().map(|p| p.message.as_str()).collect();
        assert_eq!(shown.len(), 3, "{shown:#?}");
        assert!(
            shown[0].starts_with("listeners[1] lacks the required key `address`"),
            "{shown:#?}"
        );
        assert!(
            shown[1].starts_with("listeners[2] lacks the required key `address`"),
            "{shown:#?}"
        );
        assert!(
            shown[2].starts_with("unknown key `colour` in listeners[3]"),
            "{shown:#?}"
        );
    }

    #[test]
    fn a_duration_key_names_its_unit() {
        let found =
            problems("[[listeners]]\naddress = \"127.0.0.1:1\"\nsni_preread_timeout = true\n");
        assert_eq!(found.len(), 1);
        assert_eq!(
            found[0].message,
            "listeners[0].sni_preread_timeout: expected milliseconds as an integer or a \
             duration string like \"5s\" or \"1500ms\", found true"
        );
    }

    #[test]
    fn a_syntax_error_stops_and_says_so() {
        let found = problems("worker_count = 1\nbuffer_size = [\n");
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].code, ErrorCode::InvalidToml);
        assert!(
            found[0].message.contains("the check stopped here"),
            "{}",
            found[0]
        );
    }

    #[test]
    fn paths_quote_what_a_bare_key_cannot_hold() {
        let path = [
            Step::Key("clusters".into()),
            Step::Key("api.v2".into()),
            Step::Key("frontends".into()),
            Step::Index(3),
        ];
        assert_eq!(dotted(&path), "clusters.\"api.v2\".frontends[3]");
    }

    #[test]
    fn a_file_too_broken_stops_at_the_cap() {
        let text: String = (0..MAX_SHAPE_PROBLEMS + 5)
            .map(|i| format!("unknown_{i} = 1\n"))
            .collect();
        let shaped = shape::<RawConfig>(&text, &LineIndex::new(&text));
        assert!(shaped.raw.is_none());
        assert_eq!(shaped.problems.len(), MAX_SHAPE_PROBLEMS);
        let last = shaped.problems.last().map(|p| p.message.clone());
        assert!(
            last.as_deref()
                .is_some_and(|m| m.contains("the check stopped here")),
            "{last:?}"
        );
    }
}
