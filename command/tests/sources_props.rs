//! Properties of `sources::merge` over random fragments: the file's state
//! is kept as it is, an excluded fragment leaves no trace, the outcome does
//! not depend on the order fragments arrive in, and a merge repeated with
//! its own outcome as incumbents keeps every fragment where it was.
//!
//! Fragments are drawn from a small universe of cluster ids, names,
//! listener addresses (`*:PORT` included), ALPN lists and backend ids, so
//! that every kind of clash is frequent.

use std::collections::BTreeSet;

use command::diff::diff;
use command::proto;
use command::proto::request::RequestType;
use command::sources::{Declared, Fragment, FragmentBody, FragmentId, SourceKind, merge};
use command::state::ConfigState;
use proptest::prelude::*;

const LISTENER: &str = "127.0.0.1:8443";
const ADDRESSES: &[&str] = &[LISTENER, "*:8443", "127.0.0.1:9999", "*:1"];
const CLUSTERS: &[&str] = &["a", "b", "c", "file"];
const SNIS: &[&str] = &[
    "x.example.com",
    "y.example.com",
    "*.example.com",
    "bad..example.com",
];
const PROTOCOLS: &[&str] = &["h2", "http/1.1"];
const BACKENDS: &[&str] = &["b0", "b1", "file-0"];

fn req(kind: RequestType) -> proto::Request {
    proto::Request {
        request_type: Some(kind),
    }
}

fn base() -> ConfigState {
    let mut state = ConfigState::default();
    for kind in [
        RequestType::AddCluster(proto::Cluster {
            cluster_id: "file".into(),
            ..Default::default()
        }),
        RequestType::AddTcpListener(proto::TcpListenerConfig {
            address: LISTENER.into(),
            ..Default::default()
        }),
        RequestType::AddTcpFrontend(proto::TcpFrontend {
            cluster_id: "file".into(),
            address: LISTENER.into(),
            sni: Some("y.example.com".into()),
            alpn: vec!["h2".into()],
            ..Default::default()
        }),
        RequestType::AddBackend(proto::Backend {
            cluster_id: "file".into(),
            backend_id: "file-0".into(),
            address: "127.0.0.1:9000".into(),
            ..Default::default()
        }),
    ] {
        assert!(state.dispatch(&req(kind)).is_ok());
    }
    state
}

fn pick(list: &'static [&'static str]) -> impl Strategy<Value = String> {
    proptest::sample::select(list).prop_map(str::to_owned)
}

/// One cluster with up to two frontends and one backend.
fn fragment(index: usize) -> impl Strategy<Value = Fragment> {
    (
        pick(CLUSTERS),
        proptest::collection::vec(
            (
                pick(ADDRESSES),
                pick(SNIS),
                proptest::sample::subsequence(PROTOCOLS, 0..=2),
            ),
            0..=2,
        ),
        pick(BACKENDS),
        1u16..4,
    )
        .prop_map(move |(cluster, frontends, backend, port)| {
            let mut declared = vec![req(RequestType::AddCluster(proto::Cluster {
                cluster_id: cluster.clone(),
                ..Default::default()
            }))];
            for (address, sni, alpn) in frontends {
                declared.push(req(RequestType::AddTcpFrontend(proto::TcpFrontend {
                    cluster_id: cluster.clone(),
                    address,
                    sni: Some(sni),
                    alpn: alpn.into_iter().map(str::to_owned).collect(),
                    ..Default::default()
                })));
            }
            declared.push(req(RequestType::AddBackend(proto::Backend {
                cluster_id: cluster.clone(),
                backend_id: backend,
                address: format!("127.0.0.1:{}", 9000 + port),
                ..Default::default()
            })));
            Fragment {
                id: FragmentId::new(SourceKind::Directory, format!("f{index}.toml")),
                body: FragmentBody::Declared(
                    declared
                        .into_iter()
                        .map(|request| Declared {
                            request,
                            origin: format!("f{index}.toml"),
                        })
                        .collect(),
                ),
            }
        })
}

fn fragments() -> impl Strategy<Value = Vec<Fragment>> {
    (0usize..6).prop_flat_map(|n| (0..n).map(fragment).collect::<Vec<_>>())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn the_file_is_kept_and_an_excluded_fragment_leaves_no_trace(fragments in fragments()) {
        let base = base();
        let merged = merge(&base, &fragments, &BTreeSet::new());
        merged.state.check_invariants();
        // Only additions on top of the file.
        for step in diff(&base, &merged.state) {
            let addition = matches!(
                step.request_type,
                Some(RequestType::AddCluster(_) | RequestType::AddTcpFrontend(_) | RequestType::AddBackend(_))
            );
            prop_assert!(addition, "{step:?}");
        }
        // Every fragment is applied or excluded, never both.
        let applied: BTreeSet<&FragmentId> = merged.applied.iter().map(|a| &a.id).collect();
        let excluded: BTreeSet<&FragmentId> = merged.excluded.iter().map(|e| &e.id).collect();
        prop_assert!(applied.is_disjoint(&excluded));
        prop_assert_eq!(applied.len() + excluded.len(), fragments.len());
        // The state is the file plus the applied fragments alone.
        let kept: Vec<&Fragment> = fragments.iter().filter(|f| applied.contains(&f.id)).collect();
        let again = merge(&base, kept, &BTreeSet::new());
        prop_assert!(again.excluded.is_empty(), "{:?}", again.excluded);
        prop_assert_eq!(&again.state, &merged.state);
    }

    #[test]
    fn arrival_order_does_not_matter_and_incumbents_stay(fragments in fragments(), seed in any::<u64>()) {
        let base = base();
        let merged = merge(&base, &fragments, &BTreeSet::new());
        let mut shuffled = fragments.clone();
        if !shuffled.is_empty() {
            let len = shuffled.len();
            shuffled.rotate_left(usize::try_from(seed % len as u64).unwrap_or(0));
        }
        let reordered = merge(&base, &shuffled, &BTreeSet::new());
        prop_assert_eq!(&reordered.state, &merged.state);
        prop_assert_eq!(&reordered.excluded, &merged.excluded);

        let incumbents: BTreeSet<FragmentId> = merged.applied.iter().map(|a| a.id.clone()).collect();
        let next = merge(&base, &shuffled, &incumbents);
        prop_assert_eq!(&next.state, &merged.state);
        let still: BTreeSet<FragmentId> = next.applied.iter().map(|a| a.id.clone()).collect();
        prop_assert_eq!(still, incumbents);
    }
}
