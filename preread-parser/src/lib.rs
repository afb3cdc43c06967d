//! Wire parsers for the first bytes of a proxied TCP connection, and for
//! the first datagrams of a QUIC flow.
//!
//! Owns: TLS record framing and the ClientHello ([`tls`]), PROXY
//! protocol v1/v2 headers ([`proxy`]), and QUIC Initial packets ([`quic`]). Every parser takes the whole window of
//! bytes received so far, borrows from it, and tells "need more bytes" apart
//! from "this can never become valid".
//!
//! Must never: allocate on the common path, perform I/O, read a clock, or
//! panic on any input. Only the multi-record ClientHello path writes into a
//! caller-owned scratch buffer, because its body is not contiguous in the
//! window; and the QUIC reader owns its buffers, because a datagram is
//! decrypted in place and its CRYPTO frames come in any order.
//!
//! # Parsing a ClientHello
//!
//! Hand [`tls::parse_client_hello`] the bytes read so far. These are the 81
//! bytes of a minimal ClientHello for `example.com` offering `h2`:
//!
//! ```
//! use preread_parser::tls::{Parsed, parse_client_hello};
//!
//! let mut hello = vec![22, 3, 1, 0, 76]; // record: handshake, 76 bytes
//! hello.extend([1, 0, 0, 72, 3, 3]); // ClientHello, 72 bytes, TLS 1.2
//! hello.extend([1; 32]); // random
//! hello.extend([0, 0, 2, 0x13, 0x01, 1, 0]); // session id, suites, compression
//! hello.extend([0, 29]); // extensions, 29 bytes
//! hello.extend([0, 0, 0, 16, 0, 14, 0, 0, 11]); // server_name: host_name
//! hello.extend(b"example.com");
//! hello.extend([0, 16, 0, 5, 0, 3, 2]); // ALPN
//! hello.extend(b"h2");
//!
//! // Only the multi-record case writes here; reuse one per connection.
//! let mut scratch = Vec::new();
//! let Ok(Parsed::Complete(parsed)) = parse_client_hello(&hello, &mut scratch) else {
//!     panic!("a whole ClientHello");
//! };
//! assert_eq!(parsed.server_name, Some(&b"example.com"[..]));
//! let alpn: Vec<&[u8]> = parsed.alpn.into_iter().flat_map(|offer| offer.iter()).collect();
//! assert_eq!(alpn, [&b"h2"[..]]);
//! // Bytes past `end` are application data, to forward untouched.
//! assert_eq!(parsed.end, hello.len());
//!
//! // A window that stops early is a valid prefix, never an error...
//! let prefix = &hello[..40];
//! assert!(matches!(parse_client_hello(prefix, &mut scratch), Ok(Parsed::Incomplete(_))));
//! // ...and bytes that can never become a ClientHello are, at once.
//! let error = parse_client_hello(b"GET / HTTP/1.1\r\n", &mut scratch).unwrap_err();
//! assert_eq!(error.to_string(), "not a TLS handshake record");
//! ```
//!
//! # Behind a load balancer
//!
//! With a PROXY header in front, parse it first and the ClientHello from
//! where it ends ([`proxy::ProxyHeader::len`]):
//!
//! ```
//! use preread_parser::proxy::{ProxyParsed, parse_proxy_header};
//! use preread_parser::tls::{Needed, Parsed, parse_client_hello};
//!
//! let window = b"PROXY TCP4 192.0.2.7 198.51.100.1 51234 443\r\n\x16\x03\x01";
//! let Ok(ProxyParsed::Complete(header)) = parse_proxy_header(window) else {
//!     panic!("a whole v1 header");
//! };
//! assert_eq!(header.source(), Some("192.0.2.7:51234".parse()?));
//! let tls = &window[header.len()..];
//! let mut scratch = Vec::new();
//! // Three bytes of a record header: two more, at least, before anything is known.
//! let more = match parse_client_hello(tls, &mut scratch) {
//!     Ok(Parsed::Incomplete(Needed::AtLeast(more))) => more.get(),
//!     other => panic!("an incomplete record header, not {other:?}"),
//! };
//! assert_eq!(more, 2);
//! # Ok::<(), std::net::AddrParseError>(())
//! ```
//!
//! `examples/what_did_it_send.rs` puts this on a socket: it prints what each
//! client connecting to it offered.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod proxy;
pub mod quic;
pub mod tls;

/// The README's code blocks, compiled and run as doctests so that the first
/// code a reader copies works.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
