//! The per-listener route table: `(SNI pattern, ALPN set)` → cluster.
//!
//! Owns: [`RouteTable`], [`Lookup`] (the ALPN sets are module `alpn_set`'s) and the conflict rules
//! between frontends of one listener. Must never: allocate or take time
//! proportional to the number of routes in [`RouteTable::lookup`] (it runs
//! on every connection), perform I/O, or panic on a name or offer the wire
//! controls.
//!
//! Storage is three sets of entries (module `entries`) found by the
//! normalized name: exact names, `*.` suffixes and `**.` suffixes. A lookup
//! costs one hash probe per label of the client's name, plus one. Each set
//! is cut into shards behind `Arc`s, so a clone is a snapshot that shares
//! them and a change copies only the shard it touches: the command server
//! builds a listener's table once and every worker routes on that one copy.

mod alpn_set;
mod entries;

use core::fmt;
use std::sync::Arc;

use crate::pattern::SniPattern;
use entries::Entries;

pub use alpn_set::{AlpnError, AlpnSet, MAX_PROTOCOL_LEN, ProtocolList};

/// The name of a backend cluster; cheap to clone into every session.
pub type ClusterId = Arc<str>;

/// Why [`RouteTable::insert`] refused a frontend. The table is unchanged.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RouteConflict {
    /// The same `(pattern, alpn)` already routes to another cluster.
    ClusterMismatch {
        /// The frontend's SNI pattern.
        pattern: SniPattern,
        /// The frontend's ALPN set.
        alpn: AlpnSet,
        /// The cluster the table already routes it to.
        existing: ClusterId,
        /// The cluster the refused insert asked for.
        requested: ClusterId,
    },
    /// Another frontend of the same pattern already lists this protocol.
    ProtocolTaken {
        /// The SNI pattern both frontends share.
        pattern: SniPattern,
        /// The protocol both lists name.
        protocol: Box<[u8]>,
        /// The ALPN set of the frontend already in the table.
        listed_by: AlpnSet,
        /// The cluster that frontend routes to.
        existing: ClusterId,
    },
}

impl fmt::Display for RouteConflict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ClusterMismatch {
                pattern,
                alpn: AlpnSet::Any,
                existing,
                requested,
            } => write!(
                f,
                "a frontend for `{pattern}` without ALPN already routes to cluster `{existing}`, \
                 so another one cannot route to `{requested}`: remove the existing frontend \
                 first, or give one of them an ALPN list"
            ),
            Self::ClusterMismatch {
                pattern,
                alpn,
                existing,
                requested,
            } => write!(
                f,
                "the frontend for `{pattern}` with ALPN {alpn} already routes to cluster \
                 `{existing}`, so it cannot also route to `{requested}`: remove it first"
            ),
            Self::ProtocolTaken {
                pattern,
                protocol,
                listed_by,
                existing,
            } => write!(
                f,
                "the ALPN protocol `{}` is already listed by the frontend for `{pattern}` with \
                 ALPN {listed_by} (cluster `{existing}`): two frontends of one address and SNI \
                 may not list the same protocol, remove it from one of them",
                protocol.escape_ascii()
            ),
        }
    }
}

impl core::error::Error for RouteConflict {}

/// The outcome of [`RouteTable::lookup`], borrowing from the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum Lookup<'t> {
    /// Route to `cluster`. `protocol` is the ALPN protocol that chose it, or
    /// `None` when the frontend without ALPN did.
    Matched {
        /// Where the connection goes.
        cluster: &'t ClusterId,
        /// The most specific pattern that matched the name.
        pattern: &'t SniPattern,
        /// The offered protocol that chose the frontend.
        protocol: Option<&'t [u8]>,
    },
    /// No pattern matches the name.
    SniUnmatched,
    /// `pattern` is the most specific match, but none of its frontends
    /// accepts the offer.
    AlpnUnmatched {
        /// The most specific pattern that matched the name.
        pattern: &'t SniPattern,
    },
}

/// One frontend that lists protocols.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Listed {
    protocols: ProtocolList,
    cluster: ClusterId,
}

/// Every frontend of one pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    pattern: SniPattern,
    any: Option<ClusterId>,
    /// Sorted by protocol list and pairwise disjoint, so the order depends
    /// only on the contents and tables compare equal however they were built.
    /// A boxed slice, not a `Vec`: most names list no ALPN, and every entry
    /// of every table pays for the spare capacity word.
    listed: Box<[Listed]>,
}

