//! The series names a PromQL expression reads, so that a test can check
//! that the shipped alert rules and dashboard query only families the proxy
//! serves.
//!
//! Owns: [`series_names`], a small PromQL tokenizer that tells series names
//! from function and aggregation names, keywords, label names (in braces
//! and in the lists after `by`, `without`, `on`, `ignoring`, `group_left`,
//! `group_right`), strings, numbers, durations, ranges and Grafana
//! variables; and [`variable_query_series`], the same for Grafana's
//! `label_values(…)` and `query_result(…)` variable queries. Must never:
//! guess. What it cannot read for sure (a selector by `__name__` or with no
//! name, an unbalanced bracket, an unknown character) is an error, since an
//! empty answer would pass any check.

use std::fmt;

/// Why an expression could not be read; `at` is a byte offset in it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReadError {
    /// A string that does not end.
    UnterminatedString { at: usize },
    /// A bracket that is never closed, or a close without its open.
    Unbalanced { at: usize },
    /// A selector matches the name itself (`{__name__=~"…"}`): which series
    /// it reads is not in the text.
    NameMatcher { at: usize },
    /// Braces with no series name before them select every series.
    NamelessSelector { at: usize },
    /// A character PromQL has no use for.
    Unexpected { at: usize, found: char },
    /// A Grafana variable query other than `label_values(…)` or
    /// `query_result(…)`, or one whose arguments are not as they take them.
    VariableQuery { query: String },
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::UnterminatedString { at } => write!(f, "the string at byte {at} never ends"),
            Self::Unbalanced { at } => write!(f, "the bracket at byte {at} has no partner"),
            Self::NameMatcher { at } => write!(
                f,
                "the selector at byte {at} matches __name__: name the series instead"
            ),
            Self::NamelessSelector { at } => write!(
                f,
                "the selector at byte {at} has no series name: name the series"
            ),
            Self::Unexpected { at, found } => {
                write!(f, "{found:?} at byte {at} is not PromQL")
            }
            Self::VariableQuery { query } => write!(
                f,
                "{query:?} is not label_values(SELECTOR, LABEL), label_values(LABEL) or \
                 query_result(EXPR)"
            ),
        }
    }
}

impl std::error::Error for ReadError {}

/// Aggregation operators: they may be followed by `by (…)` or `without (…)`
/// rather than by their parenthesis.
const AGGREGATIONS: &[&str] = &[
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "limitk",
    "limit_ratio",
];

/// Keywords whose parenthesis holds label names, not an expression.
const LABEL_LISTS: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];

/// Other words that are not series: set operators, modifiers, literals.
const KEYWORDS: &[&str] = &[
    "and", "or", "unless", "bool", "offset", "atan2", "inf", "nan",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Token<'a> {
    Ident(&'a str),
    Open,
    Close,
    /// Label matchers in braces, already checked.
    Matchers {
        at: usize,
    },
    /// Anything else that carries no name: numbers, durations, ranges,
    /// strings, operators, commas, Grafana variables.
    Other,
}

fn is_ident_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_' || c == ':'
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == ':'
}

/// The end (exclusive) of the string that opens at `at`.
fn string_end(text: &str, at: usize) -> Result<usize, ReadError> {
    let bytes = text.as_bytes();
    let quote = bytes[at];
    let mut i = at + 1;
    while i < bytes.len() {
        match bytes[i] {
            // Backquoted strings are raw: no escapes.
            b'\\' if quote != b'`' => i += 2,
            b if b == quote => return Ok(i + 1),
            _ => i += 1,
        }
    }
    Err(ReadError::UnterminatedString { at })
}

/// The end (exclusive) of the bracketed run that opens at `at` with `open`,
/// skipping strings inside.
fn group_end(text: &str, at: usize, open: u8, close: u8) -> Result<usize, ReadError> {
    let bytes = text.as_bytes();
    let mut depth = 0usize;
    let mut i = at;
    while i < bytes.len() {
        match bytes[i] {
            b'"' | b'\'' | b'`' => {
                i = string_end(text, i)?;
                continue;
            }
            b if b == open => depth += 1,
            b if b == close => {
                depth -= 1;
                if depth == 0 {
                    return Ok(i + 1);
                }
            }
            _ => {}
        }
        i += 1;
    }
    Err(ReadError::Unbalanced { at })
}

