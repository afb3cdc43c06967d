//! Orders sent to the workers and not yet answered by all of them.
//!
//! Owns: order ids, which worker still owes an answer to which order, the
//! answers gathered so far, and the deadline after which a missing answer
//! counts as a failure. Must never: wait; it is told about answers and
//! about time, and says which orders are complete.

use std::collections::{BTreeSet, HashMap};
use std::time::Instant;

use command::answer_code::AnswerCode;

use crate::orders::{Answer, OrderId, Reply, WorkerId};

/// An order whose answers are all in, or whose deadline passed.
#[derive(Debug)]
pub(crate) struct Gathered<P> {
    pub(crate) id: OrderId,
    /// Why it was sent.
    pub(crate) purpose: P,
    /// Every answer received, by worker id.
    pub(crate) answers: Vec<(WorkerId, Answer)>,
    /// Workers that did not answer before the deadline.
    pub(crate) missing: Vec<WorkerId>,
}

impl<P> Gathered<P> {
    /// The first refusal, or else the first missing worker, as
    /// `(worker, code, message)`: the code is the worker's, or
    /// [`AnswerCode::WorkerTimeout`]; the message names the worker. `None`
    /// when no worker refused and none is missing.
    pub(crate) fn first_failure(&self) -> Option<(WorkerId, AnswerCode, String)> {
        for (worker, answer) in &self.answers {
            if let Answer::Refused { code, message } = answer {
                let code = *code;
                // The real worker names itself already; a fake may not.
                let message = if message.starts_with(&format!("worker {worker}")) {
                    message.clone()
                } else {
                    format!("worker {worker} refused: {message}")
                };
                return Some((*worker, code, message));
            }
        }
        self.missing.first().map(|worker| {
            (
                *worker,
                AnswerCode::WorkerTimeout,
                format!("worker {worker} did not answer in time"),
            )
        })
    }

    /// Workers that refused.
    pub(crate) fn refused_by(&self) -> Vec<WorkerId> {
        self.answers
            .iter()
            .filter(|(_, answer)| matches!(answer, Answer::Refused { .. }))
            .map(|(worker, _)| *worker)
            .collect()
    }
}

#[derive(Debug)]
struct Open<P> {
    purpose: P,
    waiting: BTreeSet<WorkerId>,
    answers: Vec<(WorkerId, Answer)>,
    deadline: Instant,
}

impl<P> Open<P> {
    fn finish(self, id: OrderId) -> Gathered<P> {
        let mut answers = self.answers;
        answers.sort_by_key(|(worker, _)| *worker);
        Gathered {
            id,
            purpose: self.purpose,
            answers,
            missing: self.waiting.into_iter().collect(),
        }
    }
}

/// What one answer did.
#[derive(Debug)]
pub(crate) enum Recorded<P> {
    /// The order is complete: every worker answered.
    Complete(Gathered<P>),
    /// The order still waits on other workers.
    Waiting,
    /// No such order is open (it timed out, or was cancelled).
    Stale,
    /// The worker answered this order already, or was not asked.
    Unasked,
}

/// The open orders.
#[derive(Debug)]
pub(crate) struct Pending<P> {
    next_id: OrderId,
    open: HashMap<OrderId, Open<P>>,
}

impl<P> Pending<P> {
    pub(crate) fn new() -> Self {
        Self {
            next_id: 1,
            open: HashMap::new(),
        }
    }

    /// Opens an order awaiting an answer from each of `workers` before
    /// `deadline`. With no worker it is complete at once: take it with
    /// [`take_complete`](Self::take_complete).
    pub(crate) fn open(
        &mut self,
        purpose: P,
        workers: impl IntoIterator<Item = WorkerId>,
        deadline: Instant,
    ) -> OrderId {
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        self.open.insert(
            id,
            Open {
                purpose,
                waiting: workers.into_iter().collect(),
                answers: Vec::new(),
                deadline,
            },
        );
        id
    }

    /// Records one answer. An answer to an unknown order, or a second
    /// answer of one worker, is ignored (and said so, for the log).
    pub(crate) fn record(&mut self, reply: Reply) -> Recorded<P> {
        let Some(open) = self.open.get_mut(&reply.order) else {
            return Recorded::Stale;
        };
        if !open.waiting.remove(&reply.worker) {
            return Recorded::Unasked;
        }
        open.answers.push((reply.worker, reply.answer));
        match self.take_complete(reply.order) {
            Some(gathered) => Recorded::Complete(gathered),
            None => Recorded::Waiting,
        }
    }

    /// The open orders that still wait on `worker`, oldest first.
    pub(crate) fn owed_by(&self, worker: WorkerId) -> Vec<OrderId> {
        let mut ids: Vec<OrderId> = self
            .open
            .iter()
            .filter(|(_, open)| open.waiting.contains(&worker))
            .map(|(id, _)| *id)
            .collect();
        ids.sort_unstable();
        ids
    }

