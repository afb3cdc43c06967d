//! The captures of `testdata/pcap` (made by its `make.sh` with tcpdump,
//! dumpcap, openssl and ngtcp2), read whole, reordered, cut and damaged.

use std::net::SocketAddr;

use preread_parser::tls::{Parsed, parse_client_hello};

use super::{CaptureError, Flight, Flow, FlowNote, read_capture};

const LO: &[u8] = include_bytes!("../../../testdata/pcap/lo.pcap");
const ANY: &[u8] = include_bytes!("../../../testdata/pcap/any.pcapng");
const SPLIT: &[u8] = include_bytes!("../../../testdata/pcap/split.pcap");
const SNAP: &[u8] = include_bytes!("../../../testdata/pcap/snap.pcap");

const CAP: usize = 16_384;

/// A little-endian pcap file's header and records, as written.
fn records(file: &[u8]) -> (Vec<u8>, Vec<Vec<u8>>) {
    let mut records = Vec::new();
    let mut at = 24;
    while at < file.len() {
        let caplen = u32::from_le_bytes(file[at + 8..at + 12].try_into().expect("4 bytes"));
        let end = at + 16 + caplen as usize;
        records.push(file[at..end].to_vec());
        at = end;
    }
    (file[..24].to_vec(), records)
}

fn join(header: &[u8], records: &[Vec<u8>]) -> Vec<u8> {
    let mut file = header.to_vec();
    records.iter().for_each(|r| file.extend_from_slice(r));
    file
}

fn tcp_bytes<'f>(flow: &'f Flow<'_>) -> &'f [u8] {
    match &flow.flight {
        Flight::Tcp { bytes, .. } => bytes,
        Flight::Quic { .. } => panic!("a QUIC flow"),
    }
}

fn sni(flow: &Flow<'_>) -> Option<String> {
    let mut scratch = Vec::new();
    match parse_client_hello(tcp_bytes(flow), &mut scratch) {
        Ok(Parsed::Complete(hello)) => hello
            .server_name
            .map(|n| String::from_utf8_lossy(n).into_owned()),
        _ => None,
    }
}

fn quic_datagrams(flow: &Flow<'_>) -> usize {
    match &flow.flight {
        Flight::Quic { datagrams } => datagrams.len(),
        Flight::Tcp { .. } => panic!("a TCP flow"),
    }
}

#[test]
fn a_tcpdump_capture_holds_a_tls_connection_and_a_quic_flight_on_each_side_of_a_retry() {
    let capture = read_capture(LO, CAP).expect("a capture");
    assert_eq!(capture.walked.stop, None);
    let [tcp, before_retry, after_retry] = &capture.flows[..] else {
        panic!("3 flows, not {:?}", capture.flows);
    };
    assert_eq!(sni(tcp).as_deref(), Some("a.example.com"));
    assert_eq!(tcp.first_packet, 1);
    assert!(tcp.notes.is_empty(), "{:?}", tcp.notes);
    assert!(tcp.client.port() != tcp.server.port());
    let Flight::Tcp {
        bytes,
        arrivals,
        closed,
    } = &tcp.flight
    else {
        panic!("TCP");
    };
    assert_eq!(arrivals.last().map(|a| a.len), Some(bytes.len()));
    assert!(closed.is_some(), "s_client closes");
    // The Retry makes the client's second Initial a flight of its own,
    // on the same 4-tuple.
    assert_eq!(before_retry.client, after_retry.client);
    assert_eq!(before_retry.server, after_retry.server);
    assert!(before_retry.first_packet < after_retry.first_packet);
    assert_eq!(quic_datagrams(before_retry), 1);
    assert!(quic_datagrams(after_retry) >= 1);
    assert!(capture.end >= after_retry.started);
}

#[test]
fn a_dumpcap_pcapng_capture_over_ipv6_and_linux_cooked_headers() {
    assert_eq!(&ANY[..4], &[0x0a, 0x0d, 0x0d, 0x0a]);
    let capture = read_capture(ANY, CAP).expect("a capture");
    assert_eq!(capture.flows.len(), 3, "{:?}", capture.flows);
    let tcp = &capture.flows[0];
    assert_eq!(sni(tcp).as_deref(), Some("c.example.com"));
    assert!(tcp.client.is_ipv6() && tcp.server.is_ipv6());
    assert!(capture.flows[1..].iter().all(|f| quic_datagrams(f) >= 1));
}

#[test]
fn a_hello_in_three_segments_reads_whole_in_any_order_with_retransmits() {
    let capture = read_capture(SPLIT, CAP).expect("a capture");
    let [tcp] = &capture.flows[..] else {
        panic!("one flow, not {:?}", capture.flows);
    };
    assert_eq!(sni(tcp).as_deref(), Some("e.example.com"));
    let Flight::Tcp {
        bytes, arrivals, ..
    } = &tcp.flight
    else {
        panic!("TCP");
    };
    // The record's length, after its 5-byte header: where the hello ends.
    let hello_end = 5 + usize::from(u16::from_be_bytes([bytes[3], bytes[4]]));
    let before_end = arrivals.iter().filter(|a| a.len < hello_end).count();
    assert!(before_end >= 2, "the hello in 3 segments: {arrivals:?}");
    let hello = bytes.clone();
    // The client's data segments, reversed, the middle one sent twice.
    let (header, records) = records(SPLIT);
    let client = tcp.client;
    let is_client_data = |record: &Vec<u8>| {
        let one = join(&header, std::slice::from_ref(record));
        let flows = read_capture(&one, CAP).expect("one record");
        flows.flows.first().is_some_and(|f| f.client == client)
    };
    let data: Vec<usize> = (0..records.len())
        .filter(|&i| is_client_data(&records[i]))
        .collect();
    assert!(data.len() >= 3, "{data:?}");
    let mut shuffled = records.clone();
    for (slot, &from) in data.iter().zip(data.iter().rev()) {
        shuffled[*slot] = records[from].clone();
    }
    shuffled.insert(data[0], records[data[1]].clone());
    let shuffled = join(&header, &shuffled);
    let again = read_capture(&shuffled, CAP).expect("a capture");
    let [tcp] = &again.flows[..] else {
        panic!("one flow, not {:?}", again.flows);
    };
    assert_eq!(tcp_bytes(tcp), &hello[..]);
    assert!(tcp.notes.is_empty(), "{:?}", tcp.notes);
    // The cap bounds the stream.
    let capped = read_capture(SPLIT, 600).expect("a capture");
    assert_eq!(tcp_bytes(&capped.flows[0]).len(), 600);
}

