//! A small per-worker cache of JA4 fingerprints, so that a client seen
//! again (the same browser build, a bot) costs one keyed hash of its
//! lists instead of the sort, the hex text and two SHA-256.
//!
//! Owns: [`Ja4Cache`] (direct-mapped, [`ENTRIES`] slots, allocated once
//! with the cache, never on a lookup) and the key of a hello ([`key`]):
//! what determines its fingerprint, written out canonically and hashed to
//! 128 bits by SipHash-1-3 under the cache's own random key:
//! - the transport, the version JA4 reports (the highest non-GREASE
//!   `supported_versions` entry, else `legacy_version`), the count of
//!   non-GREASE extensions and the two ALPN characters: the `a` section,
//!   exactly;
//! - the non-GREASE ciphers in the client's order (JA4 sorts them, so
//!   two orders of one list are two entries of one fingerprint: a miss,
//!   never a wrong value);
//! - the extension *set*, order-independent because Chrome shuffles its
//!   extensions on every connection: a 64-bit mask of the types below 64,
//!   then the others sorted (at most [`MAX_HIGH_EXTENSIONS`]);
//! - the non-GREASE signature algorithms in order.
//!
//! GREASE values are left out, as JA4 leaves them out: Chrome draws new
//! ones per connection. A hello the key cannot describe exactly (a type
//! twice, more high extensions than the key holds, lists longer than its
//! buffer) is fingerprinted without the cache.
//!
//! Why a collision is not a practical risk: the 128-bit key is a keyed
//! hash (SipHash is a PRF; the key is drawn per cache from the process's
//! random source), so a client cannot aim its hello at another's slot
//! without knowing the key, and by chance two distinct hellos share a key
//! with probability 2^-128 per comparison, against 2^-48 for two distinct
//! hellos to share a fingerprint section in JA4 itself, which truncates
//! each SHA-256 to 48 bits. A hit returns the stored fingerprint whole,
//! as [`Ja4::of`] computed it.
//!
//! Must never: allocate or lock on a lookup, or return a value other than
//! [`Ja4::of`]'s for the same hello. One cache belongs to one worker
//! thread (`preread_core` keeps one per thread): it is `&mut`, never shared.

use siphasher::sip128::SipHasher13;

use super::super::extensions::{AlpnProtocols, SupportedVersions};
use super::{
    EXT_ALPN, EXT_SIGNATURE_ALGORITHMS, EXT_SUPPORTED_VERSIONS, Ja4, Ja4Input, Transport,
    alpn_chars, extensions, is_grease, signature_algorithms, u16_pairs, version_code,
};

/// Slots of a cache: 256 of 64 bytes, 16 KiB per worker. A listener's
/// clients are a handful of browser and library builds, each one
/// fingerprint per version of its lists.
pub const ENTRIES: usize = 256;

/// Extension types of 64 and above a key holds (GREASE aside): browsers
/// send three or four (`renegotiation_info`, ECH, ALPS, …).
const MAX_HIGH_EXTENSIONS: usize = 16;

/// The canonical text of a key is built on the stack; a hello whose lists
/// need more is fingerprinted without the cache.
const KEY_TEXT: usize = 512;

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

/// 56 bytes: the key as two halves keeps the slot 8-aligned.
#[derive(Clone, Copy)]
struct Entry {
    key: [u64; 2],
    ja4: Ja4,
}

/// A direct-mapped cache of fingerprints, keyed by `key` (below).
pub struct Ja4Cache {
    hasher: SipHasher13,
    slots: Box<[Option<Entry>; ENTRIES]>,
}

impl core::fmt::Debug for Ja4Cache {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let used = self.slots.iter().filter(|slot| slot.is_some()).count();
        f.debug_struct("Ja4Cache").field("used", &used).finish()
    }
}

impl Ja4Cache {
    /// An empty cache whose keys are SipHash-1-3 under `(k0, k1)`: random
    /// in a worker, fixed in a test.
    pub fn new(k0: u64, k1: u64) -> Self {
        Self {
            hasher: SipHasher13::new_with_keys(k0, k1),
            slots: Box::new([None; ENTRIES]),
        }
    }

