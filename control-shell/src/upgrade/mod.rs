//! The upgrade's two halves that sit outside the command server: what
//! crosses between the running process and its successor, and the
//! successor's side.
//!
//! Owns: the handover's wire format and the inherited descriptors
//! ([`handover`]), the QUIC sockets and flows in it ([`quic`]), and the new
//! process taking them over ([`takeover`]). The
//! old process's half is the command server's (`server::upgrade`). Must
//! never: decide when an upgrade runs; the command server's upgrade
//! request does.

pub mod handover;
pub mod quic;
pub mod takeover;
