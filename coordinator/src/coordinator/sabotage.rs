//! Planted faults, for the simulation's proof that its checks catch a
//! broken coordinator (`sim --sabotage NAME`). Compiled only with the
//! `sabotage` feature, which the proxy never asks for.
//!
//! Owns: [`Fault`], the two faults that no filter of the shell's inputs
//! and effects can make: a commit before every worker answered, and a
//! deadline that passes unseen. (The simulation makes the others, a lost,
//! reordered or doubled effect, by filtering.) Must never: change
//! anything while no fault is planted.

use super::{Coordinator, Purpose};
use crate::orders::OrderId;
use crate::pending::Gathered;

/// A fault planted in the coordinator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// A generation is committed as soon as the workers that answered so
    /// far applied it, without waiting for the others.
    CommitEarly,
    /// Orders whose deadline passed are dropped instead of gathered: the
    /// job that waits on one waits for ever.
    MissDeadlines,
}

impl Coordinator {
    /// Plants `fault` (none: the coordinator as shipped).
    pub fn plant(&mut self, fault: Option<Fault>) {
        self.fault = fault;
    }

    /// With [`Fault::CommitEarly`], the running generation's order is
    /// complete as soon as one worker applied it.
    pub(crate) fn commit_early(&mut self, order: OrderId) {
        if self.fault != Some(Fault::CommitEarly) {
            return;
        }
        let step = |purpose: &Purpose| matches!(purpose, Purpose::Step);
        if let Some(gathered) = self.pending.complete_now(order, step) {
            self.completed.push_back(gathered);
        }
    }

    /// With [`Fault::MissDeadlines`], the orders due are forgotten.
    pub(crate) fn missed(&self, due: Vec<Gathered<Purpose>>) -> Vec<Gathered<Purpose>> {
        if self.fault == Some(Fault::MissDeadlines) {
            return Vec::new();
        }
        due
    }
}
