//! The fatal alert a TLS server would answer each broken ClientHello with.
//!
//! Owns: [`AlertDescription`] (the descriptions a server sends before its
//! ServerHello), the alert of each [`TlsError`] fault as a total `match`
//! beside the fault types, and the bytes of one alert record. An alert
//! before the ServerHello travels as a plaintext record (RFC 8446 §6,
//! RFC 5246 §7.2), so a proxy that terminates nothing can send it. Must
//! never: give an alert to bytes that are not TLS (their peer would not
//! read it).

use super::MAX_RECORD_LEN;
use super::error::{HandshakeFault, RecordFault, TlsError};

/// Record content type of an alert.
const ALERT_CONTENT_TYPE: u8 = 21;
/// Alert level `fatal`.
const FATAL: u8 = 2;
/// The record version of a first flight, as servers send it.
pub const FIRST_FLIGHT_VERSION: u16 = 0x0301;
/// A record this much over 2^14 is a record overflow; below it, a server
/// reads the length as a lie of the encoding (RFC 8446 §5.2 allows
/// ciphertext up to 2^14 + 256, so some stacks accept that far).
const OVERFLOW_SLACK: usize = 256;

/// The alert descriptions a server sends before its ServerHello.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AlertDescription {
    /// 10: a message of the wrong type (not a ClientHello first).
    UnexpectedMessage,
    /// 22: a record longer than the protocol allows.
    RecordOverflow,
    /// 40: no acceptable parameters, for clients older than TLS 1.3.
    HandshakeFailure,
    /// 47: a field with a forbidden value, or an extension twice.
    IllegalParameter,
    /// 50: a message that cannot be decoded (a length that lies).
    DecodeError,
    /// 80: the server cannot go on for a reason of its own.
    InternalError,
    /// 109: a required extension is missing (TLS 1.3).
    MissingExtension,
    /// 112: no server of that name (RFC 6066 §3 allows it to be fatal).
    UnrecognizedName,
    /// 120: no protocol of the client's ALPN offer (RFC 7301 §3.2).
    NoApplicationProtocol,
}

impl AlertDescription {
    /// Every description, for tests.
    pub const ALL: [Self; 9] = [
        Self::UnexpectedMessage,
        Self::RecordOverflow,
        Self::HandshakeFailure,
        Self::IllegalParameter,
        Self::DecodeError,
        Self::InternalError,
        Self::MissingExtension,
        Self::UnrecognizedName,
        Self::NoApplicationProtocol,
    ];

    /// The description's code on the wire.
    pub const fn code(self) -> u8 {
        match self {
            Self::UnexpectedMessage => 10,
            Self::RecordOverflow => 22,
            Self::HandshakeFailure => 40,
            Self::IllegalParameter => 47,
            Self::DecodeError => 50,
            Self::InternalError => 80,
            Self::MissingExtension => 109,
            Self::UnrecognizedName => 112,
            Self::NoApplicationProtocol => 120,
        }
    }

    /// The description of a code on the wire, if it is one of these.
    pub fn from_code(code: u8) -> Option<Self> {
        Self::ALL.into_iter().find(|d| d.code() == code)
    }

    /// The name RFC 8446 gives it.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::UnexpectedMessage => "unexpected_message",
            Self::RecordOverflow => "record_overflow",
            Self::HandshakeFailure => "handshake_failure",
            Self::IllegalParameter => "illegal_parameter",
            Self::DecodeError => "decode_error",
            Self::InternalError => "internal_error",
            Self::MissingExtension => "missing_extension",
            Self::UnrecognizedName => "unrecognized_name",
            Self::NoApplicationProtocol => "no_application_protocol",
        }
    }

    /// One fatal alert record of this description, with record version
    /// `version`: `15 <version> 00 02 02 <code>`.
    pub const fn record(self, version: u16) -> [u8; 7] {
        let [major, minor] = version.to_be_bytes();
        [ALERT_CONTENT_TYPE, major, minor, 0, 2, FATAL, self.code()]
    }
}

impl RecordFault {
    /// The alert a server sends for this fault.
    pub const fn alert(self) -> AlertDescription {
        match self {
            Self::Oversized(len) if len as usize > MAX_RECORD_LEN + OVERFLOW_SLACK => {
                AlertDescription::RecordOverflow
            }
            Self::Oversized(_) | Self::EmptyRecord | Self::BadVersion(_) => {
                AlertDescription::DecodeError
            }
            Self::UnexpectedContentType(_) => AlertDescription::UnexpectedMessage,
        }
    }
}

