//! Scenarios: from one `u64` seed, a listener, the client's byte stream and
//! the timeline on which its bytes (and its close) arrive.
//!
//! Owns: [`Scenario`], the random generator ([`scenario`] for a plain seed)
//! and the directed one ([`scenario_for`]: one [`Target`] outcome produced
//! by construction), the seed encoding that lets one number replay either,
//! and the ground truth ([`Truth`]) the driver checks routes against. Must
//! never: consult the core or the parsers to decide what a stream means
//! (the directed outcome and the truth are known from how the bytes were
//! built), or draw randomness from anything but the seed.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::time::Duration;

use preread_core::sni::HostName;
use preread_core::{FallbackReason, RejectReason};
use preread_parser::tls::{Ja4, Parsed, Transport, parse_client_hello};

use crate::corpus::{self, Class, Entry};
use crate::hello::{
    CONTENT_APPLICATION_DATA, HelloFault, HelloSpec, MAX_RECORD, Record, fragment, serialize,
    tiny_records,
};
use crate::listener::{
    C_EXAMPLE, Expect, FOREIGN_OFFERS, Listener, OFFERS, ROUTED_NAMES, STAR_ORG, UNMATCHED_NAMES,
    model_lookup, owned_offer,
};
use crate::prefix::{self, Prefix};
use crate::rng::Rng;

/// An outcome a directed scenario is built to produce.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Target {
    /// Routed by a frontend (no fallback).
    Routed,
    /// Refused for this reason.
    Reject(RejectReason),
    /// Sent to the default cluster for this reason.
    Fallback(FallbackReason),
    /// Refused by the step: the client sent nothing in time.
    SilentTimeout,
}

impl Target {
    /// Every target: the 12 reject reasons, the 5 fallback reasons, a
    /// route, and a silent client refused.
    pub const ALL: [Self; 19] = [
        Self::Reject(RejectReason::NotTls),
        Self::Reject(RejectReason::MalformedRecord),
        Self::Reject(RejectReason::MalformedHandshake),
        Self::Reject(RejectReason::Fragmented),
        Self::Reject(RejectReason::TooLarge),
        Self::Reject(RejectReason::NoSni),
        Self::Reject(RejectReason::EchOuterAbsent),
        Self::Reject(RejectReason::SniUnmatched),
        Self::Reject(RejectReason::AlpnUnmatched),
        Self::Reject(RejectReason::ProxyHeaderInvalid),
        Self::Reject(RejectReason::FrontClosed),
        Self::Reject(RejectReason::AccessDenied),
        Self::Fallback(FallbackReason::NotTls),
        Self::Fallback(FallbackReason::NoSni),
        Self::Fallback(FallbackReason::SniUnmatched),
        Self::Fallback(FallbackReason::EchOuterAbsent),
        Self::Fallback(FallbackReason::ServerFirst),
        Self::Routed,
        Self::SilentTimeout,
    ];

    /// Position in [`Target::ALL`].
    pub fn index(self) -> usize {
        Self::ALL.iter().position(|t| *t == self).unwrap_or(0)
    }

    /// `reject.<reason>`, `fallback.<reason>`, `routed` or
    /// `refused.silent_timeout`.
    pub fn name(self) -> String {
        match self {
            Self::Routed => "routed".to_owned(),
            Self::SilentTimeout => "refused.silent_timeout".to_owned(),
            Self::Reject(r) => format!("reject.{r}"),
            Self::Fallback(f) => format!("fallback.{f}"),
        }
    }
}

/// Set in the seeds of directed scenarios; random seeds stay below it.
pub const DIRECTED_BIT: u64 = 1 << 63;
const INNER_MASK: u64 = (1 << 48) - 1;

/// The seed of the `n`-th directed scenario for `target`: one number that
/// [`scenario`] turns back into the same scenario.
pub fn directed_seed(target: Target, n: u64) -> u64 {
    DIRECTED_BIT | ((target.index() as u64) << 48) | (n & INNER_MASK)
}

/// The target a seed is directed at, if any.
pub fn target_of(seed: u64) -> Option<Target> {
    if seed & DIRECTED_BIT == 0 {
        return None;
    }
    Target::ALL.get(((seed >> 48) & 0x7fff) as usize).copied()
}

/// When the client's bytes up to `end` (exclusive, cumulative) are readable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arrival {
    /// Offset from accept.
    pub at: Duration,
    /// Bytes of the stream readable from then on.
    pub end: usize,
}

/// What the generator knows the stream means.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Truth {
    /// Length of the PROXY header it wrote (0 without one).
    pub prefix_len: usize,
    /// Whether that header is valid.
    pub prefix_valid: bool,
    /// The client address the header carries.
    pub source: Option<SocketAddr>,
    /// Where the hello's records end in the stream, when they are cleanly
    /// framed (the `hello_end` a route must report).
    pub hello_end: Option<usize>,
    /// The normalized name of a built, well-formed hello.
    pub sni: Option<HostName>,
    /// What the route lookup must answer for that hello.
    pub lookup: Option<Expect>,
    /// Once the window holds this many bytes, a length field among them
    /// (a record's, the handshake's or a PROXY v2 header's) announces more
    /// than the listener's cap: `TooLarge` at once.
    pub announced_at: Option<usize>,
}

/// One connection: a listener, a client, a timeline.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// The seed that built it (replay with `SIM_SEED`).
    pub seed: u64,
    /// The outcome it is built to produce, for directed scenarios.
    pub target: Option<Target>,
    /// What went into it, for traces.
    pub tags: Vec<String>,
    /// The listener.
    pub listener: Listener,
    /// Every byte the client sends, in order.
    pub stream: Vec<u8>,
    /// When those bytes become readable; `end` strictly increases and the
    /// last one is `stream.len()`.
    pub arrivals: Vec<Arrival>,
    /// When the client's FIN arrives (never before its last bytes).
    pub close: Option<Duration>,
    /// Early timer fires to inject (contract probes: each must answer
    /// `NeedMore` with the unchanged deadline). Used only when bytes were
    /// received and the deadline is still ahead.
    pub probes: Vec<Duration>,
    /// Seeds the driver's timer lateness.
    pub jitter_seed: u64,
    /// Ground truth.
    pub truth: Truth,
    /// The whole stream with the hello in its original framing, and with
    /// the re-framing this scenario uses: both must get the same verdict.
    pub reframing: Option<(Vec<u8>, Vec<u8>)>,
}

