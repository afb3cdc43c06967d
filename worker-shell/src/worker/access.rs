//! Who may connect, in the worker: a listener's or a cluster's access
//! settings made ready for the data path, and the one check a source
//! passes at accept (a listener), once its PROXY header is in (a listener
//! behind `expect_proxy`), or once routed (a cluster).
//!
//! Owns: [`AccessPolicy`] (the prefix tries, built once per change, and
//! the rate), [`check`] (the lists, then the rate, whose bucket is the
//! process's), and the rule a refusal is logged with ([`Refused::rule`]).
//! The verdicts themselves are `preread_core::access`'s. Must never: read
//! from the client, lock anything but one shard of the rate table, or
//! cost a listener or cluster without access settings more than one
//! `Option` check.

use std::hash::Hash;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;

use command::change::AccessSettings;
use preread_core::access::{AccessLists, Denied, Prefixes, Rate, source_key};

use crate::shared::rates::SharedRates;
use crate::vocabulary::RefuseReason;

/// A listener's or a cluster's access settings, ready to check.
#[derive(Debug)]
pub struct AccessPolicy {
    lists: AccessLists,
    rate: Option<Rate>,
    ipv6_prefix: u8,
}

impl AccessPolicy {
    /// The policy of `settings`; `None` when it admits everyone, so the
    /// data path skips the check.
    pub fn of(settings: &AccessSettings) -> Option<Arc<Self>> {
        let lists = AccessLists::new(
            settings.allow.iter().copied().collect::<Prefixes>(),
            settings.deny.iter().copied().collect::<Prefixes>(),
        );
        if lists.is_empty() && settings.connection_rate_per_ip.is_none() {
            return None;
        }
        Some(Arc::new(Self {
            lists,
            rate: settings.connection_rate_per_ip,
            ipv6_prefix: settings.ipv6_prefix,
        }))
    }
}

/// Where the policy that refused belongs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    Listener,
    Cluster,
}

preread_core::stable_names! {
    /// The rule that refused a connection: the access log's `rule`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub enum AccessRule {
        /// The listener's `deny` holds the source.
        ListenerDeny => "listener_deny",
        /// The listener's `allow` is set and does not hold the source.
        ListenerAllow => "listener_allow",
        /// The source's bucket of the listener's `connection_rate_per_ip`
        /// is empty.
        ListenerRate => "listener_rate",
        /// The cluster's `deny` holds the source.
        ClusterDeny => "cluster_deny",
        /// The cluster's `allow` is set and does not hold the source.
        ClusterAllow => "cluster_allow",
        /// The source's bucket of the cluster's `connection_rate_per_ip`
        /// is empty.
        ClusterRate => "cluster_rate",
    }
    /// Every rule.
    pub const ALL;
}

/// A refusal by an access policy: its reason and the rule the access log
/// names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refused {
    pub reason: RefuseReason,
    pub rule: AccessRule,
}

impl Refused {
    fn new(scope: Scope, why: Result<Denied, ()>) -> Self {
        let (reason, rule) = match (scope, why) {
            (Scope::Listener, Ok(Denied::Deny(_))) => {
                (RefuseReason::AccessDenied, AccessRule::ListenerDeny)
            }
            (Scope::Listener, Ok(Denied::NotAllowed)) => {
                (RefuseReason::AccessDenied, AccessRule::ListenerAllow)
            }
            (Scope::Listener, Err(())) => (RefuseReason::RateLimited, AccessRule::ListenerRate),
            (Scope::Cluster, Ok(Denied::Deny(_))) => {
                (RefuseReason::AccessDenied, AccessRule::ClusterDeny)
            }
            (Scope::Cluster, Ok(Denied::NotAllowed)) => {
                (RefuseReason::AccessDenied, AccessRule::ClusterAllow)
            }
            (Scope::Cluster, Err(())) => (RefuseReason::RateLimited, AccessRule::ClusterRate),
        };
        Self { reason, rule }
    }
}

