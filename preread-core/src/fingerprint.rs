//! The JA4 fingerprint of a connection's ClientHello, and the `deny_ja4`
//! lists that refuse one.
//!
//! Owns: [`DenyJa4`] (a listener's list and its clusters' lists, sorted,
//! searched by bisection), [`DenyRule`] (which rule refused: the access
//! log's `rule`), and [`HelloSpans`], where a parsed hello's cipher suites
//! and extensions lie in the window or the reassembly buffer, so that a
//! fingerprint wanted after the decision (the access log, `inspect`) needs
//! neither a second parse nor a copy. The fingerprint itself is the
//! parser's ([`preread_parser::tls::Ja4`]); [`ja4`] takes it through the
//! calling thread's [`Ja4Cache`], so a client seen again costs a
//! comparison of its key, not the sort and two SHA-256.
//!
//! The cache is one per thread: each worker thread owns its own, created
//! on its first fingerprint (its one allocation) with a random seed for
//! its slot hash, never shared, never locked. A thread-local rather than a
//! parameter because every caller of the core (the worker, the sim, the
//! fuzzers, `inspect`) would otherwise carry one for a result that does
//! not depend on it: a hit returns what [`Ja4::of`] returns
//! (`preread_parser`'s tests drive the cache itself: hit, miss, eviction,
//! shuffled extensions).
//!
//! Must never: fingerprint on the decision path unless a `deny_ja4` list
//! applies to the connection and holds an entry with the hello's `a`
//! section (what the parse gave tells most hellos apart: the
//! [`SectionHint`]; then the cache for a hello seen before; else the
//! parser's walk, no hash), or allocate there.

use std::cell::RefCell;
use std::hash::BuildHasher;
use std::ops::Range;

use hashbrown::HashMap;
use preread_parser::tls::{ClientHello, Ja4, Ja4Cache, Ja4Facts, Ja4Input, SectionHint, Transport};

use crate::routes::ClusterId;

thread_local! {
    static CACHE: RefCell<Ja4Cache> = RefCell::new({
        let random = std::hash::RandomState::new();
        Ja4Cache::new(random.hash_one(0u8), random.hash_one(1u8))
    });
}

/// The fingerprint of `hello` over `transport`, through this thread's
/// cache.
pub fn ja4<'a>(hello: impl Into<Ja4Input<'a>>, transport: Transport) -> Ja4 {
    ja4_of_facts(&Ja4Facts::of(hello, transport))
}

fn ja4_of_facts(facts: &Ja4Facts<'_>) -> Ja4 {
    CACHE.with(|cache| match cache.try_borrow_mut() {
        Ok(mut cache) => cache.ja4_of_facts(facts),
        Err(_) => Ja4::of_facts(facts),
    })
}

/// The fingerprint of the parsed `hello` when `wanted` accepts its `a`
/// section or this thread's cache knows the whole of it
/// ([`Ja4Cache::lookup_hello`]): a hello seen before costs the
/// comparison of its key, whichever.
fn ja4_where(
    hello: &ClientHello<'_>,
    transport: Transport,
    wanted: impl FnOnce(&[u8; 10]) -> bool,
) -> Option<Ja4> {
    CACHE.with(|cache| match cache.try_borrow_mut() {
        Ok(mut cache) => cache.lookup_hello(hello, transport, wanted).0,
        Err(_) => {
            let facts = Ja4Facts::of_hello(hello, transport);
            wanted(&facts.section_a()).then(|| Ja4::of_facts(&facts))
        }
    })
}

/// The JA4 fingerprints a listener refuses, and those each of its
/// clusters refuses once a connection is routed to it. Empty by default.
#[derive(Debug, Clone, Default)]
pub struct DenyJa4 {
    listener: Box<[Ja4]>,
    clusters: HashMap<ClusterId, Box<[Ja4]>>,
    /// The `a` section of every entry of every list ([`section_key`]),
    /// sorted: a hello whose `a` is not here matches no list, and is not
    /// fingerprinted.
    sections: Box<[u128]>,
    /// The [`SectionHint`] of each of those sections, sorted: a hello
    /// whose hint is not here is let through before its `a` section is
    /// asked for.
    hints: Box<[SectionHint]>,
}

