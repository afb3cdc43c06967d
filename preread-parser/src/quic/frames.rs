//! The frames of an opened Initial packet (RFC 9000 §12.4, §19): the walk
//! the proxy needs, and the few frames it writes.
//!
//! Owns: [`walk`] (PADDING, PING, ACK, CRYPTO and CONNECTION_CLOSE; any
//! other type in an Initial is a protocol violation, RFC 9000 §17.2.2) and
//! the builders [`write_crypto`], [`write_padding`] and
//! [`write_connection_close`]. Must never: accept a frame type by a
//! longer-than-shortest encoding (RFC 9000 §12.4 lets a receiver refuse
//! it, and every type here fits one byte).

use super::error::FrameFault;
use super::varint;

const PADDING: u8 = 0x00;
const PING: u8 = 0x01;
const ACK: u8 = 0x02;
const ACK_ECN: u8 = 0x03;
const CRYPTO: u8 = 0x06;
const CONNECTION_CLOSE: u8 = 0x1c;
const CONNECTION_CLOSE_APP: u8 = 0x1d;

/// A frame of an Initial packet, as far as the proxy reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frame<'a> {
    /// A run of PADDING frames (or PING, or ACK): nothing to act on.
    Ignored,
    /// CRYPTO: `data` at `offset` of the Initial CRYPTO stream.
    Crypto {
        /// Stream offset of the first byte.
        offset: u64,
        /// The bytes.
        data: &'a [u8],
    },
    /// CONNECTION_CLOSE: the client gives up, with this error code.
    ConnectionClose(u64),
}

/// Calls `each` with every frame of `payload`, in order, and stops at the
/// first error (the walk's, or `each`'s).
pub fn walk<'a, E: From<FrameFault>>(
    mut payload: &'a [u8],
    mut each: impl FnMut(Frame<'a>) -> Result<(), E>,
) -> Result<(), E> {
    if payload.is_empty() {
        return Err(FrameFault::Empty.into());
    }
    let truncated = || E::from(FrameFault::Truncated);
    while let Some((&frame_type, rest)) = payload.split_first() {
        let (frame, rest) = match frame_type {
            PADDING => (Frame::Ignored, &rest[padding_run(rest)..]),
            PING => (Frame::Ignored, rest),
            ACK | ACK_ECN => (
                Frame::Ignored,
                ack(rest, frame_type == ACK_ECN).ok_or_else(truncated)?,
            ),
            CRYPTO => {
                let (offset, rest) = varint::read(rest).ok_or_else(truncated)?;
                let (data, rest) = length_prefixed(rest).ok_or_else(truncated)?;
                (Frame::Crypto { offset, data }, rest)
            }
            CONNECTION_CLOSE | CONNECTION_CLOSE_APP => {
                let (code, mut rest) = varint::read(rest).ok_or_else(truncated)?;
                if frame_type == CONNECTION_CLOSE {
                    rest = varint::read(rest).ok_or_else(truncated)?.1;
                }
                let (_reason, rest) = length_prefixed(rest).ok_or_else(truncated)?;
                (Frame::ConnectionClose(code), rest)
            }
            other => {
                let frame_type = varint::read(payload).map_or(u64::from(other), |(t, _)| t);
                return Err(FrameFault::NotInInitial(frame_type).into());
            }
        };
        each(frame)?;
        payload = rest;
    }
    Ok(())
}

/// How many PADDING bytes `bytes` starts with. A client pads each
/// Initial datagram to 1,200 bytes, so a small hello leaves hundreds:
/// they are compared 16 at a time (a byte-at-a-time scan was a tenth of
/// a flow's decision, doc/performance.md, "QUIC relay").
fn padding_run(bytes: &[u8]) -> usize {
    let blocks = bytes.chunks_exact(16);
    let zero =
        |chunk: &[u8]| <[u8; 16]>::try_from(chunk).is_ok_and(|c| u128::from_ne_bytes(c) == 0);
    let whole = blocks.take_while(|chunk| zero(chunk)).count() * 16;
    let tail = bytes[whole..].iter().take_while(|&&b| b == PADDING).count();
    whole + tail
}

