//! What a rejected client is told before the close: the fatal alert a TLS
//! server would have sent for the same ClientHello, or nothing, or a reset.
//!
//! Owns: [`RejectWith`] (the listener's choice), [`Farewell`] (what the
//! caller does to the client's socket), and the alert of each reject
//! reason, refined by the parser's fault (`AlertDescription` beside the
//! fault types). Must never: send an alert to a peer that is not speaking
//! TLS (a bad PROXY header, plain text) or that has gone, or after a byte
//! was relayed to a backend (a reject comes before any backend).

use preread_parser::tls::{AlertDescription, FIRST_FLIGHT_VERSION, RECORD_HEADER_LEN, TlsError};

use crate::preread::SniPrereadCore;
use crate::reject::RejectReason;

/// How a listener tells a client its ClientHello was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum RejectWith {
    /// The fatal alert a TLS server would send, then a close.
    #[default]
    Alert,
    /// A bare close: no byte is sent.
    Close,
    /// A reset (`SO_LINGER` 0): reveals nothing, not even a FIN.
    Reset,
}

/// What the caller does to the client's socket before it closes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Farewell {
    /// Nothing: the close sends a FIN.
    #[default]
    Fin,
    /// Write this alert record, then close.
    Alert([u8; 7]),
    /// Close with a reset.
    Reset,
}

/// The farewell of a connection rejected for `reason`, with the window the
/// core decided on and the listener's cap.
pub(super) fn farewell(
    with: RejectWith,
    reason: RejectReason,
    core: &SniPrereadCore,
    window: &[u8],
    cap: usize,
) -> Farewell {
    let seen = Seen {
        fault: core.fault(),
        offers_tls13: core.offers_tls13(),
        record_version: core.record_version(),
        content_offset: core.content_offset(),
    };
    match with {
        RejectWith::Close => Farewell::Fin,
        RejectWith::Reset => Farewell::Reset,
        RejectWith::Alert => match alert(reason, &seen, window, cap) {
            Some(description) => Farewell::Alert(description.record(seen.version())),
            None => Farewell::Fin,
        },
    }
}

/// What the core learned that decides the alert.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Seen {
    pub(crate) fault: Option<TlsError>,
    pub(crate) offers_tls13: bool,
    pub(crate) record_version: Option<u16>,
    pub(crate) content_offset: usize,
}

impl Seen {
    /// The alert's record version: the client's own (a TLS 1.0 to 1.2
    /// record version), else that of a first flight.
    fn version(&self) -> u16 {
        self.record_version
            .filter(|v| (0x0301..=0x0303).contains(v))
            .unwrap_or(FIRST_FLIGHT_VERSION)
    }
}

/// The alert a server would send for `reason`; `None` when the peer does
/// not speak TLS or has gone.
pub(crate) fn alert(
    reason: RejectReason,
    seen: &Seen,
    window: &[u8],
    cap: usize,
) -> Option<AlertDescription> {
    match reason {
        RejectReason::MalformedRecord | RejectReason::MalformedHandshake => {
            seen.fault.and_then(TlsError::alert)
        }
        RejectReason::SniUnmatched => Some(AlertDescription::UnrecognizedName),
        RejectReason::NoSni | RejectReason::EchOuterAbsent => Some(if seen.offers_tls13 {
            AlertDescription::MissingExtension
        } else {
            AlertDescription::HandshakeFailure
        }),
        RejectReason::AlpnUnmatched => Some(AlertDescription::NoApplicationProtocol),
        RejectReason::AccessDenied => Some(AlertDescription::AccessDenied),
        RejectReason::TooLarge => too_large(seen, window, cap),
        RejectReason::NotTls
        | RejectReason::ProxyHeaderInvalid
        | RejectReason::Fragmented
        | RejectReason::FrontClosed
        | RejectReason::QuicUndecryptable
        | RejectReason::QuicVersion => None,
    }
}

/// A window still incomplete at the cap: `record_overflow` when a record
/// announces an end past the cap, else `internal_error` (the hello needs
/// more records than the cap holds). No alert while not even one record
/// header arrived: the peer has not shown it speaks TLS.
fn too_large(seen: &Seen, window: &[u8], cap: usize) -> Option<AlertDescription> {
    seen.record_version?;
    let mut offset = seen.content_offset;
    while let Some(header) = window.get(offset..offset + RECORD_HEADER_LEN) {
        let end =
            offset + RECORD_HEADER_LEN + usize::from(u16::from_be_bytes([header[3], header[4]]));
        if end > cap {
            return Some(AlertDescription::RecordOverflow);
        }
        offset = end;
    }
    Some(AlertDescription::InternalError)
}

#[cfg(test)]
mod tests;
