//! The compact form in which [`ConfigState`](crate::state::ConfigState)
//! keeps a frontend: what its key `(address, sni, alpn)` does not already
//! say.
//!
//! Owns: [`StoredFrontend`] and the rebuilding of the canonical
//! [`proto::TcpFrontend`] from a key and its stored part. At 100,000 routes
//! the state holds one of these per route, so it keeps the cluster id as
//! the `Arc` of the state's cluster map (one allocation per cluster, not per
//! route) and the tags boxed only when there are any. Must never: hold a
//! value the key already holds, or rebuild a frontend other than the
//! canonical one `resolve_frontend` made of the request.

use std::collections::BTreeMap;

use preread_core::routes::{AlpnSet, ClusterId};

use crate::proto;
use crate::validate::FrontendKey;

/// A frontend's cluster and tags; its key holds the rest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StoredFrontend {
    /// The `Arc` that keys the cluster in the state's cluster map.
    pub(crate) cluster: ClusterId,
    /// `None` for no tags, so equal frontends compare equal. Boxed because
    /// most frontends have none: one word per frontend instead of an empty
    /// map's three.
    #[allow(clippy::box_collection)]
    tags: Option<Box<BTreeMap<String, String>>>,
}

impl StoredFrontend {
    /// The stored part of a frontend routed to `cluster` (the state's
    /// interned id of its cluster), with these tags.
    pub(crate) fn new(cluster: ClusterId, tags: &BTreeMap<String, String>) -> Self {
        let tags = (!tags.is_empty()).then(|| Box::new(tags.clone()));
        Self { cluster, tags }
    }

    /// The tags, empty when there are none.
    pub(crate) fn tags(&self) -> &BTreeMap<String, String> {
        const NONE: &BTreeMap<String, String> = &BTreeMap::new();
        self.tags.as_deref().unwrap_or(NONE)
    }

    /// Whether the tags are stored without an empty box.
    pub(crate) fn is_compact(&self) -> bool {
        self.tags.as_ref().is_none_or(|tags| !tags.is_empty())
    }

    /// The canonical frontend of `key` (address as `SocketAddr` prints it,
    /// normalized SNI, ALPN sorted by bytes), as `resolve_frontend` made it.
    pub(crate) fn to_proto(&self, key: &FrontendKey) -> proto::TcpFrontend {
        let alpn = match &key.alpn {
            AlpnSet::Any => Vec::new(),
            // The protocols came from the request's strings, so they are UTF-8.
            AlpnSet::Protocols(list) => list
                .iter()
                .map(|p| String::from_utf8_lossy(p).into_owned())
                .collect(),
        };
        proto::TcpFrontend {
            cluster_id: self.cluster.to_string(),
            address: key.address.to_string(),
            sni: key.sni.as_ref().map(ToString::to_string),
            alpn,
            tags: self.tags().clone(),
            protocol: key.listener().protocol_field(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validate::resolve_frontend;

    fn round_trip(frontend: &proto::TcpFrontend) -> (StoredFrontend, proto::TcpFrontend) {
        let (key, canonical) = match resolve_frontend(frontend) {
            Ok(resolved) => resolved,
            Err(e) => panic!("{e}"),
        };
        let stored = StoredFrontend::new(canonical.cluster_id.as_str().into(), &canonical.tags);
        assert_eq!(stored.to_proto(&key), canonical, "not rebuilt as resolved");
        (stored, canonical)
    }

    #[test]
    fn rebuilds_the_canonical_frontend() {
        let (stored, canonical) = round_trip(&proto::TcpFrontend {
            cluster_id: "c".into(),
            address: "127.0.0.1:0443".into(),
            sni: Some("*.Example.COM.".into()),
            alpn: vec!["http/1.1".into(), "h2".into(), "ñ".into()],
            tags: [("team".to_owned(), "edge".to_owned())].into(),
            protocol: None,
        });
        assert_eq!(canonical.address, "127.0.0.1:443");
        assert_eq!(canonical.sni.as_deref(), Some("*.example.com"));
        assert_eq!(canonical.alpn, ["h2", "http/1.1", "ñ"]);
        assert_eq!(stored.tags().len(), 1);
        assert!(stored.is_compact());
    }

    #[test]
    fn no_tags_store_no_box() {
        let (stored, _) = round_trip(&proto::TcpFrontend {
            cluster_id: "c".into(),
            address: "[::1]:443".into(),
            sni: None,
            ..Default::default()
        });
        assert!(stored.tags.is_none());
        assert!(stored.tags().is_empty());
    }
}
