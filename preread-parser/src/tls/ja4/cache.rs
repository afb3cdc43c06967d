//! A small per-worker cache of JA4 fingerprints, so that a client seen
//! again (the same browser build, a bot) costs one comparison of its lists
//! instead of the sort, the hex text and two SHA-256.
//!
//! Owns: [`Ja4Cache`] (direct-mapped, [`ENTRIES`] slots, allocated once
//! with the cache, never on a lookup) and the key of a hello: what
//! determines its fingerprint, from the facts one walk gathered
//! ([`Ja4Facts`]; on the decision path, the parser's own walk):
//! - the `a` section (transport, the version JA4 reports, the counts, the
//!   two ALPN characters);
//! - the extension *set*, order-independent because Chrome shuffles its
//!   extensions on every connection: the bitmap of the types below 256,
//!   then the count of the others and their types, sorted
//!   ([`super::ExtensionSet`]; GREASE types left out);
//! - the lengths of the two lists, then the ciphers in the client's order,
//!   every GREASE value as `0a0a` (JA4 sorts the ciphers, so two orders of
//!   one list, or a GREASE value in another place, are two entries of one
//!   fingerprint: a miss, never a wrong value);
//! - the signature algorithms in order, GREASE as `0a0a`.
//!
//! GREASE values count for nothing, as in JA4: Chrome draws new ones per
//! connection, in the same places. A hello the key cannot describe
//! exactly (a type twice, more high extensions than the set holds, lists
//! past [`LIST_BYTES`]) is fingerprinted without the cache.
//!
//! A hit reads the key where it lies: the fixed part is built in
//! registers, the lists are compared in the hello itself against the
//! slot's copy (byte for byte past the stored list's last GREASE word,
//! which for Chrome is its first cipher). Nothing is copied on a hit; a
//! miss copies the lists into the slot. Measured on the ja4 bench, the
//! copy of the key into a buffer, its hash over every word and the
//! comparison were most of a hit.
//!
//! Why no collision can give a wrong fingerprint: a slot stores the whole
//! key beside the fingerprint, and a hit compares the whole key. The key
//! determines the fingerprint (every input of JA4 is in it, and the
//! lengths make it prefix-free), so equal keys mean equal fingerprints.
//! The hash only picks the slot, so it reads only the fixed part and each
//! list's first and last word; it is seeded per cache, so aiming a hello
//! at a slot is not free, and all an aimed hello can do is evict the slot,
//! which costs the evicted client one recomputation, as any new hello
//! does. A 128-bit hash trusted on a hit (the first design) would let a
//! crafted collision poison a slot with a denied fingerprint.
//!
//! Must never: allocate or lock on a lookup, or return a value other than
//! [`Ja4::of`]'s for the same hello. One cache belongs to one worker
//! thread (`preread_core` keeps one per thread): it is `&mut`, never shared.

use super::grease::{copy_grease_as_one, end_words, equals_grease_as_one, grease_end};
use super::{Ja4, Ja4Facts, Ja4Input, Transport};

/// Slots of a cache: 256 of 312 bytes, 78 KiB per worker. A listener's
/// clients are a handful of browser and library builds, each one
/// fingerprint per version of its lists.
pub const ENTRIES: usize = 256;

/// The fixed part of a key: the `a` section (transport, version, counts,
/// ALPN characters), the number of high types and the two lists'
/// lengths (2 words); the bitmap of the low types (4); the high types (2).
const HEAD_WORDS: usize = 8;

/// Bytes the two lists may fill together: Chrome's take 48, curl's (31
/// ciphers, 16 signature algorithms) 94; a client offering much more is
/// fingerprinted without the cache.
const LIST_BYTES: usize = 208;

/// What the cache did for one lookup, for the tests and the bench.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup {
    /// The fingerprint was in the cache.
    Hit,
    /// Computed and stored (replacing what the slot held, if anything).
    Miss,
    /// Computed; the hello has no exact key, so nothing was stored.
    Uncached,
}

