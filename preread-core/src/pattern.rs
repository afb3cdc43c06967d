//! SNI patterns and their validator.
//!
//! Owns: [`SniPattern`], [`DnsName`] and [`validate_sni_pattern`], the one
//! validator that the config file, the command socket and state replay all
//! call, so a pattern means the same thing whichever way it arrived. Must
//! never: hand out an `SniPattern` that did not pass the validator (the
//! payload's constructor is private), perform I/O, or panic on any input.

use core::fmt;

/// The longest pattern accepted, in bytes, after normalization: the DNS limit
/// on a name written without its trailing dot.
pub const MAX_PATTERN_LEN: usize = 253;

/// The longest DNS label, in bytes.
pub const MAX_LABEL_LEN: usize = 63;

/// A validated, normalized DNS name: one or more labels of 1 to 63 ASCII
/// lowercase letters, digits and hyphens, no label starting or ending with a
/// hyphen, no trailing dot. Only [`validate_sni_pattern`] builds one.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DnsName(Box<str>);

impl DnsName {
    /// The name as text.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The name as the bytes a normalized SNI is compared with.
    #[must_use]
    pub fn as_bytes(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

impl fmt::Display for DnsName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What a frontend's SNI matches.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SniPattern {
    /// `a.example.com`: that name only.
    Exact(DnsName),
    /// `*.example.com` (payload `example.com`): exactly one more label in
    /// front of the suffix, the certificate rule of RFC 6125 §6.4.3.
    OneLabel(DnsName),
    /// `**.example.com` (payload `example.com`): one or more labels in front
    /// of the suffix.
    AnyDepth(DnsName),
}

impl SniPattern {
    /// The exact name, or the suffix after a wildcard: the route table's key.
    #[must_use]
    pub fn name(&self) -> &DnsName {
        match self {
            Self::Exact(name) | Self::OneLabel(name) | Self::AnyDepth(name) => name,
        }
    }

    /// The wildcard label as written in the canonical form, `""` for an
    /// exact name.
    #[must_use]
    pub fn wildcard(&self) -> &'static str {
        match self {
            Self::Exact(_) => "",
            Self::OneLabel(_) => "*",
            Self::AnyDepth(_) => "**",
        }
    }
}

/// The canonical form: `a.example.com`, `*.example.com`, `**.example.com`;
/// validating it again yields the same pattern.
impl fmt::Display for SniPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Exact(name) => write!(f, "{name}"),
            Self::OneLabel(_) | Self::AnyDepth(_) => {
                write!(f, "{}.{}", self.wildcard(), self.name())
            }
        }
    }
}

/// Why a string is not a valid SNI pattern. Each message says what to
/// change.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum PatternError {
    /// Nothing left once a trailing dot is stripped.
    Empty,
    /// A character outside ASCII, at this byte offset of the input.
    NonAscii {
        /// Byte offset in the input.
        position: usize,
        /// The character.
        character: char,
    },
    /// A space, tab or other ASCII whitespace, at this byte offset.
    Whitespace {
        /// Byte offset in the input.
        position: usize,
    },
    /// Longer than [`MAX_PATTERN_LEN`] once normalized.
    TooLong {
        /// The normalized length in bytes.
        len: usize,
    },
    /// Two dots in a row, or a leading dot.
    EmptyLabel,
    /// A label longer than [`MAX_LABEL_LEN`].
    LabelTooLong {
        /// The label.
        label: String,
    },
    /// A label holding something other than letters, digits and hyphens.
    InvalidCharacter {
        /// The label.
        label: String,
        /// The first character it may not hold.
        character: char,
    },
    /// A label that starts or ends with a hyphen.
    HyphenAtLabelEdge {
        /// The label.
        label: String,
    },
    /// A `*` inside a label (`a*.example.com`, `***.example.com`).
    PartialWildcard {
        /// The label.
        label: String,
    },
    /// A wildcard label that is not the left-most one
    /// (`a.*.example.com`, `*.*.example.com`).
    WildcardNotLeftmost,
    /// A wildcard followed by fewer than two labels (`*.com`, `*`).
    WildcardTooBroad {
        /// What follows the wildcard.
        suffix: String,
    },
}

