//! The journal file, open for appends: what `automatic_state_save` writes
//! after every committed routing generation.
//!
//! Owns: [`Journal`]: creating an empty journal (atomically, so it is
//! never seen without its header), taking over the journal a boot read
//! (its torn tail cut off first), appending one record with `fdatasync`
//! before the caller acknowledges anything, and, once a snapshot holds the
//! first records, replacing the file by one holding only the later ones.
//!
//! Must never: acknowledge a record before it is synced; append after a
//! torn tail (the next boot would see damage before the end); or remove a
//! record a snapshot does not hold yet.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::files::write_atomically;
use super::journal::{HEADER, render_record};
use super::{JournalReplay, StateFileError};
use crate::proto;

/// The journal of a saved state, open for appends.
#[derive(Debug)]
pub struct Journal {
    path: PathBuf,
    file: File,
    /// Bytes of the header and the whole records: where the next record
    /// goes.
    len: u64,
    /// The sequence number of the last record, or of the snapshot when no
    /// record follows it.
    seq: u64,
}

fn open_append(path: &Path) -> Result<File, StateFileError> {
    OpenOptions::new()
        .append(true)
        .open(path)
        .map_err(|error| StateFileError::io(path, "open for append", error))
}

fn len_of(text: &str) -> u64 {
    u64::try_from(text.len()).unwrap_or(u64::MAX)
}

impl Journal {
    /// The length of a journal without records: its header line.
    pub const EMPTY_LEN: u64 = HEADER.len() as u64;

    /// Writes an empty journal at `path`, whose first record will be
    /// `seq + 1`, over whatever was there (atomically: a crash leaves the
    /// old file or the new one).
    ///
    /// # Errors
    ///
    /// [`StateFileError::Io`] naming the failed step.
    pub fn create(path: impl AsRef<Path>, seq: u64) -> Result<Self, StateFileError> {
        let path = path.as_ref();
        write_atomically(path, HEADER.as_bytes())?;
        Ok(Self {
            path: path.to_owned(),
            file: open_append(path)?,
            len: Self::EMPTY_LEN,
            seq,
        })
    }

    /// Takes over the journal that [`load_saved_state`](super::load_saved_state)
    /// read: its torn tail, if any, is cut off (and the cut synced) so that
    /// the next record follows the last whole one. A journal that did not
    /// exist is created empty.
    ///
    /// # Errors
    ///
    /// [`StateFileError::Io`] naming the failed step.
    pub fn resume(replay: &JournalReplay) -> Result<Self, StateFileError> {
        let Some(whole_len) = replay.whole_len else {
            return Self::create(&replay.path, replay.seq);
        };
        let path = replay.path.as_path();
        let file = open_append(path)?;
        if replay.torn.is_some() {
            file.set_len(whole_len)
                .and_then(|()| file.sync_data())
                .map_err(|error| StateFileError::io(path, "cut the torn tail", error))?;
        }
        Ok(Self {
            path: path.to_owned(),
            file,
            len: whole_len,
            seq: replay.seq,
        })
    }

    /// The sequence number of the last change the journal (with its
    /// snapshot) holds.
    #[must_use]
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// The journal's length in bytes.
    #[must_use]
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether it holds no record.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len == Self::EMPTY_LEN
    }

    /// The journal's path.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends `steps` as the next record and syncs it. Returns its
    /// sequence number. On failure the journal is cut back to where it
    /// was, as far as the system lets it.
    ///
    /// # Errors
    ///
    /// [`StateFileError::Io`] naming the failed step; the record then
    /// does not count, and the journal should not be appended to until a
    /// snapshot replaces it (the cut back may have failed too).
    pub fn append(&mut self, steps: &[proto::Request]) -> Result<u64, StateFileError> {
        let seq = self.seq.saturating_add(1);
        let record = render_record(seq, steps)?;
        let written = self
            .file
            .write_all(record.as_bytes())
            .map_err(|error| StateFileError::io(&self.path, "append", error))
            .and_then(|()| {
                self.file
                    .sync_data()
                    .map_err(|error| StateFileError::io(&self.path, "sync", error))
            });
        if let Err(error) = written {
            // Best effort: the error is what the caller must hear of.
            let _ = self.file.set_len(self.len);
            return Err(error);
        }
        self.len = self.len.saturating_add(len_of(&record));
        self.seq = seq;
        Ok(seq)
    }

    /// Replaces the journal by one holding only its records from byte
    /// `mark` on (those a snapshot written when the journal was `mark`
    /// bytes long does not hold), atomically.
    ///
    /// # Errors
    ///
    /// [`StateFileError::Io`] naming the failed step; the journal is then
    /// as it was.
    pub fn keep_from(&mut self, mark: u64) -> Result<(), StateFileError> {
        let mark = mark.clamp(Self::EMPTY_LEN, self.len);
        let kept = usize::try_from(self.len - mark).unwrap_or(usize::MAX);
        let mut text = HEADER.as_bytes().to_vec();
        let start = text.len();
        text.resize(start + kept, 0);
        File::open(&self.path)
            .and_then(|file| file.read_exact_at(&mut text[start..], mark))
            .map_err(|error| StateFileError::io(&self.path, "read", error))?;
        write_atomically(&self.path, &text)?;
        self.file = open_append(&self.path)?;
        self.len = u64::try_from(text.len()).unwrap_or(u64::MAX);
        Ok(())
    }
}