impl Entry {
    fn new(pattern: SniPattern) -> Self {
        Self {
            pattern,
            any: None,
            listed: Box::default(),
        }
    }

    fn is_empty(&self) -> bool {
        self.any.is_none() && self.listed.is_empty()
    }

    /// The cluster of the frontend `alpn` of this pattern, if there is one.
    fn cluster_of(&self, alpn: &AlpnSet) -> Option<&ClusterId> {
        match alpn {
            AlpnSet::Any => self.any.as_ref(),
            AlpnSet::Protocols(protocols) => self
                .listed
                .iter()
                .find(|l| l.protocols == *protocols)
                .map(|l| &l.cluster),
        }
    }

    /// Whether the frontend `(alpn, cluster)` may join: `Ok(true)` when it
    /// is new, `Ok(false)` when it is already there. Changes nothing, so a
    /// shared table is not copied for a refusal or a repeat.
    fn admits(&self, alpn: &AlpnSet, cluster: &ClusterId) -> Result<bool, RouteConflict> {
        if let Some(existing) = self.cluster_of(alpn) {
            return if existing == cluster {
                Ok(false)
            } else {
                Err(RouteConflict::ClusterMismatch {
                    pattern: self.pattern.clone(),
                    existing: existing.clone(),
                    alpn: alpn.clone(),
                    requested: cluster.clone(),
                })
            };
        }
        if let AlpnSet::Protocols(protocols) = alpn {
            for other in &self.listed {
                if let Some(taken) = protocols.iter().find(|p| other.protocols.find(p).is_some()) {
                    return Err(RouteConflict::ProtocolTaken {
                        pattern: self.pattern.clone(),
                        protocol: taken.into(),
                        listed_by: AlpnSet::Protocols(other.protocols.clone()),
                        existing: other.cluster.clone(),
                    });
                }
            }
        }
        Ok(true)
    }

    /// Adds a frontend that [`admits`](Self::admits) found new.
    fn add(&mut self, alpn: AlpnSet, cluster: ClusterId) {
        match alpn {
            AlpnSet::Any => self.any = Some(cluster),
            AlpnSet::Protocols(protocols) => {
                let at = self.listed.partition_point(|l| l.protocols < protocols);
                let mut listed = core::mem::take(&mut self.listed).into_vec();
                listed.insert(at, Listed { protocols, cluster });
                self.listed = listed.into_boxed_slice();
            }
        }
    }

    /// Drops the frontend `alpn`, if there is one.
    fn remove(&mut self, alpn: &AlpnSet) {
        match alpn {
            AlpnSet::Any => self.any = None,
            AlpnSet::Protocols(protocols) => {
                let mut listed = core::mem::take(&mut self.listed).into_vec();
                listed.retain(|l| l.protocols != *protocols);
                self.listed = listed.into_boxed_slice();
            }
        }
    }

    /// Walks the offer in the client's preference order; the frontend
    /// without ALPN is only the fallback.
    fn resolve<'t, 'o>(&'t self, offer: impl IntoIterator<Item = &'o [u8]>) -> Lookup<'t> {
        for offered in offer {
            for listed in &self.listed {
                if let Some(protocol) = listed.protocols.find(offered) {
                    return Lookup::Matched {
                        cluster: &listed.cluster,
                        pattern: &self.pattern,
                        protocol: Some(protocol),
                    };
                }
            }
        }
        match &self.any {
            Some(cluster) => Lookup::Matched {
                cluster,
                pattern: &self.pattern,
                protocol: None,
            },
            None => Lookup::AlpnUnmatched {
                pattern: &self.pattern,
            },
        }
    }
}

/// Splits `a.b.c` into `a` and `b.c`; `None` without a dot.
fn split_first_label(name: &[u8]) -> Option<(&[u8], &[u8])> {
    let mut parts = name.splitn(2, |&b| b == b'.');
    Some((parts.next()?, parts.next()?))
}

/// The routes of one listener. Build it with [`RouteTable::insert`] as
/// frontends are added, search it with [`RouteTable::lookup`] once per
/// connection.
///
/// `clone` is a snapshot: it shares the storage (a reference count for
/// each of the three kinds of pattern) instead of copying it, and a later
/// insert or remove on either copies only the shard of about 256 entries
/// it changes, and the list of shards (a pointer each). A snapshot never
/// sees the changes made after it, so a reader holding one decides on one
/// consistent table without a lock.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RouteTable {
    exact: Entries,
    one_label: Entries,
    any_depth: Entries,
    /// The number of frontends, so `len` does not walk the maps.
    len: usize,
}

