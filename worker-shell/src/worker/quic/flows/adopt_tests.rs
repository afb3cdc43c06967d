//! A handed-over flow taken back by the table: found by its client and by
//! the connection IDs it learned in the old process.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use super::{FlowCounts, FlowTable, Handed, HoldCaps, Lookup};

fn addr(text: &str) -> SocketAddr {
    text.parse()
        .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)))
}

fn handed(client: &str, cids: &[&[u8]], state: u32) -> Handed<u32> {
    let now = Instant::now();
    Handed {
        listener: addr("127.0.0.1:443"),
        client: addr(client),
        state,
        cids: cids.iter().map(|cid| (*cid).into()).collect(),
        backend_spoke: true,
        first_seen: now,
        last_seen: now + Duration::from_millis(5),
        counts: FlowCounts {
            datagrams_in: 3,
            ..FlowCounts::default()
        },
    }
}

/// A short-header datagram to `dcid`.
fn short(dcid: &[u8]) -> Vec<u8> {
    let mut packet = vec![0x40];
    packet.extend_from_slice(dcid);
    packet.extend(std::iter::repeat_n(0x55, 30));
    packet
}

#[test]
fn an_adopted_flow_answers_to_its_client_and_its_connection_ids() {
    let listener = addr("127.0.0.1:443");
    let mut table = FlowTable::new(HoldCaps::default());
    let key = table
        .adopt(handed("192.0.2.1:5000", &[b"backend1", b"client-dcid"], 7))
        .expect("adopted");
    let flow = table.get(key).expect("flow");
    assert_eq!((flow.state, flow.counts.datagrams_in), (7, 3));
    assert_eq!(flow.cids().len(), 2);
    assert!(flow.backend_spoke());
    assert_eq!(
        table.lookup(listener, addr("192.0.2.1:5000"), &short(b"backend1")),
        Lookup::Known(key)
    );
    // A rebinding after the upgrade: found by the ID learned before it.
    assert_eq!(
        table.lookup(listener, addr("198.51.100.9:6000"), &short(b"backend1")),
        Lookup::Moved(key)
    );
}

#[test]
fn a_second_flow_of_the_same_client_is_given_back_and_ids_stay_with_the_first() {
    let mut table = FlowTable::new(HoldCaps::default());
    let first = table
        .adopt(handed("192.0.2.1:5000", &[b"shared-id"], 1))
        .expect("adopted");
    let again = table.adopt(handed("192.0.2.1:5000", &[b"other"], 2));
    assert_eq!(again, None);
    let second = table
        .adopt(handed("192.0.2.2:5000", &[b"shared-id"], 3))
        .expect("another client");
    assert_eq!(table.len(), 2);
    assert_eq!(
        table.lookup(
            addr("127.0.0.1:443"),
            addr("203.0.113.3:1"),
            &short(b"shared-id")
        ),
        Lookup::Moved(first)
    );
    assert!(table.get(second).is_some_and(|f| f.cids().is_empty()));
    table.remove(first);
    table.remove(second);
    assert!(table.is_empty());
}
