//! Who may connect: address allow and deny lists, and the connection rate
//! per source, as pure policy the worker, the simulation and tests call.
//!
//! Owns: [`AccessLists`] (a listener's or a cluster's `allow` and `deny`
//! prefixes and the one verdict they give a source: deny wins over allow,
//! a non-empty allow admits only its sources), [`Prefixes`] and the
//! parsing of one CIDR ([`parse_prefix`], [`PrefixError`]), the source an
//! address counts as ([`source_key`]: a v4-mapped IPv6 address is its IPv4
//! address, an IPv6 address is its `ipv6_prefix` network), the token
//! bucket ([`Rate`], [`Bucket`]) and the bounded table of buckets per
//! source ([`RateTable`]).
//!
//! Must never: read a clock (`now` is an argument), take a lock (the
//! worker shards the table and locks a shard around one call), scan a
//! list (a check is one longest-prefix lookup per list), or grow a table
//! past its cap.

mod bucket;
mod prefixes;
mod rate_table;
mod source;

pub use bucket::{Bucket, Rate, RateError};
pub use prefixes::{PrefixError, Prefixes, parse_prefix};
pub use rate_table::RateTable;
pub use source::{DEFAULT_IPV6_PREFIX, source_key};

use std::net::IpAddr;

use ipnet::IpNet;

/// Which list refused a source.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Denied {
    /// The source is in `deny` (the matching prefix).
    Deny(IpNet),
    /// `allow` is set and the source is not in it.
    NotAllowed,
}

impl Denied {
    /// The list that refused: `deny` or `allow`.
    pub const fn list(self) -> &'static str {
        match self {
            Self::Deny(_) => "deny",
            Self::NotAllowed => "allow",
        }
    }
}

/// A listener's or a cluster's `allow` and `deny` lists.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AccessLists {
    allow: Prefixes,
    deny: Prefixes,
}

impl AccessLists {
    /// The lists of `allow` and `deny` prefixes.
    pub fn new(allow: Prefixes, deny: Prefixes) -> Self {
        Self { allow, deny }
    }

    /// Neither list has a prefix: every source is admitted, and the
    /// caller may skip the check.
    pub fn is_empty(&self) -> bool {
        self.allow.is_empty() && self.deny.is_empty()
    }

    /// The `allow` prefixes.
    pub fn allow(&self) -> &Prefixes {
        &self.allow
    }

    /// The `deny` prefixes.
    pub fn deny(&self) -> &Prefixes {
        &self.deny
    }

    /// The verdict for `source` (a v4-mapped IPv6 address is matched as
    /// IPv4): one lookup in `deny`, then, when `allow` is set, one in it.
    pub fn check(&self, source: IpAddr) -> Result<(), Denied> {
        let source = source.to_canonical();
        if let Some(prefix) = self.deny.longest_match(source) {
            return Err(Denied::Deny(prefix));
        }
        if !self.allow.is_empty() && self.allow.longest_match(source).is_none() {
            return Err(Denied::NotAllowed);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
