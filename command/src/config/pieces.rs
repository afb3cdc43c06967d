//! A config text cut into its top-level pieces: the root table, then one
//! piece per table header (`[clusters.<id>]`, `[[listeners]]`,
//! `[sources.docker]`...), each running to the next header.
//!
//! Owns: finding the headers, and naming the cluster table a piece opens.
//! [`pieces`] is the cut a reload makes on every new text: a scan of the
//! bytes that knows TOML's strings, comments and brackets, and hands each
//! header line to the TOML lexer the config parser itself uses
//! (`toml_parser`). [`checked_pieces`] also makes the same cut from that
//! lexer's tokens over the whole text, slower, and answers only when both
//! agree: an outline is made that way (`outline`), so a text the scan
//! would cut wrong never gets one. Must never: guess. A header that names
//! `clusters` in any other form (`[clusters]`, `[clusters.a.health_check]`,
//! `[[clusters.a]]`), a key that does not decode, a string that does not
//! end, or a bracket that does not close is `None`, and the caller reads
//! the whole file instead. Deciding what a piece declares is the config
//! parser's job, not this one's.

use memchr::{memchr, memchr2, memchr3};
use toml_parser::lexer::{Lexer, Token, TokenKind};
use toml_parser::{ParseError, Source};

/// What a piece's header opens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Opens {
    /// Nothing: the root table, before the first header.
    Root,
    /// `[clusters.<id>]`, with the id decoded.
    Cluster(String),
    /// Any other table or array of tables.
    Other,
}

/// One top-level piece of a config text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Piece<'t> {
    /// Its bytes: from the start of its header's line (or of the text) to
    /// the start of the next header's line (or the end of the text).
    pub(super) text: &'t str,
    /// The 1-based line of its first byte.
    pub(super) line: usize,
    pub(super) opens: Opens,
}

/// Where each piece starts, and what it opens.
type Starts = Vec<(usize, Opens)>;

const BOM: &[u8] = b"\xEF\xBB\xBF";

/// The pieces of `text`, in file order, the root first (maybe empty);
/// `None` when the scan is not sure of a header, a string or a bracket.
pub(super) fn pieces(text: &str) -> Option<Vec<Piece<'_>>> {
    split(text, &scan(text)?)
}

/// [`pieces`], when the TOML lexer's tokens cut `text` at the same places
/// into the same tables; `None` otherwise.
pub(super) fn checked_pieces(text: &str) -> Option<Vec<Piece<'_>>> {
    let starts = scan(text)?;
    if exact_starts(text)? != starts {
        return None;
    }
    split(text, &starts)
}

/// The pieces of `text` that start at `starts`.
fn split<'t>(text: &'t str, starts: &Starts) -> Option<Vec<Piece<'t>>> {
    let mut pieces = Vec::with_capacity(starts.len());
    let mut line = 1;
    for (index, (start, opens)) in starts.iter().enumerate() {
        let end = starts.get(index + 1).map_or(text.len(), |(next, _)| *next);
        let piece = text.get(*start..end)?;
        pieces.push(Piece {
            text: piece,
            line,
            opens: opens.clone(),
        });
        line += memchr::memchr_iter(b'\n', piece.as_bytes()).count();
    }
    Some(pieces)
}

