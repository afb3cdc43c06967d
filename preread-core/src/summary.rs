//! What a complete ClientHello showed of itself, routed or not: the facts
//! an access log records beside the name.
//!
//! Owns: [`HelloSummary`] (ECH, the highest TLS version offered, the size
//! of the records) and [`TlsVersion`], with the one rule for "highest"
//! (GREASE values skipped, SSL/TLS versions above any other code point,
//! `legacy_version` when `supported_versions` is absent) and the names a
//! version is shown by. Must never: keep a borrow of the window, or be
//! filled from a ClientHello the parser did not accept whole.

use core::fmt;

use preread_parser::tls::{ClientHello, EchKind};

/// The facts of one complete ClientHello.
///
/// `#[non_exhaustive]`: later versions may summarize more of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct HelloSummary {
    /// The `encrypted_client_hello` extension's type, when present: an
    /// `Outer` hello was routed (or refused) on its public name.
    pub ech: Option<EchKind>,
    /// The highest version the client offered.
    pub version: TlsVersion,
    /// Bytes of the TLS records that carry the ClientHello, record headers
    /// included; an inbound PROXY header and the bytes after the hello are
    /// not counted.
    pub len: usize,
}

impl HelloSummary {
    /// The summary of `hello`.
    pub(crate) fn of(hello: &ClientHello<'_>) -> Self {
        let offered = hello.supported_versions.and_then(|versions| {
            versions
                .iter()
                .filter(|&v| !is_grease(v))
                .max_by_key(|&v| (v >> 8 == 0x03, v))
        });
        Self {
            ech: hello.ech,
            version: TlsVersion(offered.unwrap_or(hello.legacy_version)),
            len: hello.end,
        }
    }
}

/// RFC 8701's reserved values, `0x?a?a` with both bytes equal: offered to
/// keep servers tolerant, never meant.
fn is_grease(version: u16) -> bool {
    version & 0x0f0f == 0x0a0a && version >> 8 == version & 0xff
}

/// A TLS protocol version as sent on the wire.
///
/// Shown as `1.3`, `1.2`, `1.1`, `1.0`, `ssl3`, or in hex (`0x7f1c`) for a
/// code point without a name (a draft, a future version).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TlsVersion(pub u16);

impl fmt::Display for TlsVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            0x0304 => f.write_str("1.3"),
            0x0303 => f.write_str("1.2"),
            0x0302 => f.write_str("1.1"),
            0x0301 => f.write_str("1.0"),
            0x0300 => f.write_str("ssl3"),
            other => write!(f, "0x{other:04x}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{TlsVersion, is_grease};

    #[test]
    fn versions_read_as_operators_name_them() {
        let shown = [0x0304, 0x0303, 0x0302, 0x0301, 0x0300, 0x7f1c, 0xfefd]
            .map(|v| TlsVersion(v).to_string());
        assert_eq!(
            shown,
            ["1.3", "1.2", "1.1", "1.0", "ssl3", "0x7f1c", "0xfefd"]
        );
    }

    #[test]
    fn grease_is_the_sixteen_reserved_values() {
        let grease: Vec<u16> = (0..=u16::MAX).filter(|&v| is_grease(v)).collect();
        assert_eq!(grease.len(), 16);
        assert_eq!(grease.first(), Some(&0x0a0a));
        assert_eq!(grease.last(), Some(&0xfafa));
        assert!(!is_grease(0x0304) && !is_grease(0x0a1a));
    }
}
