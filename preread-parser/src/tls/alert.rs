//! The fatal alert a TLS server would answer each broken ClientHello with.
//!
//! Owns: [`AlertDescription`] (the descriptions a server sends before its
//! ServerHello), the alert of each [`TlsError`] fault as a total `match`
//! beside the fault types, and the bytes of one alert record. An alert
//! before the ServerHello travels as a plaintext record (RFC 8446 §6,
//! RFC 5246 §7.2), so a proxy that terminates nothing can send it. Must
//! never: give an alert to bytes that are not TLS (their peer would not
//! read it).

use super::error::{HandshakeFault, RecordFault, TlsError};

/// Record content type of an alert.
const ALERT_CONTENT_TYPE: u8 = 21;
/// Alert level `fatal`.
const FATAL: u8 = 2;
/// The record version of a first flight, as servers send it.
pub const FIRST_FLIGHT_VERSION: u16 = 0x0301;

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
    /// 49: the client is not allowed in (an access rule refused it).
    AccessDenied,
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
    pub const ALL: [Self; 10] = [
        Self::UnexpectedMessage,
        Self::RecordOverflow,
        Self::HandshakeFailure,
        Self::IllegalParameter,
        Self::AccessDenied,
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
            Self::AccessDenied => 49,
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
            Self::AccessDenied => "access_denied",
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
            Self::Oversized(_) => AlertDescription::RecordOverflow,
            Self::EmptyRecord | Self::BadVersion(_) => AlertDescription::DecodeError,
            Self::UnexpectedContentType(_) => AlertDescription::UnexpectedMessage,
        }
    }
}

impl HandshakeFault {
    /// The alert a server sends for this fault: `decode_error` for bytes
    /// that do not decode by the syntax (a length that overruns its
    /// container, a vector outside its declared bounds), `illegal_parameter`
    /// for a field that decodes but holds a forbidden value.
    pub const fn alert(self) -> AlertDescription {
        match self {
            Self::NotClientHello(_) => AlertDescription::UnexpectedMessage,
            Self::DuplicateExtension(_)
            | Self::DuplicateHostName
            | Self::BadHostName
            | Self::UnknownEchType(_) => AlertDescription::IllegalParameter,
            Self::TrailingHandshakeData
            | Self::Truncated
            | Self::SessionIdTooLong
            | Self::BadCipherSuites
            | Self::NoCompressionMethod
            | Self::ExtensionsLengthMismatch
            | Self::BadServerNameList
            | Self::EmptyHostName
            | Self::BadAlpn
            | Self::BadSupportedVersions
            | Self::EmptyEch => AlertDescription::DecodeError,
        }
    }

