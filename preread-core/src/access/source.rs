//! The source a client address counts as, for the rates and the per-IP
//! limits: an IPv4 address as it is (a v4-mapped IPv6 one as its IPv4
//! address), an IPv6 address as its `ipv6_prefix` network, since one
//! IPv6 host commonly holds a whole /64 and would otherwise slip past any
//! per-address count by changing its low bits.
//!
//! Owns: [`source_key`]. Must never: keep host bits past the prefix.

use std::net::{IpAddr, Ipv6Addr};

/// The default `ipv6_prefix`: an IPv6 source is counted per /64.
pub const DEFAULT_IPV6_PREFIX: u8 = 64;

/// The key `ip` is counted under: its canonical IPv4 address, or its
/// IPv6 address masked to `ipv6_prefix` bits (at most 128).
pub fn source_key(ip: IpAddr, ipv6_prefix: u8) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => {
            let bits = u32::from(ipv6_prefix.min(128));
            let mask = u128::MAX.checked_shl(128 - bits).unwrap_or(0);
            IpAddr::V6(Ipv6Addr::from(u128::from(v6) & mask))
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;

    use super::{DEFAULT_IPV6_PREFIX, source_key};

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap_or(IpAddr::from([0, 0, 0, 0]))
    }

    #[test]
    fn ipv6_is_counted_per_prefix() {
        let a = source_key(ip("2001:db8:1:2:aaaa::1"), DEFAULT_IPV6_PREFIX);
        let b = source_key(ip("2001:db8:1:2:bbbb::2"), DEFAULT_IPV6_PREFIX);
        let other = source_key(ip("2001:db8:1:3::1"), DEFAULT_IPV6_PREFIX);
        assert_eq!(a, ip("2001:db8:1:2::"));
        assert_eq!(a, b);
        assert_ne!(a, other);
        assert_eq!(source_key(ip("2001:db8::1"), 128), ip("2001:db8::1"));
        assert_eq!(source_key(ip("2001:db8::1"), 0), ip("::"));
        assert_eq!(source_key(ip("2001:db8::1"), 200), ip("2001:db8::1"));
    }

    #[test]
    fn ipv4_and_v4_mapped_are_the_address() {
        assert_eq!(source_key(ip("10.0.0.7"), 64), ip("10.0.0.7"));
        assert_eq!(source_key(ip("::ffff:10.0.0.7"), 64), ip("10.0.0.7"));
    }
}