impl Scenario {
    /// A human summary for failure reports.
    pub fn describe(&self) -> String {
        let l = &self.listener;
        let mut s = String::new();
        let _ = write!(
            s,
            "seed {} (SIM_SEED={}), target {}, tags [{}]\n  listener: routes {:?}, configured_max {}, effective cap {}, timeout {:?}, expect_proxy {}, default_cluster {}, server_first {:?}, handoff {:?}\n  stream: {} bytes, truth {:?}\n  arrivals:",
            self.seed,
            self.seed,
            self.target
                .map_or_else(|| "random".to_owned(), Target::name),
            self.tags.join(", "),
            l.routes,
            l.configured_max,
            l.effective_max(),
            l.timeout,
            l.expect_proxy,
            l.default_cluster,
            l.server_first,
            l.mode,
            self.stream.len(),
            self.truth,
        );
        for a in &self.arrivals {
            let _ = write!(s, " {}@{:?}", a.end, a.at);
        }
        let _ = write!(s, "\n  close: {:?}, probes: {:?}", self.close, self.probes);
        s
    }
}

/// The scenario of `seed`: directed when [`DIRECTED_BIT`] is set, random
/// otherwise.
pub fn scenario(seed: u64) -> Scenario {
    match target_of(seed) {
        Some(target) => build_directed(target, seed),
        None => build_random(seed),
    }
}

/// The `n`-th scenario built to produce `target`.
pub fn scenario_for(target: Target, n: u64) -> Scenario {
    build_directed(target, directed_seed(target, n))
}

// ---------------------------------------------------------------------------
// Payloads: what follows the PROXY header.

/// The client's bytes after any PROXY header.
#[derive(Debug, Clone, Default)]
struct Payload {
    /// The hello's records (possibly damaged), or raw bytes.
    framed: Vec<u8>,
    /// After `framed`: 0-RTT data, junk.
    trailing: Vec<u8>,
    /// `framed`'s records are a clean framing of one message.
    clean_framing: bool,
    /// The same message in its original framing, when `framed` re-frames it.
    original: Option<Vec<u8>>,
    /// The normalized name of a built, well-formed hello.
    sni: Option<HostName>,
    /// Its ALPN offer (empty without the extension).
    offer: Vec<Vec<u8>>,
    tags: Vec<String>,
}

impl Payload {
    fn raw(bytes: Vec<u8>, tag: impl Into<String>) -> Self {
        Self {
            framed: bytes,
            tags: vec![tag.into()],
            ..Self::default()
        }
    }
}

/// Frames `message`: the original framing `original` kept as the reference
/// when the message is re-framed (60%; a tenth of those in records of 1 to
/// 3 bytes), or used as is.
fn framed_message(
    rng: &mut Rng,
    message: &[u8],
    original: Vec<u8>,
    tags: &mut Vec<String>,
) -> (Vec<u8>, Option<Vec<u8>>) {
    if rng.chance(60) {
        let records = if rng.chance(10) {
            tiny_records(message, rng, 3)
        } else {
            fragment(message, rng, 6)
        };
        tags.push(format!("reframed×{}", records.len()));
        (serialize(&records), Some(original))
    } else {
        (original, None)
    }
}

/// A built ClientHello.
fn built(
    rng: &mut Rng,
    sni: Option<&str>,
    offer: Option<&[&str]>,
    ech: Option<bool>,
    fault: Option<HelloFault>,
) -> Payload {
    let mut spec = HelloSpec::random(rng, sni.map(|s| s.as_bytes().to_vec()), owned_offer(offer));
    if let Some(ech) = ech {
        spec.ech = ech;
    }
    spec.fault = fault;
    let message = spec.message(rng);
    let mut tags = vec![format!(
        "built sni={} alpn={offer:?} ech={} pad={:?}{}",
        sni.unwrap_or("-"),
        spec.ech,
        spec.padding,
        fault.map_or(String::new(), |f| format!(" fault={f:?}"))
    )];
    let original = serialize(&crate::hello::single_record(&message));
    let (framed, original) = framed_message(rng, &message, original, &mut tags);
    Payload {
        framed,
        trailing: Vec::new(),
        clean_framing: true,
        original,
        sni: if fault.is_none() {
            sni.and_then(|s| HostName::normalize(s.as_bytes()))
        } else {
            None
        },
        offer: owned_offer(offer).unwrap_or_default(),
        tags,
    }
}

/// A corpus file: re-framed when its framing is clean, raw otherwise.
fn from_corpus(rng: &mut Rng, entry: &Entry) -> Payload {
    let mut tags = vec![format!("corpus {}", entry.name)];
    match &entry.message {
        Some(message) => {
            let original = entry.tls()[..entry.records_end].to_vec();
            let (framed, original) = framed_message(rng, message, original, &mut tags);
            Payload {
                framed,
                trailing: entry.trailing().to_vec(),
                clean_framing: true,
                original,
                sni: None,
                offer: Vec::new(),
                tags,
            }
        }
        None => Payload {
            framed: entry.tls().to_vec(),
            tags,
            ..Payload::default()
        },
    }
}

/// Bytes that are not TLS: decided `NotTls` on the first or second byte.
/// Never starts with `P` or CR, so it is not a PROXY header either.
fn not_tls(rng: &mut Rng) -> Payload {
    match rng.below(7) {
        0 => Payload::raw(
            b"GET / HTTP/1.1\r\nHost: a.example.com\r\n\r\n".to_vec(),
            "http",
        ),
        1 => Payload::raw(b"SSH-2.0-OpenSSH_9.6\r\n".to_vec(), "ssh"),
        2 => Payload::raw(b"EHLO client.example.com\r\n".to_vec(), "smtp"),
        3 => {
            let n = rng.range(1, 200);
            let mut bytes = rng.bytes(n);
            while matches!(bytes[0], 22 | b'P' | b'\r') {
                bytes[0] = rng.next_u64() as u8;
            }
            Payload::raw(bytes, "random-bytes")
        }
        4 => {
            let n = rng.range(0, 100);
            let mut bytes = vec![22, 3];
            while bytes[1] == 3 {
                bytes[1] = rng.next_u64() as u8;
            }
            bytes.extend(rng.bytes(n));
            Payload::raw(bytes, "handshake-type-bad-major")
        }
        _ => {
            let files = corpus::of_class(Class::NotTls);
            let entry = files[rng.below(files.len())];
            Payload::raw(entry.raw.to_vec(), format!("corpus {}", entry.name))
        }
    }
}

