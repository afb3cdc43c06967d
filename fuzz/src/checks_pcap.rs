//! Invariants of `inspect --pcap`'s reading of a capture
//! (`proxy_shell::pcap`) and of the objects it prints
//! (`proxy_shell::inspect_pcap`).
//!
//! Owns: [`check_pcap`], which panics when an invariant breaks. Included
//! with `#[path]` by `proxy-shell/tests/pcap_fuzz_replay.rs`, so it may use
//! only `proxy_shell`, `serde_json` and std. The input is the capture file's
//! bytes, whole.

use proxy_shell::inspect_pcap::{PcapOptions, inspect_pcap};
use proxy_shell::pcap::{Flight, read_capture};

/// The TCP stream cap of the check: small, so that inputs reach it.
const CAP: usize = 2048;

/// What a capture came to, for the replay's counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PcapOutcome {
    /// Not a capture at all.
    Refused,
    /// A capture with no first flight.
    Empty,
    /// At least one TCP or QUIC flight.
    Flights,
}

/// Reads `data` as a capture and checks what came out.
pub fn check_pcap(data: &[u8]) -> PcapOutcome {
    let Ok(capture) = read_capture(data, CAP) else {
        assert!(inspect_pcap("f", data, &PcapOptions::default()).is_err());
        return PcapOutcome::Refused;
    };
    let walked = &capture.walked;
    if let Some(stop) = walked.stop {
        assert!(stop.offset <= data.len(), "{stop:?} past {}", data.len());
        assert_eq!(stop.packets, walked.records);
    }
    let mut last_first = 0;
    for flow in &capture.flows {
        assert!(
            flow.first_packet > last_first,
            "flows in the order of their first packet"
        );
        assert!(flow.first_packet <= walked.records);
        assert!(flow.started <= capture.end);
        last_first = flow.first_packet;
        match &flow.flight {
            Flight::Tcp {
                bytes,
                arrivals,
                closed,
            } => {
                assert!(bytes.len() <= CAP, "the stream stops at the cap");
                assert!(arrivals.windows(2).all(|w| w[0].len < w[1].len));
                assert_eq!(arrivals.last().map_or(0, |a| a.len), bytes.len());
                assert!(closed.is_none_or(|at| at <= capture.end));
            }
            Flight::Quic { datagrams } => {
                assert!(!datagrams.is_empty());
                let within = |d: &[u8]| {
                    let start = d.as_ptr() as usize;
                    let file = data.as_ptr() as usize;
                    start >= file && start + d.len() <= file + data.len()
                };
                assert!(
                    datagrams.iter().all(|&(_, d)| within(d)),
                    "borrowed from the file"
                );
            }
        }
    }
    let (objects, _) = inspect_pcap("f", data, &PcapOptions::default()).expect("read above");
    assert_eq!(objects.len(), capture.flows.len());
    for (object, flow) in objects.iter().zip(&capture.flows) {
        assert_eq!(object["flow"]["client"], flow.client.to_string());
        assert!(object.get("decision").is_none());
    }
    if capture.flows.is_empty() {
        PcapOutcome::Empty
    } else {
        PcapOutcome::Flights
    }
}
