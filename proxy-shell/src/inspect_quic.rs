//! `preread inspect --quic`: what the proxy makes of a QUIC flow's
//! captured client datagrams, offline.
//!
//! Owns: cutting a capture into datagrams ([`split_datagrams`]: one raw
//! datagram, or datagrams each behind a 2-byte big-endian length, as
//! `preread rejects --dump` writes them), the description of the flow
//! through the reader the worker uses (`preread_parser::quic`), and the
//! decision through the very QUIC step a worker runs
//! (`preread_core::quic`), the datagrams delivered in order. Must never:
//! touch the network, or decide anything the step does not.

use std::time::{Duration, Instant};

use preread_core::quic::{QuicListener, QuicNext, QuicPrereadStep, reject_reason};
use preread_parser::quic::{ClientInitials, parse_long_header};
use preread_parser::tls::Parsed;
use serde_json::{Map, Value, json};

use crate::inspect::{hello_fields, hex, insert_needed, routed_decision};

/// The CRYPTO stream cap of a description without a listener: the TCP
/// default `sni_preread_max_bytes`.
const DEFAULT_CAP: usize = 65_536;

/// A capture whose length prefixes do not add up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CutDatagram {
    /// Where the datagram that runs past the end starts.
    pub offset: usize,
    /// The length its prefix announces.
    pub announced: usize,
}

impl std::fmt::Display for CutDatagram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the datagram at offset {} announces {} bytes and the file ends first (a --quic file is one raw datagram, or datagrams each behind a 2-byte big-endian length)",
            self.offset, self.announced
        )
    }
}

impl std::error::Error for CutDatagram {}

/// The datagrams of a capture: the whole file when its first byte has the
/// high bit set (a long header), else length-prefixed datagrams.
pub fn split_datagrams(bytes: &[u8]) -> Result<Vec<&[u8]>, CutDatagram> {
    if bytes.first().is_some_and(|b| b & 0x80 != 0) {
        return Ok(vec![bytes]);
    }
    let mut datagrams = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let cut = |announced| CutDatagram {
            offset: at,
            announced,
        };
        let [hi, lo] = *bytes.get(at..at + 2).ok_or(cut(0))? else {
            return Err(cut(0));
        };
        let len = usize::from(u16::from_be_bytes([hi, lo]));
        let datagram = bytes.get(at + 2..at + 2 + len).ok_or(cut(len))?;
        datagrams.push(datagram);
        at += 2 + len;
    }
    Ok(datagrams)
}

/// When a flow's datagrams reached the proxy, for a capture taken off the
/// wire (`inspect --pcap`): the step's deadline then passes as it would
/// have.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DatagramTimes {
    /// Each datagram's arrival, from any fixed origin (the capture's clock).
    pub at: Vec<Duration>,
    /// Where the capture ends: a deadline due by then passed.
    pub end: Duration,
}

/// The JSON object of doc/configure.md for one flow's datagrams;
/// `decision` only when a listener is given. Without `times`, every
/// datagram arrives at once and no deadline passes.
pub fn inspect_quic(
    file: &str,
    len: usize,
    datagrams: &[&[u8]],
    listener: Option<&QuicListener>,
    times: Option<&DatagramTimes>,
) -> Value {
    let cap = listener.map_or(DEFAULT_CAP, |l| l.config.max_bytes);
    let mut out = Map::new();
    out.insert("file".into(), json!(file));
    out.insert("len".into(), json!(len));
    out.insert("protocol".into(), json!("quic"));
    for key in [
        "parse",
        "records",
        "hello_len",
        "sni",
        "alpn",
        "ech",
        "legacy_version",
        "proxy",
    ] {
        out.insert(key.into(), Value::Null);
    }
    let mut reader = ClientInitials::new(cap);
    let mut failed = None;
    for datagram in datagrams {
        if let Err(error) = reader.feed(datagram) {
            failed = Some(error);
            break;
        }
    }
    match failed {
        Some(error) => {
            out.insert("parse".into(), json!(reject_reason(error).as_str()));
            out.insert("error".into(), json!(error.to_string()));
        }
        None => match reader.client_hello() {
            Ok(Parsed::Complete(hello)) => {
                out.insert("parse".into(), json!("complete"));
                hello_fields(&mut out, &hello, 0);
            }
            Ok(Parsed::Incomplete(needed)) => {
                out.insert("parse".into(), json!("incomplete"));
                insert_needed(&mut out, needed);
            }
            Err(error) => {
                out.insert("parse".into(), json!("malformed_handshake"));
                out.insert("error".into(), json!(error.to_string()));
            }
        },
    }
    let first_header = datagrams.first().and_then(|d| parse_long_header(d).ok());
    let version = reader.version().map(|v| v.to_string());
    let dcid = reader
        .original_dcid()
        .map(|id| hex(id.as_bytes()))
        .or_else(|| first_header.map(|h| hex(h.dcid)));
    out.insert(
        "quic".into(),
        json!({
            "version": version,
            "dcid": dcid,
            "packets": reader.packets(),
            "datagrams": reader.datagrams(),
        }),
    );
    if let Some(listener) = listener {
        out.insert("decision".into(), decision(listener, datagrams, times));
    }
    Value::Object(out)
}

