//! Why a window can never become a routable ClientHello.
//!
//! Owns: [`TlsError`] and the fault details behind it. The three kinds are
//! the proxy's reject taxonomy; the faults say which rule was broken, for
//! logs and `preread inspect`.

use core::fmt;

/// A window that can never become a ClientHello, whatever bytes follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TlsError {
    /// The first byte is not a handshake record (22), or the second is not a
    /// TLS major version (3): a plain-text protocol or an SSLv2-style hello.
    NotTls,
    /// The record layer broke a rule of RFC 8446 §5.1.
    MalformedRecord(RecordFault),
    /// The handshake message is not a well-formed ClientHello.
    MalformedHandshake(HandshakeFault),
}

/// Which record-layer rule a window broke.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RecordFault {
    /// A record of length 0 (RFC 8446 forbids empty handshake fragments).
    EmptyRecord,
    /// A record longer than 2^14 bytes.
    Oversized(u16),
    /// A record of another content type before the ClientHello was complete.
    UnexpectedContentType(u8),
    /// A later record whose major version is not 3.
    BadVersion(u8),
}

/// Which ClientHello rule a handshake message broke.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum HandshakeFault {
    /// The first handshake message is not a ClientHello (1).
    NotClientHello(u8),
    /// The last record carries bytes after the ClientHello.
    TrailingHandshakeData,
    /// A length field runs past the end of the structure that holds it.
    Truncated,
    /// `legacy_session_id` longer than 32 bytes.
    SessionIdTooLong,
    /// `cipher_suites` empty or of odd length.
    BadCipherSuites,
    /// `legacy_compression_methods` empty (the vector is `<1..2^8-1>`).
    NoCompressionMethod,
    /// The extensions block length differs from what remains of the body.
    ExtensionsLengthMismatch,
    /// An extension type appears twice (RFC 8446 §4.2).
    DuplicateExtension(u16),
    /// `server_name` is malformed: empty list, list length that disagrees
    /// with the extension, or an entry that overruns it.
    BadServerNameList,
    /// `host_name` of length 0 (`HostName` is `opaque<1..2^16-1>`).
    EmptyHostName,
    /// `host_name` a lone ".", longer than 255 bytes, or not printable ASCII:
    /// it decodes, but names no host.
    BadHostName,
    /// A second `host_name` entry.
    DuplicateHostName,
    /// ALPN list empty, of the wrong length, or with an empty protocol name.
    BadAlpn,
    /// `supported_versions` empty, of odd length, or of the wrong length.
    BadSupportedVersions,
    /// `encrypted_client_hello` without even its type byte.
    EmptyEch,
    /// `encrypted_client_hello` of a type other than outer (0) or inner (1).
    UnknownEchType(u8),
}

impl fmt::Display for TlsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotTls => f.write_str("not a TLS handshake record"),
            Self::MalformedRecord(fault) => write!(f, "malformed TLS record: {fault}"),
            Self::MalformedHandshake(fault) => write!(f, "malformed ClientHello: {fault}"),
        }
    }
}

impl fmt::Display for RecordFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::EmptyRecord => f.write_str("zero-length record"),
            Self::Oversized(len) => write!(f, "record length {len} exceeds 16384"),
            Self::UnexpectedContentType(t) => {
                write!(
                    f,
                    "record of content type {t} before the ClientHello was complete"
                )
            }
            Self::BadVersion(major) => write!(f, "record major version {major} is not 3"),
        }
    }
}

