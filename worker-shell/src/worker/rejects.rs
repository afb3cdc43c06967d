//! The worker's ring of the last rejected and fallback sessions, with the
//! bytes each one sent, for `preread rejects`.
//!
//! Owns: [`RejectRing`]: `reject_capture` slots, each with a buffer
//! reserved when the ring is made (as large as a pooled buffer, which
//! holds nearly every window), filled in turn (the oldest is overwritten),
//! and listed newest first, filtered by reason and listener.
//! Must never: cut a window (a `too_large` one is as long as the
//! listener's cap, 64 KiB by default, past a pooled buffer, and only whole
//! does it replay to its reason), allocate for a window its slot already
//! has room for (a slot grows once to the largest window it held, then
//! reuses that), or hold anything of a session but a copy.

use std::net::SocketAddr;
use std::time::{SystemTime, UNIX_EPOCH};

use command::proto;

use crate::vocabulary::Outcome;

/// A session to capture, besides its window.
#[derive(Debug, Clone, Copy)]
pub(super) struct Captured {
    pub(super) at: SystemTime,
    pub(super) listener: SocketAddr,
    pub(super) client: SocketAddr,
    pub(super) proxy_client: Option<SocketAddr>,
    /// `Rejected(_)`, `Fallback(_)`, or `Refused(AccessDenied)` by `deny_ja4`.
    pub(super) outcome: Outcome,
    /// A QUIC flow's datagrams, each preceded by its length (2 bytes,
    /// big-endian), rather than a TCP session's bytes.
    pub(super) quic: bool,
}

#[derive(Debug)]
struct Slot {
    /// The worker's capture count when this slot was filled; `None` until
    /// it is.
    seq: Option<u64>,
    what: Option<Captured>,
    window: Vec<u8>,
}

/// The last `reject_capture` captures of one worker.
#[derive(Debug)]
pub struct RejectRing {
    slots: Vec<Slot>,
    /// Captures made so far; the next one goes to `seq % slots.len()`.
    seq: u64,
}

impl RejectRing {
    /// A ring of `capacity` slots (0: capture is off), each with a buffer
    /// of `window_capacity` bytes reserved now: the memory is the kernel's
    /// to give as windows are written, and a capture of a window that fits
    /// never allocates.
    pub fn new(capacity: usize, window_capacity: usize) -> Self {
        let slots = (0..capacity)
            .map(|_| Slot {
                seq: None,
                what: None,
                window: Vec::with_capacity(window_capacity),
            })
            .collect();
        Self { slots, seq: 0 }
    }

    /// Whether captures are kept (`reject_capture` is not 0).
    pub(super) fn is_on(&self) -> bool {
        !self.slots.is_empty()
    }

    /// Keeps a copy of `window` (the session's bytes at its decision) and
    /// of `what`, over the oldest capture once the ring is full.
    pub(super) fn capture(&mut self, window: &[u8], what: Captured) {
        let Some(index) = usize::try_from(self.seq)
            .ok()
            .and_then(|seq| seq.checked_rem(self.slots.len()))
        else {
            return;
        };
        let Some(slot) = self.slots.get_mut(index) else {
            return;
        };
        slot.seq = Some(self.seq);
        slot.what = Some(what);
        slot.window.clear();
        slot.window.extend_from_slice(window);
        self.seq += 1;
    }

    /// The captures that match `query`, newest first, for the answer of
    /// worker `worker`.
    pub fn list(&self, worker: u32, query: &proto::QueryRejects) -> Vec<proto::CapturedWindow> {
        let listener = query
            .listener
            .as_deref()
            .map(|text| text.parse::<SocketAddr>().ok());
        let mut matching: Vec<(u64, &Captured, &[u8])> = self
            .slots
            .iter()
            .filter_map(|slot| Some((slot.seq?, slot.what.as_ref()?, slot.window.as_slice())))
            .filter(|(_, what, _)| {
                let reason = reason_of(what.outcome);
                query
                    .reason
                    .as_deref()
                    .is_none_or(|wanted| wanted == reason)
                    && listener.is_none_or(|wanted| wanted == Some(what.listener))
            })
            .collect();
        matching.sort_by_key(|(seq, ..)| std::cmp::Reverse(*seq));
        matching
            .into_iter()
            .map(|(seq, what, window)| proto::CapturedWindow {
                worker,
                seq,
                at_unix_ms: what
                    .at
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
                listener: what.listener.to_string(),
                client: what.client.to_string(),
                proxy_client: what.proxy_client.map(|a| a.to_string()),
                outcome: what.outcome.to_string(),
                window: window.to_vec(),
                quic: what.quic,
            })
            .collect()
    }
}