/// The piece starts of `text` by a scan of its bytes.
fn scan(text: &str) -> Option<Starts> {
    let bytes = text.as_bytes();
    let mut starts = vec![(0, Opens::Root)];
    // Nested arrays and inline tables: a `[` inside them is a value.
    let mut depth = 0usize;
    let mut at = if bytes.starts_with(BOM) { BOM.len() } else { 0 };
    // Where the current line starts, while only blanks precede `at`.
    let mut line_start = Some(0);
    while let Some(&byte) = bytes.get(at) {
        match byte {
            b'\n' => {
                at += 1;
                line_start = Some(at);
                continue;
            }
            b' ' | b'\t' => {
                at += 1;
                continue;
            }
            _ => {}
        }
        let first_on_line = line_start.take();
        at = match byte {
            b'#' => memchr(b'\n', &bytes[at..]).map_or(bytes.len(), |n| at + n),
            b'"' if bytes[at..].starts_with(b"\"\"\"") => multi_line(bytes, at + 3, b'"')?,
            b'\'' if bytes[at..].starts_with(b"'''") => multi_line(bytes, at + 3, b'\'')?,
            b'"' => basic(bytes, at + 1)?,
            b'\'' => literal(bytes, at + 1)?,
            b'[' => match first_on_line {
                Some(begin) if depth == 0 => {
                    let (opens, end) = header_line(text, at)?;
                    starts.push((begin, opens));
                    end
                }
                _ => {
                    depth += 1;
                    at + 1
                }
            },
            b'{' => {
                depth += 1;
                at + 1
            }
            b']' | b'}' => {
                depth = depth.checked_sub(1)?;
                at + 1
            }
            // Nothing but these bytes can start a string, a comment, a
            // bracket or a line: the rest of a line's keys and values is
            // skipped at once.
            _ => bytes[at..]
                .iter()
                .position(|&b| MEANINGFUL[usize::from(b)])
                .map_or(bytes.len(), |n| at + n),
        };
    }
    (depth == 0).then_some(starts)
}

/// The bytes [`scan`] acts on past a line's first token.
const MEANINGFUL: [bool; 256] = {
    let mut table = [false; 256];
    let mut index = 0;
    let bytes = b"\n\"'#[]{}";
    while index < bytes.len() {
        table[bytes[index] as usize] = true;
        index += 1;
    }
    table
};

/// The end of a basic string whose content starts at `at`; `None` when
/// the line ends first.
fn basic(bytes: &[u8], mut at: usize) -> Option<usize> {
    loop {
        at += memchr3(b'"', b'\\', b'\n', bytes.get(at..)?)?;
        match bytes[at] {
            b'"' => return Some(at + 1),
            // An escape is two bytes at least; what follows is content.
            b'\\' if bytes.get(at + 1).is_some_and(|&b| b != b'\n') => at += 2,
            _ => return None,
        }
    }
}

/// The end of a literal string whose content starts at `at`; `None` when
/// the line ends first.
fn literal(bytes: &[u8], at: usize) -> Option<usize> {
    let end = at + memchr2(b'\'', b'\n', bytes.get(at..)?)?;
    (bytes[end] == b'\'').then_some(end + 1)
}

/// The end of a multi-line string whose content starts at `at`, closed by
/// three `quote`s (and up to two more, which belong to the content); a
/// basic one (`"`) has escapes. `None` when the text ends first.
fn multi_line(bytes: &[u8], mut at: usize, quote: u8) -> Option<usize> {
    loop {
        let found = if quote == b'"' {
            memchr2(quote, b'\\', bytes.get(at..)?)?
        } else {
            memchr(quote, bytes.get(at..)?)?
        };
        at += found;
        if bytes[at] == b'\\' {
            at += 2;
            continue;
        }
        let run = bytes[at..].iter().take_while(|&&b| b == quote).count();
        at += run;
        if run >= 3 {
            return Some(at);
        }
    }
}

/// Reads the header whose `[` is at `at`, with the TOML lexer: what it
/// opens, and where it ends.
fn header_line(text: &str, at: usize) -> Option<(Opens, usize)> {
    let rest = text.get(at..)?;
    let line = rest.get(..memchr(b'\n', rest.as_bytes()).unwrap_or(rest.len()))?;
    let source = Source::new(line);
    let mut tokens = source.lex();
    if tokens.next()?.kind() != TokenKind::LeftSquareBracket {
        return None;
    }
    let (opens, end) = header(&source, &mut tokens)?;
    Some((opens, at + end))
}

