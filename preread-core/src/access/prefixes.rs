//! A list of IPv4 and IPv6 prefixes, searched with one longest-prefix
//! lookup whatever its length, and the parsing of one prefix.
//!
//! The trie is `prefix-trie`'s [`PrefixSet`], chosen over
//! `ip_network_table` (a wrapper of a fork of `treebitmap`, last released
//! in 2021, whose insert panics on a prefix with host bits) and `iprange`
//! (no longest-match query, only membership of whole ranges): it is
//! maintained, answers `get_lpm` in one walk down a path-compressed trie,
//! reports its own memory (`mem_size`, the bytes per prefix in
//! `doc/performance.md`), and takes `ipnet`'s types, which the config
//! parses anyway. A 100,000-prefix list costs one lookup
//! (`benches/access.rs`).
//!
//! Owns: [`Prefixes`] and [`parse_prefix`] with its [`PrefixError`].
//! Must never: accept a prefix with host bits set (it is a typo the
//! operator is told about, with the network meant), or scan the list.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use prefix_trie::PrefixSet;

/// Why a text is not a prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PrefixError {
    /// Not an address, or not `address/length`.
    NotCidr,
    /// The length is past the family's (32 for IPv4, 128 for IPv6).
    Length {
        /// The length given.
        length: String,
        /// The family's longest.
        max: u8,
    },
    /// Bits are set past the length: `network` is the prefix meant.
    HostBits {
        /// The text with its host bits cleared.
        network: IpNet,
    },
}

impl fmt::Display for PrefixError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotCidr => f.write_str("not an address or an address/length prefix"),
            Self::Length { length, max } => {
                write!(f, "prefix length {length} is not between 0 and {max}")
            }
            Self::HostBits { network } => {
                write!(
                    f,
                    "host bits are set past the length; the network is {network}"
                )
            }
        }
    }
}

impl std::error::Error for PrefixError {}

/// Parses `10.0.0.0/8`, `2001:db8::/32`, or a bare address (its /32 or
/// /128).
pub fn parse_prefix(text: &str) -> Result<IpNet, PrefixError> {
    let text = text.trim();
    let Some((address, length)) = text.split_once('/') else {
        let address = IpAddr::from_str(text).map_err(|_| PrefixError::NotCidr)?;
        return Ok(IpNet::from(address));
    };
    let address = IpAddr::from_str(address).map_err(|_| PrefixError::NotCidr)?;
    let max = match address {
        IpAddr::V4(_) => 32,
        IpAddr::V6(_) => 128,
    };
    let too_long = || PrefixError::Length {
        length: length.to_owned(),
        max,
    };
    if length.is_empty() || !length.bytes().all(|b| b.is_ascii_digit()) {
        return Err(PrefixError::NotCidr);
    }
    let bits = length.parse::<u8>().map_err(|_| too_long())?;
    let net = IpNet::new(address, bits).map_err(|_| too_long())?;
    if net.trunc() != net {
        return Err(PrefixError::HostBits {
            network: net.trunc(),
        });
    }
    Ok(net)
}

/// A set of prefixes of both families.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Prefixes {
    v4: PrefixSet<Ipv4Net>,
    v6: PrefixSet<Ipv6Net>,
}

impl fmt::Debug for Prefixes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Prefixes")
            .field("v4", &self.v4.len())
            .field("v6", &self.v6.len())
            .finish()
    }
}

impl FromIterator<IpNet> for Prefixes {
    fn from_iter<T: IntoIterator<Item = IpNet>>(iter: T) -> Self {
        let mut prefixes = Self::default();
        for net in iter {
            match net.trunc() {
                IpNet::V4(v4) => prefixes.v4.insert(v4),
                IpNet::V6(v6) => prefixes.v6.insert(v6),
            };
        }
        prefixes
    }
}

impl Prefixes {
    /// The prefixes held.
    pub fn len(&self) -> usize {
        self.v4.len() + self.v6.len()
    }

