//! `preread inspect`: what the proxy makes of captured client bytes, offline.
//!
//! Owns: turning one capture into the JSON object of doc/configure.md: a
//! description through the same parsers the worker uses, and the decision
//! through the same preread step (`preread_core::step`), the capture
//! delivered as reads (one, or the sizes of `--reads`), each capped as the
//! worker caps it. Must never: touch the network, decide anything the step
//! does not, or stop at the first unreadable file (each input is reported
//! on its own).

use std::time::{Duration, Instant};

use preread_core::Route;
use preread_core::sni::HostName;
use preread_core::step::{
    Close, Event, Farewell, Next, PrereadListener, PrereadStep, StepTimer, TimerAction, TimerPlan,
};
use preread_parser::proxy::{Command, ProxyHeader, ProxyParsed, parse_proxy_header};
use preread_parser::tls::{
    AlertDescription, ClientHello, Ja4, Needed, Parsed, TlsError, Transport, parse_client_hello,
};
use serde_json::{Map, Value, json};

use crate::pcap::Arrival;

/// How `inspect` reads its inputs.
#[derive(Debug, Clone, Default)]
pub struct InspectOptions {
    /// A PROXY v1/v2 header precedes the ClientHello.
    pub expect_proxy: bool,
    /// With a config: the listener whose routes decide, as the worker
    /// holds it (its effective cap, its catch-all frontend).
    pub listener: Option<PrereadListener>,
    /// The sizes of the reads the capture arrives in; whatever is left
    /// after them is one last read. Empty: the whole capture in one read.
    pub reads: Vec<usize>,
    /// When the bytes arrived (a capture off the wire): replaces `reads`.
    pub timeline: Option<Timeline>,
}

/// Why an input could not be turned into bytes.
#[derive(Debug)]
#[non_exhaustive]
pub enum InputError {
    /// `--hex` input holds a character that is neither a hex digit nor white space.
    BadHexCharacter { offset: usize, found: char },
    /// `--hex` input has an odd number of hex digits.
    OddHexDigits,
}

impl std::fmt::Display for InputError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::BadHexCharacter { offset, found } => write!(
                f,
                "character {found:?} at offset {offset} is not a hex digit (--hex reads pairs of hex digits; white space and ':' are ignored)"
            ),
            Self::OddHexDigits => {
                f.write_str("odd number of hex digits: the last byte is cut in half")
            }
        }
    }
}

impl std::error::Error for InputError {}

/// Decodes hex text: pairs of hex digits, white space and ':' ignored.
pub fn decode_hex(text: &str) -> Result<Vec<u8>, InputError> {
    let mut out = Vec::with_capacity(text.len() / 2);
    let mut high: Option<u8> = None;
    for (offset, c) in text.char_indices() {
        if c.is_whitespace() || c == ':' {
            continue;
        }
        let Some(nibble) = c.to_digit(16) else {
            return Err(InputError::BadHexCharacter { offset, found: c });
        };
        let nibble = nibble as u8;
        match high.take() {
            Some(h) => out.push((h << 4) | nibble),
            None => high = Some(nibble),
        }
    }
    if high.is_some() {
        return Err(InputError::OddHexDigits);
    }
    Ok(out)
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

fn tlv_json(tlv_type: u8, value: &[u8]) -> Value {
    let mut tlv = json!({ "type": tlv_type, "len": value.len(), "hex": hex(value) });
    if !value.is_empty() && value.iter().all(u8::is_ascii_graphic) {
        tlv["text"] = Value::String(String::from_utf8_lossy(value).into_owned());
    }
    tlv
}

fn proxy_json(header: &ProxyHeader<'_>) -> Value {
    let address = |a: Option<std::net::SocketAddr>| a.map(|a| a.to_string());
    let command = match header.command() {
        Command::Local => "local",
        Command::Proxy => "proxy",
    };
    json!({
        "version": header.version(),
        "len": header.len(),
        "command": command,
        "source": address(header.source()),
        "destination": address(header.destination()),
        "tlvs": header.tlvs().map(|(t, v)| tlv_json(t, v)).collect::<Vec<_>>(),
    })
}

fn parse_name(error: &TlsError) -> &'static str {
    match error {
        TlsError::NotTls => "not_tls",
        TlsError::MalformedRecord(_) => "malformed_record",
        _ => "malformed_handshake",
    }
}

