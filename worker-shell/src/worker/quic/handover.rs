//! What one decided QUIC flow carries across an upgrade, in pure code:
//! the snapshot the old process takes ([`FlowSnapshot`]), its wire form
//! (`proto::HandedFlow`, inside the `Handover`'s `QuicHandover`), and the
//! successor's validation of it.
//!
//! Owns: the layout version ([`QUIC_HANDOVER_VERSION`]), the conversion
//! both ways, and the rules a handed flow must meet before a successor
//! relays it (a client and a backend address, 1 to 20 bytes per connection
//! ID and at most [`MAX_CIDS`] of them, a cluster and a backend id, a SNI
//! that normalizes, a QUIC version the parser knows, an idle time within
//! the flow's age). Must never: touch a socket or a clock (times cross as
//! durations before the handover, and become instants with the `now` the
//! caller passes), or panic on a field the other process wrote: a flow
//! that breaks a rule is refused alone, the others are kept.
//!
//! The backend socket travels beside the message, as an inherited
//! descriptor the shell checks (`control-shell/src/upgrade/quic.rs`); the
//! message carries its number and the address it must be connected to.

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use command::proto;
use preread_core::sni::HostName;
use preread_parser::quic::{MAX_CID_LEN, Version};

use super::flows::FlowCounts;

/// The layout of `proto::HandedFlow` this binary writes and reads. A
/// successor that reads another takes the sockets and drops the flows
/// (their clients start again).
pub const QUIC_HANDOVER_VERSION: u32 = 1;

/// The most connection IDs a handed flow may name: a flow learns the
/// client's first DCID and the SCIDs of the backend's long headers (its
/// Initial, Handshake and Retry packets), a handful.
pub const MAX_CIDS: usize = 64;

/// A decided flow, as the old process hands it over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowSnapshot {
    pub client: SocketAddr,
    /// The connection IDs that lead to the flow.
    pub cids: Vec<Box<[u8]>>,
    /// The backend sent a long header.
    pub backend_spoke: bool,
    /// Where the flow's backend socket is connected.
    pub backend_address: SocketAddr,
    pub cluster: Arc<str>,
    /// The backend's id in its cluster.
    pub backend: Arc<str>,
    pub counts: FlowCounts,
    /// Since the flow's first datagram.
    pub age: Duration,
    /// Since its last datagram, either way.
    pub idle: Duration,
    pub sni: Option<HostName>,
    /// The protocol of the client's offer that chose the frontend.
    pub alpn: Option<Box<[u8]>>,
    pub version: Option<Version>,
    /// From the first datagram to the decision.
    pub preread: Option<Duration>,
}

/// Why a handed flow is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FlowError {
    /// The client's address is not an `ip:port`.
    Client(String),
    /// The backend's address is not an `ip:port`.
    BackendAddress(String),
    /// A connection ID is empty or longer than 20 bytes.
    CidLength(usize),
    /// More connection IDs than [`MAX_CIDS`].
    TooManyCids(usize),
    /// No cluster or no backend id.
    NoBackend,
    /// The SNI does not normalize to a host name.
    Sni(String),
    /// A QUIC version the parser does not know.
    Version(u32),
    /// Idle for longer than the flow has lived.
    Times { age_ms: u64, idle_ms: u64 },
}

impl fmt::Display for FlowError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Client(text) => write!(f, "client {text:?} is not an ip:port"),
            Self::BackendAddress(text) => write!(f, "backend address {text:?} is not an ip:port"),
            Self::CidLength(len) => write!(
                f,
                "a connection ID of {len} bytes (1 to {MAX_CID_LEN} are valid)"
            ),
            Self::TooManyCids(count) => {
                write!(f, "{count} connection IDs (at most {MAX_CIDS})")
            }
            Self::NoBackend => f.write_str("no cluster or no backend id"),
            Self::Sni(text) => write!(f, "SNI {text:?} is not a host name"),
            Self::Version(wire) => {
                write!(f, "QUIC version {wire:#010x} is not one this binary reads")
            }
            Self::Times { age_ms, idle_ms } => {
                write!(f, "idle for {idle_ms} ms but first seen {age_ms} ms ago")
            }
        }
    }
}

