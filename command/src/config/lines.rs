//! Where a problem is: byte offsets of the config text mapped to
//! `line:column`, and the helpers that turn a spanned value into a located
//! problem.
//!
//! Owns: [`LineIndex`] (1-based lines, columns counted in characters), the
//! problem list every check appends to, and the integer and duration range
//! checks shared by the settings, the declarations and the warnings.
//!
//! Must never: decide what a key means or what its default is; it only
//! places and words problems the other parts find.

use core::fmt;

use toml::Spanned;

use super::raw::RawDuration;
use super::{ConfigProblem, Location};
use crate::codes::ErrorCode;
use crate::duration::{self, DurationError, Unit};

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

/// Why a duration key holds no milliseconds preread can carry; the message
/// leaves out the key's name, which its caller puts in front.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum DurationValueError {
    /// A bare integer below zero, or too large once made milliseconds.
    OutOfRange { count: i64, unit: Unit },
    /// A duration string preread cannot take.
    Text(DurationError),
}

impl fmt::Display for DurationValueError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::OutOfRange { count, unit } => write!(
                f,
                "{count} is out of range: use a number of {} of at least 0, or a duration \
                 string like \"5s\"",
                unit.name()
            ),
            Self::Text(error) => error.fmt(f),
        }
    }
}

impl core::error::Error for DurationValueError {}

/// The milliseconds a duration key holds, or why it holds none that
/// preread can carry.
pub(super) fn millis_of<const SECONDS: bool>(
    value: &RawDuration<SECONDS>,
) -> Result<u64, DurationValueError> {
    let unit = RawDuration::<SECONDS>::UNIT;
    match value {
        RawDuration::Integer(count) => u64::try_from(*count)
            .ok()
            .and_then(|millis| millis.checked_mul(unit.millis()))
            .ok_or(DurationValueError::OutOfRange {
                count: *count,
                unit,
            }),
        RawDuration::Text(text) => duration::millis_of_text(text).map_err(DurationValueError::Text),
    }
}

/// A duration key in whole milliseconds within `[min, max]`, or a problem
/// at the value. Shown as written: `key = 5` or `key = "5s"`.
pub(super) fn duration_millis<const SECONDS: bool>(
    value: &Spanned<RawDuration<SECONDS>>,
    key: &str,
    (min, max): (u64, u64),
    problems: &mut Problems<'_>,
) -> Option<u64> {
    let written = match value.get_ref() {
        RawDuration::Integer(count) => count.to_string(),
        RawDuration::Text(text) => format!("\"{text}\""),
    };
    let message = match millis_of(value.get_ref()) {
        Ok(millis) if (min..=max).contains(&millis) => return Some(millis),
        Ok(millis) if millis < min => format!(
            "{key} = {written} is out of range: use at least {}",
            duration::shown(min)
        ),
        Ok(_) => format!(
            "{key} = {written} is out of range: use at most {} ({max} ms)",
            duration::shown(max)
        ),
        Err(reason) => match value.get_ref() {
            RawDuration::Integer(_) => format!("{key} = {reason}"),
            RawDuration::Text(_) => format!("{key}: {reason}"),
        },
    };
    problems.push(value.span().start, ErrorCode::InvalidValue, message);
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_duration_out_of_range_says_what_to_write() {
        let negative = millis_of(&RawDuration::<true>::Integer(-5));
        assert_eq!(
            negative,
            Err(DurationValueError::OutOfRange {
                count: -5,
                unit: Unit::Seconds
            })
        );
        assert_eq!(
            negative.map_err(|e| e.to_string()),
            Err(
                "-5 is out of range: use a number of seconds of at least 0, or a duration \
                 string like \"5s\""
                    .into()
            )
        );
        let text = millis_of(&RawDuration::<false>::Text("1500us".into()));
        assert!(
            matches!(
                &text,
                Err(DurationValueError::Text(
                    DurationError::BelowMillisecond { .. }
                ))
            ),
            "{text:?}"
        );
        assert!(
            text.is_err_and(|e| e.to_string().contains("round it to ms")),
            "the string's own message"
        );
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