/// The rest of an ACK frame's fields (RFC 9000 §19.3).
fn ack(input: &[u8], ecn: bool) -> Option<&[u8]> {
    let (_largest, rest) = varint::read(input)?;
    let (_delay, rest) = varint::read(rest)?;
    let (ranges, rest) = varint::read(rest)?;
    let (_first, mut rest) = varint::read(rest)?;
    // Each range is at least two bytes: a count past what is left cannot
    // be walked, and the loop stops at the first short read anyway.
    for _ in 0..ranges {
        let (_gap, after) = varint::read(rest)?;
        let (_len, after) = varint::read(after)?;
        rest = after;
    }
    if ecn {
        for _ in 0..3 {
            rest = varint::read(rest)?.1;
        }
    }
    Some(rest)
}

fn length_prefixed(input: &[u8]) -> Option<(&[u8], &[u8])> {
    let (len, rest) = varint::read(input)?;
    let len = usize::try_from(len).ok()?;
    Some((rest.get(..len)?, &rest[len..]))
}

/// Appends a CRYPTO frame carrying `data` at `offset`.
pub fn write_crypto(out: &mut Vec<u8>, offset: u64, data: &[u8]) {
    out.push(CRYPTO);
    varint::write(out, offset);
    varint::write(out, data.len() as u64);
    out.extend_from_slice(data);
}

/// Appends `len` bytes of PADDING frames.
pub fn write_padding(out: &mut Vec<u8>, len: usize) {
    out.resize(out.len() + len, PADDING);
}

/// Appends a transport CONNECTION_CLOSE (type 0x1c) with `error_code`,
/// the type of the frame that caused it, and a reason phrase.
pub fn write_connection_close(out: &mut Vec<u8>, error_code: u64, frame_type: u64, reason: &[u8]) {
    out.push(CONNECTION_CLOSE);
    varint::write(out, error_code);
    varint::write(out, frame_type);
    varint::write(out, reason.len() as u64);
    out.extend_from_slice(reason);
}

#[cfg(test)]
mod tests {
    use super::{Frame, padding_run, walk, write_connection_close, write_crypto, write_padding};
    use crate::quic::error::FrameFault;

    fn frames(payload: &[u8]) -> Result<Vec<Frame<'_>>, FrameFault> {
        let mut out = Vec::new();
        walk(payload, |frame| {
            out.push(frame);
            Ok::<_, FrameFault>(())
        })?;
        Ok(out)
    }

    #[test]
    fn a_padding_run_is_counted_to_its_first_other_byte_at_any_length() {
        for zeros in [0, 1, 15, 16, 17, 31, 32, 33, 700] {
            let mut bytes = vec![0; zeros];
            assert_eq!(padding_run(&bytes), zeros, "{zeros} zeros alone");
            bytes.extend([0x06, 0x00]);
            assert_eq!(padding_run(&bytes), zeros, "{zeros} zeros, then CRYPTO");
        }
    }

    #[test]
    fn walks_what_an_initial_carries() {
        let mut payload = vec![0x01]; // PING
        payload.extend([0x02, 0x05, 0x00, 0x01, 0x00, 0x01, 0x01]); // ACK, one more range
        payload.extend([0x03, 0x05, 0x00, 0x00, 0x00, 0x01, 0x02, 0x03]); // ACK_ECN
        write_crypto(&mut payload, 300, b"hello");
        write_padding(&mut payload, 3);
        write_connection_close(&mut payload, 0x178, 0x06, b"bye");
        payload.extend([0x1d, 0x00, 0x00]); // application close, no reason
        let walked = frames(&payload);
        assert_eq!(
            walked,
            Ok(vec![
                Frame::Ignored,
                Frame::Ignored,
                Frame::Ignored,
                Frame::Crypto {
                    offset: 300,
                    data: b"hello"
                },
                Frame::Ignored,
                Frame::ConnectionClose(0x178),
                Frame::ConnectionClose(0),
            ])
        );
    }

    #[test]
    fn refuses_what_an_initial_may_not_carry() {
        assert_eq!(frames(&[]), Err(FrameFault::Empty));
        assert_eq!(frames(&[0x08, 0, 0]), Err(FrameFault::NotInInitial(0x08)));
        assert_eq!(frames(&[0x00, 0x30]), Err(FrameFault::NotInInitial(0x30)));
        // PING spelled in two bytes is not PING.
        assert_eq!(frames(&[0x40, 0x01]), Err(FrameFault::NotInInitial(1)));
        assert_eq!(
            frames(&[0x06, 0x00, 0x05, 1, 2]),
            Err(FrameFault::Truncated)
        );
        assert_eq!(
            frames(&[0x02, 0x00, 0x00, 0x3f, 0x00]),
            Err(FrameFault::Truncated)
        );
        assert_eq!(frames(&[0x1c, 0x00]), Err(FrameFault::Truncated));
    }
}
