//! Whether a new QUIC flow may start: `max_flows` and `max_flows_per_ip`
//! of its listener, counted for the whole process (every worker's flows).
//!
//! Owns: the order of the checks (the listener's cap first, then the
//! client address's) and the holds a flow keeps while it lives. Must
//! never: count a flow twice, or keep a count after the flow is gone (the
//! holds give themselves back when dropped).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use crate::shared::admission::{IpHold, PerIp};

/// The process-wide counts of QUIC flows.
#[derive(Debug)]
pub struct FlowCounts {
    /// Flows per listener.
    pub per_listener: Arc<PerIp<SocketAddr>>,
    /// Flows per listener and client address.
    pub per_ip: Arc<PerIp<(SocketAddr, IpAddr)>>,
}

impl FlowCounts {
    pub fn new() -> Self {
        Self {
            per_listener: PerIp::new(),
            per_ip: PerIp::new(),
        }
    }
}

impl Default for FlowCounts {
    fn default() -> Self {
        Self::new()
    }
}

/// Why a new flow was not admitted; its datagram is dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// The listener holds `max_flows`.
    MaxFlows,
    /// The client address holds `max_flows_per_ip` on the listener.
    PerIpLimit,
}

/// The counts one flow holds while it lives.
#[derive(Debug)]
pub struct FlowHolds {
    _listener: IpHold<SocketAddr>,
    _ip: IpHold<(SocketAddr, IpAddr)>,
}

/// Admits a flow of `client` on `listener`, within `max_flows` and
/// `max_flows_per_ip` (0: no limit).
pub fn admit(
    counts: &FlowCounts,
    listener: SocketAddr,
    client: IpAddr,
    (max_flows, max_flows_per_ip): (u32, u32),
) -> Result<FlowHolds, Refused> {
    let on_listener = counts
        .per_listener
        .admit(listener, max_flows)
        .map_err(|_| Refused::MaxFlows)?;
    let of_ip = counts
        .per_ip
        .admit((listener, client), max_flows_per_ip)
        .map_err(|_| Refused::PerIpLimit)?;
    Ok(FlowHolds {
        _listener: on_listener,
        _ip: of_ip,
    })
}

#[cfg(test)]
mod tests {
    use std::net::{IpAddr, SocketAddr};

    use super::{FlowCounts, Refused, admit};

    #[test]
    fn the_listener_cap_then_the_address_cap_and_drops_give_back() {
        let counts = FlowCounts::new();
        let listener = SocketAddr::from(([127, 0, 0, 1], 443));
        let (a, b) = (IpAddr::from([10, 0, 0, 1]), IpAddr::from([10, 0, 0, 2]));
        let first = admit(&counts, listener, a, (3, 2));
        let second = admit(&counts, listener, a, (3, 2));
        assert!(first.is_ok() && second.is_ok());
        assert_eq!(
            admit(&counts, listener, a, (3, 2)).err(),
            Some(Refused::PerIpLimit)
        );
        let third = admit(&counts, listener, b, (3, 2));
        assert!(third.is_ok());
        assert_eq!(
            admit(&counts, listener, b, (3, 2)).err(),
            Some(Refused::MaxFlows)
        );
        // Another listener counts apart.
        let other = SocketAddr::from(([127, 0, 0, 1], 444));
        assert!(admit(&counts, other, b, (3, 2)).is_ok());
        drop(first);
        assert!(admit(&counts, listener, a, (3, 2)).is_ok());
        drop((second, third));
        assert_eq!(counts.per_ip.count(&(listener, a)), 0);
        // 0 is no limit.
        let many: Vec<_> = (0..50)
            .map(|_| admit(&counts, listener, a, (0, 0)))
            .collect();
        assert!(many.iter().all(Result::is_ok));
    }
}
