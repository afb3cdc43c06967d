//! One flow's first flight, read datagram by datagram: what the core feeds
//! and asks for the ClientHello.
//!
//! Owns: [`ClientInitials`]: the version and the keys pinned by the
//! client's first Initial (its DCID gives the keys; later datagrams may
//! carry another DCID and still use them, RFC 9001 §5.2), the walk over
//! coalesced packets (0-RTT and Handshake packets skipped, bytes after the
//! last packet ignored as padding), the packet-number space, the CRYPTO
//! stream, and the counts `preread inspect` reports. Must never: keep a
//! borrow of a datagram, or let a later packet change the version, the
//! keys, or a CRYPTO byte already received.
//!
//! It allocates, unlike the TCP path: a datagram is borrowed and
//! decryption works in place, so each packet is copied into a buffer the
//! reader reuses, and the CRYPTO stream is reassembled in one of its own.

use super::error::{HeaderFault, QuicError};
use super::frames::{self, Frame};
use super::header::{MAX_CID_LEN, parse_long_header};
use super::keys::{PacketKeys, Side};
use super::protect;
use super::reassembly::CryptoStream;
use super::version::{PacketType, Version};
use crate::tls::{Parsed, TlsError, parse_client_hello_message};

/// A connection ID of at most 20 bytes, held inline.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct ConnectionId {
    bytes: [u8; MAX_CID_LEN],
    len: u8,
}

impl ConnectionId {
    /// `bytes` as a connection ID; `None` past 20 bytes.
    pub fn new(bytes: &[u8]) -> Option<Self> {
        let mut id = Self::default();
        id.bytes.get_mut(..bytes.len())?.copy_from_slice(bytes);
        id.len = bytes.len() as u8;
        Some(id)
    }

    /// The bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }
}

/// What one datagram held.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Fed {
    /// Initial packets opened.
    pub initials: usize,
    /// 0-RTT, Handshake and Retry packets, and packets of another version
    /// than the flow's, skipped unread.
    pub skipped: usize,
    /// Initial packets after the first that did not open (a spoofed or
    /// corrupted packet: it changes nothing).
    pub undecryptable: usize,
    /// The client sent a CONNECTION_CLOSE with this error code.
    pub closed: Option<u64>,
}

/// What the client's first Initial established for the flow.
#[derive(Debug)]
struct Pinned {
    version: Version,
    dcid: ConnectionId,
    scid: ConnectionId,
    keys: PacketKeys,
    largest: Option<u64>,
}

/// One flow's client Initials, fed datagram by datagram.
#[derive(Debug)]
pub struct ClientInitials {
    pinned: Option<Pinned>,
    crypto: CryptoStream,
    /// The packet being opened: decryption works in place.
    packet: Vec<u8>,
    cap: usize,
    packets: usize,
    datagrams: usize,
}

impl ClientInitials {
    /// A reader that keeps at most `cap` bytes of CRYPTO stream (the
    /// listener's byte cap).
    pub fn new(cap: usize) -> Self {
        Self {
            pinned: None,
            crypto: CryptoStream::new(cap),
            packet: Vec::new(),
            cap,
            packets: 0,
            datagrams: 0,
        }
    }

    /// Reads one datagram of the client's, in the order received.
    ///
    /// An error means the flow can never yield a ClientHello: the first
    /// packet of a datagram is not a long header of v1 or v2 or is
    /// malformed, the first Initial does not open, an opened one breaks
    /// the frame rules, or the CRYPTO stream passed the cap. Bytes after
    /// the first packet that do not parse as one are padding, ignored
    /// (RFC 9000 §12.2).
    pub fn feed(&mut self, datagram: &[u8]) -> Result<Fed, QuicError> {
        self.datagrams += 1;
        let mut fed = Fed::default();
        let mut rest = datagram;
        let mut first = true;
        while !rest.is_empty() {
            let header = match parse_long_header(rest) {
                Ok(header) => header,
                Err(error) if first => return Err(error),
                Err(_) => break,
            };
            let packet_len = header.len;
            let Some(version) = header.known_version() else {
                if first {
                    return Err(QuicError::UnsupportedVersion(header.version));
                }
                break;
            };
            first = false;
            let same_version = self.pinned.as_ref().is_none_or(|p| p.version == version);
            if header.packet_type == Some(PacketType::Initial) && same_version {
                self.open_initial(
                    version,
                    &rest[..packet_len],
                    header.pn_offset,
                    header.dcid,
                    header.scid,
                    &mut fed,
                )?;
            } else {
                fed.skipped += 1;
            }
            rest = &rest[packet_len..];
        }
        Ok(fed)
    }

