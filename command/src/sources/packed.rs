//! Requests kept encoded: a fragment's declarations between merges
//! ([`Declarations`]), and the undo and change lists of an incremental
//! merge ([`RequestLog`]).
//!
//! Why: a `proto::Request` is 336 bytes inline (its largest variant, a
//! listener's settings) plus a heap string per field, for a cluster, a
//! frontend or a backend whose protobuf encoding is 20 to 60 bytes. At
//! 10,000 etcd route keys the parsed fragments were 14 MB of a replica's
//! resident size, and a bulk update's undo and change lists 95 MB at
//! their peak. Encoded with prost (the crate that defines the messages),
//! they are a few bytes more than their text.
//!
//! Owns: the encoding, which only this module writes and reads. Must
//! never: hand out a value other than the one put in (encoding and
//! decoding a message gives the message back: every map is a `BTreeMap`,
//! so equal values encode equal too).

use core::fmt;

use prost::Message as _;

use super::Declared;
use crate::proto;
use crate::proto::request::RequestType;
use crate::state::ConfigState;

/// One declaration, encoded.
#[derive(Clone, PartialEq, prost::Message)]
struct WireDeclared {
    #[prost(message, optional, tag = "1")]
    request: Option<proto::Request>,
    #[prost(string, tag = "2")]
    origin: String,
}

/// A fragment's declarations, encoded.
#[derive(Clone, PartialEq, prost::Message)]
struct Wire {
    #[prost(message, repeated, tag = "1")]
    declared: Vec<WireDeclared>,
}

/// A fragment's declarations, kept encoded: [`decode`](Self::decode)
/// gives them back in order.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Declarations {
    bytes: Box<[u8]>,
    routes: u32,
}

impl Declarations {
    /// The declarations, in their order.
    #[must_use]
    pub fn decode(&self) -> Vec<Declared> {
        let wire = Wire::decode(&*self.bytes);
        debug_assert!(wire.is_ok(), "declarations that do not decode: {wire:?}");
        wire.unwrap_or_default()
            .declared
            .into_iter()
            .map(|d| Declared {
                request: d.request.unwrap_or_default(),
                origin: d.origin,
            })
            .collect()
    }

    /// How many frontends (routes) they declare.
    #[must_use]
    pub fn routes(&self) -> usize {
        self.routes as usize
    }
}

impl From<Vec<Declared>> for Declarations {
    fn from(declared: Vec<Declared>) -> Self {
        let routes = declared
            .iter()
            .filter(|d| matches!(d.request.request_type, Some(RequestType::AddTcpFrontend(_))))
            .count();
        let wire = Wire {
            declared: declared
                .into_iter()
                .map(|d| WireDeclared {
                    request: Some(d.request),
                    origin: d.origin,
                })
                .collect(),
        };
        Self {
            bytes: wire.encode_to_vec().into_boxed_slice(),
            routes: u32::try_from(routes).unwrap_or(u32::MAX),
        }
    }
}

impl FromIterator<Declared> for Declarations {
    fn from_iter<I: IntoIterator<Item = Declared>>(declared: I) -> Self {
        Self::from(declared.into_iter().collect::<Vec<_>>())
    }
}

impl fmt::Debug for Declarations {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.decode()).finish()
    }
}

/// Requests in order, encoded one after the other.
#[derive(Debug, Default)]
pub(super) struct RequestLog {
    bytes: Vec<u8>,
    /// Where each request ends in `bytes`.
    ends: Vec<usize>,
}

impl RequestLog {
    pub(super) fn push(&mut self, request: &proto::Request) {
        // A `Vec` grows: encoding into it cannot run out of room.
        let encoded = request.encode(&mut self.bytes);
        debug_assert!(encoded.is_ok(), "{encoded:?}");
        self.ends.push(self.bytes.len());
    }

    pub(super) fn len(&self) -> usize {
        self.ends.len()
    }

    /// The encoding of request `index`.
    pub(super) fn raw(&self, index: usize) -> &[u8] {
        let start = index.checked_sub(1).map_or(0, |i| self.ends[i]);
        &self.bytes[start..self.ends[index]]
    }

