//! The end of a generation on the workers: commit, or rollback on the
//! workers that may hold it; then the journal append and the answer.
//!
//! Owns: the commit of a generation every worker applied, the inverse
//! sent to exactly the workers that may hold a refused one, and the wait
//! for the journal before the answer. Must never: commit before every
//! worker answered `Done`, send the inverse to a worker that refused (it
//! took the generation back itself) or is gone, or journal a generation
//! twice.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Instant;

use command::answer_code::AnswerCode;
use command::generation::Generation;
use command::state_file::StateFileError;
use log::Level;

use super::jobs::{Phase, Running};
use super::outcome::{Failure, Outcome};
use super::{Coordinator, Purpose};
use crate::effect::{Effect, log};
use crate::input::JobId;
use crate::orders::Order;
use crate::pending::Gathered;

impl Coordinator {
    /// Every worker answered the running generation (or some did not in
    /// time): commit it, or roll it back on the workers that may have
    /// applied it.
    pub(crate) fn step_done(
        &mut self,
        gathered: &Gathered<Purpose>,
        now: Instant,
        out: &mut Vec<Effect>,
    ) {
        let run = match self.jobs.running.take() {
            Some(Running {
                id,
                client,
                phase:
                    Phase::Applying {
                        order,
                        origin,
                        planned,
                        generation,
                    },
            }) if order == gathered.id => (id, client, origin, planned, generation),
            other => {
                log(
                    out,
                    Level::Error,
                    format!("answers to generation {} not in flight", gathered.id),
                );
                self.jobs.running = other;
                return;
            }
        };
        let (id, client, origin, planned, generation) = run;
        let refused = match gathered.first_failure() {
            None => {
                if let Err(error) = generation.apply_to(&mut self.state) {
                    // Planned on this very state, nothing committed since:
                    // a bug, and the operator must hear of it.
                    log(
                        out,
                        Level::Error,
                        format!(
                            "committing a generation the workers applied was refused: {error}; \
                             the state may differ from the workers' until the proxy restarts"
                        ),
                    );
                }
                self.state.check_invariants();
                self.generation += 1;
                None
            }
            Some((_, code, message)) => {
                Some(self.roll_back(gathered, &generation, code, message, now, out))
            }
        };
        out.push(Effect::Settled {
            generation: Arc::clone(&generation),
            committed: refused.is_none(),
        });
        let outcome = Outcome {
            client,
            origin,
            planned,
            generation,
            refused,
        };
        if outcome.applied().is_empty() {
            self.finish(outcome, None, now, out);
            return;
        }
        out.push(Effect::AppendJournal {
            job: id,
            changes: outcome.applied().to_vec(),
        });
        let phase = Phase::Journaling(outcome);
        self.jobs.running = Some(Running { id, client, phase });
    }

    /// Sends the inverse of a refused generation to every worker that may
    /// hold it; what the job's answer says of it.
    fn roll_back(
        &mut self,
        gathered: &Gathered<Purpose>,
        generation: &Generation,
        code: AnswerCode,
        message: String,
        now: Instant,
        out: &mut Vec<Effect>,
    ) -> Failure {
        // Every worker asked but those that refused may hold the
        // generation (a late one applies it before the inverse: orders
        // are FIFO); one that refused took it back itself, and a gone one
        // counts as refused.
        let refused = gathered.refused_by();
        let undo_on: Vec<_> = gathered
            .answers
            .iter()
            .map(|(worker, _)| *worker)
            .chain(gathered.missing.iter().copied())
            .filter(|worker| !refused.contains(worker) && self.workers.contains(worker))
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        log(
            out,
            Level::Warn,
            format!(
                "generation of {} change(s): {code}: {message}; undoing it on worker(s) \
                 {undo_on:?}",
                generation.len()
            ),
        );
        if !undo_on.is_empty() {
            let inverse = Arc::new(generation.inverse());
            let purpose = Purpose::Rollback {
                changes: inverse.len(),
            };
            let timeout = self.settings.order_timeout;
            self.broadcast(
                Order::Apply(inverse),
                purpose,
                Some(&undo_on),
                timeout,
                now,
                out,
            );
        }
        Failure {
            code,
            message: if undo_on.is_empty() {
                format!("{message}; nothing changed")
            } else {
                format!("{message}; undone on worker(s) {undo_on:?}, nothing changed")
            },
        }
    }

    /// The shell appended a committed job to the journal: its answer.
    pub(crate) fn journaled(
        &mut self,
        job: JobId,
        saved: Result<(), StateFileError>,
        now: Instant,
        out: &mut Vec<Effect>,
    ) {
        let journaling = |p: &Phase| matches!(p, Phase::Journaling(_));
        let Some(run) = self.jobs.take_running(job, journaling) else {
            log(
                out,
                Level::Error,
                format!("a journal append for job {job:?}, not running"),
            );
            return;
        };
        let Phase::Journaling(outcome) = run.phase else {
            return;
        };
        let save_error = saved.err().map(|error| {
            log(
                out,
                Level::Error,
                format!("automatic state save failed: {error}"),
            );
            error.to_string()
        });
        self.finish(outcome, save_error, now, out);
    }
}
