//! The order of each client's answers.
//!
//! Owns: [`Turns`]: a ticket per client request, taken in the order the
//! requests came, and the answers held back until every earlier request
//! of the same client was answered. Must never: release a client's answer
//! before an earlier one of that client, or release one twice.

use std::collections::{HashMap, VecDeque};

use crate::effect::Effect;
use crate::input::ClientId;

/// One request's place in its client's line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ticket {
    pub(crate) client: ClientId,
    seq: u64,
}

#[derive(Debug, Default)]
struct Line {
    next: u64,
    /// The tickets not released yet, oldest first, with the answer once
    /// it is known.
    owed: VecDeque<(u64, Option<Effect>)>,
}

/// Every client's line. See the module documentation.
#[derive(Debug, Default)]
pub(crate) struct Turns {
    lines: HashMap<ClientId, Line>,
}

impl Turns {
    /// The ticket of `client`'s next request.
    pub(crate) fn take(&mut self, client: ClientId) -> Ticket {
        let line = self.lines.entry(client).or_default();
        let seq = line.next;
        line.next += 1;
        line.owed.push_back((seq, None));
        Ticket { client, seq }
    }

    /// The answer of `ticket`: released into `out` with every answer that
    /// waited for it, or held until the earlier ones are known. An answer
    /// for a client that left is dropped.
    pub(crate) fn give(&mut self, ticket: Ticket, answer: Effect, out: &mut Vec<Effect>) {
        let Some(line) = self.lines.get_mut(&ticket.client) else {
            return;
        };
        let Some(slot) = line.owed.iter_mut().find(|(seq, _)| *seq == ticket.seq) else {
            return;
        };
        if slot.1.is_some() {
            return;
        }
        slot.1 = Some(answer);
        while line
            .owed
            .front()
            .is_some_and(|(_, answer)| answer.is_some())
        {
            if let Some((_, Some(answer))) = line.owed.pop_front() {
                out.push(answer);
            }
        }
    }

    /// `client` left: nothing more is released to it. (Its line is kept
    /// until then, so a ticket's number is never used twice.)
    pub(crate) fn forget(&mut self, client: ClientId) {
        self.lines.remove(&client);
    }

    /// How many answers are owed, all clients together.
    pub(crate) fn owed(&self) -> usize {
        self.lines.values().map(|line| line.owed.len()).sum()
    }
}