pub(crate) fn hello_fields(out: &mut Map<String, Value>, hello: &ClientHello<'_>, offset: usize) {
    out.insert("records".into(), json!(hello.records));
    out.insert("hello_len".into(), json!(hello.handshake_len));
    let sni = hello
        .server_name
        .and_then(HostName::normalize)
        .map(|name| name.as_str().to_owned());
    out.insert("sni".into(), json!(sni));
    let alpn = hello.alpn.map(|alpn| {
        alpn.iter()
            .map(|p| String::from_utf8_lossy(p).into_owned())
            .collect::<Vec<_>>()
    });
    out.insert("alpn".into(), json!(alpn));
    out.insert(
        "ech".into(),
        json!(hello.ech.map_or("absent", |e| e.as_str())),
    );
    out.insert(
        "legacy_version".into(),
        json!(format!("{:04x}", hello.legacy_version)),
    );
    let versions = hello
        .supported_versions
        .map(|v| v.iter().map(|v| format!("{v:04x}")).collect::<Vec<_>>());
    out.insert("supported_versions".into(), json!(versions));
    out.insert("ja4".into(), json!(Ja4::of(hello, Transport::Tcp).as_str()));
    out.insert(
        "ja4_r".into(),
        json!(Ja4::raw(hello, Transport::Tcp).to_string()),
    );
    out.insert("end".into(), json!(offset + hello.end));
}

/// What the step ended with for one capture, and how much of it was read.
struct Delivered {
    next: Next,
    farewell: Farewell,
    read: usize,
}

/// When a capture's bytes reached the proxy, for a capture taken off the
/// wire (`inspect --pcap`): the step's timers then fire as they would have.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Timeline {
    /// The accept, from any fixed origin (the capture's clock).
    pub accepted: Duration,
    /// When the contiguous bytes grew, and to what length, in order.
    pub arrivals: Vec<Arrival>,
    /// When the client closed, after every byte.
    pub closed: Option<Duration>,
    /// Where the capture ends: a timer due by then fired.
    pub end: Duration,
}

/// The step's armed timers.
#[derive(Default)]
struct Armed([Option<Instant>; 3]);

impl Armed {
    const TIMERS: [StepTimer; 3] = [
        StepTimer::Preread,
        StepTimer::ServerFirst,
        StepTimer::Silent,
    ];

    fn apply(&mut self, plan: TimerPlan) {
        for (slot, timer) in self.0.iter_mut().zip(Self::TIMERS) {
            match plan.get(timer) {
                TimerAction::Arm(at) => *slot = Some(at),
                TimerAction::Cancel => *slot = None,
                TimerAction::Keep => {}
            }
        }
    }

    /// The first timer due by `now`, disarmed.
    fn due(&mut self, now: Instant) -> Option<(StepTimer, Instant)> {
        let (index, at) = self
            .0
            .iter()
            .enumerate()
            .filter_map(|(index, at)| at.map(|at| (index, at)))
            .filter(|&(_, at)| at <= now)
            .min_by_key(|&(_, at)| at)?;
        self.0[index] = None;
        Some((Self::TIMERS[index], at))
    }
}

/// One capture's step, its timers and what it said last.
struct Run<'l> {
    listener: &'l PrereadListener,
    step: PrereadStep,
    armed: Armed,
    next: Next,
    farewell: Farewell,
}