impl fmt::Display for HandshakeFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotClientHello(t) => write!(f, "handshake type {t} is not ClientHello (1)"),
            Self::TrailingHandshakeData => f.write_str("bytes after the ClientHello in its record"),
            Self::Truncated => f.write_str("a length field overruns its structure"),
            Self::SessionIdTooLong => f.write_str("session id longer than 32 bytes"),
            Self::BadCipherSuites => f.write_str("cipher suites empty or of odd length"),
            Self::NoCompressionMethod => f.write_str("no compression method"),
            Self::ExtensionsLengthMismatch => {
                f.write_str("extensions length differs from the rest of the body")
            }
            Self::DuplicateExtension(t) => write!(f, "extension 0x{t:04x} appears twice"),
            Self::BadServerNameList => f.write_str("server_name list malformed"),
            Self::EmptyHostName => f.write_str("empty host_name"),
            Self::BadHostName => {
                f.write_str("host_name a lone dot, longer than 255 bytes or not printable ASCII")
            }
            Self::DuplicateHostName => f.write_str("more than one host_name"),
            Self::BadAlpn => f.write_str("ALPN list empty, mis-sized or with an empty name"),
            Self::BadSupportedVersions => f.write_str("supported_versions malformed"),
            Self::EmptyEch => f.write_str("encrypted_client_hello without its type"),
            Self::UnknownEchType(t) => write!(f, "encrypted_client_hello of unknown type {t}"),
        }
    }
}

impl core::error::Error for TlsError {}

impl From<HandshakeFault> for TlsError {
    fn from(fault: HandshakeFault) -> Self {
        Self::MalformedHandshake(fault)
    }
}

#[cfg(test)]
mod tests {
    use super::{HandshakeFault, RecordFault, TlsError};

    /// Every error says which kind it is and names the rule that was broken,
    /// with the offending value where there is one, in words of its own.
    #[test]
    fn messages_name_the_fault() {
        let record = TlsError::MalformedRecord;
        let hello = TlsError::MalformedHandshake;
        let (in_record, in_hello) = ("malformed TLS record: ", "malformed ClientHello: ");
        let cases = [
            (TlsError::NotTls, "not a TLS", "handshake record"),
            (record(RecordFault::EmptyRecord), in_record, "zero-length"),
            (record(RecordFault::Oversized(16385)), in_record, "16385"),
            (
                record(RecordFault::UnexpectedContentType(23)),
                in_record,
                "content type 23",
            ),
            (record(RecordFault::BadVersion(2)), in_record, "version 2"),
            (hello(HandshakeFault::NotClientHello(2)), in_hello, "type 2"),
            (
                hello(HandshakeFault::TrailingHandshakeData),
                in_hello,
                "bytes after",
            ),
            (hello(HandshakeFault::Truncated), in_hello, "overruns"),
            (
                hello(HandshakeFault::SessionIdTooLong),
                in_hello,
                "session id",
            ),
            (
                hello(HandshakeFault::BadCipherSuites),
                in_hello,
                "cipher suites",
            ),
            (
                hello(HandshakeFault::NoCompressionMethod),
                in_hello,
                "compression",
            ),
            (
                hello(HandshakeFault::ExtensionsLengthMismatch),
                in_hello,
                "extensions length",
            ),
            (
                hello(HandshakeFault::DuplicateExtension(0x002b)),
                in_hello,
                "0x002b",
            ),
            (
                hello(HandshakeFault::BadServerNameList),
                in_hello,
                "server_name",
            ),
            (
                hello(HandshakeFault::EmptyHostName),
                in_hello,
                "empty host_name",
            ),
            (
                hello(HandshakeFault::BadHostName),
                in_hello,
                "host_name a lone dot",
            ),
            (
                hello(HandshakeFault::DuplicateHostName),
                in_hello,
                "more than one host_name",
            ),
            (hello(HandshakeFault::BadAlpn), in_hello, "ALPN"),
            (
                hello(HandshakeFault::BadSupportedVersions),
                in_hello,
                "supported_versions",
            ),
            (
                hello(HandshakeFault::EmptyEch),
                in_hello,
                "encrypted_client_hello without",
            ),
            (
                hello(HandshakeFault::UnknownEchType(7)),
                in_hello,
                "unknown type 7",
            ),
        ];
        let mut seen = std::collections::HashSet::new();
        for (error, kind, fault) in cases {
            let message = error.to_string();
            assert!(message.starts_with(kind), "{error:?}: {message}");
            assert!(message.contains(fault), "{error:?}: {message}");
            assert!(seen.insert(message.clone()), "{error:?}: {message} twice");
        }
    }
}
