//! The end of a state-changing job: its commit or abandon recorded, and
//! its answer (or, for a SIGHUP reload or a merge of the route sources,
//! its log lines).
//!
//! Owns: [`Outcome`], [`Origin`], and what a job's client hears and the
//! log says of it. Must never: answer a job before its changes are
//! journaled, or answer one twice.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use command::answer_code::AnswerCode;
use command::change::Change;
use command::generation::{Generation, Planned};
use command::proto::{self, response_content::ContentType};
use command::validate::ValidationError;
use log::Level;

use super::{Coordinator, describe};
use crate::effect::{Effect, Notice, log};
use crate::input::Unread;
use crate::responses::{failure, ok, ok_with};
use crate::turns::Ticket;

/// The most entries each list of a `BatchReport` holds.
const REPORT_LIST_CAP: usize = 1_000;

/// Why a request of a job was not applied.
#[derive(Debug, Clone)]
pub(crate) struct Failure {
    pub(crate) code: AnswerCode,
    pub(crate) message: String,
}

impl From<ValidationError> for Failure {
    fn from(error: ValidationError) -> Self {
        Self {
            code: error.code.into(),
            message: error.message,
        }
    }
}

/// Where a job's changes came from: what its answer or log line says.
#[derive(Debug)]
pub(crate) enum Origin {
    /// One request of a client.
    Change,
    /// A batch of a client (`preread reload`).
    Batch,
    /// A state file (`state load`).
    Load(String),
    /// A config file the proxy read (SIGHUP, or `preread reload`), with
    /// its warnings (logged already; the CLI that asked prints them).
    Reload(PathBuf, Vec<String>),
    /// The route sources.
    Sources,
}

/// A job's end, for its answer.
#[derive(Debug)]
pub(crate) struct Outcome {
    pub(crate) client: Option<Ticket>,
    pub(crate) origin: Origin,
    /// The plan, its generation taken out into `generation`.
    pub(crate) planned: Planned<Failure>,
    pub(crate) generation: Arc<Generation>,
    /// Why the workers did not apply the generation (it is not committed).
    pub(crate) refused: Option<Failure>,
}

impl Coordinator {
    /// Records a merge or a reload the workers applied (or not), and
    /// answers the job; `save_error` is why its journal append failed.
    pub(crate) fn finish(
        &mut self,
        outcome: Outcome,
        save_error: Option<String>,
        now: Instant,
        out: &mut Vec<Effect>,
    ) {
        let skipped = outcome.skipped();
        if outcome.refused.is_none() {
            self.sources.commit(now, self.generation, out);
            self.last_text.commit(skipped.is_empty(), self.generation);
        } else {
            self.sources.abandon(now, self.settings.order_timeout);
            self.last_text.abandon();
        }
        let applied = outcome.applied().len();
        let save_note = save_error
            .map(|e| format!("; but the state file was not saved: {e}"))
            .unwrap_or_default();
        let unchanged = outcome.planned.unchanged;
        let answer = match &outcome.origin {
            Origin::Reload(path, warnings) => {
                let by_signal = outcome.client.is_none();
                let counts = (applied, unchanged);
                log_reload(path, counts, &skipped, &save_note, by_signal, out);
                if by_signal {
                    return;
                }
                let report = (outcome.applied(), unchanged, &skipped[..]);
                batch_answer(report, warnings, &save_note)
            }
            Origin::Sources => {
                log_sources(applied, &skipped, &save_note, out);
                return;
            }
            Origin::Change => match skipped.first() {
                Some((_, failed)) => failure(failed.code, failed.message.clone()),
                None if applied == 0 => {
                    ok("unchanged: the proxy already has this; nothing sent to the workers")
                }
                None => ok(format!(
                    "applied on {} worker(s){save_note}",
                    self.workers.len()
                )),
            },
            Origin::Batch => {
                batch_answer((outcome.applied(), unchanged, &skipped), &[], &save_note)
            }
            Origin::Load(path) => {
                let mut message = format!(
                    "state loaded from {path}: {applied} applied, {unchanged} unchanged, {} \
                     skipped{save_note}",
                    skipped.len()
                );
                for (request, failed) in &skipped {
                    message.push_str(&format!(
                        "\n  skipped {}: {}: {}",
                        describe(request),
                        failed.code,
                        failed.message
                    ));
                }
                match skipped.first() {
                    Some((_, failed)) => failure(failed.code, message),
                    None => ok(message),
                }
            }
        };
        if let Some(ticket) = outcome.client {
            self.answer(ticket, answer, out);
        }
    }

