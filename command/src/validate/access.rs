//! The access settings of a listener or a cluster (`allow`, `deny`,
//! `connection_rate_per_ip`, `ipv6_prefix`): checked, resolved, and
//! written back in the canonical form the state stores.
//!
//! Owns: [`resolve_access`] with its codes and suggestions (E120 a prefix
//! that is not one, with the network meant when host bits are set; E121
//! a rate that is not one; E122 an `ipv6_prefix` past 128), and
//! [`AccessSettings::canonical`]. Parsing a prefix and the bucket's rules
//! are `preread_core::access`'s, called here, never copied. Must never:
//! look at the state.

use std::time::Duration;

use ipnet::IpNet;
use preread_core::access::{DEFAULT_IPV6_PREFIX, PrefixError, Rate, RateError, parse_prefix};
use preread_parser::tls::Ja4;

use crate::codes::ErrorCode;
use crate::duration;
use crate::proto;
use crate::validation_error::ValidationError;

/// Who may connect to a listener or use a cluster, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessSettings {
    /// When not empty, only these sources are admitted.
    pub allow: Vec<IpNet>,
    /// Sources refused, whatever `allow` says.
    pub deny: Vec<IpNet>,
    /// New connections per source, for the whole process.
    pub connection_rate_per_ip: Option<Rate>,
    /// The prefix length an IPv6 source is counted under.
    pub ipv6_prefix: u8,
    /// JA4 fingerprints refused, sorted, without duplicates.
    pub deny_ja4: Vec<Ja4>,
}

impl Default for AccessSettings {
    fn default() -> Self {
        Self {
            allow: Vec::new(),
            deny: Vec::new(),
            connection_rate_per_ip: None,
            ipv6_prefix: DEFAULT_IPV6_PREFIX,
            deny_ja4: Vec::new(),
        }
    }
}

/// The access fields of a request, as they came.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AccessFields<'a> {
    pub(crate) allow: &'a [String],
    pub(crate) deny: &'a [String],
    pub(crate) rate: Option<&'a proto::ConnectionRate>,
    pub(crate) ipv6_prefix: Option<u32>,
    pub(crate) deny_ja4: &'a [String],
}

impl<'a> AccessFields<'a> {
    pub(crate) fn of_listener(config: &'a proto::TcpListenerConfig) -> Self {
        Self {
            allow: &config.allow,
            deny: &config.deny,
            rate: config.connection_rate_per_ip.as_ref(),
            ipv6_prefix: config.ipv6_prefix,
            deny_ja4: &config.deny_ja4,
        }
    }

    pub(crate) fn of_cluster(cluster: &'a proto::Cluster) -> Self {
        Self {
            allow: &cluster.allow,
            deny: &cluster.deny,
            rate: cluster.connection_rate_per_ip.as_ref(),
            ipv6_prefix: cluster.ipv6_prefix,
            deny_ja4: &cluster.deny_ja4,
        }
    }
}

/// Every prefix of `list` (`allow` or `deny`), sorted, without duplicates.
fn prefixes(what: &str, key: &str, list: &[String]) -> Result<Vec<IpNet>, ValidationError> {
    let mut parsed = Vec::with_capacity(list.len());
    for text in list {
        let net = parse_prefix(text).map_err(|error| {
            let fix = match &error {
                PrefixError::NotCidr => {
                    "write an address or an address/length prefix, such as 10.0.0.0/8, \
                     2001:db8::/32 or 192.0.2.7"
                        .to_owned()
                }
                PrefixError::Length { max, .. } => {
                    format!("use a length from 0 to {max}")
                }
                PrefixError::HostBits { network } => format!("write {network}"),
            };
            ValidationError::new(
                ErrorCode::InvalidAccessPrefix,
                format!("{what}: {key} entry `{text}`: {error}: {fix}"),
            )
        })?;
        parsed.push(net);
    }
    parsed.sort_unstable();
    parsed.dedup();
    Ok(parsed)
}

