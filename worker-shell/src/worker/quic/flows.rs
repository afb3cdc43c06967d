//! The QUIC flow table of one worker: which flow a datagram belongs to,
//! what an undecided flow may hold, and when a flow is forgotten.
//!
//! Owns the policy, in pure code that tests call (no socket, no clock):
//! - the keys: a flow is found by `(listener, client address)`; failing
//!   that, a datagram whose destination connection ID the table learned
//!   (from the backend's long headers, in the clear) belongs to that
//!   flow, which moves to the new address (NAT rebinding, a client's
//!   `rebind`); failing that, a short header from a new port of an IP
//!   whose only flow learned the backend's IDs is that flow, rebound
//!   with a connection ID issued encrypted: [`FlowTable::lookup`];
//! - the connection IDs learned: the SCID of each long-header packet the
//!   backend sends (its Initial, Handshake and Retry packets), and the
//!   client's first DCID, so that a client's second Initial after a Retry
//!   (DCID = the Retry's SCID) or after a rebinding continues its flow;
//! - the buffering caps of undecided flows, per flow and for the whole
//!   table ([`FlowTable::hold`]);
//! - the idle rule: a flow with no datagram either way for its
//!   `quic_idle_timeout` is forgotten ([`FlowTable::idle_since`]).
//!
//! Must never: perform I/O, read a clock, or index a connection ID it did
//! not see in the clear. What stays out of reach: the connection IDs an
//! endpoint issues later in NEW_CONNECTION_ID frames are encrypted, so a
//! client that migrates *and* switches to one of them is a new, unknown
//! flow (doc/configure.md §8; QUIC-LB, draft-ietf-quic-load-balancers,
//! encodes the backend in every CID and is the way past that).

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use preread_parser::quic::{MAX_CID_LEN, parse_long_header};
use slab::Slab;

/// The caps on what undecided flows hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HoldCaps {
    /// Datagrams one undecided flow may hold.
    pub per_flow_datagrams: usize,
    /// Bytes one undecided flow may hold.
    pub per_flow_bytes: usize,
    /// Bytes all the undecided flows of the table may hold.
    pub total_bytes: usize,
}

impl Default for HoldCaps {
    /// A ClientHello spans a few Initials (about 1.8 KB with a
    /// post-quantum key share, so 2 or 3 datagrams of 1,200+ bytes), and
    /// 0-RTT packets may follow: 32 datagrams and 64 KiB per flow cover
    /// that with room. 16 MiB for the table is 256 such flows at their
    /// cap, or thousands of ordinary ones.
    fn default() -> Self {
        Self {
            per_flow_datagrams: 32,
            per_flow_bytes: 64 * 1024,
            total_bytes: 16 * 1024 * 1024,
        }
    }
}

/// Why a datagram could not be held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overflow {
    /// The flow holds its cap of datagrams or bytes.
    Flow,
    /// The table holds its cap of bytes.
    Table,
}

/// What the table knows of a datagram from a client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup {
    /// The flow of this `(listener, client)`.
    Known(usize),
    /// The flow that learned this datagram's destination connection ID,
    /// from another client address; it now answers to this one.
    Moved(usize),
    /// No flow: a new one if the datagram may start one.
    Unknown,
}

/// One flow: its addresses, its shell's state `S`, and the counts the
/// access log reports.
#[derive(Debug)]
pub struct Flow<S> {
    pub listener: SocketAddr,
    pub client: SocketAddr,
    /// What the shell keeps for the flow (the step, the backend socket).
    pub state: S,
    /// Datagrams held until the decision, in the order received.
    held: Vec<Vec<u8>>,
    held_bytes: usize,
    /// The connection IDs that lead to this flow.
    cids: Vec<Box<[u8]>>,
    /// The backend sent a long header: the flow is a connection it took.
    backend_spoke: bool,
    pub first_seen: Instant,
    pub last_seen: Instant,
    pub counts: FlowCounts,
}

