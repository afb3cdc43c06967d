//! What can be wrong with a capture: the whole file ([`CaptureError`]) or
//! one flow of it ([`FlowNote`]).
//!
//! Owns: their messages, each telling the operator what to change, and
//! the notes' stable names in `inspect --pcap`'s JSON. Must never: print.

use core::fmt;

use super::walk::{Stop, Walked};

/// A file `inspect --pcap` cannot read at all.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CaptureError {
    /// Shorter than any capture's header.
    TooShort { len: usize },
    /// Neither pcap's magic nor pcapng's.
    NotACapture { magic: [u8; 4] },
    /// pcapng's magic, but its section header does not read.
    BadSectionHeader,
    /// A pcap file of a link type whose packets are not read.
    LinkType { link_type: i32 },
}

impl fmt::Display for CaptureError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TooShort { len } => write!(
                f,
                "{len} bytes is shorter than a capture file's header: give a file `tcpdump -w` or `dumpcap -w` wrote"
            ),
            Self::NotACapture { magic } => write!(
                f,
                "not a pcap or pcapng capture (it starts with {:02x}{:02x}{:02x}{:02x}): give a file `tcpdump -w` or `dumpcap -w` wrote; for a client's raw bytes leave out --pcap",
                magic[0], magic[1], magic[2], magic[3]
            ),
            Self::BadSectionHeader => f.write_str(
                "a pcapng file whose section header does not read: the file is damaged; `tshark -r FILE` says more",
            ),
            Self::LinkType { link_type } => write!(
                f,
                "link type {link_type} is not read (Ethernet, Linux cooked SLL and SLL2, raw IP and loopback are): capture on another interface, or `tcpdump -i any`"
            ),
        }
    }
}

impl core::error::Error for CaptureError {}

/// What an operator should know about one flow's reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FlowNote {
    /// The capture starts after the connection's SYN: its client stream
    /// is read from the first segment captured, which may be mid-stream.
    NoSyn,
    /// Client bytes are missing from the capture: what follows the hole
    /// is not read.
    Gap,
    /// Two copies of the same client bytes differ: the first is read, as
    /// a receiver keeps the bytes it already has.
    Conflicting,
    /// The snap length cut a packet of the flow.
    SnapLength,
}

impl FlowNote {
    /// The note's name in the JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NoSyn => "no_syn",
            Self::Gap => "gap",
            Self::Conflicting => "conflicting_overlap",
            Self::SnapLength => "snap_length",
        }
    }
}

impl fmt::Display for FlowNote {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::NoSyn => {
                "the capture starts after the SYN: the client's bytes are read from the first segment captured"
            }
            Self::Gap => {
                "client bytes are missing from the capture (dropped by the capture, not the network): the bytes after the hole are not read"
            }
            Self::Conflicting => {
                "two copies of the same client bytes differ: the first is read"
            }
            Self::SnapLength => {
                "the snap length cut a packet of this flow: capture with `tcpdump -s 0`"
            }
        })
    }
}

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