    /// The order `id` if nothing more is awaited for it.
    pub(crate) fn take_complete(&mut self, id: OrderId) -> Option<Gathered<P>> {
        if self.open.get(&id)?.waiting.is_empty() {
            return self.open.remove(&id).map(|open| open.finish(id));
        }
        None
    }

    /// Removes and returns the orders whose deadline passed, oldest first.
    pub(crate) fn expire(&mut self, now: Instant) -> Vec<Gathered<P>> {
        let mut ids: Vec<OrderId> = self
            .open
            .iter()
            .filter(|(_, open)| open.deadline <= now)
            .map(|(id, _)| *id)
            .collect();
        ids.sort_unstable();
        ids.into_iter()
            .filter_map(|id| self.open.remove(&id).map(|open| open.finish(id)))
            .collect()
    }

    /// The order `id`, taken out as complete although some workers still
    /// owe their answer, if its purpose matches and every answer so far is
    /// `Done` (the planted fault `CommitEarly`).
    #[cfg(feature = "sabotage")]
    pub(crate) fn complete_now(
        &mut self,
        id: OrderId,
        purpose: impl Fn(&P) -> bool,
    ) -> Option<Gathered<P>> {
        let open = self.open.get(&id)?;
        let all_done = open
            .answers
            .iter()
            .all(|(_, answer)| matches!(answer, Answer::Done));
        if !purpose(&open.purpose) || !all_done {
            return None;
        }
        let mut open = self.open.remove(&id)?;
        open.waiting.clear();
        Some(open.finish(id))
    }

    /// The earliest deadline of an open order.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        self.open.values().map(|open| open.deadline).min()
    }

    /// Forgets the open orders whose purpose matches: their answers will
    /// be ignored.
    pub(crate) fn cancel(&mut self, mut pred: impl FnMut(&P) -> bool) {
        self.open.retain(|_, open| !pred(&open.purpose));
    }

    /// Whether some open order's purpose matches.
    pub(crate) fn any(&self, mut pred: impl FnMut(&P) -> bool) -> bool {
        self.open.values().any(|open| pred(&open.purpose))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn reply(worker: WorkerId, order: OrderId, answer: Answer) -> Reply {
        Reply {
            worker,
            order,
            answer,
        }
    }

    #[test]
    fn complete_when_every_worker_answered() {
        let mut pending = Pending::new();
        let later = Instant::now() + Duration::from_secs(60);
        let id = pending.open("apply", [0, 1], later);
        assert!(matches!(
            pending.record(reply(1, id, Answer::Done)),
            Recorded::Waiting
        ));
        assert!(
            matches!(
                pending.record(reply(1, id, Answer::Done)),
                Recorded::Unasked
            ),
            "twice"
        );
        assert!(
            matches!(
                pending.record(reply(0, id + 7, Answer::Done)),
                Recorded::Stale
            ),
            "unknown"
        );
        let Recorded::Complete(done) = pending.record(reply(0, id, Answer::Done)) else {
            panic!("not complete");
        };
        assert_eq!(done.purpose, "apply");
        assert!(done.refused_by().is_empty());
        assert!(done.first_failure().is_none());
        assert!(pending.next_deadline().is_none());
    }

    #[test]
    fn no_worker_is_complete_at_once() {
        let mut pending = Pending::new();
        let id = pending.open((), [], Instant::now());
        assert!(pending.take_complete(id).is_some());
    }

    #[test]
    fn refusal_and_expiry() {
        let mut pending = Pending::new();
        let now = Instant::now();
        let id = pending.open((), [0, 1, 2], now + Duration::from_millis(10));
        let refused = Answer::Refused {
            code: AnswerCode::WorkerRefused,
            message: "bind failed".to_owned(),
        };
        assert!(matches!(
            pending.record(reply(2, id, refused)),
            Recorded::Waiting
        ));
        assert_eq!(pending.owed_by(0), vec![id]);
        assert!(matches!(
            pending.record(reply(0, id, Answer::Done)),
            Recorded::Waiting
        ));
        assert!(pending.owed_by(0).is_empty());
        assert!(pending.expire(now).is_empty());
        let expired = pending.expire(now + Duration::from_millis(10));
        assert_eq!(expired.len(), 1);
        let gathered = expired.first().expect("one");
        assert_eq!(gathered.missing, vec![1]);
        assert_eq!(gathered.refused_by(), vec![2]);
        let (worker, code, _) = gathered.first_failure().expect("failure");
        assert_eq!((worker, code), (2, AnswerCode::WorkerRefused));
    }
}
