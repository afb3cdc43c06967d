//! A small per-worker cache of JA4 fingerprints, so that a client seen
//! again (the same browser build, a bot) costs one copy of its lists and
//! one comparison instead of the sort, the hex text and two SHA-256.
//!
//! Owns: [`Ja4Cache`] (direct-mapped, [`ENTRIES`] slots, allocated once
//! with the cache, never on a lookup) and the key of a hello: what
//! determines its fingerprint, written out canonically (at most
//! [`KEY_LEN`] bytes) from the facts one walk gathered ([`Ja4Facts`]; on
//! the decision path, the parser's own walk):
//! - the transport, the version JA4 reports (its two characters), the two
//!   ALPN characters;
//! - the extension *set*, order-independent because Chrome shuffles its
//!   extensions on every connection: the bitmap of the types below 256,
//!   then the count of the others and their types, sorted
//!   ([`super::ExtensionSet`]; GREASE types left out). With the cipher
//!   list this is the rest of the `a` section (`server_name` is bit 0;
//!   the extension count, the set's size);
//! - the cipher list's length, then the ciphers in the client's order,
//!   every GREASE value written as `0a0a` (JA4 sorts the ciphers, so two
//!   orders of one list, or a GREASE value in another place, are two
//!   entries of one fingerprint: a miss, never a wrong value);
//! - the signature algorithms in order, GREASE as `0a0a`, to the end.
//!
//! GREASE values count for nothing, as in JA4: Chrome draws new ones per
//! connection, in the same places. A hello the key cannot describe
//! exactly (a type twice, more high extensions than the set holds, a key
//! past [`KEY_LEN`]) is fingerprinted without the cache.
//!
//! Why no collision can give a wrong fingerprint: a slot stores the whole
//! key beside the fingerprint, and a hit compares the whole key, byte for
//! byte. The key determines the fingerprint (every input of JA4 is in it,
//! and the counts make it prefix-free), so equal keys mean equal
//! fingerprints. The hash only picks the slot. Before, the key was a
//! 128-bit SipHash and a hit trusted it; with a weak hash that would let a
//! client poison a slot (a hello crafted to collide with a good client's,
//! carrying a denied fingerprint, and the good client refused). Comparing
//! the key removes that; what is left to an attacker who aims at a slot is
//! to evict it, which costs the evicted client one recomputation, as any
//! new hello does. So the slot hash is a cheap multiply-fold over the
//! key's words (still seeded per cache, so the aim is not free). The old
//! lookup (its own walk, the key's text, SipHash-1-3) took about a quarter
//! of a whole warm connection (`perf record` on the ja4 bench).
//!
//! Must never: allocate or lock on a lookup, or return a value other than
//! [`Ja4::of`]'s for the same hello. One cache belongs to one worker
//! thread (`preread_core` keeps one per thread): it is `&mut`, never shared.

use super::grease::copy_grease_as_one;
use super::{Ja4, Ja4Facts, Ja4Input, Transport, alpn_chars, version_code};

/// Slots of a cache: 256 of 280 bytes, 70 KiB per worker. A listener's
/// clients are a handful of browser and library builds, each one
/// fingerprint per version of its lists.
pub const ENTRIES: usize = 256;

/// The longest key a slot holds: Chrome's is 102 bytes, curl's (31
/// ciphers, 16 signature algorithms) 134; a client offering much more is
/// fingerprinted without the cache.
const KEY_LEN: usize = 240;

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

/// The canonical key of one hello (see the module doc); empty in an
/// unused slot, which no hello's key is.
#[derive(Clone, Copy)]
struct Key {
    len: u16,
    bytes: [u8; KEY_LEN],
}

impl Key {
    const EMPTY: Self = Self {
        len: 0,
        bytes: [0; KEY_LEN],
    };

    fn as_slice(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }

    /// Writes the key of the hello `walked` gathered; `None` when it has
    /// no exact one.
    fn write(&mut self, walked: &Ja4Facts<'_>) -> Option<()> {
        let set = &walked.set;
        if !set.is_exact() {
            return None;
        }
        let facts = &walked.facts;
        let version = version_code(facts.version());
        let alpn = alpn_chars(facts.alpn);
        let mut out = Writer {
            bytes: &mut self.bytes,
            at: 0,
        };
        out.put(&[
            walked.transport.letter(),
            version[0],
            version[1],
            alpn[0],
            alpn[1],
        ])?;
        for word in set.low_words() {
            out.put(&word.to_le_bytes())?;
        }
        out.put(&[u8::try_from(set.high().len()).ok()?])?;
        for &ext_type in set.high() {
            out.put_u16(ext_type)?;
        }
        let ciphers = walked.input.cipher_suites;
        out.put_u16(u16::try_from(ciphers.len()).ok()?)?;
        out.put_grease_as_one(ciphers)?;
        out.put_grease_as_one(facts.signature_algorithms)?;
        self.len = out.at as u16;
        Some(())
    }
}