impl fmt::Display for PatternError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Empty => {
                f.write_str("the SNI pattern is empty: write a host name such as `a.example.com`")
            }
            Self::NonAscii {
                position,
                character,
            } => write!(
                f,
                "the SNI pattern holds the non-ASCII character {character:?} at byte {position}: \
                 write internationalized names in their punycode form (`xn--...`)"
            ),
            Self::Whitespace { position } => write!(
                f,
                "the SNI pattern holds whitespace at byte {position}: remove it (check the quoting)"
            ),
            Self::TooLong { len } => write!(
                f,
                "the SNI pattern is {len} bytes long: a DNS name is at most {MAX_PATTERN_LEN} bytes"
            ),
            Self::EmptyLabel => f.write_str(
                "the SNI pattern has an empty label (two dots in a row, or a leading dot): \
                 remove the extra dot",
            ),
            Self::LabelTooLong { label } => write!(
                f,
                "the label `{label}` is {} bytes long: a DNS label is at most {MAX_LABEL_LEN} bytes",
                label.len()
            ),
            Self::InvalidCharacter { label, character } => write!(
                f,
                "the label `{label}` holds {character:?}: labels may hold only ASCII letters, \
                 digits and hyphens"
            ),
            Self::HyphenAtLabelEdge { label } => write!(
                f,
                "the label `{label}` starts or ends with a hyphen: remove the hyphen"
            ),
            Self::PartialWildcard { label } => write!(
                f,
                "the label `{label}` holds a `*`: a wildcard must be the whole left-most label, \
                 `*` for exactly one label or `**` for one or more"
            ),
            Self::WildcardNotLeftmost => f.write_str(
                "a wildcard may only be the left-most label, and only once: \
                 write `*.example.com` or `**.example.com`",
            ),
            Self::WildcardTooBroad { suffix } => write!(
                f,
                "the wildcard is followed by `{suffix}`: a wildcard needs at least two labels \
                 after it (`*.example.com`, not `*.com` or `*`), so one frontend cannot capture \
                 a whole top-level domain"
            ),
        }
    }
}

impl core::error::Error for PatternError {}

/// Validates and normalizes an SNI pattern: ASCII lowercase, one trailing dot
/// stripped, then the rules of [`PatternError`]. Exact names may have a
/// single label (`localhost`); wildcards need two labels after them.
///
/// Call it wherever a pattern enters the process (config file, command
/// socket, state replay); nothing else builds an [`SniPattern`].
pub fn validate_sni_pattern(input: &str) -> Result<SniPattern, PatternError> {
    // Character checks run on the input as typed, so positions match it.
    if let Some((position, character)) = input.char_indices().find(|(_, c)| !c.is_ascii()) {
        return Err(PatternError::NonAscii {
            position,
            character,
        });
    }
    if let Some(position) = input.bytes().position(|b| b.is_ascii_whitespace()) {
        return Err(PatternError::Whitespace { position });
    }
    let lower = input.to_ascii_lowercase();
    let name = lower.strip_suffix('.').unwrap_or(&lower);
    if name.is_empty() {
        return Err(PatternError::Empty);
    }
    if name.len() > MAX_PATTERN_LEN {
        return Err(PatternError::TooLong { len: name.len() });
    }
    let (wildcard, suffix) = match name.split_once('.') {
        Some((first @ ("*" | "**"), rest)) => (Some(first), rest),
        None if name == "*" || name == "**" => {
            return Err(PatternError::WildcardTooBroad {
                suffix: String::new(),
            });
        }
        _ => (None, name),
    };
    let mut labels = 0_usize;
    for label in suffix.split('.') {
        check_label(label)?;
        labels += 1;
    }
    let suffix = DnsName(suffix.into());
    match wildcard {
        None => Ok(SniPattern::Exact(suffix)),
        Some(_) if labels < 2 => Err(PatternError::WildcardTooBroad {
            suffix: suffix.0.into(),
        }),
        Some("*") => Ok(SniPattern::OneLabel(suffix)),
        Some(_) => Ok(SniPattern::AnyDepth(suffix)),
    }
}

