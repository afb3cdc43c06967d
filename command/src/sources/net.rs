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

use prost::Message as _;

use crate::proto;
use crate::state::ConfigState;
use crate::undo::Undoable;

/// `removals` (each with the addition it takes back) followed by
/// `additions`, less every removal whose addition is one of `additions`
/// (and that addition): what is left, when it applies to `state` in
/// order; `None` when it does not (a cluster whose settings changed must
/// go and come back with its frontends, say). `state` is left as it was.
pub(super) fn cancel(
    state: &mut ConfigState,
    removals: &[(proto::Request, proto::Request)],
    additions: &[proto::Request],
) -> Option<Vec<proto::Request>> {
    let mut added: HashMap<Vec<u8>, Vec<usize>> = HashMap::new();
    for (index, addition) in additions.iter().enumerate().rev() {
        added
            .entry(addition.encode_to_vec())
            .or_default()
            .push(index);
    }
    let mut kept_additions = vec![true; additions.len()];
    let mut net = Vec::new();
    for (addition, removal) in removals {
        match added.get_mut(&addition.encode_to_vec()).and_then(Vec::pop) {
            Some(index) => kept_additions[index] = false,
            None => net.push(removal.clone()),
        }
    }
    if net.len() == removals.len() {
        return None;
    }
    net.extend(
        additions
            .iter()
            .zip(kept_additions)
            .filter(|(_, kept)| *kept)
            .map(|(addition, _)| addition.clone()),
    );
    applies(state, &net).then_some(net)
}

/// Whether `requests` apply to `state` one after the other, each a
/// change; `state` is left as it was.
fn applies(state: &mut ConfigState, requests: &[proto::Request]) -> bool {
    let mut undo = Vec::new();
    let mut fine = true;
    for request in requests {
        match state.dispatch_undoable(request) {
            Ok(Undoable::Changed { undo: inverse }) => undo.push(*inverse),
            Ok(Undoable::Unchanged) => {}
            Err(_) => {
                fine = false;
                break;
            }
        }
    }
    for inverse in undo.iter().rev() {
        let restored = state.dispatch(inverse);
        debug_assert!(restored.is_ok(), "the inverse {inverse:?} was refused");
    }
    fine
}
