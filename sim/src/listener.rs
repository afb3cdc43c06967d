//! The listener a scenario runs against: its routes, its preread settings
//! and the PROXY handoff of its clusters.
//!
//! Owns: the route pool (conflict-free in every subset), the name and ALPN
//! pools the generator draws client hellos from, [`Listener`] and
//! [`ProxyMode`]. The effective cap is computed with
//! `preread_core::window::effective_max_bytes`, the worker's own function.
//! Must never: hand the core a config the worker could not build (a
//! server-first timer without a default cluster, a relay cluster without
//! `expect_proxy`).

use std::sync::Arc;
use std::time::Duration;

use preread_core::pattern::validate_sni_pattern;
use preread_core::routes::{AlpnSet, RouteTable};
use preread_core::step::PrereadListener;
use preread_core::window::effective_max_bytes;
use preread_core::{DenyJa4, PrereadConfig};
use preread_parser::tls::Ja4;

use crate::rng::Rng;

/// One frontend: `(pattern, ALPN list, cluster)`, an empty list meaning any.
pub type RouteSpec = (&'static str, &'static [&'static str], &'static str);

/// The frontends a listener's table is drawn from. No subset conflicts.
/// The one copy is `testdata/route_pool.rs`, compiled in.
pub const ROUTES: &[RouteSpec] = crate::route_pool::POOL;

/// Indices into [`ROUTES`] of the `c.example.com` frontends: both list
/// protocols, none takes any offer, so an offer outside their lists is
/// `AlpnUnmatched` (the exact name wins over `**.example.com`).
pub const C_EXAMPLE: [usize; 2] = [3, 4];
/// Index of `*.example.org`, which lists protocols and has no fallback.
pub const STAR_ORG: usize = 10;

/// The listener's default cluster, when it has one.
pub const DEFAULT_CLUSTER: &str = "default";

/// Names that route with the right frontend present: `(raw host_name,
/// offer, index of the frontend that must take it)`. Each name's most
/// specific pattern in the whole pool is that frontend.
pub const ROUTED_NAMES: &[(&str, Option<&[&str]>, usize)] = &[
    ("a.example.com", None, 0),
    ("A.Example.COM.", Some(&["h2", "http/1.1"]), 0),
    ("www.b.example.com", Some(&["http/1.1"]), 1),
    ("deep.sub.example.com", None, 2),
    ("UPPER.example.com", Some(&["h2"]), 2),
    ("c.example.com", Some(&["h2", "http/1.1"]), 3),
    ("C.example.com.", Some(&["acme-tls/1"]), 4),
    ("d.example.com", Some(&["h2"]), 5),
    ("psk.example.com", None, 6),
    ("public.example.net", Some(&["h2"]), 7),
    ("x.y.b.example.com", Some(&["spdy/3.1", "h2"]), 8),
    ("localhost", None, 9),
    ("www.example.org", Some(&["http/1.1", "h2"]), 10),
    ("EXAMPLE.ORG.", None, 11),
];

/// Names no pattern of the pool matches, whatever the subset.
pub const UNMATCHED_NAMES: &[&str] = &[
    "example.com",
    "unrouted.test",
    "a.example.net",
    "x.y.example.org",
    "a..example.com",
    "host_name.invalid",
    "b.example.co",
    "com",
    "sub.localhost",
    "Unrouted.Test.",
];

/// Offers no frontend of the pool lists (`None`: no ALPN extension).
pub const FOREIGN_OFFERS: &[Option<&[&str]>] = &[
    None,
    Some(&["spdy/3.1"]),
    Some(&["http/1.0", "imap"]),
    Some(&["ftp"]),
];

/// Offers drawn for random hellos.
pub const OFFERS: &[Option<&[&str]>] = &[
    None,
    Some(&["h2"]),
    Some(&["http/1.1"]),
    Some(&["h2", "http/1.1"]),
    Some(&["http/1.1", "h2"]),
    Some(&["acme-tls/1"]),
    Some(&["spdy/3.1"]),
];

/// What a backend of the routed cluster receives before the window: the
/// step's own type (`proxy_protocol` of the cluster).
pub use preread_core::step::ProxyMode;

/// A listener as the worker holds it.
#[derive(Debug, Clone)]
pub struct Listener {
    /// Indices into [`ROUTES`] of its frontends.
    pub routes: Vec<usize>,
    /// `sni_preread_max_bytes` as configured.
    pub configured_max: usize,
    /// The preread timeout.
    pub timeout: Duration,
    /// Whether a PROXY header precedes the client's bytes.
    pub expect_proxy: bool,
    /// Whether the listener has a default cluster.
    pub default_cluster: bool,
    /// The server-first timer (only with a default cluster).
    pub server_first: Option<Duration>,
    /// The handoff of every cluster it routes to.
    pub mode: ProxyMode,
    /// Its `deny_ja4` list.
    pub deny_ja4: Vec<Ja4>,
}

impl Listener {
    /// A random listener; `expect_proxy` and `mode` are set by the caller
    /// once the stream is known.
    pub fn random(rng: &mut Rng) -> Self {
        let routes = (0..ROUTES.len()).filter(|_| rng.chance(70)).collect();
        let configured_max = match rng.below(20) {
            0..=2 => rng.range(0, 64),
            3..=5 => rng.range(65, 1024),
            6..=9 => rng.range(1025, 4096),
            10..=13 => 16_384,
            _ => rng.range(4097, 65_536),
        };
        let timeout = match rng.below(20) {
            0..=7 => Duration::from_secs(5),
            8..=16 => Duration::from_millis(rng.range_u64(100, 10_000)),
            _ => Duration::from_millis(rng.range_u64(1, 99)),
        };
        let default_cluster = rng.chance(35);
        let server_first = (default_cluster && rng.chance(50))
            .then(|| Duration::from_millis(rng.range_u64(1, 3_000)));
        Self {
            routes,
            configured_max,
            timeout,
            expect_proxy: false,
            default_cluster,
            server_first,
            mode: ProxyMode::None,
            deny_ja4: Vec::new(),
        }
    }

    /// Picks the handoff: `relay` only behind `expect_proxy` (E208).
    pub fn pick_mode(&mut self, rng: &mut Rng) {
        self.mode = match rng.below(3) {
            0 => ProxyMode::None,
            1 => ProxyMode::Send,
            _ if self.expect_proxy => ProxyMode::Relay,
            _ => ProxyMode::None,
        };
    }

    /// Adds frontend `index` unless present.
    pub fn force_route(&mut self, index: usize) {
        if !self.routes.contains(&index) {
            self.routes.push(index);
            self.routes.sort_unstable();
        }
    }

    /// Drops the default cluster (and the server-first timer with it).
    pub fn without_default(&mut self) {
        self.default_cluster = false;
        self.server_first = None;
    }

    /// The cap the shell enforces and hands to the core.
    pub fn effective_max(&self) -> usize {
        effective_max_bytes(self.configured_max)
    }

    /// Makes the cap at least `bytes`.
    pub fn ensure_cap(&mut self, bytes: usize) {
        self.configured_max = self.configured_max.max(bytes);
    }

    /// The listener as the worker's `ListenerRuntime` holds it: the
    /// configured cap lowered by the step's own rule.
    pub fn preread(&self) -> PrereadListener {
        let mut config = self.config();
        config.max_bytes = self.configured_max;
        PrereadListener::new(config, None)
    }

    /// The core's config, as `ListenerRuntime` builds it.
    pub fn config(&self) -> PrereadConfig {
        let mut table = RouteTable::new();
        for &i in &self.routes {
            let (pattern, alpn, cluster) = ROUTES[i];
            let pattern = validate_sni_pattern(pattern).expect("pool patterns are valid");
            let alpn = if alpn.is_empty() {
                AlpnSet::Any
            } else {
                AlpnSet::protocols(alpn.iter()).expect("pool ALPN lists are valid")
            };
            table
                .insert(pattern, alpn, Arc::from(cluster))
                .expect("the pool is conflict-free");
        }
        let mut config = PrereadConfig::new(table);
        config.max_bytes = self.effective_max();
        config.timeout = self.timeout;
        config.expect_proxy = self.expect_proxy;
        config.default_cluster = self.default_cluster.then(|| Arc::from(DEFAULT_CLUSTER));
        config.server_first_timeout = self.server_first.filter(|_| self.default_cluster);
        config.deny_ja4 = DenyJa4::new(self.deny_ja4.iter().copied());
        config
    }
}

/// What the route lookup must answer, by the documented precedence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expect {
    /// Routed to this cluster, chosen by this offered protocol (or by a
    /// frontend without ALPN).
    Matched {
        /// The cluster.
        cluster: &'static str,
        /// The protocol that chose it.
        protocol: Option<Vec<u8>>,
    },
    /// No pattern matches the name.
    SniUnmatched,
    /// The most specific pattern takes none of the offer.
    AlpnUnmatched,
}