/// Checks `source` (the TCP peer, or the PROXY header's client) against
/// `policy` at `now`: the lists first, then a token of the source's
/// bucket in `rates`, keyed by `key` of the source as counted (IPv6 per
/// `ipv6_prefix`). A source the lists refuse takes no token.
pub fn check<K: Eq + Hash>(
    policy: &AccessPolicy,
    scope: Scope,
    source: IpAddr,
    (rates, key): (&SharedRates<K>, impl FnOnce(IpAddr) -> K),
    now: Instant,
) -> Result<(), Refused> {
    policy
        .lists
        .check(source)
        .map_err(|denied| Refused::new(scope, Ok(denied)))?;
    if let Some(rate) = &policy.rate {
        let counted = source_key(source, policy.ipv6_prefix);
        if !rates.take(key(counted), rate, now) {
            return Err(Refused::new(scope, Err(())));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;
    use std::time::{Duration, Instant};

    use command::change::AccessSettings;
    use preread_core::access::{Rate, parse_prefix};

    use super::{AccessPolicy, Scope, check};
    use crate::shared::rates::SharedRates;
    use crate::vocabulary::RefuseReason;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap_or(IpAddr::from([0, 0, 0, 0]))
    }

    fn settings(allow: &[&str], deny: &[&str], rate: Option<Rate>) -> AccessSettings {
        let prefixes = |list: &[&str]| list.iter().filter_map(|p| parse_prefix(p).ok()).collect();
        AccessSettings {
            allow: prefixes(allow),
            deny: prefixes(deny),
            connection_rate_per_ip: rate,
            ..AccessSettings::default()
        }
    }

    #[test]
    fn no_settings_no_policy() {
        assert!(AccessPolicy::of(&AccessSettings::default()).is_none());
    }

    #[test]
    fn each_refusal_names_its_rule() {
        let rate = Rate::new(1, Duration::from_secs(60), 1).ok();
        let policy = AccessPolicy::of(&settings(&["10.0.0.0/8"], &["10.9.0.0/16"], rate));
        let Some(policy) = policy else {
            panic!("a policy")
        };
        let rates = SharedRates::new();
        let now = Instant::now();
        let run = |scope, source| check(&policy, scope, ip(source), (&*rates, |s| s), now);
        let rule = |scope, source| {
            run(scope, source)
                .err()
                .map(|r| (r.reason, r.rule.as_str()))
        };
        assert_eq!(
            rule(Scope::Listener, "10.9.0.1"),
            Some((RefuseReason::AccessDenied, "listener_deny"))
        );
        assert_eq!(
            rule(Scope::Cluster, "192.0.2.1"),
            Some((RefuseReason::AccessDenied, "cluster_allow"))
        );
        assert_eq!(rule(Scope::Cluster, "10.0.0.1"), None);
        assert_eq!(
            rule(Scope::Cluster, "10.0.0.1"),
            Some((RefuseReason::RateLimited, "cluster_rate"))
        );
        assert_eq!(rule(Scope::Listener, "::ffff:10.0.0.2"), None, "v4-mapped");
        assert_eq!(
            rule(Scope::Listener, "10.0.0.2"),
            Some((RefuseReason::RateLimited, "listener_rate")),
            "the mapped address counted as its IPv4 one"
        );
    }

    #[test]
    fn ipv6_sources_share_their_64s_bucket() {
        let rate = Rate::new(1, Duration::from_secs(60), 1).ok();
        let Some(policy) = AccessPolicy::of(&settings(&[], &[], rate)) else {
            panic!("a policy")
        };
        let rates = SharedRates::new();
        let now = Instant::now();
        let run = |source| check(&policy, Scope::Listener, ip(source), (&*rates, |s| s), now);
        assert!(run("2001:db8:1:2::1").is_ok());
        assert!(run("2001:db8:1:2:ffff::9").is_err(), "same /64");
        assert!(run("2001:db8:1:3::1").is_ok(), "another /64");
    }
}
