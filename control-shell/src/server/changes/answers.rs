//! The end of a state-changing job: its commit or abandon recorded, the
//! state journaled, and its answer (or, for a SIGHUP reload or a merge of
//! the route sources, its log lines).
//!
//! Owns: what a job's client hears and the log says of it. Must never:
//! answer a job before its changes are journaled, or answer one twice.

use std::path::Path;

use command::change::Change;
use command::proto::{self, response_content::ContentType};

use super::super::describe;
use super::super::reload_file::Unread;
use super::super::responses::{failure, ok, ok_with};
use super::{CommandServer, Failure, Origin, Outcome, REPORT_LIST_CAP};
use crate::server::clients::ClientRef;
use preread_worker::answer_code::AnswerCode;

impl CommandServer {
    /// Saves the state if the job changed it, records a merge the workers
    /// applied, and answers the job.
    pub(super) fn finish(&mut self, outcome: Outcome) {
        let skipped = outcome.skipped();
        if outcome.refused.is_none() {
            self.sources.commit();
            self.last_text.commit(skipped.is_empty(), self.generation);
        } else {
            self.sources.abandon();
            self.last_text.abandon();
        }
        let applied = outcome.applied().len();
        let save_note = if applied > 0 {
            self.autosave(outcome.applied())
                .map(|e| format!("; but the state file was not saved: {e}"))
                .unwrap_or_default()
        } else {
            String::new()
        };
        let unchanged = outcome.planned.unchanged;
        let answer = match &outcome.origin {
            Origin::Reload(path, warnings) => {
                let by_signal = outcome.client.is_none();
                log_reload(path, applied, unchanged, &skipped, &save_note, by_signal);
                if by_signal {
                    return;
                }
                let report = (outcome.applied(), unchanged, &skipped[..]);
                batch_answer(report, warnings, &save_note)
            }
            Origin::Sources => {
                log_sources(applied, &skipped, &save_note);
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
        if let Some(who) = outcome.client {
            self.respond(who, &answer);
        }
    }

    /// A reload that read nothing to apply: logged, and answered to the
    /// CLI that asked (on SIGHUP, systemd hears that the reload is over).
    pub(super) fn refuse_reload(&mut self, client: Option<ClientRef>, path: &Path, unread: Unread) {
        let answer = match unread {
            Unread::Unseen(message) => {
                log::warn!("reload: {message}");
                failure(AnswerCode::ConfigUnseen, message)
            }
            Unread::Refused(problems) => {
                let errors = problems.iter().filter(|p| !p.is_warning()).count();
                let mut message = format!(
                    "reload of {} refused: {errors} error(s); nothing changed",
                    path.display()
                );
                for problem in &problems {
                    if problem.is_warning() {
                        log::warn!("reload: {}:{problem}", path.display());
                    } else {
                        log::error!("reload: {}:{problem}", path.display());
                    }
                    message.push_str(&format!("\n{}:{problem}", path.display()));
                }
                failure(AnswerCode::ConfigRefused, message)
            }
        };
        match client {
            Some(who) => self.respond(who, &answer),
            None => {
                let summary = answer.message.lines().next().unwrap_or_default().to_owned();
                log::error!("{summary}");
                crate::notify::ready(&summary);
            }
        }
    }

    /// With `automatic_state_save`, journals the committed `steps` (synced
    /// before the answer); the error, if any (logged), for the answer.
    fn autosave(&mut self, changes: &[Change]) -> Option<String> {
        let steps: Vec<proto::Request> = changes.iter().map(Change::to_request).collect();
        let error = self.saved.record(&steps, &self.state).err()?;
        log::error!("automatic state save failed: {error}");
        Some(error.to_string())
    }
}

impl Outcome {
    /// The changes committed: the generation, unless the workers refused it.
    fn applied(&self) -> &[Change] {
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
fn log_sources(applied: usize, skipped: &[(proto::Request, Failure)], save_note: &str) {
    for (request, failed) in skipped {
        log::warn!(
            "route sources: skipped {}: {}: {}",
            describe(request),
            failed.code,
            failed.message
        );
    }
    if applied > 0 || !skipped.is_empty() {
        log::info!(
            "route sources: {applied} change(s) applied, {} skipped{save_note}",
            skipped.len()
        );
    }
}

/// The summary of a SIGHUP reload, as `preread reload` prints it: each
/// skipped request with its code, then the counts.
fn log_reload(
    path: &Path,
    applied: usize,
    unchanged: usize,
    skipped: &[(proto::Request, Failure)],
    save_note: &str,
    by_signal: bool,
) {
    for (request, failed) in skipped {
        log::warn!(
            "reload of {}: skipped {}: {}: {}",
            path.display(),
            describe(request),
            failed.code,
            failed.message
        );
    }
    let summary = format!(
        "reload of {}: {applied} applied, {unchanged} unchanged, {} skipped{save_note}",
        path.display(),
        skipped.len()
    );
    log::info!("{summary}");
    if by_signal {
        crate::notify::ready(&summary);
    }
}