impl std::error::Error for FlowError {}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

impl FlowSnapshot {
    /// The wire form; `backend_fd` is left 0 for the shell to number.
    pub fn to_proto(&self) -> proto::HandedFlow {
        proto::HandedFlow {
            client: self.client.to_string(),
            cids: self.cids.iter().map(|cid| cid.to_vec()).collect(),
            backend_spoke: self.backend_spoke,
            backend_fd: 0,
            backend_address: self.backend_address.to_string(),
            cluster: self.cluster.to_string(),
            backend: self.backend.to_string(),
            datagrams_in: self.counts.datagrams_in,
            datagrams_out: self.counts.datagrams_out,
            bytes_in: self.counts.bytes_in,
            bytes_out: self.counts.bytes_out,
            age_ms: millis(self.age),
            idle_ms: millis(self.idle),
            sni: self.sni.as_ref().map(|sni| sni.as_str().to_owned()),
            alpn: self.alpn.as_ref().map(|alpn| alpn.to_vec()),
            quic_version: self.version.map_or(0, Version::wire),
            preread_ms: self.preread.map(millis),
        }
    }

    /// The flow a successor may relay, or why it may not.
    pub fn from_proto(flow: &proto::HandedFlow) -> Result<Self, FlowError> {
        let client = flow
            .client
            .parse()
            .map_err(|_| FlowError::Client(flow.client.clone()))?;
        let backend_address = flow
            .backend_address
            .parse()
            .map_err(|_| FlowError::BackendAddress(flow.backend_address.clone()))?;
        if flow.cids.len() > MAX_CIDS {
            return Err(FlowError::TooManyCids(flow.cids.len()));
        }
        if let Some(bad) = flow
            .cids
            .iter()
            .find(|cid| cid.is_empty() || cid.len() > MAX_CID_LEN)
        {
            return Err(FlowError::CidLength(bad.len()));
        }
        if flow.cluster.is_empty() || flow.backend.is_empty() {
            return Err(FlowError::NoBackend);
        }
        let sni = match &flow.sni {
            Some(text) => Some(
                HostName::normalize(text.as_bytes()).ok_or_else(|| FlowError::Sni(text.clone()))?,
            ),
            None => None,
        };
        let version = match flow.quic_version {
            0 => None,
            wire => Some(Version::from_wire(wire).ok_or(FlowError::Version(wire))?),
        };
        if flow.idle_ms > flow.age_ms {
            return Err(FlowError::Times {
                age_ms: flow.age_ms,
                idle_ms: flow.idle_ms,
            });
        }
        Ok(Self {
            client,
            cids: flow.cids.iter().map(|cid| cid.as_slice().into()).collect(),
            backend_spoke: flow.backend_spoke,
            backend_address,
            cluster: flow.cluster.as_str().into(),
            backend: flow.backend.as_str().into(),
            counts: FlowCounts {
                datagrams_in: flow.datagrams_in,
                datagrams_out: flow.datagrams_out,
                bytes_in: flow.bytes_in,
                bytes_out: flow.bytes_out,
            },
            age: Duration::from_millis(flow.age_ms),
            idle: Duration::from_millis(flow.idle_ms),
            sni,
            alpn: flow.alpn.as_ref().map(|alpn| alpn.as_slice().into()),
            version,
            preread: flow.preread_ms.map(Duration::from_millis),
        })
    }