/// The reason of an outcome, as the access log spells it after the colon.
fn reason_of(outcome: Outcome) -> &'static str {
    match outcome {
        Outcome::Rejected(reason) => reason.as_str(),
        Outcome::Fallback(reason) => reason.as_str(),
        Outcome::Refused(reason) => reason.as_str(),
        Outcome::Routed => "routed",
        Outcome::Silent => "silent",
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::time::UNIX_EPOCH;

    use command::proto::QueryRejects;
    use preread_core::{FallbackReason, RejectReason};

    use super::{Captured, RejectRing};
    use crate::vocabulary::Outcome;

    fn what(port: u16, outcome: Outcome) -> Captured {
        Captured {
            at: UNIX_EPOCH,
            listener: SocketAddr::from(([127, 0, 0, 1], port)),
            client: SocketAddr::from(([127, 0, 0, 2], 40000)),
            proxy_client: None,
            outcome,
            quic: false,
        }
    }

    #[test]
    fn the_ring_keeps_the_newest_whole_and_reuses_its_buffers() {
        let mut ring = RejectRing::new(2, 8);
        let not_tls = Outcome::Rejected(RejectReason::NotTls);
        let buffers: Vec<*const u8> = ring.slots.iter().map(|s| s.window.as_ptr()).collect();
        ring.capture(b"one", what(1, not_tls));
        ring.capture(b"two", what(1, not_tls));
        ring.capture(b"three", what(1, not_tls));
        let listed = ring.list(0, &QueryRejects::default());
        let windows: Vec<&[u8]> = listed.iter().map(|w| w.window.as_slice()).collect();
        assert_eq!(windows, [&b"three"[..], b"two"], "newest first");
        assert_eq!(listed.iter().map(|w| w.seq).collect::<Vec<_>>(), [2, 1]);
        let after: Vec<*const u8> = ring.slots.iter().map(|s| s.window.as_ptr()).collect();
        assert_eq!(buffers, after, "each slot kept the buffer it was made with");
        assert_eq!(listed[0].outcome, "rejected:not_tls");
        // A window past the reserve (a too_large hello at the cap) is kept
        // whole: its slot grows, once.
        let large = vec![0x16; 20];
        ring.capture(&large, what(1, Outcome::Rejected(RejectReason::TooLarge)));
        let listed = ring.list(0, &QueryRejects::default());
        assert_eq!(listed[0].window, large);
        assert_eq!(listed[1].window, b"three", "the other slot is untouched");
    }

    #[test]
    fn filters_by_reason_and_listener_and_zero_is_off() {
        let mut ring = RejectRing::new(4, 16);
        ring.capture(b"a", what(1, Outcome::Rejected(RejectReason::NotTls)));
        ring.capture(
            b"b",
            what(2, Outcome::Fallback(FallbackReason::SniUnmatched)),
        );
        ring.capture(b"c", what(2, Outcome::Rejected(RejectReason::NotTls)));
        let query = |reason: Option<&str>, listener: Option<&str>| QueryRejects {
            reason: reason.map(str::to_owned),
            listener: listener.map(str::to_owned),
        };
        let windows = |q: QueryRejects| -> Vec<Vec<u8>> {
            ring.list(3, &q).into_iter().map(|w| w.window).collect()
        };
        assert_eq!(
            windows(query(Some("not_tls"), None)),
            [b"c".to_vec(), b"a".to_vec()]
        );
        assert_eq!(
            windows(query(None, Some("127.0.0.1:2"))),
            [b"c".to_vec(), b"b".to_vec()]
        );
        assert_eq!(
            windows(query(Some("sni_unmatched"), Some("127.0.0.1:2"))),
            [b"b".to_vec()]
        );
        assert!(windows(query(None, Some("not an address"))).is_empty());

        let mut off = RejectRing::new(0, 16);
        off.capture(b"a", what(1, Outcome::Rejected(RejectReason::NotTls)));
        assert!(off.list(0, &QueryRejects::default()).is_empty());
    }
}
