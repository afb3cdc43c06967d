//! The extension *set* of a ClientHello as JA4 reads it, GREASE left out:
//! a bitmap of the types below 256 and the others sorted.
//!
//! Owns: [`ExtensionSet`], built either by the parser's own walk (from its
//! duplicate detector, which holds the same set: no second walk on the
//! decision path) or by a walk of a stored extensions block (a hello kept
//! as [`super::Ja4Input`]); the two give equal sets for one hello (tested).
//! Iterated in order, it is JA4's sorted extension list without a sort;
//! as bytes, it is the order-independent part of the cache's key, so
//! Chrome's shuffled extensions give one key.
//!
//! Must never: claim to be exact ([`ExtensionSet::is_exact`]) when a type
//! came twice or the types of 256 and above did not fit: a caller then
//! falls back to walking the hello.

use super::is_grease;

/// Types of 256 and above a set holds (GREASE aside): browsers send three
/// or four (`renegotiation_info`, ECH, ALPS).
const MAX_HIGH: usize = 8;

/// The non-GREASE extension types of one hello.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ExtensionSet {
    low: [u64; 4],
    /// How many bits `low` has set: counted as they are set, because
    /// without the POPCNT instruction (not in the x86-64 baseline) four
    /// words cost a dozen operations each.
    low_len: u16,
    high: [u16; MAX_HIGH],
    high_len: u8,
    exact: bool,
}

impl Default for ExtensionSet {
    fn default() -> Self {
        Self {
            low: [0; 4],
            low_len: 0,
            high: [0; MAX_HIGH],
            high_len: 0,
            exact: true,
        }
    }
}

impl ExtensionSet {
    /// The set of a parsed hello, from its duplicate detector: `low` its
    /// exact bitmap of the types below 256 (`low_len` bits set), `high`
    /// the others it listed (GREASE included), `None` when it gave up
    /// listing them.
    pub(crate) fn from_seen(low: [u64; 4], low_len: u16, high: Option<&[u16]>) -> Self {
        let mut set = Self {
            low,
            low_len,
            ..Self::default()
        };
        match high {
            Some(high) => high
                .iter()
                .filter(|&&t| !is_grease(t))
                .for_each(|&t| set.insert_high(t)),
            None => set.exact = false,
        }
        set
    }

    /// Adds one non-GREASE type met walking a block.
    pub(crate) fn insert(&mut self, ext_type: u16) {
        match u8::try_from(ext_type) {
            Ok(low) => {
                let (word, bit) = (usize::from(low >> 6), 1u64 << (low & 63));
                let fresh = self.low[word] & bit == 0;
                self.exact &= fresh;
                self.low[word] |= bit;
                self.low_len += u16::from(fresh);
            }
            Err(_) => self.insert_high(ext_type),
        }
    }

    /// Keeps the high types sorted by insertion: a hello has three or
    /// four, and `copy_within` would call `memmove` on every parse.
    fn insert_high(&mut self, ext_type: u16) {
        let len = usize::from(self.high_len);
        if len == MAX_HIGH {
            self.exact = false;
            return;
        }
        let mut at = len;
        while at > 0 && self.high[at - 1] > ext_type {
            self.high[at] = self.high[at - 1];
            at -= 1;
        }
        if at > 0 && self.high[at - 1] == ext_type {
            // The list is now out of shape, but an inexact set is only
            // ever asked whether it is exact.
            self.exact = false;
            return;
        }
        self.high[at] = ext_type;
        self.high_len += 1;
    }

    /// The set describes the hello: no type twice, every type held.
    pub(crate) fn is_exact(&self) -> bool {
        self.exact
    }

    /// How many types the set holds.
    pub(crate) fn len(&self) -> usize {
        usize::from(self.low_len) + usize::from(self.high_len)
    }

    /// Whether `ext_type` (below 256) is in the set.
    pub(crate) fn has_low(&self, ext_type: u8) -> bool {
        self.low[usize::from(ext_type >> 6)] & (1u64 << (ext_type & 63)) != 0
    }

    /// The set as the cache's key reads it: the bitmap of the low types
    /// (4 words), then the high types packed four to a word (2; unused
    /// places are 0, which no high type is). Only an exact set is a key.
    pub(crate) fn key_words(&self) -> [u64; 6] {
        let pack = |four: &[u16]| {
            four.iter()
                .rev()
                .fold(0u64, |word, &t| word << 16 | u64::from(t))
        };
        let (first, second) = self.high.split_at(MAX_HIGH / 2);
        let [l0, l1, l2, l3] = self.low;
        [l0, l1, l2, l3, pack(first), pack(second)]
    }

    /// The types of 256 and above, ascending.
    pub(crate) fn high(&self) -> &[u16] {
        &self.high[..usize::from(self.high_len)]
    }

    /// Every type, ascending.
    pub(crate) fn ascending(&self) -> impl Iterator<Item = u16> + '_ {
        let low = self.low.iter().enumerate().flat_map(|(word, &bits)| {
            let mut bits = bits;
            core::iter::from_fn(move || {
                let bit = bits.trailing_zeros();
                bits &= bits.checked_sub(1)?;
                u16::try_from(word * 64).ok()?.checked_add(bit as u16)
            })
        });
        low.chain(self.high().iter().copied())
    }
}

#[cfg(test)]
mod tests {
    use super::ExtensionSet;

    fn walked(types: &[u16]) -> ExtensionSet {
        let mut set = ExtensionSet::default();
        types.iter().for_each(|&t| set.insert(t));
        set
    }

    #[test]
    fn the_order_of_insertion_does_not_matter() {
        let types = [
            0x0000, 0x0017, 0xff01, 0x002b, 0xfe0d, 0x0010, 0x44cd, 0x00ff,
        ];
        let mut reversed = types;
        reversed.reverse();
        assert_eq!(walked(&types), walked(&reversed));
        let order: Vec<u16> = walked(&types).ascending().collect();
        assert_eq!(
            order,
            [
                0x0000, 0x0010, 0x0017, 0x002b, 0x00ff, 0x44cd, 0xfe0d, 0xff01
            ]
        );
        assert_eq!(walked(&types).len(), types.len());
        assert!(walked(&types).is_exact());
    }

    #[test]
    fn another_type_is_another_set() {
        assert_ne!(walked(&[0x0000, 0x0017]), walked(&[0x0000, 0x0018]));
        assert_ne!(walked(&[0xff01]), walked(&[0xfe0d]));
        assert_ne!(walked(&[0x0005]), walked(&[0x0005, 0x0105]));
    }

    #[test]
    fn a_repeated_type_or_too_many_high_ones_is_not_exact() {
        assert!(!walked(&[0x0017, 0x0017]).is_exact());
        assert!(!walked(&[0xff01, 0xff01]).is_exact());
        let many: Vec<u16> = (0..9).map(|i| 0x1000 + i).collect();
        assert!(walked(&many[..8]).is_exact());
        assert!(!walked(&many).is_exact());
    }

    #[test]
    fn the_parsers_set_drops_grease_and_equals_the_walk() {
        let types = [0x0000, 0xff01, 0x002b, 0xfe0d];
        let walk = walked(&types);
        let seen = ExtensionSet::from_seen(walk.low, 2, Some(&[0x1a1a, 0xfe0d, 0xff01, 0xfafa]));
        assert_eq!(seen, walk);
        assert_eq!(seen.len(), types.len());
        assert!(!ExtensionSet::from_seen(walk.low, 2, None).is_exact());
    }
}
