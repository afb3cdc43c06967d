//! The merge of the config file's declarations with every fragment of the
//! route sources: the desired state of a source change or a reload.
//!
//! Owns: the clash rule. Fragments are tried one after the other on the
//! file's state; one whose requests `dispatch` refuses (the same `(address,
//! sni, alpn)` as another place, a bad pattern, an unknown listener, an
//! ALPN overlap, ...) or that declares a cluster declared elsewhere (E501)
//! is taken back whole and listed as excluded, and the rest goes on. The
//! fragments that applied last time are tried first, so a newcomer never
//! evicts a fragment that serves; then the others, in id order, so every
//! replica fed the same sources decides the same. Also owns `*:PORT`, the
//! listener of this proxy on PORT whatever its IP.
//!
//! Must never: leave a trace of an excluded fragment in the merged state,
//! or depend on anything but its inputs (no clock, no order of arrival).

use std::collections::BTreeSet;
use std::net::SocketAddr;

use super::packed::RequestLog;
use super::{Declared, Fragment, FragmentBody, FragmentId, Problem};
use crate::codes::ErrorCode;
use crate::proto;
use crate::proto::request::RequestType;
use crate::spelling;
use crate::state::ConfigState;
use crate::undo::Undoable;

/// A fragment the merge applied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AppliedFragment {
    /// The fragment.
    pub id: FragmentId,
    /// The frontends it declares.
    pub routes: usize,
}

/// A fragment (or one problem of it) left out of the merged state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Exclusion {
    /// The fragment.
    pub id: FragmentId,
    /// Why: the stable code.
    pub code: ErrorCode,
    /// Why, where, and what to change.
    pub message: String,
}

/// What [`merge`] made of the file and the fragments.
#[derive(Clone, Debug, PartialEq)]
pub struct Merged {
    /// The file's state plus every fragment that applied.
    pub state: ConfigState,
    /// The fragments that applied, in the order they were tried.
    pub applied: Vec<AppliedFragment>,
    /// The fragments left out, in the order they were tried.
    pub excluded: Vec<Exclusion>,
}

/// The file's state `base` plus each fragment that does not clash with it
/// or with a fragment tried before it. `incumbents` are the fragments the
/// running state holds (the last merge's `applied`): they are tried first.
#[must_use]
pub fn merge<'a>(
    base: &ConfigState,
    fragments: impl IntoIterator<Item = &'a Fragment>,
    incumbents: &BTreeSet<FragmentId>,
) -> Merged {
    let mut ordered: Vec<&Fragment> = fragments.into_iter().collect();
    ordered.sort_by(|a, b| {
        let rank = |f: &Fragment| !incumbents.contains(&f.id);
        (rank(a), &a.id).cmp(&(rank(b), &b.id))
    });
    let mut merged = Merged {
        state: base.clone(),
        applied: Vec::new(),
        excluded: Vec::new(),
    };
    let mut undo = RequestLog::default();
    for fragment in ordered {
        let outcome = try_fragment(&mut merged.state, fragment, &mut undo);
        // A full merge never takes back a fragment that applied.
        undo.clear();
        match outcome {
            Ok(()) => merged.applied.push(AppliedFragment {
                id: fragment.id.clone(),
                routes: fragment.routes(),
            }),
            Err(problems) => {
                merged
                    .excluded
                    .extend(problems.into_iter().map(|problem| Exclusion {
                        id: fragment.id.clone(),
                        code: problem.code,
                        message: problem.message,
                    }));
            }
        }
    }
    merged.state.check_invariants();
    merged
}

/// Applies `fragment` whole to `state`, the inverses of its changes
/// appended to `undo` in the order they applied, or leaves `state` (and
/// `undo`) as they were and says why.
fn try_fragment(
    state: &mut ConfigState,
    fragment: &Fragment,
    undo: &mut RequestLog,
) -> Result<(), Vec<Problem>> {
    match &fragment.body {
        FragmentBody::Declared(declared) => apply(state, &declared.decode(), undo),
        FragmentBody::Broken(problems) => Err(problems.clone()),
    }
}