/// A record-layer defect inside the hello's records: always `MalformedRecord`.
fn malformed_record(rng: &mut Rng, message: &[u8], tags: &mut Vec<String>) -> Vec<u8> {
    let mut records = fragment(message, rng, 6);
    if records.len() < 2 && message.len() >= 2 {
        let cut = rng.range(1, message.len() - 1);
        records = vec![
            Record::handshake(message[..cut].to_vec(), 1),
            Record::handshake(message[cut..].to_vec(), 1),
        ];
    }
    let k = records.len();
    let what = match rng.below(4) {
        0 if k >= 2 => {
            records.insert(rng.range(1, k - 1), Record::change_cipher_spec());
            "ccs-inside-hello"
        }
        1 => {
            records.insert(rng.below(k), Record::handshake(Vec::new(), 1));
            "zero-length-record"
        }
        2 if k >= 2 => {
            let i = rng.range(1, k - 1);
            let mut major = 3;
            while major == 3 {
                major = rng.next_u64() as u8;
            }
            records[i].version[0] = major;
            "bad-major-in-later-record"
        }
        _ => {
            let i = rng.below(k);
            records[i].declared = rng.range(MAX_RECORD + 1, 65_535) as u16;
            "oversized-record"
        }
    };
    tags.push(format!("{what} ({k} records)"));
    serialize(&records)
}

/// A clean hello message (built or from the corpus) and its name, if known.
fn some_message(
    rng: &mut Rng,
    tags: &mut Vec<String>,
) -> (Vec<u8>, Option<HostName>, Vec<Vec<u8>>) {
    if rng.chance(50) {
        // A ClientHello type byte: a message of another type is refused on
        // its first byte, before whatever the caller builds around it.
        let with_message: Vec<&Entry> = corpus::entries()
            .iter()
            .filter(|e| e.message.as_ref().is_some_and(|m| m.first() == Some(&1)))
            .collect();
        let entry = with_message[rng.below(with_message.len())];
        tags.push(format!("corpus {}", entry.name));
        (entry.message.clone().unwrap_or_default(), None, Vec::new())
    } else {
        let &(name, offer, _) = rng.pick(ROUTED_NAMES);
        let spec = HelloSpec::random(rng, Some(name.as_bytes().to_vec()), owned_offer(offer));
        tags.push(format!("built sni={name}"));
        let offer = owned_offer(offer).unwrap_or_default();
        (
            spec.message(rng),
            HostName::normalize(name.as_bytes()),
            offer,
        )
    }
}

/// Damages a payload's TLS bytes at random (random mode only: the outcome
/// is whatever the core says, checked against the one-shot verdict).
fn mutate(rng: &mut Rng, payload: &mut Payload) {
    payload.original = None;
    payload.clean_framing = false;
    payload.sni = None;
    if payload.framed.is_empty() {
        return;
    }
    match rng.below(5) {
        0 => {
            let flips = rng.range(1, 3);
            for _ in 0..flips {
                let i = rng.below(payload.framed.len());
                payload.framed[i] ^= 1 << rng.below(8);
            }
            payload.tags.push(format!("{flips} bit flip(s)"));
        }
        1 => {
            let i = rng.below(payload.framed.len());
            payload.framed[i] = rng.next_u64() as u8;
            payload.tags.push(format!("byte {i} replaced"));
        }
        2 => {
            // A length field lies: somewhere in the first 64 bytes.
            let i = rng.below(payload.framed.len().min(64));
            payload.framed[i] = payload.framed[i].wrapping_add(rng.range(1, 3) as u8);
            payload.tags.push(format!("byte {i} incremented"));
        }
        3 => {
            let n = rng.range(1, 64);
            let at = rng.below(payload.framed.len() + 1);
            let junk = rng.bytes(n);
            payload.framed.splice(at..at, junk);
            payload.tags.push(format!("{n} junk bytes at {at}"));
        }
        _ => {
            let at = rng.below(payload.framed.len());
            payload.framed.truncate(at.max(1));
            payload.tags.push(format!("cut at {}", at.max(1)));
        }
    }
}

/// Bytes after a complete hello: a CCS and early data, or junk.
fn trailing(rng: &mut Rng) -> Vec<u8> {
    let mut out = Vec::new();
    if rng.chance(60) {
        Record::change_cipher_spec().write(&mut out);
        let n = rng.range(1, 300);
        let data = rng.bytes(n);
        Record {
            content_type: CONTENT_APPLICATION_DATA,
            version: [3, 3],
            declared: n as u16,
            payload: data,
        }
        .write(&mut out);
    } else {
        let n = rng.range(1, 2048);
        out = rng.bytes(n);
    }
    out
}

// ---------------------------------------------------------------------------
// Timelines.

fn micros(rng: &mut Rng, lo: u64, hi: u64) -> Duration {
    Duration::from_micros(rng.range_u64(lo, hi))
}