    fn open_initial(
        &mut self,
        version: Version,
        packet: &[u8],
        pn_offset: usize,
        dcid: &[u8],
        scid: &[u8],
        fed: &mut Fed,
    ) -> Result<(), QuicError> {
        self.packet.clear();
        self.packet.extend_from_slice(packet);
        let known = self.pinned.is_some();
        // The pinned keys (hundreds of bytes of AES and GHASH tables) are
        // built in place and used there: never moved out and back.
        if !known {
            // The header parser bounds v1 and v2 connection IDs at 20.
            let (Some(dcid), Some(scid)) = (ConnectionId::new(dcid), ConnectionId::new(scid))
            else {
                return Err(QuicError::Undecryptable);
            };
            self.pinned = Some(Pinned {
                version,
                dcid,
                scid,
                keys: PacketKeys::initial(version, dcid.as_bytes(), Side::Client),
                largest: None,
            });
        }
        let Some(pinned) = self.pinned.as_mut() else {
            return Err(QuicError::Undecryptable);
        };
        let opened = protect::open(&pinned.keys, &mut self.packet, pn_offset, pinned.largest);
        let opened = match opened {
            Ok(opened) => opened,
            // Once the keys are pinned, a packet that does not open is
            // not the client's (or not intact): it changes nothing.
            Err(QuicError::Undecryptable | QuicError::Header(HeaderFault::TooShortForSample))
                if known =>
            {
                fed.undecryptable += 1;
                return Ok(());
            }
            Err(error) => {
                if !known {
                    self.pinned = None;
                }
                return Err(error);
            }
        };
        pinned.largest = pinned.largest.max(Some(opened.packet_number));
        self.packets += 1;
        fed.initials += 1;
        let payload = &self.packet[opened.payload..opened.payload + opened.len];
        let crypto = &mut self.crypto;
        frames::walk(payload, |frame| {
            match frame {
                Frame::Crypto { offset, data } => crypto.insert(offset, data)?,
                Frame::ConnectionClose(code) => fed.closed = Some(code),
                Frame::Ignored => {}
            }
            Ok::<_, QuicError>(())
        })
    }

    /// The ClientHello in the CRYPTO bytes received without a gap so far,
    /// as [`parse_client_hello_message`] reads it against the cap.
    pub fn client_hello(&self) -> Result<Parsed<'_>, TlsError> {
        parse_client_hello_message(self.crypto.contiguous(), self.cap)
    }

    /// The CRYPTO bytes received without a gap from offset 0.
    pub fn crypto_prefix(&self) -> &[u8] {
        self.crypto.contiguous()
    }

    /// The flow's version, once an Initial opened.
    pub fn version(&self) -> Option<Version> {
        self.pinned.as_ref().map(|p| p.version)
    }

    /// The Destination Connection ID of the first Initial that opened:
    /// the one the Initial keys of both sides derive from.
    pub fn original_dcid(&self) -> Option<&ConnectionId> {
        self.pinned.as_ref().map(|p| &p.dcid)
    }

    /// The client's Source Connection ID in that Initial: where a reply goes.
    pub fn client_scid(&self) -> Option<&ConnectionId> {
        self.pinned.as_ref().map(|p| &p.scid)
    }

    /// Initial packets opened so far.
    pub fn packets(&self) -> usize {
        self.packets
    }

    /// Datagrams fed so far.
    pub fn datagrams(&self) -> usize {
        self.datagrams
    }
}
