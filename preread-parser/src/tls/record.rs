//! TLS record framing of the first flight: finds the records that carry the
//! ClientHello handshake message and proves it whole.
//!
//! Owns: the record-layer rules (content type, major version, record length
//! 1..=2^14), the handshake header (type ClientHello, 24-bit length) across
//! any record boundary, reassembly of a message split over records, and the
//! fewest bytes the lengths read so far still call for (against the
//! caller's limit, so that an announced length past it is known at once),
//! and the [`FrameCursor`] that lets a grown window resume past the
//! records already framed instead of walking them again.
//!
//! Must never: read past the record that completes the handshake message,
//! or past the length that proved the message cannot end within the limit;
//! report an error for a window that is merely short, or report "incomplete"
//! for bytes that can never become TLS.

use nom::number::streaming::{be_u8, be_u16};

use super::{
    HANDSHAKE_HEADER_LEN, HandshakeFault, MAX_RECORD_LEN, Needed, RECORD_HEADER_LEN, RecordFault,
    TlsError,
};

const CONTENT_TYPE_HANDSHAKE: u8 = 22;
pub(super) const HANDSHAKE_TYPE_CLIENT_HELLO: u8 = 1;
const TLS_MAJOR_VERSION: u8 = 3;

/// Where the records carrying a whole ClientHello lie in the window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Framed {
    pub(super) records: usize,
    /// Offset of the first record's payload (where the handshake header starts).
    pub(super) first_payload: usize,
    /// The handshake message length, header included.
    pub(super) handshake_len: usize,
    /// Offset just past the last record of the ClientHello.
    pub(super) end: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Framing {
    Complete(Framed),
    Incomplete(Needed),
}

enum Header {
    PayloadLen(usize),
    Short,
}

/// Reads one record header with nom's streaming parsers, deciding on each
/// byte as soon as it arrives.
fn record_header(rest: &[u8], first: bool) -> Result<Header, TlsError> {
    let Ok((rest, content_type)) = be_u8::<_, ()>(rest) else {
        return Ok(Header::Short);
    };
    if content_type != CONTENT_TYPE_HANDSHAKE {
        return Err(if first {
            TlsError::NotTls
        } else {
            TlsError::MalformedRecord(RecordFault::UnexpectedContentType(content_type))
        });
    }
    let Ok((rest, major)) = be_u8::<_, ()>(rest) else {
        return Ok(Header::Short);
    };
    if major != TLS_MAJOR_VERSION {
        return Err(if first {
            TlsError::NotTls
        } else {
            TlsError::MalformedRecord(RecordFault::BadVersion(major))
        });
    }
    // The minor version is legacy_record_version: RFC 8446 §5.1 says to ignore it.
    let Ok((rest, _minor)) = be_u8::<_, ()>(rest) else {
        return Ok(Header::Short);
    };
    let Ok((_, len)) = be_u16::<_, ()>(rest) else {
        return Ok(Header::Short);
    };
    if len == 0 {
        return Err(TlsError::MalformedRecord(RecordFault::EmptyRecord));
    }
    if usize::from(len) > MAX_RECORD_LEN {
        return Err(TlsError::MalformedRecord(RecordFault::Oversized(len)));
    }
    Ok(Header::PayloadLen(usize::from(len)))
}

/// The 4-byte handshake header, gathered across record boundaries: its
/// bytes so far, big-endian in an integer (a byte array here would be
/// stored and reloaded with every record the cursor is copied past).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct HandshakeHeader {
    value: u32,
    seen: u8,
}

impl HandshakeHeader {
    /// Takes header bytes from the front of `payload`; returns the message
    /// length (header included) once all four are known.
    fn feed(&mut self, payload: &[u8]) -> Result<Option<usize>, TlsError> {
        let take = (HANDSHAKE_HEADER_LEN - usize::from(self.seen)).min(payload.len());
        for &byte in &payload[..take] {
            self.value = (self.value << 8) | u32::from(byte);
            self.seen += 1;
        }
        if self.seen == 0 {
            return Ok(None);
        }
        let msg_type = (self.value >> (8 * (u32::from(self.seen) - 1))) as u8;
        if msg_type != HANDSHAKE_TYPE_CLIENT_HELLO {
            return Err(HandshakeFault::NotClientHello(msg_type).into());
        }
        if usize::from(self.seen) < HANDSHAKE_HEADER_LEN {
            return Ok(None);
        }
        let body_len = (self.value & 0x00ff_ffff) as usize;
        Ok(Some(HANDSHAKE_HEADER_LEN + body_len))
    }
}

/// How far framing got on one connection's window in earlier calls: the
/// records already de-framed, which a grown window does not walk again.
///
/// Keep one per connection, start it with [`FrameCursor::default`], and
/// hand it to [`super::parse_client_hello_resuming`] with that connection's
/// window every time (the whole window, grown from the same first byte).
/// It only moves past whole records, so each answer is the one a fresh
/// parse of the same window gives; a window shorter than what it framed, or
/// another limit, starts it over from the first byte.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FrameCursor {
    /// The limit the records were framed against.
    limit: usize,
    /// Offset of the next record header.
    pos: usize,
    /// Handshake bytes in the records before `pos`.
    collected: usize,
    /// The handshake message length, once its header is in.
    handshake_len: Option<usize>,
    records: u32,
    header: HandshakeHeader,
}

