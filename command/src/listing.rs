//! The running state in pages, for `cluster list` and `frontend list`
//! (and the rule `backend list` pages by, [`fill_by`]).
//!
//! Owns: where a page starts (after the last entry of the previous one,
//! so a change between two pages neither repeats nor reorders an entry)
//! and where it stops (before its encoded entries pass [`PAGE_BYTES`], or
//! at the caller's limit). At 100,000 frontends the whole list is about
//! 4.7 MB, over the command channel's 1 MiB frame limit; a page is always
//! under it. Must never: return an empty page while entries remain after
//! the cursor, or change the state.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound::{Excluded, Unbounded};

use prost::Message;

use crate::proto;
use crate::state::ConfigState;
use crate::validate::{ValidationError, resolve_frontend};

/// The most encoded bytes of entries one page holds (a single larger entry
/// makes a page alone): half the command channel's frame limit, which
/// leaves room for the response around them.
pub const PAGE_BYTES: usize = 512 << 10;

/// Takes entries while they fit the page; whether any were left.
fn fill<T: Message>(entries: impl Iterator<Item = T>, limit: u32, page: &mut Vec<T>) -> bool {
    fill_by(entries, limit, page, Message::encoded_len)
}

/// Takes entries while they fit the page (whose encoded size `len` tells:
/// a group of messages that must stay on one page, such as a backend's
/// instances); whether any were left.
pub fn fill_by<T>(
    entries: impl Iterator<Item = T>,
    limit: u32,
    page: &mut Vec<T>,
    len: impl Fn(&T) -> usize,
) -> bool {
    let limit = if limit == 0 {
        usize::MAX
    } else {
        usize::try_from(limit).unwrap_or(usize::MAX)
    };
    let mut bytes = 0;
    let mut entries = entries.peekable();
    while let Some(entry) = entries.peek() {
        // A repeated field costs its length prefix and tag besides the entry.
        let len = len(entry) + 8;
        if page.len() >= limit || (!page.is_empty() && bytes + len > PAGE_BYTES) {
            return true;
        }
        bytes += len;
        if let Some(entry) = entries.next() {
            page.push(entry);
        }
    }
    false
}

/// The page of frontends after `request.after`, in `(address, sni, alpn)`
/// order. Refuses a cursor whose address, sni or alpn is not valid.
pub fn frontend_page(
    state: &ConfigState,
    request: &proto::ListFrontends,
) -> Result<proto::FrontendList, ValidationError> {
    let from = match &request.after {
        None => Unbounded,
        Some(after) => Excluded(resolve_frontend(after)?.0),
    };
    let entries = state
        .frontends
        .range((from, Unbounded))
        .map(|(key, frontend)| frontend.to_proto(key));
    let mut page = proto::FrontendList::default();
    page.more = fill(entries, request.limit, &mut page.frontends);
    Ok(page)
}

