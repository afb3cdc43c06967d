use std::net::IpAddr;

use super::{AccessLists, Denied, Prefixes, parse_prefix};

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap_or(IpAddr::from([0, 0, 0, 0]))
}

fn prefixes(list: &[&str]) -> Prefixes {
    let parsed: Result<Vec<_>, _> = list.iter().map(|p| parse_prefix(p)).collect();
    Prefixes::from_iter(parsed.unwrap_or_default())
}

fn lists(allow: &[&str], deny: &[&str]) -> AccessLists {
    AccessLists::new(prefixes(allow), prefixes(deny))
}

#[test]
fn empty_lists_admit_everyone() {
    let open = lists(&[], &[]);
    assert!(open.is_empty());
    for source in ["10.0.0.1", "::1", "::ffff:1.2.3.4"] {
        assert_eq!(open.check(ip(source)), Ok(()));
    }
}

#[test]
fn a_non_empty_allow_admits_only_its_sources() {
    let office = lists(&["10.0.0.0/8", "2001:db8::/32"], &[]);
    assert_eq!(office.check(ip("10.1.2.3")), Ok(()));
    assert_eq!(office.check(ip("2001:db8:1::9")), Ok(()));
    assert_eq!(office.check(ip("11.0.0.1")), Err(Denied::NotAllowed));
    assert_eq!(office.check(ip("2001:db9::1")), Err(Denied::NotAllowed));
}

#[test]
fn deny_wins_over_allow_even_when_allow_is_more_specific() {
    let both = lists(&["10.9.1.0/24"], &["10.9.0.0/16"]);
    let refused = both.check(ip("10.9.1.5"));
    assert_eq!(refused.map_err(Denied::list), Err("deny"));
    assert_eq!(
        refused,
        Err(Denied::Deny(
            parse_prefix("10.9.0.0/16").unwrap_or_default()
        ))
    );
}

#[test]
fn a_deny_list_alone_admits_the_rest() {
    let blocklist = lists(&[], &["192.0.2.0/24", "2001:db8:bad::/48"]);
    assert!(blocklist.check(ip("192.0.2.200")).is_err());
    assert!(blocklist.check(ip("2001:db8:bad:1::1")).is_err());
    assert_eq!(blocklist.check(ip("192.0.3.1")), Ok(()));
    assert_eq!(blocklist.check(ip("2001:db8:bae::1")), Ok(()));
}

#[test]
fn a_v4_mapped_source_matches_as_ipv4() {
    let v4 = lists(&["127.0.0.0/8"], &["127.0.0.3/32"]);
    assert_eq!(v4.check(ip("::ffff:127.0.0.2")), Ok(()));
    assert!(v4.check(ip("::ffff:127.0.0.3")).is_err());
    assert_eq!(v4.check(ip("::1")), Err(Denied::NotAllowed));
}

#[test]
fn the_longest_prefix_is_reported() {
    let deny = lists(&[], &["10.0.0.0/8", "10.1.0.0/16", "10.1.2.0/24"]);
    assert_eq!(
        deny.check(ip("10.1.2.3")),
        Err(Denied::Deny(
            parse_prefix("10.1.2.0/24").unwrap_or_default()
        ))
    );
}
