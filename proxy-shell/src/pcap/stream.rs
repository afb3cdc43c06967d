//! One direction of a TCP connection, put back in order: the client's
//! bytes from its first, by sequence number.
//!
//! Owns: placing each segment's payload at its offset from the initial
//! sequence number (out of order, retransmitted, overlapping), keeping
//! the first copy of every byte, under a cap; and when the contiguous
//! prefix grew. Must never: keep a byte at or past the cap, or panic on
//! any sequence number. Written here rather than taken from a crate: the
//! TCP reassemblers on crates.io drive a whole capture's connection state
//! and copy every stream whole, where this needs one direction's first
//! bytes under the listener's cap, and the first-copy rule the operator
//! is told about when two copies disagree.

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
    bytes: Vec<u8>,
    /// The ranges of `bytes` filled, sorted and disjoint.
    filled: Vec<(usize, usize)>,
    arrivals: Vec<Arrival>,
    /// Two copies of a byte differed (the first was kept).
    pub conflicting: bool,
    /// Bytes that fell at or past the cap.
    pub beyond_cap: bool,
}

impl Stream {
    /// A stream whose first byte has sequence number `start`.
    pub(crate) fn new(start: u32, cap: usize) -> Self {
        Self {
            start,
            cap,
            bytes: Vec::new(),
            filled: Vec::new(),
            arrivals: Vec::new(),
            conflicting: false,
            beyond_cap: false,
        }
    }

    /// Places a segment's payload whose first byte has sequence number `seq`.
    pub(crate) fn segment(&mut self, seq: u32, payload: &[u8], at: Duration) {
        let offset = seq.wrapping_sub(self.start);
        let (mut payload, offset) = if offset >= HALF_SPACE {
            // Starts before the stream: keep what lies past its start.
            let before = self.start.wrapping_sub(seq) as usize;
            match payload.get(before..) {
                Some(rest) if !rest.is_empty() => (rest, 0),
                _ => return,
            }
        } else {
            (payload, offset as usize)
        };
        if offset >= self.cap {
            self.beyond_cap |= !payload.is_empty();
            return;
        }
        if payload.len() > self.cap - offset {
            payload = &payload[..self.cap - offset];
            self.beyond_cap = true;
        }
        if payload.is_empty() {
            return;
        }
        let end = offset + payload.len();
        if self.bytes.len() < end {
            self.bytes.resize(end, 0);
        }
        let before = self.prefix();
        let mut at_byte = offset;
        for (from, to) in self.gaps(offset, end) {
            if self.bytes[at_byte..from] != payload[at_byte - offset..from - offset] {
                self.conflicting = true;
            }
            self.bytes[from..to].copy_from_slice(&payload[from - offset..to - offset]);
            at_byte = to;
        }
        if self.bytes[at_byte..end] != payload[at_byte - offset..] {
            self.conflicting = true;
        }
        self.fill(offset, end);
        let after = self.prefix();
        if after > before {
            self.arrivals.push(Arrival { len: after, at });
        }
    }

    /// The ranges within `start..end` not filled yet, in order.
    fn gaps(&self, start: usize, end: usize) -> Vec<(usize, usize)> {
        let mut gaps = Vec::new();
        let mut at = start;
        for &(from, to) in &self.filled {
            if to <= at {
                continue;
            }
            if from >= end {
                break;
            }
            if from > at {
                gaps.push((at, from));
            }
            at = at.max(to);
        }
        if at < end {
            gaps.push((at, end));
        }
        gaps
    }

    fn fill(&mut self, start: usize, end: usize) {
        let mut merged = (start, end);
        self.filled.retain(|&(from, to)| {
            let touches = from <= merged.1 && to >= merged.0;
            if touches {
                merged = (merged.0.min(from), merged.1.max(to));
            }
            !touches
        });
        let at = self.filled.partition_point(|&(from, _)| from < merged.0);
        self.filled.insert(at, merged);
    }

    /// The length of the contiguous bytes from the stream's first.
    pub(crate) fn prefix(&self) -> usize {
        match self.filled.first() {
            Some(&(0, end)) => end,
            _ => 0,
        }
    }

    /// Whether bytes arrived past a hole the capture never filled.
    pub(crate) fn has_gap(&self) -> bool {
        self.filled.iter().any(|&(from, _)| from > 0)
    }

    /// The contiguous bytes, and when each stretch of them arrived.
    pub(crate) fn into_parts(mut self) -> (Vec<u8>, Vec<Arrival>) {
        self.bytes.truncate(self.prefix());
        (self.bytes, self.arrivals)
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
        assert!(stream.beyond_cap);
        stream.segment(2000, b"far", at(4));
        let (bytes, _) = stream.into_parts();
        assert_eq!(bytes, b"abcZef");
    }

    #[test]
    fn empty_and_stale_segments_change_nothing() {
        let mut stream = Stream::new(50, 10);
        stream.segment(50, b"", at(1));
        stream.segment(40, b"old", at(2));
        stream.segment(u32::MAX, b"x", at(3));
        assert_eq!(stream.prefix(), 0);
        assert!(!stream.has_gap());
        assert!(!stream.beyond_cap);
    }
}
