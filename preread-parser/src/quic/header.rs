//! QUIC long headers (RFC 9000 §17.2, RFC 8999 for the invariants): the
//! fields in the clear, and where one packet ends in a datagram of
//! coalesced packets.
//!
//! Owns: [`parse_long_header`] and [`LongHeader`]. Must never: read the
//! protected bits (the packet-number length, the packet number), or a
//! field of a version it does not know beyond the invariant ones.

use super::error::{HeaderFault, QuicError};
use super::varint;
use super::version::{PacketType, Version};

/// The longest connection ID v1 and v2 allow (RFC 9000 §17.2).
pub const MAX_CID_LEN: usize = 20;

/// The long header of the packet at the front of a datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LongHeader<'a> {
    /// The first byte, still under header protection.
    pub first: u8,
    /// The version field as sent (0 for Version Negotiation).
    pub version: u32,
    /// The Destination Connection ID.
    pub dcid: &'a [u8],
    /// The Source Connection ID.
    pub scid: &'a [u8],
    /// The packet's type, for v1 and v2; `None` for any other version.
    pub packet_type: Option<PacketType>,
    /// An Initial packet's token (empty otherwise).
    pub token: &'a [u8],
    /// Offset of the (protected) packet number, for Initial, 0-RTT and
    /// Handshake packets; the end of the header otherwise.
    pub pn_offset: usize,
    /// The packet's length in the datagram: its Length field's end for
    /// Initial, 0-RTT and Handshake packets, the rest of the datagram for a
    /// Retry or a version this crate does not read.
    pub len: usize,
}

impl LongHeader<'_> {
    /// The version, when it is one this crate reads.
    pub fn known_version(&self) -> Option<Version> {
        Version::from_wire(self.version)
    }
}

/// Parses the long header at the front of `datagram`.
///
/// A version other than v1 and v2 is parsed as far as RFC 8999's
/// invariants go (connection IDs of up to 255 bytes) so that a Version
/// Negotiation reply can echo them; its packet runs to the datagram's end.
pub fn parse_long_header(datagram: &[u8]) -> Result<LongHeader<'_>, QuicError> {
    let truncated = QuicError::Header(HeaderFault::Truncated);
    let [first, v0, v1, v2, v3, ref rest @ ..] = *datagram else {
        return Err(if datagram.first().is_some_and(|b| b & 0x80 == 0) {
            QuicError::NotLongHeader
        } else {
            truncated
        });
    };
    if first & 0x80 == 0 {
        return Err(QuicError::NotLongHeader);
    }
    let version = u32::from_be_bytes([v0, v1, v2, v3]);
    let (dcid, rest) = connection_id(rest).ok_or(truncated)?;
    let (scid, rest) = connection_id(rest).ok_or(truncated)?;
    let mut header = LongHeader {
        first,
        version,
        dcid,
        scid,
        packet_type: None,
        token: &[],
        pn_offset: datagram.len() - rest.len(),
        len: datagram.len(),
    };
    let Some(known) = Version::from_wire(version) else {
        return Ok(header);
    };
    for cid in [dcid, scid] {
        if cid.len() > MAX_CID_LEN {
            return Err(HeaderFault::ConnectionIdTooLong(cid.len() as u8).into());
        }
    }
    if first & 0x40 == 0 {
        return Err(HeaderFault::FixedBitClear.into());
    }
    let packet_type = known.packet_type(first);
    header.packet_type = Some(packet_type);
    let mut rest = rest;
    match packet_type {
        PacketType::Retry => return Ok(header),
        PacketType::Initial => {
            let (token_len, after) = varint::read(rest).ok_or(truncated)?;
            let token_len = usize::try_from(token_len).map_err(|_| truncated)?;
            header.token = after.get(..token_len).ok_or(truncated)?;
            rest = &after[token_len..];
        }
        PacketType::ZeroRtt | PacketType::Handshake => {}
    }
    let (length, after) = varint::read(rest).ok_or(truncated)?;
    let length = usize::try_from(length).map_err(|_| truncated)?;
    if length > after.len() {
        return Err(truncated);
    }
    header.pn_offset = datagram.len() - after.len();
    header.len = header.pn_offset + length;
    Ok(header)
}

/// A length byte and that many bytes.
fn connection_id(input: &[u8]) -> Option<(&[u8], &[u8])> {
    let (&len, rest) = input.split_first()?;
    let len = usize::from(len);
    Some((rest.get(..len)?, &rest[len..]))
}

#[cfg(test)]
mod tests {
    use super::{LongHeader, parse_long_header};
    use crate::quic::error::{HeaderFault, QuicError};
    use crate::quic::version::PacketType;

    /// RFC 9001 A.2's protected header, then 1182 bytes of its Length.
    #[test]
    fn rfc_9001_client_initial_header() {
        let mut packet = vec![
            0xc0, 0, 0, 0, 1, 8, 0x83, 0x94, 0xc8, 0xf0, 0x3e, 0x51, 0x57, 0x08, 0, 0, 0x44, 0x9e,
        ];
        packet.resize(18 + 1182, 0);
        let header = parse_long_header(&packet).map_err(|e| e.to_string());
        assert_eq!(
            header,
            Ok(LongHeader {
                first: 0xc0,
                version: 1,
                dcid: &[0x83, 0x94, 0xc8, 0xf0, 0x3e, 0x51, 0x57, 0x08],
                scid: &[],
                packet_type: Some(PacketType::Initial),
                token: &[],
                pn_offset: 18,
                len: 1200,
            })
        );
        packet.pop();
        assert_eq!(
            parse_long_header(&packet),
            Err(QuicError::Header(HeaderFault::Truncated))
        );
    }

    #[test]
    fn unknown_versions_keep_their_invariants() {
        let mut packet = vec![0x80, 0x1a, 0x2a, 0x3a, 0x4a, 30];
        packet.extend([7; 30]);
        packet.extend([2, 9, 9, 1, 2, 3]);
        let Ok(header) = parse_long_header(&packet) else {
            panic!("an unknown version's invariant fields parse");
        };
        assert_eq!((header.dcid.len(), header.scid), (30, &[9, 9][..]));
        assert_eq!((header.packet_type, header.len), (None, packet.len()));
        assert_eq!(header.known_version(), None);
    }

    #[test]
    fn faults() {
        let fault = |bytes: &[u8]| parse_long_header(bytes).err();
        assert_eq!(fault(&[0x40, 0, 0, 0, 1]), Some(QuicError::NotLongHeader));
        assert_eq!(fault(&[0x40]), Some(QuicError::NotLongHeader));
        assert_eq!(fault(&[]), Some(HeaderFault::Truncated.into()));
        assert_eq!(
            fault(&[0xc0, 0, 0, 0, 1, 8, 1]),
            Some(HeaderFault::Truncated.into())
        );
        let mut long_cid = vec![0xc0, 0, 0, 0, 1, 21];
        long_cid.extend([0; 23]);
        assert_eq!(
            fault(&long_cid),
            Some(HeaderFault::ConnectionIdTooLong(21).into())
        );
        assert_eq!(
            fault(&[0x80, 0, 0, 0, 1, 0, 0, 0, 0]),
            Some(HeaderFault::FixedBitClear.into())
        );
        // A token longer than what follows.
        assert_eq!(
            fault(&[0xc0, 0, 0, 0, 1, 0, 0, 5, 1]),
            Some(HeaderFault::Truncated.into())
        );
    }
}
