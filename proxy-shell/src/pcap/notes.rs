//! What the walk of a readable capture skipped, or where it stopped
//! ([`CaptureNote`]), for the operator.
//!
//! Owns: the notes' messages, each saying what was left out and how to
//! capture it. Must never: print, or refuse a file (a capture it cannot
//! read at all is a `CaptureError`).

use core::fmt;

use super::walk::{Stop, Walked};

/// What the walk of a readable capture skipped, or where it stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CaptureNote {
    /// The walk stopped at a record it could not read.
    Stopped(Stop),
    /// Records on interfaces of link types that are not read.
    LinkTypes {
        records: usize,
        link_types: Vec<i32>,
    },
    /// IP fragments, which are not reassembled.
    Fragments(usize),
    /// Packets whose headers the snap length cut.
    HeadersCut(usize),
    /// No TCP client byte and no QUIC client Initial in the whole file.
    NoFlight { records: usize },
}

impl fmt::Display for CaptureNote {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Stopped(Stop {
                offset,
                packets,
                past_end: true,
            }) => write!(
                f,
                "the record at byte {offset} runs past the end of the file (a capture cut short, or a damaged length): the {packets} packet(s) before it are reported"
            ),
            Self::Stopped(Stop {
                offset, packets, ..
            }) => write!(
                f,
                "the record at byte {offset} does not read (a damaged file): the {packets} packet(s) before it are reported"
            ),
            Self::LinkTypes {
                records,
                link_types,
            } => write!(
                f,
                "{records} record(s) skipped on interfaces of link type(s) {link_types:?} (Ethernet, Linux cooked SLL and SLL2, raw IP and loopback are read)"
            ),
            Self::Fragments(n) => write!(f, "{n} IP fragment(s) skipped (not reassembled)"),
            Self::HeadersCut(n) => write!(
                f,
                "{n} packet(s) skipped: the snap length cut their headers (capture with `tcpdump -s 0`)"
            ),
            Self::NoFlight { records } => write!(
                f,
                "no TCP client byte and no QUIC client Initial in {records} record(s)"
            ),
        }
    }
}

/// The notes of a capture's walk that found `flows` flights.
pub fn capture_notes(walked: &Walked, flows: usize) -> Vec<CaptureNote> {
    let mut notes = Vec::new();
    if let Some(stop) = walked.stop {
        notes.push(CaptureNote::Stopped(stop));
    }
    let skipped = walked.skipped;
    if skipped.link_type > 0 {
        notes.push(CaptureNote::LinkTypes {
            records: skipped.link_type,
            link_types: walked.unknown_link_types.clone(),
        });
    }
    if skipped.fragments > 0 {
        notes.push(CaptureNote::Fragments(skipped.fragments));
    }
    if skipped.headers_cut > 0 {
        notes.push(CaptureNote::HeadersCut(skipped.headers_cut));
    }
    if flows == 0 {
        notes.push(CaptureNote::NoFlight {
            records: walked.records,
        });
    }
    notes
}