impl DenyJa4 {
    /// The listener's own list.
    pub fn new(listener: impl IntoIterator<Item = Ja4>) -> Self {
        let listener = sorted(listener);
        let sections = sections(&listener, []);
        Self {
            hints: hints(&sections),
            sections,
            listener,
            clusters: HashMap::new(),
        }
    }

    /// Adds `cluster`'s list (an empty one is not kept).
    pub fn with_cluster(mut self, cluster: ClusterId, list: impl IntoIterator<Item = Ja4>) -> Self {
        let list = sorted(list);
        if !list.is_empty() {
            self.sections = sections(&list, self.sections.iter().copied());
            self.hints = hints(&self.sections);
            self.clusters.insert(cluster, list);
        }
        self
    }

    /// The rule that refuses the parsed `hello` (over `transport`) on a
    /// connection routed to `cluster`, if a list holds its fingerprint.
    /// Cheapest first: no list for the cluster; no entry with the hello's
    /// [`SectionHint`]; the thread's cache, which knows a hello seen
    /// before (or only its `a` section, when no entry had that); only a
    /// new hello whose `a` section an entry has is hashed.
    pub(crate) fn refuses(
        &self,
        hello: &ClientHello<'_>,
        transport: Transport,
        cluster: &ClusterId,
    ) -> Option<DenyRule> {
        if !self.applies_to(cluster) {
            return None;
        }
        let hint = SectionHint::of_hello(hello, transport);
        if hint.is_some_and(|hint| !self.may_hint(hint)) {
            return None;
        }
        let ja4 = ja4_where(hello, transport, |section_a| self.may_hold(section_a))?;
        self.denies(cluster, &ja4)
    }

    /// Whether a hello whose `a` section has `hint` may be on a list;
    /// when not, neither its `a` section nor its fingerprint is needed.
    fn may_hint(&self, hint: SectionHint) -> bool {
        // A short list is scanned: most lists have a handful of hints,
        // and a bisection's set-up costs more than the scan.
        match self.hints.len() {
            0..=8 => self.hints.contains(&hint),
            _ => self.hints.binary_search(&hint).is_ok(),
        }
    }

    /// Whether a hello whose `a` section is `section_a` may be on a list;
    /// when not, its fingerprint need not be computed.
    fn may_hold(&self, section_a: &[u8; 10]) -> bool {
        self.sections.binary_search(&section_key(section_a)).is_ok()
    }

    /// No list at all: nothing is ever fingerprinted to decide.
    pub fn is_empty(&self) -> bool {
        self.listener.is_empty() && self.clusters.is_empty()
    }

    /// A list applies to a connection routed to `cluster`.
    fn applies_to(&self, cluster: &ClusterId) -> bool {
        !self.listener.is_empty() || self.clusters.contains_key(cluster)
    }

    /// The rule that refuses `ja4` on a connection routed to `cluster`:
    /// the listener's list, else the cluster's.
    fn denies(&self, cluster: &ClusterId, ja4: &Ja4) -> Option<DenyRule> {
        if self.listener.binary_search(ja4).is_ok() {
            return Some(DenyRule::ListenerDenyJa4);
        }
        if self.clusters.is_empty() {
            return None;
        }
        let list = self.clusters.get(cluster)?;
        list.binary_search(ja4)
            .is_ok()
            .then_some(DenyRule::ClusterDenyJa4)
    }
}

/// An `a` section as one integer ordered as its bytes: compared inline,
/// where a 10-byte array is compared by a call to `memcmp`.
fn section_key(section_a: &[u8; 10]) -> u128 {
    let mut bytes = [0; 16];
    bytes[..10].copy_from_slice(section_a);
    u128::from_be_bytes(bytes)
}

/// The `a` sections of `list` and `more`, sorted, without duplicates.
fn sections(list: &[Ja4], more: impl IntoIterator<Item = u128>) -> Box<[u128]> {
    let mut all: Vec<u128> = list
        .iter()
        .map(|ja4| section_key(&ja4.section_a()))
        .chain(more)
        .collect();
    all.sort_unstable();
    all.dedup();
    all.into()
}