impl HandshakeFault {
    /// The alert a server sends for this fault.
    pub const fn alert(self) -> AlertDescription {
        match self {
            Self::NotClientHello(_) => AlertDescription::UnexpectedMessage,
            Self::DuplicateExtension(_)
            | Self::DuplicateHostName
            | Self::BadHostName
            | Self::NoCompressionMethod
            | Self::BadEch => AlertDescription::IllegalParameter,
            Self::TrailingHandshakeData
            | Self::Truncated
            | Self::SessionIdTooLong
            | Self::BadCipherSuites
            | Self::ExtensionsLengthMismatch
            | Self::BadServerNameList
            | Self::BadAlpn
            | Self::BadSupportedVersions => AlertDescription::DecodeError,
        }
    }
}

impl TlsError {
    /// The alert a server sends for this error; `None` for bytes that are
    /// not TLS at all.
    pub const fn alert(self) -> Option<AlertDescription> {
        match self {
            Self::NotTls => None,
            Self::MalformedRecord(fault) => Some(fault.alert()),
            Self::MalformedHandshake(fault) => Some(fault.alert()),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::{AlertDescription, FIRST_FLIGHT_VERSION};
    use crate::tls::{HandshakeFault, RecordFault, TlsError};

    #[test]
    fn codes_and_names_are_distinct_and_the_record_is_exact() {
        let codes: HashSet<_> = AlertDescription::ALL.map(AlertDescription::code).into();
        let names: HashSet<_> = AlertDescription::ALL.map(AlertDescription::as_str).into();
        assert_eq!(codes.len(), 9);
        for description in AlertDescription::ALL {
            assert_eq!(
                AlertDescription::from_code(description.code()),
                Some(description)
            );
        }
        assert_eq!(AlertDescription::from_code(0), None);
        assert_eq!(names.len(), 9);
        assert_eq!(
            AlertDescription::UnrecognizedName.record(FIRST_FLIGHT_VERSION),
            [0x15, 0x03, 0x01, 0x00, 0x02, 0x02, 112]
        );
        assert_eq!(
            AlertDescription::DecodeError.record(0x0303),
            [0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 50]
        );
    }

    #[test]
    fn each_fault_has_the_alert_of_its_rule() {
        use AlertDescription as A;
        let records = [
            (RecordFault::Oversized(16_385), A::DecodeError),
            (RecordFault::Oversized(16_384 + 256), A::DecodeError),
            (RecordFault::Oversized(16_384 + 257), A::RecordOverflow),
            (RecordFault::EmptyRecord, A::DecodeError),
            (RecordFault::BadVersion(2), A::DecodeError),
            (RecordFault::UnexpectedContentType(20), A::UnexpectedMessage),
        ];
        for (fault, alert) in records {
            assert_eq!(fault.alert(), alert, "{fault:?}");
            assert_eq!(TlsError::MalformedRecord(fault).alert(), Some(alert));
        }
        let hellos = [
            (HandshakeFault::NotClientHello(2), A::UnexpectedMessage),
            (HandshakeFault::DuplicateExtension(0), A::IllegalParameter),
            (HandshakeFault::DuplicateHostName, A::IllegalParameter),
            (HandshakeFault::BadHostName, A::IllegalParameter),
            (HandshakeFault::NoCompressionMethod, A::IllegalParameter),
            (HandshakeFault::BadEch, A::IllegalParameter),
            (HandshakeFault::TrailingHandshakeData, A::DecodeError),
            (HandshakeFault::Truncated, A::DecodeError),
            (HandshakeFault::SessionIdTooLong, A::DecodeError),
            (HandshakeFault::BadCipherSuites, A::DecodeError),
            (HandshakeFault::ExtensionsLengthMismatch, A::DecodeError),
            (HandshakeFault::BadServerNameList, A::DecodeError),
            (HandshakeFault::BadAlpn, A::DecodeError),
            (HandshakeFault::BadSupportedVersions, A::DecodeError),
        ];
        for (fault, alert) in hellos {
            assert_eq!(fault.alert(), alert, "{fault:?}");
            assert_eq!(TlsError::MalformedHandshake(fault).alert(), Some(alert));
        }
        assert_eq!(TlsError::NotTls.alert(), None);
    }
}
