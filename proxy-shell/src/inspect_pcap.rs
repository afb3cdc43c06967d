//! `preread inspect --pcap`: what the proxy makes of every client first
//! flight in a packet capture, offline.
//!
//! Owns: choosing the listener that decides each flow (`--listener`, else
//! the configured listener of the flow's protocol at the flow's server
//! address), and the JSON of each flow: the object `inspect` prints for a
//! TCP capture (`inspect::inspect`) or a QUIC flow
//! (`inspect_quic::inspect_quic`), with the bytes' and datagrams' times so
//! that the step's timers fire as they did, plus the flow's addresses and
//! notes. Must never: read a file or print (the CLI does), parse or decide
//! anything itself (the capture is `pcap`'s, the rest the inspectors').

use std::net::SocketAddr;
use std::time::Duration;

use preread_core::quic::QuicListener;
use preread_core::step::PrereadListener;
use serde_json::{Value, json};

use crate::inspect::{InspectOptions, Timeline, inspect};
use crate::inspect_quic::{DatagramTimes, inspect_quic};
use crate::pcap::{CaptureError, Flight, Flow, Walked, read_capture};

/// The stream cap without a config: the default `sni_preread_max_bytes`.
const DEFAULT_CAP: usize = 65_536;

/// A listener of the config, as a worker would hold it for either
/// protocol.
#[derive(Debug, Clone)]
pub struct ConfiguredListener {
    pub address: SocketAddr,
    /// A `protocol = "quic"` listener.
    pub quic: bool,
    /// The TCP step's view: routes, cap, catch-all, `reject_with`.
    pub tcp: PrereadListener,
    /// The QUIC step's view: routes, cap, `reject_with`.
    pub quic_view: QuicListener,
    pub expect_proxy: bool,
}

/// How `inspect --pcap` decides.
#[derive(Debug, Clone, Default)]
pub struct PcapOptions {
    /// The config's listeners, in its order.
    pub listeners: Vec<ConfiguredListener>,
    /// `--listener`: the first of `listeners` decides every flow.
    pub pinned: bool,
    /// `--expect-proxy`: a PROXY header precedes every TCP client's hello.
    pub expect_proxy: bool,
}

impl PcapOptions {
    /// The listener that decides a flow of this protocol to `server`: the
    /// pinned one; else the one of that protocol at `server`, or at its
    /// port on an unspecified address; else the first of that protocol;
    /// else the first.
    fn listener_for(&self, quic: bool, server: SocketAddr) -> Option<&ConfiguredListener> {
        if self.pinned {
            return self.listeners.first();
        }
        let same = || self.listeners.iter().filter(move |l| l.quic == quic);
        same()
            .find(|l| l.address == server)
            .or_else(|| {
                same()
                    .find(|l| l.address.port() == server.port() && l.address.ip().is_unspecified())
            })
            .or_else(|| same().next())
            .or_else(|| self.listeners.first())
    }

    /// The TCP stream cap: the largest any listener reads.
    fn cap(&self) -> usize {
        self.listeners
            .iter()
            .map(|l| l.tcp.cap().max(l.quic_view.config.max_bytes))
            .max()
            .unwrap_or(DEFAULT_CAP)
    }
}

/// The JSON object of each client first flight in the capture `bytes`, in
/// the order of their first packet, and what the walk saw of the file.
pub fn inspect_pcap(
    file: &str,
    bytes: &[u8],
    options: &PcapOptions,
) -> Result<(Vec<Value>, Walked), CaptureError> {
    let capture = read_capture(bytes, options.cap())?;
    let flows = capture
        .flows
        .iter()
        .map(|flow| flow_json(file, flow, capture.end, options))
        .collect();
    Ok((flows, capture.walked))
}