/// Where the fewest bytes that could still complete the message end: past
/// the current record (ending at `record_end`), the `left` message bytes it
/// does not carry, each full record of them with its own header.
fn fewest_end(record_end: usize, left: usize) -> usize {
    let records = left.div_ceil(MAX_RECORD_LEN);
    record_end
        .saturating_add(left)
        .saturating_add(records.saturating_mul(RECORD_HEADER_LEN))
}

/// The answer once the lengths read prove the message cannot end within
/// the limit: it ends at `end` at the earliest, and that is past the limit.
fn beyond(window: &[u8], end: usize) -> Framing {
    Framing::Incomplete(Needed::at_least(end.saturating_sub(window.len()).max(1)))
}

/// Frames the ClientHello at the start of `window`, for a caller that never
/// holds more than `limit` bytes of it, from where `cursor` stopped.
///
/// As soon as a record length, or the handshake length, shows that the
/// message cannot end within `limit` bytes, the answer is `Incomplete` with
/// a count that takes the window past `limit`, and nothing after that
/// length is examined: the verdict does not depend on how much of the rest
/// arrived. Every other `Incomplete` count is lowered to what `limit`
/// leaves (at least 1), so the window plus the count passes `limit` exactly
/// when the message cannot fit in it.
pub(super) fn frame(
    window: &[u8],
    limit: usize,
    cursor: &mut FrameCursor,
) -> Result<Framing, TlsError> {
    let start = if cursor.limit != limit || cursor.pos > window.len() {
        FrameCursor {
            limit,
            ..FrameCursor::default()
        }
    } else {
        *cursor
    };
    // The walk keeps its cursor by value, in registers: written back once,
    // not stored and reloaded on every record.
    let (answer, reached) = walk(window, limit, start);
    *cursor = reached;
    answer
}

/// [`frame`] from `cursor`: the answer, and the cursor past the last
/// whole record.
fn walk(
    window: &[u8],
    limit: usize,
    mut cursor: FrameCursor,
) -> (Result<Framing, TlsError>, FrameCursor) {
    loop {
        if let Some(total) = cursor.handshake_len
            && cursor.collected >= total
        {
            if cursor.collected > total {
                return (Err(HandshakeFault::TrailingHandshakeData.into()), cursor);
            }
            let framed = Framed {
                records: cursor.records as usize,
                first_payload: RECORD_HEADER_LEN,
                handshake_len: total,
                end: cursor.pos,
            };
            return (Ok(Framing::Complete(framed)), cursor);
        }
        // Changes to a copy: the cursor moves only past a whole record.
        let mut next = cursor;
        let rest = &window[next.pos..];
        let payload_len = match record_header(rest, next.records == 0) {
            Ok(Header::PayloadLen(len)) => len,
            Ok(Header::Short) => {
                let short = RECORD_HEADER_LEN - rest.len();
                let message_left = next.handshake_len.map_or(0, |total| total - next.collected);
                return (Ok(within(window, short + message_left, limit)), cursor);
            }
            Err(error) => return (Err(error), cursor),
        };
        let start = next.pos + RECORD_HEADER_LEN;
        let record_end = start + payload_len;
        if record_end > limit {
            return (Ok(beyond(window, record_end)), cursor);
        }
        let available = payload_len.min(window.len() - start);
        let payload = &window[start..start + available];
        if next.handshake_len.is_none() {
            match next.header.feed(payload) {
                Ok(len) => next.handshake_len = len,
                Err(error) => return (Err(error), cursor),
            }
        }
        if let Some(total) = next.handshake_len {
            let end = fewest_end(
                record_end,
                total.saturating_sub(next.collected + payload_len),
            );
            if end > limit {
                return (Ok(beyond(window, end)), cursor);
            }
        }
        if available < payload_len {
            let record_left = payload_len - available;
            let message_left = next
                .handshake_len
                .map_or(0, |total| total.saturating_sub(next.collected + available));
            return (
                Ok(within(window, record_left.max(message_left), limit)),
                cursor,
            );
        }
        next.collected += payload_len;
        next.records = next.records.saturating_add(1);
        next.pos = record_end;
        cursor = next;
    }
}

/// An `Incomplete` count of `needed` more bytes, lowered to what `limit`
/// leaves: the lengths read so far do not exceed the limit, so only a
/// window already at it is beyond.
fn within(window: &[u8], needed: usize, limit: usize) -> Framing {
    Framing::Incomplete(Needed::at_least(needed).within(window.len(), limit))
}

/// Copies the handshake message of a multi-record ClientHello into `scratch`.
pub(super) fn reassemble(window: &[u8], framed: &Framed, scratch: &mut Vec<u8>) {
    scratch.clear();
    scratch.reserve(framed.handshake_len);
    let mut pos = 0;
    for _ in 0..framed.records {
        let len = usize::from(u16::from_be_bytes([window[pos + 3], window[pos + 4]]));
        let start = pos + RECORD_HEADER_LEN;
        scratch.extend_from_slice(&window[start..start + len]);
        pos = start + len;
    }
    debug_assert_eq!(pos, framed.end);
    debug_assert_eq!(scratch.len(), framed.handshake_len);
}