fn as_micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// Cumulative segment ends for a stream of `len` bytes in at most `max`
/// segments, biased to cut next to the `hints` (PROXY header end, records).
fn cuts(rng: &mut Rng, len: usize, hints: &[usize], max: usize) -> Vec<usize> {
    if len == 0 {
        return Vec::new();
    }
    if rng.chance(4) {
        // A drip: the first bytes one at a time (every prefix of the PROXY
        // header and the record headers is seen), then the rest at once.
        let drip = len.min(rng.range(8, 200));
        let mut ends: Vec<usize> = (1..=drip).collect();
        if drip < len {
            ends.push(len);
        }
        return ends;
    }
    let segments = match rng.below(20) {
        0..=3 => 1,
        4..=9 => rng.range(2, 3),
        10..=16 => rng.range(4, 8),
        _ => rng.range(9, 32),
    }
    .min(max.max(1))
    .min(len);
    let mut ends = vec![len];
    for _ in 1..segments {
        let at = if !hints.is_empty() && rng.chance(30) {
            let h = *rng.pick(hints);
            (h + rng.below(3)).saturating_sub(1)
        } else {
            rng.range(1, len - 1)
        };
        if (1..len).contains(&at) {
            ends.push(at);
        }
    }
    ends.sort_unstable();
    ends.dedup();
    ends
}

/// A gap between two arrivals in a random timeline.
fn random_gap(rng: &mut Rng, timeout: Duration, now: Duration, deadline: Duration) -> Duration {
    let t = as_micros(timeout);
    match rng.below(100) {
        0..=34 => Duration::ZERO,
        35..=69 => micros(rng, 1, 5_000),
        70..=87 => micros(rng, 0, t / 2),
        88..=94 => micros(rng, 0, t.saturating_mul(3) / 2),
        // Exactly at the deadline, and a microsecond before it.
        95..=97 => deadline.saturating_sub(now),
        _ => deadline
            .saturating_sub(now)
            .saturating_sub(Duration::from_micros(1)),
    }
}

/// Arrivals with random gaps, starting at `first`.
fn random_arrivals(
    rng: &mut Rng,
    ends: &[usize],
    first: Duration,
    timeout: Duration,
) -> Vec<Arrival> {
    let deadline = first + timeout;
    let mut at = first;
    let mut out = Vec::with_capacity(ends.len());
    for (i, &end) in ends.iter().enumerate() {
        if i > 0 {
            at += random_gap(rng, timeout, at, deadline);
        }
        out.push(Arrival { at, end });
    }
    out
}

/// Arrivals that all land strictly before `first + timeout`.
fn timely_arrivals(
    rng: &mut Rng,
    ends: &[usize],
    first: Duration,
    timeout: Duration,
) -> Vec<Arrival> {
    let mut budget = as_micros(timeout).saturating_sub(1);
    let mut at = first;
    let mut out = Vec::with_capacity(ends.len());
    for (i, &end) in ends.iter().enumerate() {
        if i > 0 {
            let left = (ends.len() - i) as u64;
            let gap = if rng.chance(40) {
                0
            } else {
                rng.range_u64(0, budget / left)
            };
            budget -= gap;
            at += Duration::from_micros(gap);
        }
        out.push(Arrival { at, end });
    }
    out
}

/// When the first byte arrives in a directed scenario that must not trip
/// the server-first timer or the silence timer: strictly before both.
fn timely_first(rng: &mut Rng, listener: &Listener) -> Duration {
    let silence = as_micros(listener.timeout).saturating_sub(1);
    let limit = listener
        .server_first
        .map_or(100_000, |sft| as_micros(sft).saturating_sub(1))
        .min(silence)
        .min(100_000);
    if rng.chance(50) {
        Duration::ZERO
    } else {
        micros(rng, 0, limit)
    }
}

// ---------------------------------------------------------------------------
// Assembly.

/// Puts prefix and payload together into a scenario (timeline not set).
fn assemble(
    seed: u64,
    target: Option<Target>,
    listener: Listener,
    prefix: Option<Prefix>,
    payload: Payload,
) -> Scenario {
    let mut tags = Vec::new();
    let mut stream = Vec::new();
    let mut truth = Truth::default();
    if let Some(p) = &prefix {
        tags.push(format!(
            "proxy {} ({} bytes{})",
            p.kind,
            p.bytes.len(),
            if p.valid { "" } else { ", invalid" }
        ));
        stream.extend_from_slice(&p.bytes);
        truth.prefix_len = p.bytes.len();
        truth.prefix_valid = p.valid;
        truth.source = p.source;
    }
    let head = stream.clone();
    stream.extend_from_slice(&payload.framed);
    if payload.clean_framing {
        truth.hello_end = Some(stream.len());
    }
    stream.extend_from_slice(&payload.trailing);
    truth.sni = payload.sni;
    truth.lookup = payload
        .sni
        .map(|name| model_lookup(&listener.routes, name.as_str(), &payload.offer));
    let reframing = payload.original.map(|original| {
        let mut reference = head;
        reference.extend_from_slice(&original);
        reference.extend_from_slice(&payload.trailing);
        (reference, stream.clone())
    });
    tags.extend(payload.tags);
    if !payload.trailing.is_empty() {
        tags.push(format!("{} trailing bytes", payload.trailing.len()));
    }
    Scenario {
        seed,
        target,
        tags,
        listener,
        stream,
        arrivals: Vec::new(),
        close: None,
        probes: Vec::new(),
        jitter_seed: seed ^ 0x6a09_e667_f3bc_c908,
        truth,
        reframing,
    }
}

fn hints(sc: &Scenario) -> Vec<usize> {
    let mut h = vec![sc.truth.prefix_len];
    h.extend(sc.truth.hello_end);
    h.retain(|&x| x > 0);
    h
}

