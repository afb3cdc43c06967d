//! Where a problem is: byte offsets of the config text mapped to
//! `line:column`, and the helpers that turn a spanned value into a located
//! problem.
//!
//! Owns: [`LineIndex`] (1-based lines, columns counted in characters), the
//! problem list every check appends to, the one problem of a text that does
//! not deserialize, and the integer range check shared by the settings and
//! the declarations.
//!
//! Must never: decide what a key means or what its default is; it only
//! places and words problems the other parts find.

use toml::Spanned;

use super::{ConfigProblem, Location};
use crate::codes::ErrorCode;

pub(super) struct Problems<'l> {
    pub(super) lines: &'l LineIndex<'l>,
    pub(super) list: Vec<ConfigProblem>,
}

impl Problems<'_> {
    pub(super) fn push(&mut self, offset: usize, code: ErrorCode, message: String) {
        self.list.push(ConfigProblem {
            location: Some(self.lines.location(offset)),
            code,
            message,
        });
    }
}

/// Byte offset → 1-based line and character column.
pub(super) struct LineIndex<'t> {
    text: &'t str,
    /// Byte offset of the start of each line.
    starts: Vec<usize>,
}

impl<'t> LineIndex<'t> {
    pub(super) fn new(text: &'t str) -> Self {
        let starts = std::iter::once(0)
            .chain(text.match_indices('\n').map(|(at, _)| at + 1))
            .collect();
        Self { text, starts }
    }

    pub(super) fn location(&self, offset: usize) -> Location {
        let mut offset = offset.min(self.text.len());
        while !self.text.is_char_boundary(offset) {
            offset -= 1;
        }
        // `starts[0] == 0 <= offset`, so the partition point is at least 1.
        let line = self.starts.partition_point(|&start| start <= offset);
        let start = self.starts[line - 1];
        let column = self.text[start..offset].chars().count() + 1;
        Location { line, column }
    }
}
/// The one problem of a text that does not deserialize.
pub(super) fn shape_problem(
    text: &str,
    lines: &LineIndex,
    error: &toml::de::Error,
) -> ConfigProblem {
    // A text that is not even a TOML table is a syntax error; past that, an
    // unknown key has its own code, and a wrong type or a missing key is
    // the file's shape again (`InvalidToml`).
    let (code, error, message) = match toml::from_str::<toml::Table>(text) {
        Err(syntax) => {
            let message = format!("invalid TOML: {}", syntax.message().trim_end());
            (ErrorCode::InvalidToml, syntax, message)
        }
        Ok(_) if error.message().starts_with("unknown field") => (
            ErrorCode::UnknownKey,
            error.clone(),
            unknown_key(error.message().trim_end()),
        ),
        Ok(_) => (
            ErrorCode::InvalidToml,
            error.clone(),
            error.message().trim_end().to_owned(),
        ),
    };
    ConfigProblem {
        location: Some(lines.location(error.span().map_or(0, |span| span.start))),
        code,
        message,
    }
}
/// serde's "unknown field `x`, expected one of `a`, `b`" in the config's
/// words, with the closest valid key when one is close enough to be a typo.
fn unknown_key(serde: &str) -> String {
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
    match closest {
        Some((_, suggestion)) => {
            format!("unknown key `{key}`: did you mean `{suggestion}`? (valid here: {listed})")
        }
        None => format!("unknown key `{key}` (valid here: {listed})"),
    }
}

/// A TOML integer in `[min, T::MAX]`, or a problem at the value.
pub(super) fn ranged<T: TryFrom<i64>>(
    value: &Spanned<i64>,
    key: &str,
    min: i64,
    problems: &mut Problems<'_>,
) -> Option<T> {
    let number = *value.get_ref();
    match T::try_from(number) {
        Ok(converted) if number >= min => Some(converted),
        _ => {
            problems.push(
                value.span().start,
                ErrorCode::InvalidValue,
                format!("{key} = {number} is out of range: use an integer of at least {min}"),
            );
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_key_gets_the_closest_valid_one() {
        let serde = "unknown field `worker_cuont`, expected one of `worker_count`, `buffer_size`";
        assert_eq!(
            unknown_key(serde),
            "unknown key `worker_cuont`: did you mean `worker_count`? (valid here: \
             `worker_count`, `buffer_size`)"
        );
        let far = "unknown field `colour`, expected one of `worker_count`, `buffer_size`";
        assert_eq!(
            unknown_key(far),
            "unknown key `colour` (valid here: `worker_count`, `buffer_size`)"
        );
        assert_eq!(unknown_key("unknown field"), "unknown field");
    }

    #[test]
    fn line_index_is_one_based_and_counts_characters() {
        let text = "ab\néé x\n\nlast";
        let lines = LineIndex::new(text);
        assert_eq!(lines.location(0), Location { line: 1, column: 1 });
        assert_eq!(lines.location(2), Location { line: 1, column: 3 });
        assert_eq!(lines.location(3), Location { line: 2, column: 1 });
        // After "éé " (5 bytes, 3 characters).
        assert_eq!(lines.location(8), Location { line: 2, column: 4 });
        // Inside a character: its start.
        assert_eq!(lines.location(4), Location { line: 2, column: 1 });
        assert_eq!(lines.location(10), Location { line: 3, column: 1 });
        assert_eq!(lines.location(usize::MAX), Location { line: 4, column: 5 });
        assert_eq!(
            LineIndex::new("").location(0),
            Location { line: 1, column: 1 }
        );
    }
}
