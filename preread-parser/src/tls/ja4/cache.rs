//! A small per-worker cache of JA4 fingerprints, so that a client seen
//! again (the same browser build, a bot) costs one comparison of its lists
//! instead of the sort, the hex text and two SHA-256, and a client whose
//! `a` section no `deny_ja4` entry has costs the same comparison instead
//! of building that section.
//!
//! Owns: [`Ja4Cache`] (direct-mapped, [`ENTRIES`] slots, allocated once
//! with the cache, never on a lookup) and the key of a hello: what
//! determines its fingerprint, from the facts one walk gathered
//! ([`Ja4Facts`]; on the decision path, the parser's own walk):
//! - one word: the transport, the version JA4 reports, the two ALPN
//!   characters and the two lists' lengths;
//! - the extension *set*, order-independent because Chrome shuffles its
//!   extensions on every connection: the bitmap of the types below 256,
//!   then their types of 256 and above, sorted ([`super::ExtensionSet`];
//!   GREASE types left out): 6 words;
//! - the ciphers in the client's order, then the signature algorithms in
//!   order, each as 8-byte words (a list's last bytes padded), every
//!   GREASE value as `0a0a` (JA4 sorts the ciphers, so two orders of one
//!   list, or a GREASE value in another place, are two entries of one
//!   fingerprint: a miss, never a wrong value).
//!
//! The key holds every input of the `a` section too (the counts follow
//! from the set and from where the lists have GREASE), so a slot may
//! hold only a hello's `a` section ([`Ja4Cache::lookup_hello`]): what a
//! `deny_ja4` prefilter needs of a hello none of whose entries shares it.
//!
//! GREASE values count for nothing, as in JA4: Chrome draws new ones per
//! connection, in the same places. A hello the key cannot describe
//! exactly (a type twice, more high extensions than the set holds, lists
//! past [`LIST_BYTES`]) is fingerprinted without the cache.
//!
//! A hit reads the key where it lies: the fixed part is built in
//! registers, the lists are read from the hello a word at a time and
//! compared with the slot's words; only the words where the slot's list
//! had GREASE (Chrome's first cipher word) are normalized first, the
//! others compared as they are (a GREASE value there differs from the
//! stored value, which is not GREASE, as its key would). Nothing is
//! copied on a hit; a miss stores the words. Measured with callgrind
//! (doc/performance.md, "The key read from the parsed hello"): a hit is
//! about 470 instructions for Chrome's hello, of which the comparison of
//! its lists (6 words) is about 145.
//!
//! Why no collision can give a wrong fingerprint: a slot stores the whole
//! key beside the fingerprint, and a hit compares the whole key. The key
//! determines the fingerprint (every input of JA4 is in it, and the
//! lengths make it prefix-free), so equal keys mean equal fingerprints.
//! The hash only picks the slot, so it reads only the fixed part and the
//! low nibbles of the cipher list's first and last words (a GREASE byte's
//! low nibble is always `a`, so a hello and its regreased twin pick one
//! slot); it is seeded per cache, so aiming a hello at a slot is not free,
//! and all an aimed hello can do is evict the slot, which costs the
//! evicted client one recomputation, as any new hello does. A 128-bit
//! hash trusted on a hit (the first design) would let a crafted collision
//! poison a slot with a denied fingerprint.
//!
//! Must never: allocate or lock on a lookup, or return a value other than
//! [`Ja4::of`]'s for the same hello. One cache belongs to one worker
//! thread (`preread_core` keeps one per thread): it is `&mut`, never shared.

use super::grease::{grease_as_one, has_grease, list_words, tail_word};
use super::{
    A_LEN, ClientHello, ExtensionSet, Ja4, Ja4Facts, Ja4Input, Transport, alpn_chars,
    reported_version, signature_algorithms,
};

/// Slots of a cache: 256 of 328 bytes, 82 KiB per worker. A listener's
/// clients are a handful of browser and library builds, each one
/// fingerprint per version of its lists.
pub const ENTRIES: usize = 256;

/// The fixed part of a key: transport, version, ALPN characters and the
/// lists' lengths (1 word); the bitmap of the low types (4); the high
/// types (2).
const HEAD_WORDS: usize = 7;

/// Bytes the two lists may fill together: Chrome's take 48, curl's (31
/// ciphers, 16 signature algorithms) 94; a client offering much more is
/// fingerprinted without the cache.
const LIST_BYTES: usize = 208;

/// Words the two lists take in a slot: each is at most [`LIST_BYTES`]
/// long, its last bytes padded to a word.
const LIST_WORDS: usize = LIST_BYTES / 8 + 2;

/// What the cache did for one lookup, for the tests and the bench.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup {
    /// What was asked (the fingerprint, or only its `a` section when
    /// that ruled the rest out) was in the cache.
    Hit,
    /// Computed and stored (replacing what the slot held, if anything).
    Miss,
    /// Computed; the hello has no exact key, so nothing was stored.
    Uncached,
}