    /// Request `index`.
    pub(super) fn get(&self, index: usize) -> proto::Request {
        let request = proto::Request::decode(self.raw(index));
        debug_assert!(request.is_ok(), "a logged request that does not decode");
        request.unwrap_or_default()
    }

    /// Dispatches the requests from `mark` on to `state`, last first (the
    /// inverses of changes made to it, in the order they were made), and
    /// takes them out of the log.
    pub(super) fn undo_back_to(&mut self, mark: usize, state: &mut ConfigState) {
        for index in (mark..self.len()).rev() {
            let inverse = self.get(index);
            let restored = state.dispatch(&inverse);
            debug_assert!(restored.is_ok(), "the inverse {inverse:?} was refused");
        }
        let start = mark.checked_sub(1).map_or(0, |i| self.ends[i]);
        self.bytes.truncate(start);
        self.ends.truncate(mark);
    }

    /// Empties the log.
    pub(super) fn clear(&mut self) {
        self.bytes.clear();
        self.ends.clear();
    }

    /// Every request, in order.
    pub(super) fn decoded(&self) -> impl Iterator<Item = proto::Request> + '_ {
        (0..self.len()).map(|i| self.get(i))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::request;

    fn frontend(sni: &str) -> proto::Request {
        request(RequestType::AddTcpFrontend(proto::TcpFrontend {
            cluster_id: "web".into(),
            address: "*:8443".into(),
            sni: Some(sni.into()),
            tags: [("team".to_owned(), "a".to_owned())].into(),
            ..Default::default()
        }))
    }

    #[test]
    fn declarations_decode_to_what_was_put_in() {
        let declared = vec![
            Declared {
                request: request(RequestType::AddCluster(proto::Cluster {
                    cluster_id: "web".into(),
                    ..Default::default()
                })),
                origin: "web.toml:1:1".into(),
            },
            Declared {
                request: frontend("a.example"),
                origin: "web.toml:2:14".into(),
            },
        ];
        let packed = Declarations::from(declared.clone());
        assert_eq!(packed.decode(), declared);
        assert_eq!(packed.routes(), 1);
        assert_eq!(
            packed,
            Declarations::from(declared),
            "equal values, equal bytes"
        );
        assert!(Declarations::default().decode().is_empty());
    }

    #[test]
    fn a_log_gives_its_requests_back_and_undoes_from_the_back() {
        let mut state = ConfigState::default();
        let mut log = RequestLog::default();
        let listener = request(RequestType::AddTcpListener(proto::TcpListenerConfig {
            address: "127.0.0.1:8443".into(),
            ..Default::default()
        }));
        assert!(state.dispatch(&listener).is_ok());
        let before = state.clone();
        let cluster = request(RequestType::AddCluster(proto::Cluster {
            cluster_id: "web".into(),
            ..Default::default()
        }));
        let mut frontend = frontend("a.example");
        if let Some(RequestType::AddTcpFrontend(f)) = &mut frontend.request_type {
            f.address = "127.0.0.1:8443".into();
        }
        for change in [&cluster, &frontend] {
            match state.dispatch_undoable(change) {
                Ok(crate::undo::Undoable::Changed { undo }) => log.push(&undo),
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(log.len(), 2);
        assert!(matches!(
            log.get(0).request_type,
            Some(RequestType::RemoveCluster(_))
        ));
        assert_eq!(log.decoded().count(), 2);
        let with_cluster = {
            let mut s = before.clone();
            assert!(s.dispatch(&cluster).is_ok());
            s
        };
        log.undo_back_to(1, &mut state);
        assert_eq!(log.len(), 1);
        assert_eq!(state, with_cluster, "the frontend taken back, last first");
        log.undo_back_to(0, &mut state);
        assert_eq!(state, before);
        log.push(&cluster);
        assert_eq!(log.raw(0), cluster.encode_to_vec().as_slice());
        log.clear();
        assert_eq!(log.len(), 0);
    }
}