impl Run<'_> {
    fn handle(&mut self, event: Event<'_>, now: Instant) {
        let actions = self.step.handle(self.listener, event, now);
        self.armed.apply(actions.timers);
        (self.next, self.farewell) = (actions.next, actions.farewell);
    }

    /// Fires, in order, the timers due by `now` while the step reads.
    fn fire_until(&mut self, now: Instant) {
        while self.next == Next::Read {
            let Some((timer, at)) = self.armed.due(now) else {
                break;
            };
            self.handle(Event::Timer(timer), at);
        }
    }
}

/// Delivers `bytes` to a fresh step as the worker would receive them: each
/// arrival is read while the step's budget allows and bytes remain, the
/// whole window handed over after every read; a timer due before an
/// arrival (or before the close, or the capture's end) fires first. Stops
/// at the decision.
fn deliver(listener: &PrereadListener, bytes: &[u8], timeline: &Timeline) -> Delivered {
    let origin = Instant::now();
    let clock = |at: Duration| origin + at.saturating_sub(timeline.accepted);
    let (step, actions) = PrereadStep::accept(listener, origin);
    let mut run = Run {
        listener,
        step,
        armed: Armed::default(),
        next: actions.next,
        farewell: Farewell::Fin,
    };
    run.armed.apply(actions.timers);
    let mut window: Vec<u8> = Vec::new();
    for arrival in &timeline.arrivals {
        let now = clock(arrival.at);
        run.fire_until(now);
        let arrived = arrival.len.min(bytes.len());
        while run.next == Next::Read {
            let take = run
                .step
                .read_budget(listener, window.len())
                .min(arrived.saturating_sub(window.len()));
            if take == 0 {
                break;
            }
            window.extend_from_slice(&bytes[window.len()..window.len() + take]);
            let event = Event::Read {
                window: &window,
                added: take,
                eof: false,
            };
            run.handle(event, now);
        }
    }
    match timeline.closed {
        Some(closed) => {
            run.fire_until(clock(closed));
            if run.next == Next::Read {
                let event = Event::Read {
                    window: &window,
                    added: 0,
                    eof: true,
                };
                run.handle(event, clock(closed));
            }
        }
        None => run.fire_until(clock(timeline.end)),
    }
    Delivered {
        next: run.next,
        farewell: run.farewell,
        read: window.len(),
    }
}

/// The arrivals of a capture read offline: the chunks of `reads`, then the
/// rest, all at once, with no timer due.
fn reads_at_once(total: usize, reads: &[usize]) -> Timeline {
    let mut len = 0;
    let arrivals = reads
        .iter()
        .copied()
        .chain(std::iter::once(total.saturating_sub(reads.iter().sum())))
        .map(|chunk| {
            len = (len + chunk).min(total);
            Arrival {
                len,
                at: Duration::ZERO,
            }
        })
        .collect();
    Timeline {
        arrivals,
        ..Timeline::default()
    }
}

/// The `decision` object of doc/configure.md, plus `read` (how many bytes
/// of the capture the step had when it decided) and `alert` (the alert a
/// rejected client reads, by the listener's `reject_with`).
fn decision(listener: &PrereadListener, bytes: &[u8], timeline: &Timeline) -> Value {
    let Delivered {
        next,
        farewell,
        read,
    } = deliver(listener, bytes, timeline);
    let mut decision = match next {
        // A client that closed or went silent before saying anything the
        // proxy counts: nothing was decided.
        Next::Read | Next::Ignore | Next::Close(Close::Silent | Close::SilentTimeout) => json!({
            "verdict": "need_more", "cluster": null, "reason": null, "fallback": null,
            "content_offset": null, "matched_sni": null, "matched_alpn": null,
        }),
        Next::Close(Close::Rejected(reason)) => json!({
            "verdict": "rejected", "cluster": null, "reason": reason.as_str(), "fallback": null,
            "content_offset": null, "matched_sni": null, "matched_alpn": null,
        }),
        Next::Connect(route) => routed_decision(&route),
    };
    decision["read"] = json!(read);
    decision["alert"] = match farewell {
        Farewell::Alert(record) => {
            json!(AlertDescription::from_code(record[6]).map(|a| a.as_str()))
        }
        Farewell::Fin | Farewell::Reset => Value::Null,
    };
    decision
}