/// The key of one hello, read where it lies: its fixed part built in
/// registers, its lists left in the hello, then compared with a slot's
/// words in place and, on a miss, stored as words (GREASE as `0a0a`).
/// Nothing is copied on a hit.
struct Probe<'h> {
    head: [u64; HEAD_WORDS],
    ciphers: &'h [u8],
    signatures: &'h [u8],
}

impl<'h> Probe<'h> {
    /// The key of the hello `walked` gathered; `None` when it has no
    /// exact one that fits a slot.
    fn of(walked: &Ja4Facts<'h>) -> Option<Self> {
        Self::new(
            walked.transport,
            walked.facts.version(),
            alpn_chars(walked.facts.alpn),
            &walked.set,
            walked.input.cipher_suites,
            walked.facts.signature_algorithms,
        )
    }

    /// The key of a hello the parser returned, from what its walk
    /// gathered: no [`Ja4Facts`] is built unless the key is not found.
    fn of_hello(hello: &ClientHello<'h>, transport: Transport) -> Option<Self> {
        Self::new(
            transport,
            reported_version(hello.supported_versions, hello.legacy_version),
            alpn_chars(hello.alpn),
            &hello.extension_set,
            hello.cipher_suites,
            signature_algorithms(hello.signature_algorithms),
        )
    }

    #[inline(always)]
    fn new(
        transport: Transport,
        version: u16,
        alpn: [u8; 2],
        set: &ExtensionSet,
        ciphers: &'h [u8],
        signatures: &'h [u8],
    ) -> Option<Self> {
        if !set.is_exact() || ciphers.len() + signatures.len() > LIST_BYTES {
            return None;
        }
        // Both lengths are at most LIST_BYTES: a byte each.
        let fixed = u64::from(transport.letter())
            | u64::from(version) << 8
            | u64::from(u16::from_le_bytes(alpn)) << 24
            | (ciphers.len() as u64) << 40
            | (signatures.len() as u64) << 48;
        let [l0, l1, l2, l3, h0, h1] = set.key_words();
        Some(Self {
            head: [fixed, l0, l1, l2, l3, h0, h1],
            ciphers,
            signatures,
        })
    }

    /// Whether `entry` holds this key: the fixed part, which holds both
    /// lengths, then both lists' words.
    #[inline(always)]
    fn is_in(&self, entry: &Entry) -> bool {
        let differ = self
            .head
            .iter()
            .zip(&entry.head)
            .fold(0, |differ, (word, stored)| differ | (word ^ stored));
        if differ != 0 {
            return false;
        }
        let Some((ciphers, signatures)) =
            entry.words.split_at_checked(words_of(self.ciphers.len()))
        else {
            return false;
        };
        same_words(self.ciphers, ciphers, entry.grease[0])
            && same_words(self.signatures, signatures, entry.grease[1])
    }

    fn store(&self, entry: &mut Entry, ja4: Ja4, whole: bool) {
        let mut words = entry.words.iter_mut();
        for (list, grease) in [self.ciphers, self.signatures]
            .into_iter()
            .zip(&mut entry.grease)
        {
            *grease = 0;
            for (at, (word, slot)) in list_words(list).zip(words.by_ref()).enumerate() {
                if has_grease(word) {
                    *grease |= 1 << at;
                }
                *slot = grease_as_one(word);
            }
        }
        entry.head = self.head;
        entry.ja4 = ja4;
        entry.whole = whole;
    }

    /// The slot of the key: its fixed part and the low nibbles of the
    /// cipher list's first and last words (GREASE or not, a GREASE
    /// byte's low nibble is `a`: regreased, a list keeps its slot),
    /// folded by one 64×64→128-bit multiply from `seed`. Not the rest of
    /// the lists: two keys that differ only there share a slot, which
    /// costs a recomputation when both are in use, never a wrong value (a
    /// hit compares every word).
    fn slot(&self, seed: u64) -> usize {
        const K: u64 = 0x9e37_79b9_7f4a_7c15;
        const LOW_NIBBLES: u64 = 0x0f0f_0f0f_0f0f_0f0f;
        let first = match self.ciphers.first_chunk::<8>() {
            Some(word) => u64::from_le_bytes(*word),
            None => tail_word(self.ciphers).unwrap_or(0),
        };
        let last = self
            .ciphers
            .last_chunk::<8>()
            .map_or(0, |word| u64::from_le_bytes(*word));
        let h = &self.head;
        let mixed = h[0]
            ^ h[1].rotate_left(7)
            ^ h[2].rotate_left(19)
            ^ h[3].rotate_left(29)
            ^ h[4].rotate_left(37)
            ^ h[5].rotate_left(43)
            ^ h[6].rotate_left(53)
            ^ (first & LOW_NIBBLES).rotate_left(3)
            ^ (last & LOW_NIBBLES).rotate_left(13);
        let product = u128::from(mixed ^ seed) * u128::from(K);
        let folded = (product as u64) ^ ((product >> 64) as u64);
        (folded >> 32) as usize % ENTRIES
    }
}

