//! Routing generations: the accepted changes of one request, one reload or
//! one state load, which every worker applies as a single step.
//!
//! Owns: [`Generation`] (the typed changes, their inverses, and the route
//! tables before and after them) and [`plan`], which validates a list of
//! requests on the running state, skips the ones refused (with why), keeps
//! the others in order as [`Change`]s, and leaves the state as it found
//! it. Must never: keep a change whose inverse it does not hold, leave a
//! trace of a refused request or of the plan itself in the state (a
//! refusal changes nothing, and every accepted change is taken back
//! through its inverse), or carry a route table other than the state's own
//! (a snapshot of it, which every worker then shares instead of building
//! its own copy).

use std::collections::{BTreeMap, BTreeSet};

use preread_core::routes::RouteTable;

use crate::change::Change;
use crate::listener_key::ListenerKey;
use crate::proto;
use crate::proto::request::RequestType;
use crate::state::{Applied, ConfigState};
use crate::undo::{Undoable, undo_of_addition};
use crate::validate::ValidationError;

/// Route tables by listener.
pub type RouteTables = Vec<(ListenerKey, RouteTable)>;

/// The changes a worker applies in one step, between two events of its
/// loop, so that no connection sees part of them.
///
/// A worker does not change route tables itself: it installs `routes`, the
/// very tables the main thread's state holds (clones share their storage),
/// so the process keeps one copy of every listener's routes however many
/// workers route on it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Generation {
    /// The changes, in the order they apply.
    pub changes: Vec<Change>,
    /// `undo[i]` takes the state after `changes[i]` back to the state
    /// before it.
    pub undo: Vec<Change>,
    /// The route table of every listener whose SNI frontends the steps
    /// change, as the steps leave it (none for a listener they remove).
    pub routes: RouteTables,
    /// The tables of the same listeners before the steps (none for a
    /// listener they add): what the inverse installs.
    pub routes_before: RouteTables,
}

/// Snapshots of the route tables of `state`'s listeners at `addresses`.
fn snapshot<'a>(
    state: &ConfigState,
    addresses: impl IntoIterator<Item = &'a ListenerKey>,
) -> RouteTables {
    addresses
        .into_iter()
        .filter_map(|address| Some((*address, state.route_table(address)?.clone())))
        .collect()
}

impl Generation {
    /// Whether it changes nothing.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.changes.is_empty()
    }

    /// How many changes it holds.
    #[must_use]
    pub fn len(&self) -> usize {
        self.changes.len()
    }

    /// The generation that takes its whole effect back: the inverses, last
    /// change first (and its own inverse is this one again).
    #[must_use]
    pub fn inverse(&self) -> Generation {
        Generation {
            changes: self.undo.iter().rev().cloned().collect(),
            undo: self.changes.iter().rev().cloned().collect(),
            routes: self.routes_before.clone(),
            routes_before: self.routes.clone(),
        }
    }

    fn push(&mut self, change: Change, undo: Change) {
        self.changes.push(change);
        self.undo.push(undo);
    }

    /// The changes as the requests that ask for them: for the journal and
    /// the answers.
    #[must_use]
    pub fn requests(&self) -> Vec<proto::Request> {
        self.changes.iter().map(Change::to_request).collect()
    }
}

impl Generation {
    /// The generation that builds `state` from nothing (what a boot
    /// replays): its requests, which are all additions, each with its
    /// removal, and `state`'s own route tables. `state` is valid already,
    /// so nothing is validated again: at 100,000 routes that is most of a
    /// start. `None` if a request is not an addition (then [`plan`] it
    /// from an empty state instead, and [`share_routes_of`] the state).
    ///
    /// [`share_routes_of`]: Self::share_routes_of
    #[must_use]
    pub fn replay(state: &ConfigState) -> Option<Self> {
        let mut generation = Generation::default();
        for step in state.generate_requests() {
            let undo = undo_of_addition(&step)?;
            let change = Change::from_request(&step).ok()?;
            let undo = Change::from_request(&undo).ok()?;
            generation.push(change, undo);
        }
        generation.share_routes_of(state);
        Some(generation)
    }

    /// Makes `routes` the tables of `state` that hold routes: the ones a
    /// generation that builds `state` from nothing leaves, and shared with
    /// `state` rather than equal copies of them.
    pub fn share_routes_of(&mut self, state: &ConfigState) {
        self.routes = state
            .route_tables()
            .filter(|(_, table)| !table.is_empty())
            .map(|(address, table)| (address, table.clone()))
            .collect();
    }

