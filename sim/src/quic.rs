//! The QUIC simulation: a client's first flight of Initial packets, the
//! way real stacks send it (a hello cut into CRYPTO frames, shuffled
//! within a packet, overlapping, mixed with PING, ACK and PADDING, packets
//! coalesced with 0-RTT, later datagrams to another DCID), through a
//! network that loses, duplicates and reorders datagrams, with the client
//! retransmitting what was lost; every datagram and the deadline timer
//! fed to the shipped QUIC step (`preread_core::quic::QuicPrereadStep`).
//!
//! Owns: [`quic_scenario`] (one seed, one flow), [`play_quic`] (the run
//! and its checks) and the oracle: the TCP core (`SniPrereadCore`) on the
//! same ClientHello in one TLS record, with the cap the QUIC listener
//! has plus that record's header. Must never: decide anything itself
//! (the step decides, the TCP core judges), or use real time.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use preread_core::quic::{QuicActions, QuicListener, QuicNext, QuicPrereadStep, QuicRejectWith};
use preread_core::step::TimerAction;
use preread_core::{Input, Output, RejectReason, SniPrereadCore};
use preread_parser::quic::{
    InitialPacket, MIN_INITIAL_DATAGRAM, PacketKeys, Side, Version, frames, open_initial,
    parse_long_header, seal_initial,
};
use preread_parser::tls::{MAX_RECORD_LEN, RECORD_HEADER_LEN};

use crate::corpus;
use crate::hello::HelloSpec;
use crate::listener::{Listener, OFFERS, ROUTED_NAMES, UNMATCHED_NAMES, owned_offer};
use crate::rng::Rng;

/// What the flow is built to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A ClientHello in Initial packets.
    Hello,
    /// A first datagram of a version the proxy cannot read.
    UnknownVersion,
    /// A first Initial that does not open.
    Tampered,
}

/// One datagram as the client builds it: its packets' payloads, before
/// sealing (a retransmission seals them again with new packet numbers).
#[derive(Debug, Clone)]
struct Planned {
    payloads: Vec<Vec<u8>>,
    /// The DCID in its headers (the keys are always the first DCID's).
    dcid: Vec<u8>,
    /// A 0-RTT packet coalesced after the Initials.
    zero_rtt: bool,
}

/// One flow: a listener, a hello, and the datagrams the step receives.
#[derive(Debug, Clone)]
pub struct QuicScenario {
    /// The seed it was built from.
    pub seed: u64,
    /// The listener (its routes, cap, timeout, default cluster).
    pub listener: Listener,
    /// `reject_with`.
    pub reject_with: QuicRejectWith,
    /// What the flow is.
    pub kind: Kind,
    /// The QUIC version.
    pub version: Version,
    /// The ClientHello handshake message.
    pub message: Vec<u8>,
    /// The client's first DCID.
    pub dcid: Vec<u8>,
    /// The client's SCID.
    pub scid: Vec<u8>,
    /// Arrivals at the proxy: milliseconds after the first, and the bytes.
    pub arrivals: Vec<(u64, Vec<u8>)>,
    /// Whether every planned datagram arrived at least once before the
    /// deadline: the hello is then whole in time.
    pub whole_in_time: bool,
    /// What the client and the network did to the flight.
    pub faults: Faults,
}

/// What the client and the network did to one flight, counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Faults {
    /// Transmissions lost.
    pub lost: usize,
    /// Datagrams delivered twice.
    pub duplicated: usize,
    /// Arrivals out of the order sent.
    pub reordered: usize,
    /// Datagrams of several Initial packets.
    pub coalesced: usize,
    /// Datagrams with a 0-RTT packet after the Initials.
    pub zero_rtt: usize,
    /// Transmissions to another DCID than the first.
    pub other_dcid: usize,
}

impl fmt::Display for QuicScenario {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "quic seed {:#x}: {:?} {} hello {} bytes, cap {}, timeout {:?}, {} arrivals, whole in time {}",
            self.seed,
            self.kind,
            self.version,
            self.message.len(),
            self.listener.effective_max(),
            self.listener.timeout,
            self.arrivals.len(),
            self.whole_in_time
        )
    }
}

