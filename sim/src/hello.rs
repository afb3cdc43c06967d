//! ClientHello bytes for the generator: a builder of handshake messages and
//! the record layer that carries them.
//!
//! Owns: [`HelloSpec`] (a ClientHello with a chosen name, ALPN offer, ECH
//! extension, size and optional fault), [`Record`] and [`fragment`] (one
//! handshake message re-framed over any number of records with random
//! record versions), and [`split_flight`] (the inverse: the message inside
//! the records of a captured first flight). Must never: call the parser it
//! is meant to test; what these bytes mean is known by construction.

use crate::rng::Rng;

/// TLS content type of a handshake record.
pub const CONTENT_HANDSHAKE: u8 = 22;
/// TLS content type of a ChangeCipherSpec record.
pub const CONTENT_CCS: u8 = 20;
/// TLS content type of an application-data record.
pub const CONTENT_APPLICATION_DATA: u8 = 23;
/// Largest record payload RFC 8446 §5.1 allows.
pub const MAX_RECORD: usize = 16_384;
/// A record header: type, version, length.
pub const RECORD_HEADER: usize = 5;

/// One TLS record as the generator writes it. `declared` is the length
/// field, which an adversarial record may set apart from the payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Content type (22 for the ClientHello's records).
    pub content_type: u8,
    /// `legacy_record_version`: major, minor.
    pub version: [u8; 2],
    /// The length field.
    pub declared: u16,
    /// The bytes after the header.
    pub payload: Vec<u8>,
}

impl Record {
    /// A handshake record carrying `payload`, version 3.`minor`.
    pub fn handshake(payload: Vec<u8>, minor: u8) -> Self {
        Self {
            content_type: CONTENT_HANDSHAKE,
            version: [3, minor],
            declared: u16::try_from(payload.len()).unwrap_or(u16::MAX),
            payload,
        }
    }

    /// A ChangeCipherSpec record, as TLS 1.3 middlebox compatibility sends it.
    pub fn change_cipher_spec() -> Self {
        Self {
            content_type: CONTENT_CCS,
            version: [3, 3],
            declared: 1,
            payload: vec![1],
        }
    }

    /// Appends the record's bytes to `out`.
    pub fn write(&self, out: &mut Vec<u8>) {
        out.push(self.content_type);
        out.extend_from_slice(&self.version);
        out.extend_from_slice(&self.declared.to_be_bytes());
        out.extend_from_slice(&self.payload);
    }
}

/// The bytes of `records`, in order.
pub fn serialize(records: &[Record]) -> Vec<u8> {
    let mut out = Vec::with_capacity(
        records
            .iter()
            .map(|r| RECORD_HEADER + r.payload.len())
            .sum(),
    );
    for record in records {
        record.write(&mut out);
    }
    out
}

/// A random `legacy_record_version` minor byte: mostly what clients send
/// (1 for TLS 1.0, which every captured client uses), sometimes anything,
/// since RFC 8446 says the field is ignored.
fn record_minor(rng: &mut Rng) -> u8 {
    match rng.below(10) {
        0..=4 => 1,
        5 => 0,
        6 => 2,
        7 => 3,
        8 => 4,
        _ => rng.next_u64() as u8,
    }
}

/// A cut point inside a message of `len` bytes (`1..len`), biased towards
/// the places where a framing bug would hide: inside the 4-byte handshake
/// header, one byte from either end, and anywhere.
fn cut_point(rng: &mut Rng, len: usize) -> usize {
    debug_assert!(len >= 2);
    match rng.below(10) {
        0..=1 => rng.range(1, 4.min(len - 1)),
        2 => rng.range(len.saturating_sub(4).max(1), len - 1),
        _ => rng.range(1, len - 1),
    }
}

/// Re-frames one handshake message over 1 to `max_records` records (more
/// when the message needs them: no record carries over 2^14 bytes), cut at
/// random points, each with a random record version.
pub fn fragment(message: &[u8], rng: &mut Rng, max_records: usize) -> Vec<Record> {
    let len = message.len();
    let mut cuts = Vec::new();
    if len >= 2 {
        let extra = rng.below(max_records.max(1)).min(len - 1);
        for _ in 0..extra {
            cuts.push(cut_point(rng, len));
        }
    }
    cuts.push(0);
    cuts.push(len);
    cuts.sort_unstable();
    cuts.dedup();
    // No piece may exceed the record limit: split long ones at the limit.
    let mut bounds = vec![0];
    for pair in cuts.windows(2) {
        let (mut start, end) = (pair[0], pair[1]);
        while end - start > MAX_RECORD {
            start += MAX_RECORD;
            bounds.push(start);
        }
        bounds.push(end);
    }
    bounds
        .windows(2)
        .map(|w| Record::handshake(message[w[0]..w[1]].to_vec(), record_minor(rng)))
        .collect()
}