    /// When the flow was first and last seen, as instants of this
    /// process's clock at `now` (`now` itself when the clock does not
    /// reach that far back).
    pub fn seen(&self, now: Instant) -> (Instant, Instant) {
        let back = |ago: Duration| now.checked_sub(ago).unwrap_or(now);
        (back(self.age), back(self.idle))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot() -> FlowSnapshot {
        FlowSnapshot {
            client: "192.0.2.7:51000".parse().expect("addr"),
            cids: vec![vec![1; 8].into(), vec![2; 20].into()],
            backend_spoke: true,
            backend_address: "127.0.0.1:4433".parse().expect("addr"),
            cluster: "h3".into(),
            backend: "h3-1".into(),
            counts: FlowCounts {
                datagrams_in: 12,
                datagrams_out: 30,
                bytes_in: 9_000,
                bytes_out: 40_000,
            },
            age: Duration::from_millis(2_500),
            idle: Duration::from_millis(40),
            sni: HostName::normalize(b"a.example"),
            alpn: Some(b"h3".as_slice().into()),
            version: Some(Version::V2),
            preread: Some(Duration::from_millis(3)),
        }
    }

    #[test]
    fn a_snapshot_round_trips_through_its_wire_form() {
        let flow = snapshot();
        let wire = flow.to_proto();
        assert_eq!(wire.quic_version, 0x6b33_43cf);
        assert_eq!(FlowSnapshot::from_proto(&wire), Ok(flow));
        let bare = FlowSnapshot {
            sni: None,
            alpn: None,
            version: None,
            preread: None,
            cids: Vec::new(),
            ..snapshot()
        };
        assert_eq!(FlowSnapshot::from_proto(&bare.to_proto()), Ok(bare));
    }

    #[test]
    fn every_broken_field_is_refused_with_its_reason() {
        let good = snapshot().to_proto();
        let cases: Vec<(proto::HandedFlow, FlowError)> = vec![
            (
                proto::HandedFlow {
                    client: "nowhere".into(),
                    ..good.clone()
                },
                FlowError::Client("nowhere".into()),
            ),
            (
                proto::HandedFlow {
                    backend_address: String::new(),
                    ..good.clone()
                },
                FlowError::BackendAddress(String::new()),
            ),
            (
                proto::HandedFlow {
                    cids: vec![vec![1; 21]],
                    ..good.clone()
                },
                FlowError::CidLength(21),
            ),
            (
                proto::HandedFlow {
                    cids: vec![Vec::new()],
                    ..good.clone()
                },
                FlowError::CidLength(0),
            ),
            (
                proto::HandedFlow {
                    cids: vec![vec![1; 4]; MAX_CIDS + 1],
                    ..good.clone()
                },
                FlowError::TooManyCids(MAX_CIDS + 1),
            ),
            (
                proto::HandedFlow {
                    backend: String::new(),
                    ..good.clone()
                },
                FlowError::NoBackend,
            ),
            (
                proto::HandedFlow {
                    sni: Some("not a name!".into()),
                    ..good.clone()
                },
                FlowError::Sni("not a name!".into()),
            ),
            (
                proto::HandedFlow {
                    quic_version: 0xff00_001d,
                    ..good.clone()
                },
                FlowError::Version(0xff00_001d),
            ),
            (
                proto::HandedFlow {
                    age_ms: 10,
                    idle_ms: 11,
                    ..good.clone()
                },
                FlowError::Times {
                    age_ms: 10,
                    idle_ms: 11,
                },
            ),
        ];
        for (flow, why) in cases {
            let refused = FlowSnapshot::from_proto(&flow);
            assert_eq!(refused, Err(why.clone()), "{flow:?}");
            assert!(!why.to_string().is_empty());
        }
    }

    #[test]
    fn a_truncated_or_garbled_message_never_panics() {
        use prost::Message;
        let bytes = snapshot().to_proto().encode_to_vec();
        for end in 0..bytes.len() {
            if let Ok(flow) = proto::HandedFlow::decode(&bytes[..end]) {
                // Whatever decodes is validated like any other flow.
                let _ = FlowSnapshot::from_proto(&flow);
            }
        }
        let mut garbled = bytes.clone();
        for (i, byte) in garbled.iter_mut().enumerate() {
            *byte ^= u8::try_from(i % 251).unwrap_or(0) | 1;
        }
        if let Ok(flow) = proto::HandedFlow::decode(garbled.as_slice()) {
            let _ = FlowSnapshot::from_proto(&flow);
        }
    }

    #[test]
    fn times_become_instants_of_this_clock() {
        let now = Instant::now() + Duration::from_secs(10);
        let (first, last) = snapshot().seen(now);
        assert_eq!(now - first, Duration::from_millis(2_500));
        assert_eq!(now - last, Duration::from_millis(40));
    }
}
