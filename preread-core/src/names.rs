//! Metric names of the preread stage that are not per-reason.
//!
//! Owns: the gauge, counter and histogram names of doc/configure.md for the
//! preread stage. The per-reason names live with their reasons
//! ([`crate::reject`]) so that a new reason cannot lack one.

/// Gauge: sessions currently in the preread stage.
pub const SNI_PREREAD_ACTIVE: &str = "tcp.sni_preread.active";
/// Counter: connections routed by SNI/ALPN (fallbacks are counted apart).
pub const SNI_PREREAD_ROUTED: &str = "tcp.sni_preread.routed";
/// Histogram: time from the first byte to the decision.
pub const SNI_PREREAD_DURATION: &str = "tcp.sni_preread.duration";
