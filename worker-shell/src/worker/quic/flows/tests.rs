//! The flow table's rules, on datagrams built by hand (long headers in the
//! clear are all it reads).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use super::{FlowTable, HoldCaps, Lookup, Overflow};

fn addr(text: &str) -> SocketAddr {
    text.parse()
        .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)))
}

const LISTENER: &str = "127.0.0.1:443";

/// A long-header packet (type bits `kind`, v1) with these IDs and a
/// payload, its Length field covering the payload (Initial: empty token).
fn long(kind: u8, dcid: &[u8], scid: &[u8], payload: usize) -> Vec<u8> {
    let mut packet = vec![0xc0 | (kind << 4), 0, 0, 0, 1];
    packet.push(dcid.len() as u8);
    packet.extend_from_slice(dcid);
    packet.push(scid.len() as u8);
    packet.extend_from_slice(scid);
    if kind == 0 {
        packet.push(0);
    }
    // A 2-byte varint length.
    packet.extend_from_slice(&[0x40 | (payload >> 8) as u8, payload as u8]);
    packet.extend(std::iter::repeat_n(0xaa, payload));
    packet
}

fn short(dcid: &[u8]) -> Vec<u8> {
    let mut packet = vec![0x40];
    packet.extend_from_slice(dcid);
    packet.extend(std::iter::repeat_n(0x55, 30));
    packet
}

#[test]
fn a_client_address_finds_its_flow() {
    let mut table = FlowTable::new(HoldCaps::default());
    let now = Instant::now();
    let (listener, client) = (addr(LISTENER), addr("10.0.0.1:5000"));
    let initial = long(0, b"client-dcid", b"csc", 1200);
    assert_eq!(table.lookup(listener, client, &initial), Lookup::Unknown);
    let key = table.insert(listener, client, &initial, (), now);
    assert_eq!(table.lookup(listener, client, &initial), Lookup::Known(key));
    // Another listener's flows are others.
    let other = addr("127.0.0.1:444");
    assert_eq!(table.lookup(other, client, &initial), Lookup::Unknown);
}

#[test]
fn a_rebound_client_keeps_its_flow_by_the_backend_cid() {
    let mut table = FlowTable::new(HoldCaps::default());
    let now = Instant::now();
    let (listener, client) = (addr(LISTENER), addr("10.0.0.1:5000"));
    let key = table.insert(
        listener,
        client,
        &long(0, b"dcid0001", b"c1", 1200),
        (),
        now,
    );
    // The backend's Initial and Handshake, coalesced, choose its CID.
    let mut reply = long(0, b"c1", b"server-cid-1", 100);
    reply.extend(long(2, b"c1", b"server-cid-1", 300));
    table.learn_from_backend(key, &reply);
    // The client moves: a short header to the backend's CID.
    let moved = addr("10.0.0.9:6000");
    assert_eq!(
        table.lookup(listener, moved, &short(b"server-cid-1")),
        Lookup::Moved(key)
    );
    assert_eq!(table.get(key).map(|f| f.client), Some(moved));
    assert_eq!(
        table.lookup(listener, moved, &short(b"server-cid-1")),
        Lookup::Known(key)
    );
    // The old address is no longer the flow's.
    assert_eq!(
        table.lookup(listener, client, &short(b"unknown-cid!")),
        Lookup::Unknown
    );
}

#[test]
fn a_retry_cid_and_the_first_dcid_lead_to_the_flow() {
    let mut table = FlowTable::new(HoldCaps::default());
    let now = Instant::now();
    let (listener, client) = (addr(LISTENER), addr("10.0.0.1:5000"));
    let key = table.insert(
        listener,
        client,
        &long(0, b"first-dcid", b"c1", 1200),
        (),
        now,
    );
    // A Retry (type 3) runs to the datagram's end; its SCID is the
    // client's next DCID.
    let mut retry = vec![0xf0, 0, 0, 0, 1, 2, b'c', b'1', 5];
    retry.extend_from_slice(b"retry");
    retry.extend_from_slice(&[7; 40]);
    table.learn_from_backend(key, &retry);
    let elsewhere = addr("10.0.0.1:5001");
    assert_eq!(
        table.lookup(listener, elsewhere, &long(0, b"retry", b"c1", 1200)),
        Lookup::Moved(key)
    );
    let again = addr("10.0.0.1:5002");
    assert_eq!(
        table.lookup(listener, again, &long(0, b"first-dcid", b"c1", 1200)),
        Lookup::Moved(key)
    );
}

#[test]
fn a_removed_flow_forgets_its_keys() {
    let mut table = FlowTable::new(HoldCaps::default());
    let now = Instant::now();
    let (listener, client) = (addr(LISTENER), addr("10.0.0.1:5000"));
    let key = table.insert(
        listener,
        client,
        &long(0, b"dcid0001", b"c1", 1200),
        (),
        now,
    );
    table.learn_from_backend(key, &long(0, b"c1", b"server-cid-1", 100));
    assert!(table.hold(key, &[1; 100]).is_ok());
    assert!(table.remove(key).is_some());
    assert!(table.is_empty());
    assert_eq!(table.held_bytes(), 0);
    assert_eq!(
        table.lookup(listener, addr("10.0.0.2:1"), &short(b"server-cid-1")),
        Lookup::Unknown
    );
    assert_eq!(
        table.lookup(listener, client, &short(b"server-cid-1")),
        Lookup::Unknown
    );
}

