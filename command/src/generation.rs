//! Routing generations: the accepted changes of one request, one reload or
//! one state load, which every worker applies as a single step.
//!
//! Owns: [`Generation`] (the changes and their inverses) and [`plan`], which
//! validates a list of requests on a copy of the running state, skips the
//! ones refused (with why) and keeps the others in order. Must never: keep
//! a change whose inverse it does not hold, or let a refused request touch
//! the planned state (a refusal leaves the state as it was, and a change a
//! later check refuses is taken back through its inverse).

use crate::proto;
use crate::state::ConfigState;
use crate::undo::Change;
use crate::validate::ValidationError;

/// The changes a worker applies in one step, between two events of its
/// loop, so that no connection sees part of them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Generation {
    /// The changes, in the order they apply.
    pub steps: Vec<proto::Request>,
    /// `undo[i]` takes the state after `steps[i]` back to the state before
    /// it.
    pub undo: Vec<proto::Request>,
}

impl Generation {
    /// Whether it changes nothing.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.steps.is_empty()
    }

    /// How many changes it holds.
    #[must_use]
    pub fn len(&self) -> usize {
        self.steps.len()
    }

    /// The generation that takes its whole effect back: the inverses, last
    /// change first (and its own inverse is this one again).
    #[must_use]
    pub fn inverse(&self) -> Generation {
        Generation {
            steps: self.undo.iter().rev().cloned().collect(),
            undo: self.steps.iter().rev().cloned().collect(),
        }
    }

    fn push(&mut self, step: proto::Request, undo: proto::Request) {
        self.steps.push(step);
        self.undo.push(undo);
    }
}

/// What [`plan`] made of a list of requests.
#[derive(Debug)]
pub struct Planned<E> {
    /// The running state with the generation applied.
    pub after: ConfigState,
    /// The accepted changes, in order.
    pub generation: Generation,
    /// Requests the state already held.
    pub unchanged: usize,
    /// Refused requests, with why, in order.
    pub skipped: Vec<(proto::Request, E)>,
}

/// Validates `requests` one after the other on a copy of `current`.
///
/// `check` sees each accepted change and the state it produced (the
/// command server checks there that a listener it opens is free); when it
/// refuses, the change is taken back and skipped like a request `dispatch`
/// refused. A skipped request may make later ones fail in turn (a frontend
/// of a listener that was skipped): each is reported with its own error.
/// Nothing is remembered: a reload planned again from the state it left
/// retries what it skipped.
pub fn plan<E: From<ValidationError>>(
    current: &ConfigState,
    requests: impl IntoIterator<Item = proto::Request>,
    mut check: impl FnMut(&proto::Request, &ConfigState) -> Result<(), E>,
) -> Planned<E> {
    let mut planned = Planned {
        after: current.clone(),
        generation: Generation::default(),
        unchanged: 0,
        skipped: Vec::new(),
    };
    for request in requests {
        match planned.after.dispatch_undoable(&request) {
            Err(error) => planned.skipped.push((request, error.into())),
            Ok(Change::Unchanged) => planned.unchanged += 1,
            Ok(Change::Changed { undo }) => match check(&request, &planned.after) {
                Ok(()) => planned.generation.push(request, undo),
                Err(error) => {
                    let restored = planned.after.dispatch(&undo);
                    debug_assert!(restored.is_ok(), "the inverse of {request:?} was refused");
                    planned.skipped.push((request, error));
                }
            },
        }
    }
    planned
}