/// Re-frames one handshake message into records of 1 to `most` bytes
/// each: the hostile framing that the parser's cursor keeps linear, over
/// many records and many reads.
pub fn tiny_records(message: &[u8], rng: &mut Rng, most: usize) -> Vec<Record> {
    let mut records = Vec::new();
    let mut at = 0;
    while at < message.len() {
        let end = (at + rng.range(1, most.max(1))).min(message.len());
        records.push(Record::handshake(
            message[at..end].to_vec(),
            record_minor(rng),
        ));
        at = end;
    }
    records
}

/// The one-record framing a client normally uses, version 3.1.
pub fn single_record(message: &[u8]) -> Vec<Record> {
    message
        .chunks(MAX_RECORD)
        .map(|chunk| Record::handshake(chunk.to_vec(), 1))
        .collect()
}

/// The handshake message carried by the records at the start of `tls`, and
/// the offset just past its last record. `None` unless the framing is
/// clean: handshake records of major version 3, lengths 1..=2^14, the
/// message ending exactly with a record. The body is not looked at, so a
/// message with a malformed body is found too.
pub fn split_flight(tls: &[u8]) -> Option<(Vec<u8>, usize)> {
    let mut pos = 0;
    let mut message = Vec::new();
    loop {
        let header = tls.get(pos..pos + RECORD_HEADER)?;
        if header[0] != CONTENT_HANDSHAKE || header[1] != 3 {
            return None;
        }
        let len = usize::from(u16::from_be_bytes([header[3], header[4]]));
        if len == 0 || len > MAX_RECORD {
            return None;
        }
        message.extend_from_slice(tls.get(pos + RECORD_HEADER..pos + RECORD_HEADER + len)?);
        pos += RECORD_HEADER + len;
        if message.len() >= 4 {
            let total = 4
                + (usize::from(message[1]) << 16
                    | usize::from(message[2]) << 8
                    | usize::from(message[3]));
            if message.len() == total {
                return Some((message, pos));
            }
            if message.len() > total {
                return None;
            }
        }
    }
}

/// A deliberate defect in a built ClientHello; each one makes the parser
/// refuse the message as `MalformedHandshake`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HelloFault {
    /// One extension type appears twice (RFC 8446 §4.2).
    DuplicateExtension,
    /// The handshake type is not ClientHello (1).
    NotClientHello(u8),
    /// The extensions block's length field is off by a few bytes.
    ExtensionsLengthLie,
    /// A session id longer than 32 bytes (lengths consistent).
    SessionIdTooLong,
    /// An ALPN list holding an empty protocol name.
    EmptyAlpnProtocol,
    /// A `server_name` extension with an empty name list.
    EmptyServerNameList,
    /// A `host_name` with a NUL byte inside it.
    NulInHostName,
}

impl HelloFault {
    /// Every fault, for the directed generator.
    pub const ALL: [Self; 7] = [
        Self::DuplicateExtension,
        Self::NotClientHello(2),
        Self::ExtensionsLengthLie,
        Self::SessionIdTooLong,
        Self::EmptyAlpnProtocol,
        Self::EmptyServerNameList,
        Self::NulInHostName,
    ];
}

/// What a built ClientHello carries.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HelloSpec {
    /// The raw `host_name` (not normalized), or no `server_name` at all.
    pub sni: Option<Vec<u8>>,
    /// The ALPN offer in preference order, or no ALPN extension.
    pub alpn: Option<Vec<Vec<u8>>>,
    /// An outer `encrypted_client_hello` extension.
    pub ech: bool,
    /// A padding extension of this many zero bytes.
    pub padding: Option<usize>,
    /// Opaque GREASE-style extensions of unknown types.
    pub grease: usize,
    /// Length of the legacy session id (0..=32 for a valid hello).
    pub session_id: usize,
    /// Number of cipher suites (at least 1).
    pub ciphers: usize,
    /// A defect that makes the message malformed.
    pub fault: Option<HelloFault>,
}

impl HelloSpec {
    /// A random valid spec with this name and offer.
    pub fn random(rng: &mut Rng, sni: Option<Vec<u8>>, alpn: Option<Vec<Vec<u8>>>) -> Self {
        let padding = match rng.below(10) {
            0..=5 => None,
            6..=8 => Some(rng.range(0, 600)),
            _ => Some(rng.range(600, 6_000)),
        };
        let any_len = rng.range(1, 32);
        let session_id = *rng.pick(&[0, 32, 32, any_len]);
        Self {
            sni,
            alpn,
            ech: rng.chance(15),
            padding,
            grease: rng.below(3),
            session_id,
            ciphers: rng.range(1, 16),
            fault: None,
        }
    }

