//! The part of a hello's JA4 `a` section that its parse gives for
//! nothing ([`SectionHint`]), so that a `deny_ja4` list can let most
//! hellos through before the cache or any walk of their lists.
//!
//! Owns: the hint of a parsed hello and of a written section, and that
//! the two agree (tested on every capture and on random extension sets).
//! Must never: differ from the hint of the hello's own `a` section (a
//! list prefiltered by hints would then let a listed client through), or
//! guess when the parse could not tell the extensions apart.

use super::{A_LEN, ClientHello, Transport, alpn_chars, two_digits};

/// What of a hello's `a` section its parse gives for nothing: the
/// transport, whether it names a server, its extension count and the two
/// ALPN characters (`t··d··16h2`), without the version and the cipher
/// count, which cost a walk of their lists. Hellos whose hints differ
/// have different `a` sections, so a `deny_ja4` list none of whose
/// entries has the hint of a hello cannot hold its fingerprint: most
/// clients of a listener with a blocklist are let through on this alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SectionHint(u64);

impl SectionHint {
    /// The hint of an `a` section (of a fingerprint on a list).
    pub fn of_section(a: &[u8; A_LEN]) -> Self {
        Self(u64::from_le_bytes([
            a[0], a[3], a[6], a[7], a[8], a[9], 0, 0,
        ]))
    }

    /// The hint of a hello the parser returned, from its walk; `None`
    /// when the walk could not tell its extensions apart (a type twice),
    /// which only a full [`super::Ja4Facts`] counts.
    pub fn of_hello(hello: &ClientHello<'_>, transport: Transport) -> Option<Self> {
        let set = &hello.extension_set;
        if !set.is_exact() {
            return None;
        }
        let [tens, ones] = two_digits(set.len());
        let [first, last] = alpn_chars(hello.alpn);
        let named = if set.has_low(0) { b'd' } else { b'i' };
        Some(Self(u64::from_le_bytes([
            transport.letter(),
            named,
            tens,
            ones,
            first,
            last,
            0,
            0,
        ])))
    }
}