    /// No prefix is held.
    pub fn is_empty(&self) -> bool {
        self.v4.is_empty() && self.v6.is_empty()
    }

    /// The longest prefix holding `address`, matched in its own family
    /// (the caller makes a v4-mapped address IPv4 first).
    pub fn longest_match(&self, address: IpAddr) -> Option<IpNet> {
        match address {
            IpAddr::V4(v4) => (!self.v4.is_empty())
                .then(|| self.v4.get_lpm(&Ipv4Net::from(v4)))
                .flatten()
                .map(IpNet::V4),
            IpAddr::V6(v6) => (!self.v6.is_empty())
                .then(|| self.v6.get_lpm(&Ipv6Net::from(v6)))
                .flatten()
                .map(IpNet::V6),
        }
    }

    /// The bytes the two tries hold, for the memory figures.
    pub fn mem_size(&self) -> usize {
        self.v4.mem_size() + self.v6.mem_size()
    }

    /// Every prefix, IPv4 first, each family in address order.
    pub fn iter(&self) -> impl Iterator<Item = IpNet> + '_ {
        (self.v4.iter().map(IpNet::V4)).chain(self.v6.iter().map(IpNet::V6))
    }
}

#[cfg(test)]
mod tests {
    use super::{PrefixError, Prefixes, parse_prefix};

    #[test]
    fn parses_both_families_and_bare_addresses() {
        let text = |p: Result<ipnet::IpNet, PrefixError>| p.map(|n| n.to_string());
        assert_eq!(text(parse_prefix("10.0.0.0/8")), Ok("10.0.0.0/8".into()));
        assert_eq!(
            text(parse_prefix(" 2001:db8::/32 ")),
            Ok("2001:db8::/32".into())
        );
        assert_eq!(text(parse_prefix("192.0.2.7")), Ok("192.0.2.7/32".into()));
        assert_eq!(text(parse_prefix("::1")), Ok("::1/128".into()));
        assert_eq!(text(parse_prefix("0.0.0.0/0")), Ok("0.0.0.0/0".into()));
    }

    #[test]
    fn refuses_what_is_not_a_prefix_with_what_to_change() {
        for bad in [
            "",
            "10.0.0",
            "example.com/8",
            "10.0.0.0/",
            "10.0.0.0/-1",
            "10.0.0.0/8/8",
        ] {
            assert_eq!(parse_prefix(bad), Err(PrefixError::NotCidr), "{bad}");
        }
        assert_eq!(
            parse_prefix("10.0.0.0/33"),
            Err(PrefixError::Length {
                length: "33".into(),
                max: 32
            })
        );
        assert_eq!(
            parse_prefix("::/999"),
            Err(PrefixError::Length {
                length: "999".into(),
                max: 128
            })
        );
        let Err(PrefixError::HostBits { network }) = parse_prefix("10.1.2.3/8") else {
            panic!("host bits are refused");
        };
        assert_eq!(network.to_string(), "10.0.0.0/8");
        let message = PrefixError::HostBits { network }.to_string();
        assert!(message.contains("10.0.0.0/8"), "{message}");
    }

    #[test]
    fn a_list_counts_and_lists_its_prefixes() {
        let list: Prefixes = ["10.0.0.0/8", "::1/128", "10.0.0.0/8"]
            .iter()
            .filter_map(|p| parse_prefix(p).ok())
            .collect();
        assert_eq!(list.len(), 2, "a duplicate is one prefix");
        let listed: Vec<String> = list.iter().map(|n| n.to_string()).collect();
        assert_eq!(listed, ["10.0.0.0/8", "::1/128"]);
        assert!(list.mem_size() > 0);
        assert!(
            Prefixes::default()
                .longest_match("10.0.0.1".parse().unwrap_or(std::net::IpAddr::from([0; 4])))
                .is_none()
        );
    }
}
