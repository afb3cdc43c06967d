//! The frame format and its sans-io decoder: a 4-byte big-endian length,
//! then that many bytes of one protobuf message.
//!
//! Owns: turning a message into a frame ([`encode_frame`]) and a byte stream
//! back into messages ([`FrameDecoder`]), with the length cap checked as soon
//! as a header is complete, and the poisoning that follows a bad frame.
//!
//! Must never: touch a socket, block, or read the time; and never hand out a
//! frame that comes after a bad one.

use std::fmt;

use prost::Message;

use super::{COMPACT_MIN, ChannelError, DEFAULT_MAX_FRAME_LEN, HEADER_LEN, MAX_WIRE_LEN};

/// Encodes `msg` as one frame (header and payload). Refuses, before encoding
/// anything, a message whose payload would be over `max` (or over what a
/// 4-byte header can say).
pub fn encode_frame(msg: &impl Message, max: usize) -> Result<Vec<u8>, ChannelError> {
    let mut out = Vec::new();
    encode_frame_into(msg, max, &mut out)?;
    Ok(out)
}

/// Appends one frame to `out`; on error `out` is left as it was.
pub(super) fn encode_frame_into(
    msg: &impl Message,
    max: usize,
    out: &mut Vec<u8>,
) -> Result<(), ChannelError> {
    let max = max.min(MAX_WIRE_LEN);
    let len = msg.encoded_len();
    let too_large = ChannelError::FrameTooLarge { len, max };
    if len > max {
        return Err(too_large);
    }
    let Ok(header) = u32::try_from(len) else {
        return Err(too_large);
    };
    let before = out.len();
    out.reserve(HEADER_LEN.saturating_add(len));
    out.extend_from_slice(&header.to_be_bytes());
    // A Vec grows on demand, so `encode` only fails when the buffer cannot
    // grow any more: that is still "too large", never a half frame on the wire.
    if msg.encode(out).is_err() {
        out.truncate(before);
        return Err(too_large);
    }
    Ok(())
}

/// A frame error remembered by a poisoned decoder, so every later call
/// reports it again.
#[derive(Debug, Clone)]
enum Poison {
    TooLarge { len: usize, max: usize },
    Decode(prost::DecodeError),
}

impl Poison {
    fn to_error(&self) -> ChannelError {
        match self {
            Self::TooLarge { len, max } => ChannelError::FrameTooLarge {
                len: *len,
                max: *max,
            },
            Self::Decode(err) => ChannelError::Decode(err.clone()),
        }
    }
}

/// Sans-io frame decoder: push bytes as they arrive, take whole messages out.
///
/// Frames come out in order, one per [`next_frame`](Self::next_frame) call,
/// however the bytes were cut. A length over the cap is detected as soon as
/// its 4 header bytes are in; bytes after such a header are dropped, never
/// buffered. Frames complete before a bad one still come out first, then the
/// error. After an error the decoder is poisoned: every later call returns
/// the same error and pushes are ignored; close the connection.
pub struct FrameDecoder {
    buf: Vec<u8>,
    /// First byte not yet consumed by `next_frame`.
    start: usize,
    /// Offset of the first length header not yet checked against the cap;
    /// every frame between `start` and here is complete and within the cap.
    scanned: usize,
    max: usize,
    /// The announced length of an over-cap frame whose header sits at
    /// `scanned`; reported once the frames before it are taken.
    oversized: Option<usize>,
    poison: Option<Poison>,
}

impl FrameDecoder {
    /// A decoder with the [`DEFAULT_MAX_FRAME_LEN`] cap.
    pub fn new() -> Self {
        Self::with_max_frame_len(DEFAULT_MAX_FRAME_LEN)
    }

    /// A decoder refusing payloads over `max` bytes (at most `u32::MAX`, the
    /// largest length a header can carry).
    pub fn with_max_frame_len(max: usize) -> Self {
        Self {
            buf: Vec::new(),
            start: 0,
            scanned: 0,
            max: max.min(MAX_WIRE_LEN),
            oversized: None,
            poison: None,
        }
    }

    /// The payload cap in bytes.
    pub fn max_frame_len(&self) -> usize {
        self.max
    }

    /// Bytes received and not yet taken as frames.
    pub fn buffered_len(&self) -> usize {
        self.buf.len().saturating_sub(self.start)
    }

    /// Whether the decoder has reported an error (and will keep doing so).
    pub fn is_poisoned(&self) -> bool {
        self.poison.is_some()
    }

