//! The incremental form of the merge, for a source that says what changed
//! (etcd): the leaving fragments' objects removed from the running state,
//! the changed and the excluded fragments tried on it, under the clash
//! rule of [`merge`](super::merge), and the requests that take the running
//! state there, net.
//!
//! Owns: [`merge_changes`]. Its undo and change lists are kept encoded
//! ([`RequestLog`]): a bulk rewrite of 10,000 keys holds 60,000 of them at
//! once. Must never: leave the running state other than it found it, or
//! land elsewhere than a full merge of the same fragments does.

use super::merge::{AppliedFragment, Exclusion, apply, resolve_any_ip};
use super::packed::RequestLog;
use super::{Fragment, FragmentBody};
use crate::proto;
use crate::state::ConfigState;
use crate::undo::{Undoable, undo_of_addition};

/// A fragment an incremental merge tries: whether the running state holds
/// it (it is tried before the others, as by [`merge`](super::merge)).
#[derive(Clone, Copy, Debug)]
pub struct Candidate<'a> {
    /// The fragment (its current version).
    pub fragment: &'a Fragment,
    /// The running state holds its previous version (an incumbent).
    pub incumbent: bool,
}

/// What [`merge_changes`] decided.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Changes {
    /// The requests that take the running state to the merge: the
    /// leaving fragments' removals, then the additions of the candidates
    /// that applied; an object removed and added back alike is left
    /// alone when the rest applies without it (see `net`).
    pub requests: Vec<proto::Request>,
    /// The candidates that applied, in the order they were tried.
    pub applied: Vec<AppliedFragment>,
    /// The candidates left out, in the order they were tried.
    pub excluded: Vec<Exclusion>,
}

/// Removes from `state` the objects of `fragment`, which it holds, last
/// first: each removal's inverse goes to `undo`, the addition it took back
/// to `removed`.
fn remove(
    state: &mut ConfigState,
    fragment: &Fragment,
    undo: &mut RequestLog,
    removed: &mut RequestLog,
) {
    let FragmentBody::Declared(declared) = &fragment.body else {
        return;
    };
    for d in declared.decode().iter().rev() {
        let Ok(addition) = resolve_any_ip(state, &d.request) else {
            continue;
        };
        let Some(removal) = undo_of_addition(&addition) else {
            continue;
        };
        if let Ok(Undoable::Changed { undo: inverse }) = state.dispatch_undoable(&removal) {
            undo.push(&inverse);
            removed.push(&addition);
        }
    }
}

/// The incremental form of [`merge`](super::merge), for a source that says
/// what changed: `state` is the running state, holding every fragment of
/// `leaving` (the previous versions of the fragments that changed or
/// went); each of `candidates` (the new versions, and the fragments
/// excluded so far, tried again) is tried on it without them, incumbents
/// first, then in id order. Costs what changed, not what the sources hold;
/// `state` is left as it was. The requests are net: a key rewritten with
/// one route changed removes and adds that route only.
#[must_use]
pub fn merge_changes<'a>(
    state: &mut ConfigState,
    leaving: impl IntoIterator<Item = &'a Fragment>,
    candidates: impl IntoIterator<Item = Candidate<'a>>,
) -> Changes {
    let mut changes = Changes::default();
    let mut undo = RequestLog::default();
    let mut removed = RequestLog::default();
    for fragment in leaving {
        remove(state, fragment, &mut undo, &mut removed);
    }
    let mut added = RequestLog::default();
    let mut ordered: Vec<Candidate<'a>> = candidates.into_iter().collect();
    ordered.sort_by(|a, b| (!a.incumbent, &a.fragment.id).cmp(&(!b.incumbent, &b.fragment.id)));
    for candidate in ordered {
        let fragment = candidate.fragment;
        let outcome = match &fragment.body {
            FragmentBody::Declared(declared) => {
                let declared = declared.decode();
                apply(state, &declared, &mut undo).map(|()| {
                    for d in &declared {
                        if let Ok(request) = resolve_any_ip(state, &d.request) {
                            added.push(&request);
                        }
                    }
                })
            }
            FragmentBody::Broken(problems) => Err(problems.clone()),
        };
        match outcome {
            Ok(()) => changes.applied.push(AppliedFragment {
                id: fragment.id.clone(),
                routes: fragment.routes(),
            }),
            Err(problems) => {
                changes
                    .excluded
                    .extend(problems.into_iter().map(|problem| Exclusion {
                        id: fragment.id.clone(),
                        code: problem.code,
                        message: problem.message,
                    }))
            }
        }
    }
    undo.undo_back_to(0, state);
    changes.requests = super::net::cancel(state, &removed, &added).unwrap_or_else(|| {
        removed
            .decoded()
            .filter_map(|addition| undo_of_addition(&addition))
            .chain(added.decoded())
            .collect()
    });
    changes
}

