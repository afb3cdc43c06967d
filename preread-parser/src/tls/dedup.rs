//! Exact duplicate detection for extension types, with no allocation and a
//! cost per extension that does not grow with the number of extensions.
//!
//! Owns: [`ExtensionTypeSet`]. Real ClientHellos carry about twenty
//! extensions, most of them IANA types below 256: those are one bit each in
//! a direct 256-bit set. The rest (GREASE, ECH, ALPS, private types) go
//! through a 256-bit filter over a short list; a hostile hello with
//! thousands of distinct types moves to a full bitmap of every u16, which
//! keeps the walk linear instead of quadratic.

const SMALL: usize = 32;
const BITMAP_WORDS: usize = (u16::MAX as usize + 1) / 64;

pub(super) struct ExtensionTypeSet {
    /// Types below 256, exactly.
    low: [u64; 4],
    /// How many types below 256 (JA4's extension count wants it, and a
    /// count here is cheaper than counting `low`'s bits later).
    low_len: u16,
    /// Types from 256 on: a hashed filter in front of `small`.
    filter: [u64; 4],
    small: [u16; SMALL],
    len: usize,
    bitmap: Option<[u64; BITMAP_WORDS]>,
}

fn filter_slot(ext_type: u16) -> usize {
    // GREASE types (0x?a?a) differ only in their nibbles; a multiplicative
    // hash spreads them over the filter instead of piling them in one bit.
    ((u32::from(ext_type).wrapping_mul(0x9e37_79b1)) >> 24) as usize
}

fn bitmap_insert(bitmap: &mut [u64; BITMAP_WORDS], ext_type: u16) -> bool {
    let (word, bit) = (usize::from(ext_type) / 64, 1u64 << (ext_type % 64));
    let fresh = bitmap[word] & bit == 0;
    bitmap[word] |= bit;
    fresh
}

impl ExtensionTypeSet {
    pub(super) fn new() -> Self {
        Self {
            low: [0; 4],
            low_len: 0,
            filter: [0; 4],
            small: [0; SMALL],
            len: 0,
            bitmap: None,
        }
    }

    /// The exact bitmap of the types below 256 (JA4's extension set).
    pub(super) fn low(&self) -> [u64; 4] {
        self.low
    }

    /// How many types below 256 were recorded.
    pub(super) fn low_len(&self) -> u16 {
        self.low_len
    }

    /// The types from 256 on, in the order first seen; `None` once there
    /// were too many to list (then the set is a bitmap).
    pub(super) fn listed(&self) -> Option<&[u16]> {
        self.bitmap.is_none().then_some(&self.small[..self.len])
    }

    /// Records `ext_type`; returns `false` when it was already there.
    pub(super) fn insert(&mut self, ext_type: u16) -> bool {
        if let Ok(low) = u8::try_from(ext_type) {
            let (word, bit) = (usize::from(low >> 6), 1u64 << (low & 63));
            let fresh = self.low[word] & bit == 0;
            self.low[word] |= bit;
            self.low_len += u16::from(fresh);
            return fresh;
        }
        if let Some(bitmap) = &mut self.bitmap {
            return bitmap_insert(bitmap, ext_type);
        }
        let slot = filter_slot(ext_type);
        let (word, bit) = (slot / 64, 1u64 << (slot % 64));
        if self.filter[word] & bit != 0 && self.small[..self.len].contains(&ext_type) {
            return false;
        }
        self.filter[word] |= bit;
        if self.len < SMALL {
            self.small[self.len] = ext_type;
            self.len += 1;
            return true;
        }
        let mut bitmap = [0u64; BITMAP_WORDS];
        for &seen in &self.small {
            bitmap_insert(&mut bitmap, seen);
        }
        bitmap_insert(&mut bitmap, ext_type);
        self.bitmap = Some(bitmap);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::ExtensionTypeSet;

    #[test]
    fn finds_duplicates_below_and_above_the_small_list() {
        for count in [1usize, 2, 31, 32, 33, 200, 4000] {
            let mut set = ExtensionTypeSet::new();
            let types: Vec<u16> = (0..count).map(|i| (i as u16).wrapping_mul(7919)).collect();
            for &t in &types {
                assert!(set.insert(t), "first insert of {t} with {count} types");
            }
            for &t in &types {
                assert!(!set.insert(t), "second insert of {t} with {count} types");
            }
        }
    }

    #[test]
    fn low_types_are_exact_beside_the_list_and_the_bitmap() {
        let high: Vec<u16> = (0..40u16).map(|i| 0x0100 + i * 1021).collect();
        let mut set = ExtensionTypeSet::new();
        for t in (0..=255u16).chain(high.iter().copied()) {
            assert!(set.insert(t), "first insert of {t:#06x}");
        }
        assert!(
            set.bitmap.is_some(),
            "40 high types overflow the short list"
        );
        for t in (0..=255u16).chain(high.iter().copied()) {
            assert!(!set.insert(t), "second insert of {t:#06x}");
        }
        assert!(
            set.insert(0x00ff + 0x2000),
            "a high type sharing low bits is new"
        );
    }

    #[test]
    fn grease_values_are_distinct_members() {
        let mut set = ExtensionTypeSet::new();
        for high in 0..16u16 {
            let grease = (high << 12) | 0x0a00 | (high << 4) | 0x0a;
            assert!(set.insert(grease));
        }
        assert!(!set.insert(0x5a5a));
    }

    /// The filter's job: the sixteen GREASE types, which differ only in
    /// their nibbles, each get a bit of their own, so a new GREASE type is
    /// told apart without scanning the list.
    #[test]
    fn grease_values_spread_over_distinct_filter_bits() {
        let mut set = ExtensionTypeSet::new();
        for high in 0..16u16 {
            let grease = (high << 12) | 0x0a00 | (high << 4) | 0x0a;
            assert!(set.insert(grease));
        }
        let bits: u32 = set.filter.iter().map(|word| word.count_ones()).sum();
        assert_eq!(bits, 16, "filter {:#018x?}", set.filter);
    }
}