/// Checks the label matchers between `start` and `end` (the braces' inside):
/// a matcher on `__name__` hides which series are read.
fn check_matchers(text: &str, start: usize, end: usize) -> Result<(), ReadError> {
    let mut i = start;
    let bytes = text.as_bytes();
    while i < end {
        let c = char::from(bytes[i]);
        if matches!(c, '"' | '\'' | '`') {
            i = string_end(text, i)?;
        } else if is_ident_start(c) {
            let word_end = (i..end)
                .find(|&j| !is_ident(char::from(bytes[j])))
                .unwrap_or(end);
            if &text[i..word_end] == "__name__" {
                return Err(ReadError::NameMatcher { at: i });
            }
            i = word_end;
        } else {
            i += 1;
        }
    }
    Ok(())
}

fn tokens(expr: &str) -> Result<Vec<Token<'_>>, ReadError> {
    let bytes = expr.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    // Where each open parenthesis still unclosed is.
    let mut opens = Vec::new();
    while i < bytes.len() {
        let c = char::from(bytes[i]);
        match c {
            _ if c.is_ascii_whitespace() => i += 1,
            '#' => {
                i = expr[i..].find('\n').map_or(bytes.len(), |n| i + n);
            }
            '"' | '\'' | '`' => {
                i = string_end(expr, i)?;
                out.push(Token::Other);
            }
            '{' => {
                let end = group_end(expr, i, b'{', b'}')?;
                check_matchers(expr, i + 1, end - 1)?;
                out.push(Token::Matchers { at: i });
                i = end;
            }
            // Ranges, subqueries, and Grafana's `[[var]]`: durations and
            // variables, never a name.
            '[' => {
                i = group_end(expr, i, b'[', b']')?;
                out.push(Token::Other);
            }
            '(' => {
                opens.push(i);
                out.push(Token::Open);
                i += 1;
            }
            ')' => {
                opens.pop().ok_or(ReadError::Unbalanced { at: i })?;
                out.push(Token::Close);
                i += 1;
            }
            '}' | ']' => return Err(ReadError::Unbalanced { at: i }),
            // A Grafana variable, `$name` or `${name…}`.
            '$' => {
                i += 1;
                if bytes.get(i) == Some(&b'{') {
                    i = group_end(expr, i, b'{', b'}')?;
                } else {
                    while i < bytes.len() && is_ident(char::from(bytes[i])) {
                        i += 1;
                    }
                }
                out.push(Token::Other);
            }
            // Numbers, durations (`5m`), hex and exponents.
            _ if c.is_ascii_digit() || c == '.' => {
                while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'.') {
                    i += 1;
                }
                out.push(Token::Other);
            }
            _ if is_ident_start(c) => {
                let start = i;
                while i < bytes.len() && is_ident(char::from(bytes[i])) {
                    i += 1;
                }
                out.push(Token::Ident(&expr[start..i]));
            }
            '+' | '-' | '*' | '/' | '%' | '^' | '=' | '!' | '<' | '>' | '~' | '@' | ',' => {
                out.push(Token::Other);
                i += 1;
            }
            _ => {
                let found = expr[i..].chars().next().unwrap_or(c);
                return Err(ReadError::Unexpected { at: i, found });
            }
        }
    }
    match opens.first() {
        None => Ok(out),
        Some(&at) => Err(ReadError::Unbalanced { at }),
    }
}

/// The series names `expr` reads, in order, repeats included.
pub fn series_names(expr: &str) -> Result<Vec<&str>, ReadError> {
    let tokens = tokens(expr)?;
    let mut names = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        let next = tokens.get(i + 1).copied();
        match tokens[i] {
            Token::Ident(text) if LABEL_LISTS.contains(&text) => {
                if next == Some(Token::Open) {
                    // The label list ends at the first close: it holds
                    // names and commas only.
                    i += tokens[i..]
                        .iter()
                        .position(|t| *t == Token::Close)
                        .unwrap_or(tokens.len() - i);
                }
            }
            Token::Ident(text)
                if KEYWORDS.contains(&text)
                    || AGGREGATIONS.contains(&text)
                    || next == Some(Token::Open) => {}
            Token::Ident(text) => names.push(text),
            Token::Matchers { at } => {
                let named = i
                    .checked_sub(1)
                    .and_then(|p| tokens.get(p))
                    .is_some_and(|t| matches!(t, Token::Ident(_)));
                if !named {
                    return Err(ReadError::NamelessSelector { at });
                }
            }
            Token::Open | Token::Close | Token::Other => {}
        }
        i += 1;
    }
    Ok(names)
}

