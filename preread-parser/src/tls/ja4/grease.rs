//! GREASE (RFC 8701) values in a list of u16, four at a time: the count
//! of those that are not GREASE (the `a` section's cipher count) and the
//! list with each GREASE value written as `0a0a` (the cache's key).
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
    let grease: u32 = words.map(|word| grease_lanes(word).count_ones()).sum();
    let tail_grease = super::u16_pairs(tail)
        .filter(|&v| super::is_grease(v))
        .count();
    list.len() / 2 - grease as usize - tail_grease
}

/// Copies `list` into `out` (as long), each GREASE value as `0a0a`.
pub(super) fn copy_grease_as_one(list: &[u8], out: &mut [u8]) {
    for (to, from) in out.chunks_exact_mut(8).zip(list.chunks_exact(8)) {
        if let Some(word) = from.first_chunk::<8>() {
            let word = u64::from_le_bytes(*word);
            let lanes = (grease_lanes(word) >> 8) * 0xffff;
            let word = (word & !lanes) | (0x0a0a_0a0a_0a0a_0a0a & lanes);
            to.copy_from_slice(&word.to_le_bytes());
        }
    }
    let done = list.len() / 8 * 8;
    for (to, from) in out[done..].chunks_mut(2).zip(list[done..].chunks(2)) {
        to.copy_from_slice(from);
        if let [a, b] = *from
            && super::is_grease(u16::from_be_bytes([a, b]))
        {
            to.copy_from_slice(&[0x0a, 0x0a]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{copy_grease_as_one, count_non_grease};
    use crate::tls::ja4::is_grease;

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
                let mut out = vec![0; bytes.len()];
                copy_grease_as_one(&bytes, &mut out);
                let want: Vec<u8> = list
                    .iter()
                    .flat_map(|&v| if is_grease(v) { 0x0a0a } else { v }.to_be_bytes())
                    .collect();
                assert_eq!(out, want, "{value:#06x} at {at}");
            }
        }
    }

    #[test]
    fn an_odd_byte_at_the_end_is_copied_and_not_counted() {
        let mut out = [0; 3];
        copy_grease_as_one(&[0x1a, 0x1a, 0x2a], &mut out);
        assert_eq!(out, [0x0a, 0x0a, 0x2a]);
        assert_eq!(count_non_grease(&[0x13, 0x01, 0x2a]), 1);
    }
}
