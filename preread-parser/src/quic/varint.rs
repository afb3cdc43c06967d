//! QUIC variable-length integers (RFC 9000 §16): the two high bits of the
//! first byte give the length (1, 2, 4 or 8 bytes), the rest the value.
//!
//! Owns: reading one from the front of a slice, writing one. Must never:
//! read past the slice, or write a value that does not fit 62 bits.

/// The largest value a varint holds, 2^62 - 1.
pub const MAX: u64 = (1 << 62) - 1;

/// The varint at the front of `input` and the bytes after it; `None` when
/// `input` stops inside it.
pub fn read(input: &[u8]) -> Option<(u64, &[u8])> {
    let first = *input.first()?;
    let len = 1usize << (first >> 6);
    let bytes = input.get(..len)?;
    let value = bytes[1..]
        .iter()
        .fold(u64::from(first & 0x3f), |acc, &b| (acc << 8) | u64::from(b));
    Some((value, &input[len..]))
}

/// Appends `value` in its shortest encoding; a value past [`MAX`] is
/// written as [`MAX`] (no QUIC field the crate writes comes near it).
pub fn write(out: &mut Vec<u8>, value: u64) {
    let value = value.min(MAX);
    match value {
        0..=0x3f => out.push(value as u8),
        0x40..=0x3fff => out.extend_from_slice(&(value as u16 | 0x4000).to_be_bytes()),
        0x4000..=0x3fff_ffff => {
            out.extend_from_slice(&(value as u32 | 0x8000_0000).to_be_bytes());
        }
        _ => out.extend_from_slice(&(value | 0xc000_0000_0000_0000).to_be_bytes()),
    }
}

/// Appends `value` in at least two bytes: a packet's Length field is
/// written before the payload is sealed, so it takes a fixed width, as
/// every implementation does (RFC 9001 Appendix A).
pub(crate) fn write_at_least_2(out: &mut Vec<u8>, value: u64) {
    if value <= 0x3fff {
        out.extend_from_slice(&(value as u16 | 0x4000).to_be_bytes());
    } else {
        write(out, value);
    }
}

#[cfg(test)]
mod tests {
    use super::{MAX, read, write};

    /// RFC 9000 §A.1's examples, both ways.
    #[test]
    fn rfc_9000_examples() {
        let cases: [(&[u8], u64); 4] = [
            (
                &[0xc2, 0x19, 0x7c, 0x5e, 0xff, 0x14, 0xe8, 0x8c],
                151_288_809_941_952_652,
            ),
            (&[0x9d, 0x7f, 0x3e, 0x7d], 494_878_333),
            (&[0x7b, 0xbd], 15_293),
            (&[0x25], 37),
        ];
        for (bytes, value) in cases {
            assert_eq!(read(bytes), Some((value, &[][..])));
            let mut out = Vec::new();
            write(&mut out, value);
            assert_eq!(out, bytes);
        }
        // A non-minimal encoding still reads (RFC 9000 allows it for values).
        assert_eq!(read(&[0x40, 0x25, 7]), Some((37, &[7][..])));
    }

    #[test]
    fn short_input_is_none() {
        assert_eq!(read(&[]), None);
        assert_eq!(read(&[0x7b]), None);
        assert_eq!(read(&[0xc2, 0, 0, 0, 0, 0, 0]), None);
        let mut out = Vec::new();
        write(&mut out, u64::MAX);
        assert_eq!(read(&out), Some((MAX, &[][..])));
    }
}