/// The key of one hello, read where it lies: its fixed part built in
/// registers, its lists left in the hello, their end words hashed, then
/// compared with a slot's copy in place and, on a miss, copied into the
/// slot (GREASE as `0a0a` throughout). Nothing is copied on a hit.
struct Probe<'h> {
    head: [u64; HEAD_WORDS],
    ciphers: &'h [u8],
    signatures: &'h [u8],
}

impl<'h> Probe<'h> {
    /// The key of the hello `walked` gathered; `None` when it has no
    /// exact one that fits a slot.
    fn of(walked: &Ja4Facts<'h>) -> Option<Self> {
        let set = &walked.set;
        let ciphers = walked.input.cipher_suites;
        let signatures = walked.facts.signature_algorithms;
        if !set.is_exact() || ciphers.len() + signatures.len() > LIST_BYTES {
            return None;
        }
        let a = &walked.a;
        let high_len = u8::try_from(set.high().len()).ok()?;
        let mut high = [0u16; 8];
        high.get_mut(..set.high().len())?
            .copy_from_slice(set.high());
        let pack = |four: &[u16]| {
            four.iter()
                .rev()
                .fold(0u64, |word, &t| word << 16 | u64::from(t))
        };
        let low = set.low_words();
        let head = [
            u64::from_le_bytes([a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7]]),
            u64::from_le_bytes([a[8], a[9], high_len, 0, 0, 0, 0, 0])
                | u64::from(u16::try_from(ciphers.len()).ok()?) << 32
                | u64::from(u16::try_from(signatures.len()).ok()?) << 48,
            low[0],
            low[1],
            low[2],
            low[3],
            pack(&high[..4]),
            pack(&high[4..]),
        ];
        Some(Self {
            head,
            ciphers,
            signatures,
        })
    }

    /// Whether `entry` holds this key: the fixed part, which holds both
    /// lengths, then both lists. Past the last word where the stored list
    /// has GREASE, the lists are compared byte for byte (`bcmp`): a
    /// hello's list with GREASE there differs, as its key would (`0a0a`
    /// is GREASE). Only the words up to it are compared a word at a time,
    /// GREASE as `0a0a`.
    fn is_in(&self, entry: &Entry) -> bool {
        let differ = self
            .head
            .iter()
            .zip(&entry.head)
            .fold(0, |differ, (word, stored)| differ | (word ^ stored));
        let split = self.ciphers.len();
        let end = split + self.signatures.len();
        let (Some(ciphers), Some(signatures)) =
            (entry.lists.get(..split), entry.lists.get(split..end))
        else {
            return false;
        };
        let same = |list: &[u8], stored: &[u8], grease_end: u16| {
            let at = usize::from(grease_end);
            match (list.split_at_checked(at), stored.split_at_checked(at)) {
                (Some((list, rest)), Some((stored, stored_rest))) => {
                    equals_grease_as_one(list, stored) && rest == stored_rest
                }
                _ => false,
            }
        };
        differ == 0
            && same(self.ciphers, ciphers, entry.grease_end[0])
            && same(self.signatures, signatures, entry.grease_end[1])
    }

    fn store(&self, entry: &mut Entry, ja4: Ja4) {
        let end = self.ciphers.len() + self.signatures.len();
        let Some((ciphers, signatures)) = entry
            .lists
            .get_mut(..end)
            .map(|lists| lists.split_at_mut(self.ciphers.len()))
        else {
            return;
        };
        copy_grease_as_one(self.ciphers, ciphers);
        copy_grease_as_one(self.signatures, signatures);
        // Both lists are shorter than LIST_BYTES.
        let end = |list: &[u8]| u16::try_from(grease_end(list)).unwrap_or(u16::MAX);
        entry.grease_end = [end(self.ciphers), end(self.signatures)];
        entry.head = self.head;
        entry.ja4 = ja4;
    }

    /// The slot of the key: the fixed part and each list's first and last
    /// word, folded through 64×64→128-bit multiplies (each folds its high
    /// half into its low) from `seed`, on four independent lanes so that
    /// the multiplies overlap. Not the words between: two keys that
    /// differ only there share a slot, which costs a recomputation when
    /// both are in use, never a wrong value (a hit compares every word).
    fn slot(&self, seed: u64) -> usize {
        const K: u64 = 0x9e37_79b9_7f4a_7c15;
        let fold = |a: u64, b: u64| {
            let product = u128::from(a) * u128::from(b);
            (product as u64) ^ ((product >> 64) as u64)
        };
        let [c0, c1] = end_words(self.ciphers);
        let [s0, s1] = end_words(self.signatures);
        let h = &self.head;
        let mut lanes = [seed, seed ^ K, seed.rotate_left(16), !seed];
        for words in [
            [h[0], h[1], h[2], h[3]],
            [h[4], h[5], h[6], h[7]],
            [c0, c1, s0, s1],
        ] {
            for (lane, word) in lanes.iter_mut().zip(words) {
                *lane = fold(*lane ^ word, K);
            }
        }
        let [a, b, c, d] = lanes;
        (fold(a ^ c, b ^ d) >> 32) as usize % ENTRIES
    }
}

