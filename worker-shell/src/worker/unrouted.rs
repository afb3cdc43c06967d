//! How many connections each client address holds on a listener before
//! they are routed: the count behind the listener's `max_unrouted_per_ip`,
//! for the whole process.
//!
//! Owns: [`Unrouted`] (a worker's handle on the process-wide counts, per
//! listener and client IP), the check a new connection must pass at
//! accept, and [`Held`], the one count a session carries until it leaves
//! the preread stage or closes. Must never: count a session twice or lose
//! one (a [`Held`] gives its count back once, when dropped), keep an
//! address at zero (the map would grow with every address ever seen), or
//! count on a listener without a limit (off is off: a limit set later
//! counts the connections accepted from then on).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use super::runtime::ListenerRuntime;
use crate::shared::admission::{IpHold, PerIp};

pub use crate::shared::admission::Full;

/// A worker's handle on the unrouted counts of every worker.
#[derive(Debug)]
pub struct Unrouted {
    counts: Arc<PerIp<(SocketAddr, IpAddr)>>,
}

/// One counted connection; dropping it (or [`Unrouted::release`]) gives
/// it back.
pub type Held = IpHold<(SocketAddr, IpAddr)>;

/// The limit of the listener a connection arrived on (0: none). A
/// catch-all listener routes at accept, or once the load balancer's PROXY
/// header is in, so the TCP peer it would count is that balancer; a
/// listener that is gone has none.
pub fn limit(listener: Option<&ListenerRuntime>) -> u32 {
    listener
        .filter(|l| l.preread.catch_all().is_none())
        .map_or(0, |l| l.max_unrouted_per_ip)
}

impl Unrouted {
    /// A handle on `counts`, the process's.
    pub fn new(counts: Arc<PerIp<(SocketAddr, IpAddr)>>) -> Self {
        Self { counts }
    }

    /// Counts a connection from `ip` accepted on `listener`, whose limit is
    /// `limit` (0: none). [`Full`] when the address already holds `limit`
    /// unrouted connections there, in any worker: refuse this one.
    /// `Ok(None)` on a listener without a limit: nothing is counted.
    pub fn admit(
        &mut self,
        listener: SocketAddr,
        ip: IpAddr,
        limit: u32,
    ) -> Result<Option<Held>, Full> {
        if limit == 0 {
            return Ok(None);
        }
        self.counts.admit((listener, ip), limit).map(Some)
    }

    /// Gives back a count: its session left the preread stage or closed.
    pub fn release(&mut self, held: Held) {
        drop(held);
    }
}

#[cfg(test)]
mod tests {
    use std::net::{IpAddr, SocketAddr};

    use super::Unrouted;
    use crate::shared::admission::PerIp;

    fn at(s: &str) -> SocketAddr {
        s.parse().expect("an address")
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("an ip")
    }

    #[test]
    fn the_limit_refuses_one_more_per_address_and_listener() {
        let counts = PerIp::new();
        let mut unrouted = Unrouted::new(std::sync::Arc::clone(&counts));
        let mut other_worker = Unrouted::new(std::sync::Arc::clone(&counts));
        let (a, b) = (at("127.0.0.1:8443"), at("127.0.0.1:9443"));
        let (client, other) = (ip("10.0.0.1"), ip("10.0.0.2"));
        let first = unrouted.admit(a, client, 2).expect("first");
        let second = other_worker.admit(a, client, 2).ok().flatten();
        assert!(second.is_some(), "counted by the other worker");
        assert_eq!(
            unrouted.admit(a, client, 2).err(),
            Some(super::Full),
            "a third is refused, whichever worker counted the first two"
        );
        assert!(unrouted.admit(a, other, 2).is_ok_and(|h| h.is_some()));
        assert!(unrouted.admit(b, client, 2).is_ok_and(|h| h.is_some()));
        assert_eq!(counts.count(&(a, client)), 2);
        unrouted.release(first.expect("counted"));
        assert_eq!(counts.count(&(a, client)), 1);
        let again = unrouted.admit(a, client, 2).expect("room again");
        for held in [second, again].into_iter().flatten() {
            unrouted.release(held);
        }
        assert!(counts.is_empty(), "no entry at zero");
    }

    #[test]
    fn without_a_limit_nothing_is_counted() {
        let mut unrouted = Unrouted::new(PerIp::new());
        for _ in 0..10 {
            let held = unrouted.admit(at("127.0.0.1:8443"), ip("10.0.0.1"), 0);
            assert!(matches!(held, Ok(None)));
        }
        assert!(unrouted.counts.is_empty());
    }
}