/// Every fingerprint of `deny_ja4`, sorted, without duplicates.
fn fingerprints(what: &str, list: &[String]) -> Result<Vec<Ja4>, ValidationError> {
    let mut parsed = Vec::with_capacity(list.len());
    for text in list {
        let ja4 = Ja4::parse(text).map_err(|error| {
            ValidationError::new(
                ErrorCode::InvalidJa4,
                format!(
                    "{what}: deny_ja4 entry `{text}`: {error}: copy the fingerprint whole from                      the access log's ja4= or from `preread inspect`, such as                      t13d1516h2_8daaf6152771_e5627efa2ab1"
                ),
            )
        })?;
        parsed.push(ja4);
    }
    parsed.sort_unstable();
    parsed.dedup();
    Ok(parsed)
}

fn rate(what: &str, rate: &proto::ConnectionRate) -> Result<Rate, ValidationError> {
    let per = Duration::from_millis(rate.per_ms);
    let burst = rate.burst.unwrap_or(rate.rate);
    Rate::new(rate.rate, per, burst).map_err(|error| {
        let fix = match error {
            RateError::ZeroRate => "set rate to the connections one source may open per `per`",
            RateError::ZeroPer => "set per to a duration such as \"1s\" or \"1m\"",
            RateError::ZeroBurst => {
                "set burst to the connections a source may open at once, or leave it unset for \
                 rate"
            }
            RateError::PerTooLong => "use a per of at most \"24h\" (scale rate with it)",
        };
        ValidationError::new(
            ErrorCode::InvalidConnectionRate,
            format!(
                "{what}: connection_rate_per_ip {{ rate = {}, per = \"{}\", burst = {burst} }}: \
                 {error}: {fix}",
                rate.rate,
                duration::shown(rate.per_ms)
            ),
        )
    })
}

/// The settings of `fields`, or the first refusal; `what` names the
/// listener or cluster in the message.
pub(crate) fn resolve_access(
    what: &str,
    fields: AccessFields<'_>,
) -> Result<AccessSettings, ValidationError> {
    let ipv6_prefix = match fields.ipv6_prefix {
        None => DEFAULT_IPV6_PREFIX,
        Some(bits) => u8::try_from(bits)
            .ok()
            .filter(|bits| *bits <= 128)
            .ok_or_else(|| {
                ValidationError::new(
                    ErrorCode::InvalidIpv6Prefix,
                    format!(
                        "{what}: ipv6_prefix {bits} is past 128: use a prefix length from 0 to \
                         128, or leave it unset for {DEFAULT_IPV6_PREFIX} (one IPv6 host \
                         commonly holds a /64)"
                    ),
                )
            })?,
    };
    Ok(AccessSettings {
        allow: prefixes(what, "allow", fields.allow)?,
        deny: prefixes(what, "deny", fields.deny)?,
        connection_rate_per_ip: fields.rate.map(|r| rate(what, r)).transpose()?,
        ipv6_prefix,
        deny_ja4: fingerprints(what, fields.deny_ja4)?,
    })
}

impl AccessSettings {
    /// The canonical request fields: prefixes in their network form,
    /// sorted; the rate's burst written out; `ipv6_prefix` unset at its
    /// default.
    #[must_use]
    pub fn canonical(
        &self,
    ) -> (
        Vec<String>,
        Vec<String>,
        Option<proto::ConnectionRate>,
        Option<u32>,
    ) {
        let text = |list: &[IpNet]| list.iter().map(IpNet::to_string).collect();
        (
            text(&self.allow),
            text(&self.deny),
            self.connection_rate_per_ip
                .map(|rate| proto::ConnectionRate {
                    rate: rate.rate(),
                    per_ms: u64::try_from(rate.per().as_millis()).unwrap_or(u64::MAX),
                    burst: Some(rate.burst()),
                }),
            (self.ipv6_prefix != DEFAULT_IPV6_PREFIX).then_some(u32::from(self.ipv6_prefix)),
        )
    }

    /// The listener config with these settings in canonical form.
    pub(crate) fn write_listener(&self, config: &mut proto::TcpListenerConfig) {
        let (allow, deny, rate, ipv6_prefix) = self.canonical();
        config.allow = allow;
        config.deny = deny;
        config.connection_rate_per_ip = rate;
        config.ipv6_prefix = ipv6_prefix;
        config.deny_ja4 = self.deny_ja4_text();
    }