/// The ClientHello message of a flow: a corpus capture's, or a built one
/// with a routed or unmatched name.
fn some_message(rng: &mut Rng) -> Vec<u8> {
    if rng.chance(30) {
        let usable: Vec<_> = corpus::entries()
            .iter()
            .filter_map(|e| e.message.clone())
            .filter(|m| m.len() <= MAX_RECORD_LEN)
            .collect();
        if !usable.is_empty() {
            return rng.pick(&usable).clone();
        }
    }
    let (name, offer) = if rng.chance(70) {
        let &(name, offer, _) = rng.pick(ROUTED_NAMES);
        (Some(name), offer)
    } else if rng.chance(80) {
        (Some(*rng.pick(UNMATCHED_NAMES)), *rng.pick(OFFERS))
    } else {
        (None, *rng.pick(OFFERS))
    };
    HelloSpec::random(rng, name.map(|n| n.as_bytes().to_vec()), owned_offer(offer)).message(rng)
}

/// The frames of the hello, cut into pieces (some overlapping the next),
/// grouped into packets and packets into datagrams.
fn plan(rng: &mut Rng, message: &[u8], dcid: &[u8]) -> Vec<Planned> {
    let most_pieces = 20;
    let smallest = message.len().div_ceil(most_pieces).max(1);
    let mut pieces = Vec::new();
    let mut at = 0;
    while at < message.len() {
        let len = rng
            .range(smallest, smallest.max(900))
            .min(message.len() - at);
        let overlap = if rng.chance(15) { rng.range(1, 8) } else { 0 };
        let end = (at + len + overlap).min(message.len());
        let mut frame = Vec::new();
        frames::write_crypto(&mut frame, at as u64, &message[at..end]);
        pieces.push(frame);
        at += len;
    }
    let mut packets: Vec<Vec<Vec<u8>>> = Vec::new();
    for piece in pieces {
        let joins = rng.chance(50);
        match packets.last_mut() {
            Some(last)
                if joins
                    && last.len() < 3
                    && last.iter().map(Vec::len).sum::<usize>() + piece.len() <= 1000 =>
            {
                last.push(piece);
            }
            _ => packets.push(vec![piece]),
        }
    }
    let mut datagrams: Vec<Planned> = Vec::new();
    for mut frames_of in packets {
        // Chromium shuffles its CRYPTO frames and mixes in PING and PADDING.
        if rng.chance(50) {
            rng.shuffle(&mut frames_of);
        }
        if rng.chance(30) {
            frames_of.insert(rng.below(frames_of.len() + 1), vec![0x01]);
        }
        if rng.chance(15) {
            frames_of.insert(0, vec![0x02, 0x00, 0x00, 0x00, 0x00]);
        }
        let payload: Vec<u8> = frames_of.concat();
        let joins = rng.chance(40);
        if let Some(last) = datagrams.last_mut()
            && joins
            && last.payloads.len() < 2
            && last.payloads.iter().map(Vec::len).sum::<usize>() + payload.len() <= 1100
        {
            last.payloads.push(payload);
        } else {
            let other_dcid = !datagrams.is_empty() && rng.chance(60);
            datagrams.push(Planned {
                payloads: vec![payload],
                dcid: if other_dcid {
                    let len = rng.range(0, 20);
                    rng.bytes(len)
                } else {
                    dcid.to_vec()
                },
                zero_rtt: rng.chance(15),
            });
        }
    }
    datagrams
}

/// Seals one planned datagram with packet numbers from `*pn`, padded to
/// 1200 bytes as a client pads it.
fn seal(
    planned: &Planned,
    version: Version,
    keys: &PacketKeys,
    scid: &[u8],
    pn: &mut u64,
) -> Vec<u8> {
    let mut out = Vec::new();
    let last = planned.payloads.len() - 1;
    for (i, payload) in planned.payloads.iter().enumerate() {
        let mut payload = payload.clone();
        if i == last && !planned.zero_rtt {
            let overhead = 7 + planned.dcid.len() + scid.len() + 1 + 2 + 4 + 16;
            let padding = MIN_INITIAL_DATAGRAM.saturating_sub(out.len() + overhead + payload.len());
            frames::write_padding(&mut payload, padding);
        }
        let packet = InitialPacket {
            version,
            dcid: &planned.dcid,
            scid,
            token: &[],
            packet_number: *pn,
            pn_len: 4,
        };
        *pn += 1;
        seal_initial(keys, &packet, &payload, &mut out);
    }
    if planned.zero_rtt {
        // Opaque to the proxy; sized so the datagram reaches 1200 bytes.
        let type_bits = match version {
            Version::V1 => 0b01,
            Version::V2 => 0b10,
        };
        let mut packet = vec![0xc3 | (type_bits << 4)];
        packet.extend_from_slice(&version.wire().to_be_bytes());
        packet.push(planned.dcid.len() as u8);
        packet.extend_from_slice(&planned.dcid);
        packet.push(scid.len() as u8);
        packet.extend_from_slice(scid);
        let body = MIN_INITIAL_DATAGRAM
            .saturating_sub(out.len() + packet.len() + 2)
            .max(40);
        packet.extend_from_slice(&(body as u16 | 0x4000).to_be_bytes());
        packet.extend((0..body).map(|i| (i * 7) as u8));
        out.extend(packet);
    }
    out
}

