//! QUIC Initial packets as a proxy reads them: the client's first flight,
//! opened with the keys anyone on the path can derive, its CRYPTO stream
//! put back together, and the ClientHello in it handed to
//! [`crate::tls::parse_client_hello_message`] (no record layer in QUIC).
//!
//! Owns:
//! - [`ClientInitials`]: one flow's reader. Feed it every datagram the
//!   client sends, in the order received ([`ClientInitials::feed`]); ask
//!   it for the ClientHello after each ([`ClientInitials::client_hello`]).
//!   It pins the version and the keys from the first Initial that opens,
//!   skips 0-RTT and Handshake packets, reads coalesced packets, and
//!   reassembles CRYPTO frames by offset under the caller's cap;
//! - the pieces it is built of, public for tools and tests: long headers
//!   ([`parse_long_header`]), versions ([`Version`]), Initial keys
//!   ([`PacketKeys`]), the frame walk ([`frames`]) and the reassembly
//!   ([`CryptoStream`]);
//! - what the proxy sends: [`seal_initial`] (any Initial, either side's
//!   keys), [`connection_close`] (a server Initial carrying
//!   CONNECTION_CLOSE with CRYPTO_ERROR `0x100 + alert`) and
//!   [`version_negotiation`]; and [`client_first_flight`], what a client
//!   sends, for tests and tools.
//!
//! Must never: panic on any datagram, write a cipher of its own (the
//! primitives are `ring`'s), or read past a packet's Length.
//!
//! # Reading a client's first flight
//!
//! ```
//! use preread_parser::quic::{ClientInitials, InitialPacket, PacketKeys, Side, Version};
//! use preread_parser::quic::{frames, seal_initial};
//! use preread_parser::tls::Parsed;
//!
//! // A ClientHello for example.com, as a client would seal it.
//! let mut hello = vec![1, 0, 0, 63, 3, 3];
//! hello.extend([1; 32]); // random
//! hello.extend([0, 0, 2, 0x13, 0x01, 1, 0, 0, 20, 0, 0, 0, 16, 0, 14, 0, 0, 11]);
//! hello.extend(b"example.com");
//! let dcid = [0x83, 0x94, 0xc8, 0xf0, 0x3e, 0x51, 0x57, 0x08];
//! let mut payload = Vec::new();
//! frames::write_crypto(&mut payload, 0, &hello);
//! let padding = 1200 - 60 - payload.len();
//! frames::write_padding(&mut payload, padding);
//! let packet = InitialPacket {
//!     version: Version::V1,
//!     dcid: &dcid,
//!     scid: &[],
//!     token: &[],
//!     packet_number: 0,
//!     pn_len: 4,
//! };
//! let mut datagram = Vec::new();
//! let keys = PacketKeys::initial(Version::V1, &dcid, Side::Client);
//! seal_initial(&keys, &packet, &payload, &mut datagram);
//!
//! // The proxy's side: one reader per flow, capped like a TCP window.
//! let mut flow = ClientInitials::new(16_384);
//! let fed = flow.feed(&datagram)?;
//! assert_eq!(fed.initials, 1);
//! let Ok(Parsed::Complete(parsed)) = flow.client_hello() else {
//!     panic!("a whole ClientHello");
//! };
//! assert_eq!(parsed.server_name, Some(&b"example.com"[..]));
//! assert_eq!(flow.version(), Some(Version::V1));
//! # Ok::<(), preread_parser::quic::QuicError>(())
//! ```

mod build;
mod error;
mod flow;
pub mod frames;
mod header;
mod keys;
mod protect;
mod reassembly;
pub mod varint;
mod version;

#[cfg(test)]
mod test_vectors;
#[cfg(test)]
mod tests;

pub use build::{
    CRYPTO_ERROR, PROTOCOL_VIOLATION, client_first_flight, connection_close, version_negotiation,
};
pub use error::{CryptoFault, FrameFault, HeaderFault, QuicError};
pub use flow::{ClientInitials, ConnectionId, Fed};
pub use header::{LongHeader, MAX_CID_LEN, parse_long_header};
pub use keys::{PacketKeys, Side};
pub use protect::{InitialPacket, TAG_LEN, open_initial, seal_initial};
pub use reassembly::{CryptoStream, MAX_PIECES};
pub use version::{PacketType, SUPPORTED, VERSION_1, VERSION_2, Version};

/// The smallest datagram that may carry a client's Initial (RFC 9000
/// §14.1): a server must discard a smaller one, and answers only a larger
/// one (RFC 9000 §8.1, the amplification limit).
pub const MIN_INITIAL_DATAGRAM: usize = 1200;