/// The page of clusters after `request.after`, in id order, each with its
/// backends.
#[must_use]
pub fn cluster_page(state: &ConfigState, request: &proto::ListClusters) -> proto::ClusterList {
    let from = match request.after.as_deref() {
        None => Unbounded,
        Some(after) => Excluded(after),
    };
    let clusters = state
        .clusters
        .range::<str, _>((from, Unbounded))
        .map(|(_, cluster)| proto::ClusterEntry {
            cluster: Some(cluster.clone()),
            backends: Vec::new(),
        });
    let mut page = proto::ClusterList::default();
    page.more = fill(clusters, request.limit, &mut page.clusters);
    // Backends are keyed by their own id: one pass gathers those of the
    // page's clusters, in backend id order.
    let ids: BTreeSet<&str> = page
        .clusters
        .iter()
        .filter_map(|entry| entry.cluster.as_ref())
        .map(|cluster| cluster.cluster_id.as_str())
        .collect();
    let mut backends: BTreeMap<String, Vec<proto::Backend>> = BTreeMap::new();
    for backend in state.backends.values() {
        if ids.contains(backend.cluster_id.as_str()) {
            backends
                .entry(backend.cluster_id.clone())
                .or_default()
                .push(backend.clone());
        }
    }
    for entry in &mut page.clusters {
        if let Some(id) = entry.cluster.as_ref().map(|c| c.cluster_id.as_str()) {
            entry.backends = backends.remove(id).unwrap_or_default();
        }
    }
    page
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::request::RequestType;
    use crate::state::request;

    fn state(clusters: usize, names: usize) -> ConfigState {
        let mut state = ConfigState::default();
        let mut apply = |kind| {
            state
                .dispatch(&request(kind))
                .map(|_| ())
                .map_err(|e| e.message)
        };
        let listener = proto::TcpListenerConfig {
            address: "127.0.0.1:8443".into(),
            ..Default::default()
        };
        apply(RequestType::AddTcpListener(listener)).unwrap();
        for c in 0..clusters {
            let id = format!("c{c:03}");
            apply(RequestType::AddCluster(proto::Cluster {
                cluster_id: id.clone(),
                ..Default::default()
            }))
            .unwrap();
            for b in 0..2 {
                apply(RequestType::AddBackend(proto::Backend {
                    cluster_id: id.clone(),
                    backend_id: format!("{id}-{b}"),
                    address: format!("127.0.0.1:{}", 20_000 + c * 2 + b),
                    ..Default::default()
                }))
                .unwrap();
            }
            for n in 0..names {
                apply(RequestType::AddTcpFrontend(proto::TcpFrontend {
                    cluster_id: id.clone(),
                    address: "127.0.0.1:8443".into(),
                    sni: Some(format!("name-{n}.{id}.example.com")),
                    ..Default::default()
                }))
                .unwrap();
            }
        }
        state
    }

    fn all_frontends(state: &ConfigState, limit: u32) -> (Vec<proto::TcpFrontend>, usize) {
        let mut listed = Vec::new();
        let mut pages = 0;
        let mut after = None;
        loop {
            let page = frontend_page(state, &proto::ListFrontends { after, limit }).unwrap();
            pages += 1;
            assert!(
                !page.frontends.is_empty() || !page.more,
                "an empty page says more"
            );
            assert!(
                page.encoded_len() < PAGE_BYTES + 1024,
                "{}",
                page.encoded_len()
            );
            after = page.frontends.last().cloned();
            listed.extend(page.frontends);
            if !page.more {
                return (listed, pages);
            }
        }
    }

    #[test]
    fn pages_of_frontends_list_each_once_in_order_and_stay_under_the_frame() {
        let state = state(40, 500);
        let whole: Vec<proto::TcpFrontend> = state.frontends().collect();
        let (listed, pages) = all_frontends(&state, 0);
        assert_eq!(listed, whole);
        assert!(pages > 1, "20,000 frontends fit one page");
        let (listed, pages) = all_frontends(&state, 7_000);
        assert_eq!(listed, whole);
        assert_eq!(pages, 3);
    }

    #[test]
    fn a_page_after_a_removed_entry_starts_at_the_next_one() {
        let mut state = state(2, 3);
        let first = frontend_page(
            &state,
            &proto::ListFrontends {
                after: None,
                limit: 2,
            },
        )
        .unwrap();
        let last = first.frontends.last().cloned().unwrap();
        let removed = state
            .dispatch(&request(RequestType::RemoveTcpFrontend(last.clone())))
            .unwrap();
        assert!(matches!(removed, crate::state::Applied::Changed));
        let next = frontend_page(
            &state,
            &proto::ListFrontends {
                after: Some(last),
                limit: 0,
            },
        )
        .unwrap();
        let whole: Vec<proto::TcpFrontend> = state.frontends().collect();
        assert_eq!(next.frontends, whole[1..]);
        assert!(!next.more);
    }

    #[test]
    fn a_bad_cursor_is_refused_with_its_code() {
        let state = state(1, 1);
        let after = proto::TcpFrontend {
            address: "not an address".into(),
            ..Default::default()
        };
        let error = frontend_page(
            &state,
            &proto::ListFrontends {
                after: Some(after),
                limit: 0,
            },
        )
        .unwrap_err();
        assert_eq!(error.code.as_str(), "E101");
    }

    #[test]
    fn pages_of_clusters_carry_their_own_backends() {
        let state = state(30, 1);
        let mut after = None;
        let mut listed = Vec::new();
        loop {
            let page = cluster_page(&state, &proto::ListClusters { after, limit: 4 });
            assert!(page.clusters.len() <= 4);
            after = page
                .clusters
                .last()
                .and_then(|e| e.cluster.as_ref())
                .map(|c| c.cluster_id.clone());
            listed.extend(page.clusters);
            if !page.more {
                break;
            }
        }
        assert_eq!(listed.len(), 30);
        for entry in &listed {
            let id = &entry.cluster.as_ref().unwrap().cluster_id;
            let backends: Vec<&str> = entry
                .backends
                .iter()
                .map(|b| b.backend_id.as_str())
                .collect();
            assert_eq!(backends, [format!("{id}-0"), format!("{id}-1")]);
        }
        let ids: Vec<&String> = listed
            .iter()
            .map(|e| &e.cluster.as_ref().unwrap().cluster_id)
            .collect();
        assert!(ids.windows(2).all(|w| w[0] < w[1]));
    }
}