/// Appends to a key's bytes. Its own cursor, not [`Key::len`]: a length
/// kept in the key would be stored and reloaded around every byte
/// written (measured: a third of a hit).
struct Writer<'k> {
    bytes: &'k mut [u8; KEY_LEN],
    at: usize,
}

impl Writer<'_> {
    fn put(&mut self, bytes: &[u8]) -> Option<()> {
        let end = self.at + bytes.len();
        self.bytes.get_mut(self.at..end)?.copy_from_slice(bytes);
        self.at = end;
        Some(())
    }

    fn put_u16(&mut self, value: u16) -> Option<()> {
        self.put(&value.to_le_bytes())
    }

    /// `list` as is, but every GREASE value written as `0a0a`, rather
    /// than left out: four values at a time, no branch per value. Chrome draws its GREASE values anew, not their places (first
    /// cipher), so the key stays one per client.
    fn put_grease_as_one(&mut self, list: &[u8]) -> Option<()> {
        let end = self.at + list.len();
        copy_grease_as_one(list, self.bytes.get_mut(self.at..end)?);
        self.at = end;
        Some(())
    }
}

#[derive(Clone, Copy)]
struct Entry {
    key: Key,
    ja4: Ja4,
}

/// A direct-mapped cache of fingerprints, keyed by the canonical key of
/// a hello (see the module doc).
pub struct Ja4Cache {
    seed: u64,
    /// The key of the hello being looked up, built here so that a lookup
    /// neither zeroes nor moves a key-sized buffer.
    scratch: Key,
    slots: Box<[Entry]>,
}

impl core::fmt::Debug for Ja4Cache {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let used = self.slots.iter().filter(|slot| slot.key.len > 0).count();
        f.debug_struct("Ja4Cache").field("used", &used).finish()
    }
}

impl Ja4Cache {
    /// An empty cache whose slot hash is seeded by `(k0, k1)`: random in a
    /// worker, fixed in a test.
    pub fn new(k0: u64, k1: u64) -> Self {
        let empty = Entry {
            key: Key::EMPTY,
            ja4: Ja4 { text: [b'_'; 36] },
        };
        Self {
            seed: k0 ^ k1.rotate_left(32),
            scratch: Key::EMPTY,
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
        if self.scratch.write(facts).is_none() {
            return (Ja4::of_facts(facts), Lookup::Uncached);
        }
        let key = self.scratch.as_slice();
        let slot = &mut self.slots[slot_of(self.seed, key)];
        if slot.key.as_slice() == key {
            return (slot.ja4, Lookup::Hit);
        }
        let ja4 = Ja4::of_facts(facts);
        *slot = Entry {
            key: self.scratch,
            ja4,
        };
        (ja4, Lookup::Miss)
    }
}

/// The slot of `key`: its words folded through 64×64→128-bit multiplies
/// (each folds its high half into its low), from `seed`, on four
/// independent lanes so that the multiplies overlap.
fn slot_of(seed: u64, key: &[u8]) -> usize {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;
    let fold = |a: u64, b: u64| {
        let product = u128::from(a) * u128::from(b);
        (product as u64) ^ ((product >> 64) as u64)
    };
    let mut lanes = [seed, seed ^ K, seed.rotate_left(16), !seed];
    let mut mix = |block: &[u8]| {
        for (lane, word) in lanes.iter_mut().zip(block.chunks_exact(8)) {
            if let Some(word) = word.first_chunk::<8>() {
                *lane = fold(*lane ^ u64::from_le_bytes(*word), K);
            }
        }
    };
    let mut blocks = key.chunks_exact(32);
    for block in &mut blocks {
        mix(block);
    }
    let mut tail = [0u8; 32];
    tail[..blocks.remainder().len()].copy_from_slice(blocks.remainder());
    mix(&tail);
    let [a, b, c, d] = lanes;
    let hash = fold(a ^ c, b ^ d ^ key.len() as u64);
    (hash >> 32) as usize % ENTRIES
}

#[cfg(test)]
mod tests {
    use super::{ENTRIES, Ja4Cache, Key, Lookup, slot_of};
    use crate::tls::ja4::{Ja4, Ja4Facts, Ja4Input, Transport};

    fn input(ciphers: &[u8]) -> Ja4Input<'_> {
        Ja4Input {
            legacy_version: 0x0303,
            cipher_suites: ciphers,
            extensions: &[],
        }
    }

    fn slot(cache: &Ja4Cache, ciphers: &[u8]) -> usize {
        let mut key = Key::EMPTY;
        key.write(&Ja4Facts::of(input(ciphers), Transport::Tcp))
            .expect("a key");
        slot_of(cache.seed, key.as_slice())
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
}
