//! The PROXY protocol header (HAProxy's `proxy-protocol.txt`, versions 1 and
//! 2) that a load balancer in front of the proxy puts before the first byte
//! of the client's stream.
//!
//! Owns: [`parse_proxy_header`] (and [`parse_proxy_header_within`], the
//! same for a caller with a byte cap), the entry point, which tells the text
//! form (v1, `v1`) from the binary form (v2, `v2`) by their signatures, the
//! types it returns, and the v2 writer (`write`) used when the proxy itself
//! speaks PROXY protocol to a backend.
//!
//! Must never: allocate while parsing, look at bytes after the header (they
//! are the client's payload, e.g. the TLS ClientHello, starting at
//! [`ProxyHeader::len`]), answer "incomplete" for a prefix that can never
//! become a header, or panic on any input.

mod v1;
mod v2;
mod write;

use core::fmt;
use core::iter::FusedIterator;
use core::net::SocketAddr;

use nom::Parser;
use nom::number::complete::{be_u8, be_u16};

pub use crate::tls::Needed;
pub use write::{ProxyWriteError, write_v2, write_v2_local};

/// The v1 signature: the text line starts with these six bytes.
pub const V1_SIGNATURE: &[u8; 6] = b"PROXY ";

/// Longest v1 line, CRLF included (the spec's worst case is 107 bytes).
pub const V1_MAX_LEN: usize = 107;

/// The v2 signature: the first 12 bytes of every binary header.
pub const V2_SIGNATURE: &[u8; 12] = b"\r\n\r\n\0\r\nQUIT\n";

/// Length of the fixed part of a v2 header: signature, version and command,
/// family and transport, and the 16-bit length of what follows.
pub const V2_FIXED_LEN: usize = 16;

/// Length of a v2 address block for AF_INET: two IPv4 addresses, two ports.
pub const V2_ADDR_LEN_INET: usize = 12;
/// Length of a v2 address block for AF_INET6: two IPv6 addresses, two ports.
pub const V2_ADDR_LEN_INET6: usize = 36;
/// Length of a v2 address block for AF_UNIX: two 108-byte socket paths.
pub const V2_ADDR_LEN_UNIX: usize = 216;
/// Length of one AF_UNIX address in a v2 header (`sun_path`).
pub const V2_UNIX_ADDR_LEN: usize = 108;

/// TLV type: the ALPN protocol the client negotiated with the sender.
pub const PP2_TYPE_ALPN: u8 = 0x01;
/// TLV type: the host name the client asked for (e.g. its TLS SNI).
pub const PP2_TYPE_AUTHORITY: u8 = 0x02;
/// TLV type: a CRC32C checksum of the header (not verified by this parser).
pub const PP2_TYPE_CRC32C: u8 = 0x03;
/// TLV type: padding, to be ignored.
pub const PP2_TYPE_NOOP: u8 = 0x04;
/// TLV type: an opaque connection identifier of up to 128 bytes.
pub const PP2_TYPE_UNIQUE_ID: u8 = 0x05;
/// TLV type: TLS information about the client connection (with sub-TLVs).
pub const PP2_TYPE_SSL: u8 = 0x20;
/// TLV type: the network namespace the connection was accepted in.
pub const PP2_TYPE_NETNS: u8 = 0x30;

/// Shortest possible v1 header: `PROXY UNKNOWN\r\n`.
const V1_MIN_LEN: usize = 15;

/// Outcome of a parse that did not fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProxyParsed<'a> {
    /// The whole header is in the window.
    Complete(ProxyHeader<'a>),
    /// More bytes are needed; the window so far is a valid prefix. The count
    /// is a lower bound on the bytes still missing for a complete header.
    Incomplete(Needed),
}

/// What the v2 command says about the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Command {
    /// The sender opened the connection on its own (e.g. a health check):
    /// use the real endpoints; the header carries no addresses.
    Local,
    /// The connection is relayed for a client; the header says who. Every
    /// v1 header is a `Proxy`.
    Proxy,
}

/// The transport the sender accepted the relayed connection on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transport {
    /// SOCK_STREAM (TCP, or a stream-oriented UNIX socket). Always this in v1.
    Stream,
    /// SOCK_DGRAM (UDP, or a datagram UNIX socket).
    Dgram,
}