/// A flow's traffic, both ways.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FlowCounts {
    pub datagrams_in: u64,
    pub datagrams_out: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
}

impl<S> Flow<S> {
    /// The datagrams held, oldest first, for the replay; the flow holds
    /// none after.
    fn take_held(&mut self) -> Vec<Vec<u8>> {
        self.held_bytes = 0;
        std::mem::take(&mut self.held)
    }

    /// How many datagrams it holds.
    pub fn held(&self) -> usize {
        self.held.len()
    }

    /// The connection IDs that lead to it.
    pub fn cids(&self) -> &[Box<[u8]>] {
        &self.cids
    }

    /// Whether the backend sent it a long header.
    pub fn backend_spoke(&self) -> bool {
        self.backend_spoke
    }
}

/// A decided flow an upgrade's old process handed over, as the table takes
/// it back.
#[derive(Debug)]
pub struct Handed<S> {
    pub listener: SocketAddr,
    pub client: SocketAddr,
    pub state: S,
    pub cids: Vec<Box<[u8]>>,
    pub backend_spoke: bool,
    pub first_seen: Instant,
    pub last_seen: Instant,
    pub counts: FlowCounts,
}

/// The flows of one worker.
#[derive(Debug)]
pub struct FlowTable<S> {
    flows: Slab<Flow<S>>,
    by_client: HashMap<(SocketAddr, SocketAddr), usize>,
    by_cid: HashMap<(SocketAddr, Box<[u8]>), usize>,
    /// The flows of each client IP on each listener.
    by_ip: HashMap<(SocketAddr, IpAddr), Vec<usize>>,
    /// How many learned IDs have each length: a short header does not say
    /// how long its DCID is, so a lookup tries each length in use.
    cid_lengths: [u32; MAX_CID_LEN + 1],
    held_bytes: usize,
    caps: HoldCaps,
}

impl<S> FlowTable<S> {
    pub fn new(caps: HoldCaps) -> Self {
        Self {
            flows: Slab::new(),
            by_client: HashMap::new(),
            by_cid: HashMap::new(),
            by_ip: HashMap::new(),
            cid_lengths: [0; MAX_CID_LEN + 1],
            held_bytes: 0,
            caps,
        }
    }

    pub fn len(&self) -> usize {
        self.flows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.flows.is_empty()
    }

    pub fn get(&self, key: usize) -> Option<&Flow<S>> {
        self.flows.get(key)
    }

    pub fn get_mut(&mut self, key: usize) -> Option<&mut Flow<S>> {
        self.flows.get_mut(key)
    }

    /// Every flow's key, for a sweep.
    pub fn keys(&self) -> Vec<usize> {
        self.flows.iter().map(|(key, _)| key).collect()
    }

    /// Bytes held by all the undecided flows.
    pub fn held_bytes(&self) -> usize {
        self.held_bytes
    }

    /// The flow a client's datagram belongs to. A datagram from an address
    /// the table does not know, whose destination connection ID a flow
    /// learned, moves that flow to the address: the datagrams back go
    /// there from now on.
    pub fn lookup(&mut self, listener: SocketAddr, client: SocketAddr, datagram: &[u8]) -> Lookup {
        if let Some(&key) = self.by_client.get(&(listener, client)) {
            return Lookup::Known(key);
        }
        let Some(key) = self
            .by_dcid(listener, datagram)
            .or_else(|| self.only_flow_of_ip(listener, client, datagram))
        else {
            return Lookup::Unknown;
        };
        let Some(flow) = self.flows.get_mut(key) else {
            return Lookup::Unknown;
        };
        let old = flow.client;
        flow.client = client;
        self.by_client.remove(&(listener, old));
        self.by_client.insert((listener, client), key);
        self.unindex_ip(listener, old, key);
        self.by_ip
            .entry((listener, client.ip()))
            .or_default()
            .push(key);
        Lookup::Moved(key)
    }

