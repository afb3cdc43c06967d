//! The client first flights of a packet capture, for `inspect --pcap`.
//!
//! Owns: [`read_capture`], which walks a pcap or pcapng file's bytes
//! (`walk`) and groups its packets into flows: each TCP connection's
//! client stream put back in order under the cap (`stream`), and each
//! QUIC flow's client datagrams (its 4-tuple and first DCID) up to the end
//! of its first flight; with what an operator should know about each
//! (`FlowNote`) and about the file (`walk::Walked`). Must never: read a
//! file or print (it is given the bytes, the CLI prints), parse a
//! ClientHello or decide (`inspect` hands the flights to the parsers and
//! steps the worker runs), or panic on any byte of the capture.

mod error;
mod notes;
mod stream;
#[cfg(test)]
mod tests;
mod walk;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use preread_parser::quic::{PacketType, parse_long_header};

pub use error::{CaptureError, FlowNote};
pub use notes::{CaptureNote, capture_notes};
pub use stream::Arrival;
pub use walk::{Skipped, Stop, Walked};

use stream::Stream;
use walk::{Packet, Transport, walk};

/// A client Initial of a version this proxy cannot read still starts a
/// flow when it is padded as RFC 9000 §14.1 requires of every client
/// Initial: a random UDP payload with the high bit set is not taken for
/// one.
const MIN_CLIENT_INITIAL: usize = 1200;

/// A capture's flows, in the order of their first packet.
#[derive(Debug)]
pub struct Capture<'a> {
    pub flows: Vec<Flow<'a>>,
    pub walked: Walked,
    /// The last packet's timestamp, from the Unix epoch: a step's timer
    /// due before it fired in the real proxy.
    pub end: Duration,
}

/// One connection's (TCP) or flow's (QUIC) client first flight.
#[derive(Debug)]
pub struct Flow<'a> {
    pub client: SocketAddr,
    pub server: SocketAddr,
    /// The number of the flow's first packet in the capture, from 1.
    pub first_packet: usize,
    /// The flow's first packet's timestamp, from the Unix epoch: the
    /// accept (TCP) or the first datagram (QUIC).
    pub started: Duration,
    pub flight: Flight<'a>,
    pub notes: Vec<FlowNote>,
}

/// What the client sent.
#[derive(Debug)]
pub enum Flight<'a> {
    Tcp {
        /// The contiguous client bytes from the first, at most the cap.
        bytes: Vec<u8>,
        /// When the contiguous prefix grew.
        arrivals: Vec<Arrival>,
        /// When the client closed (FIN or RST) after all of `bytes`.
        closed: Option<Duration>,
    },
    Quic {
        /// The client's datagrams up to the server's first answer (or
        /// the client's first Handshake or 1-RTT packet), each with its
        /// timestamp.
        datagrams: Vec<(Duration, &'a [u8])>,
    },
}

/// Reads the capture `bytes`: every TCP connection whose client sent a
/// byte, and every QUIC flow a client Initial starts. `cap` bounds each
/// TCP stream (the listener's `sni_preread_max_bytes`).
pub fn read_capture(bytes: &[u8], cap: usize) -> Result<Capture<'_>, CaptureError> {
    let mut flows = Flows {
        cap,
        ..Flows::default()
    };
    let mut end = Duration::ZERO;
    let walked = walk(bytes, |packet| {
        end = end.max(packet.at);
        flows.packet(packet);
    })?;
    Ok(Capture {
        flows: flows.finish(),
        walked,
        end,
    })
}

/// A TCP connection being read.
#[derive(Debug)]
struct TcpFlow {
    /// The client's initial sequence number, when its SYN was seen.
    isn: Option<u32>,
    stream: Option<Stream>,
    closed: Option<Duration>,
}

/// A QUIC 4-tuple being read.
#[derive(Debug)]
struct QuicFlow<'a> {
    flow: usize,
    dcid: &'a [u8],
    /// Still in the first flight: no answer from the server, no
    /// Handshake or 1-RTT packet from the client yet.
    open: bool,
    /// The server sent a Retry or a Version Negotiation: the next Initial
    /// with another DCID is a new flight.
    retried: bool,
}

#[derive(Debug, Default)]
struct Flows<'a> {
    cap: usize,
    flows: Vec<(Flow<'a>, Option<TcpFlow>)>,
    /// By `(client, server)`.
    tcp: HashMap<(SocketAddr, SocketAddr), usize>,
    quic: HashMap<(SocketAddr, SocketAddr), QuicFlow<'a>>,
}

impl<'a> Flows<'a> {
    fn packet(&mut self, packet: Packet<'a>) {
        match packet.transport {
            Transport::Tcp { .. } => self.tcp_segment(packet),
            Transport::Udp { payload } => self.datagram(packet, payload),
        }
    }

    fn note(&mut self, flow: usize, note: FlowNote) {
        if let Some((flow, _)) = self.flows.get_mut(flow) {
            if !flow.notes.contains(&note) {
                flow.notes.push(note);
            }
        }
    }

    fn start(&mut self, packet: &Packet<'a>, client: SocketAddr, flight: Flight<'a>) -> usize {
        let server = if client == packet.source {
            packet.destination
        } else {
            packet.source
        };
        self.flows.push((
            Flow {
                client,
                server,
                first_packet: packet.number,
                started: packet.at,
                flight,
                notes: Vec::new(),
            },
            None,
        ));
        self.flows.len() - 1
    }

