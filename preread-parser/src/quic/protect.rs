//! Packet protection of Initial packets (RFC 9001 §5.3, §5.4): removing
//! header protection and opening the AEAD, and the reverse for a packet
//! the proxy sends.
//!
//! Owns: [`open`] (in place, on the caller's copy of the packet; and
//! [`open_initial`], its public form), the packet-number recovery (RFC
//! 9000 §A.3), and [`seal_initial`]. Must
//! never: hand out a byte of a payload whose tag did not verify.

use ring::aead::{Aad, Tag};

use super::error::{HeaderFault, QuicError};
use super::keys::PacketKeys;
use super::varint;
use super::version::Version;

/// Length of the AEAD tag (AES-128-GCM).
pub const TAG_LEN: usize = 16;
/// Length of the header-protection sample.
const SAMPLE_LEN: usize = 16;
/// The sample starts this far past the packet number's offset, whatever
/// the packet number's length (RFC 9001 §5.4.2).
const SAMPLE_OFFSET: usize = 4;

/// An opened packet: its full packet number and where its plaintext lies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Opened {
    pub(crate) packet_number: u64,
    /// Offset of the plaintext payload in the packet.
    pub(crate) payload: usize,
    /// Length of the plaintext payload.
    pub(crate) len: usize,
}

/// Removes header protection from `packet` (one whole packet, header
/// first, `pn_offset` where its packet number starts) and opens its
/// payload in place. `largest` is the largest packet number opened so far
/// in this packet number space, for the packet-number recovery.
pub(crate) fn open(
    keys: &PacketKeys,
    packet: &mut [u8],
    pn_offset: usize,
    largest: Option<u64>,
) -> Result<Opened, QuicError> {
    let sample_at = pn_offset + SAMPLE_OFFSET;
    let sample = packet
        .get(sample_at..sample_at + SAMPLE_LEN)
        .ok_or(HeaderFault::TooShortForSample)?;
    let mask = keys
        .hp
        .new_mask(sample)
        .map_err(|_| QuicError::Undecryptable)?;
    packet[0] ^= mask[0] & 0x0f;
    let pn_len = usize::from(packet[0] & 0x03) + 1;
    let mut truncated = 0u64;
    for (i, byte) in packet[pn_offset..pn_offset + pn_len].iter_mut().enumerate() {
        *byte ^= mask[1 + i];
        truncated = (truncated << 8) | u64::from(*byte);
    }
    let packet_number = recover_packet_number(largest, truncated, pn_len * 8);
    let payload = pn_offset + pn_len;
    let (header, body) = packet.split_at_mut(payload);
    let plain = keys
        .aead
        .open_in_place(keys.nonce(packet_number), Aad::from(&*header), body)
        .map_err(|_| QuicError::Undecryptable)?;
    let len = plain.len();
    if header[0] & 0x0c != 0 {
        return Err(HeaderFault::ReservedBits.into());
    }
    Ok(Opened {
        packet_number,
        payload,
        len,
    })
}

/// Opens one whole packet sealed with `keys` (`pn_offset` from its
/// [`super::LongHeader`]), in place, as the first of its packet number
/// space, and returns its plaintext payload: how a client, a test or a
/// tool reads what the proxy sent it.
pub fn open_initial<'p>(
    keys: &PacketKeys,
    packet: &'p mut [u8],
    pn_offset: usize,
) -> Result<&'p [u8], QuicError> {
    let opened = open(keys, packet, pn_offset, None)?;
    Ok(&packet[opened.payload..opened.payload + opened.len])
}

/// RFC 9000 §A.3: the packet number closest to the next one expected
/// whose low `bits` bits are `truncated`.
fn recover_packet_number(largest: Option<u64>, truncated: u64, bits: usize) -> u64 {
    let expected = largest.map_or(0, |pn| pn + 1);
    let window = 1u64 << bits;
    let half = window / 2;
    let mask = window - 1;
    let candidate = (expected & !mask) | truncated;
    if candidate + half <= expected && candidate < (1 << 62) - window {
        candidate + window
    } else if candidate > expected + half && candidate >= window {
        candidate - window
    } else {
        candidate
    }
}

/// The header fields of an Initial packet to seal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InitialPacket<'a> {
    /// Its version.
    pub version: Version,
    /// Destination Connection ID (at most 20 bytes).
    pub dcid: &'a [u8],
    /// Source Connection ID (at most 20 bytes).
    pub scid: &'a [u8],
    /// The token (a client's, after a Retry or from NEW_TOKEN; empty from a server).
    pub token: &'a [u8],
    /// The packet number.
    pub packet_number: u64,
    /// How many bytes encode the packet number, 1 to 4.
    pub pn_len: u8,
}

/// Appends `packet`, with `frames` as its payload, sealed with `keys`
/// (the sender's side) to `out`: several calls into one buffer coalesce
/// packets in one datagram. A payload too short for the header-protection
/// sample is padded with PADDING frames; nothing else is added (a client
/// pads its datagram to 1200 bytes itself, RFC 9000 §14.1).
pub fn seal_initial(
    keys: &PacketKeys,
    packet: &InitialPacket<'_>,
    frames: &[u8],
    out: &mut Vec<u8>,
) {
    let pn_len = usize::from(packet.pn_len.clamp(1, 4));
    let padding = SAMPLE_OFFSET.saturating_sub(pn_len + frames.len());
    let start = out.len();
    out.push(0xc0 | packet.version.initial_type_bits() | (pn_len as u8 - 1));
    out.extend_from_slice(&packet.version.wire().to_be_bytes());
    for cid in [packet.dcid, packet.scid] {
        out.push(cid.len() as u8);
        out.extend_from_slice(cid);
    }
    varint::write(out, packet.token.len() as u64);
    out.extend_from_slice(packet.token);
    varint::write_at_least_2(out, (pn_len + frames.len() + padding + TAG_LEN) as u64);
    let pn_offset = out.len();
    out.extend_from_slice(&packet.packet_number.to_be_bytes()[8 - pn_len..]);
    let payload = out.len();
    out.extend_from_slice(frames);
    out.resize(out.len() + padding, 0);
    let (header, body) = out[start..].split_at_mut(payload - start);
    let tag: Tag = keys
        .aead
        .seal_in_place_separate_tag(keys.nonce(packet.packet_number), Aad::from(&*header), body)
        .unwrap_or_else(|_| unreachable!("an Initial payload is far below AES-GCM's limit"));
    out.extend_from_slice(tag.as_ref());
    let sample_at = pn_offset + SAMPLE_OFFSET;
    let Ok(mask) = keys.hp.new_mask(&out[sample_at..sample_at + SAMPLE_LEN]) else {
        unreachable!("a 16-byte sample");
    };
    out[start] ^= mask[0] & 0x0f;
    for (byte, m) in out[pn_offset..pn_offset + pn_len]
        .iter_mut()
        .zip(&mask[1..])
    {
        *byte ^= m;
    }
}

#[cfg(test)]
mod tests {
    use super::recover_packet_number;

    /// RFC 9000 §A.3's example, and the first packets of a connection.
    #[test]
    fn packet_number_recovery() {
        assert_eq!(
            recover_packet_number(Some(0xa82f30ea), 0x9b32, 16),
            0xa82f9b32
        );
        assert_eq!(recover_packet_number(None, 0, 8), 0);
        assert_eq!(recover_packet_number(None, 2, 32), 2);
        assert_eq!(recover_packet_number(Some(255), 0, 8), 256);
        assert_eq!(recover_packet_number(Some(3), 1, 8), 1);
    }
}