fn build_random(seed: u64) -> Scenario {
    let mut rng = Rng::new(seed);
    let mut listener = Listener::random(&mut rng.fork());
    let mut payload = match rng.below(100) {
        0..=37 => {
            let entries = corpus::entries();
            {
                let i = rng.below(entries.len());
                from_corpus(&mut rng, &entries[i])
            }
        }
        38..=77 => {
            let name = if rng.chance(70) {
                Some(rng.pick(ROUTED_NAMES).0)
            } else if rng.chance(80) {
                Some(*rng.pick(UNMATCHED_NAMES))
            } else {
                None
            };
            let offer = *rng.pick(OFFERS);
            built(&mut rng, name, offer, None, None)
        }
        78..=87 => not_tls(&mut rng),
        88..=90 => Payload::raw(Vec::new(), "silent"),
        91..=94 => {
            let mut tags = Vec::new();
            let (message, _, _) = some_message(&mut rng, &mut tags);
            let framed = malformed_record(&mut rng, &message, &mut tags);
            Payload {
                framed,
                tags,
                ..Payload::default()
            }
        }
        _ => {
            let fault = *rng.pick(&HelloFault::ALL);
            let &(name, offer, _) = rng.pick(ROUTED_NAMES);
            built(&mut rng, Some(name), offer, None, Some(fault))
        }
    };
    if payload.clean_framing && rng.chance(15) {
        payload.trailing = trailing(&mut rng);
    }
    if !payload.framed.is_empty() && rng.chance(12) {
        mutate(&mut rng, &mut payload);
    }
    let prefix = match rng.below(100) {
        0..=29 => Some(prefix::valid(&mut rng)),
        30..=33 => Some(prefix::invalid(&mut rng)),
        _ => None,
    };
    listener.expect_proxy = prefix.is_some() != rng.chance(8);
    listener.pick_mode(&mut rng);
    let mut sc = assemble(seed, None, listener, prefix, payload);

    // The cap right at the hello's end: complete at the cap routes,
    // one byte short is TooLarge (LIFECYCLE.md §7).
    if let Some(end) = sc.truth.hello_end
        && rng.chance(6)
    {
        let cap = (end + rng.below(3)).saturating_sub(1);
        sc.listener.configured_max = cap;
        sc.tags.push(format!(
            "cap {} at the hello's end {end}",
            sc.listener.effective_max()
        ));
    }
    // The client may stop early (and then often closes): a truncation.
    let mut truncated = false;
    if sc.stream.len() > 1 && rng.chance(20) {
        let at = rng.range(1, sc.stream.len() - 1);
        sc.stream.truncate(at);
        sc.tags.push(format!("client stops after {at} bytes"));
        truncated = true;
    }
    let timeout = sc.listener.timeout;
    let first = match (rng.below(20), sc.listener.server_first) {
        // Exactly when the server-first timer is due: the bytes win (I/O
        // before timers in a loop turn).
        (0, Some(sft)) => sft,
        (0..=9, _) => Duration::ZERO,
        (10..=15, _) => micros(&mut rng, 1, 50_000),
        _ => micros(&mut rng, 0, 4_000_000),
    };
    let ends = cuts(&mut rng, sc.stream.len(), &hints(&sc), 32);
    sc.arrivals = random_arrivals(&mut rng, &ends, first, timeout);
    let last = sc.arrivals.last().map_or(first, |a| a.at);
    if rng.chance(if truncated { 60 } else { 25 }) {
        let gap = match rng.below(10) {
            0..=3 => Duration::ZERO,
            4..=7 => micros(&mut rng, 1, as_micros(timeout) / 2),
            _ => micros(&mut rng, 0, as_micros(timeout) * 2),
        };
        sc.close = Some(last + gap);
    }
    if !sc.stream.is_empty() && rng.chance(10) {
        for _ in 0..rng.range(1, 2) {
            sc.probes
                .push(first + micros(&mut rng, 0, as_micros(timeout)));
        }
        sc.probes.sort_unstable();
    }
    sc
}

/// Which length field of a directed `TooLarge` scenario announces more
/// than the cap, before the window reaches it.
#[derive(Debug, Clone, Copy)]
enum Announce {
    /// The handshake header says 16 MiB; its record is an ordinary one.
    Handshake,
    /// The first record's length runs past the cap.
    Record,
    /// A PROXY v2 header's length says 65,535 bytes.
    ProxyV2,
}

impl Announce {
    /// The ClientHello's records for the TLS kinds: one record carrying
    /// `message` (its first 2^14 bytes), the handshake length replaced by
    /// 2^24 - 1 for [`Announce::Handshake`].
    fn records(self, mut message: Vec<u8>) -> Vec<u8> {
        if let Self::Handshake = self {
            message[1..4].copy_from_slice(&[0xff, 0xff, 0xff]);
        }
        message.truncate(MAX_RECORD);
        serialize(&[Record::handshake(message, 1)])
    }
}

/// How the directed scenario's bytes are delivered.
enum Delivery {
    /// Every byte before the deadline and the server-first timer; the
    /// client may close after its last byte.
    Timely,
    /// As `Timely`, but the client stalls: a close, if any, comes after
    /// the deadline's timer.
    Stall,
    /// Every byte before the deadline, then a close before it.
    CloseBeforeDeadline,
    /// The first `usize` bytes in time, the rest at or after the deadline.
    LateAfter(usize),
    /// Nothing before the server-first timer (plus its worst lateness).
    AfterServerFirst,
    /// A load balancer's header, whole within half a timeout, starting
    /// before or after the server-first timer; the client stays silent.
    HeaderAroundServerFirst,
}

