//! The series a worker's objects have from the start: each listener's
//! (a QUIC listener's own families instead of the accept and reset ones a
//! TCP listener has), cluster's and backend's, with every fixed `reason`,
//! `direction` and `from` value (doc/configure.md §5.4: a series exists from the
//! generation that adds its object, at 0, and goes with its object).
//!
//! Owns: which series of the worker's runtime exist before anything
//! counted them, and whether a counted series still names an object the
//! runtime holds. Must never: count, or list a series whose labels come
//! from a client (the `(listener, cluster)` pairs are the listener's
//! frontends', never a routed name).

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::Arc;

use preread_core::routes::ClusterId;
use preread_core::{FallbackReason, RejectReason};

use super::runtime::Runtime;
use crate::metrics::families::Family;
use crate::metrics::series::{IN, OUT, Series};
use crate::vocabulary::{QuicDrop, RefuseReason};

/// The objects of one worker's runtime that label series.
#[derive(Debug, Default)]
pub struct Configured {
    listeners: HashSet<SocketAddr>,
    /// The listeners among them that are QUIC listeners.
    quic: HashSet<SocketAddr>,
    /// Each listener with the clusters its SNI frontends route to.
    routed: HashSet<(SocketAddr, ClusterId)>,
    /// Each cluster with its backends' ids.
    backends: HashMap<ClusterId, HashSet<Arc<str>>>,
}

impl Configured {
    /// The listeners, `(listener, cluster)` routes and clusters with their
    /// backends given.
    pub fn new(
        listeners: impl IntoIterator<Item = SocketAddr>,
        routed: impl IntoIterator<Item = (SocketAddr, ClusterId)>,
        backends: impl IntoIterator<Item = (ClusterId, HashSet<Arc<str>>)>,
    ) -> Self {
        Self {
            listeners: listeners.into_iter().collect(),
            quic: HashSet::new(),
            routed: routed.into_iter().collect(),
            backends: backends.into_iter().collect(),
        }
    }

    /// With `quic`, the listeners given that are QUIC listeners.
    #[must_use]
    pub fn with_quic(self, quic: impl IntoIterator<Item = SocketAddr>) -> Self {
        Self {
            quic: quic.into_iter().collect(),
            ..self
        }
    }

    /// What `runtime` holds now.
    pub fn of(runtime: &Runtime) -> Self {
        let routed = runtime.listeners.values().flat_map(|listener| {
            let address = listener.address;
            let routes = listener.preread.config.routes.clusters();
            routes.map(move |cluster| (address, Arc::clone(cluster)))
        });
        let backends = runtime.clusters.iter().map(|(id, cluster)| {
            let ids = cluster.backend_ids().map(Arc::clone).collect();
            (Arc::clone(id), ids)
        });
        let quic = runtime
            .listeners
            .values()
            .filter(|listener| listener.quic.is_some())
            .map(|listener| listener.address);
        Self::new(runtime.listeners.keys().copied(), routed, backends).with_quic(quic)
    }

    /// Whether every object `series` is labelled by is still here.
    pub fn holds(&self, series: &Series) -> bool {
        let listener = series
            .listener_label()
            .is_none_or(|address| self.listeners.contains(&address));
        let objects = match (series.cluster_label(), series.backend_label()) {
            (None, None) => true,
            (Some(cluster), None) => self.backends.contains_key(cluster),
            (Some(cluster), Some(backend)) => self
                .backends
                .get(cluster)
                .is_some_and(|ids| ids.contains(backend)),
            (None, Some(_)) => false,
        };
        listener && objects
    }

    /// Every counter and gauge series of these objects.
    pub fn values(&self) -> impl Iterator<Item = Series> + '_ {
        let listeners = self.listeners.iter().flat_map(|&l| {
            let own: Vec<Series> = if self.quic.contains(&l) {
                quic_listener_series(l).collect()
            } else {
                tcp_listener_series(l).collect()
            };
            own.into_iter().chain(decision_series(l))
        });
        let routed = self.routed.iter().map(|(listener, cluster)| {
            Series::on(Family::PrereadRouted, *listener).cluster(cluster)
        });
        let clusters = self.backends.iter().flat_map(|(cluster, ids)| {
            let bytes = [IN, OUT].map(|d| {
                Series::of(Family::ClusterBytes)
                    .cluster(cluster)
                    .direction(d)
            });
            let backends = ids.iter().flat_map(move |id| backend_series(cluster, id));
            bytes.into_iter().chain(backends)
        });
        listeners.chain(routed).chain(clusters)
    }

    /// Every histogram series of these objects.
    pub fn histograms(&self) -> impl Iterator<Item = Series> + '_ {
        self.listeners.iter().flat_map(|&listener| {
            [Family::PrereadDuration, Family::ClientHelloBytes]
                .map(|family| Series::on(family, listener))
        })
    }
}