    /// Whether reading more bytes is pointless: the decoder is poisoned, or
    /// an over-cap header is waiting to be reported.
    pub(super) fn is_blocked(&self) -> bool {
        self.poison.is_some() || self.oversized.is_some()
    }

    /// Appends bytes received from the peer.
    pub fn push(&mut self, bytes: &[u8]) {
        // Bytes after a bad header belong to no frame we will ever read.
        if self.is_blocked() || bytes.is_empty() {
            return;
        }
        self.compact();
        self.buf.extend_from_slice(bytes);
        self.scan();
    }

    /// Takes the next whole frame and decodes it as `M`. `Ok(None)`: no whole
    /// frame yet, push more bytes.
    pub fn next_frame<M: Message + Default>(&mut self) -> Result<Option<M>, ChannelError> {
        if let Some(poison) = &self.poison {
            return Err(poison.to_error());
        }
        if self.start >= self.scanned {
            if let Some(len) = self.oversized {
                return Err(self.poison(Poison::TooLarge { len, max: self.max }));
            }
            return Ok(None);
        }
        // `scan` vouched for a whole frame at `start`; the lookups below
        // still go through `get` so that a bug here cannot become a panic.
        let Some(len) = self.len_at(self.start) else {
            return Ok(None);
        };
        let payload_start = self.start.saturating_add(HEADER_LEN);
        let payload_end = payload_start.saturating_add(len);
        let decoded = match self.buf.get(payload_start..payload_end) {
            Some(payload) => M::decode(payload),
            None => return Ok(None),
        };
        self.start = payload_end;
        if self.start == self.buf.len() {
            // Fully drained: restart at the front for free.
            self.buf.clear();
            self.start = 0;
            self.scanned = 0;
        }
        match decoded {
            Ok(msg) => Ok(Some(msg)),
            Err(err) => Err(self.poison(Poison::Decode(err))),
        }
    }

    fn poison(&mut self, poison: Poison) -> ChannelError {
        let err = poison.to_error();
        self.poison = Some(poison);
        self.oversized = None;
        // Nothing buffered will ever be read; give the memory back.
        self.buf = Vec::new();
        self.start = 0;
        self.scanned = 0;
        err
    }

    /// The payload length announced by the header at `offset`, if all 4
    /// header bytes are in.
    fn len_at(&self, offset: usize) -> Option<usize> {
        let header = self.buf.get(offset..offset.checked_add(HEADER_LEN)?)?;
        let header: [u8; HEADER_LEN] = header.try_into().ok()?;
        // Saturating: on a target where usize is narrower than u32 a huge
        // length must still count as over the cap.
        Some(usize::try_from(u32::from_be_bytes(header)).unwrap_or(usize::MAX))
    }

    /// Checks every newly complete header against the cap, walking over
    /// whole frames; stops at an incomplete header or frame.
    fn scan(&mut self) {
        while let Some(len) = self.len_at(self.scanned) {
            if len > self.max {
                self.oversized = Some(len);
                // Keep the frames before the bad header, drop the rest.
                self.buf.truncate(self.scanned);
                return;
            }
            let end = self.scanned.saturating_add(HEADER_LEN).saturating_add(len);
            if end > self.buf.len() {
                return;
            }
            self.scanned = end;
        }
    }

    fn compact(&mut self) {
        if self.start == 0 {
            return;
        }
        if self.start >= self.buf.len() {
            self.buf.clear();
            self.start = 0;
            self.scanned = 0;
        } else if self.start >= COMPACT_MIN && self.start >= self.buf.len() / 2 {
            self.buf.drain(..self.start);
            self.scanned = self.scanned.saturating_sub(self.start);
            self.start = 0;
        }
    }
}

impl Default for FrameDecoder {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for FrameDecoder {
    // The buffer may be a megabyte of peer bytes: show sizes, not contents.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FrameDecoder")
            .field("buffered_len", &self.buffered_len())
            .field("max", &self.max)
            .field("oversized", &self.oversized)
            .field("poison", &self.poison)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;
    use crate::channel::tests::{add_cluster, frame, status};
    use crate::proto::request::RequestType;
    use crate::proto::{Request, TcpFrontend};

    fn drain<M: Message + Default>(decoder: &mut FrameDecoder) -> Vec<M> {
        let mut out = Vec::new();
        while let Some(msg) = decoder.next_frame().expect("valid frames") {
            out.push(msg);
        }
        out
    }

    // ---- sans-io decoder and encoder ----

