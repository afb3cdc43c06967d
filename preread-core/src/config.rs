//! What the core needs to know about a listener to decide for one of its
//! connections.
//!
//! Owns: [`PrereadConfig`]. The shell builds one per listener and hands it
//! by reference on every input, so a runtime change of routes applies to the
//! next decision without touching sessions already decided. Must never: be
//! mutated by the core.

use core::time::Duration;

use crate::fingerprint::DenyJa4;
use crate::routes::{ClusterId, RouteTable};

/// The smallest byte cap that can hold a TLS record header; a smaller cap
/// could never make progress.
pub const MIN_PREREAD_MAX_BYTES: usize = 5;

/// A listener's preread settings and routes.
///
/// `#[non_exhaustive]`: listeners gain settings. Build one with
/// [`PrereadConfig::new`] and set the fields that differ from its defaults.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct PrereadConfig {
    /// The SNI/ALPN routes of the listener.
    pub routes: RouteTable,
    /// Cap on the window: a window still incomplete at this many bytes is
    /// `TooLarge`. The shell passes its effective cap (never less than
    /// [`MIN_PREREAD_MAX_BYTES`]) and never reads past it.
    pub max_bytes: usize,
    /// How long after the first bytes the ClientHello must be complete.
    pub timeout: Duration,
    /// A PROXY v1/v2 header precedes the ClientHello.
    pub expect_proxy: bool,
    /// Where connections without a usable name go instead of being refused.
    pub default_cluster: Option<ClusterId>,
    /// With `default_cluster`: a client silent this long after accept goes
    /// there (the shell arms the timer; the core only needs to know it is on).
    pub server_first_timeout: Option<Duration>,
    /// A frontend without SNI: every connection goes to this cluster, its
    /// ClientHello unread. With `expect_proxy` the core routes as soon as
    /// the inbound PROXY header is complete (a bad one is still refused);
    /// without, at the first bytes, which a shell need not wait for (the
    /// preread step connects at accept). `routes` and `default_cluster`
    /// are then unused.
    pub catch_all: Option<ClusterId>,
    /// The `deny_ja4` lists of the listener and of its clusters: a routed
    /// connection whose fingerprint one holds is refused
    /// ([`crate::RejectReason::AccessDenied`]).
    pub deny_ja4: DenyJa4,
}

impl PrereadConfig {
    /// A config with these routes, the default cap (64 KiB) and timeout
    /// (5 s), no PROXY header, no default cluster and no catch-all.
    pub fn new(routes: RouteTable) -> Self {
        Self {
            routes,
            max_bytes: 65_536,
            timeout: Duration::from_secs(5),
            expect_proxy: false,
            default_cluster: None,
            server_first_timeout: None,
            catch_all: None,
            deny_ja4: DenyJa4::default(),
        }
    }
}
