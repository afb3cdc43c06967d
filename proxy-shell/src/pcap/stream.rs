//! One direction of a TCP connection, put back in order: the client's
//! bytes from its first, by sequence number.
//!
//! Owns: placing each segment's payload at its offset from the initial
//! sequence number (out of order, retransmitted, overlapping), keeping
//! the first copy of every byte, under a cap; and when the contiguous
//! prefix grew. Must never: keep a byte at or past the cap, hold more
//! than the bytes that came, or panic on any sequence number. Written here rather than taken from a crate: the
//! TCP reassemblers on crates.io drive a whole capture's connection state
//! and copy every stream whole, where this needs one direction's first
//! bytes under the listener's cap, and the first-copy rule the operator
//! is told about when two copies disagree.

use std::collections::BTreeMap;
use std::time::Duration;

/// How far past the expected sequence number a segment may start and
/// still be read: a segment "before" the start (older data, a wrapped
/// number) is far in the other half of the sequence space.
const HALF_SPACE: u32 = 1 << 31;

/// When the contiguous prefix grew, and to what length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arrival {
    /// The contiguous prefix's length after this arrival.
    pub len: usize,
    /// When it arrived, from the Unix epoch.
    pub at: Duration,
}

/// The client's stream of one TCP connection.
#[derive(Debug, Clone)]
pub(crate) struct Stream {
    /// The sequence number of the stream's first byte.
    start: u32,
    cap: usize,
    /// The bytes received, by offset: disjoint runs, none touching the
    /// next. Only bytes that came are held, so a capture of scattered
    /// segments costs what it carries, not the cap per connection.
    runs: BTreeMap<usize, Vec<u8>>,
    arrivals: Vec<Arrival>,
    /// Bytes came at or past the cap (and were not kept): with a prefix
    /// short of the cap, the capture misses bytes before them.
    past_cap: bool,
    /// Two copies of a byte differed (the first was kept).
    pub conflicting: bool,
}

impl Stream {
    /// A stream whose first byte has sequence number `start`.
    pub(crate) fn new(start: u32, cap: usize) -> Self {
        Self {
            start,
            cap,
            runs: BTreeMap::new(),
            arrivals: Vec::new(),
            past_cap: false,
            conflicting: false,
        }
    }

    /// Places a segment's payload whose first byte has sequence number `seq`.
    pub(crate) fn segment(&mut self, seq: u32, payload: &[u8], at: Duration) {
        let offset = seq.wrapping_sub(self.start);
        let (payload, offset) = if offset >= HALF_SPACE {
            // Starts before the stream: keep what lies past its start.
            let before = self.start.wrapping_sub(seq) as usize;
            match payload.get(before..) {
                Some(rest) => (rest, 0),
                None => return,
            }
        } else {
            (payload, offset as usize)
        };
        let room = self.cap.saturating_sub(offset);
        self.past_cap |= payload.len() > room;
        let payload = &payload[..payload.len().min(room)];
        if payload.is_empty() {
            return;
        }
        let end = offset + payload.len();
        let before = self.prefix();
        self.conflicting |= self.differs(offset, payload);
        // The runs that overlap or touch the segment, merged with it into
        // one run; where they overlap, their bytes (the first copy) stay.
        let touching: Vec<usize> = self
            .runs
            .range(..=end)
            .rev()
            .take_while(|&(&from, run)| from + run.len() >= offset)
            .map(|(&from, _)| from)
            .collect();
        let mut touching = touching.into_iter().rev().peekable();
        let (start, mut merged) = match touching.next_if(|&from| from <= offset) {
            Some(from) => (from, self.runs.remove(&from).unwrap_or_default()),
            None => (offset, Vec::new()),
        };
        for from in touching {
            let run = self.runs.remove(&from).unwrap_or_default();
            let filled = start + merged.len();
            merged.extend_from_slice(&payload[filled - offset..from - offset]);
            merged.extend_from_slice(&run);
        }
        let filled = start + merged.len();
        if filled < end {
            merged.extend_from_slice(&payload[filled - offset..]);
        }
        self.runs.insert(start, merged);
        let after = self.prefix();
        if after > before {
            self.arrivals.push(Arrival { len: after, at });
        }
    }

    /// Whether bytes already held differ from `payload` at `offset`.
    fn differs(&self, offset: usize, payload: &[u8]) -> bool {
        let end = offset + payload.len();
        self.runs
            .range(..end)
            .rev()
            .take_while(|&(&from, run)| from + run.len() > offset)
            .any(|(&from, run)| {
                let (low, high) = (from.max(offset), (from + run.len()).min(end));
                run[low - from..high - from] != payload[low - offset..high - offset]
            })
    }