    /// A reload that read nothing to apply: logged, and answered to the
    /// CLI that asked (on SIGHUP, systemd hears that the reload is over).
    pub(crate) fn refuse_reload(
        &mut self,
        client: Option<Ticket>,
        path: &Path,
        unread: Unread,
        out: &mut Vec<Effect>,
    ) {
        let answer = match unread {
            Unread::Unseen(message) => {
                log(out, Level::Warn, format!("reload: {message}"));
                failure(AnswerCode::ConfigUnseen, message)
            }
            Unread::Refused(problems) => {
                let errors = problems.iter().filter(|p| !p.is_warning()).count();
                let mut message = format!(
                    "reload of {} refused: {errors} error(s); nothing changed",
                    path.display()
                );
                for problem in &problems {
                    let level = if problem.is_warning() {
                        Level::Warn
                    } else {
                        Level::Error
                    };
                    log(out, level, format!("reload: {}:{problem}", path.display()));
                    message.push_str(&format!("\n{}:{problem}", path.display()));
                }
                failure(AnswerCode::ConfigRefused, message)
            }
        };
        match client {
            Some(ticket) => self.answer(ticket, answer, out),
            None => {
                let summary = answer.message.lines().next().unwrap_or_default().to_owned();
                log(out, Level::Error, summary.clone());
                out.push(Effect::Notify(Notice::Ready(summary)));
            }
        }
    }
}

impl Outcome {
    /// The changes committed: the generation, unless the workers refused it.
    pub(crate) fn applied(&self) -> &[Change] {
        match self.refused {
            Some(_) => &[],
            None => &self.generation.changes,
        }
    }

    /// Every request not applied, with why, in order: those the plan
    /// skipped, then, if the workers refused the generation, each of its
    /// changes.
    fn skipped(&self) -> Vec<(proto::Request, Failure)> {
        let mut skipped = self.planned.skipped.clone();
        if let Some(refused) = &self.refused {
            skipped.extend(
                self.generation
                    .changes
                    .iter()
                    .map(|change| (change.to_request(), refused.clone())),
            );
        }
        skipped
    }
}

/// The answer to a batch or a reload that a client asked for: what was
/// applied and skipped (the first [`REPORT_LIST_CAP`] of each, with the
/// totals), and the warnings of the config file a reload read.
fn batch_answer(
    (applied, unchanged, skipped): (&[Change], usize, &[(proto::Request, Failure)]),
    warnings: &[String],
    save_note: &str,
) -> proto::Response {
    let count = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
    let report = proto::BatchReport {
        applied: applied
            .iter()
            .take(REPORT_LIST_CAP)
            .map(Change::to_request)
            .collect(),
        applied_total: count(applied.len()),
        unchanged: count(unchanged),
        skipped_total: count(skipped.len()),
        skipped: skipped
            .iter()
            .take(REPORT_LIST_CAP)
            .map(|(request, failed)| proto::SkippedRequest {
                request: Some(request.clone()),
                error_code: failed.code.as_str().to_owned(),
                message: failed.message.clone(),
            })
            .collect(),
        warnings: warnings.to_vec(),
    };
    let mut answer = ok_with(ContentType::Batch(report));
    answer.message = format!(
        "{} applied, {unchanged} unchanged, {} skipped{save_note}",
        applied.len(),
        skipped.len()
    );
    answer
}

/// The summary of a merge of the route sources: each skipped request with
/// its code (excluded fragments are logged when they are recorded), then
/// the count.
fn log_sources(
    applied: usize,
    skipped: &[(proto::Request, Failure)],
    save_note: &str,
    out: &mut Vec<Effect>,
) {
    for (request, failed) in skipped {
        let line = format!(
            "route sources: skipped {}: {}: {}",
            describe(request),
            failed.code,
            failed.message
        );
        log(out, Level::Warn, line);
    }
    if applied > 0 || !skipped.is_empty() {
        let line = format!(
            "route sources: {applied} change(s) applied, {} skipped{save_note}",
            skipped.len()
        );
        log(out, Level::Info, line);
    }
}

/// The summary of a SIGHUP reload, as `preread reload` prints it: each
/// skipped request with its code, then the counts.
fn log_reload(
    path: &Path,
    (applied, unchanged): (usize, usize),
    skipped: &[(proto::Request, Failure)],
    save_note: &str,
    by_signal: bool,
    out: &mut Vec<Effect>,
) {
    for (request, failed) in skipped {
        let line = format!(
            "reload of {}: skipped {}: {}: {}",
            path.display(),
            describe(request),
            failed.code,
            failed.message
        );
        log(out, Level::Warn, line);
    }
    let summary = format!(
        "reload of {}: {applied} applied, {unchanged} unchanged, {} skipped{save_note}",
        path.display(),
        skipped.len()
    );
    log(out, Level::Info, summary.clone());
    if by_signal {
        out.push(Effect::Notify(Notice::Ready(summary)));
    }
}