/// The hints of `sections` (as [`section_key`] made them), sorted,
/// without duplicates.
fn hints(sections: &[u128]) -> Box<[SectionHint]> {
    let mut all: Vec<SectionHint> = sections
        .iter()
        .map(|&key| {
            let mut a = [0; 10];
            a.copy_from_slice(&key.to_be_bytes()[..10]);
            SectionHint::of_section(&a)
        })
        .collect();
    all.sort_unstable();
    all.dedup();
    all.into()
}

fn sorted(list: impl IntoIterator<Item = Ja4>) -> Box<[Ja4]> {
    let mut list: Vec<Ja4> = list.into_iter().collect();
    list.sort_unstable();
    list.dedup();
    list.into_boxed_slice()
}

/// The access rule that refused a connection the core decided on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum DenyRule {
    /// The listener's `deny_ja4` holds the fingerprint.
    ListenerDenyJa4,
    /// The routed cluster's `deny_ja4` holds the fingerprint.
    ClusterDenyJa4,
}

impl DenyRule {
    /// The rule's name: the access log's `rule`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ListenerDenyJa4 => "listener_deny_ja4",
            Self::ClusterDenyJa4 => "cluster_deny_ja4",
        }
    }
}

/// Where a parsed hello's fingerprinted fields lie: offsets into the TLS
/// bytes of the window (past a PROXY header) or, for a hello spread over
/// records, into the core's reassembly buffer. 16 bytes: every session
/// holds one (both lists are u16-length vectors; a window past 4 GiB
/// has no spans).
#[derive(Debug, Clone, Copy)]
pub(crate) struct HelloSpans {
    cipher_suites_at: u32,
    extensions_at: u32,
    cipher_suites_len: u16,
    extensions_len: u16,
    legacy_version: u16,
    in_scratch: bool,
}

/// A parsed hello's fingerprinted fields as addresses, taken while the
/// hello still borrows the reassembly buffer; [`HelloSpans::locate`] turns
/// them into offsets once it no longer does.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Cut {
    legacy_version: u16,
    in_scratch: bool,
    cipher_suites: (usize, usize),
    extensions: (usize, usize),
}

impl Cut {
    pub(crate) fn of(hello: &ClientHello<'_>) -> Self {
        let at = |slice: &[u8]| (slice.as_ptr().addr(), slice.len());
        Self {
            legacy_version: hello.legacy_version,
            in_scratch: hello.records > 1,
            cipher_suites: at(hello.cipher_suites),
            extensions: at(hello.extensions),
        }
    }
}

/// Where a slice at `(address, len)` lies in `outer`, if it does.
fn span(outer: &[u8], (address, len): (usize, usize)) -> Option<(u32, u16)> {
    let start = address.checked_sub(outer.as_ptr().addr())?;
    let end = start.checked_add(len)?;
    if end > outer.len() {
        return None;
    }
    Some((u32::try_from(start).ok()?, u16::try_from(len).ok()?))
}

fn range((at, len): (u32, u16)) -> Range<usize> {
    let at = at as usize;
    at..at + usize::from(len)
}

impl HelloSpans {
    /// The spans of a hello cut from `tls` (one record) or from `scratch`
    /// (several). `None` only if a slice is not where the parser cut it.
    pub(crate) fn locate(cut: Cut, tls: &[u8], scratch: &[u8]) -> Option<Self> {
        let from = if cut.in_scratch { scratch } else { tls };
        let (cipher_suites_at, cipher_suites_len) = span(from, cut.cipher_suites)?;
        let (extensions_at, extensions_len) = span(from, cut.extensions)?;
        Some(Self {
            cipher_suites_at,
            extensions_at,
            cipher_suites_len,
            extensions_len,
            legacy_version: cut.legacy_version,
            in_scratch: cut.in_scratch,
        })
    }

    /// The fields again, from the same TLS bytes (the window only grows)
    /// and reassembly buffer.
    pub(crate) fn input<'w>(&self, tls: &'w [u8], scratch: &'w [u8]) -> Option<Ja4Input<'w>> {
        let from = if self.in_scratch { scratch } else { tls };
        Some(Ja4Input {
            legacy_version: self.legacy_version,
            cipher_suites: from.get(range((self.cipher_suites_at, self.cipher_suites_len)))?,
            extensions: from.get(range((self.extensions_at, self.extensions_len)))?,
        })
    }
}
