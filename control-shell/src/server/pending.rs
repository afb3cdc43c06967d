//! Orders sent to the workers and not yet answered by all of them.
//!
//! Owns: order ids, which worker still owes an answer to which order, the
//! answers gathered so far, and the deadline after which a missing answer
//! counts as a failure. Must never: wait; it is told about replies and
//! about time, and says which orders are complete.

use std::collections::{BTreeSet, HashMap};
use std::time::Instant;

use preread_worker::answer_code::AnswerCode;
use preread_worker::worker::orders::{Answer, OrderId, Reply};

/// An order whose answers are all in, or whose deadline passed.
#[derive(Debug)]
pub(crate) struct Gathered<P> {
    pub(crate) id: OrderId,
    /// Why it was sent.
    pub(crate) purpose: P,
    /// Every answer received, by worker id.
    pub(crate) answers: Vec<(u32, Answer)>,
    /// Workers that did not answer before the deadline.
    pub(crate) missing: Vec<u32>,
}

impl<P> Gathered<P> {
    /// The first refusal, or else the first missing worker, as
    /// `(worker, code, message)`: the code is the worker's, or
    /// [`AnswerCode::WorkerTimeout`]; the message names the worker. `None`
    /// when no worker refused and none is missing.
    pub(crate) fn first_failure(&self) -> Option<(u32, AnswerCode, String)> {
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
    pub(crate) fn refused_by(&self) -> Vec<u32> {
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
    waiting: BTreeSet<u32>,
    answers: Vec<(u32, Answer)>,
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
        workers: impl IntoIterator<Item = u32>,
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

    /// Records one answer. Returns the order once every worker answered.
    /// An answer to an unknown order, or a second answer of one worker, is
    /// ignored (logged).
    pub(crate) fn record(&mut self, reply: Reply) -> Option<Gathered<P>> {
        let Some(open) = self.open.get_mut(&reply.order) else {
            log::debug!(
                "worker {} answered order {} that is no longer awaited (timed out?)",
                reply.worker,
                reply.order
            );
            return None;
        };
        if !open.waiting.remove(&reply.worker) {
            log::warn!(
                "worker {} answered order {} twice, or was not asked",
                reply.worker,
                reply.order
            );
            return None;
        }
        open.answers.push((reply.worker, reply.answer));
        self.take_complete(reply.order)
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

    fn reply(worker: u32, order: OrderId, answer: Answer) -> Reply {
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
        assert!(pending.record(reply(1, id, Answer::Done)).is_none());
        assert!(
            pending.record(reply(1, id, Answer::Done)).is_none(),
            "twice"
        );
        assert!(
            pending.record(reply(0, id + 7, Answer::Done)).is_none(),
            "unknown"
        );
        let done = pending
            .record(reply(0, id, Answer::Done))
            .expect("complete");
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
        assert!(pending.record(reply(2, id, refused)).is_none());
        assert!(pending.record(reply(0, id, Answer::Done)).is_none());
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
