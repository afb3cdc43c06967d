//! The packets the proxy itself sends a QUIC client: a CONNECTION_CLOSE
//! in a server Initial (a reject the client can read) and a Version
//! Negotiation packet (RFC 9000 §17.2.1).
//!
//! Owns: [`connection_close`] and [`version_negotiation`], and
//! [`client_first_flight`], what a client sends, for tests and tools.
//! Must never:
//! draw randomness (the caller's step is deterministic), or answer with
//! more bytes than the client sent (RFC 9000 §8.1: the caller sends these
//! only in reply to a datagram of at least 1200 bytes, and each is far
//! smaller).

use super::frames;
use super::keys::{PacketKeys, Side};
use super::protect::{InitialPacket, seal_initial};
use super::version::{SUPPORTED, Version};

/// CRYPTO_ERROR's base: a TLS alert `a` is the error code `0x100 + a`
/// (RFC 9001 §4.8).
pub const CRYPTO_ERROR: u64 = 0x100;
/// The CRYPTO frame's type: the frame a refusal of the ClientHello blames.
const CRYPTO_FRAME_TYPE: u64 = 0x06;

/// PROTOCOL_VIOLATION (RFC 9000 §20.1): a packet-level fault, no TLS alert.
pub const PROTOCOL_VIOLATION: u64 = 0x0a;

/// A server Initial carrying a transport CONNECTION_CLOSE with
/// `error_code` (CRYPTO_ERROR `0x100 + alert` for a refused ClientHello,
/// RFC 9001 §4.8), sealed with the server's Initial keys of `client_dcid`
/// (the Destination Connection ID of the client's first Initial), to the
/// client's `client_scid`. Its own Source Connection ID is `client_dcid`:
/// any value does, and that one is the client's own.
pub fn connection_close(
    version: Version,
    client_dcid: &[u8],
    client_scid: &[u8],
    error_code: u64,
    reason: &[u8],
) -> Vec<u8> {
    let keys = PacketKeys::initial(version, client_dcid, Side::Server);
    let mut payload = Vec::with_capacity(16 + reason.len());
    frames::write_connection_close(&mut payload, error_code, CRYPTO_FRAME_TYPE, reason);
    let packet = InitialPacket {
        version,
        dcid: client_scid,
        scid: client_dcid,
        token: &[],
        packet_number: 0,
        pn_len: 1,
    };
    let mut out = Vec::with_capacity(64 + client_dcid.len() + client_scid.len() + reason.len());
    seal_initial(&keys, &packet, &payload, &mut out);
    out
}

/// A Version Negotiation packet answering a client Initial of an unknown
/// version from `client_dcid` to `client_scid` (both echoed swapped, RFC
/// 9000 §17.2.1), offering v1 and v2.
pub fn version_negotiation(client_dcid: &[u8], client_scid: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(7 + client_dcid.len() + client_scid.len() + 8);
    // The unused bits are arbitrary; the fixed bit set keeps the packet
    // looking like any other QUIC packet (RFC 9287).
    out.push(0xc0);
    out.extend_from_slice(&0u32.to_be_bytes());
    for cid in [client_scid, client_dcid] {
        out.push(cid.len() as u8);
        out.extend_from_slice(cid);
    }
    for version in SUPPORTED {
        out.extend_from_slice(&version.to_be_bytes());
    }
    out
}

/// The room a CRYPTO frame leaves in a 1200-byte datagram whatever the
/// connection IDs: header, tag and frame header at their longest.
const FLIGHT_CHUNK: usize = 1100;

/// A client's first flight carrying `hello` (a ClientHello handshake
/// message, no record layer): its CRYPTO stream cut into pieces of at most
/// `chunk` bytes (at most 1100), one Initial per datagram, packet numbers
/// from 0, each datagram padded to 1200 bytes as a client pads it. What a
/// client sends, for tests, simulations and tools; a real client may also
/// shuffle, split and coalesce, which the caller can do with
/// [`seal_initial`].
pub fn client_first_flight(
    version: Version,
    dcid: &[u8],
    scid: &[u8],
    hello: &[u8],
    chunk: usize,
) -> Vec<Vec<u8>> {
    let keys = PacketKeys::initial(version, dcid, Side::Client);
    let chunk = chunk.clamp(1, FLIGHT_CHUNK);
    let pieces = hello.chunks(chunk).enumerate();
    pieces
        .map(|(n, piece)| {
            let mut payload = Vec::with_capacity(super::MIN_INITIAL_DATAGRAM);
            frames::write_crypto(&mut payload, (n * chunk) as u64, piece);
            let overhead = 7 + dcid.len() + scid.len() + 1 + 2 + 4 + super::TAG_LEN;
            let padding = super::MIN_INITIAL_DATAGRAM.saturating_sub(overhead + payload.len());
            frames::write_padding(&mut payload, padding);
            let packet = InitialPacket {
                version,
                dcid,
                scid,
                token: &[],
                packet_number: n as u64,
                pn_len: 4,
            };
            let mut datagram = Vec::with_capacity(super::MIN_INITIAL_DATAGRAM);
            seal_initial(&keys, &packet, &payload, &mut datagram);
            datagram
        })
        .collect()
}