/// The JSON object of doc/configure.md for one input; `decision` only when a
/// listener is given.
pub fn inspect(file: &str, bytes: &[u8], options: &InspectOptions) -> Value {
    let mut report = describe(file, bytes, options.expect_proxy);
    if let (Some(listener), Value::Object(map)) = (&options.listener, &mut report) {
        let timeline = match &options.timeline {
            Some(timeline) => timeline,
            None => &reads_at_once(bytes.len(), &options.reads),
        };
        map.insert("decision".into(), decision(listener, bytes, timeline));
    }
    report
}

fn describe(file: &str, bytes: &[u8], expect_proxy: bool) -> Value {
    let mut out = Map::new();
    out.insert("file".into(), json!(file));
    out.insert("len".into(), json!(bytes.len()));
    out.insert("protocol".into(), json!("tcp"));
    for key in [
        "parse",
        "records",
        "hello_len",
        "sni",
        "alpn",
        "ech",
        "legacy_version",
        "ja4",
        "ja4_r",
        "proxy",
    ] {
        out.insert(key.into(), Value::Null);
    }
    let mut offset = 0;
    if expect_proxy {
        match parse_proxy_header(bytes) {
            Ok(ProxyParsed::Complete(header)) => {
                offset = header.len();
                out.insert("proxy".into(), proxy_json(&header));
            }
            Ok(ProxyParsed::Incomplete(needed)) => {
                out.insert("parse".into(), json!("incomplete"));
                insert_needed(&mut out, needed);
                return Value::Object(out);
            }
            Err(error) => {
                out.insert("parse".into(), json!("proxy_header_invalid"));
                out.insert("error".into(), json!(error.to_string()));
                return Value::Object(out);
            }
        }
    }
    let mut scratch = Vec::new();
    match parse_client_hello(&bytes[offset..], &mut scratch) {
        Ok(Parsed::Complete(hello)) => {
            out.insert("parse".into(), json!("complete"));
            hello_fields(&mut out, &hello, offset);
        }
        Ok(Parsed::Incomplete(needed)) => {
            out.insert("parse".into(), json!("incomplete"));
            insert_needed(&mut out, needed);
        }
        Err(error) => {
            out.insert("parse".into(), json!(parse_name(&error)));
            out.insert("error".into(), json!(error.to_string()));
        }
    }
    Value::Object(out)
}

pub(crate) fn insert_needed(out: &mut Map<String, Value>, needed: Needed) {
    let at_least = match needed {
        Needed::AtLeast(n) => json!(n.get()),
        Needed::Unknown => Value::Null,
    };
    out.insert("needed".into(), at_least);
}

/// The `decision` object of a routed hello, TCP's or QUIC's alike.
pub(crate) fn routed_decision(route: &Route) -> Value {
    json!({
        "verdict": "routed",
        "cluster": &*route.cluster,
        "reason": null,
        "fallback": route.fallback.map(|f| f.as_str()),
        "content_offset": route.content_offset,
        "matched_sni": route.matched_sni.as_ref().map(ToString::to_string),
        "matched_alpn": route.matched_alpn.as_deref().map(|p| String::from_utf8_lossy(p).into_owned()),
    })
}

#[cfg(test)]
mod tests {
    use super::{InputError, decode_hex};

    #[test]
    fn hex_decoding() {
        assert_eq!(
            decode_hex("16 03 01\n00:05").ok(),
            Some(vec![0x16, 3, 1, 0, 5])
        );
        assert_eq!(decode_hex("ABcd").ok(), Some(vec![0xab, 0xcd]));
        assert!(matches!(
            decode_hex("1603x1"),
            Err(InputError::BadHexCharacter {
                offset: 4,
                found: 'x'
            })
        ));
        assert!(matches!(decode_hex("160"), Err(InputError::OddHexDigits)));
    }
}
