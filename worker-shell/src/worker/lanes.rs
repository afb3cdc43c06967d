//! How each direction of a piped session moves its bytes: copying through a
//! pooled buffer, copying its first bytes until splicing pays, splicing
//! through a kernel pipe, or draining a refused splice's pipe before it
//! copies.
//!
//! Owns: [`Lane`], how one direction of the pipe moves its bytes, how it
//! starts ([`Lane::opening`]) and when it has moved enough to splice
//! ([`Lane::wants_pipe`], HAProxy's `splice-auto` rule). Must never: lose
//! a kernel pipe (each goes back to the pool, or is closed, through
//! [`Lane::into_pipe`]), or ask for a pipe for a direction that is not
//! warming up.

use super::splice::SplicePipe;

/// How one direction of the pipe moves its bytes.
#[derive(Debug, Default)]
pub enum Lane {
    /// Read into the direction's pooled buffer, written from it.
    #[default]
    Copy,
    /// Copies like [`Lane::Copy`] while it counts what it read: a short
    /// exchange never pays for a pipe (its `splice` calls, the `FIONREAD`
    /// check when the pipe goes back to the pool). It takes one from
    /// the pool once [`Lane::wants_pipe`] says so.
    Warm {
        /// Bytes read from the source so far.
        read: u64,
        /// A read filled the direction's buffer: a bulk transfer.
        filled: bool,
    },
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
    /// How a direction starts, once the backend is connected: with
    /// `splice`, warming up (copying until it has moved enough to splice);
    /// else copying for good.
    pub fn opening(splice: bool) -> Self {
        if splice {
            Lane::Warm {
                read: 0,
                filled: false,
            }
        } else {
            Lane::Copy
        }
    }

    /// The direction's kernel pipe, for the worker's pool once the session
    /// is over.
    pub fn into_pipe(self) -> Option<SplicePipe> {
        match self {
            Lane::Copy | Lane::Warm { .. } => None,
            Lane::Splice(pipe) | Lane::Unsplice(pipe) => Some(pipe),
        }
    }

    /// Bytes in this direction's kernel pipe.
    pub fn pending(&self) -> usize {
        match self {
            Lane::Copy | Lane::Warm { .. } => 0,
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

    /// Whether a warming direction should splice from now on: it read at
    /// least `threshold` bytes, or one read filled its buffer.
    pub fn wants_pipe(&self, threshold: u64) -> bool {
        match self {
            Lane::Warm { read, filled } => *filled || *read >= threshold,
            Lane::Copy | Lane::Splice(_) | Lane::Unsplice(_) => false,
        }
    }

    /// Counts a copying read of `n` bytes that left the buffer `full`.
    pub fn note_read(&mut self, n: usize, full: bool) {
        if let Lane::Warm { read, filled } = self {
            *read = read.saturating_add(n as u64);
            *filled |= full;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Lane;

    #[test]
    fn a_warm_lane_wants_a_pipe_past_the_threshold_or_once_its_buffer_filled() {
        let mut lane = Lane::Warm {
            read: 0,
            filled: false,
        };
        assert!(lane.wants_pipe(0), "threshold 0 splices at once");
        assert!(!lane.wants_pipe(65_536));
        lane.note_read(65_535, false);
        assert!(!lane.wants_pipe(65_536));
        lane.note_read(1, false);
        assert!(lane.wants_pipe(65_536));
        let mut bulk = Lane::Warm {
            read: 0,
            filled: false,
        };
        bulk.note_read(16_384, true);
        assert!(
            bulk.wants_pipe(u64::MAX),
            "a full buffer is a bulk transfer"
        );
    }

    #[test]
    fn only_a_warm_lane_wants_a_pipe() {
        let mut copy = Lane::Copy;
        copy.note_read(1 << 20, true);
        assert!(!copy.wants_pipe(0));
        assert!(copy.wants_buffer() && !copy.is_spliced());
    }
}