/// Applies every request of a fragment to `state`, or none: on the first
/// refusal the accepted ones are taken back through their inverses. The
/// inverses of the accepted ones are appended to `undo`.
pub(super) fn apply(
    state: &mut ConfigState,
    declared: &[Declared],
    undo: &mut RequestLog,
) -> Result<(), Vec<Problem>> {
    let owned = declared.iter().find_map(|d| match &d.request.request_type {
        Some(RequestType::AddCluster(cluster))
            if state.clusters.contains_key(cluster.cluster_id.as_str()) =>
        {
            Some(Problem {
                code: ErrorCode::ClusterDeclaredElsewhere,
                message: format!(
                    "{}: cluster `{}` is already declared by the config file or another \
                     fragment: rename it, or remove the other declaration",
                    d.origin, cluster.cluster_id
                ),
            })
        }
        _ => None,
    });
    if let Some(problem) = owned {
        return Err(vec![problem]);
    }
    let mark = undo.len();
    for d in declared {
        let outcome = resolve_any_ip(state, &d.request)
            .and_then(|request| state.dispatch_undoable(&request).map_err(Problem::from));
        match outcome {
            Ok(Undoable::Changed { undo: inverse }) => undo.push(&inverse),
            Ok(Undoable::Unchanged) => {}
            Err(problem) => {
                undo.undo_back_to(mark, state);
                return Err(vec![Problem {
                    code: problem.code,
                    message: format!("{}: {}", d.origin, problem.message),
                }]);
            }
        }
    }
    Ok(())
}

impl From<crate::validate::ValidationError> for Problem {
    fn from(error: crate::validate::ValidationError) -> Self {
        Self {
            code: error.code,
            message: error.message,
        }
    }
}