    #[test]
    fn encode_frame_is_big_endian_length_then_payload() {
        let req = add_cluster("api");
        let bytes = frame(&req);
        let payload = req.encode_to_vec();
        let len = u32::try_from(payload.len()).expect("small");
        assert_eq!(bytes.get(..HEADER_LEN), Some(&len.to_be_bytes()[..]));
        assert_eq!(bytes.get(HEADER_LEN..), Some(&payload[..]));
    }

    #[test]
    fn encode_frame_refuses_a_message_over_max() {
        let req = add_cluster(&"x".repeat(100));
        let len = req.encoded_len();
        match encode_frame(&req, len - 1) {
            Err(ChannelError::FrameTooLarge { len: l, max }) => {
                assert_eq!((l, max), (len, len - 1));
            }
            other => panic!("expected FrameTooLarge, got {other:?}"),
        }
        assert!(encode_frame(&req, len).is_ok());
    }

    #[test]
    fn decoder_several_frames_in_one_push() {
        let reqs = vec![
            status(),
            add_cluster("a"),
            add_cluster("b"),
            Request::default(),
        ];
        let mut decoder = FrameDecoder::new();
        decoder.push(&reqs.iter().flat_map(frame).collect::<Vec<u8>>());
        assert_eq!(drain::<Request>(&mut decoder), reqs);
        assert_eq!(decoder.buffered_len(), 0);
    }

    #[test]
    fn decoder_frame_pushed_one_byte_at_a_time() {
        let req = add_cluster("one-byte-at-a-time");
        let bytes = frame(&req);
        let mut decoder = FrameDecoder::new();
        let (last, init) = bytes.split_last().expect("non-empty");
        for byte in init {
            decoder.push(std::slice::from_ref(byte));
            assert_eq!(decoder.next_frame::<Request>().expect("no error"), None);
        }
        decoder.push(std::slice::from_ref(last));
        assert_eq!(
            decoder.next_frame::<Request>().expect("no error"),
            Some(req)
        );
    }

    #[test]
    fn decoder_length_header_split() {
        let req = add_cluster("split-header");
        let bytes = frame(&req);
        let mut decoder = FrameDecoder::new();
        for cut in [&bytes[..1], &bytes[1..3], &bytes[3..4]] {
            decoder.push(cut);
            assert_eq!(decoder.next_frame::<Request>().expect("no error"), None);
        }
        decoder.push(&bytes[4..]);
        assert_eq!(
            decoder.next_frame::<Request>().expect("no error"),
            Some(req)
        );
    }

    #[test]
    fn decoder_refuses_oversized_header_after_four_bytes_and_stays_poisoned() {
        let mut decoder = FrameDecoder::with_max_frame_len(64);
        // Two good frames, then a header announcing 65 bytes: the good ones
        // still come out, then the error, with nothing after it buffered.
        let mut bytes = frame(&status());
        bytes.extend(frame(&add_cluster("a")));
        bytes.extend(65u32.to_be_bytes());
        decoder.push(&bytes);
        decoder.push(&[0u8; 1000]);
        assert_eq!(
            decoder.next_frame::<Request>().expect("first"),
            Some(status())
        );
        assert_eq!(
            decoder.next_frame::<Request>().expect("second"),
            Some(add_cluster("a"))
        );
        for _ in 0..3 {
            match decoder.next_frame::<Request>() {
                Err(ChannelError::FrameTooLarge { len: 65, max: 64 }) => {}
                other => panic!("expected FrameTooLarge, got {other:?}"),
            }
            assert!(decoder.is_poisoned());
            decoder.push(&frame(&status()));
            assert_eq!(decoder.buffered_len(), 0);
        }
    }

    #[test]
    fn decoder_refuses_a_huge_header_before_any_payload() {
        let mut decoder = FrameDecoder::new();
        decoder.push(&u32::MAX.to_be_bytes());
        assert_eq!(
            decoder.buffered_len(),
            0,
            "the huge frame is never buffered"
        );
        assert!(matches!(
            decoder.next_frame::<Request>(),
            Err(ChannelError::FrameTooLarge {
                max: DEFAULT_MAX_FRAME_LEN,
                ..
            })
        ));
    }

