//! How each direction of a piped session moves its bytes: copying through a
//! pooled buffer, splicing through a kernel pipe, or draining a refused
//! splice's pipe before it copies.
//!
//! Owns: [`Lane`] and [`Lanes`], the per-direction state a session carries
//! into the pipe, and the fallbacks not yet counted. Must never: lose a
//! kernel pipe (each goes back to the pool, or is closed, through
//! [`Lanes::into_pipes`]).

use super::splice::SplicePipe;

/// How one direction of the pipe moves its bytes.
#[derive(Debug, Default)]
pub enum Lane {
    /// Read into the direction's pooled buffer, written from it.
    #[default]
    Copy,
    /// Through a kernel pipe with `splice(2)`, no pooled buffer needed.
    /// Userspace bytes queued before (the PROXY prefix, the inherited
    /// window) go out first: nothing is spliced while one remains.
    Splice(SplicePipe),
    /// `splice` was refused (`EINVAL`/`ENOSYS`): the bytes left in the
    /// kernel pipe are read into the pooled buffer, then the direction
    /// copies ([`Lane::Copy`]).
    Unsplice(SplicePipe),
}

impl Lane {
    /// Bytes in this direction's kernel pipe.
    pub fn pending(&self) -> usize {
        match self {
            Lane::Copy => 0,
            Lane::Splice(pipe) | Lane::Unsplice(pipe) => pipe.pending(),
        }
    }

    /// Whether the direction currently splices.
    pub fn is_spliced(&self) -> bool {
        matches!(self, Lane::Splice(_))
    }

    /// Whether the direction needs a pooled buffer to move bytes.
    pub fn wants_buffer(&self) -> bool {
        !self.is_spliced()
    }
}

/// The two directions of a piped session.
#[derive(Debug, Default)]
pub struct Lanes {
    /// Client to backend.
    pub up: Lane,
    /// Backend to client.
    pub down: Lane,
    /// Directions that fell back from splice to copy and were not yet
    /// reported ([`Lanes::take_fallbacks`]).
    fallbacks: u32,
}

impl Lanes {
    /// One direction fell back from splice to copy.
    pub fn note_fallback(&mut self) {
        self.fallbacks += 1;
    }

    /// Directions that fell back from splice to copy since the last call.
    pub fn take_fallbacks(&mut self) -> u32 {
        std::mem::take(&mut self.fallbacks)
    }

    /// The kernel pipes of both directions, for the worker's pool once the
    /// session is over.
    pub fn into_pipes(self) -> impl Iterator<Item = SplicePipe> {
        [self.up, self.down]
            .into_iter()
            .filter_map(|lane| match lane {
                Lane::Copy => None,
                Lane::Splice(pipe) | Lane::Unsplice(pipe) => Some(pipe),
            })
    }
}
