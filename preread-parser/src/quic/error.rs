//! Why the client's datagrams can never yield a ClientHello.
//!
//! Owns: [`QuicError`] and the faults behind it, each with a message that
//! names the rule the packet broke. Must never: carry a borrow of the
//! datagram (errors outlive it in logs).

use core::fmt;

/// A datagram, or the flow so far, that can never yield a ClientHello.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum QuicError {
    /// The first packet of the datagram has a short header (or is not
    /// QUIC): a flow's first flight starts with a long header.
    NotLongHeader,
    /// A long header broke a rule of RFC 9000 §17.2.
    Header(HeaderFault),
    /// A version this proxy cannot read (neither v1 nor v2), or a Version
    /// Negotiation packet (version 0), which clients never send.
    UnsupportedVersion(u32),
    /// The client's first Initial packet does not open with the keys its
    /// Destination Connection ID gives (RFC 9001 §5.2).
    Undecryptable,
    /// An opened Initial packet's frames break RFC 9000 §12.4.
    Frame(FrameFault),
    /// The CRYPTO stream breaks the listener's cap or RFC 9000 §2.2.
    Crypto(CryptoFault),
}

/// Which long-header rule a packet broke.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum HeaderFault {
    /// The packet stops inside its header, or its Length runs past the datagram.
    Truncated,
    /// The fixed bit (0x40) is clear.
    FixedBitClear,
    /// A connection ID longer than 20 bytes in a v1 or v2 packet.
    ConnectionIdTooLong(u8),
    /// Too few bytes after the packet number's offset for the
    /// header-protection sample (RFC 9001 §5.4.2).
    TooShortForSample,
    /// The reserved bits are set once header protection is removed.
    ReservedBits,
}

/// Which frame rule an opened Initial packet broke.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FrameFault {
    /// A frame stops before its fields end.
    Truncated,
    /// A frame type an Initial packet may not carry (only PADDING, PING,
    /// ACK, CRYPTO and CONNECTION_CLOSE may).
    NotInInitial(u64),
    /// A packet without a frame.
    Empty,
}

/// Which rule the CRYPTO stream broke.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CryptoFault {
    /// CRYPTO data ends past the listener's cap.
    BeyondCap {
        /// Where the data ends in the stream.
        end: u64,
        /// The cap.
        cap: usize,
    },
    /// Bytes sent twice at one offset differ (RFC 9000 §2.2): the proxy and
    /// the server could read different hellos.
    Conflicting(u64),
    /// More separate pieces than the reassembly keeps track of.
    TooManyGaps(usize),
}

impl fmt::Display for QuicError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotLongHeader => f.write_str("not a QUIC long-header packet"),
            Self::Header(fault) => write!(f, "malformed QUIC long header: {fault}"),
            Self::UnsupportedVersion(0) => {
                f.write_str("a Version Negotiation packet (version 0) from a client")
            }
            Self::UnsupportedVersion(v) => write!(f, "QUIC version 0x{v:08x} is not v1 or v2"),
            Self::Undecryptable => {
                f.write_str("the client's first Initial packet does not open with its Initial keys")
            }
            Self::Frame(fault) => write!(f, "malformed QUIC Initial payload: {fault}"),
            Self::Crypto(fault) => write!(f, "QUIC CRYPTO stream: {fault}"),
        }
    }
}

impl fmt::Display for HeaderFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Truncated => f.write_str("the packet stops inside its header or its length"),
            Self::FixedBitClear => f.write_str("the fixed bit is clear"),
            Self::ConnectionIdTooLong(len) => {
                write!(f, "connection ID of {len} bytes (at most 20)")
            }
            Self::TooShortForSample => f.write_str("too short for a header-protection sample"),
            Self::ReservedBits => f.write_str("reserved header bits set"),
        }
    }
}

impl fmt::Display for FrameFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Truncated => f.write_str("a frame stops before its fields end"),
            Self::NotInInitial(t) => write!(f, "frame type 0x{t:02x} is not allowed in an Initial"),
            Self::Empty => f.write_str("a packet without frames"),
        }
    }
}

impl fmt::Display for CryptoFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::BeyondCap { end, cap } => {
                write!(f, "data up to byte {end} exceeds the cap of {cap} bytes")
            }
            Self::Conflicting(offset) => write!(f, "different bytes sent twice at offset {offset}"),
            Self::TooManyGaps(n) => write!(f, "more than {n} separate pieces"),
        }
    }
}

impl core::error::Error for QuicError {}

impl From<HeaderFault> for QuicError {
    fn from(fault: HeaderFault) -> Self {
        Self::Header(fault)
    }
}

impl From<FrameFault> for QuicError {
    fn from(fault: FrameFault) -> Self {
        Self::Frame(fault)
    }
}

impl From<CryptoFault> for QuicError {
    fn from(fault: CryptoFault) -> Self {
        Self::Crypto(fault)
    }
}

#[cfg(test)]
mod tests {
    use super::{CryptoFault, FrameFault, HeaderFault, QuicError};

    /// Every error names its rule in words of its own.
    #[test]
    fn messages_name_the_fault() {
        let cases = [
            (QuicError::NotLongHeader, "long-header"),
            (HeaderFault::Truncated.into(), "stops inside"),
            (HeaderFault::FixedBitClear.into(), "fixed bit"),
            (HeaderFault::ConnectionIdTooLong(21).into(), "21 bytes"),
            (HeaderFault::TooShortForSample.into(), "sample"),
            (HeaderFault::ReservedBits.into(), "reserved"),
            (QuicError::UnsupportedVersion(0), "Version Negotiation"),
            (QuicError::UnsupportedVersion(0xff00_001d), "0xff00001d"),
            (QuicError::Undecryptable, "does not open"),
            (FrameFault::Truncated.into(), "stops before"),
            (FrameFault::NotInInitial(0x08).into(), "0x08"),
            (FrameFault::Empty.into(), "without frames"),
            (
                CryptoFault::BeyondCap {
                    end: 70000,
                    cap: 65536,
                }
                .into(),
                "65536",
            ),
            (CryptoFault::Conflicting(12).into(), "offset 12"),
            (CryptoFault::TooManyGaps(64).into(), "64 separate"),
        ];
        let mut seen = std::collections::HashSet::new();
        for (error, words) in cases {
            let message: String = QuicError::to_string(&error);
            assert!(message.contains(words), "{error:?}: {message}");
            assert!(seen.insert(message.clone()), "{message} twice");
        }
    }
}
