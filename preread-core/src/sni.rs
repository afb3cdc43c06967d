//! SNI normalization: the one place a ClientHello `host_name` becomes the
//! name the route table is searched with.
//!
//! Owns: [`HostName`], a normalized host name held inline. Runs on every
//! connection, so it must never allocate; it must never accept a name the
//! architecture calls malformed (empty, longer than 255 bytes, not printable
//! ASCII), and never panic on any byte string.

use core::fmt;
use core::hash::{Hash, Hasher};

/// The longest `host_name` accepted, in bytes, before the trailing dot is
/// stripped.
pub const MAX_HOST_NAME_LEN: usize = 255;

/// A normalized SNI host name: ASCII lowercase, without its trailing dot,
/// 1 to 255 bytes of printable ASCII (0x21..=0x7e).
///
/// It is not a validated DNS name: the wire may carry `_`, empty labels or
/// other oddities. Such names simply match no route pattern, since patterns
/// are validated (see [`crate::pattern`]).
#[derive(Clone, Copy)]
pub struct HostName {
    bytes: [u8; MAX_HOST_NAME_LEN],
    len: u8,
}

impl HostName {
    /// Normalizes a raw `host_name` from the ClientHello: ASCII lowercase,
    /// exactly one trailing dot stripped (`a..` becomes `a.`, which matches
    /// nothing, rather than silently becoming `a`).
    ///
    /// Returns `None`, meaning a malformed ClientHello, when `raw` is longer
    /// than 255 bytes, holds a byte outside 0x21..=0x7e, or is empty once
    /// the dot is stripped.
    #[must_use]
    pub fn normalize(raw: &[u8]) -> Option<Self> {
        if raw.len() > MAX_HOST_NAME_LEN {
            return None;
        }
        if !raw.iter().all(|b| (0x21..=0x7e).contains(b)) {
            return None;
        }
        let name = raw.strip_suffix(b".").unwrap_or(raw);
        if name.is_empty() {
            return None;
        }
        let mut bytes = [0; MAX_HOST_NAME_LEN];
        for (slot, b) in bytes.iter_mut().zip(name) {
            *slot = b.to_ascii_lowercase();
        }
        let len = u8::try_from(name.len()).ok()?;
        Some(Self { bytes, len })
    }

    /// The normalized name, as the route table expects it.
    #[must_use]
    pub fn as_bytes(&self) -> &[u8] {
        // `len` is a u8, so it never exceeds the 255-byte array.
        &self.bytes[..usize::from(self.len)]
    }

    /// The normalized name as text, for logs and metrics labels.
    #[must_use]
    pub fn as_str(&self) -> &str {
        // `normalize` admits only printable ASCII, so the checked conversion
        // cannot fail; it is used instead of `unsafe` because validating at
        // most 255 ASCII bytes is cheap and only done when logging.
        core::str::from_utf8(self.as_bytes()).unwrap_or_default()
    }
}

// Equality and hashing look only at the name, not the whole 255-byte buffer:
// cheaper on short names, and correct whatever the unused tail holds.
impl PartialEq for HostName {
    fn eq(&self, other: &Self) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl Eq for HostName {}

impl Hash for HostName {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_bytes().hash(state);
    }
}

impl fmt::Debug for HostName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("HostName").field(&self.as_str()).finish()
    }
}

impl fmt::Display for HostName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn norm(raw: &str) -> Option<String> {
        HostName::normalize(raw.as_bytes()).map(|h| h.as_str().to_owned())
    }

    #[test]
    fn lowercases_and_strips_one_trailing_dot() {
        assert_eq!(norm("A.Example.COM.").as_deref(), Some("a.example.com"));
        assert_eq!(norm("a.example.com").as_deref(), Some("a.example.com"));
    }

    #[test]
    fn strips_only_one_dot() {
        assert_eq!(norm("a..").as_deref(), Some("a."));
    }

    fn hash_of(name: &HostName) -> u64 {
        use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
        BuildHasherDefault::<DefaultHasher>::default().hash_one(name)
    }

    #[test]
    fn equality_and_hash_follow_the_normalized_name() {
        let (Some(a), Some(same), Some(b)) = (
            HostName::normalize(b"A.Example.com."),
            HostName::normalize(b"a.example.com"),
            HostName::normalize(b"b.example.com"),
        ) else {
            panic!("valid test names")
        };
        assert_eq!(a, same);
        assert_eq!(hash_of(&a), hash_of(&same));
        assert_ne!(a, b);
        assert_ne!(
            hash_of(&a),
            hash_of(&b),
            "distinct names spread over buckets"
        );
    }

    #[test]
    fn refuses_empty_names() {
        assert_eq!(norm(""), None);
        assert_eq!(norm("."), None);
    }

    #[test]
    fn refuses_bytes_outside_printable_ascii() {
        assert_eq!(norm("a b.com"), None);
        assert_eq!(norm("a\tb.com"), None);
        assert_eq!(HostName::normalize(b"a\x7f.com"), None);
        assert_eq!(HostName::normalize(b"a\x00.com"), None);
        assert_eq!(HostName::normalize("é.com".as_bytes()), None);
    }

    #[test]
    fn keeps_other_printable_ascii() {
        assert_eq!(norm("_Srv.A-B.com").as_deref(), Some("_srv.a-b.com"));
        assert_eq!(norm(".a").as_deref(), Some(".a"));
    }

    #[test]
    fn length_limit_applies_to_the_raw_name() {
        let max = "a".repeat(MAX_HOST_NAME_LEN);
        assert_eq!(norm(&max).map(|n| n.len()), Some(MAX_HOST_NAME_LEN));
        assert_eq!(norm(&format!("{max}a")), None);
        // 256 bytes with a trailing dot is still over the wire limit.
        assert_eq!(norm(&format!("{max}.")), None);
        let with_dot = format!("{}.", "a".repeat(MAX_HOST_NAME_LEN - 1));
        assert_eq!(
            norm(&with_dot).map(|n| n.len()),
            Some(MAX_HOST_NAME_LEN - 1)
        );
    }

    #[test]
    fn equality_and_hash_follow_the_name() {
        use core::hash::BuildHasher;
        let a = HostName::normalize(b"a.com.").expect("valid name");
        let b = HostName::normalize(b"A.COM").expect("valid name");
        assert_eq!(a, b);
        let state = hashbrown::DefaultHashBuilder::default();
        assert_eq!(state.hash_one(a), state.hash_one(b));
    }

    #[test]
    fn display_and_debug() {
        let name = HostName::normalize(b"A.com").expect("valid name");
        assert_eq!(name.to_string(), "a.com");
        assert_eq!(format!("{name:?}"), "HostName(\"a.com\")");
    }
}