fn flow_json(file: &str, flow: &Flow<'_>, end: Duration, options: &PcapOptions) -> Value {
    let quic = matches!(flow.flight, Flight::Quic { .. });
    let listener = options.listener_for(quic, flow.server);
    let mut report = match &flow.flight {
        Flight::Tcp {
            bytes,
            arrivals,
            closed,
        } => {
            let inspect_options = InspectOptions {
                expect_proxy: options.expect_proxy || listener.is_some_and(|l| l.expect_proxy),
                listener: listener.map(|l| l.tcp.clone()),
                reads: Vec::new(),
                timeline: Some(Timeline {
                    accepted: flow.started,
                    arrivals: arrivals.clone(),
                    closed: *closed,
                    end,
                }),
            };
            inspect(file, bytes, &inspect_options)
        }
        Flight::Quic { datagrams } => {
            let times = DatagramTimes {
                at: datagrams.iter().map(|&(at, _)| at).collect(),
                end,
            };
            let payloads: Vec<&[u8]> = datagrams.iter().map(|&(_, d)| d).collect();
            let len = payloads.iter().map(|d| d.len()).sum();
            inspect_quic(
                file,
                len,
                &payloads,
                listener.map(|l| &l.quic_view),
                Some(&times),
            )
        }
    };
    report["flow"] = json!({
        "client": flow.client.to_string(),
        "server": flow.server.to_string(),
        "first_packet": flow.first_packet,
    });
    report["notes"] = json!(flow.notes.iter().map(|n| n.as_str()).collect::<Vec<_>>());
    if let (Some(listener), Some(decision)) = (listener, report.get_mut("decision")) {
        decision["listener"] = json!(listener.address.to_string());
    }
    report
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::sync::Arc;
    use std::time::Duration;

    use preread_core::PrereadConfig;
    use preread_core::pattern::validate_sni_pattern;
    use preread_core::quic::{QuicListener, QuicRejectWith};
    use preread_core::routes::{AlpnSet, RouteTable};
    use preread_core::step::PrereadListener;
    use serde_json::Value;

    use super::{ConfiguredListener, PcapOptions, inspect_pcap};
    use crate::inspect::{InspectOptions, Timeline, inspect};
    use crate::pcap::{Arrival, read_capture};

    const LO: &[u8] = include_bytes!("../../testdata/pcap/lo.pcap");
    const SPLIT: &[u8] = include_bytes!("../../testdata/pcap/split.pcap");

    fn config(routes: &[(&str, &str)]) -> PrereadConfig {
        let mut table = RouteTable::new();
        for (sni, cluster) in routes {
            let pattern = validate_sni_pattern(sni).expect("a pattern");
            table
                .insert(pattern, AlpnSet::Any, Arc::from(*cluster))
                .expect("a route");
        }
        PrereadConfig::new(table)
    }

    fn listener(address: SocketAddr, quic: bool, routes: &[(&str, &str)]) -> ConfiguredListener {
        ConfiguredListener {
            address,
            quic,
            tcp: PrereadListener::new(config(routes), None),
            quic_view: QuicListener::new(config(routes), QuicRejectWith::Close),
            expect_proxy: false,
        }
    }

    const ROUTES: &[(&str, &str)] = &[
        ("a.example.com", "alpha"),
        ("e.example.com", "echo"),
        ("localhost", "local"),
    ];

    fn report(capture: &[u8], options: &PcapOptions) -> Vec<Value> {
        inspect_pcap("c.pcap", capture, options)
            .expect("a capture")
            .0
    }

    #[test]
    fn each_flow_is_decided_by_the_listener_of_its_protocol_at_its_server_address() {
        let read = read_capture(LO, 65_536).expect("a capture");
        let tcp_port = read.flows[0].server.port();
        let options = PcapOptions {
            listeners: vec![
                listener(([127, 0, 0, 1], 1).into(), true, &[]),
                listener(([0, 0, 0, 0], tcp_port).into(), false, ROUTES),
                listener(([127, 0, 0, 1], 2).into(), true, ROUTES),
            ],
            ..PcapOptions::default()
        };
        let flows = report(LO, &options);
        assert_eq!(flows.len(), 3);
        let tcp = &flows[0];
        assert_eq!(tcp["protocol"], "tcp");
        assert_eq!(tcp["sni"], "a.example.com");
        assert_eq!(tcp["decision"]["cluster"], "alpha");
        assert_eq!(tcp["decision"]["listener"], format!("0.0.0.0:{tcp_port}"));
        assert_eq!(tcp["flow"]["server"], read.flows[0].server.to_string());
        assert_eq!(tcp["flow"]["first_packet"], 1);
        assert_eq!(tcp["notes"], serde_json::json!([]));
        for quic in &flows[1..] {
            assert_eq!(quic["protocol"], "quic");
            assert_eq!(quic["sni"], "localhost");
            assert_eq!(quic["quic"]["version"], "v1");
            assert_eq!(quic["decision"]["listener"], "127.0.0.1:1");
            assert_eq!(quic["decision"]["reason"], "sni_unmatched");
            assert_eq!(quic["decision"]["reply"], "connection_close");
        }
        assert_ne!(flows[1]["quic"]["dcid"], flows[2]["quic"]["dcid"]);
        // --listener: the one given decides every flow.
        let pinned = PcapOptions {
            listeners: vec![listener(([127, 0, 0, 1], 2).into(), true, ROUTES)],
            pinned: true,
            ..PcapOptions::default()
        };
        let flows = report(LO, &pinned);
        assert!(flows.iter().all(|f| f["decision"]["verdict"] == "routed"));
        assert_eq!(flows[2]["decision"]["cluster"], "local");
        // Without a config: the description alone.
        let flows = report(LO, &PcapOptions::default());
        assert!(flows.iter().all(|f| f.get("decision").is_none()));
        assert!(flows.iter().all(|f| f["parse"] == "complete"));
    }

    /// split.pcap with every record after the client's first data segment
    /// `delay` later.
    fn stalled(delay: Duration) -> Vec<u8> {
        let mut file = SPLIT.to_vec();
        let read = read_capture(SPLIT, 65_536).expect("a capture");
        let first_data = read.flows[0].first_packet + 3;
        let mut at = 24;
        let mut number = 1;
        while at < file.len() {
            let caplen = u32::from_le_bytes(file[at + 8..at + 12].try_into().expect("4 bytes"));
            if number > first_data {
                let seconds = u32::from_le_bytes(file[at..at + 4].try_into().expect("4 bytes"));
                let later = seconds + delay.as_secs() as u32;
                file[at..at + 4].copy_from_slice(&later.to_le_bytes());
            }
            at += 16 + caplen as usize;
            number += 1;
        }
        file
    }

    #[test]
    fn a_hello_that_stalls_past_the_deadline_is_fragmented_as_the_proxy_said() {
        let options = PcapOptions {
            listeners: vec![listener(([0, 0, 0, 0], 443).into(), false, ROUTES)],
            ..PcapOptions::default()
        };
        let on_time = report(SPLIT, &options);
        assert_eq!(on_time[0]["decision"]["cluster"], "echo");
        let late = stalled(Duration::from_secs(30));
        let late = report(&late, &options);
        // The description reads the whole stream; the step did not wait.
        assert_eq!(late[0]["parse"], "complete");
        assert_eq!(late[0]["decision"]["verdict"], "rejected");
        assert_eq!(late[0]["decision"]["reason"], "fragmented");
        let read = late[0]["decision"]["read"].as_u64().expect("a count");
        assert!(read > 0 && read < late[0]["hello_len"].as_u64().expect("a length"));
    }

    #[test]
    fn a_client_that_closes_mid_hello_is_front_closed_and_one_cut_by_the_capture_waits() {
        let hello = include_bytes!("../../testdata/clienthellos/curl_h2.bin");
        let part = &hello[..200];
        let options = |closed, end| InspectOptions {
            listener: Some(PrereadListener::new(config(ROUTES), None)),
            timeline: Some(Timeline {
                accepted: Duration::from_secs(100),
                arrivals: vec![Arrival {
                    len: 200,
                    at: Duration::from_secs(100),
                }],
                closed,
                end,
            }),
            ..InspectOptions::default()
        };
        let closed = inspect(
            "f",
            part,
            &options(Some(Duration::from_secs(101)), Duration::from_secs(101)),
        );
        assert_eq!(closed["decision"]["reason"], "front_closed");
        let cut = inspect("f", part, &options(None, Duration::from_secs(101)));
        assert_eq!(cut["decision"]["verdict"], "need_more");
        let timed_out = inspect("f", part, &options(None, Duration::from_secs(106)));
        assert_eq!(timed_out["decision"]["reason"], "fragmented");
        let whole = InspectOptions {
            timeline: Some(Timeline {
                arrivals: vec![Arrival {
                    len: hello.len(),
                    at: Duration::from_secs(104),
                }],
                ..options(None, Duration::from_secs(200))
                    .timeline
                    .expect("set")
            }),
            ..options(None, Duration::ZERO)
        };
        assert_eq!(inspect("f", hello, &whole)["decision"]["cluster"], "alpha");
    }
}