    /// The length of the contiguous bytes from the stream's first.
    pub(crate) fn prefix(&self) -> usize {
        self.runs.get(&0).map_or(0, Vec::len)
    }

    /// Whether bytes arrived past a hole the capture never filled: held
    /// ones, or ones at or past the cap while the contiguous bytes stop
    /// short of it (whatever the cap, a client whose first bytes the
    /// capture missed is reported with its hole, never as silent).
    pub(crate) fn has_gap(&self) -> bool {
        self.runs.keys().any(|&from| from > 0) || (self.past_cap && self.prefix() < self.cap)
    }

    /// The contiguous bytes, and when each stretch of them arrived.
    pub(crate) fn into_parts(mut self) -> (Vec<u8>, Vec<Arrival>) {
        (self.runs.remove(&0).unwrap_or_default(), self.arrivals)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{Arrival, Stream};

    fn at(ms: u64) -> Duration {
        Duration::from_millis(ms)
    }

    #[test]
    fn out_of_order_retransmitted_and_overlapping_segments_fall_in_place() {
        let start = u32::MAX - 2;
        let mut stream = Stream::new(start, 100);
        stream.segment(start.wrapping_add(6), b"ghij", at(1));
        assert_eq!(stream.prefix(), 0);
        assert!(stream.has_gap());
        stream.segment(start, b"abcd", at(2));
        stream.segment(start, b"abcd", at(3));
        stream.segment(start.wrapping_add(3), b"def", at(4));
        assert!(!stream.has_gap());
        assert!(!stream.conflicting);
        // Older data overlapping the start: only its tail counts.
        stream.segment(start.wrapping_sub(2), b"..abcdefghijk", at(5));
        let (bytes, arrivals) = stream.into_parts();
        assert_eq!(bytes, b"abcdefghijk");
        assert_eq!(
            arrivals,
            vec![
                Arrival { len: 4, at: at(2) },
                Arrival { len: 10, at: at(4) },
                Arrival { len: 11, at: at(5) },
            ]
        );
    }

    #[test]
    fn the_first_copy_wins_and_the_cap_bounds_the_stream() {
        let mut stream = Stream::new(1000, 6);
        stream.segment(1000, b"abc", at(1));
        stream.segment(1001, b"XYZ", at(2));
        assert!(stream.conflicting);
        stream.segment(1004, b"efgh", at(3));
        stream.segment(2000, b"far", at(4));
        // The bytes reach the cap: what comes past it is no hole.
        assert!(!stream.has_gap());
        let (bytes, _) = stream.into_parts();
        assert_eq!(bytes, b"abcZef");
    }

    /// A client whose bytes the capture has only from past the cap sent
    /// something the capture missed before them: a hole, under any cap
    /// (found by the `pcap` fuzz target: under a small cap the flow was
    /// left out as silent, under a larger one it had a hole).
    #[test]
    fn bytes_only_past_the_cap_leave_a_hole() {
        for (cap, gap) in [(6, true), (5000, true)] {
            let mut stream = Stream::new(1000, cap);
            stream.segment(4000, b"late", at(1));
            assert_eq!(stream.has_gap(), gap, "cap {cap}");
            assert_eq!(stream.prefix(), 0);
        }
        let mut stream = Stream::new(1000, 6);
        stream.segment(1000, b"ab", at(1));
        stream.segment(1010, b"late", at(2));
        assert!(stream.has_gap(), "two bytes, then a hole up to the cap");
    }

    #[test]
    fn empty_and_stale_segments_change_nothing() {
        let mut stream = Stream::new(50, 10);
        stream.segment(50, b"", at(1));
        stream.segment(40, b"old", at(2));
        stream.segment(u32::MAX, b"x", at(3));
        assert_eq!(stream.prefix(), 0);
        assert!(!stream.has_gap());
    }

    #[test]
    fn scattered_segments_hold_only_their_bytes() {
        let mut stream = Stream::new(0, 1 << 20);
        for i in 0..1000_u32 {
            stream.segment(1 + i * 1000, b"x", at(1));
        }
        let held: usize = stream.runs.values().map(Vec::len).sum();
        assert_eq!(held, 1000);
        assert_eq!(stream.prefix(), 0);
        // The hole before them filled at once: one run, every byte once.
        let mut filler = vec![b'-'; 999_002];
        for i in 0..1000 {
            filler[1 + i * 1000] = b'x';
        }
        stream.segment(0, &filler, at(2));
        assert_eq!(stream.runs.len(), 1);
        assert_eq!(stream.prefix(), 999_002);
        assert!(!stream.conflicting);
    }
}