/// The `decision` object: as for TCP, `read` in datagrams, and `reply`,
/// what a refused client is sent (`connection_close`,
/// `version_negotiation`, or `null`).
fn decision(listener: &QuicListener, datagrams: &[&[u8]], times: Option<&DatagramTimes>) -> Value {
    let origin = Instant::now();
    let first = times
        .and_then(|t| t.at.first().copied())
        .unwrap_or_default();
    let clock = |at: Option<Duration>| at.map_or(origin, |at| origin + at.saturating_sub(first));
    let mut next = QuicNext::Wait;
    let mut read = 0;
    let mut step: Option<QuicPrereadStep> = None;
    // The step's deadline, when it passed by `now`.
    let passed = |step: &Option<QuicPrereadStep>, now: Instant| {
        step.as_ref()
            .filter(|step| step.is_reading() && step.deadline() <= now)
            .map(QuicPrereadStep::deadline)
    };
    for (index, datagram) in datagrams.iter().enumerate() {
        let now = clock(times.and_then(|t| t.at.get(index).copied()));
        if let (Some(deadline), Some(step)) = (passed(&step, now), &mut step) {
            next = step.timeout(listener, deadline).next;
            break;
        }
        read += 1;
        let actions = match &mut step {
            None => {
                let (first, actions) = QuicPrereadStep::first(listener, datagram, now);
                step = Some(first);
                actions
            }
            Some(step) => step.datagram(listener, datagram, now),
        };
        next = actions.next;
        if next != QuicNext::Wait {
            break;
        }
    }
    if let Some(end) = times.map(|t| clock(Some(t.end))) {
        if let (QuicNext::Wait, Some(deadline), Some(step)) = (&next, passed(&step, end), &mut step)
        {
            next = step.timeout(listener, deadline).next;
        }
    }
    let mut decision = match &next {
        QuicNext::Wait | QuicNext::Ignore => json!({
            "verdict": "need_more", "cluster": null, "reason": null, "fallback": null,
            "content_offset": null, "matched_sni": null, "matched_alpn": null,
        }),
        QuicNext::Reject(reject) => json!({
            "verdict": "rejected", "cluster": null, "reason": reject.reason.as_str(),
            "fallback": null, "content_offset": null, "matched_sni": null, "matched_alpn": null,
        }),
        QuicNext::Connect(route) => routed_decision(route),
    };
    decision["read"] = json!(read);
    decision["reply"] = match &next {
        QuicNext::Reject(reject) => match reject.reply.as_deref().map(parse_long_header) {
            Some(Ok(header)) if header.version == 0 => json!("version_negotiation"),
            Some(_) => json!("connection_close"),
            None => Value::Null,
        },
        _ => Value::Null,
    };
    decision
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use preread_core::PrereadConfig;
    use preread_core::pattern::validate_sni_pattern;
    use preread_core::quic::{QuicListener, QuicRejectWith};
    use preread_core::routes::{AlpnSet, RouteTable};
    use preread_parser::quic::{Version, client_first_flight};

    use std::time::Duration;

    use super::{CutDatagram, DatagramTimes, inspect_quic, split_datagrams};

    /// curl's ClientHello for a.example.com, without its record header.
    fn hello() -> Vec<u8> {
        let record = include_bytes!("../../testdata/clienthellos/curl_h2.bin");
        record[5..].to_vec()
    }

    fn listener() -> QuicListener {
        let mut routes = RouteTable::new();
        let pattern = validate_sni_pattern("a.example.com").expect("a pattern");
        routes
            .insert(pattern, AlpnSet::Any, Arc::from("alpha"))
            .expect("a route");
        QuicListener::new(PrereadConfig::new(routes), QuicRejectWith::Close)
    }

    #[test]
    fn datagrams_raw_or_length_prefixed() {
        let flight = client_first_flight(Version::V1, &[1; 8], &[2; 4], &hello(), 300);
        assert_eq!(split_datagrams(&flight[0]), Ok(vec![&flight[0][..]]));
        let mut file = Vec::new();
        for datagram in &flight {
            file.extend_from_slice(&(datagram.len() as u16).to_be_bytes());
            file.extend_from_slice(datagram);
        }
        let split = split_datagrams(&file).expect("whole datagrams");
        assert_eq!(split.len(), flight.len());
        file.pop();
        let last = file.len() + 1 - flight[0].len() - 2;
        assert_eq!(
            split_datagrams(&file),
            Err(CutDatagram {
                offset: last,
                announced: flight[0].len()
            })
        );
        assert_eq!(
            split_datagrams(&[0]),
            Err(CutDatagram {
                offset: 0,
                announced: 0
            })
        );
    }

    #[test]
    fn a_flight_over_two_datagrams_is_described_and_decided() {
        let flight = client_first_flight(Version::V2, &[1; 8], &[2; 4], &hello(), 300);
        let datagrams: Vec<&[u8]> = flight.iter().rev().map(Vec::as_slice).collect();
        let report = inspect_quic("f", 2400, &datagrams, Some(&listener()), None);
        assert_eq!(report["protocol"], "quic");
        assert_eq!(report["parse"], "complete");
        assert_eq!(report["sni"], "a.example.com");
        assert_eq!(report["records"], 0);
        assert_eq!(report["quic"]["version"], "v2");
        assert_eq!(report["quic"]["dcid"], "0101010101010101");
        assert_eq!(report["quic"]["datagrams"], flight.len());
        assert_eq!(report["quic"]["packets"], flight.len());
        assert_eq!(report["decision"]["verdict"], "routed");
        assert_eq!(report["decision"]["cluster"], "alpha");
        assert_eq!(report["decision"]["read"], flight.len());
        // Half the flight: a prefix, undecided.
        let report = inspect_quic(
            "f",
            1200,
            &datagrams[flight.len() - 1..],
            Some(&listener()),
            None,
        );
        assert_eq!(report["parse"], "incomplete");
        assert_eq!(report["decision"]["verdict"], "need_more");
    }

    #[test]
    fn refusals_name_the_reason_and_the_reply() {
        let mut unknown =
            client_first_flight(Version::V1, &[1; 8], &[2; 4], &hello(), 1100).remove(0);
        unknown[1..5].copy_from_slice(&[0x1a, 0x2a, 0x3a, 0x4a]);
        let report = inspect_quic("f", unknown.len(), &[&unknown], Some(&listener()), None);
        assert_eq!(report["parse"], "quic_version");
        assert_eq!(report["quic"]["version"], serde_json::Value::Null);
        assert_eq!(report["decision"]["reason"], "quic_version");
        assert_eq!(report["decision"]["reply"], "version_negotiation");
        let flight = client_first_flight(Version::V1, &[1; 8], &[2; 4], &hello(), 1100);
        let mut tampered = flight[0].clone();
        let last = tampered.len() - 1;
        tampered[last] ^= 1;
        let report = inspect_quic("f", tampered.len(), &[&tampered], None, None);
        assert_eq!(report["parse"], "quic_undecryptable");
        assert!(report.get("decision").is_none());
    }

    #[test]
    fn a_second_datagram_after_the_deadline_comes_too_late() {
        let flight = client_first_flight(Version::V1, &[1; 8], &[2; 4], &hello(), 300);
        let datagrams: Vec<&[u8]> = flight.iter().map(Vec::as_slice).collect();
        assert!(datagrams.len() >= 2);
        let times = |late: u64| DatagramTimes {
            at: (0..datagrams.len() as u64)
                .map(|i| Duration::from_secs(50 + i * late))
                .collect(),
            end: Duration::from_secs(100),
        };
        let report = inspect_quic("f", 0, &datagrams, Some(&listener()), Some(&times(10)));
        assert_eq!(report["decision"]["reason"], "fragmented");
        assert_eq!(report["decision"]["read"], 1);
        let report = inspect_quic("f", 0, &datagrams, Some(&listener()), Some(&times(0)));
        assert_eq!(report["decision"]["cluster"], "alpha");
        // The capture ends before the deadline: undecided.
        let first = &datagrams[..1];
        let early = DatagramTimes {
            at: vec![Duration::from_secs(50)],
            end: Duration::from_secs(51),
        };
        let report = inspect_quic("f", 0, first, Some(&listener()), Some(&early));
        assert_eq!(report["decision"]["verdict"], "need_more");
    }
}
