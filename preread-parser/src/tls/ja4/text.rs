//! The text of a fingerprint's lists and their hashes: comma-separated
//! four-digit hex written to SHA-256 (through a fixed buffer) or to a
//! formatter, and the sorted u16 lists it is written from.
//!
//! Owns: [`Sink`] and its two ends, [`hash12`] (the `b` and `c` sections'
//! 12 hex digits), [`SortedU16`]. Must never: allocate for a list of up to
//! [`SORT_ON_STACK`] values, or write a byte that is not ASCII.

use core::fmt;

use ring::digest;

use super::{HASH_HEX_LEN, HEX};

/// How many ciphers (and, separately, extensions) are sorted on the stack.
/// Browsers offer 15 to 20 of each; a longer list is sorted on the heap.
const SORT_ON_STACK: usize = 128;

/// What a section hashes to when its list is empty: the spec's mark.
const NO_VALUES: &[u8; HASH_HEX_LEN] = b"000000000000";

/// Where a list's text goes: the hash or a formatter.
pub(super) trait Sink {
    fn put(&mut self, bytes: &[u8]);
}

/// Writes `values` as comma-separated four-digit lower-case hex.
pub(super) fn write_list(sink: &mut impl Sink, values: impl Iterator<Item = u16>) {
    for (i, value) in values.enumerate() {
        let [hi, lo] = value.to_be_bytes();
        let item = [
            b',',
            HEX[usize::from(hi >> 4)],
            HEX[usize::from(hi & 0x0f)],
            HEX[usize::from(lo >> 4)],
            HEX[usize::from(lo & 0x0f)],
        ];
        sink.put(if i == 0 { &item[1..] } else { &item });
    }
}

/// Feeds SHA-256 through a buffer, so that a list is a few `update` calls,
/// not one per item.
pub(super) struct HashSink {
    context: digest::Context,
    buffer: [u8; 256],
    len: usize,
    total: usize,
}

impl Sink for HashSink {
    fn put(&mut self, bytes: &[u8]) {
        self.total += bytes.len();
        if self.len + bytes.len() > self.buffer.len() {
            self.context.update(&self.buffer[..self.len]);
            self.len = 0;
        }
        match self.buffer.get_mut(self.len..self.len + bytes.len()) {
            Some(room) => {
                room.copy_from_slice(bytes);
                self.len += bytes.len();
            }
            None => self.context.update(bytes),
        }
    }
}

/// The first 12 hex digits of the SHA-256 of what `write` puts, or
/// `000000000000` when it puts nothing (the spec's mark for an empty list).
pub(super) fn hash12(write: impl FnOnce(&mut HashSink)) -> [u8; HASH_HEX_LEN] {
    let mut sink = HashSink {
        context: digest::Context::new(&digest::SHA256),
        buffer: [0; 256],
        len: 0,
        total: 0,
    };
    write(&mut sink);
    if sink.total == 0 {
        return *NO_VALUES;
    }
    sink.context.update(&sink.buffer[..sink.len]);
    let digest = sink.context.finish();
    let mut hex = [0; HASH_HEX_LEN];
    for (pair, byte) in hex.chunks_exact_mut(2).zip(digest.as_ref()) {
        pair[0] = HEX[usize::from(byte >> 4)];
        pair[1] = HEX[usize::from(byte & 0x0f)];
    }
    hex
}

pub(super) struct FmtSink<'f, 'g> {
    pub(super) f: &'f mut fmt::Formatter<'g>,
    pub(super) result: fmt::Result,
}

impl Sink for FmtSink<'_, '_> {
    fn put(&mut self, bytes: &[u8]) {
        if self.result.is_ok() {
            // Every byte written is ASCII from the tables above.
            self.result = self
                .f
                .write_str(core::str::from_utf8(bytes).unwrap_or_default());
        }
    }
}

/// A list of u16 gathered in a stack array and sorted once, in place, by
/// [`Self::finish`] (`sort_unstable` sorts short slices with a network;
/// an insertion at every push, measured, cost a fifth of the
/// fingerprint). Past [`SORT_ON_STACK`] values it moves to the heap.
pub(super) struct SortedU16 {
    stack: [u16; SORT_ON_STACK],
    len: usize,
    heap: Vec<u16>,
}

impl SortedU16 {
    pub(super) fn new() -> Self {
        Self {
            stack: [0; SORT_ON_STACK],
            len: 0,
            heap: Vec::new(),
        }
    }

    pub(super) fn insert(&mut self, value: u16) {
        if self.len == SORT_ON_STACK {
            if self.heap.is_empty() {
                self.heap.extend_from_slice(&self.stack);
            }
            self.heap.push(value);
            return;
        }
        self.stack[self.len] = value;
        self.len += 1;
    }

    pub(super) fn finish(&mut self) {
        if self.heap.is_empty() {
            self.stack[..self.len].sort_unstable();
        } else {
            self.heap.sort_unstable();
        }
    }

    pub(super) fn as_slice(&self) -> &[u16] {
        if self.heap.is_empty() {
            &self.stack[..self.len]
        } else {
            &self.heap
        }
    }
}