fn build_directed(target: Target, seed: u64) -> Scenario {
    let mut rng = Rng::new(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0xd1b5_4a32_d192_ed03);
    let mut listener = Listener::random(&mut rng.fork());
    // A valid PROXY header in front (behind a load balancer), or none.
    let mut prefix = rng.chance(30).then(|| prefix::valid(&mut rng));
    let mut delivery = Delivery::Timely;
    let mut cap_at_least = true;
    let mut truncate_to: Option<usize> = None;
    let mut announce = None;
    // A listener behind a load balancer whose header never comes.
    let mut awaits_header = false;

    let payload = match target {
        Target::Routed => {
            let &(name, offer, route) = rng.pick(ROUTED_NAMES);
            listener.force_route(route);
            built(&mut rng, Some(name), offer, None, None)
        }
        Target::Reject(RejectReason::AccessDenied) => {
            // A routed hello whose fingerprint the listener denies, the
            // fingerprint taken by the parser from the hello itself.
            let &(name, offer, route) = rng.pick(ROUTED_NAMES);
            listener.force_route(route);
            let payload = built(&mut rng, Some(name), offer, None, None);
            let single = payload.original.as_deref().unwrap_or(&payload.framed);
            let mut scratch = Vec::new();
            if let Ok(Parsed::Complete(hello)) = parse_client_hello(single, &mut scratch) {
                listener.deny_ja4.push(Ja4::of(&hello, Transport::Tcp));
            }
            payload
        }
        Target::Reject(RejectReason::NotTls) | Target::Fallback(FallbackReason::NotTls) => {
            not_tls(&mut rng)
        }
        Target::Reject(RejectReason::NoSni) | Target::Fallback(FallbackReason::NoSni) => {
            if rng.chance(40) {
                let files = corpus::of_class(Class::NoSni);
                {
                    let i = rng.below(files.len());
                    from_corpus(&mut rng, files[i])
                }
            } else {
                let offer = *rng.pick(OFFERS);
                built(&mut rng, None, offer, Some(false), None)
            }
        }
        Target::Reject(RejectReason::EchOuterAbsent)
        | Target::Fallback(FallbackReason::EchOuterAbsent) => {
            if rng.chance(40) {
                let files = corpus::of_class(Class::EchOuterAbsent);
                {
                    let i = rng.below(files.len());
                    from_corpus(&mut rng, files[i])
                }
            } else {
                let offer = *rng.pick(OFFERS);
                built(&mut rng, None, offer, Some(true), None)
            }
        }
        Target::Reject(RejectReason::SniUnmatched)
        | Target::Fallback(FallbackReason::SniUnmatched) => {
            let name = *rng.pick(UNMATCHED_NAMES);
            let offer = *rng.pick(OFFERS);
            built(&mut rng, Some(name), offer, None, None)
        }
        Target::Reject(RejectReason::AlpnUnmatched) => {
            let name = if rng.chance(60) {
                for i in C_EXAMPLE {
                    listener.force_route(i);
                }
                *rng.pick(&["c.example.com", "C.Example.Com.", "c.example.com."])
            } else {
                listener.force_route(STAR_ORG);
                *rng.pick(&["www.example.org", "WWW.example.org"])
            };
            let offer = *rng.pick(FOREIGN_OFFERS);
            built(&mut rng, Some(name), offer, None, None)
        }
        Target::Reject(RejectReason::MalformedRecord) => {
            if rng.chance(20) {
                let files = corpus::of_class(Class::MalformedRecord);
                let entry = files[rng.below(files.len())];
                Payload::raw(entry.raw.to_vec(), format!("corpus {}", entry.name))
            } else {
                let mut tags = Vec::new();
                let (message, _, _) = some_message(&mut rng, &mut tags);
                let framed = malformed_record(&mut rng, &message, &mut tags);
                Payload {
                    framed,
                    tags,
                    ..Payload::default()
                }
            }
        }
        Target::Reject(RejectReason::MalformedHandshake) => match rng.below(10) {
            0..=2 => {
                let files = corpus::of_class(Class::MalformedHandshake);
                let mut p = {
                    let i = rng.below(files.len());
                    from_corpus(&mut rng, files[i])
                };
                p.clean_framing = false;
                p
            }
            3 => {
                // The last record carries bytes past the message.
                let mut tags = Vec::new();
                let (message, _, _) = some_message(&mut rng, &mut tags);
                let mut records = fragment(&message, &mut rng, 4);
                let mut last = records.len() - 1;
                if records[last].payload.len() == MAX_RECORD {
                    // A full record has no room: its last byte moves to a new one.
                    let tail = records[last].payload.split_off(MAX_RECORD - 1);
                    records[last].declared = (MAX_RECORD - 1) as u16;
                    records.push(Record::handshake(tail, 1));
                    last += 1;
                }
                let room = MAX_RECORD - records[last].payload.len();
                let extra = rng.range(1, 16).min(room);
                records[last].payload.extend(rng.bytes(extra));
                records[last].declared = records[last].payload.len() as u16;
                tags.push("trailing handshake data".to_owned());
                Payload {
                    framed: serialize(&records),
                    tags,
                    ..Payload::default()
                }
            }
            _ => {
                let fault = *rng.pick(&HelloFault::ALL);
                let fault = match fault {
                    HelloFault::NotClientHello(_) => {
                        let mut t = 1;
                        while t == 1 {
                            t = rng.next_u64() as u8;
                        }
                        HelloFault::NotClientHello(t)
                    }
                    other => other,
                };
                let &(name, offer, _) = rng.pick(ROUTED_NAMES);
                let mut p = built(&mut rng, Some(name), offer, None, Some(fault));
                p.clean_framing = false;
                p
            }
        },
        Target::Reject(RejectReason::ProxyHeaderInvalid) => {
            listener.expect_proxy = true;
            match rng.below(4) {
                0 => {
                    let files = corpus::of_class(Class::ProxyHeaderInvalid);
                    let entry = files[rng.below(files.len())];
                    prefix = None;
                    Payload::raw(entry.raw.to_vec(), format!("corpus {}", entry.name))
                }
                1 => {
                    // No header at all: a TLS or plain client on a PROXY listener.
                    prefix = None;
                    if rng.chance(50) {
                        let mut tags = Vec::new();
                        let (message, _, _) = some_message(&mut rng, &mut tags);
                        Payload {
                            framed: serialize(&fragment(&message, &mut rng, 3)),
                            tags,
                            ..Payload::default()
                        }
                    } else {
                        not_tls(&mut rng)
                    }
                }
                _ => {
                    prefix = Some(prefix::invalid(&mut rng));
                    let mut tags = Vec::new();
                    let (message, _, _) = some_message(&mut rng, &mut tags);
                    Payload {
                        framed: serialize(&fragment(&message, &mut rng, 3)),
                        tags,
                        ..Payload::default()
                    }
                }
            }
        }
        Target::Reject(RejectReason::TooLarge) if rng.chance(45) => {
            cap_at_least = false;
            let kind = *rng.pick(&[Announce::Handshake, Announce::Record, Announce::ProxyV2]);
            announce = Some(kind);
            let mut tags = vec![format!("announces past the cap: {kind:?}")];
            if let Announce::ProxyV2 = kind {
                let extra = rng.below(40);
                prefix = Some(prefix::announcing_v2(&mut rng, extra));
                Payload {
                    tags,
                    ..Payload::default()
                }
            } else {
                let (message, _, _) = some_message(&mut rng, &mut tags);
                Payload {
                    framed: kind.records(message),
                    tags,
                    ..Payload::default()
                }
            }
        }
        Target::Reject(RejectReason::TooLarge) => {
            cap_at_least = false;
            let mut tags = Vec::new();
            let (message, sni, offer) = some_message(&mut rng, &mut tags);
            let original = serialize(&crate::hello::single_record(&message));
            let (framed, original) = framed_message(&mut rng, &message, original, &mut tags);
            Payload {
                framed,
                clean_framing: true,
                original,
                sni,
                offer,
                tags,
                ..Payload::default()
            }
        }
        Target::Reject(RejectReason::Fragmented) | Target::Reject(RejectReason::FrontClosed) => {
            let mut tags = Vec::new();
            let (message, sni, offer) = some_message(&mut rng, &mut tags);
            let original = serialize(&crate::hello::single_record(&message));
            let (framed, original) = framed_message(&mut rng, &message, original, &mut tags);
            Payload {
                framed,
                clean_framing: true,
                original,
                sni,
                offer,
                tags,
                ..Payload::default()
            }
        }
        Target::Reject(RejectReason::QuicUndecryptable | RejectReason::QuicVersion) => {
            unreachable!("a TCP scenario never targets a QUIC reason: Target::ALL lists none")
        }
        Target::SilentTimeout => {
            // Nothing, or a load balancer's header and then nothing; no
            // server-first route, except one that must wait for a header
            // that never comes.
            listener.without_default();
            if rng.chance(40) {
                prefix = Some(prefix::valid(&mut rng));
            } else {
                prefix = None;
                let timeout_ms = as_micros(listener.timeout) / 1_000;
                if timeout_ms >= 2 && rng.chance(40) {
                    awaits_header = true;
                    listener.default_cluster = true;
                    listener.server_first =
                        Some(Duration::from_millis(rng.range_u64(1, timeout_ms - 1)));
                }
            }
            delivery = Delivery::Stall;
            Payload::raw(Vec::new(), "silent")
        }
        Target::Fallback(FallbackReason::ServerFirst) if rng.chance(40) => {
            // Behind a load balancer: its header, and a silent client.
            prefix = Some(prefix::valid(&mut rng));
            Payload::raw(Vec::new(), "silent behind a PROXY header")
        }
        Target::Fallback(FallbackReason::ServerFirst) => {
            prefix = None;
            match rng.below(3) {
                0 => Payload::raw(Vec::new(), "silent"),
                1 => not_tls(&mut rng),
                _ => {
                    let &(name, offer, _) = rng.pick(ROUTED_NAMES);
                    built(&mut rng, Some(name), offer, None, None)
                }
            }
        }
    };

    // The default cluster decides between a reject and a fallback.
    match target {
        Target::Fallback(reason) => {
            listener.default_cluster = true;
            if reason == FallbackReason::ServerFirst {
                listener.server_first = Some(Duration::from_millis(rng.range_u64(1, 3_000)));
                listener.expect_proxy = prefix.is_some();
            }
        }
        Target::Reject(reason) if reason.fallback().is_some() => listener.without_default(),
        _ => {}
    }
    if target != Target::Reject(RejectReason::ProxyHeaderInvalid)
        && target != Target::Fallback(FallbackReason::ServerFirst)
    {
        listener.expect_proxy = prefix.is_some() || awaits_header;
    }
    listener.pick_mode(&mut rng);
    let mut sc = assemble(seed, Some(target), listener, prefix, payload);
    let needed = sc.truth.hello_end.unwrap_or(sc.stream.len());

    match target {
        Target::Reject(RejectReason::TooLarge) if announce.is_some() => {
            // The length field is read below the cap, and the client then
            // stalls short of it: only the announcement can decide in time.
            let head = sc.truth.prefix_len;
            let at = match announce {
                Some(Announce::ProxyV2) => 16,
                Some(Announce::Record) => head + 5,
                _ => head + 9,
            };
            let record_end = sc.stream.len();
            let cap = match announce {
                Some(Announce::Record) => rng.range(at + 1, record_end - 1),
                _ => rng.range(sc.stream.len() + 1, sc.stream.len() + 2_000),
            };
            sc.listener.configured_max = cap;
            let cap = sc.listener.effective_max();
            truncate_to = Some(rng.range(at, sc.stream.len().min(cap - 1)));
            sc.truth.announced_at = Some(at);
            sc.truth.hello_end = None;
            delivery = Delivery::Stall;
            sc.tags.push(format!("cap {cap}, announced by byte {at}"));
        }
        Target::Reject(RejectReason::TooLarge) => {
            // A cap below what completes the hello (the buffers no longer
            // lower it: the window grows up to the cap).
            let cap = rng.range(5, needed - 1);
            sc.listener.configured_max = cap;
            sc.tags.push(format!(
                "cap {} < {needed} needed",
                sc.listener.effective_max()
            ));
        }
        Target::Reject(RejectReason::Fragmented) => {
            // Past the load balancer's header: a client that has not spoken
            // by the deadline is a silent timeout, not a fragmented hello.
            let spoken = sc.truth.prefix_len + 1;
            if rng.chance(50) {
                truncate_to = Some(rng.range(spoken, needed - 1));
                delivery = Delivery::Stall;
            } else {
                delivery = Delivery::LateAfter(rng.range(spoken, needed - 1));
            }
        }
        Target::Reject(RejectReason::FrontClosed) => {
            // Past the load balancer's header: a close before the client
            // spoke is silent, not a reject.
            truncate_to = Some(rng.range(sc.truth.prefix_len + 1, needed - 1));
            delivery = Delivery::CloseBeforeDeadline;
        }
        Target::Fallback(FallbackReason::ServerFirst) if sc.listener.expect_proxy => {
            delivery = Delivery::HeaderAroundServerFirst;
        }
        Target::Fallback(FallbackReason::ServerFirst) => delivery = Delivery::AfterServerFirst,
        _ => {}
    }
    if cap_at_least {
        // One byte more than the stream: a window that fills the cap is
        // TooLarge, and a header alone must leave room for the client.
        sc.listener.ensure_cap(sc.stream.len() + 1);
    }
    if let Some(n) = truncate_to {
        sc.stream.truncate(n);
        sc.tags.push(format!("client stops after {n} bytes"));
    }

    let timeout = sc.listener.timeout;
    let hint_list = hints(&sc);
    let mut in_time = sc.stream.len();
    match delivery {
        Delivery::Timely | Delivery::Stall | Delivery::CloseBeforeDeadline => {
            let first = timely_first(&mut rng, &sc.listener);
            let ends = cuts(&mut rng, sc.stream.len(), &hint_list, 12);
            sc.arrivals = timely_arrivals(&mut rng, &ends, first, timeout);
            let last = sc.arrivals.last().map_or(first, |a| a.at);
            let room = as_micros((first + timeout).saturating_sub(last)).saturating_sub(1);
            if matches!(delivery, Delivery::CloseBeforeDeadline) {
                sc.close = Some(last + Duration::from_micros(rng.range_u64(0, room)));
            } else if matches!(delivery, Delivery::Stall) {
                // The deadline's timer wakes at most 2 ms late.
                if rng.chance(40) {
                    sc.close = Some(first + timeout + micros(&mut rng, 3_000, 1_000_000));
                }
            } else if rng.chance(30) {
                sc.close = Some(last + micros(&mut rng, 0, as_micros(timeout) * 2));
            }
        }
        Delivery::LateAfter(split) => {
            in_time = split;
            let first = timely_first(&mut rng, &sc.listener);
            let ends = cuts(&mut rng, split, &[], 6);
            sc.arrivals = timely_arrivals(&mut rng, &ends, first, timeout);
            let deadline = first + timeout;
            let late = if rng.chance(30) {
                deadline
            } else {
                deadline + micros(&mut rng, 1, as_micros(timeout))
            };
            let rest = cuts(&mut rng, sc.stream.len() - split, &[], 4);
            let mut at = late;
            for end in rest {
                sc.arrivals.push(Arrival {
                    at,
                    end: split + end,
                });
                at += micros(&mut rng, 0, 2_000);
            }
            sc.tags.push(format!(
                "bytes after {split} arrive at or after the deadline"
            ));
        }
        Delivery::HeaderAroundServerFirst => {
            in_time = 0;
            let sft = sc.listener.server_first.unwrap_or(Duration::from_millis(1));
            let half = timeout / 2;
            // Before the silence timer, which a shorter server-first timer
            // leaves armed.
            let latest = if sft < timeout {
                (sft + half).min(timeout)
            } else {
                sft + half
            };
            let first = micros(&mut rng, 0, as_micros(latest).saturating_sub(1));
            let ends = cuts(&mut rng, sc.stream.len(), &hint_list, 4);
            sc.arrivals = timely_arrivals(&mut rng, &ends, first, half);
            if rng.chance(40) {
                // After the decision: the timer (late by up to 2 ms) or the
                // header's last byte, whichever is later.
                let last = sc.arrivals.last().map_or(first, |a| a.at);
                sc.close = Some(last.max(sft) + micros(&mut rng, 3_000, 1_000_000));
            }
        }
        Delivery::AfterServerFirst => {
            in_time = 0;
            let sft = sc.listener.server_first.unwrap_or(Duration::from_millis(1));
            // The driver wakes a timer up to 2 ms late; arrive later than that.
            let first = sft + micros(&mut rng, 3_000, 2_000_000);
            let ends = cuts(&mut rng, sc.stream.len(), &hint_list, 8);
            sc.arrivals = random_arrivals(&mut rng, &ends, first, timeout);
            if rng.chance(40) {
                let last = sc.arrivals.last().map_or(first, |a| a.at);
                sc.close = Some(last + micros(&mut rng, 0, 1_000_000));
            }
        }
    }
    if in_time > sc.truth.prefix_len {
        speak_before_server_first(&mut sc);
    }
    debug_assert!(sc.listener.server_first.is_none() || sc.listener.default_cluster);
    sc
}