    /// Applies the generation to `state`, change by change, and then
    /// adopts its route tables (equal to what the changes built, and
    /// shared with the workers): what the command server does once every
    /// worker applied it. Fails only when `state` is not the one the
    /// generation was planned on.
    pub fn apply_to(&self, state: &mut ConfigState) -> Result<(), ValidationError> {
        for change in &self.changes {
            let applied = state.dispatch(&change.to_request())?;
            debug_assert_eq!(
                applied,
                Applied::Changed,
                "{change:?} was planned as a change"
            );
        }
        for (address, table) in &self.routes {
            let adopted = state.adopt_routes(address, table);
            debug_assert!(adopted, "{address}: routes for no listener");
        }
        Ok(())
    }
}

/// What [`plan`] made of a list of requests.
#[derive(Debug)]
pub struct Planned<E> {
    /// The accepted changes, in order.
    pub generation: Generation,
    /// Requests the state already held.
    pub unchanged: usize,
    /// Refused requests, with why, in order.
    pub skipped: Vec<(proto::Request, E)>,
}

/// Validates `requests` one after the other on `state`, and leaves `state`
/// as it was: the accepted changes are taken back through their inverses
/// at the end, so planning costs what the changes cost, not a copy of the
/// state (at 100,000 routes, a copy is what a single change must not pay).
///
/// Each accepted request becomes a [`Change`] here, once: the generation
/// holds no request. `check` sees each accepted change and the state it
/// produced (the
/// command server checks there that a listener it opens is free); when it
/// refuses, the change is taken back and skipped like a request `dispatch`
/// refused. A skipped request may make later ones fail in turn (a frontend
/// of a listener that was skipped): each is reported with its own error.
/// Nothing is remembered: a reload planned again from the state it left
/// retries what it skipped.
pub fn plan<E: From<ValidationError>>(
    state: &mut ConfigState,
    requests: impl IntoIterator<Item = proto::Request>,
    mut check: impl FnMut(&Change, &ConfigState) -> Result<(), E>,
) -> Planned<E> {
    let mut planned = Planned {
        generation: Generation::default(),
        unchanged: 0,
        skipped: Vec::new(),
    };
    // Each listener's table as the workers hold it, as it was before the
    // first change to it: the undo below builds an equal table, and
    // restoring this one keeps one copy of it, not two.
    let mut held: BTreeMap<ListenerKey, RouteTable> = BTreeMap::new();
    for request in requests {
        if let Some(address) = holds_table_of(&request)
            && !held.contains_key(&address)
            && let Some(table) = state.route_table(&address)
        {
            held.insert(address, table.clone());
        }
        let accepted = match state.dispatch_undoable(&request) {
            Err(error) => Err(error.into()),
            Ok(Undoable::Unchanged) => {
                planned.unchanged += 1;
                continue;
            }
            Ok(Undoable::Changed { undo }) => typed(&request, &undo)
                .map_err(E::from)
                .and_then(|(change, back)| {
                    check(&change, state)?;
                    Ok((change, back))
                })
                .inspect_err(|_| {
                    let restored = state.dispatch(&undo);
                    debug_assert!(restored.is_ok(), "the inverse of {request:?} was refused");
                }),
        };
        match accepted {
            Ok((change, undo)) => planned.generation.push(change, undo),
            Err(error) => planned.skipped.push((request, error)),
        }
    }
    let routed: BTreeSet<ListenerKey> = planned
        .generation
        .changes
        .iter()
        .filter_map(Change::routed_at)
        .collect();
    planned.generation.routes = snapshot(state, &routed);
    for undo in planned.generation.undo.iter().rev() {
        let restored = state.dispatch(&undo.to_request());
        debug_assert!(restored.is_ok(), "the inverse {undo:?} was refused");
    }
    // Every table held goes back, a change the check refused included; a
    // listener the generation adds has no table before it.
    for (address, table) in held {
        if state.adopt_routes(&address, &table) && routed.contains(&address) {
            planned.generation.routes_before.push((address, table));
        }
    }
    planned
}

/// The change `request` made and its inverse, typed; an error only for a
/// request the state accepted and the typed model does not (a bug, which
/// refuses the request rather than lose it).
fn typed(
    request: &proto::Request,
    undo: &proto::Request,
) -> Result<(Change, Change), ValidationError> {
    Ok((Change::from_request(request)?, Change::from_request(undo)?))
}

/// The listener whose route table `request` may change or drop, read off
/// the request before the state judges it (its table is taken before the
/// change): the listener a frontend with an SNI routes at, and a listener
/// removed (its inverse adds it back with a table of its own, which
/// planning replaces with the one held).
fn holds_table_of(request: &proto::Request) -> Option<ListenerKey> {
    match request.request_type.as_ref()? {
        RequestType::AddTcpFrontend(frontend) | RequestType::RemoveTcpFrontend(frontend)
            if frontend.sni.is_some() =>
        {
            let at = proto::ListenerAddress {
                address: frontend.address.clone(),
                protocol: frontend.protocol,
            };
            ListenerKey::of_request(&at).ok()
        }
        RequestType::RemoveListener(at) => ListenerKey::of_request(at).ok(),
        _ => None,
    }
}
