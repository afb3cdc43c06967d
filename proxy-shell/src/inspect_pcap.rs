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