    #[test]
    fn decoder_garbage_payload_is_a_decode_error_and_poisons() {
        let mut decoder = FrameDecoder::new();
        decoder.push(&[0, 0, 0, 3, 0xff, 0xff, 0xff]);
        decoder.push(&frame(&status()));
        assert!(matches!(
            decoder.next_frame::<Request>(),
            Err(ChannelError::Decode(_))
        ));
        assert!(decoder.is_poisoned());
        assert!(matches!(
            decoder.next_frame::<Request>(),
            Err(ChannelError::Decode(_))
        ));
    }

    #[test]
    fn decoder_compacts_instead_of_growing_or_shifting_per_frame() {
        let one = frame(&add_cluster("c"));
        let mut decoder = FrameDecoder::new();
        // A steady trickle (push a frame and a half, take what is whole):
        // the buffer never holds much more than what is pending.
        let mut stream: Vec<u8> = Vec::new();
        for _ in 0..10_000 {
            stream.extend(&one);
        }
        let mut taken = 0;
        for piece in stream.chunks(one.len() * 3 / 2) {
            decoder.push(piece);
            taken += drain::<Request>(&mut decoder).len();
            assert!(decoder.buf.len() <= 2 * COMPACT_MIN + 2 * one.len());
        }
        assert_eq!(taken, 10_000);
        assert_eq!(decoder.buffered_len(), 0);
        // Everything in one push: all frames come out; the buffer empties.
        decoder.push(&stream);
        assert_eq!(drain::<Request>(&mut decoder).len(), 10_000);
        assert!(decoder.buf.is_empty());
    }

    // ---- properties ----

    fn request_strategy() -> impl Strategy<Value = Request> {
        prop_oneof![
            Just(status()),
            "[a-z0-9-]{0,24}".prop_map(|id| add_cluster(&id)),
            (
                "[a-z0-9-]{1,12}",
                proptest::option::of("(\\*\\*?\\.)?[a-z0-9-]{1,10}\\.[a-z]{2,5}"),
                proptest::collection::vec("[a-z0-9/.]{1,10}", 0..4),
                proptest::collection::btree_map("[a-z]{1,5}", "[a-z0-9]{0,5}", 0..3),
            )
                .prop_map(
                    |(cluster_id, sni, alpn, tags): (_, _, _, BTreeMap<_, _>)| {
                        Request {
                            request_type: Some(RequestType::AddTcpFrontend(TcpFrontend {
                                cluster_id,
                                address: "127.0.0.1:443".to_owned(),
                                sni,
                                alpn,
                                tags,
                                protocol: None,
                            })),
                        }
                    }
                ),
        ]
    }

    proptest! {
        #[test]
        fn frames_cut_anywhere_decode_to_the_same_sequence(
            reqs in proptest::collection::vec(request_strategy(), 0..16),
            cuts in proptest::collection::vec(any::<proptest::sample::Index>(), 0..24),
        ) {
            let bytes: Vec<u8> = reqs.iter().flat_map(frame).collect();
            let mut points: Vec<usize> = cuts.iter().map(|c| c.index(bytes.len() + 1)).collect();
            points.push(bytes.len());
            points.sort_unstable();
            let mut decoder = FrameDecoder::new();
            let mut got = Vec::new();
            let mut from = 0;
            for to in points {
                decoder.push(&bytes[from..to]);
                from = to;
                while let Some(req) = decoder.next_frame::<Request>().expect("valid frames") {
                    got.push(req);
                }
            }
            prop_assert_eq!(got, reqs);
            prop_assert_eq!(decoder.buffered_len(), 0);
        }

        #[test]
        fn random_bytes_never_panic_and_errors_stick(
            bytes in proptest::collection::vec(any::<u8>(), 0..512),
            cuts in proptest::collection::vec(any::<proptest::sample::Index>(), 0..8),
        ) {
            let mut points: Vec<usize> = cuts.iter().map(|c| c.index(bytes.len() + 1)).collect();
            points.push(bytes.len());
            points.sort_unstable();
            let mut decoder = FrameDecoder::with_max_frame_len(64);
            let mut first_error: Option<String> = None;
            let mut from = 0;
            for to in points {
                decoder.push(&bytes[from..to]);
                from = to;
                loop {
                    match decoder.next_frame::<Request>() {
                        Ok(Some(_)) => prop_assert!(first_error.is_none()),
                        Ok(None) => {
                            prop_assert!(first_error.is_none());
                            break;
                        }
                        Err(err) => {
                            let text = err.to_string();
                            if let Some(first) = &first_error {
                                prop_assert_eq!(first, &text);
                            }
                            first_error = Some(text);
                            break;
                        }
                    }
                }
            }
        }
    }
}
