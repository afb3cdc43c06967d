//! Initial packet protection keys (RFC 9001 §5.2, RFC 9369 §3.3): derived
//! from the client's first Destination Connection ID, which anyone on the
//! path can read, so the proxy can open the client's Initials and seal a
//! server Initial of its own.
//!
//! Owns: the derivation (HKDF-Extract with the version's salt, then
//! HKDF-Expand-Label for the side's secret and its key, IV and
//! header-protection key) and [`PacketKeys`]. The primitives are `ring`'s
//! (HKDF-SHA256, AES-128-GCM, AES-128 header protection): already in the
//! tree through rustls, audited, constant-time; nothing here is a cipher.
//! Must never: derive from anything but the DCID and the version.

use core::fmt;
use std::sync::LazyLock;

use ring::aead::{self, quic};
use ring::hkdf;

use super::version::Version;

/// Length of the AEAD key and the header-protection key (AES-128).
const KEY_LEN: usize = 16;
/// Length of the AEAD IV (RFC 9001 §5.3).
const IV_LEN: usize = 12;
/// Length of a side's Initial secret (SHA-256).
const SECRET_LEN: usize = 32;

/// Which endpoint's keys: each side seals with its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The client's (`client in`): what opens its Initials.
    Client,
    /// The server's (`server in`): what seals a reply the client can open.
    Server,
}

/// One side's Initial keys for one connection.
pub struct PacketKeys {
    pub(crate) aead: aead::LessSafeKey,
    pub(crate) iv: [u8; IV_LEN],
    pub(crate) hp: quic::HeaderProtectionKey,
}

/// The raw bytes behind [`PacketKeys`], for the RFC's test vectors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RawKeys {
    pub(crate) key: [u8; KEY_LEN],
    pub(crate) iv: [u8; IV_LEN],
    pub(crate) hp: [u8; KEY_LEN],
}

impl PacketKeys {
    /// `side`'s Initial keys for a connection whose client chose `dcid` as
    /// the Destination Connection ID of its first Initial.
    pub fn initial(version: Version, dcid: &[u8], side: Side) -> Self {
        Self::from_raw(&derive(version, dcid, side))
    }

    fn from_raw(raw: &RawKeys) -> Self {
        // The lengths are the algorithms' own constants: these cannot fail.
        let aead =
            aead::UnboundKey::new(&aead::AES_128_GCM, &raw.key).expect("a 16-byte AES-128-GCM key");
        let hp = quic::HeaderProtectionKey::new(&quic::AES_128, &raw.hp)
            .expect("a 16-byte AES-128 header-protection key");
        Self {
            aead: aead::LessSafeKey::new(aead),
            iv: raw.iv,
            hp,
        }
    }

    /// The AEAD nonce of packet number `pn` (RFC 9001 §5.3).
    pub(crate) fn nonce(&self, pn: u64) -> aead::Nonce {
        let mut nonce = self.iv;
        for (byte, pn_byte) in nonce[IV_LEN - 8..].iter_mut().zip(pn.to_be_bytes()) {
            *byte ^= pn_byte;
        }
        aead::Nonce::assume_unique_for_key(nonce)
    }
}

/// Keys are never printed.
impl fmt::Debug for PacketKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PacketKeys(..)")
    }
}

/// An output length for `ring`'s HKDF-Expand.
struct Len(usize);

impl hkdf::KeyType for Len {
    fn len(&self) -> usize {
        self.0
    }
}

/// HKDF-Expand-Label (RFC 8446 §7.1) with an empty context.
fn expand_label(prk: &hkdf::Prk, label: &[u8], out: &mut [u8]) {
    let len = (out.len() as u16).to_be_bytes();
    let label_len = [(b"tls13 ".len() + label.len()) as u8];
    let info: [&[u8]; 5] = [&len, &label_len, b"tls13 ", label, &[0]];
    // Outputs of at most 32 bytes, far below HKDF's 255 * 32: infallible.
    prk.expand(&info, Len(out.len()))
        .and_then(|okm| okm.fill(out))
        .expect("an HKDF-SHA256 output of at most 32 bytes");
}

/// The version's Initial salt, as HKDF-Extract's HMAC key: the same for
/// every flow, so its key schedule (two SHA-256 blocks, a tenth of a
/// flow's derivation) is computed once per process.
fn salt(version: Version) -> &'static hkdf::Salt {
    static V1: LazyLock<hkdf::Salt> =
        LazyLock::new(|| hkdf::Salt::new(hkdf::HKDF_SHA256, Version::V1.initial_salt()));
    static V2: LazyLock<hkdf::Salt> =
        LazyLock::new(|| hkdf::Salt::new(hkdf::HKDF_SHA256, Version::V2.initial_salt()));
    match version {
        Version::V1 => &V1,
        Version::V2 => &V2,
    }
}

pub(crate) fn derive(version: Version, dcid: &[u8], side: Side) -> RawKeys {
    let initial = salt(version).extract(dcid);
    let mut secret = [0; SECRET_LEN];
    let side_label: &[u8] = match side {
        Side::Client => b"client in",
        Side::Server => b"server in",
    };
    expand_label(&initial, side_label, &mut secret);
    let prk = hkdf::Prk::new_less_safe(hkdf::HKDF_SHA256, &secret);
    let [key_label, iv_label, hp_label] = version.labels();
    let mut raw = RawKeys {
        key: [0; KEY_LEN],
        iv: [0; IV_LEN],
        hp: [0; KEY_LEN],
    };
    expand_label(&prk, key_label, &mut raw.key);
    expand_label(&prk, iv_label, &mut raw.iv);
    expand_label(&prk, hp_label, &mut raw.hp);
    raw
}

#[cfg(test)]
mod tests {
    use super::{Side, derive};
    use crate::quic::test_vectors::{DCID, unhex};
    use crate::quic::version::Version;

    fn keys(version: Version, side: Side) -> [Vec<u8>; 3] {
        let raw = derive(version, &unhex(DCID), side);
        [raw.key.to_vec(), raw.iv.to_vec(), raw.hp.to_vec()]
    }

    /// RFC 9001 A.1.
    #[test]
    fn rfc_9001_keys() {
        let expect = |hex: [&str; 3]| hex.map(unhex);
        assert_eq!(
            keys(Version::V1, Side::Client),
            expect([
                "1f369613dd76d5467730efcbe3b1a22d",
                "fa044b2f42a3fd3b46fb255c",
                "9f50449e04a0e810283a1e9933adedd2",
            ])
        );
        assert_eq!(
            keys(Version::V1, Side::Server),
            expect([
                "cf3a5331653c364c88f0f379b6067e37",
                "0ac1493ca1905853b0bba03e",
                "c206b8d9b9f0f37644430b490eeaa314",
            ])
        );
    }

    /// RFC 9369 A.1.
    #[test]
    fn rfc_9369_keys() {
        let expect = |hex: [&str; 3]| hex.map(unhex);
        assert_eq!(
            keys(Version::V2, Side::Client),
            expect([
                "8b1a0bc121284290a29e0971b5cd045d",
                "91f73e2351d8fa91660e909f",
                "45b95e15235d6f45a6b19cbcb0294ba9",
            ])
        );
        assert_eq!(
            keys(Version::V2, Side::Server),
            expect([
                "82db637861d55e1d011f19ea71d5d2a7",
                "dd13c276499c0249d3310652",
                "edf6d05c83121201b436e16877593c3a",
            ])
        );
    }
}
