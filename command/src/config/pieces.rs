//! A config text cut into its top-level pieces: the root table, then one
//! piece per table header (`[clusters.<id>]`, `[[listeners]]`,
//! `[sources.docker]`...), each running to the next header.
//!
//! Owns: finding the headers with the TOML lexer the config parser itself
//! uses (`toml_parser`), so a header-like line inside a string or a
//! comment is never taken for one, and naming the cluster table a piece
//! opens. Must never: guess. A header that names `clusters` in any other
//! form (`[clusters]`, `[clusters.a.health_check]`, `[[clusters.a]]`), a
//! key that does not decode, or a bracket the lexer's tokens do not close
//! is `None`, and the caller reads the whole file instead. Deciding what a
//! piece declares is the config parser's job, not this one's.

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

/// The pieces of `text`, in file order, the root first (maybe empty);
/// `None` when a header is not one this module is sure about.
pub(super) fn pieces(text: &str) -> Option<Vec<Piece<'_>>> {
    let source = Source::new(text);
    let mut tokens = source.lex();
    let mut starts = vec![(0, Opens::Root)];
    // Nested arrays and inline tables: a `[` inside them is a value.
    let mut depth = 0usize;
    // Where the current line starts, while only blanks precede the token.
    let mut line_start = Some(0);
    while let Some(token) = tokens.next() {
        let at_line_start = line_start.take();
        match token.kind() {
            TokenKind::Newline => line_start = Some(token.span().end()),
            TokenKind::Whitespace => line_start = at_line_start,
            TokenKind::LeftSquareBracket => match at_line_start {
                Some(begin) if depth == 0 => starts.push((begin, header(&source, &mut tokens)?)),
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
    if depth != 0 {
        return None;
    }
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
        line += piece.bytes().filter(|&b| b == b'\n').count();
    }
    Some(pieces)
}

/// Reads a header after its first `[`, through its closing bracket(s):
/// what it opens, or `None` when unsure.
fn header(source: &Source<'_>, tokens: &mut Lexer<'_>) -> Option<Opens> {
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
                if array && tokens.next()?.kind() != TokenKind::RightSquareBracket {
                    return None;
                }
                return match keys.as_slice() {
                    [first, ..] if first != "clusters" => Some(Opens::Other),
                    [_, id] if !array => Some(Opens::Cluster(id.clone())),
                    _ => None,
                };
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
}