/// The flow of `seed`.
pub fn quic_scenario(seed: u64) -> QuicScenario {
    let mut rng = Rng::new(seed ^ 0x5155_4943_0000_0001);
    let mut listener = Listener::random(&mut rng.fork());
    listener.server_first = None;
    let reject_with = if rng.chance(70) {
        QuicRejectWith::Close
    } else {
        QuicRejectWith::Drop
    };
    let version = if rng.chance(70) {
        Version::V1
    } else {
        Version::V2
    };
    let kind = match rng.below(20) {
        0 => Kind::UnknownVersion,
        1 => Kind::Tampered,
        _ => Kind::Hello,
    };
    let message = some_message(&mut rng);
    let dcid_len = rng.range(8, 20);
    let dcid = rng.bytes(dcid_len);
    let scid_len = rng.range(0, 20);
    let scid = rng.bytes(scid_len);
    let keys = PacketKeys::initial(version, &dcid, Side::Client);
    let planned = plan(&mut rng, &message, &dcid);
    let timeout_ms = listener.timeout.as_millis() as u64;
    let loss = *rng.pick(&[0, 0, 10, 30, 50]);
    let duplicate = *rng.pick(&[0, 10, 30]);
    let jitter = *rng.pick(&[1, 5, 50, 200]);
    let mut pn = 0;
    let mut arrivals = Vec::new();
    let mut whole_in_time = true;
    // When an Initial to the first DCID first reached the server: only
    // then can a client have learned another DCID.
    let mut answered: Option<u64> = None;
    let mut faults = Faults {
        coalesced: planned.iter().filter(|d| d.payloads.len() > 1).count(),
        zero_rtt: planned.iter().filter(|d| d.zero_rtt).count(),
        ..Faults::default()
    };
    for (n, datagram) in planned.iter().enumerate() {
        let mut arrived_in_time = false;
        // The first send, then up to three retransmissions at the PTO.
        for attempt in 0..4u64 {
            let sent = n as u64 + attempt * rng.range_u64(100, 300);
            let learned = answered.is_some_and(|at| at < sent);
            faults.other_dcid += usize::from(datagram.dcid != dcid && learned);
            let bytes = if datagram.dcid == dcid || learned {
                seal(datagram, version, &keys, &scid, &mut pn)
            } else {
                let to_first = Planned {
                    dcid: dcid.clone(),
                    ..datagram.clone()
                };
                seal(&to_first, version, &keys, &scid, &mut pn)
            };
            if rng.chance(loss) {
                faults.lost += 1;
                continue;
            }
            let at = sent + rng.range_u64(0, jitter);
            if parse_long_header(&bytes).is_ok_and(|h| h.dcid == dcid.as_slice()) {
                answered = Some(answered.map_or(at, |a| a.min(at)));
            }
            arrived_in_time |= at < timeout_ms;
            arrivals.push((at, bytes.clone()));
            if rng.chance(duplicate) {
                faults.duplicated += 1;
                arrivals.push((at + rng.range_u64(0, jitter), bytes));
            }
            break;
        }
        whole_in_time &= arrived_in_time;
    }
    if arrivals.is_empty() {
        // Every try was lost: the flow starts with the client's next one.
        arrivals.push((0, seal(&planned[0], version, &keys, &scid, &mut pn)));
        whole_in_time &= planned.len() == 1;
    }
    match kind {
        Kind::UnknownVersion => {
            let grease = 0x0a0a_0a0a | (rng.next_u64() as u32 & 0xf0f0_f0f0);
            let mut first = seal(&planned[0], version, &keys, &scid, &mut 0);
            first[1..5].copy_from_slice(&grease.to_be_bytes());
            arrivals = vec![(0, first)];
        }
        Kind::Tampered => {
            // A bit of the tag: the header still parses, the AEAD fails.
            let alone = Planned {
                payloads: planned[0].payloads[..1].to_vec(),
                dcid: dcid.clone(),
                zero_rtt: false,
            };
            let mut first = seal(&alone, version, &keys, &scid, &mut 0);
            let at = first.len() - 1 - rng.below(16);
            first[at] ^= 1 << rng.below(8);
            arrivals = vec![(0, first)];
        }
        Kind::Hello => {}
    }
    // The network reorders by arrival time; the first to arrive is at 0.
    let sent_order: Vec<Vec<u8>> = arrivals.iter().map(|(_, d)| d.clone()).collect();
    arrivals.sort_by_key(|(at, _)| *at);
    faults.reordered = arrivals
        .iter()
        .zip(&sent_order)
        .filter(|((_, got), sent)| got != *sent)
        .count();
    let base = arrivals.first().map_or(0, |(at, _)| *at);
    for (at, _) in &mut arrivals {
        *at -= base;
    }
    QuicScenario {
        seed,
        listener,
        reject_with,
        kind,
        version,
        message,
        dcid,
        scid,
        arrivals,
        whole_in_time: whole_in_time && base == 0,
        faults,
    }
}

