//! The net form of an incremental merge's requests: an object a leaving
//! fragment removes and a candidate adds back alike (the same request) is
//! left in place, so a key rewritten with one route changed costs that
//! route's removal and addition, not its cluster's and backends' too.
//!
//! Owns: the cancelling of such pairs and the proof that what is left
//! applies to the running state. Must never: return requests that do not
//! apply one after the other to the running state (then the full list
//! stands), or leave a trace of the proof in the state.

use std::collections::HashMap;

use super::packed::RequestLog;
use crate::proto;
use crate::state::ConfigState;
use crate::undo::{Undoable, undo_of_addition};

/// The removals of `removed` (the additions they take back) followed by
/// `added`, less every removal whose addition is one of `added` (and that
/// addition): what is left, when it applies to `state` in order; `None`
/// when nothing cancels or it does not apply (a cluster whose settings
/// changed must go and come back with its frontends, say). `state` is
/// left as it was.
pub(super) fn cancel(
    state: &mut ConfigState,
    removed: &RequestLog,
    added: &RequestLog,
) -> Option<Vec<proto::Request>> {
    // Equal requests encode equal (every map is a `BTreeMap`).
    let mut by_encoding: HashMap<&[u8], Vec<usize>> = HashMap::new();
    for index in (0..added.len()).rev() {
        by_encoding.entry(added.raw(index)).or_default().push(index);
    }
    let mut kept_additions = vec![true; added.len()];
    let mut net = Vec::new();
    let mut cancelled = false;
    for index in 0..removed.len() {
        match by_encoding.get_mut(removed.raw(index)).and_then(Vec::pop) {
            Some(addition) => {
                kept_additions[addition] = false;
                cancelled = true;
            }
            None => net.extend(undo_of_addition(&removed.get(index))),
        }
    }
    if !cancelled {
        return None;
    }
    drop(by_encoding);
    net.extend(
        kept_additions
            .iter()
            .enumerate()
            .filter(|(_, kept)| **kept)
            .map(|(index, _)| added.get(index)),
    );
    applies(state, &net).then_some(net)
}

/// Whether `requests` apply to `state` one after the other; `state` is
/// left as it was.
fn applies(state: &mut ConfigState, requests: &[proto::Request]) -> bool {
    let mut undo = RequestLog::default();
    let mut fine = true;
    for request in requests {
        match state.dispatch_undoable(request) {
            Ok(Undoable::Changed { undo: inverse }) => undo.push(&inverse),
            Ok(Undoable::Unchanged) => {}
            Err(_) => {
                fine = false;
                break;
            }
        }
    }
    undo.undo_back_to(0, state);
    fine
}