#[test]
fn a_cid_stays_with_the_flow_that_learned_it_first() {
    let mut table = FlowTable::new(HoldCaps::default());
    let now = Instant::now();
    let listener = addr(LISTENER);
    let a = table.insert(
        listener,
        addr("10.0.0.1:1"),
        &long(0, b"same-dcid", b"a", 1200),
        (),
        now,
    );
    let b = table.insert(
        listener,
        addr("10.0.0.2:1"),
        &long(0, b"same-dcid", b"b", 1200),
        (),
        now,
    );
    assert_ne!(a, b);
    assert_eq!(
        table.lookup(
            listener,
            addr("10.0.0.3:1"),
            &long(0, b"same-dcid", b"x", 1200)
        ),
        Lookup::Moved(a)
    );
    // Removing the second flow keeps the first one's key.
    assert!(table.remove(b).is_some());
    assert_eq!(
        table.lookup(
            listener,
            addr("10.0.0.3:1"),
            &long(0, b"same-dcid", b"x", 1200)
        ),
        Lookup::Known(a)
    );
}

#[test]
fn holding_is_capped_per_flow_and_for_the_table() {
    let caps = HoldCaps {
        per_flow_datagrams: 3,
        per_flow_bytes: 2_500,
        total_bytes: 4_000,
    };
    let mut table = FlowTable::new(caps);
    let now = Instant::now();
    let listener = addr(LISTENER);
    let a = table.insert(
        listener,
        addr("10.0.0.1:1"),
        &long(0, b"d1", b"a", 10),
        (),
        now,
    );
    let b = table.insert(
        listener,
        addr("10.0.0.2:1"),
        &long(0, b"d2", b"b", 10),
        (),
        now,
    );
    assert_eq!(table.hold(a, &[0; 1200]), Ok(()));
    assert_eq!(table.hold(a, &[1; 1200]), Ok(()));
    assert_eq!(table.hold(a, &[2; 1200]), Err(Overflow::Flow), "bytes");
    assert_eq!(table.hold(a, &[2; 50]), Ok(()));
    assert_eq!(table.hold(a, &[3; 10]), Err(Overflow::Flow), "datagrams");
    assert_eq!(table.hold(b, &[0; 1200]), Ok(()));
    assert_eq!(table.hold(b, &[0; 1200]), Err(Overflow::Table));
    assert_eq!(table.held_bytes(), 3_650);
    // The replay is in the order received, and frees the bytes.
    let held = table.take_held(a);
    assert_eq!(
        held.iter().map(|d| (d.len(), d[0])).collect::<Vec<_>>(),
        [(1200, 0), (1200, 1), (50, 2)]
    );
    assert_eq!(table.held_bytes(), 1_200);
    assert_eq!(table.hold(b, &[0; 1200]), Ok(()));
}

#[test]
fn a_flow_idles_out_from_its_last_datagram_either_way() {
    let mut table = FlowTable::new(HoldCaps::default());
    let start = Instant::now();
    let idle = Duration::from_secs(30);
    let key = table.insert(addr(LISTENER), addr("10.0.0.1:1"), &[0xc0], (), start);
    assert_eq!(table.idle_since(key, idle), Some(start + idle));
    let later = start + Duration::from_secs(20);
    table.touch(key, 1_000, false, later);
    assert_eq!(table.idle_since(key, idle), Some(later + idle));
    table.touch(key, 1_200, true, later + Duration::from_secs(1));
    let counts = table.get(key).map(|f| f.counts).unwrap_or_default();
    assert_eq!(
        (
            counts.datagrams_in,
            counts.bytes_in,
            counts.datagrams_out,
            counts.bytes_out
        ),
        (1, 1_200, 1, 1_000)
    );
    assert!(table.remove(key).is_some());
    assert_eq!(table.idle_since(key, idle), None);
}

#[test]
fn a_new_port_of_an_ip_with_one_flow_is_that_flow_rebound() {
    let mut table = FlowTable::new(HoldCaps::default());
    let now = Instant::now();
    let listener = addr(LISTENER);
    let key = table.insert(
        listener,
        addr("10.0.0.1:5000"),
        &long(0, b"dcid0001", b"c", 1200),
        (),
        now,
    );
    // Not before the backend spoke: nothing says the flow is a connection.
    assert_eq!(
        table.lookup(listener, addr("10.0.0.1:5001"), &short(b"issued-later")),
        Lookup::Unknown
    );
    table.learn_from_backend(key, &long(0, b"c", b"server-cid-1", 100));
    // A CID the table never saw (NEW_CONNECTION_ID), from a new port.
    assert_eq!(
        table.lookup(listener, addr("10.0.0.1:5001"), &short(b"issued-later")),
        Lookup::Moved(key)
    );
    // Another IP, or a long header, is not that flow.
    assert_eq!(
        table.lookup(listener, addr("10.0.0.2:5001"), &short(b"issued-later")),
        Lookup::Unknown
    );
    assert_eq!(
        table.lookup(
            listener,
            addr("10.0.0.1:5002"),
            &long(0, b"new-conn", b"x", 1200)
        ),
        Lookup::Unknown
    );
    // Two flows from the IP: which one moved is unknown.
    let other = table.insert(
        listener,
        addr("10.0.0.1:6000"),
        &long(0, b"dcid0002", b"d", 1200),
        (),
        now,
    );
    table.learn_from_backend(other, &long(0, b"d", b"server-cid-2", 100));
    assert_eq!(
        table.lookup(listener, addr("10.0.0.1:5003"), &short(b"issued-later")),
        Lookup::Unknown
    );
}
