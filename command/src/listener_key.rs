//! What names a listener: its protocol and its address. A TCP listener and
//! a QUIC listener may share one address (TCP and UDP port 443, the usual
//! HTTP/3 deployment), so the address alone names neither.
//!
//! Owns: [`ListenerKey`], its reading from a request's `address` and
//! `protocol` fields and its writing back (TCP is the unset protocol, so a
//! TCP listener's requests read as they did before QUIC existed). Must
//! never: look at the state.

use core::fmt;
use std::net::SocketAddr;
use std::str::FromStr;

use crate::codes::ErrorCode;
use crate::proto;
use crate::socket_address::parse_address;
use crate::validation_error::ValidationError;

/// A listener's identity: `(address, protocol)`, ordered by address first
/// so that the two listeners of one address list side by side.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ListenerKey {
    /// Where it listens.
    pub address: SocketAddr,
    /// A QUIC (UDP) listener rather than a TCP one.
    pub quic: bool,
}

impl ListenerKey {
    /// The TCP listener at `address`.
    #[must_use]
    pub const fn tcp(address: SocketAddr) -> Self {
        Self {
            address,
            quic: false,
        }
    }

    /// The QUIC listener at `address`.
    #[must_use]
    pub const fn quic(address: SocketAddr) -> Self {
        Self {
            address,
            quic: true,
        }
    }

    /// The listener of the other protocol at the same address.
    #[must_use]
    pub const fn other(self) -> Self {
        Self {
            address: self.address,
            quic: !self.quic,
        }
    }

    /// `"tcp"` or `"quic"`.
    #[must_use]
    pub const fn protocol_name(self) -> &'static str {
        if self.quic { "quic" } else { "tcp" }
    }

    /// The `protocol` field of a request naming it: unset for TCP.
    #[must_use]
    pub fn protocol_field(self) -> Option<i32> {
        self.quic.then_some(proto::ListenerProtocol::Quic as i32)
    }

    /// The request naming it.
    #[must_use]
    pub fn to_proto(self) -> proto::ListenerAddress {
        proto::ListenerAddress {
            address: self.address.to_string(),
            protocol: self.protocol_field(),
        }
    }

    /// The listener a listener's config names.
    pub fn of_config(config: &proto::TcpListenerConfig) -> Result<Self, ValidationError> {
        let address = parse_address("listener", &config.address)?;
        Ok(Self {
            address,
            quic: is_quic("listener", config.protocol)?,
        })
    }

    /// The listener a request names.
    pub fn of_request(at: &proto::ListenerAddress) -> Result<Self, ValidationError> {
        let address = parse_address("listener", &at.address)?;
        Ok(Self {
            address,
            quic: is_quic("listener", at.protocol)?,
        })
    }
}

/// Whether a request's `protocol` field says QUIC; unset is TCP, and an
/// unknown value is refused with `what` in the message.
pub(crate) fn is_quic(what: &str, protocol: Option<i32>) -> Result<bool, ValidationError> {
    match protocol.map(proto::ListenerProtocol::try_from) {
        None | Some(Ok(proto::ListenerProtocol::Tcp)) => Ok(false),
        Some(Ok(proto::ListenerProtocol::Quic)) => Ok(true),
        Some(Err(_)) => Err(ValidationError::new(
            ErrorCode::InvalidValue,
            format!(
                "{what}: protocol {} is unknown: use tcp (0) or quic (1)",
                protocol.unwrap_or_default()
            ),
        )),
    }
}

/// Reads what [`Display`](fmt::Display) writes: `ip:port` for a TCP
/// listener, `ip:port (quic)` for a QUIC one.
impl FromStr for ListenerKey {
    type Err = std::net::AddrParseError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text.strip_suffix(" (quic)") {
            Some(address) => Ok(Self::quic(address.parse()?)),
            None => Ok(Self::tcp(text.parse()?)),
        }
    }
}

/// `127.0.0.1:443` for a TCP listener, `127.0.0.1:443 (quic)` for a QUIC
/// one: TCP listeners read as they did before QUIC existed.
impl fmt::Display for ListenerKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.quic {
            write!(f, "{} (quic)", self.address)
        } else {
            write!(f, "{}", self.address)
        }
    }
}