/// The series names a Grafana Prometheus variable query reads:
/// `label_values(SELECTOR, LABEL)` reads the selector's, `label_values(LABEL)`
/// none, `query_result(EXPR)` the expression's.
pub fn variable_query_series(query: &str) -> Result<Vec<&str>, ReadError> {
    let bad = || ReadError::VariableQuery {
        query: query.to_owned(),
    };
    let trimmed = query.trim();
    let (function, rest) = trimmed.split_once('(').ok_or_else(bad)?;
    let inner = rest.strip_suffix(')').ok_or_else(bad)?;
    match function.trim() {
        "query_result" => series_names(inner),
        "label_values" => {
            let (selector, label) = match inner.rfind(',') {
                Some(comma) if !inner[comma..].contains('}') => {
                    (Some(&inner[..comma]), inner[comma + 1..].trim())
                }
                _ => (None, inner.trim()),
            };
            let is_label =
                label.chars().next().is_some_and(is_ident_start) && label.chars().all(is_ident);
            if !is_label {
                return Err(bad());
            }
            match selector {
                Some(selector) => {
                    let names = series_names(selector)?;
                    if names.len() == 1 {
                        Ok(names)
                    } else {
                        Err(bad())
                    }
                }
                None => Ok(Vec::new()),
            }
        }
        _ => Err(bad()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn functions_aggregations_labels_and_literals_are_not_series() -> Result<(), ReadError> {
        let expr = r#"
            histogram_quantile(0.99, sum by (listener, le) (
              rate(preread_preread_duration_seconds_bucket{instance=~"$instance", listener=~"a|b"}[$__rate_interval])
            )) > 1e-3
        "#;
        assert_eq!(
            series_names(expr)?,
            ["preread_preread_duration_seconds_bucket"]
        );
        Ok(())
    }

    #[test]
    fn both_sides_of_a_join_are_read_and_its_label_lists_are_not() -> Result<(), ReadError> {
        let expr = "(sum by (job, listener, reason) (rate(rejected_total[5m])) \
                    / on (job, listener) group_left sum(rate(accepted_total[5m])) without (x)) > 0.05 \
                    and on(listener, reason) sum without(reason)(rate(rejected_total[5m] offset 1h)) > bool 0.1 \
                    unless ignoring (a) group_right (b) up == 0";
        assert_eq!(
            series_names(expr)?,
            ["rejected_total", "accepted_total", "rejected_total", "up"]
        );
        Ok(())
    }

    #[test]
    fn strings_comments_subqueries_and_colons_are_handled() -> Result<(), ReadError> {
        let expr = "label_replace(max_over_time(job:requests:rate5m[1h:5m]), \"dst\", \"$1\", 'src', `(.*)`) # not_a_series\n + count_values(\"v\", generation)";
        assert_eq!(series_names(expr)?, ["job:requests:rate5m", "generation"]);
        Ok(())
    }

    #[test]
    fn what_cannot_be_read_is_an_error() {
        assert_eq!(
            series_names(r#"{__name__=~"preread_.*"}"#),
            Err(ReadError::NameMatcher { at: 1 })
        );
        assert_eq!(
            series_names(r#"sum({job="preread"})"#),
            Err(ReadError::NamelessSelector { at: 4 })
        );
        assert_eq!(
            series_names("sum(rate(x[5m])"),
            Err(ReadError::Unbalanced { at: 3 })
        );
        assert_eq!(
            series_names(r#"x{a="b}"#),
            Err(ReadError::UnterminatedString { at: 4 })
        );
        assert_eq!(
            series_names("x ; y"),
            Err(ReadError::Unexpected { at: 2, found: ';' })
        );
    }

    #[test]
    fn variable_queries() -> Result<(), ReadError> {
        assert_eq!(
            variable_query_series(r#"label_values(backend_up{instance=~"$instance"}, cluster)"#)?,
            ["backend_up"]
        );
        assert_eq!(
            variable_query_series(r#"label_values(accepted_total{a="x,y"}, listener)"#)?,
            ["accepted_total"]
        );
        assert!(variable_query_series("label_values(instance)")?.is_empty());
        assert_eq!(
            variable_query_series("query_result(topk(3, rate(a_total[5m])))")?,
            ["a_total"]
        );
        for bad in [
            "metrics(preread_.*)",
            "label_values(a, b c)",
            "label_values(a + b, c)",
            "label_values",
        ] {
            assert!(
                matches!(
                    variable_query_series(bad),
                    Err(ReadError::VariableQuery { .. })
                ),
                "{bad}"
            );
        }
        Ok(())
    }
}