/// The piece starts of `text` from the TOML lexer's tokens.
fn exact_starts(text: &str) -> Option<Starts> {
    let source = Source::new(text);
    let mut tokens = source.lex();
    let mut starts = vec![(0, Opens::Root)];
    let mut depth = 0usize;
    let mut line_start = Some(0);
    while let Some(token) = tokens.next() {
        let first_on_line = line_start.take();
        match token.kind() {
            TokenKind::Newline => line_start = Some(token.span().end()),
            TokenKind::Whitespace => line_start = first_on_line,
            TokenKind::LeftSquareBracket => match first_on_line {
                Some(begin) if depth == 0 => starts.push((begin, header(&source, &mut tokens)?.0)),
                _ => depth += 1,
            },
            TokenKind::LeftCurlyBracket => depth += 1,
            TokenKind::RightSquareBracket | TokenKind::RightCurlyBracket => {
                depth = depth.checked_sub(1)?;
            }
            TokenKind::Eof => break,
            _ => {}
        }
    }
    (depth == 0).then_some(starts)
}

/// Reads a header after its first `[`, through its closing bracket(s):
/// what it opens and the end of its last bracket, or `None` when unsure.
fn header(source: &Source<'_>, tokens: &mut Lexer<'_>) -> Option<(Opens, usize)> {
    let mut keys = Vec::new();
    let mut array = false;
    let mut expect_key = true;
    let mut first = true;
    loop {
        let token = tokens.next()?;
        match token.kind() {
            TokenKind::LeftSquareBracket if first => array = true,
            TokenKind::Whitespace => {}
            TokenKind::Dot if !expect_key => expect_key = true,
            TokenKind::Atom | TokenKind::BasicString | TokenKind::LiteralString if expect_key => {
                keys.push(key(source, token)?);
                expect_key = false;
            }
            TokenKind::RightSquareBracket if !expect_key => {
                let mut end = token.span().end();
                if array {
                    let close = tokens.next()?;
                    if close.kind() != TokenKind::RightSquareBracket {
                        return None;
                    }
                    end = close.span().end();
                }
                let opens = match keys.as_slice() {
                    [first, ..] if first != "clusters" => Opens::Other,
                    [_, id] if !array => Opens::Cluster(id.clone()),
                    _ => return None,
                };
                return Some((opens, end));
            }
            _ => return None,
        }
        first = false;
    }
}