/// Checks one label that is not a leading wildcard.
fn check_label(label: &str) -> Result<(), PatternError> {
    if label.is_empty() {
        return Err(PatternError::EmptyLabel);
    }
    if label.contains('*') {
        return Err(if label == "*" || label == "**" {
            PatternError::WildcardNotLeftmost
        } else {
            PatternError::PartialWildcard {
                label: label.to_owned(),
            }
        });
    }
    if label.len() > MAX_LABEL_LEN {
        return Err(PatternError::LabelTooLong {
            label: label.to_owned(),
        });
    }
    if let Some(character) = label
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '-'))
    {
        return Err(PatternError::InvalidCharacter {
            label: label.to_owned(),
            character,
        });
    }
    if label.starts_with('-') || label.ends_with('-') {
        return Err(PatternError::HyphenAtLabelEdge {
            label: label.to_owned(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(input: &str) -> SniPattern {
        match validate_sni_pattern(input) {
            Ok(pattern) => pattern,
            Err(e) => panic!("{input:?} refused: {e}"),
        }
    }

    fn err(input: &str) -> PatternError {
        match validate_sni_pattern(input) {
            Ok(pattern) => panic!("{input:?} accepted as {pattern}"),
            Err(e) => e,
        }
    }

    #[test]
    fn accepts_and_normalizes() {
        assert_eq!(ok("A.Example.COM.").to_string(), "a.example.com");
        assert_eq!(ok("*.Example.com").to_string(), "*.example.com");
        assert_eq!(ok("**.example.com.").to_string(), "**.example.com");
        assert_eq!(ok("localhost").to_string(), "localhost");
        assert_eq!(
            ok("xn--bcher-kva.example").to_string(),
            "xn--bcher-kva.example"
        );
        assert_eq!(ok("a-1.b2.example.com").to_string(), "a-1.b2.example.com");
        assert_eq!(ok("*.co.uk").to_string(), "*.co.uk");
    }

    #[test]
    fn kinds_and_names() {
        let exact = ok("a.example.com");
        assert!(matches!(&exact, SniPattern::Exact(n) if n.as_str() == "a.example.com"));
        let one = ok("*.example.com");
        assert!(matches!(&one, SniPattern::OneLabel(n) if n.as_str() == "example.com"));
        let any = ok("**.example.com");
        assert!(matches!(&any, SniPattern::AnyDepth(n) if n.as_str() == "example.com"));
        assert_eq!(any.name().as_bytes(), b"example.com");
        assert_eq!(any.wildcard(), "**");
        assert_eq!(exact.wildcard(), "");
    }

    #[test]
    fn canonical_form_round_trips() {
        for input in ["A.B.C", "*.B.C.", "**.b.c", "x"] {
            let pattern = ok(input);
            assert_eq!(ok(&pattern.to_string()), pattern);
        }
    }

    #[test]
    fn refuses_empty() {
        assert_eq!(err(""), PatternError::Empty);
        assert_eq!(err("."), PatternError::Empty);
    }

    #[test]
    fn refuses_empty_labels() {
        assert_eq!(err("a..b"), PatternError::EmptyLabel);
        assert_eq!(err(".a.b"), PatternError::EmptyLabel);
        // Only one trailing dot is stripped.
        assert_eq!(err("a.b.."), PatternError::EmptyLabel);
        assert_eq!(err("*..example.com"), PatternError::EmptyLabel);
    }

    #[test]
    fn refuses_misplaced_wildcards() {
        assert!(
            matches!(err("a*.example.com"), PatternError::PartialWildcard { label } if label == "a*")
        );
        assert!(matches!(
            err("***.example.com"),
            PatternError::PartialWildcard { .. }
        ));
        assert!(matches!(
            err("a.b*c.com"),
            PatternError::PartialWildcard { .. }
        ));
        assert_eq!(err("*.*.example.com"), PatternError::WildcardNotLeftmost);
        assert_eq!(err("a.*.example.com"), PatternError::WildcardNotLeftmost);
        assert_eq!(err("**.**.example.com"), PatternError::WildcardNotLeftmost);
        assert_eq!(err("example.*"), PatternError::WildcardNotLeftmost);
    }

    #[test]
    fn refuses_too_broad_wildcards() {
        assert!(
            matches!(err("*.com"), PatternError::WildcardTooBroad { suffix } if suffix == "com")
        );
        assert!(matches!(
            err("**.com."),
            PatternError::WildcardTooBroad { .. }
        ));
        assert!(matches!(err("*"), PatternError::WildcardTooBroad { .. }));
        assert!(matches!(err("**"), PatternError::WildcardTooBroad { .. }));
        assert!(matches!(err("*."), PatternError::WildcardTooBroad { .. }));
    }

    #[test]
    fn refuses_bad_characters() {
        assert_eq!(
            err("é.example.com"),
            PatternError::NonAscii {
                position: 0,
                character: 'é'
            }
        );
        assert_eq!(
            err("a .example.com"),
            PatternError::Whitespace { position: 1 }
        );
        assert_eq!(
            err(" a.example.com"),
            PatternError::Whitespace { position: 0 }
        );
        assert_eq!(
            err("a.example.com\n"),
            PatternError::Whitespace { position: 13 }
        );
        assert!(matches!(
            err("_srv.example.com"),
            PatternError::InvalidCharacter { character: '_', .. }
        ));
        assert!(matches!(
            err("a:443"),
            PatternError::InvalidCharacter { character: ':', .. }
        ));
    }

    #[test]
    fn refuses_hyphen_at_label_edges() {
        assert!(
            matches!(err("-a.example.com"), PatternError::HyphenAtLabelEdge { label } if label == "-a")
        );
        assert!(matches!(
            err("a.example-.com"),
            PatternError::HyphenAtLabelEdge { .. }
        ));
    }

    #[test]
    fn length_limits() {
        let label = "a".repeat(MAX_LABEL_LEN);
        ok(&format!("{label}.com"));
        assert!(matches!(
            err(&format!("{label}a.com")),
            PatternError::LabelTooLong { .. }
        ));
        // 4 labels of 63 bytes and 3 dots: 255 bytes.
        let long = [label.as_str(); 4].join(".");
        assert_eq!(err(&long), PatternError::TooLong { len: 255 });
        let max = format!("{}.{}", [label.as_str(); 3].join("."), "a".repeat(61));
        assert_eq!(max.len(), MAX_PATTERN_LEN);
        ok(&max);
        ok(&format!("{max}."));
    }

    #[test]
    fn error_messages_say_what_to_change() {
        let message = err("*.com").to_string();
        assert!(message.contains("at least two labels"), "{message}");
        let message = err("a*.example.com").to_string();
        assert!(message.contains("whole left-most label"), "{message}");
    }
}
