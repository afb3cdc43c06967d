//! What the QUIC preread step needs to know about a listener.
//!
//! Owns: [`QuicListener`] (the core's config, whose `max_bytes` caps the
//! CRYPTO stream and whose `timeout` is `quic_preread_timeout`) and
//! [`QuicRejectWith`]. Must never: hold per-flow state.

use crate::config::PrereadConfig;
use crate::window::effective_max_bytes;

/// How a QUIC listener tells a client it was refused (`reject_with`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum QuicRejectWith {
    /// A server Initial with CONNECTION_CLOSE the client can read
    /// (CRYPTO_ERROR `0x100 + alert`); a Version Negotiation packet for an
    /// unknown version.
    #[default]
    Close,
    /// Nothing: the client times out.
    Drop,
}

/// A QUIC listener as the step sees it.
#[derive(Debug, Clone)]
pub struct QuicListener {
    /// The core's config: `routes`, `default_cluster`, `catch_all` as for
    /// TCP; `max_bytes` caps the CRYPTO stream; `timeout` is
    /// `quic_preread_timeout`, from the flow's first datagram.
    /// `expect_proxy` and `server_first_timeout` do not apply to UDP.
    pub config: PrereadConfig,
    /// How a refused client is told.
    pub reject_with: QuicRejectWith,
}

impl QuicListener {
    /// A listener from its settings, the cap raised as for TCP.
    pub fn new(mut config: PrereadConfig, reject_with: QuicRejectWith) -> Self {
        config.max_bytes = effective_max_bytes(config.max_bytes);
        Self {
            config,
            reject_with,
        }
    }
}