/// A key as TOML decodes it (escapes resolved, quotes gone).
fn key(source: &Source<'_>, token: Token) -> Option<String> {
    let raw = source.get(token)?;
    let mut decoded = String::new();
    let mut error: Option<ParseError> = None;
    raw.decode_key(&mut decoded, &mut error);
    error.is_none().then_some(decoded)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opened(text: &str) -> Option<Vec<(usize, Opens, &str)>> {
        assert_eq!(scan(text), exact_starts(text), "the two cuts of {text:?}");
        let pieces = pieces(text)?;
        assert_eq!(
            pieces.iter().map(|p| p.text).collect::<String>(),
            text,
            "the pieces make the text"
        );
        Some(
            pieces
                .into_iter()
                .map(|p| (p.line, p.opens, p.text))
                .collect(),
        )
    }

    fn cluster(id: &str) -> Opens {
        Opens::Cluster(id.to_owned())
    }

    #[test]
    fn each_header_starts_a_piece_at_its_line() {
        let text = "worker_count = 2\n\n[[listeners]]\naddress = \"127.0.0.1:1\"\n  \
                    [clusters.a] # the first\nfrontends = [\n  [1],\n]\n\
                    [clusters.\"b.c\"]\n[ clusters . 'd' ]\n[sources.docker]\n";
        assert_eq!(
            opened(text),
            Some(vec![
                (1, Opens::Root, "worker_count = 2\n\n"),
                (
                    3,
                    Opens::Other,
                    "[[listeners]]\naddress = \"127.0.0.1:1\"\n"
                ),
                (
                    5,
                    cluster("a"),
                    "  [clusters.a] # the first\nfrontends = [\n  [1],\n]\n"
                ),
                (9, cluster("b.c"), "[clusters.\"b.c\"]\n"),
                (10, cluster("d"), "[ clusters . 'd' ]\n"),
                (11, Opens::Other, "[sources.docker]\n"),
            ])
        );
        assert_eq!(opened(""), Some(vec![(1, Opens::Root, "")]));
        let crlf = "a = 1\r\n[clusters.x]\r\nb = 2";
        assert_eq!(
            opened(crlf),
            Some(vec![
                (1, Opens::Root, "a = 1\r\n"),
                (2, cluster("x"), "[clusters.x]\r\nb = 2")
            ])
        );
    }

    #[test]
    fn header_lines_in_strings_comments_and_values_are_not_headers() {
        let text = "[clusters.a]\nnote = \"\"\"\n[clusters.b]\n\"\"\"\nlit = '''\n[x]\n'''\n\
                    # [clusters.c]\nlist = [\n[clusters.d]\n]\ninline = {\n  k = [\n[e]\n] }\n\
                    s = \"[clusters.f]\"\n";
        let found = opened(text).map(|p| p.into_iter().map(|(_, o, _)| o).collect::<Vec<_>>());
        assert_eq!(found, Some(vec![Opens::Root, cluster("a")]));
    }

    #[test]
    fn a_key_is_decoded_as_toml_does() {
        let found = opened("[clusters.\"\\u0061b\"]\n['clusters'.c]\n");
        let found = found.map(|p| p.into_iter().map(|(_, o, _)| o).collect::<Vec<_>>());
        assert_eq!(found, Some(vec![Opens::Root, cluster("ab"), cluster("c")]));
    }

    #[test]
    fn any_other_header_naming_clusters_is_unsure() {
        for text in [
            "[clusters]\n",
            "[clusters.a.health_check]\n",
            "[[clusters.a]]\n",
            "[\"clusters\"]\n",
            "[clusters.\"\\q\"]\n",
            "[clusters.a\n",
            "[clusters..a]\n",
            "[[listeners]\n",
            "[ [listeners]]\n",
            "a = [\n[clusters.b]\n",
            "a = ]\n",
        ] {
            assert_eq!(opened(text), None, "{text:?}");
        }
        assert_eq!(
            opened("[\"listeners\".x]\n").map(|p| p.len()),
            Some(2),
            "a table that is not a cluster's is just another piece"
        );
    }

    #[test]
    fn a_byte_order_mark_goes_with_the_first_line() {
        let text = "\u{feff}[clusters.a]\n";
        // The lexer skips the mark: it goes with the header on its line.
        let found = opened(text);
        assert_eq!(
            found,
            Some(vec![
                (1, Opens::Root, ""),
                (1, cluster("a"), "\u{feff}[clusters.a]\n")
            ])
        );
    }

    /// TOML values of every kind of string and bracket, most holding
    /// header-like lines or quotes and brackets that must not count.
    const VALUES: &[&str] = &[
        "1",
        "2024-05-27T07:32:00Z",
        "\"plain\"",
        "\"esc \\\" [clusters.x] \\\\\"",
        "'lit \"x\" [y] #'",
        "\"\"\"\n[clusters.ml]\n\"\"\"",
        "\"\"\"a\\\"\"\"b\"\"\"",
        "\"\"\"two quotes end it\"\"\"\"\"",
        "\"\"\"line \\\n  [clusters.continued]\n\"\"\"",
        "'''\n[lit.ml] ''\n'''",
        "''''quoted'''''",
        "[\n  \"[clusters.arr]\",\n  [1, 2], # ]\n]",
        "[ { a = \"]\" }, { b = [] } ]",
        "{\n  a = 1,\n  b = \"[x]\",\n}",
        "\"unterminated",
        "[1, 2",
    ];

    proptest::proptest! {
        #[test]
        fn the_scan_cuts_every_valid_text_as_the_lexer_does(
            items in proptest::collection::vec(
                (0..6_usize, proptest::sample::select(VALUES)),
                0..16,
            ),
            crlf: bool,
        ) {
            let mut text = String::new();
            for (index, (kind, value)) in items.iter().enumerate() {
                let line = match kind {
                    0 => format!("[clusters.c{index}]"),
                    1 => format!("  [t{index}] # header"),
                    2 => "[[listeners]]".to_owned(),
                    3 => format!("# [clusters.commented{index}] {value}"),
                    _ => format!("k{index} = {value}"),
                };
                text.push_str(&line);
                text.push_str(if crlf { "\r\n" } else { "\n" });
            }
            if toml::de::DeTable::parse(&text).is_ok() {
                proptest::prop_assert_eq!(scan(&text), exact_starts(&text), "{:?}", text);
            }
        }
    }
}