/// The endpoints a header carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Addresses<'a> {
    /// v1 TCP4/TCP6, v2 AF_INET/AF_INET6. Both addresses have the same family.
    Inet {
        /// Stream (TCP) or datagram (UDP).
        transport: Transport,
        /// The client, as the sender saw it.
        source: SocketAddr,
        /// Where the client connected to, as the sender saw it.
        destination: SocketAddr,
    },
    /// v2 AF_UNIX: two raw 108-byte `sun_path` fields, NUL-padded (a leading
    /// NUL denotes an abstract socket), borrowed from the window.
    Unix {
        /// Stream or datagram socket.
        transport: Transport,
        /// The client's socket path.
        source: &'a [u8; V2_UNIX_ADDR_LEN],
        /// The socket path the client connected to.
        destination: &'a [u8; V2_UNIX_ADDR_LEN],
    },
    /// No addresses: v1 `UNKNOWN`, v2 AF_UNSPEC, or any v2 LOCAL header.
    Unspecified,
}

/// A header that validation accepted. Slices borrow the window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProxyHeader<'a> {
    version: u8,
    len: usize,
    command: Command,
    addresses: Addresses<'a>,
    /// The v2 TLV area, proven at parse time to be a whole number of TLVs.
    tlvs: &'a [u8],
}

#[expect(
    clippy::len_without_is_empty,
    reason = "a header is never empty; len() is where the payload starts"
)]
impl<'a> ProxyHeader<'a> {
    /// 1 for the text form, 2 for the binary form.
    pub fn version(&self) -> u8 {
        self.version
    }

    /// Length of the header in bytes, i.e. the offset in the window where the
    /// client's payload (e.g. the TLS ClientHello) starts.
    pub fn len(&self) -> usize {
        self.len
    }

    /// LOCAL or PROXY (always PROXY in v1).
    pub fn command(&self) -> Command {
        self.command
    }

    /// The endpoints the header carries.
    pub fn addresses(&self) -> Addresses<'a> {
        self.addresses
    }

    /// The client's address, when the header carries an IP one.
    pub fn source(&self) -> Option<SocketAddr> {
        match self.addresses {
            Addresses::Inet { source, .. } => Some(source),
            Addresses::Unix { .. } | Addresses::Unspecified => None,
        }
    }

    /// The address the client connected to, when the header carries an IP one.
    pub fn destination(&self) -> Option<SocketAddr> {
        match self.addresses {
            Addresses::Inet { destination, .. } => Some(destination),
            Addresses::Unix { .. } | Addresses::Unspecified => None,
        }
    }

    /// The v2 TLVs in wire order (always empty for v1 and for LOCAL).
    pub fn tlvs(&self) -> Tlvs<'a> {
        Tlvs { rest: self.tlvs }
    }

    /// The value of the first TLV of type `tlv_type`.
    pub fn tlv(&self, tlv_type: u8) -> Option<&'a [u8]> {
        self.tlvs()
            .find_map(|(t, value)| (t == tlv_type).then_some(value))
    }

    /// The first [`PP2_TYPE_AUTHORITY`] value, raw (not validated as a host name).
    pub fn authority(&self) -> Option<&'a [u8]> {
        self.tlv(PP2_TYPE_AUTHORITY)
    }

    /// The first [`PP2_TYPE_ALPN`] value, raw.
    pub fn alpn(&self) -> Option<&'a [u8]> {
        self.tlv(PP2_TYPE_ALPN)
    }
}

/// Iterator over v2 TLVs as `(type, value)`, borrowing the window.
///
/// The area it walks was checked at parse time to be tiled exactly by TLVs,
/// so iteration never meets a truncated one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tlvs<'a> {
    rest: &'a [u8],
}

impl<'a> Tlvs<'a> {
    /// The raw TLV area that remains to be iterated.
    pub fn as_bytes(&self) -> &'a [u8] {
        self.rest
    }
}

type TlvRes<'a> = nom::IResult<&'a [u8], (u8, &'a [u8]), ()>;

/// One TLV off the front of `input`, with complete parsers: the TLV area is
/// already whole, so a shortfall is an overrun, not a wait for more bytes.
fn tlv(input: &[u8]) -> TlvRes<'_> {
    (be_u8, nom::multi::length_data(be_u16)).parse(input)
}