#[derive(Clone, Copy)]
struct Entry {
    /// All zero in an unused slot, which no key's is (its first byte is
    /// the transport's letter).
    head: [u64; HEAD_WORDS],
    /// The cipher suites then the signature algorithms, GREASE as
    /// `0a0a`; only as many bytes as the lengths in `head` say are the
    /// key's.
    lists: [u8; LIST_BYTES],
    /// Where each list's last word holding GREASE ends ([`grease_end`]):
    /// up to there it is compared word by word, then byte for byte.
    grease_end: [u16; 2],
    ja4: Ja4,
}

/// A direct-mapped cache of fingerprints, keyed by the canonical key of
/// a hello (see the module doc).
pub struct Ja4Cache {
    seed: u64,
    slots: Box<[Entry]>,
}

impl core::fmt::Debug for Ja4Cache {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let used = self.slots.iter().filter(|slot| slot.head[0] != 0).count();
        f.debug_struct("Ja4Cache").field("used", &used).finish()
    }
}

impl Ja4Cache {
    /// An empty cache whose slot hash is seeded by `(k0, k1)`: random in a
    /// worker, fixed in a test.
    pub fn new(k0: u64, k1: u64) -> Self {
        let empty = Entry {
            head: [0; HEAD_WORDS],
            lists: [0; LIST_BYTES],
            grease_end: [0; 2],
            ja4: Ja4 { text: [b'_'; 36] },
        };
        Self {
            seed: k0 ^ k1.rotate_left(32),
            slots: vec![empty; ENTRIES].into_boxed_slice(),
        }
    }

    /// The fingerprint of `hello` over `transport`, from the cache when a
    /// hello with the same key was fingerprinted before.
    pub fn ja4<'a>(&mut self, hello: impl Into<Ja4Input<'a>>, transport: Transport) -> Ja4 {
        self.lookup(hello.into(), transport).0
    }

    /// [`Self::ja4`] of the hello `facts` walked: no second walk.
    pub fn ja4_of_facts(&mut self, facts: &Ja4Facts<'_>) -> Ja4 {
        self.lookup_facts(facts).0
    }

    /// [`Self::ja4`], saying whether it hit.
    pub fn lookup(&mut self, hello: Ja4Input<'_>, transport: Transport) -> (Ja4, Lookup) {
        self.lookup_facts(&Ja4Facts::of(hello, transport))
    }

    /// [`Self::ja4_of_facts`], saying whether it hit.
    pub fn lookup_facts(&mut self, facts: &Ja4Facts<'_>) -> (Ja4, Lookup) {
        let Some(probe) = Probe::of(facts) else {
            return (Ja4::of_facts(facts), Lookup::Uncached);
        };
        let slot = &mut self.slots[probe.slot(self.seed)];
        if probe.is_in(slot) {
            return (slot.ja4, Lookup::Hit);
        }
        let ja4 = Ja4::of_facts(facts);
        probe.store(slot, ja4);
        (ja4, Lookup::Miss)
    }
}