impl RouteTable {
    /// An empty table: every lookup is [`Lookup::SniUnmatched`].
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// The number of frontends, i.e. of `(pattern, alpn)` keys.
    #[must_use]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the table holds no frontend.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn map(&self, pattern: &SniPattern) -> &Entries {
        match pattern {
            SniPattern::Exact(_) => &self.exact,
            SniPattern::OneLabel(_) => &self.one_label,
            SniPattern::AnyDepth(_) => &self.any_depth,
        }
    }

    fn map_mut(&mut self, pattern: &SniPattern) -> &mut Entries {
        match pattern {
            SniPattern::Exact(_) => &mut self.exact,
            SniPattern::OneLabel(_) => &mut self.one_label,
            SniPattern::AnyDepth(_) => &mut self.any_depth,
        }
    }

    /// Adds a frontend. Call it when a frontend is added to the listener.
    ///
    /// Re-adding a frontend that is already there with the same cluster is
    /// `Ok` and changes nothing, so a controller may retry. Refused, leaving
    /// the table unchanged: the same `(pattern, alpn)` with another cluster
    /// (this covers two frontends without ALPN), and a protocol already
    /// listed by another frontend of the same pattern.
    pub fn insert(
        &mut self,
        pattern: SniPattern,
        alpn: AlpnSet,
        cluster: ClusterId,
    ) -> Result<(), RouteConflict> {
        let map = self.map_mut(&pattern);
        let name = pattern.name().as_bytes();
        match map.get(name) {
            Some(entry) => {
                if !entry.admits(&alpn, &cluster)? {
                    return Ok(());
                }
                let added = map.change(name, |entry| entry.add(alpn, cluster));
                debug_assert!(added.is_some(), "{pattern} found, then lost");
            }
            None => {
                let mut entry = Entry::new(pattern);
                entry.add(alpn, cluster);
                map.insert_new(entry);
            }
        }
        self.len += 1;
        Ok(())
    }

    /// Removes exactly the frontend `(pattern, alpn)` and returns its
    /// cluster, or `None` if there is no such frontend. Inserting and then
    /// removing a frontend leaves the table equal to what it was.
    pub fn remove(&mut self, pattern: &SniPattern, alpn: &AlpnSet) -> Option<ClusterId> {
        let map = self.map_mut(pattern);
        let name = pattern.name().as_bytes();
        let cluster = map.get(name)?.cluster_of(alpn)?.clone();
        let removed = map.change(name, |entry| entry.remove(alpn));
        debug_assert!(removed.is_some(), "{pattern} found, then lost");
        self.len -= 1;
        Some(cluster)
    }

    /// The cluster of every frontend, once per frontend (a cluster that
    /// several frontends route to comes as often). Call it to list what
    /// the table can route to (the metrics a listener has from the
    /// start); it walks every entry, so never per connection.
    pub fn clusters(&self) -> impl Iterator<Item = &ClusterId> {
        [&self.exact, &self.one_label, &self.any_depth]
            .into_iter()
            .flat_map(Entries::iter)
            .flat_map(|entry| {
                entry
                    .any
                    .iter()
                    .chain(entry.listed.iter().map(|listed| &listed.cluster))
            })
    }

    /// Whether `other` holds the very same storage as this table: it is a
    /// clone of this one (or this one of it), and neither changed since.
    /// Equal tables built apart compare `==` but not this.
    #[must_use]
    pub fn same_storage(&self, other: &Self) -> bool {
        self.len == other.len
            && self.exact.same_storage(&other.exact)
            && self.one_label.same_storage(&other.one_label)
            && self.any_depth.same_storage(&other.any_depth)
    }

    /// Routes a connection. Call it once per ClientHello with the name from
    /// [`HostName::as_bytes`](crate::sni::HostName::as_bytes) and the ALPN
    /// offer in the client's order (empty when the client sent none).
    ///
    /// The most specific pattern wins: the exact name, then `*.` on the name
    /// minus its first label, then `**.` on the longest suffix. ALPN is then
    /// resolved on that pattern's frontends only: when none accepts the
    /// offer the answer is [`Lookup::AlpnUnmatched`], never a less specific
    /// pattern, so adding a more specific frontend cannot silently send
    /// clients to a backend meant for another name.
    ///
    /// Wildcards match only non-empty labels, so a name with an empty label
    /// (`a..example.com`) does not reach `**.example.com` through it.
    ///
    /// Costs one hash probe per label of `sni` plus one, then compares each
    /// offered protocol with the matched pattern's listed ones; nothing
    /// depends on the number of routes, and nothing allocates.
    pub fn lookup<'t, 'o>(
        &'t self,
        sni: &[u8],
        offer: impl IntoIterator<Item = &'o [u8]>,
    ) -> Lookup<'t> {
        match self.find_entry(sni) {
            Some(entry) => entry.resolve(offer),
            None => Lookup::SniUnmatched,
        }
    }

    fn find_entry(&self, sni: &[u8]) -> Option<&Entry> {
        if let Some(entry) = self.exact.get(sni) {
            return Some(entry);
        }
        let (first, suffix) = split_first_label(sni)?;
        if first.is_empty() {
            return None;
        }
        if let Some(entry) = self.one_label.get(suffix) {
            return Some(entry);
        }
        // Walking from the left tries the longest suffix first.
        let mut suffix = suffix;
        loop {
            if let Some(entry) = self.any_depth.get(suffix) {
                return Some(entry);
            }
            let (label, rest) = split_first_label(suffix)?;
            if label.is_empty() {
                return None;
            }
            suffix = rest;
        }
    }

    /// Checks the table's internal consistency with `debug_assert!`; call it
    /// from tests and after mutations in debug builds.
    pub fn check_invariants(&self) {
        // The walk itself is the cost; release builds skip it entirely.
        if !cfg!(debug_assertions) {
            return;
        }
        let mut frontends = 0;
        for (map, kind) in [
            (&self.exact, "exact"),
            (&self.one_label, "one-label"),
            (&self.any_depth, "any-depth"),
        ] {
            map.check_invariants();
            for entry in map.iter() {
                let pattern = &entry.pattern;
                debug_assert!(!entry.is_empty(), "empty {kind} entry {pattern} kept");
                debug_assert!(
                    map.get(pattern.name().as_bytes())
                        .is_some_and(|found| core::ptr::eq(found, entry)),
                    "{pattern} not found by its name"
                );
                debug_assert!(
                    core::ptr::eq(self.map(pattern), map),
                    "{pattern} stored in the {kind} map"
                );
                debug_assert!(
                    entry
                        .listed
                        .windows(2)
                        .all(|pair| matches!(pair, [a, b] if a.protocols < b.protocols)),
                    "frontends of {pattern} not sorted"
                );
                for (i, listed) in entry.listed.iter().enumerate() {
                    let names = &listed.protocols.0;
                    debug_assert!(!names.is_empty(), "empty ALPN list for {pattern}");
                    debug_assert!(
                        names.windows(2).all(|pair| matches!(pair, [a, b] if a < b)),
                        "ALPN list for {pattern} not sorted and unique"
                    );
                    debug_assert!(
                        names
                            .iter()
                            .all(|n| (1..=MAX_PROTOCOL_LEN).contains(&n.len())),
                        "bad protocol length for {pattern}"
                    );
                    for other in entry.listed.iter().skip(i + 1) {
                        debug_assert!(
                            names.iter().all(|n| other.protocols.find(n).is_none()),
                            "a protocol listed twice for {pattern}"
                        );
                    }
                }
                frontends += entry.listed.len() + usize::from(entry.any.is_some());
            }
        }
        debug_assert_eq!(frontends, self.len, "frontend count out of date");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pattern::validate_sni_pattern;

    fn pattern(input: &str) -> SniPattern {
        match validate_sni_pattern(input) {
            Ok(p) => p,
            Err(e) => panic!("{input}: {e}"),
        }
    }

    fn alpn(names: &[&str]) -> AlpnSet {
        if names.is_empty() {
            return AlpnSet::Any;
        }
        match AlpnSet::protocols(names) {
            Ok(set) => set,
            Err(e) => panic!("{names:?}: {e}"),
        }
    }

    fn table(routes: &[(&str, &[&str], &str)]) -> RouteTable {
        let mut table = RouteTable::new();
        for &(sni, names, cluster) in routes {
            if let Err(e) = table.insert(pattern(sni), alpn(names), cluster.into()) {
                panic!("{sni} {names:?} → {cluster}: {e}");
            }
        }
        table.check_invariants();
        table
    }

    /// `(cluster, pattern, protocol)` of a match, `None` when unmatched.
    fn route(
        table: &RouteTable,
        sni: &str,
        offer: &[&str],
    ) -> Option<(String, String, Option<String>)> {
        match table.lookup(sni.as_bytes(), offer.iter().map(|p| p.as_bytes())) {
            Lookup::Matched {
                cluster,
                pattern,
                protocol,
            } => Some((
                cluster.to_string(),
                pattern.to_string(),
                protocol.map(|p| String::from_utf8_lossy(p).into_owned()),
            )),
            Lookup::SniUnmatched | Lookup::AlpnUnmatched { .. } => None,
        }
    }

    fn cluster(table: &RouteTable, sni: &str) -> Option<String> {
        route(table, sni, &[]).map(|(cluster, _, _)| cluster)
    }

    #[test]
    fn exact_beats_one_label_beats_any_depth() {
        let t = table(&[
            ("a.example.com", &[], "exact"),
            ("*.example.com", &[], "one"),
            ("**.example.com", &[], "any"),
        ]);
        assert_eq!(cluster(&t, "a.example.com").as_deref(), Some("exact"));
        assert_eq!(cluster(&t, "b.example.com").as_deref(), Some("one"));
        assert_eq!(cluster(&t, "a.b.example.com").as_deref(), Some("any"));
    }

    #[test]
    fn longer_any_depth_suffix_wins() {
        let t = table(&[
            ("**.example.com", &[], "short"),
            ("**.b.example.com", &[], "long"),
            ("*.example.com", &[], "one"),
        ]);
        assert_eq!(cluster(&t, "a.b.example.com").as_deref(), Some("long"));
        assert_eq!(cluster(&t, "x.y.a.b.example.com").as_deref(), Some("long"));
        assert_eq!(cluster(&t, "x.c.example.com").as_deref(), Some("short"));
        // `**.b.example.com` needs a label in front of `b`.
        assert_eq!(cluster(&t, "b.example.com").as_deref(), Some("one"));
    }

    #[test]
    fn one_label_wildcard_depth() {
        let t = table(&[("*.example.com", &[], "one")]);
        assert_eq!(cluster(&t, "a.example.com").as_deref(), Some("one"));
        assert_eq!(cluster(&t, "a.b.example.com"), None);
        assert_eq!(cluster(&t, "example.com"), None);
        assert_eq!(cluster(&t, ".example.com"), None);
        assert_eq!(cluster(&t, "aexample.com"), None);
    }

    #[test]
    fn any_depth_wildcard_depth() {
        let t = table(&[("**.example.com", &[], "any")]);
        assert_eq!(cluster(&t, "a.example.com").as_deref(), Some("any"));
        assert_eq!(cluster(&t, "a.b.example.com").as_deref(), Some("any"));
        assert_eq!(cluster(&t, "example.com"), None);
        assert_eq!(cluster(&t, ".example.com"), None);
        assert_eq!(cluster(&t, "a..example.com"), None);
        assert_eq!(cluster(&t, "xexample.com"), None);
    }

    #[test]
    fn one_label_and_any_depth_of_the_same_suffix() {
        let t = table(&[
            ("*.example.com", &[], "one"),
            ("**.example.com", &[], "any"),
        ]);
        assert_eq!(cluster(&t, "a.example.com").as_deref(), Some("one"));
        assert_eq!(cluster(&t, "a.b.example.com").as_deref(), Some("any"));
    }

    #[test]
    fn unmatched_names() {
        let t = table(&[("a.example.com", &[], "exact")]);
        assert_eq!(
            t.lookup(b"b.example.com", None::<&[u8]>),
            Lookup::SniUnmatched
        );
        assert_eq!(t.lookup(b"com", None::<&[u8]>), Lookup::SniUnmatched);
        assert_eq!(t.lookup(b"", None::<&[u8]>), Lookup::SniUnmatched);
        assert_eq!(
            RouteTable::new().lookup(b"a", None::<&[u8]>),
            Lookup::SniUnmatched
        );
    }

    #[test]
    fn client_preference_decides_alpn() {
        let t = table(&[
            ("a.example.com", &["h2"], "x"),
            ("a.example.com", &["http/1.1"], "y"),
        ]);
        assert_eq!(
            route(&t, "a.example.com", &["http/1.1", "h2"]),
            Some(("y".into(), "a.example.com".into(), Some("http/1.1".into())))
        );
        assert_eq!(
            route(&t, "a.example.com", &["h2", "http/1.1"]),
            Some(("x".into(), "a.example.com".into(), Some("h2".into())))
        );
        // Unknown protocols in the offer are skipped.
        assert_eq!(
            route(&t, "a.example.com", &["h3", "http/1.1"]).map(|r| r.0),
            Some("y".into())
        );
    }

    #[test]
    fn any_frontend_is_the_fallback() {
        let t = table(&[
            ("a.example.com", &["h2"], "x"),
            ("a.example.com", &[], "fallback"),
        ]);
        assert_eq!(
            route(&t, "a.example.com", &["h2"]).map(|r| r.0),
            Some("x".into())
        );
        assert_eq!(
            route(&t, "a.example.com", &["http/1.1"]),
            Some(("fallback".into(), "a.example.com".into(), None))
        );
        assert_eq!(
            route(&t, "a.example.com", &[]),
            Some(("fallback".into(), "a.example.com".into(), None))
        );
    }

    #[test]
    fn alpn_unmatched_does_not_fall_back_to_a_less_specific_pattern() {
        let t = table(&[
            ("a.example.com", &["h2"], "x"),
            ("*.example.com", &[], "wild"),
        ]);
        let exact = pattern("a.example.com");
        assert_eq!(
            t.lookup(b"a.example.com", [&b"http/1.1"[..]]),
            Lookup::AlpnUnmatched { pattern: &exact }
        );
        assert_eq!(
            t.lookup(b"a.example.com", None::<&[u8]>),
            Lookup::AlpnUnmatched { pattern: &exact }
        );
    }

    #[test]
    fn frontend_with_several_protocols() {
        let t = table(&[("a.example.com", &["http/1.1", "h2"], "x")]);
        assert_eq!(
            route(&t, "a.example.com", &["http/1.1"]).map(|r| r.2),
            Some(Some("http/1.1".into()))
        );
        assert_eq!(
            route(&t, "a.example.com", &["h2"]).map(|r| r.0),
            Some("x".into())
        );
        assert_eq!(route(&t, "a.example.com", &["h3"]), None);
    }

    #[test]
    fn reinserting_the_same_frontend_is_idempotent() {
        let mut t = table(&[
            ("a.example.com", &["h2", "http/1.1"], "x"),
            ("a.example.com", &[], "y"),
        ]);
        let before = t.clone();
        assert_eq!(
            t.insert(
                pattern("a.example.com"),
                alpn(&["http/1.1", "h2"]),
                "x".into()
            ),
            Ok(())
        );
        assert_eq!(
            t.insert(pattern("A.example.com."), alpn(&[]), "y".into()),
            Ok(())
        );
        assert_eq!(t, before);
        assert_eq!(t.len(), 2);
    }

    #[test]
    fn same_key_with_another_cluster_is_refused() {
        let mut t = table(&[("a.example.com", &["h2"], "x"), ("a.example.com", &[], "y")]);
        let before = t.clone();
        let e = t.insert(pattern("a.example.com"), alpn(&["h2"]), "z".into());
        assert!(
            matches!(&e, Err(RouteConflict::ClusterMismatch { existing, requested, .. })
                if &**existing == "x" && &**requested == "z"),
            "{e:?}"
        );
        let e = t.insert(pattern("a.example.com"), alpn(&[]), "z".into());
        assert!(
            matches!(&e, Err(RouteConflict::ClusterMismatch { alpn: AlpnSet::Any, existing, .. })
                if &**existing == "y"),
            "{e:?}"
        );
        assert_eq!(t, before);
    }

    #[test]
    fn protocol_listed_twice_is_refused() {
        let mut t = table(&[("a.example.com", &["h2", "http/1.1"], "x")]);
        let before = t.clone();
        for cluster in ["x", "y"] {
            let e = t.insert(pattern("a.example.com"), alpn(&["h2"]), cluster.into());
            assert!(
                matches!(&e, Err(RouteConflict::ProtocolTaken { protocol, existing, .. })
                    if &**protocol == b"h2" && &**existing == "x"),
                "{e:?}"
            );
        }
        let e = t.insert(
            pattern("a.example.com"),
            alpn(&["h3", "http/1.1"]),
            "y".into(),
        );
        assert!(
            matches!(e, Err(RouteConflict::ProtocolTaken { .. })),
            "{e:?}"
        );
        assert_eq!(t, before);
        // Other patterns, even of the same name, are independent.
        assert_eq!(
            t.insert(pattern("*.a.example.com"), alpn(&["h2"]), "y".into()),
            Ok(())
        );
        assert_eq!(
            t.insert(pattern("**.example.com"), alpn(&["h2"]), "y".into()),
            Ok(())
        );
    }

    #[test]
    fn clusters_lists_every_frontends_cluster() {
        let t = table(&[
            ("a.example.com", &["h2"], "x"),
            ("a.example.com", &[], "y"),
            ("*.example.com", &[], "x"),
            ("**.example.org", &["http/1.1", "h3"], "z"),
        ]);
        let mut clusters: Vec<&str> = t.clusters().map(|c| &**c).collect();
        clusters.sort_unstable();
        assert_eq!(clusters, ["x", "x", "y", "z"]);
        assert_eq!(RouteTable::new().clusters().count(), 0);
    }

    #[test]
    fn remove_is_the_inverse_of_insert() {
        let mut t = table(&[("a.example.com", &["h2"], "x")]);
        let before = t.clone();
        let p = pattern("a.example.com");
        let h = alpn(&["http/1.1"]);
        assert_eq!(t.insert(p.clone(), h.clone(), "y".into()), Ok(()));
        assert_eq!(t.insert(p.clone(), AlpnSet::Any, "z".into()), Ok(()));
        assert_eq!(t.len(), 3);
        assert!(!t.is_empty());
        assert_eq!(t.remove(&p, &h).as_deref(), Some("y"));
        assert_eq!(t.remove(&p, &AlpnSet::Any).as_deref(), Some("z"));
        assert_eq!(t.remove(&p, &AlpnSet::Any), None);
        t.check_invariants();
        assert_eq!(t, before);
        assert_eq!(t.remove(&p, &alpn(&["h2"])).as_deref(), Some("x"));
        assert!(t.is_empty());
        assert_eq!(t, RouteTable::new());
    }

    #[test]
    fn the_invariant_check_catches_a_stale_count() {
        let mut t = table(&[("a.example.com", &["h2"], "x")]);
        t.len += 1;
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            t.check_invariants();
        }));
        assert_eq!(
            caught.is_err(),
            cfg!(debug_assertions),
            "the check every table test relies on must fail on a broken table"
        );
    }

    /// `n` exact names `host-<i>.example.com` to cluster `c<i % 7>`.
    fn big(n: usize) -> RouteTable {
        let mut t = RouteTable::new();
        for i in 0..n {
            let name = format!("host-{i}.example.com");
            let cluster: ClusterId = format!("c{}", i % 7).into();
            assert_eq!(t.insert(pattern(&name), AlpnSet::Any, cluster), Ok(()));
        }
        t
    }

    #[test]
    fn a_clone_is_a_snapshot_that_shares_until_a_change() {
        let original = big(3_000);
        let mut changed = original.clone();
        assert!(changed.same_storage(&original));
        // A repeat, a refusal and the removal of a missing frontend change
        // nothing, so they copy nothing either.
        assert_eq!(
            changed.insert(pattern("host-1.example.com"), AlpnSet::Any, "c1".into()),
            Ok(())
        );
        assert!(
            changed
                .insert(pattern("host-1.example.com"), AlpnSet::Any, "other".into())
                .is_err()
        );
        assert_eq!(
            changed.remove(&pattern("host-1.example.com"), &alpn(&["h2"])),
            None
        );
        assert_eq!(
            changed.remove(&pattern("nowhere.example.com"), &AlpnSet::Any),
            None
        );
        assert!(changed.same_storage(&original));

        assert_eq!(
            changed.insert(pattern("new.example.com"), AlpnSet::Any, "n".into()),
            Ok(())
        );
        assert_eq!(
            changed
                .remove(&pattern("host-2.example.com"), &AlpnSet::Any)
                .as_deref(),
            Some("c2")
        );
        assert!(!changed.same_storage(&original));
        changed.check_invariants();
        original.check_invariants();
        // The snapshot routes as it did when it was taken.
        assert_eq!(cluster(&original, "new.example.com"), None);
        assert_eq!(
            cluster(&original, "host-2.example.com").as_deref(),
            Some("c2")
        );
        assert_eq!(cluster(&changed, "new.example.com").as_deref(), Some("n"));
        assert_eq!(cluster(&changed, "host-2.example.com"), None);
        assert_eq!((original.len(), changed.len()), (3_000, 3_000));
        // Both ways back give equal tables, not the same storage.
        assert_eq!(
            changed
                .remove(&pattern("new.example.com"), &AlpnSet::Any)
                .as_deref(),
            Some("n")
        );
        assert_eq!(
            changed.insert(pattern("host-2.example.com"), AlpnSet::Any, "c2".into()),
            Ok(())
        );
        assert_eq!(changed, original);
        assert!(!changed.same_storage(&original));
        assert!(!big(3_000).same_storage(&original));
    }

    #[test]
    fn a_table_grows_past_its_snapshots_and_shrinks_back_to_an_equal_one() {
        let small = big(300);
        let mut grown = small.clone();
        for i in 300..5_000 {
            let name = format!("host-{i}.example.com");
            assert_eq!(
                grown.insert(pattern(&name), AlpnSet::Any, "x".into()),
                Ok(())
            );
        }
        grown.check_invariants();
        small.check_invariants();
        assert_eq!(small.len(), 300);
        assert_eq!(cluster(&small, "host-4999.example.com"), None);
        assert_eq!(
            cluster(&grown, "host-4999.example.com").as_deref(),
            Some("x")
        );
        assert_eq!(
            cluster(&grown, "host-299.example.com").as_deref(),
            Some("c5")
        );
        for i in 300..5_000 {
            let name = format!("host-{i}.example.com");
            assert!(grown.remove(&pattern(&name), &AlpnSet::Any).is_some());
        }
        grown.check_invariants();
        assert_eq!(grown, small);
        assert_eq!(grown, big(300));
    }

    #[test]
    fn remove_needs_the_exact_key() {
        let mut t = table(&[("a.example.com", &["h2", "http/1.1"], "x")]);
        assert_eq!(t.remove(&pattern("a.example.com"), &alpn(&["h2"])), None);
        assert_eq!(
            t.remove(&pattern("*.example.com"), &alpn(&["h2", "http/1.1"])),
            None
        );
        assert_eq!(
            t.remove(&pattern("a.example.com"), &alpn(&["http/1.1", "h2"]))
                .as_deref(),
            Some("x")
        );
    }

    #[test]
    fn alpn_set_validation() {
        assert_eq!(
            AlpnSet::protocols(Vec::<&[u8]>::new()),
            Err(AlpnError::Empty)
        );
        assert_eq!(AlpnSet::protocols([""]), Err(AlpnError::EmptyProtocol));
        assert_eq!(
            AlpnSet::protocols([vec![b'a'; 256]]),
            Err(AlpnError::ProtocolTooLong { len: 256 })
        );
        assert!(AlpnSet::protocols([vec![b'a'; 255]]).is_ok());
        assert_eq!(
            AlpnSet::protocols(["h2", "x", "h2"]),
            Err(AlpnError::DuplicateProtocol {
                protocol: b"h2"[..].into()
            })
        );
        assert_eq!(alpn(&["h2", "http/1.1"]), alpn(&["http/1.1", "h2"]));
        assert_eq!(alpn(&["http/1.1", "h2"]).to_string(), "[h2, http/1.1]");
        assert_eq!(AlpnSet::Any.to_string(), "any");
        // What the operator reads when a frontend's ALPN list is refused.
        let messages = [
            (AlpnError::Empty, "remove it to match any offer"),
            (AlpnError::EmptyProtocol, "empty protocol name"),
            (
                AlpnError::ProtocolTooLong { len: 256 },
                "256 bytes long: the limit is 255",
            ),
            (
                AlpnError::DuplicateProtocol {
                    protocol: b"h2"[..].into(),
                },
                "names `h2` twice",
            ),
        ];
        for (error, expected) in messages {
            let message = error.to_string();
            assert!(message.contains(expected), "{message}");
        }
    }

    #[test]
    fn conflict_messages_say_what_to_change() {
        let mut t = table(&[("a.example.com", &["h2"], "x"), ("a.example.com", &[], "y")]);
        let e = t.insert(pattern("a.example.com"), alpn(&["h2"]), "z".into());
        let message = e.map_err(|e| e.to_string()).err().unwrap_or_default();
        assert!(message.contains("remove it first"), "{message}");
        let e = t.insert(pattern("a.example.com"), alpn(&[]), "z".into());
        let message = e.map_err(|e| e.to_string()).err().unwrap_or_default();
        assert!(message.contains("without ALPN"), "{message}");
        let e = t.insert(pattern("a.example.com"), alpn(&["h2", "h3"]), "z".into());
        let message = e.map_err(|e| e.to_string()).err().unwrap_or_default();
        assert!(
            message.contains("may not list the same protocol"),
            "{message}"
        );
    }
}