    /// A short-header datagram from a new port of an IP that holds one
    /// flow, which learned the backend's IDs: that flow, rebound. A
    /// client that migrates switches to a connection ID it got in an
    /// encrypted NEW_CONNECTION_ID frame (RFC 9000 §9.5), which no table
    /// can know; a NAT rebinding keeps the IP, so the flow is found by it
    /// when it is the IP's only one. With several flows from the IP, the
    /// datagram has no known flow.
    fn only_flow_of_ip(
        &self,
        listener: SocketAddr,
        client: SocketAddr,
        datagram: &[u8],
    ) -> Option<usize> {
        if datagram.first().is_none_or(|b| b & 0x80 != 0) {
            return None;
        }
        match self.by_ip.get(&(listener, client.ip()))?.as_slice() {
            [only] if self.flows.get(*only).is_some_and(|f| f.backend_spoke) => Some(*only),
            _ => None,
        }
    }

    fn unindex_ip(&mut self, listener: SocketAddr, client: SocketAddr, key: usize) {
        let slot = (listener, client.ip());
        if let Some(keys) = self.by_ip.get_mut(&slot) {
            keys.retain(|k| *k != key);
            if keys.is_empty() {
                self.by_ip.remove(&slot);
            }
        }
    }

    /// The flow whose learned connection ID is this datagram's DCID.
    fn by_dcid(&self, listener: SocketAddr, datagram: &[u8]) -> Option<usize> {
        let first = *datagram.first()?;
        if first & 0x80 != 0 {
            let header = parse_long_header(datagram).ok()?;
            return self.by_cid.get(&(listener, header.dcid.into())).copied();
        }
        (1..=MAX_CID_LEN)
            .filter(|&len| self.cid_lengths[len] > 0)
            .find_map(|len| {
                let dcid = datagram.get(1..1 + len)?;
                self.by_cid.get(&(listener, dcid.into())).copied()
            })
    }

    /// A new flow of `client` on `listener`, seen first at `now`, whose
    /// first datagram's DCID (if a long header) leads to it too.
    pub fn insert(
        &mut self,
        listener: SocketAddr,
        client: SocketAddr,
        first: &[u8],
        state: S,
        now: Instant,
    ) -> usize {
        let key = self.flows.insert(Flow {
            listener,
            client,
            state,
            held: Vec::new(),
            held_bytes: 0,
            cids: Vec::new(),
            backend_spoke: false,
            first_seen: now,
            last_seen: now,
            counts: FlowCounts::default(),
        });
        self.by_client.insert((listener, client), key);
        self.by_ip
            .entry((listener, client.ip()))
            .or_default()
            .push(key);
        if let Ok(header) = parse_long_header(first) {
            self.learn_cid(key, header.dcid);
        }
        key
    }

    /// Takes a flow an upgrade handed over, with its keys; `None` (the
    /// flow dropped) when the table already holds a flow of that client on
    /// that listener. A connection ID another flow holds stays with it, as
    /// when one is learned.
    pub fn adopt(&mut self, handed: Handed<S>) -> Option<usize> {
        if self
            .by_client
            .contains_key(&(handed.listener, handed.client))
        {
            return None;
        }
        let Handed {
            listener,
            client,
            state,
            cids,
            backend_spoke,
            first_seen,
            last_seen,
            counts,
        } = handed;
        let key = self.flows.insert(Flow {
            listener,
            client,
            state,
            held: Vec::new(),
            held_bytes: 0,
            cids: Vec::new(),
            backend_spoke,
            first_seen,
            last_seen,
            counts,
        });
        self.by_client.insert((listener, client), key);
        self.by_ip
            .entry((listener, client.ip()))
            .or_default()
            .push(key);
        for cid in &cids {
            self.learn_cid(key, cid);
        }
        Some(key)
    }

