//! How many connections each client address holds on a listener before
//! they are routed: the count behind the listener's `max_unrouted_per_ip`.
//!
//! Owns: [`Unrouted`] (the counts of one worker, per listener and client
//! IP), the check a new connection must pass at accept, and [`Held`], the
//! one count a session carries until it leaves the preread stage or closes.
//! Must never: count a session twice or lose one (a [`Held`] is given back
//! once, by value), keep an address at zero (the map would grow with every
//! address ever seen), or count on a listener without a limit (off is off:
//! a limit set later counts the connections accepted from then on).

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};

use super::runtime::ListenerRuntime;

/// The unrouted connections of one worker, per (listener, client IP).
#[derive(Debug, Default)]
pub struct Unrouted {
    counts: HashMap<(SocketAddr, IpAddr), u32>,
}

/// One counted connection; [`Unrouted::release`] takes it back.
#[derive(Debug)]
#[must_use = "a held count must be released once the session is routed or closed"]
pub struct Held {
    key: (SocketAddr, IpAddr),
}

/// The client's address already holds the listener's limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Full;

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
    /// Counts a connection from `ip` accepted on `listener`, whose limit is
    /// `limit` (0: none). [`Full`] when the address already holds `limit`
    /// unrouted connections there: refuse this one. `Ok(None)` on a
    /// listener without a limit: nothing is counted.
    pub fn admit(
        &mut self,
        listener: SocketAddr,
        ip: IpAddr,
        limit: u32,
    ) -> Result<Option<Held>, Full> {
        if limit == 0 {
            return Ok(None);
        }
        let key = (listener, ip);
        let count = self.counts.entry(key).or_insert(0);
        if *count >= limit {
            return Err(Full);
        }
        *count += 1;
        Ok(Some(Held { key }))
    }

    /// Gives back a count: its session left the preread stage or closed.
    pub fn release(&mut self, held: Held) {
        let Some(count) = self.counts.get_mut(&held.key) else {
            debug_assert!(false, "a held count of {:?} was not counted", held.key);
            return;
        };
        *count -= 1;
        if *count == 0 {
            self.counts.remove(&held.key);
        }
    }

    /// The unrouted connections `ip` holds on `listener`.
    #[cfg(test)]
    fn count(&self, listener: SocketAddr, ip: IpAddr) -> u32 {
        self.counts.get(&(listener, ip)).copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use std::net::{IpAddr, SocketAddr};

    use super::Unrouted;

    fn at(s: &str) -> SocketAddr {
        s.parse().expect("an address")
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("an ip")
    }

    #[test]
    fn the_limit_refuses_one_more_per_address_and_listener() {
        let mut unrouted = Unrouted::default();
        let (a, b) = (at("127.0.0.1:8443"), at("127.0.0.1:9443"));
        let (client, other) = (ip("10.0.0.1"), ip("10.0.0.2"));
        let first = unrouted.admit(a, client, 2).expect("first");
        let second = unrouted.admit(a, client, 2).expect("second");
        assert_eq!(
            unrouted.admit(a, client, 2).err(),
            Some(super::Full),
            "a third is refused"
        );
        assert!(unrouted.admit(a, other, 2).is_ok_and(|h| h.is_some()));
        assert!(unrouted.admit(b, client, 2).is_ok_and(|h| h.is_some()));
        assert_eq!(unrouted.count(a, client), 2);
        unrouted.release(first.expect("counted"));
        assert_eq!(unrouted.count(a, client), 1);
        let again = unrouted.admit(a, client, 2).expect("room again");
        for held in [second, again].into_iter().flatten() {
            unrouted.release(held);
        }
        assert_eq!(unrouted.count(a, client), 0);
        assert!(
            !unrouted.counts.contains_key(&(a, client)),
            "no entry at zero"
        );
    }

    #[test]
    fn without_a_limit_nothing_is_counted() {
        let mut unrouted = Unrouted::default();
        for _ in 0..10 {
            let held = unrouted.admit(at("127.0.0.1:8443"), ip("10.0.0.1"), 0);
            assert!(matches!(held, Ok(None)));
        }
        assert!(unrouted.counts.is_empty());
    }
}
