//! What a refused QUIC client is sent: the CONNECTION_CLOSE a server would
//! send for the same ClientHello, or a Version Negotiation packet.
//!
//! Owns: the error code of each reject reason (CRYPTO_ERROR `0x100 +` the
//! alert a TLS server sends for the same reason, the TCP step's own
//! [`crate::step::alert`] table; PROTOCOL_VIOLATION for a packet-level
//! fault) and the amplification rule. Must never: answer a datagram
//! smaller than 1200 bytes (RFC 9000 §8.1, §14.1: a small datagram may be
//! spoofed to aim the reply elsewhere), a client whose keys are unknown,
//! or a client that gave up.

use preread_parser::quic::{
    CRYPTO_ERROR, ClientInitials, MIN_INITIAL_DATAGRAM, PROTOCOL_VIOLATION, connection_close,
    version_negotiation,
};
use preread_parser::tls::{FIRST_FLIGHT_VERSION, TlsError};

use crate::reject::RejectReason;
use crate::step::alert::{Seen, alert};

use super::listener::QuicRejectWith;

/// What the flow showed that decides the reply.
#[derive(Debug, Clone, Copy)]
pub(super) struct Facts<'a> {
    pub(super) reader: &'a ClientInitials,
    /// The ClientHello's fault, when it was refused as malformed.
    pub(super) fault: Option<TlsError>,
    pub(super) offers_tls13: bool,
    /// The largest datagram the client sent on the flow.
    pub(super) largest_datagram: usize,
    /// The unknown version's long header: its DCID and SCID, echoed.
    pub(super) unknown_version: Option<(&'a [u8], &'a [u8])>,
}

/// The datagram to send the client refused for `reason`, if any.
pub(super) fn reply(
    with: QuicRejectWith,
    reason: RejectReason,
    facts: &Facts<'_>,
) -> Option<Vec<u8>> {
    if with == QuicRejectWith::Drop || facts.largest_datagram < MIN_INITIAL_DATAGRAM {
        return None;
    }
    if reason == RejectReason::QuicVersion {
        let (dcid, scid) = facts.unknown_version?;
        return Some(version_negotiation(dcid, scid));
    }
    let error_code = match reason {
        RejectReason::MalformedRecord => PROTOCOL_VIOLATION,
        _ => {
            let seen = Seen {
                fault: facts.fault,
                offers_tls13: facts.offers_tls13,
                record_version: Some(FIRST_FLIGHT_VERSION),
                content_offset: 0,
            };
            CRYPTO_ERROR + u64::from(alert(reason, &seen, &[], 0)?.code())
        }
    };
    let reader = facts.reader;
    let (version, dcid, scid) = (
        reader.version()?,
        reader.original_dcid()?,
        reader.client_scid()?,
    );
    Some(connection_close(
        version,
        dcid.as_bytes(),
        scid.as_bytes(),
        error_code,
        reason.as_str().as_bytes(),
    ))
}