/// Words a list of `len` bytes takes: its whole words and its padded
/// last bytes.
fn words_of(len: usize) -> usize {
    len.div_ceil(8)
}

/// Whether `list`, read a word at a time, is `stored`: the words whose
/// bit is set in `grease` (where the stored list had GREASE) with each
/// GREASE value as `0a0a`, the others as they are.
#[inline(always)]
fn same_words(list: &[u8], stored: &[u64], grease: u32) -> bool {
    let normalized = |word: u64, at: usize| {
        if grease >> at & 1 == 0 {
            word
        } else {
            grease_as_one(word)
        }
    };
    let mut differ = 0;
    let mut at = 0;
    for (word, &stored) in list.chunks_exact(8).zip(stored) {
        let Some(word) = word.first_chunk::<8>() else {
            return false;
        };
        differ |= normalized(u64::from_le_bytes(*word), at) ^ stored;
        at += 1;
    }
    if let Some(word) = tail_word(list) {
        let Some(&stored) = stored.get(at) else {
            return false;
        };
        differ |= normalized(word, at) ^ stored;
    }
    differ == 0
}

#[derive(Clone, Copy)]
struct Entry {
    /// All zero in an unused slot, which no key's is (its first byte is
    /// the transport's letter).
    head: [u64; HEAD_WORDS],
    /// The cipher suites' words then the signature algorithms', GREASE
    /// as `0a0a`; only as many as the lengths in `head` say are the key's.
    words: [u64; LIST_WORDS],
    /// Per list, the words that held GREASE: a hit normalizes only these.
    grease: [u32; 2],
    /// The fingerprint, or only its `a` section (the rest `_`) when
    /// `whole` is false.
    ja4: Ja4,
    whole: bool,
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
            words: [0; LIST_WORDS],
            grease: [0; 2],
            ja4: Ja4 { text: [b'_'; 36] },
            whole: false,
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
    fn lookup_facts(&mut self, facts: &Ja4Facts<'_>) -> (Ja4, Lookup) {
        match self.lookup_probe(Probe::of(facts), || *facts, |_| true) {
            (Some(ja4), lookup) => (ja4, lookup),
            // Not reached: every section is wanted.
            (None, lookup) => (Ja4::of_facts(facts), lookup),
        }
    }

    /// The fingerprint of a hello the parser returned when `wanted`
    /// accepts its `a` section (a `deny_ja4` list has an entry with it)
    /// or the cache holds the whole of it; `None` when `wanted` refuses
    /// the section, which then alone is computed and stored: the hello's
    /// next connection costs only the comparison of its key. The key is
    /// read from the hello, and its [`Ja4Facts`] built only on a miss;
    /// `wanted` is asked at most once.
    pub fn lookup_hello(
        &mut self,
        hello: &ClientHello<'_>,
        transport: Transport,
        wanted: impl FnOnce(&[u8; A_LEN]) -> bool,
    ) -> (Option<Ja4>, Lookup) {
        let facts = || Ja4Facts::of_hello(hello, transport);
        self.lookup_probe(Probe::of_hello(hello, transport), facts, wanted)
    }

    fn lookup_probe<'h>(
        &mut self,
        probe: Option<Probe<'h>>,
        facts: impl FnOnce() -> Ja4Facts<'h>,
        wanted: impl FnOnce(&[u8; A_LEN]) -> bool,
    ) -> (Option<Ja4>, Lookup) {
        let Some(probe) = probe else {
            let facts = facts();
            let ja4 = wanted(&facts.section_a()).then(|| Ja4::of_facts(&facts));
            return (ja4, Lookup::Uncached);
        };
        let slot = &mut self.slots[probe.slot(self.seed)];
        if probe.is_in(slot) {
            if slot.whole {
                return (Some(slot.ja4), Lookup::Hit);
            }
            if !wanted(&slot.ja4.section_a()) {
                return (None, Lookup::Hit);
            }
            return (Some(Self::fill(&probe, slot, &facts())), Lookup::Miss);
        }
        let facts = facts();
        let section = facts.section_a();
        if !wanted(&section) {
            probe.store(slot, Ja4::section_only(section), false);
            return (None, Lookup::Miss);
        }
        (Some(Self::fill(&probe, slot, &facts)), Lookup::Miss)
    }

    fn fill(probe: &Probe<'_>, slot: &mut Entry, facts: &Ja4Facts<'_>) -> Ja4 {
        let ja4 = Ja4::of_facts(facts);
        probe.store(slot, ja4, true);
        ja4
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
    fn a_cache_is_82_kib() {
        assert_eq!(size_of::<Entry>(), 328);
        assert_eq!(size_of::<Entry>() * ENTRIES, 82 * 1024);
    }
}
