//! The Initial CRYPTO stream, put back together from frames that arrive
//! out of order, overlapping, duplicated or with gaps (Chromium shuffles
//! them and spreads a large hello over several packets).
//!
//! Owns: [`CryptoStream`]: the bytes by offset, the received ranges, the
//! caller's cap (no byte past it is kept), a bound on the number of
//! separate pieces, and the rule that bytes sent twice must agree. Must
//! never: grow past the cap, or let a later copy of a byte change it (the
//! proxy must read the hello the server will read, RFC 9000 §2.2).

use core::ops::Range;

use super::error::CryptoFault;

/// How many separate pieces the stream keeps track of: a hello split into
/// more disjoint pieces than this at once is not a client's.
pub const MAX_PIECES: usize = 32;

/// One flow's Initial CRYPTO stream.
#[derive(Debug, Clone, Default)]
pub struct CryptoStream {
    /// The stream's bytes from offset 0; gaps hold zeros.
    buf: Vec<u8>,
    /// The received ranges: sorted, disjoint and not touching.
    ranges: Vec<Range<usize>>,
    cap: usize,
}

impl CryptoStream {
    /// An empty stream that keeps no byte at or past offset `cap`.
    pub fn new(cap: usize) -> Self {
        Self {
            buf: Vec::new(),
            ranges: Vec::new(),
            cap,
        }
    }

    /// Adds `data` at `offset`.
    pub fn insert(&mut self, offset: u64, data: &[u8]) -> Result<(), CryptoFault> {
        let end = offset.saturating_add(data.len() as u64);
        let beyond = CryptoFault::BeyondCap { end, cap: self.cap };
        let (Ok(start), Ok(end)) = (usize::try_from(offset), usize::try_from(end)) else {
            return Err(beyond);
        };
        if end > self.cap {
            return Err(beyond);
        }
        if data.is_empty() {
            return Ok(());
        }
        for range in &self.ranges {
            let (from, to) = (range.start.max(start), range.end.min(end));
            if from < to && self.buf[from..to] != data[from - start..to - start] {
                return Err(CryptoFault::Conflicting(from as u64));
            }
        }
        if self.buf.len() < end {
            self.buf.resize(end, 0);
        }
        self.buf[start..end].copy_from_slice(data);
        self.merge(start..end);
        if self.ranges.len() > MAX_PIECES {
            return Err(CryptoFault::TooManyGaps(MAX_PIECES));
        }
        Ok(())
    }

    fn merge(&mut self, new: Range<usize>) {
        // The ranges that touch or overlap `new` are one run of the sorted list.
        let first = self.ranges.partition_point(|r| r.end < new.start);
        let last = self.ranges.partition_point(|r| r.start <= new.end);
        let merged = if first < last {
            self.ranges[first].start.min(new.start)..self.ranges[last - 1].end.max(new.end)
        } else {
            new
        };
        self.ranges.splice(first..last, [merged]);
    }

    /// The bytes received without a gap from offset 0.
    pub fn contiguous(&self) -> &[u8] {
        match self.ranges.first() {
            Some(range) if range.start == 0 => &self.buf[..range.end],
            _ => &[],
        }
    }

    /// Bytes received, gaps not counted.
    pub fn received(&self) -> usize {
        self.ranges.iter().map(|r| r.end - r.start).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::{CryptoStream, MAX_PIECES};
    use crate::quic::error::CryptoFault;

    #[test]
    fn out_of_order_overlapping_and_duplicated() {
        let message: Vec<u8> = (0..100).collect();
        let mut stream = CryptoStream::new(100);
        assert_eq!(stream.insert(60, &message[60..]), Ok(()));
        assert_eq!(stream.contiguous(), &[] as &[u8]);
        assert_eq!(stream.insert(10, &message[10..30]), Ok(()));
        assert_eq!(stream.insert(20, &message[20..65]), Ok(()));
        assert_eq!(stream.insert(60, &message[60..]), Ok(()));
        assert_eq!(stream.received(), 90);
        assert_eq!(stream.insert(0, &message[..11]), Ok(()));
        assert_eq!(stream.contiguous(), &message[..]);
        assert_eq!(stream.insert(0, &[]), Ok(()));
    }

    #[test]
    fn the_cap_conflicts_and_pieces_are_bounded() {
        let mut stream = CryptoStream::new(50);
        assert_eq!(
            stream.insert(45, &[0; 6]),
            Err(CryptoFault::BeyondCap { end: 51, cap: 50 })
        );
        assert!(stream.insert(u64::MAX, &[1]).is_err());
        assert_eq!(stream.insert(0, &[1, 2, 3]), Ok(()));
        assert_eq!(stream.insert(2, &[4]), Err(CryptoFault::Conflicting(2)));
        let mut stream = CryptoStream::new(1000);
        for piece in 0..MAX_PIECES {
            assert_eq!(stream.insert(piece as u64 * 2, &[7]), Ok(()));
        }
        let over = stream.insert(MAX_PIECES as u64 * 2, &[7]);
        assert_eq!(over, Err(CryptoFault::TooManyGaps(MAX_PIECES)));
        // Filling the gaps joins the pieces into one.
        let mut stream = CryptoStream::new(1000);
        for piece in 0..MAX_PIECES {
            assert_eq!(stream.insert(piece as u64 * 2, &[7]), Ok(()));
        }
        assert_eq!(stream.insert(0, &[7; 64]), Ok(()));
        assert_eq!(stream.contiguous(), &[7; 64]);
    }
}
