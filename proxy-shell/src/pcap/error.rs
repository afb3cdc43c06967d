//! What can be wrong with a capture: the whole file ([`CaptureError`]) or
//! one flow of it ([`FlowNote`]). The notes on a readable file are
//! `notes`'.
//!
//! Owns: their messages, each telling the operator what to change, and
//! the notes' stable names in `inspect --pcap`'s JSON. Must never: print.

use core::fmt;

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