/// An independent model of `RouteTable::lookup` over frontends of the pool
/// (LIFECYCLE.md §5): the exact name, then `*.` on the name minus its first
/// (non-empty) label, then `**.` on the longest suffix with non-empty
/// labels; on that pattern only, the offer in the client's order against
/// the listed protocols, then the frontend without ALPN.
pub fn model_lookup(routes: &[usize], name: &str, offer: &[Vec<u8>]) -> Expect {
    let frontends = |pattern: &str| -> Vec<RouteSpec> {
        routes
            .iter()
            .map(|&i| ROUTES[i])
            .filter(|r| r.0 == pattern)
            .collect()
    };
    let mut found = frontends(name);
    if found.is_empty()
        && let Some((first, suffix)) = name.split_once('.')
        && !first.is_empty()
    {
        found = frontends(&format!("*.{suffix}"));
        let mut rest = suffix;
        while found.is_empty() {
            found = frontends(&format!("**.{rest}"));
            match rest.split_once('.') {
                Some((label, tail)) if !label.is_empty() => rest = tail,
                _ => break,
            }
        }
    }
    if found.is_empty() {
        return Expect::SniUnmatched;
    }
    for offered in offer {
        for &(_, alpn, cluster) in &found {
            if alpn.iter().any(|p| p.as_bytes() == offered.as_slice()) {
                return Expect::Matched {
                    cluster,
                    protocol: Some(offered.clone()),
                };
            }
        }
    }
    match found.iter().find(|r| r.1.is_empty()) {
        Some(&(_, _, cluster)) => Expect::Matched {
            cluster,
            protocol: None,
        },
        None => Expect::AlpnUnmatched,
    }
}

