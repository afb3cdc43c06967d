//! GREASE (RFC 8701) values in a list of u16, four at a time: the count
//! of those that are not GREASE (the `a` section's cipher count) and the
//! list's words with each GREASE value written as `0a0a` (the cache's
//! key).
//!
//! Owns: the word-at-a-time test. Why not per value: on the decision path
//! these two passes are most of what a `deny_ja4` list costs a hello, and
//! one branch-free word per four values is a few times cheaper than
//! decoding and testing each (measured on the ja4 bench).
//!
//! Must never: disagree with [`super::is_grease`] on any value (tested on
//! all 65,536 in every lane).

/// Bit 8 of each 16-bit lane of `word` (two bytes of the list, as loaded
/// little-endian) set when the lane is a GREASE value: both bytes equal,
/// their low nibble `a`.
fn grease_lanes(word: u64) -> u64 {
    const LOW_BYTES: u64 = 0x00ff_00ff_00ff_00ff;
    const NIBBLE_A: u64 = 0x000a_000a_000a_000a;
    // In each lane's low byte: first byte ^ second, and low nibble ^ a;
    // both zero only for GREASE. A lane's low byte plus 0xff carries into
    // bit 8 exactly when it is not zero, and never into the next lane.
    let differs = (word ^ (word >> 8)) & LOW_BYTES;
    let not_a = (word & 0x000f_000f_000f_000f) ^ NIBBLE_A;
    let carried = ((differs | not_a) + LOW_BYTES) & 0x0100_0100_0100_0100;
    carried ^ 0x0100_0100_0100_0100
}

fn words(list: &[u8]) -> (impl Iterator<Item = u64> + '_, &[u8]) {
    let chunks = list.chunks_exact(8);
    let tail = chunks.remainder();
    let words = chunks.filter_map(|chunk| chunk.first_chunk::<8>().map(|w| u64::from_le_bytes(*w)));
    (words, tail)
}

/// How many u16 of `list` are not GREASE (a trailing odd byte is none).
pub(super) fn count_non_grease(list: &[u8]) -> usize {
    let (words, tail) = words(list);
    // The lanes' bits (8, 24, 40, 56) summed into the top 16 bits by one
    // multiply: a bit count without POPCNT is a dozen operations.
    let grease: u64 = words
        .map(|word| (grease_lanes(word) >> 8).wrapping_mul(0x0001_0001_0001_0001) >> 48)
        .sum();
    let tail_grease = super::u16_pairs(tail)
        .filter(|&v| super::is_grease(v))
        .count();
    list.len() / 2 - grease as usize - tail_grease
}

/// `word` (four values) with each GREASE value as `0a0a`, branch-free.
pub(super) fn grease_as_one(word: u64) -> u64 {
    let lanes = (grease_lanes(word) >> 8) * 0xffff;
    (word & !lanes) | (0x0a0a_0a0a_0a0a_0a0a & lanes)
}

/// Whether one of the four values of `word` is GREASE.
pub(super) fn has_grease(word: u64) -> bool {
    grease_lanes(word) != 0
}

/// The bytes of `list` past its last whole word (fewer than 8) as a
/// word padded with zero bytes; `None` when there are none. A pair the
/// padding completes is never GREASE (a zero byte's low nibble is not
/// `a`); the list's length, kept beside the words, tells an odd byte from
/// an even one. Loaded as the list's last 8 bytes, shifted: a copy into a
/// zeroed buffer would stall the load that reads it back.
pub(super) fn tail_word(list: &[u8]) -> Option<u64> {
    let tail = list.len() % 8;
    if tail == 0 {
        return None;
    }
    Some(match list.last_chunk::<8>() {
        Some(last) => u64::from_le_bytes(*last) >> ((8 - tail) * 8),
        None => list
            .iter()
            .rev()
            .fold(0, |word, &byte| word << 8 | u64::from(byte)),
    })
}

/// `list` as the cache keeps it: its whole words, then its last bytes
/// padded ([`tail_word`]), as loaded (little-endian), GREASE untouched.
pub(super) fn list_words(list: &[u8]) -> impl Iterator<Item = u64> + '_ {
    let (words, _) = words(list);
    words.chain(tail_word(list))
}

#[cfg(test)]
mod tests {
    use super::{count_non_grease, grease_as_one, has_grease, list_words};
    use crate::tls::ja4::is_grease;

    /// `list`'s words as the cache stores them, GREASE as `0a0a`.
    fn normalized(list: &[u8]) -> Vec<u64> {
        list_words(list).map(grease_as_one).collect()
    }

    /// The words of `list` built a value at a time, the reference.
    fn expected_words(list: &[u8]) -> Vec<u64> {
        list.chunks(8)
            .map(|chunk| {
                let mut word = [0u8; 8];
                word[..chunk.len()].copy_from_slice(chunk);
                for pair in word[..chunk.len()].chunks_exact_mut(2) {
                    if is_grease(u16::from_be_bytes([pair[0], pair[1]])) {
                        pair.copy_from_slice(&[0x0a, 0x0a]);
                    }
                }
                u64::from_le_bytes(word)
            })
            .collect()
    }

    /// Every u16 in every lane of a word and in the tail, beside values
    /// that are GREASE and values that nearly are.
    #[test]
    fn agrees_with_the_per_value_test_on_every_value() {
        let neighbours = [0x0a0a, 0x1a0a, 0x0a1a, 0x0b0b, 0xfafa, 0x2a2a, 0x0000];
        for value in 0..=u16::MAX {
            for at in 0..5 {
                let mut list: Vec<u16> = neighbours.to_vec();
                list.insert(at, value);
                let bytes: Vec<u8> = list.iter().flat_map(|v| v.to_be_bytes()).collect();
                let expected = list.iter().filter(|&&v| !is_grease(v)).count();
                assert_eq!(count_non_grease(&bytes), expected, "{value:#06x} at {at}");
                assert_eq!(
                    normalized(&bytes),
                    expected_words(&bytes),
                    "{value:#06x} at {at}"
                );
                let flagged: Vec<bool> = list_words(&bytes).map(has_grease).collect();
                let want: Vec<bool> = list
                    .chunks(4)
                    .map(|four| four.iter().any(|&v| is_grease(v)))
                    .collect();
                assert_eq!(flagged, want, "{value:#06x} at {at}");
            }
        }
    }

    #[test]
    fn an_odd_byte_at_the_end_is_kept_and_not_counted() {
        assert_eq!(normalized(&[0x1a, 0x1a, 0x2a]), [0x2a_0a0a]);
        assert_ne!(
            normalized(&[0x1a, 0x1a, 0x2a]),
            normalized(&[0x1a, 0x1a, 0x2b])
        );
        assert_eq!(count_non_grease(&[0x13, 0x01, 0x2a]), 1);
    }

    /// One byte changed anywhere in a list of any length up to 3 words
    /// makes other words; the padding never makes a GREASE pair.
    #[test]
    fn every_byte_of_every_length_counts() {
        for len in 0..24 {
            let list: Vec<u8> = (0..len as u8).map(|i| 0x31 + i).collect();
            assert_eq!(normalized(&list), expected_words(&list));
            assert!(!list_words(&list).any(has_grease), "{len}");
            for at in 0..len {
                let mut other = list.clone();
                other[at] ^= 0x40;
                assert_ne!(normalized(&other), normalized(&list), "{len} {at}");
            }
        }
        for byte in 0..=u8::MAX {
            assert_eq!(normalized(&[byte]), [u64::from(byte)]);
            assert!(!list_words(&[byte]).any(has_grease));
        }
    }
}