/// What a played flow came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuicPlayed {
    /// The step's decision.
    pub decision: Output,
    /// Whether it came at the deadline.
    pub at_deadline: bool,
}

/// What the shell holds of the step's answers, and the checks on each.
struct Observer {
    deadline: Instant,
    timer: Option<Instant>,
    left: usize,
    decided: Option<(QuicNext, Instant)>,
}

impl Observer {
    fn observe(&mut self, actions: QuicActions, now: Instant) -> Result<(), String> {
        match actions.timer {
            TimerAction::Arm(at)
                if self.timer.is_none() && self.decided.is_none() && at == self.deadline =>
            {
                self.timer = Some(at);
            }
            TimerAction::Cancel if self.timer.is_some() => self.timer = None,
            TimerAction::Keep => {}
            other => return Err(format!("timer {other:?} with {:?} held", self.timer)),
        }
        // A timer that fired is no longer held.
        if self.timer.is_some_and(|due| due <= now) && actions.timer == TimerAction::Keep {
            self.timer = None;
        }
        self.left += usize::from(actions.left.is_some());
        match (&actions.next, &self.decided) {
            (QuicNext::Ignore, _) => {}
            (QuicNext::Wait, None) if self.timer.is_some() => {}
            (QuicNext::Wait, None) => return Err("waiting without the deadline timer".into()),
            (QuicNext::Connect(_) | QuicNext::Reject(_), None) if actions.left.is_some() => {
                self.decided = Some((actions.next.clone(), now));
            }
            (next, _) => return Err(format!("{next:?} out of place")),
        }
        Ok(())
    }
}

/// The TCP core's decision on the same hello in one record, with the QUIC
/// cap plus the record's header; `hello_end` as the QUIC step sets it.
fn tcp_oracle(sc: &QuicScenario, window_of: &[u8], announced: usize) -> Output {
    let mut config = sc.listener.config();
    config.max_bytes += RECORD_HEADER_LEN;
    let mut record = vec![22, 3, 1];
    record.extend_from_slice(&(announced as u16).to_be_bytes());
    record.extend_from_slice(window_of);
    let input = Input::Bytes {
        buf: &record,
        now: Instant::now(),
    };
    match SniPrereadCore::new().handle_input(&config, input) {
        Output::Routed(route) => {
            let mut route = (*route).clone();
            route.hello_end = Some(sc.message.len());
            Output::Routed(Arc::new(route))
        }
        other => other,
    }
}

