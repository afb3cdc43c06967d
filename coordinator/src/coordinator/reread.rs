//! The config file read again for a reload: the outline of the text the file state came from, and the reread that
//! starts from it (`command::reread`).
//!
//! Owns: [`LastText`] (that outline, and since which generation the
//! running state is that text's file state), the choice of what a reread
//! starts from (the running state when no route source merges with the
//! file, else the file's declarations the sources keep), and keeping the
//! new text's outline once the workers applied the reload. Must never let
//! an outline stand for a state that is not its text's: the running state
//! is the file state only after a boot from the config or a reload that
//! skipped nothing, until the next committed change; the sources' copy of
//! the file's declarations only until a batch of declarations replaces it.
//! Whatever the start, the answer is the full check's (`command::reread`
//! falls back to it), so this only decides how much is read.

use command::config::{ConfigProblem, Outline};
use command::diff::diff;
use command::proto;
use command::reread::{self, Read};

use super::Coordinator;

/// The outline of the config text the file state came from. See the
/// module documentation.
#[derive(Debug, Default)]
pub(crate) struct LastText {
    outline: Option<Outline>,
    /// The generation in which the running state is the outline's file
    /// state, if it is.
    running_in: Option<u64>,
    /// The text of the reload the workers are applying, if one is.
    pending: Option<ReadText>,
}

/// A text a reload read: its outline, when `Outline::of` made one (a
/// text without one is read whole by the next reload).
#[derive(Debug)]
struct ReadText {
    outline: Option<Outline>,
}

impl LastText {
    /// The outline of the text the running state is the file state of, in
    /// generation `generation`.
    fn for_running(&self, generation: u64) -> Option<&Outline> {
        self.outline
            .as_ref()
            .filter(|_| self.running_in == Some(generation))
    }

    /// The reload the workers applied read the text of `pending`: its
    /// outline stands for the file state now, and for the running state
    /// (of generation `generation`) when the reload skipped nothing.
    pub(crate) fn commit(&mut self, skipped_nothing: bool, generation: u64) {
        if let Some(read) = self.pending.take() {
            self.outline = read.outline;
            self.running_in = skipped_nothing.then_some(generation);
        }
    }

    /// The reload was not applied: the file state is the one before it.
    pub(crate) fn abandon(&mut self) {
        self.pending = None;
    }

    /// The file state is now one of declarations sent over the socket,
    /// of no text.
    pub(crate) fn forget(&mut self) {
        self.outline = None;
        self.running_in = None;
    }
}

/// What a reload's text asks for.
#[derive(Debug)]
pub(crate) struct Reread {
    /// Its warnings, in file order.
    pub(crate) warnings: Vec<ConfigProblem>,
    /// The diff from the running state.
    pub(crate) changes: Vec<proto::Request>,
    /// How much of it was read.
    pub(crate) read: Read,
}

impl Reread {
    /// How much was read, for the reload's log line.
    pub(crate) fn read_note(&self) -> String {
        match self.read {
            Read::Whole => " (the whole file)".to_owned(),
            Read::Tables(count) => {
                format!(" (its {count} changed cluster table(s); the rest as last read, unchanged)")
            }
        }
    }
}

impl Coordinator {
    /// Gives the coordinator the outline of the config text the boot read, and
    /// says whether the running state is that text's file state (the boot
    /// used the config's declarations): then the first reload reads only
    /// the cluster tables that changed.
    pub fn know_config_text(&mut self, outline: Option<Outline>, running_is_file: bool) {
        self.last_text = LastText {
            outline,
            running_in: running_is_file.then_some(self.generation),
            pending: None,
        };
    }

    /// Checks a reload's `text` and diffs the state it declares (merged
    /// with the route sources) against the running state, which it leaves
    /// as it is. `Err` holds every problem of the text.
    pub(crate) fn reread(&mut self, text: &str) -> Result<Reread, Vec<ConfigProblem>> {
        if self.sources.merges() {
            let last = self.last_text.outline.as_ref().zip(self.sources.base());
            let file = reread::file_state(text, last)?;
            self.last_text.pending = Some(ReadText {
                outline: file.outline,
            });
            let desired = self.sources.with_file(file.state);
            return Ok(Reread {
                warnings: file.warnings,
                changes: diff(&self.state, &desired),
                read: file.read,
            });
        }
        let last = self.last_text.for_running(self.generation);
        let reread = reread::changes(text, last, &mut self.state)?;
        self.last_text.pending = Some(ReadText {
            outline: reread.outline,
        });
        self.sources.with_file_routes(reread.routes);
        Ok(Reread {
            warnings: reread.warnings,
            changes: reread.changes,
            read: reread.read,
        })
    }
}