impl<'a> Iterator for Tlvs<'a> {
    type Item = (u8, &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        match tlv(self.rest) {
            Ok((rest, item)) => {
                self.rest = rest;
                Some(item)
            }
            // Unreachable for a parsed header (validated); stop rather than loop.
            Err(_) => {
                self.rest = &[];
                None
            }
        }
    }
}

impl FusedIterator for Tlvs<'_> {}

/// Why a window can never become a PROXY protocol header, whatever follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProxyError {
    /// The first bytes match neither `PROXY ` (v1) nor the 12-byte v2 signature.
    NotProxyProtocol,
    /// The v1 line breaks a rule of the text format.
    V1Malformed(V1Fault),
    /// No CRLF within the first 107 bytes of a v1 line.
    V1TooLong,
    /// The v2 version nibble (the high four bits of byte 13) is not 2.
    V2BadVersion(u8),
    /// The v2 command nibble (the low four bits of byte 13) is neither
    /// LOCAL (0) nor PROXY (1).
    V2BadCommand(u8),
    /// The v2 family/transport byte (byte 14) is not one of 0x00, 0x11,
    /// 0x12, 0x21, 0x22, 0x31, 0x32.
    V2BadFamily(u8),
    /// A v2 PROXY header's length is shorter than its family's address block.
    V2AddressBlockTooShort {
        /// The family/transport byte.
        family: u8,
        /// The declared length of everything after the fixed 16 bytes.
        len: u16,
        /// The address block length the family needs.
        needed: usize,
    },
    /// A v2 TLV runs past the end of the header.
    V2BadTlv {
        /// Offset of the TLV from the first byte of the header.
        offset: usize,
        /// Bytes left in the header from that offset.
        remaining: usize,
    },
}

/// Which rule of the v1 text format a line broke.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum V1Fault {
    /// The protocol token is not `TCP4`, `TCP6` or `UNKNOWN`.
    UnknownProtocol,
    /// The source address is not a valid address of the protocol's family.
    BadSourceAddress,
    /// The destination address is not a valid address of the protocol's family.
    BadDestinationAddress,
    /// The source port is not a decimal 0..=65535 without sign or leading zero.
    BadSourcePort,
    /// The destination port is not a decimal 0..=65535 without sign or leading zero.
    BadDestinationPort,
    /// An empty field: two spaces in a row, or a space right before CRLF.
    EmptyField,
    /// The line ends before the destination port.
    MissingField,
    /// Something follows the destination port.
    TrailingData,
    /// A CR or LF that is not part of the terminating CRLF.
    StrayLineBreak,
}

impl fmt::Display for ProxyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotProxyProtocol => {
                f.write_str("not a PROXY protocol header (neither the v1 nor the v2 signature)")
            }
            Self::V1Malformed(fault) => write!(f, "malformed PROXY v1 line: {fault}"),
            Self::V1TooLong => write!(f, "PROXY v1 line has no CRLF within {V1_MAX_LEN} bytes"),
            Self::V2BadVersion(v) => write!(f, "PROXY v2 header has version {v}, not 2"),
            Self::V2BadCommand(c) => {
                write!(f, "PROXY v2 command {c} is neither LOCAL (0) nor PROXY (1)")
            }
            Self::V2BadFamily(fam) => write!(
                f,
                "PROXY v2 family/transport byte 0x{fam:02x} is not one of \
                 0x00, 0x11, 0x12, 0x21, 0x22, 0x31, 0x32"
            ),
            Self::V2AddressBlockTooShort {
                family,
                len,
                needed,
            } => write!(
                f,
                "PROXY v2 length {len} is shorter than the {needed}-byte address block \
                 of family 0x{family:02x}"
            ),
            Self::V2BadTlv { offset, remaining } => write!(
                f,
                "PROXY v2 TLV at header offset {offset} overruns the header \
                 ({remaining} bytes left)"
            ),
        }
    }
}

impl fmt::Display for V1Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::UnknownProtocol => "protocol is not TCP4, TCP6 or UNKNOWN",
            Self::BadSourceAddress => "source address invalid for the protocol",
            Self::BadDestinationAddress => "destination address invalid for the protocol",
            Self::BadSourcePort => "source port not a decimal 0-65535 without leading zero",
            Self::BadDestinationPort => {
                "destination port not a decimal 0-65535 without leading zero"
            }
            Self::EmptyField => "empty field (two spaces in a row, or a space before CRLF)",
            Self::MissingField => "line ends before the destination port",
            Self::TrailingData => "data after the destination port",
            Self::StrayLineBreak => "CR or LF inside the line",
        })
    }
}