/// The series of a TCP listener's accepts, sessions and resets.
fn tcp_listener_series(listener: SocketAddr) -> impl Iterator<Item = Series> {
    let on = move |family| Series::on(family, listener);
    [
        Family::ConnectionsAccepted,
        Family::ConnectionsActive,
        Family::AcceptDescriptorErrors,
    ]
    .into_iter()
    .map(on)
    .chain(["backend", "client"].map(|side| on(Family::ConnectionsReset).from(side)))
}

/// The series of a QUIC listener's flows and datagrams, with every drop
/// reason.
fn quic_listener_series(listener: SocketAddr) -> impl Iterator<Item = Series> {
    let on = move |family| Series::on(family, listener);
    std::iter::once(on(Family::QuicFlowsActive))
        .chain([IN, OUT].map(|d| on(Family::QuicDatagrams).direction(d)))
        .chain(QuicDrop::ALL.map(|r| on(Family::QuicDroppedDatagrams).reason(r.as_str())))
}

/// The series every listener's preread decisions and clients' bytes have,
/// with every reason.
fn decision_series(listener: SocketAddr) -> impl Iterator<Item = Series> {
    let on = move |family| Series::on(family, listener);
    std::iter::once(on(Family::PrereadActive))
        .chain([IN, OUT].map(|d| on(Family::ClientBytes).direction(d)))
        .chain(RefuseReason::ALL.map(|r| on(Family::ConnectionsRefused).reason(r.as_str())))
        .chain(RejectReason::ALL.map(|r| on(Family::PrereadRejected).reason(r.as_str())))
        .chain(FallbackReason::ALL.map(|r| on(Family::PrereadFallback).reason(r.as_str())))
}

/// A backend's series the workers count (`preread_backend_up` is the
/// process's, `crate::shared::events`).
fn backend_series(cluster: &Arc<str>, id: &Arc<str>) -> [Series; 5] {
    let of = |family| Series::backend(family, cluster, id);
    [
        of(Family::BackendConnections),
        of(Family::BackendConnectErrors),
        of(Family::BackendConnectRetries),
        of(Family::BackendBytes).direction(IN),
        of(Family::BackendBytes).direction(OUT),
    ]
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;

    use super::Configured;
    use crate::metrics::families::Family;
    use crate::vocabulary::QuicDrop;

    #[test]
    fn a_quic_listener_has_its_flow_families_and_the_decision_ones() {
        let tcp = SocketAddr::from(([127, 0, 0, 1], 8443));
        let quic = SocketAddr::from(([127, 0, 0, 1], 443));
        let configured = Configured::new([tcp, quic], [], []).with_quic([quic]);
        let of = |listener: SocketAddr, family: Family| {
            configured
                .values()
                .chain(configured.histograms())
                .filter(|s| s.family() == family && s.listener_label() == Some(listener))
                .count()
        };
        assert_eq!(of(quic, Family::QuicFlowsActive), 1);
        assert_eq!(of(quic, Family::QuicDatagrams), 2);
        assert_eq!(of(quic, Family::QuicDroppedDatagrams), QuicDrop::ALL.len());
        for family in [
            Family::PrereadActive,
            Family::PrereadDuration,
            Family::ClientHelloBytes,
        ] {
            assert_eq!((of(quic, family), of(tcp, family)), (1, 1), "{family:?}");
        }
        assert_eq!(
            of(quic, Family::PrereadRejected),
            of(tcp, Family::PrereadRejected)
        );
        assert_eq!(of(quic, Family::ConnectionsAccepted), 0);
        assert_eq!(of(quic, Family::ConnectionsReset), 0);
        assert_eq!(of(tcp, Family::ConnectionsAccepted), 1);
        assert_eq!(of(tcp, Family::QuicDatagrams), 0);
        assert!(configured.values().all(|s| s.is_well_formed()));
    }
}