    /// Whether the bytes decoded and only a value is refused: such a fault
    /// is reported once the rest of the ClientHello decoded too, because a
    /// length that lies anywhere in it is what a server answers first.
    pub(crate) const fn is_forbidden_value(self) -> bool {
        matches!(self.alert(), AlertDescription::IllegalParameter)
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
        assert_eq!(codes.len(), AlertDescription::ALL.len());
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

    /// The RFC sentence each fault's alert follows. A total match: a new
    /// fault does not compile until it names its rule and its alert.
    fn rule(error: TlsError) -> (Option<AlertDescription>, &'static str) {
        use AlertDescription as A;
        use HandshakeFault as H;
        use RecordFault as R;
        let decode = Some(A::DecodeError);
        let illegal = Some(A::IllegalParameter);
        match error {
            TlsError::NotTls => (
                None,
                "RFC 8446 §5.1: a record of type handshake (22) is the only opening; other bytes are another protocol, which reads no alert",
            ),
            TlsError::MalformedRecord(R::Oversized(_)) => (
                Some(A::RecordOverflow),
                "RFC 8446 §5.1: An endpoint that receives a record that exceeds this length MUST terminate the connection with a \"record_overflow\" alert",
            ),
            TlsError::MalformedRecord(R::EmptyRecord) => (
                decode,
                "RFC 8446 §5.1: Implementations MUST NOT send zero-length fragments of Handshake types; §6: decode_error, the length of the message was incorrect",
            ),
            TlsError::MalformedRecord(R::UnexpectedContentType(_)) => (
                Some(A::UnexpectedMessage),
                "RFC 8446 §5.1: Handshake messages MUST NOT be interleaved with other record types; §5: an unexpected record type MUST be answered with \"unexpected_message\"",
            ),
            TlsError::MalformedRecord(R::BadVersion(_)) => (
                decode,
                "RFC 8446 §6: decode_error, a message that does not conform to the formal protocol syntax (a record header of another major version)",
            ),
            TlsError::MalformedHandshake(H::NotClientHello(_)) => (
                Some(A::UnexpectedMessage),
                "RFC 8446 §4: A peer which receives a handshake message in an unexpected order MUST abort the handshake with an \"unexpected_message\" alert",
            ),
            TlsError::MalformedHandshake(H::TrailingHandshakeData) => (
                decode,
                "RFC 8446 §6: decode_error, the length of the message was incorrect (its record holds more than the message)",
            ),
            TlsError::MalformedHandshake(H::Truncated) => (
                decode,
                "RFC 8446 §6: decode_error, a message could not be decoded because the length of the message was incorrect",
            ),
            TlsError::MalformedHandshake(H::SessionIdTooLong) => (
                decode,
                "RFC 8446 §4.1.2: opaque legacy_session_id<0..32>; §6: decode_error, a field out of the specified range",
            ),
            TlsError::MalformedHandshake(H::BadCipherSuites) => (
                decode,
                "RFC 8446 §4.1.2: CipherSuite cipher_suites<2..2^16-2>; §3.4: the length of an encoded vector must be an exact multiple of the length of a single element",
            ),
            TlsError::MalformedHandshake(H::NoCompressionMethod) => (
                decode,
                "RFC 8446 §4.1.2: opaque legacy_compression_methods<1..2^8-1>; §6: decode_error, a field out of the specified range",
            ),
            TlsError::MalformedHandshake(H::ExtensionsLengthMismatch) => (
                decode,
                "RFC 8446 §4.1.2: Extension extensions<8..2^16-1> fills the rest of the ClientHello; §6: decode_error, the length of the message was incorrect",
            ),
            TlsError::MalformedHandshake(H::DuplicateExtension(_)) => (
                illegal,
                "RFC 8446 §4.2: There MUST NOT be more than one extension of the same type in a given extension block; §6: illegal_parameter, conforms to the syntax but is otherwise incorrect",
            ),
            TlsError::MalformedHandshake(H::BadServerNameList) => (
                decode,
                "RFC 6066 §3: ServerName server_name_list<1..2^16-1>; RFC 8446 §6: decode_error, the length of the message was incorrect",
            ),
            TlsError::MalformedHandshake(H::EmptyHostName) => (
                decode,
                "RFC 6066 §3: opaque HostName<1..2^16-1>; RFC 8446 §6: decode_error, a field out of the specified range",
            ),
            TlsError::MalformedHandshake(H::BadHostName) => (
                illegal,
                "RFC 6066 §3: The hostname is represented as a byte string using ASCII encoding; RFC 8446 §6: illegal_parameter, conforms to the syntax but is otherwise incorrect",
            ),
            TlsError::MalformedHandshake(H::DuplicateHostName) => (
                illegal,
                "RFC 6066 §3: The ServerNameList MUST NOT contain more than one name of the same name_type; RFC 8446 §6: illegal_parameter",
            ),
            TlsError::MalformedHandshake(H::BadAlpn) => (
                decode,
                "RFC 7301 §3.1: Empty strings MUST NOT be included and byte strings MUST NOT be truncated; RFC 8446 §6: decode_error",
            ),
            TlsError::MalformedHandshake(H::BadSupportedVersions) => (
                decode,
                "RFC 8446 §4.2.1: ProtocolVersion versions<2..254>; §6: decode_error, a field out of the specified range",
            ),
            TlsError::MalformedHandshake(H::EmptyEch) => (
                decode,
                "RFC 9849 §5: ECHClientHello starts with its ECHClientHelloType; RFC 8446 §6: decode_error, the length of the message was incorrect",
            ),
            TlsError::MalformedHandshake(H::UnknownEchType(_)) => (
                illegal,
                "RFC 9849 §7: If ECHClientHello.type is not a valid ECHClientHelloType, then the server MUST abort with an \"illegal_parameter\" alert",
            ),
        }
    }

    /// One error of every fault type, with a sample of each carried value.
    const EVERY_FAULT: [TlsError; 23] = {
        use HandshakeFault as H;
        use RecordFault as R;
        use TlsError::{MalformedHandshake as Hs, MalformedRecord as Rec};
        [
            TlsError::NotTls,
            Rec(R::Oversized(16_385)),
            Rec(R::Oversized(16_384 + 256)),
            Rec(R::Oversized(u16::MAX)),
            Rec(R::EmptyRecord),
            Rec(R::UnexpectedContentType(20)),
            Rec(R::BadVersion(2)),
            Hs(H::NotClientHello(2)),
            Hs(H::TrailingHandshakeData),
            Hs(H::Truncated),
            Hs(H::SessionIdTooLong),
            Hs(H::BadCipherSuites),
            Hs(H::NoCompressionMethod),
            Hs(H::ExtensionsLengthMismatch),
            Hs(H::DuplicateExtension(0)),
            Hs(H::BadServerNameList),
            Hs(H::EmptyHostName),
            Hs(H::BadHostName),
            Hs(H::DuplicateHostName),
            Hs(H::BadAlpn),
            Hs(H::BadSupportedVersions),
            Hs(H::EmptyEch),
            Hs(H::UnknownEchType(7)),
        ]
    };

    #[test]
    fn each_fault_has_the_alert_its_rfc_sentence_names() {
        for error in EVERY_FAULT {
            let (alert, sentence) = rule(error);
            assert_eq!(error.alert(), alert, "{error:?} follows {sentence}");
            if let Some(named) = alert.filter(|_| sentence.contains('"')) {
                assert!(
                    sentence.contains(named.as_str()),
                    "{error:?}: {sentence} names another alert than {named:?}"
                );
            }
            if let TlsError::MalformedHandshake(fault) = error {
                assert_eq!(
                    fault.is_forbidden_value(),
                    alert == Some(AlertDescription::IllegalParameter),
                    "{fault:?}"
                );
            }
        }
    }

    /// Not a single record length past 2^14 reads as a lie of the encoding:
    /// a plaintext ClientHello record has no 256 bytes of ciphertext slack.
    #[test]
    fn every_length_past_two_to_the_fourteen_is_record_overflow() {
        for len in [16_385, 16_384 + 256, 16_384 + 257, u16::MAX] {
            assert_eq!(
                RecordFault::Oversized(len).alert(),
                AlertDescription::RecordOverflow,
                "{len}"
            );
        }
    }
}