    /// The handshake message (4-byte header and body).
    pub fn message(&self, rng: &mut Rng) -> Vec<u8> {
        let mut extensions: Vec<(u16, Vec<u8>)> = Vec::new();
        if let Some(name) = &self.sni {
            let name: Vec<u8> = if self.fault == Some(HelloFault::NulInHostName) {
                let mut n = name.clone();
                n.insert(rng.range(1, n.len().max(1)).min(n.len()), 0);
                n
            } else {
                name.clone()
            };
            let mut data = Vec::new();
            if self.fault == Some(HelloFault::EmptyServerNameList) {
                data.extend_from_slice(&[0, 0]);
            } else {
                data.extend_from_slice(&u16_len(name.len() + 3));
                data.push(0);
                data.extend_from_slice(&u16_len(name.len()));
                data.extend_from_slice(&name);
            }
            extensions.push((0x0000, data));
        }
        if let Some(protocols) = &self.alpn {
            let mut list = Vec::new();
            for p in protocols {
                list.push(p.len() as u8);
                list.extend_from_slice(p);
            }
            if self.fault == Some(HelloFault::EmptyAlpnProtocol) {
                list.push(0);
            }
            let mut data = u16_len(list.len()).to_vec();
            data.extend(list);
            extensions.push((0x0010, data));
        } else if self.fault == Some(HelloFault::EmptyAlpnProtocol) {
            extensions.push((0x0010, vec![0, 1, 0]));
        }
        extensions.push((0x002b, vec![4, 3, 4, 3, 3]));
        extensions.push((0x000a, vec![0, 4, 0, 0x1d, 0, 0x17]));
        extensions.push((0x0033, {
            let mut ks = vec![0, 36, 0, 0x1d, 0, 32];
            ks.extend(rng.bytes(32));
            ks
        }));
        if self.ech {
            extensions.push((0xfe0d, vec![0, 0, 1, 0, 1, 0x2a, 0, 0, 0, 0]));
        }
        let mut grease_types: Vec<u16> =
            (0..16u16).map(|i| (i << 12) | (i << 4) | 0x0a0a).collect();
        rng.shuffle(&mut grease_types);
        for &t in grease_types.iter().take(self.grease) {
            let n = rng.range(0, 8);
            extensions.push((t, rng.bytes(n)));
        }
        rng.shuffle(&mut extensions);
        if let Some(n) = self.padding {
            // Padding goes last, as clients put it.
            extensions.push((0x0015, vec![0; n]));
        }
        if self.fault == Some(HelloFault::DuplicateExtension) {
            let copy = extensions[rng.below(extensions.len())].clone();
            let at = rng.range(0, extensions.len());
            extensions.insert(at, copy);
        }
        let mut block = Vec::new();
        for (t, data) in &extensions {
            block.extend_from_slice(&t.to_be_bytes());
            block.extend_from_slice(&u16_len(data.len()));
            block.extend_from_slice(data);
        }

        let mut body = vec![3, 3];
        body.extend(rng.bytes(32));
        let sid = if self.fault == Some(HelloFault::SessionIdTooLong) {
            rng.range(33, 255)
        } else {
            self.session_id.min(32)
        };
        body.push(sid as u8);
        body.extend(rng.bytes(sid));
        let ciphers = self.ciphers.max(1);
        body.extend_from_slice(&u16_len(2 * ciphers));
        for i in 0..ciphers {
            body.extend_from_slice(&[0x13, (i % 5) as u8 + 1]);
        }
        body.extend_from_slice(&[1, 0]);
        let declared = if self.fault == Some(HelloFault::ExtensionsLengthLie) {
            let delta = rng.range(1, 3);
            if rng.chance(50) {
                block.len() + delta
            } else {
                block.len().saturating_sub(delta)
            }
        } else {
            block.len()
        };
        body.extend_from_slice(&u16_len(declared));
        body.extend(block);

        let kind = match self.fault {
            Some(HelloFault::NotClientHello(t)) => t,
            _ => 1,
        };
        let mut message = vec![kind];
        message.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
        message.extend(body);
        message
    }
}

fn u16_len(n: usize) -> [u8; 2] {
    u16::try_from(n).unwrap_or(u16::MAX).to_be_bytes()
}

#[cfg(test)]
mod tests {
    use super::{HelloSpec, fragment, serialize, split_flight};
    use crate::rng::Rng;

    #[test]
    fn fragments_reassemble_to_the_message() {
        let mut rng = Rng::new(3);
        for seed in 0..200 {
            let spec = HelloSpec::random(&mut rng, Some(b"a.example.com".to_vec()), None);
            let message = spec.message(&mut rng);
            let records = fragment(&message, &mut Rng::new(seed), 6);
            assert!(
                records
                    .iter()
                    .all(|r| !r.payload.is_empty() && r.payload.len() <= 16_384)
            );
            let bytes = serialize(&records);
            let (back, end) = split_flight(&bytes).expect("clean framing");
            assert_eq!(back, message);
            assert_eq!(end, bytes.len());
        }
    }
}
