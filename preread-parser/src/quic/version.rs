//! The QUIC versions whose Initial packets the proxy can open, and how each
//! spells its long-header packet types and derives its Initial keys.
//!
//! Owns: [`Version`] (v1, RFC 9000/9001; v2, RFC 9369), the wire numbers,
//! the Initial salts and HKDF labels, and the packet-type bits. Must never:
//! guess at a version it does not list (its packets are opaque).

use core::fmt;

/// QUIC version 1 on the wire (RFC 9000).
pub const VERSION_1: u32 = 0x0000_0001;
/// QUIC version 2 on the wire (RFC 9369).
pub const VERSION_2: u32 = 0x6b33_43cf;
/// The versions a Version Negotiation packet offers, in preference order.
pub const SUPPORTED: [u32; 2] = [VERSION_1, VERSION_2];

/// A QUIC version whose Initial packets can be opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Version {
    /// Version 1 (RFC 9000, RFC 9001).
    V1,
    /// Version 2 (RFC 9369).
    V2,
}

/// What a long header's two type bits say, by version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PacketType {
    /// An Initial packet: the ClientHello travels in these.
    Initial,
    /// 0-RTT: early data, opaque to the proxy, skipped.
    ZeroRtt,
    /// Handshake: a later stage, opaque to the proxy, skipped.
    Handshake,
    /// Retry: sent by servers only.
    Retry,
}

impl Version {
    /// The version with this wire number, if it is one of the two.
    pub fn from_wire(wire: u32) -> Option<Self> {
        match wire {
            VERSION_1 => Some(Self::V1),
            VERSION_2 => Some(Self::V2),
            _ => None,
        }
    }

    /// The wire number.
    pub fn wire(self) -> u32 {
        match self {
            Self::V1 => VERSION_1,
            Self::V2 => VERSION_2,
        }
    }

    /// The packet type of a long header's first byte.
    pub fn packet_type(self, first: u8) -> PacketType {
        let bits = (first >> 4) & 0b11;
        // RFC 9369 §3.2 rotates the v1 codes by one.
        let v1_bits = match self {
            Self::V1 => bits,
            Self::V2 => bits.wrapping_sub(1) & 0b11,
        };
        match v1_bits {
            0 => PacketType::Initial,
            1 => PacketType::ZeroRtt,
            2 => PacketType::Handshake,
            _ => PacketType::Retry,
        }
    }

    /// The two type bits of an Initial packet, in place in the first byte.
    pub(crate) fn initial_type_bits(self) -> u8 {
        match self {
            Self::V1 => 0b00 << 4,
            Self::V2 => 0b01 << 4,
        }
    }

    /// The Initial salt (RFC 9001 §5.2, RFC 9369 §3.3.1).
    pub(crate) fn initial_salt(self) -> &'static [u8; 20] {
        match self {
            Self::V1 => &[
                0x38, 0x76, 0x2c, 0xf7, 0xf5, 0x59, 0x34, 0xb3, 0x4d, 0x17, 0x9a, 0xe6, 0xa4, 0xc8,
                0x0c, 0xad, 0xcc, 0xbb, 0x7f, 0x0a,
            ],
            Self::V2 => &[
                0x0d, 0xed, 0xe3, 0xde, 0xf7, 0x00, 0xa6, 0xdb, 0x81, 0x93, 0x81, 0xbe, 0x6e, 0x26,
                0x9d, 0xcb, 0xf9, 0xbd, 0x2e, 0xd9,
            ],
        }
    }

    /// The labels of the packet key, IV and header-protection key
    /// (RFC 9001 §5.1, RFC 9369 §3.3.2).
    pub(crate) fn labels(self) -> [&'static [u8]; 3] {
        match self {
            Self::V1 => [b"quic key", b"quic iv", b"quic hp"],
            Self::V2 => [b"quicv2 key", b"quicv2 iv", b"quicv2 hp"],
        }
    }
}

/// `v1` or `v2`, as logs and `preread inspect` name them.
impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::V1 => "v1",
            Self::V2 => "v2",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::{PacketType, Version};

    #[test]
    fn type_bits_rotate_in_v2() {
        let types = |version: Version| [0xc0u8, 0xd0, 0xe0, 0xf0].map(|b| version.packet_type(b));
        use PacketType::{Handshake, Initial, Retry, ZeroRtt};
        assert_eq!(types(Version::V1), [Initial, ZeroRtt, Handshake, Retry]);
        assert_eq!(types(Version::V2), [Retry, Initial, ZeroRtt, Handshake]);
        for version in [Version::V1, Version::V2] {
            let first = 0xc0 | version.initial_type_bits();
            assert_eq!(version.packet_type(first), Initial);
            assert_eq!(Version::from_wire(version.wire()), Some(version));
        }
        assert_eq!(Version::from_wire(0xff00_001d), None);
    }
}