#[test]
fn a_capture_cut_short_or_with_a_lying_length_keeps_the_packets_before() {
    let cut = &LO[..LO.len() - 10];
    let capture = read_capture(cut, CAP).expect("a capture");
    let stop = capture.walked.stop.expect("stopped");
    assert!(stop.past_end);
    assert_eq!(stop.packets, capture.walked.records);
    assert_eq!(sni(&capture.flows[0]).as_deref(), Some("a.example.com"));

    let (header, records) = records(LO);
    let mut lying = records.clone();
    lying[5][8..12].copy_from_slice(&0xffff_ff00_u32.to_le_bytes());
    let lying = join(&header, &lying);
    let capture = read_capture(&lying, CAP).expect("a capture");
    let stop = capture.walked.stop.expect("stopped");
    assert_eq!(stop.packets, 5);
    assert_eq!(
        stop.offset,
        24 + records[..5].iter().map(Vec::len).sum::<usize>()
    );
    assert!(stop.past_end);

    let ng = read_capture(&ANY[..ANY.len() - 7], CAP).expect("a capture");
    assert!(ng.walked.stop.is_some());
    assert_eq!(
        ng.flows[0].client,
        read_capture(ANY, CAP).expect("whole").flows[0].client
    );
}

/// A pcapng block that declares fewer than the 12 bytes every block has
/// (here a process information block of 8) stops the walk as malformed,
/// the packets before it kept; `pcap-parser` alone would subtract past
/// zero on it (found by the `pcap` fuzz target).
#[test]
fn a_pcapng_block_shorter_than_any_block_stops_the_walk() {
    let mut at = 0;
    let mut ends = Vec::new();
    while let Some(len) = ANY.get(at + 4..at + 8) {
        let len = u32::from_le_bytes([len[0], len[1], len[2], len[3]]) as usize;
        at += len;
        ends.push(at);
    }
    assert_eq!(
        at,
        ANY.len(),
        "a little-endian capture, read block by block"
    );
    let whole = read_capture(ANY, CAP).expect("a capture");
    let cut_at = ends[ends.len() / 2];
    let mut damaged = ANY[..cut_at].to_vec();
    damaged.extend_from_slice(&0x8000_0001_u32.to_le_bytes());
    damaged.extend_from_slice(&8_u32.to_le_bytes());
    damaged.extend_from_slice(&ANY[cut_at..]);
    let capture = read_capture(&damaged, CAP).expect("a capture");
    let stop = capture.walked.stop.expect("stopped");
    assert_eq!(stop.offset, cut_at);
    assert!(!stop.past_end, "malformed, not cut short");
    assert_eq!(stop.packets, capture.walked.records);
    assert!(capture.walked.records < whole.walked.records);
    assert!(capture.walked.records > 0);
}

#[test]
fn files_that_are_no_capture_are_refused_by_name() {
    assert_eq!(
        read_capture(b"GET /", CAP).err(),
        Some(CaptureError::NotACapture { magic: *b"GET " })
    );
    assert_eq!(
        read_capture(&LO[..3], CAP).err(),
        Some(CaptureError::TooShort { len: 3 })
    );
    assert_eq!(
        read_capture(&LO[..20], CAP).err(),
        Some(CaptureError::TooShort { len: 20 })
    );
    let mut usb = LO.to_vec();
    usb[20..24].copy_from_slice(&189_u32.to_le_bytes());
    assert_eq!(
        read_capture(&usb, CAP).err(),
        Some(CaptureError::LinkType { link_type: 189 })
    );
    let mut bad_section = ANY[..64].to_vec();
    bad_section[8..12].copy_from_slice(b"XXXX");
    assert_eq!(
        read_capture(&bad_section, CAP).err(),
        Some(CaptureError::BadSectionHeader)
    );
}

#[test]
fn a_short_snap_length_is_a_note_on_each_flow_it_cut() {
    let capture = read_capture(SNAP, CAP).expect("a capture");
    assert_eq!(capture.flows.len(), 2, "{:?}", capture.flows);
    assert!(
        capture
            .flows
            .iter()
            .all(|f| f.notes.contains(&FlowNote::SnapLength))
    );
    // Records cut inside their IP header are counted, not read.
    let (header, records) = records(LO);
    let mut cut = records.clone();
    cut[0].truncate(16 + 20);
    cut[0][8..12].copy_from_slice(&20_u32.to_le_bytes());
    let cut = join(&header, &cut);
    let capture = read_capture(&cut, CAP).expect("a capture");
    assert_eq!(capture.walked.skipped.headers_cut, 1);
    assert!(capture.flows[0].notes.contains(&FlowNote::NoSyn));
}

#[test]
fn the_server_side_and_other_traffic_start_no_flow() {
    let capture = read_capture(LO, CAP).expect("a capture");
    let servers: Vec<SocketAddr> = capture.flows.iter().map(|f| f.server).collect();
    assert!(capture.flows.iter().all(|f| !servers.contains(&f.client)));
}