/// Plays `sc` through the shipped step and checks every invariant; the
/// error says which broke.
pub fn play_quic(sc: &QuicScenario) -> Result<QuicPlayed, String> {
    let fail = |what: String| Err(format!("{sc}: {what}"));
    let listener = QuicListener::new(sc.listener.config(), sc.reject_with);
    let t0 = Instant::now();
    let ms = |n: u64| t0 + Duration::from_millis(n);
    let Some((_, first)) = sc.arrivals.first() else {
        return fail("no datagram arrived".into());
    };
    let (mut step, actions) = QuicPrereadStep::first(&listener, first, t0);
    let deadline = t0 + sc.listener.timeout;
    let mut seen = Observer {
        deadline,
        timer: None,
        left: 0,
        decided: None,
    };
    if let Err(e) = seen.observe(actions, t0) {
        return fail(e);
    }
    for (at, datagram) in &sc.arrivals[1..] {
        let now = ms(*at);
        if let Some(due) = seen.timer.filter(|due| *due <= now) {
            let actions = step.timeout(&listener, due);
            if let Err(e) = seen.observe(actions, due) {
                return fail(e);
            }
        }
        let actions = step.datagram(&listener, datagram, now);
        if let Err(e) = seen.observe(actions, now) {
            return fail(e);
        }
    }
    if let Some(due) = seen.timer {
        let actions = step.timeout(&listener, due);
        if let Err(e) = seen.observe(actions, due) {
            return fail(e);
        }
    }
    let left = seen.left;
    let Some((next, when)) = seen.decided else {
        return fail("never decided".into());
    };
    if left != 1 {
        return fail(format!("left the stage {left} times"));
    }
    let Some(decision) = step.decision().cloned() else {
        return fail("no latched decision".into());
    };
    let at_deadline = when >= deadline;
    let expected = match sc.kind {
        Kind::UnknownVersion => Output::Reject(RejectReason::QuicVersion),
        Kind::Tampered => Output::Reject(RejectReason::QuicUndecryptable),
        Kind::Hello if at_deadline => {
            if sc.whole_in_time && sc.arrivals.iter().all(|(at, _)| ms(*at) < deadline) {
                return fail("the whole hello arrived in time and the step still timed out".into());
            }
            // Only on a prefix the TCP core would still wait on. Without
            // its 4-byte header the TCP core knows a length from the
            // record that QUIC does not have: nothing to compare then.
            let prefix = step.initials().crypto_prefix();
            if prefix.len() >= 4 {
                match tcp_oracle(sc, prefix, sc.message.len()) {
                    Output::NeedMore { .. } => {}
                    other => {
                        return fail(format!(
                            "timed out on a prefix the TCP core decides: {other:?}"
                        ));
                    }
                }
            }
            Output::Reject(RejectReason::Fragmented)
        }
        Kind::Hello => tcp_oracle(sc, &sc.message, sc.message.len()),
    };
    if decision != expected {
        return fail(format!("decided {decision:?}, the TCP core {expected:?}"));
    }
    if let QuicNext::Reject(reject) = &next {
        if let Err(e) = check_reply(sc, reject.reason, reject.reply.as_deref()) {
            return fail(e);
        }
    }
    Ok(QuicPlayed {
        decision,
        at_deadline,
    })
}

/// A refused client's reply: what `reject_with` and the reason call for,
/// readable with the server's Initial keys.
fn check_reply(
    sc: &QuicScenario,
    reason: RejectReason,
    reply: Option<&[u8]>,
) -> Result<(), String> {
    let silent = sc.reject_with == QuicRejectWith::Drop
        || matches!(
            reason,
            RejectReason::Fragmented | RejectReason::FrontClosed | RejectReason::QuicUndecryptable
        );
    let reply = match (silent, reply) {
        (true, None) => return Ok(()),
        (true, Some(_)) => return Err(format!("a reply for {reason} with {:?}", sc.reject_with)),
        (false, None) => return Err(format!("no reply for {reason}")),
        (false, Some(reply)) => reply,
    };
    let header = parse_long_header(reply).map_err(|e| format!("reply: {e}"))?;
    if (header.dcid, header.scid) != (&sc.scid[..], &sc.dcid[..]) {
        return Err("the reply's connection IDs are not the client's, swapped".into());
    }
    if reason == RejectReason::QuicVersion {
        return if header.version == 0 {
            Ok(())
        } else {
            Err("not a Version Negotiation packet".into())
        };
    }
    let keys = PacketKeys::initial(sc.version, &sc.dcid, Side::Server);
    let mut packet = reply.to_vec();
    let payload =
        open_initial(&keys, &mut packet, header.pn_offset).map_err(|e| format!("reply: {e}"))?;
    let mut code = None;
    frames::walk(payload, |frame| {
        if let frames::Frame::ConnectionClose(c) = frame {
            code = Some(c);
        }
        Ok::<_, preread_parser::quic::QuicError>(())
    })
    .map_err(|e| format!("reply: {e}"))?;
    let expected = match reason {
        RejectReason::SniUnmatched => Some(0x100 + 112),
        RejectReason::AlpnUnmatched => Some(0x100 + 120),
        _ => None,
    };
    match (code, expected) {
        (Some(code), Some(expected)) if code != expected => {
            Err(format!("close code {code:#x} for {reason}"))
        }
        (Some(code), None) if code < 0x100 && reason != RejectReason::MalformedRecord => {
            Err(format!("close code {code:#x} for {reason}"))
        }
        (None, _) => Err("a reply without CONNECTION_CLOSE".into()),
        _ => Ok(()),
    }
}