    /// `deny_ja4` as the state stores it.
    fn deny_ja4_text(&self) -> Vec<String> {
        self.deny_ja4.iter().map(ToString::to_string).collect()
    }

    /// The cluster with these settings in canonical form.
    pub(crate) fn write_cluster(&self, cluster: &mut proto::Cluster) {
        let (allow, deny, rate, ipv6_prefix) = self.canonical();
        cluster.allow = allow;
        cluster.deny = deny;
        cluster.connection_rate_per_ip = rate;
        cluster.ipv6_prefix = ipv6_prefix;
        cluster.deny_ja4 = self.deny_ja4_text();
    }
}

#[cfg(test)]
mod tests {
    use super::{AccessFields, resolve_access};
    use crate::codes::ErrorCode;
    use crate::proto;

    fn fields<'a>(
        allow: &'a [String],
        deny: &'a [String],
        rate: Option<&'a proto::ConnectionRate>,
    ) -> AccessFields<'a> {
        AccessFields {
            allow,
            deny,
            rate,
            ipv6_prefix: None,
            deny_ja4: &[],
        }
    }

    fn strings(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn prefixes_are_canonical_sorted_and_unique() {
        let allow = strings(&["2001:db8::/32", "10.0.0.0/8", "10.0.0.0/8", "192.0.2.7"]);
        let resolved = resolve_access("listener x", fields(&allow, &[], None));
        let (allow, deny, rate, v6) = resolved.map(|a| a.canonical()).unwrap_or_default();
        assert_eq!(allow, ["10.0.0.0/8", "192.0.2.7/32", "2001:db8::/32"]);
        assert!(deny.is_empty() && rate.is_none() && v6.is_none());
    }

    #[test]
    fn a_bad_prefix_has_its_code_and_the_fix() {
        let cases = [
            ("10.1.2.3/8", "write 10.0.0.0/8"),
            ("10.0.0.0/33", "use a length from 0 to 32"),
            ("office", "such as 10.0.0.0/8"),
        ];
        for (bad, fix) in cases {
            let deny = strings(&[bad]);
            let error = resolve_access("cluster `a`", fields(&[], &deny, None)).err();
            let error = error.unwrap_or_else(|| panic!("{bad} accepted"));
            assert_eq!(error.code, ErrorCode::InvalidAccessPrefix);
            assert!(error.message.contains(fix), "{}", error.message);
            assert!(error.message.contains("deny entry"), "{}", error.message);
        }
    }

    #[test]
    fn a_rate_resolves_its_burst_and_refuses_zeroes() {
        let rate = proto::ConnectionRate {
            rate: 50,
            per_ms: 1000,
            burst: None,
        };
        let resolved = resolve_access("l", fields(&[], &[], Some(&rate)));
        let canonical = resolved.map(|a| a.canonical().2).ok().flatten();
        assert_eq!(canonical.and_then(|r| r.burst), Some(50));
        for bad in [
            proto::ConnectionRate { rate: 0, ..rate },
            proto::ConnectionRate { per_ms: 0, ..rate },
            proto::ConnectionRate {
                burst: Some(0),
                ..rate
            },
            proto::ConnectionRate {
                per_ms: 86_400_001,
                ..rate
            },
        ] {
            let error = resolve_access("l", fields(&[], &[], Some(&bad))).err();
            assert_eq!(
                error.map(|e| e.code),
                Some(ErrorCode::InvalidConnectionRate)
            );
        }
    }

    #[test]
    fn ipv6_prefix_is_at_most_128_and_unset_at_its_default() {
        let with = |bits| AccessFields {
            ipv6_prefix: Some(bits),
            ..fields(&[], &[], None)
        };
        assert_eq!(
            resolve_access("l", with(129)).err().map(|e| e.code),
            Some(ErrorCode::InvalidIpv6Prefix)
        );
        let at = |bits| resolve_access("l", with(bits)).map(|a| a.canonical().3);
        assert_eq!(at(64), Ok(None));
        assert_eq!(at(48), Ok(Some(48)));
    }
}