    fn tcp_segment(&mut self, packet: Packet<'a>) {
        let Transport::Tcp {
            seq,
            syn,
            ack,
            fin,
            rst,
            payload,
        } = packet.transport
        else {
            return;
        };
        let forward = (packet.source, packet.destination);
        let backward = (packet.destination, packet.source);
        let opening = syn && !ack;
        let known = match self.tcp.get(&forward) {
            // A new SYN on a used 4-tuple: a new connection.
            Some(&flow) if opening && self.isn(flow) != Some(seq) => None,
            Some(&flow) => Some(flow),
            None if self.tcp.contains_key(&backward) => return,
            None => None,
        };
        let flow = match known {
            Some(flow) => flow,
            None => {
                // Without the SYN, the client is the side with the higher
                // port (an ephemeral one), else the first sender.
                let client = if syn && ack {
                    packet.destination
                } else if opening || packet.source.port() >= packet.destination.port() {
                    packet.source
                } else {
                    packet.destination
                };
                let flight = Flight::Tcp {
                    bytes: Vec::new(),
                    arrivals: Vec::new(),
                    closed: None,
                };
                let flow = self.start(&packet, client, flight);
                let server = self.flows[flow].0.server;
                self.flows[flow].1 = Some(TcpFlow {
                    isn: opening.then_some(seq),
                    stream: opening.then(|| Stream::new(seq.wrapping_add(1), self.cap)),
                    closed: None,
                });
                if !opening {
                    self.note(flow, FlowNote::NoSyn);
                }
                self.tcp.insert((client, server), flow);
                if client != packet.source {
                    return;
                }
                flow
            }
        };
        if packet.cut {
            self.note(flow, FlowNote::SnapLength);
        }
        let cap = self.cap;
        let Some(state) = self.flows.get_mut(flow).and_then(|(_, s)| s.as_mut()) else {
            return;
        };
        if !payload.is_empty() {
            let stream = state.stream.get_or_insert_with(|| Stream::new(seq, cap));
            stream.segment(seq, payload, packet.at);
        }
        if (fin || rst) && state.closed.is_none() {
            state.closed = Some(packet.at);
        }
    }

    fn isn(&self, flow: usize) -> Option<u32> {
        self.flows
            .get(flow)
            .and_then(|(_, state)| state.as_ref())
            .and_then(|state| state.isn)
    }

    fn datagram(&mut self, packet: Packet<'a>, payload: &'a [u8]) {
        let header = parse_long_header(payload).ok();
        let forward = (packet.source, packet.destination);
        let backward = (packet.destination, packet.source);
        if let Some(server_side) = self.quic.get_mut(&backward) {
            // A Retry or a Version Negotiation asks for a new first
            // flight; any other answer means the proxy had decided.
            let restart =
                header.is_some_and(|h| h.version == 0 || h.packet_type == Some(PacketType::Retry));
            if restart {
                server_side.retried = true;
            } else {
                server_side.open = false;
            }
            return;
        }
        // A long header the snap length cut does not read: it is kept,
        // for the reader to say what it makes of it, under the flow's note.
        let cut_long =
            packet.cut && header.is_none() && payload.first().is_some_and(|b| b & 0x80 != 0);
        let in_flight = cut_long
            || header.is_some_and(|h| {
                matches!(
                    h.packet_type,
                    Some(PacketType::Initial | PacketType::ZeroRtt)
                )
            });
        let starts = cut_long
            || header.is_some_and(|h| match h.packet_type {
                Some(kind) => kind == PacketType::Initial,
                None => h.version != 0 && payload.len() >= MIN_CLIENT_INITIAL,
            });
        let flow = match self.quic.get_mut(&forward) {
            Some(known) => {
                let new_dcid = header.is_some_and(|h| h.dcid != known.dcid);
                if known.retried && starts && new_dcid {
                    None
                } else if known.open && in_flight {
                    Some(known.flow)
                } else {
                    known.open = false;
                    return;
                }
            }
            None if starts => None,
            None => return,
        };
        let flow = match flow {
            Some(flow) => flow,
            None => {
                let dcid = header.map_or(&[][..], |h| h.dcid);
                let flight = Flight::Quic {
                    datagrams: Vec::new(),
                };
                let flow = self.start(&packet, packet.source, flight);
                self.quic.insert(
                    forward,
                    QuicFlow {
                        flow,
                        dcid,
                        open: true,
                        retried: false,
                    },
                );
                flow
            }
        };
        if packet.cut {
            self.note(flow, FlowNote::SnapLength);
        }
        if let Some((
            Flow {
                flight: Flight::Quic { datagrams },
                ..
            },
            _,
        )) = self.flows.get_mut(flow)
        {
            datagrams.push((packet.at, payload));
        }
    }

    /// The flows, each TCP stream put back together; a connection whose
    /// client sent nothing is left out.
    fn finish(self) -> Vec<Flow<'a>> {
        self.flows
            .into_iter()
            .filter_map(|(mut flow, state)| {
                let Some(state) = state else {
                    return Some(flow);
                };
                let stream = state.stream?;
                if stream.conflicting {
                    flow.notes.push(FlowNote::Conflicting);
                }
                let gap = stream.has_gap();
                if gap {
                    flow.notes.push(FlowNote::Gap);
                }
                let (bytes, arrivals) = stream.into_parts();
                if bytes.is_empty() && !gap {
                    return None;
                }
                flow.flight = Flight::Tcp {
                    bytes,
                    arrivals,
                    // Bytes missing from the capture: the proxy may
                    // have had them before the close.
                    closed: state.closed.filter(|_| !gap),
                };
                Some(flow)
            })
            .collect()
    }
}