    /// Keeps a datagram of an undecided flow for the replay, within the
    /// caps.
    pub fn hold(&mut self, key: usize, datagram: &[u8]) -> Result<(), Overflow> {
        let Some(flow) = self.flows.get_mut(key) else {
            return Err(Overflow::Flow);
        };
        if flow.held.len() >= self.caps.per_flow_datagrams
            || flow.held_bytes + datagram.len() > self.caps.per_flow_bytes
        {
            return Err(Overflow::Flow);
        }
        if self.held_bytes + datagram.len() > self.caps.total_bytes {
            return Err(Overflow::Table);
        }
        flow.held.push(datagram.to_vec());
        flow.held_bytes += datagram.len();
        self.held_bytes += datagram.len();
        Ok(())
    }

    /// The datagrams an undecided flow holds, oldest first.
    pub fn held_datagrams(&self, key: usize) -> &[Vec<u8>] {
        self.flows.get(key).map_or(&[], |flow| flow.held.as_slice())
    }

    /// The datagrams a decided flow held, oldest first; it holds none
    /// after.
    pub fn take_held(&mut self, key: usize) -> Vec<Vec<u8>> {
        match self.flows.get_mut(key) {
            Some(flow) => {
                self.held_bytes -= flow.held_bytes;
                flow.take_held()
            }
            None => Vec::new(),
        }
    }

    /// Learns the connection IDs the backend chose, from the long headers
    /// of a datagram it sent to the flow (every coalesced packet's SCID:
    /// an Initial, a Handshake, a Retry).
    pub fn learn_from_backend(&mut self, key: usize, datagram: &[u8]) {
        let mut rest = datagram;
        while let Ok(header) = parse_long_header(rest) {
            if let Some(flow) = self.flows.get_mut(key) {
                flow.backend_spoke = true;
            }
            self.learn_cid(key, header.scid);
            match rest.get(header.len..) {
                Some(next) if header.len > 0 && !next.is_empty() => rest = next,
                _ => break,
            }
        }
    }

    fn learn_cid(&mut self, key: usize, cid: &[u8]) {
        if cid.is_empty() || cid.len() > MAX_CID_LEN {
            return;
        }
        let Some(flow) = self.flows.get_mut(key) else {
            return;
        };
        if flow.cids.iter().any(|known| **known == *cid) {
            return;
        }
        let id: Box<[u8]> = cid.into();
        // An ID another flow learned first stays with it: the earlier
        // flow is the one its backend named.
        if let Entry::Vacant(entry) = self.by_cid.entry((flow.listener, id.clone())) {
            entry.insert(key);
            self.cid_lengths[cid.len()] += 1;
            flow.cids.push(id);
        }
    }

    /// The flow counts a datagram from the client (`inbound`) or to it.
    pub fn touch(&mut self, key: usize, bytes: usize, inbound: bool, now: Instant) {
        if let Some(flow) = self.flows.get_mut(key) {
            flow.last_seen = now;
            let counts = &mut flow.counts;
            if inbound {
                counts.datagrams_in += 1;
                counts.bytes_in += bytes as u64;
            } else {
                counts.datagrams_out += 1;
                counts.bytes_out += bytes as u64;
            }
        }
    }

    /// When the flow idles out with `idle`: `None` once it is gone.
    pub fn idle_since(&self, key: usize, idle: Duration) -> Option<Instant> {
        self.flows.get(key).map(|flow| flow.last_seen + idle)
    }

    /// Forgets a flow and every key that led to it.
    pub fn remove(&mut self, key: usize) -> Option<Flow<S>> {
        let mut flow = self.flows.try_remove(key)?;
        self.by_client.remove(&(flow.listener, flow.client));
        self.unindex_ip(flow.listener, flow.client, key);
        for cid in flow.cids.drain(..) {
            let len = cid.len();
            if self.by_cid.remove(&(flow.listener, cid)).is_some() {
                self.cid_lengths[len] -= 1;
            }
        }
        self.held_bytes -= flow.held_bytes;
        Some(flow)
    }
}

#[cfg(test)]
mod adopt_tests;
#[cfg(test)]
mod tests;