/// With a server-first timer behind a load balancer, makes the first
/// arrival (before the timer) carry the client's first byte past the
/// header: the header alone does not stop the timer.
fn speak_before_server_first(sc: &mut Scenario) {
    if sc.listener.server_first.is_none() || !sc.listener.expect_proxy {
        return;
    }
    let spoken = (sc.truth.prefix_len + 1).min(sc.stream.len());
    let Some(first) = sc.arrivals.first_mut() else {
        return;
    };
    if first.end >= spoken {
        return;
    }
    first.end = spoken;
    let mut kept = Vec::with_capacity(sc.arrivals.len());
    for arrival in sc.arrivals.drain(..) {
        if kept
            .last()
            .is_none_or(|last: &Arrival| arrival.end > last.end)
        {
            kept.push(arrival);
        }
    }
    sc.arrivals = kept;
    sc.tags
        .push("the client speaks before the server-first timer".into());
}

#[cfg(test)]
mod tests {
    use super::{DIRECTED_BIT, Target, directed_seed, scenario, target_of};

    #[test]
    fn seeds_encode_their_target() {
        for target in Target::ALL {
            let seed = directed_seed(target, 12_345);
            assert_eq!(target_of(seed), Some(target));
            assert_eq!(scenario(seed).target, Some(target));
        }
        assert_eq!(target_of(42), None);
        assert_eq!(target_of(DIRECTED_BIT - 1), None);
    }

    #[test]
    fn timelines_are_well_formed() {
        for seed in (0..3000)
            .chain((0..500).map(|n| directed_seed(Target::ALL[n as usize % Target::ALL.len()], n)))
        {
            let sc = scenario(seed);
            let mut prev = None;
            for a in &sc.arrivals {
                if let Some(p) = prev {
                    let p: super::Arrival = p;
                    assert!(a.at >= p.at && a.end > p.end, "{}", sc.describe());
                }
                prev = Some(*a);
            }
            assert_eq!(
                sc.arrivals.last().map_or(0, |a| a.end),
                sc.stream.len(),
                "{}",
                sc.describe()
            );
            if let (Some(close), Some(last)) = (sc.close, sc.arrivals.last()) {
                assert!(close >= last.at, "{}", sc.describe());
            }
            assert!(sc.listener.server_first.is_none() || sc.listener.default_cluster);
        }
    }
}
