//! Wire parsers for the first bytes of a proxied TCP connection.
//!
//! Owns: TLS record framing and the ClientHello ([`tls`]), and PROXY
//! protocol v1/v2 headers ([`proxy`]). Every parser takes the whole window of
//! bytes received so far, borrows from it, and tells "need more bytes" apart
//! from "this can never become valid".
//!
//! Must never: allocate on the common path, perform I/O, read a clock, or
//! panic on any input. Only the multi-record ClientHello path writes into a
//! caller-owned scratch buffer, because its body is not contiguous in the
//! window.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod proxy;
pub mod tls;