impl core::error::Error for ProxyError {}

impl From<V1Fault> for ProxyError {
    fn from(fault: V1Fault) -> Self {
        Self::V1Malformed(fault)
    }
}

/// Parses the PROXY protocol header at the start of `window`, v1 or v2.
///
/// Call with the whole window received so far, from the connection's first
/// byte, every time more bytes arrive. The verdict is an error as soon as
/// the bytes seen can no longer begin a valid header; until then a short
/// window is [`ProxyParsed::Incomplete`]. On success the payload starts at
/// `window[header.len()..]`.
pub fn parse_proxy_header(window: &[u8]) -> Result<ProxyParsed<'_>, ProxyError> {
    match window.first() {
        None => Ok(ProxyParsed::Incomplete(Needed::at_least(
            V1_MIN_LEN.min(V2_FIXED_LEN),
        ))),
        Some(&b) if b == V1_SIGNATURE[0] => v1::parse(window),
        Some(&b) if b == V2_SIGNATURE[0] => v2::parse(window),
        Some(_) => Err(ProxyError::NotProxyProtocol),
    }
}

/// [`parse_proxy_header`] for a caller that holds at most `limit` bytes of
/// the window (`window` itself no longer than that).
///
/// The answer is [`ProxyParsed::Incomplete`] with [`Needed::AtLeast`]`(n)`
/// and `window.len() + n > limit` exactly when the header cannot end within
/// `limit` bytes: the window is at the limit, or the length field of a v2
/// header announces more. Nothing after that field is examined before the
/// header is whole, so the answer is the same however much of the rest has
/// arrived. Every other count (a v2 header before its length, a v1 line,
/// which announces none) is lowered to what `limit` leaves: bytes still to
/// come may yet prove the header invalid.
pub fn parse_proxy_header_within(
    window: &[u8],
    limit: usize,
) -> Result<ProxyParsed<'_>, ProxyError> {
    match parse_proxy_header(window)? {
        // Its count is exact: the announced total less the window.
        ProxyParsed::Incomplete(needed) if v2::announced(window) => {
            Ok(ProxyParsed::Incomplete(needed))
        }
        ProxyParsed::Incomplete(needed) => {
            Ok(ProxyParsed::Incomplete(needed.within(window.len(), limit)))
        }
        complete @ ProxyParsed::Complete(_) => Ok(complete),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_window_is_incomplete() {
        assert!(matches!(
            parse_proxy_header(b""),
            Ok(ProxyParsed::Incomplete(_))
        ));
    }

    #[test]
    fn other_first_byte_is_rejected_at_once() {
        for first in [0x16u8, b'G', 0, b'p', b'\n'] {
            assert_eq!(
                parse_proxy_header(&[first]),
                Err(ProxyError::NotProxyProtocol),
                "first byte {first:#04x}"
            );
        }
    }

    #[test]
    fn tls_record_is_not_proxy_protocol() {
        assert_eq!(
            parse_proxy_header(&[0x16, 0x03, 0x01, 0x02, 0x00]),
            Err(ProxyError::NotProxyProtocol)
        );
    }

    #[test]
    fn tlv_iterator_stops_on_garbage() {
        // Not reachable through parse_proxy_header; the iterator must still
        // end rather than panic or spin.
        let mut tlvs = Tlvs {
            rest: &[PP2_TYPE_NOOP, 0, 9, 1],
        };
        assert_eq!(tlvs.next(), None);
        assert_eq!(tlvs.next(), None);
    }

    #[test]
    fn display_is_operator_readable() {
        let err = ProxyError::V2AddressBlockTooShort {
            family: 0x11,
            len: 8,
            needed: 12,
        };
        assert_eq!(
            err.to_string(),
            "PROXY v2 length 8 is shorter than the 12-byte address block of family 0x11"
        );
        assert_eq!(
            ProxyError::from(V1Fault::UnknownProtocol).to_string(),
            "malformed PROXY v1 line: protocol is not TCP4, TCP6 or UNKNOWN"
        );
    }
}