    /// The fingerprint of `hello` over `transport`, from the cache when a
    /// hello with the same key was fingerprinted before.
    pub fn ja4<'a>(&mut self, hello: impl Into<Ja4Input<'a>>, transport: Transport) -> Ja4 {
        self.lookup(hello.into(), transport).0
    }

    /// [`Self::ja4`], saying whether it hit.
    pub fn lookup(&mut self, hello: Ja4Input<'_>, transport: Transport) -> (Ja4, Lookup) {
        let Some(key) = key(&self.hasher, hello, transport) else {
            return (Ja4::of(hello, transport), Lookup::Uncached);
        };
        let slot = &mut self.slots[(key[0] as usize) % ENTRIES];
        if let Some(entry) = slot
            && entry.key == key
        {
            return (entry.ja4, Lookup::Hit);
        }
        let ja4 = Ja4::of(hello, transport);
        *slot = Some(Entry { key, ja4 });
        (ja4, Lookup::Miss)
    }
}

/// The canonical text of what determines a hello's fingerprint.
struct KeyText {
    bytes: [u8; KEY_TEXT],
    len: usize,
}

impl KeyText {
    fn put(&mut self, bytes: &[u8]) -> Option<()> {
        let room = self.bytes.get_mut(self.len..self.len + bytes.len())?;
        room.copy_from_slice(bytes);
        self.len += bytes.len();
        Some(())
    }

    /// The non-GREASE values of `list`, in order, after their count.
    fn put_list(&mut self, list: &[u8]) -> Option<()> {
        let at = self.len;
        self.put(&[0, 0])?;
        let mut count: u16 = 0;
        for value in u16_pairs(list).filter(|&v| !is_grease(v)) {
            self.put(&value.to_be_bytes())?;
            count = count.wrapping_add(1);
        }
        self.bytes[at..at + 2].copy_from_slice(&count.to_be_bytes());
        Some(())
    }
}

/// The 128-bit key of `hello` under `hasher`; `None` when the hello
/// cannot be described exactly (see the module doc).
fn key(hasher: &SipHasher13, hello: Ja4Input<'_>, transport: Transport) -> Option<[u64; 2]> {
    let mut low_types: u64 = 0;
    let mut high = [0u16; MAX_HIGH_EXTENSIONS];
    let mut high_len = 0;
    let mut count: u16 = 0;
    let mut signatures: &[u8] = &[];
    let mut versions: Option<SupportedVersions<'_>> = None;
    let mut alpn: Option<AlpnProtocols<'_>> = None;
    for (ext_type, data) in extensions(hello.extensions) {
        if is_grease(ext_type) {
            continue;
        }
        count = count.wrapping_add(1);
        if ext_type < 64 {
            let bit = 1u64 << ext_type;
            if low_types & bit != 0 {
                return None;
            }
            low_types |= bit;
        } else {
            let known = &high[..high_len];
            if known.contains(&ext_type) || high_len == MAX_HIGH_EXTENSIONS {
                return None;
            }
            let at = known.partition_point(|&t| t < ext_type);
            high.copy_within(at..high_len, at + 1);
            high[at] = ext_type;
            high_len += 1;
        }
        match ext_type {
            EXT_SIGNATURE_ALGORITHMS => signatures = signature_algorithms(data),
            EXT_SUPPORTED_VERSIONS => {
                versions = super::super::extensions::supported_versions(data).ok();
            }
            EXT_ALPN => alpn = super::super::extensions::alpn(data).ok(),
            _ => {}
        }
    }
    let version = match versions {
        Some(offer) => offer.iter().filter(|&v| !is_grease(v)).max().unwrap_or(0),
        None => hello.legacy_version,
    };
    let mut text = KeyText {
        bytes: [0; KEY_TEXT],
        len: 0,
    };
    text.put(&[transport.letter()])?;
    text.put(version_code(version))?;
    text.put(&alpn_chars(alpn))?;
    text.put(&count.to_be_bytes())?;
    text.put(&low_types.to_be_bytes())?;
    // The mask's population and `count` say how many high types follow.
    for ext_type in &high[..high_len] {
        text.put(&ext_type.to_be_bytes())?;
    }
    text.put_list(hello.cipher_suites)?;
    text.put_list(signatures)?;
    let (k0, k1) = hasher.hash(&text.bytes[..text.len]).as_u64();
    Some([k0, k1])
}