/// `request`, with a frontend address `*:PORT` replaced by the address of
/// the one listener of `state` on PORT.
pub(super) fn resolve_any_ip(
    state: &ConfigState,
    request: &proto::Request,
) -> Result<proto::Request, Problem> {
    let Some(RequestType::AddTcpFrontend(frontend)) = &request.request_type else {
        return Ok(request.clone());
    };
    let Some(port) = frontend.address.strip_prefix("*:") else {
        return Ok(request.clone());
    };
    let Ok(port) = port.parse::<u16>() else {
        return Err(Problem {
            code: ErrorCode::InvalidAddress,
            message: format!(
                "frontend address {}: *: must be followed by a port from 1 to 65535",
                spelling::quoted(&frontend.address)
            ),
        });
    };
    // Among the listeners of the frontend's protocol (its cluster's).
    let quic = frontend.protocol == Some(proto::ListenerProtocol::Quic as i32);
    let on_port: Vec<SocketAddr> = state
        .listeners
        .keys()
        .filter(|key| key.address.port() == port && key.quic == quic)
        .map(|key| key.address)
        .collect();
    let address = match on_port.as_slice() {
        [one] => *one,
        [] => {
            return Err(Problem {
                code: ErrorCode::UnknownListener,
                message: format!(
                    "frontend address *:{port}: no listener of this proxy listens on port \
                     {port}; declare one in the config file, or correct the port"
                ),
            });
        }
        several => {
            let listed: Vec<String> = several.iter().map(ToString::to_string).collect();
            return Err(Problem {
                code: ErrorCode::AmbiguousListenerPort,
                message: format!(
                    "frontend address *:{port} matches the listeners {}: write the full \
                     address of the one meant",
                    listed.join(", ")
                ),
            });
        }
    };
    Ok(proto::Request {
        request_type: Some(RequestType::AddTcpFrontend(proto::TcpFrontend {
            address: address.to_string(),
            ..frontend.clone()
        })),
    })
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::sources::SourceKind;
    use crate::state::request;

    pub(in crate::sources) const L: &str = "127.0.0.1:8443";

    pub(in crate::sources) fn base() -> ConfigState {
        let mut state = ConfigState::default();
        for kind in [
            RequestType::AddCluster(proto::Cluster {
                cluster_id: "file".into(),
                ..Default::default()
            }),
            RequestType::AddTcpListener(proto::TcpListenerConfig {
                address: L.into(),
                ..Default::default()
            }),
            RequestType::AddTcpFrontend(proto::TcpFrontend {
                cluster_id: "file".into(),
                address: L.into(),
                sni: Some("file.example.com".into()),
                ..Default::default()
            }),
        ] {
            assert!(state.dispatch(&request(kind)).is_ok());
        }
        state
    }

    pub(in crate::sources) fn fragment(
        name: &str,
        cluster: &str,
        address: &str,
        sni: &str,
        backend: &str,
    ) -> Fragment {
        let declared = [
            RequestType::AddCluster(proto::Cluster {
                cluster_id: cluster.into(),
                ..Default::default()
            }),
            RequestType::AddTcpFrontend(proto::TcpFrontend {
                cluster_id: cluster.into(),
                address: address.into(),
                sni: Some(sni.into()),
                ..Default::default()
            }),
            RequestType::AddBackend(proto::Backend {
                cluster_id: cluster.into(),
                backend_id: format!("{cluster}-0"),
                address: backend.into(),
                ..Default::default()
            }),
        ]
        .into_iter()
        .enumerate()
        .map(|(i, kind)| Declared {
            request: request(kind),
            origin: format!("{name}:{}", i + 1),
        })
        .collect::<Vec<_>>();
        Fragment {
            id: FragmentId::new(SourceKind::Directory, name),
            body: FragmentBody::Declared(declared.into()),
        }
    }

    fn codes(merged: &Merged) -> Vec<(&str, ErrorCode)> {
        merged
            .excluded
            .iter()
            .map(|e| (e.id.name.as_str(), e.code))
            .collect()
    }

    #[test]
    fn the_same_route_from_two_places_excludes_the_later_one_whole() {
        let a = fragment("a.toml", "a", L, "x.example.com", "127.0.0.1:9001");
        let b = fragment("b.toml", "b", L, "x.example.com", "127.0.0.1:9002");
        let merged = merge(&base(), [&b, &a], &BTreeSet::new());
        assert_eq!(codes(&merged), [("b.toml", ErrorCode::FrontendConflict)]);
        assert!(merged.excluded[0].message.starts_with("b.toml:2: "));
        // Nothing of b: not its cluster, not its backend.
        assert!(!merged.state.clusters.contains_key("b"));
        assert!(!merged.state.backends.contains_key("b-0"));
        assert_eq!(merged.applied.len(), 1);
        assert_eq!(merged.applied[0].routes, 1);

        // b holds the route: it keeps it, whatever the names' order.
        let incumbents = BTreeSet::from([b.id.clone()]);
        let merged = merge(&base(), [&a, &b], &incumbents);
        assert_eq!(codes(&merged), [("a.toml", ErrorCode::FrontendConflict)]);
        // Once a goes, b's route is b's again, and a, alone, applies.
        let merged = merge(&base(), [&a], &incumbents);
        assert!(merged.excluded.is_empty());
        assert!(merged.state.clusters.contains_key("a"));
    }

    #[test]
    fn clashes_with_the_file_and_bad_fragments_leave_the_rest() {
        let with_file = fragment("f.toml", "f", L, "file.example.com", "127.0.0.1:9001");
        let pattern = fragment("p.toml", "p", L, "bad..example.com", "127.0.0.1:9002");
        let listener = fragment(
            "l.toml",
            "l",
            "127.0.0.1:1",
            "l.example.com",
            "127.0.0.1:9003",
        );
        let owned = fragment("o.toml", "file", L, "o.example.com", "127.0.0.1:9004");
        let good = fragment("g.toml", "g", L, "g.example.com", "127.0.0.1:9005");
        let broken = Fragment {
            id: FragmentId::new(SourceKind::Directory, "z.toml"),
            body: FragmentBody::Broken(vec![Problem {
                code: ErrorCode::InvalidToml,
                message: "z.toml:1:1: invalid TOML".into(),
            }]),
        };
        let merged = merge(
            &base(),
            [&with_file, &pattern, &listener, &owned, &good, &broken],
            &BTreeSet::new(),
        );
        assert_eq!(
            codes(&merged),
            [
                ("f.toml", ErrorCode::FrontendConflict),
                ("l.toml", ErrorCode::UnknownListener),
                ("o.toml", ErrorCode::ClusterDeclaredElsewhere),
                ("p.toml", ErrorCode::InvalidSniPattern),
                ("z.toml", ErrorCode::InvalidToml),
            ]
        );
        let mut expected = base();
        for d in match &good.body {
            FragmentBody::Declared(declared) => declared.decode(),
            FragmentBody::Broken(_) => panic!("declared"),
        } {
            assert!(expected.dispatch(&d.request).is_ok());
        }
        assert_eq!(merged.state, expected, "only the good fragment is added");
    }

    #[test]
    fn any_ip_takes_the_one_listener_on_the_port() {
        let mut state = base();
        let on_port = fragment("a.toml", "a", "*:8443", "a.example.com", "127.0.0.1:9001");
        let merged = merge(&state, [&on_port], &BTreeSet::new());
        assert!(merged.excluded.is_empty(), "{:?}", merged.excluded);
        let addresses: Vec<String> = merged.state.frontends().map(|f| f.address).collect();
        assert_eq!(addresses, [L, L]);

        let other = fragment("b.toml", "b", "*:9443", "b.example.com", "127.0.0.1:9002");
        let bad = fragment("c.toml", "c", "*:http", "c.example.com", "127.0.0.1:9003");
        let second = request(RequestType::AddTcpListener(proto::TcpListenerConfig {
            address: "127.0.0.2:8443".into(),
            ..Default::default()
        }));
        assert!(state.dispatch(&second).is_ok());
        let merged = merge(&state, [&on_port, &other, &bad], &BTreeSet::new());
        assert_eq!(
            codes(&merged),
            [
                ("a.toml", ErrorCode::AmbiguousListenerPort),
                ("b.toml", ErrorCode::UnknownListener),
                ("c.toml", ErrorCode::InvalidAddress),
            ]
        );
        assert_eq!(merged.state, state);
    }
}