#[cfg(test)]
mod tests {
    use super::super::merge;
    use super::super::merge::tests::{L, base, fragment};
    use super::*;
    use crate::codes::ErrorCode;
    use crate::proto::request::RequestType;
    use std::collections::BTreeSet;

    #[test]
    fn a_change_costs_its_fragments_and_lands_where_a_full_merge_does() {
        let a = fragment("a.toml", "a", L, "x.example.com", "127.0.0.1:9001");
        let b = fragment("b.toml", "b", L, "y.example.com", "127.0.0.1:9002");
        let first = merge(&base(), [&a, &b], &BTreeSet::new());
        assert!(first.excluded.is_empty());
        let mut running = first.state.clone();

        // a moves to z; c takes x, which a held; d clashes with b.
        let a2 = fragment("a.toml", "a", L, "z.example.com", "127.0.0.1:9001");
        let c = fragment("c.toml", "c", L, "x.example.com", "127.0.0.1:9003");
        let d = fragment("d.toml", "d", L, "y.example.com", "127.0.0.1:9004");
        let candidates = [
            Candidate {
                fragment: &d,
                incumbent: false,
            },
            Candidate {
                fragment: &c,
                incumbent: false,
            },
            Candidate {
                fragment: &a2,
                incumbent: true,
            },
        ];
        let changes = merge_changes(&mut running, [&a], candidates);
        assert_eq!(running, first.state, "the running state is left as it was");
        let tried: Vec<&str> = changes.applied.iter().map(|f| f.id.name.as_str()).collect();
        assert_eq!(tried, ["a.toml", "c.toml"]);
        assert_eq!(
            changes
                .excluded
                .iter()
                .map(|e| (e.id.name.as_str(), e.code))
                .collect::<Vec<_>>(),
            [("d.toml", ErrorCode::FrontendConflict)]
        );
        // a keeps its cluster and backend: only its frontend moves.
        let kinds: Vec<&str> = changes
            .requests
            .iter()
            .map(|r| match &r.request_type {
                Some(RequestType::RemoveTcpFrontend(_)) => "-frontend",
                Some(RequestType::AddTcpFrontend(_)) => "+frontend",
                Some(RequestType::AddCluster(_)) => "+cluster",
                Some(RequestType::AddBackend(_)) => "+backend",
                _ => "other",
            })
            .collect();
        assert_eq!(
            kinds,
            [
                "-frontend",
                "+frontend",
                "+cluster",
                "+frontend",
                "+backend"
            ]
        );
        for request in &changes.requests {
            assert!(running.dispatch(request).is_ok(), "{request:?}");
        }
        let incumbents = BTreeSet::from([a.id.clone(), b.id.clone()]);
        let full = merge(&base(), [&a2, &b, &c, &d], &incumbents);
        assert_eq!(running, full.state, "equal to the full merge");

        // The last fragments go: the file's state is left.
        let changes = merge_changes(&mut running, [&a2, &b, &c], []);
        for request in &changes.requests {
            assert!(running.dispatch(request).is_ok(), "{request:?}");
        }
        assert_eq!(running, base());
    }
}
