//! The files a job asks the shell to read: a reload's config file and a
//! `state load`'s state file, and what the job makes of them.
//!
//! Owns: the step from a file read back to the job's generation (or to
//! its refusal). Must never: read a file itself (the shell does, and
//! hands it back as an input).

use std::time::Instant;

use command::diff::diff;
use command::state::ConfigState;
use command::state_file::StateFileError;
use log::Level;

use super::Coordinator;
use super::jobs::Phase;
use super::outcome::Origin;
use crate::effect::{Effect, log};
use crate::input::{JobId, Unread};
use crate::responses::failure;

impl Coordinator {
    /// The shell read a reload's config file.
    pub(crate) fn config_read(
        &mut self,
        job: JobId,
        read: Result<String, Unread>,
        now: Instant,
        out: &mut Vec<Effect>,
    ) {
        let reading = |p: &Phase| matches!(p, Phase::ReadingConfig { .. });
        let Some(run) = self.jobs.take_running(job, reading) else {
            log(
                out,
                Level::Error,
                format!("a config file read for job {job:?}, not running"),
            );
            return;
        };
        let Phase::ReadingConfig { path, since } = run.phase else {
            return;
        };
        let reread = read.and_then(|text| self.reread(&text).map_err(Unread::Refused));
        match reread {
            Ok(reread) => {
                let warnings: Vec<String> = reread
                    .warnings
                    .iter()
                    .map(|warning| format!("{}:{warning}", path.display()))
                    .collect();
                for warning in &warnings {
                    log(out, Level::Warn, format!("reload: {warning}"));
                }
                // The check is this very call: the shell, which has the
                // clock, measures it when it logs the line.
                out.push(Effect::LogElapsed {
                    level: Level::Info,
                    since,
                    before: format!(
                        "reloading {}: read, checked and compared with the running state in ",
                        path.display()
                    ),
                    after: reread.read_note(),
                });
                let origin = Origin::Reload(path, warnings);
                self.apply(run.id, run.client, origin, reread.changes, now, out);
            }
            Err(unread) => self.refuse_reload(run.client, &path, unread, out),
        }
    }

    /// The shell read a `state load`'s file.
    pub(crate) fn state_file_read(
        &mut self,
        job: JobId,
        read: Result<ConfigState, StateFileError>,
        now: Instant,
        out: &mut Vec<Effect>,
    ) {
        let reading = |p: &Phase| matches!(p, Phase::ReadingState { .. });
        let Some(run) = self.jobs.take_running(job, reading) else {
            log(
                out,
                Level::Error,
                format!("a state file read for job {job:?}, not running"),
            );
            return;
        };
        let Phase::ReadingState { path } = run.phase else {
            return;
        };
        match read {
            Ok(loaded) => {
                let changes = diff(&self.state, &loaded);
                self.apply(run.id, run.client, Origin::Load(path), changes, now, out);
            }
            Err(error) => {
                if let Some(ticket) = run.client {
                    let answer = failure(
                        error.code().into(),
                        format!("cannot load the state file {path}: {error}; nothing changed"),
                    );
                    self.answer(ticket, answer, out);
                }
            }
        }
    }
}