/// `offer` as owned protocol names.
pub fn owned_offer(offer: Option<&[&str]>) -> Option<Vec<Vec<u8>>> {
    offer.map(|list| list.iter().map(|p| p.as_bytes().to_vec()).collect())
}

#[cfg(test)]
mod tests {
    use preread_core::routes::Lookup;
    use preread_core::sni::HostName;

    use super::{FOREIGN_OFFERS, Listener, ROUTED_NAMES, ROUTES, UNMATCHED_NAMES, owned_offer};
    use crate::rng::Rng;

    fn full() -> Listener {
        let mut l = Listener::random(&mut Rng::new(0));
        l.routes = (0..ROUTES.len()).collect();
        l
    }

    #[test]
    fn name_pools_mean_what_they_say() {
        let config = full().config();
        for &(raw, offer, index) in ROUTED_NAMES {
            let name = HostName::normalize(raw.as_bytes()).expect("valid name");
            let offer = owned_offer(offer).unwrap_or_default();
            match config
                .routes
                .lookup(name.as_bytes(), offer.iter().map(Vec::as_slice))
            {
                Lookup::Matched { cluster, .. } => assert_eq!(&**cluster, ROUTES[index].2, "{raw}"),
                other => panic!("{raw}: {other:?}"),
            }
            // With only its frontend, the name still routes there.
            let mut alone = full();
            alone.routes = vec![index];
            let alone = alone.config();
            let lookup = alone
                .routes
                .lookup(name.as_bytes(), offer.iter().map(Vec::as_slice));
            assert!(
                matches!(lookup, Lookup::Matched { .. }),
                "{raw} alone: {lookup:?}"
            );
        }
        for raw in UNMATCHED_NAMES {
            let name = HostName::normalize(raw.as_bytes()).expect("valid name");
            assert_eq!(
                config.routes.lookup(name.as_bytes(), []),
                Lookup::SniUnmatched,
                "{raw}"
            );
        }
        for offer in FOREIGN_OFFERS {
            let offer = owned_offer(*offer).unwrap_or_default();
            for name in ["c.example.com", "www.example.org"] {
                let lookup = config
                    .routes
                    .lookup(name.as_bytes(), offer.iter().map(Vec::as_slice));
                assert!(
                    matches!(lookup, Lookup::AlpnUnmatched { .. }),
                    "{name}: {lookup:?}"
                );
            }
        }
    }
}