#[cfg(test)]
mod tests {
    use super::{ENTRIES, Entry, Ja4Cache, Lookup, Probe};
    use crate::tls::ja4::{Ja4, Ja4Facts, Ja4Input, Transport};

    fn input(ciphers: &[u8]) -> Ja4Input<'_> {
        Ja4Input {
            legacy_version: 0x0303,
            cipher_suites: ciphers,
            extensions: &[],
        }
    }

    fn slot(cache: &Ja4Cache, ciphers: &[u8]) -> usize {
        Probe::of(&Ja4Facts::of(input(ciphers), Transport::Tcp))
            .expect("a key")
            .slot(cache.seed)
    }

    /// Two hellos in one slot (found by trying more ciphers than there
    /// are slots): each lookup compares the whole key, so neither ever
    /// gets the other's fingerprint, however the hash falls.
    #[test]
    fn hellos_sharing_a_slot_never_get_each_others_value() {
        let mut cache = Ja4Cache::new(15, 16);
        let first = [0x13, 0x01];
        let other = (0..=ENTRIES as u16 * 4)
            .map(|i| (0x0100 + i).to_be_bytes())
            .find(|c| slot(&cache, c) == slot(&cache, &first))
            .expect("a cipher list in the same slot");
        for _ in 0..2 {
            for ciphers in [&first, &other] {
                let got = cache.lookup(input(ciphers), Transport::Tcp);
                assert_eq!(got, (Ja4::of(input(ciphers), Transport::Tcp), Lookup::Miss));
            }
        }
        let got = cache.lookup(input(&other), Transport::Tcp);
        assert_eq!(got.1, Lookup::Hit);
    }

    /// Lists that differ only between their first and last word share a
    /// slot by design (the hash does not read them); each lookup still
    /// compares every byte, so they take turns in the slot and never get
    /// each other's fingerprint. Also with a GREASE cipher in the first
    /// word, which the comparison reads word by word.
    #[test]
    fn lists_differing_only_in_the_middle_share_a_slot_and_stay_apart() {
        let list = |middle: u8, first: [u8; 2]| {
            let mut ciphers: Vec<u8> = (0..24u8).map(|i| 0x30 + i).collect();
            ciphers[..2].copy_from_slice(&first);
            ciphers[10] = middle;
            ciphers
        };
        let mut cache = Ja4Cache::new(3, 4);
        for first in [[0x13, 0x01], [0x1a, 0x1a]] {
            let (one, two) = (list(0x01, first), list(0x02, first));
            assert_eq!(slot(&cache, &one), slot(&cache, &two));
            for ciphers in [&one, &two, &one] {
                let got = cache.lookup(input(ciphers), Transport::Tcp);
                assert_eq!(got, (Ja4::of(input(ciphers), Transport::Tcp), Lookup::Miss));
            }
            let regreased = list(0x01, [first[0] ^ 0x10, first[1] ^ 0x10]);
            let got = cache.lookup(input(&regreased), Transport::Tcp);
            let expected = if first == [0x1a, 0x1a] {
                Lookup::Hit
            } else {
                Lookup::Miss
            };
            assert_eq!(got, (Ja4::of(input(&regreased), Transport::Tcp), expected));
        }
    }

    /// What the doc of [`ENTRIES`] says a cache costs.
    #[test]
    fn a_cache_is_78_kib() {
        assert_eq!(size_of::<Entry>(), 312);
        assert_eq!(size_of::<Entry>() * ENTRIES, 78 * 1024);
    }
}
