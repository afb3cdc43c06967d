//! What the preread step needs to know about a listener: the core's config
//! with the cap the shell can actually enforce (the catch-all cluster in
//! it), and how a rejected client is told.
//!
//! Owns: [`PrereadListener`] and the one place the configured byte cap is
//! lowered to the effective one. Must never: be built with a cap larger than
//! the window the shell can hold, since the core trusts the cap it is given
//! (a complete but oversized hello read in one gulp would route).

use crate::config::PrereadConfig;
use crate::routes::ClusterId;
use crate::window::effective_max_bytes;

use super::alert::RejectWith;

/// A listener as the preread step sees it. The worker keeps one per
/// listener; `inspect` and the simulation build one from the same settings
/// with [`PrereadListener::new`], so all three cap the same way.
#[derive(Debug, Clone)]
pub struct PrereadListener {
    /// The core's config. `max_bytes` is the effective cap; `catch_all`
    /// is the listener's frontend without SNI.
    pub config: PrereadConfig,
    /// How a rejected client is told.
    pub reject_with: RejectWith,
}

impl PrereadListener {
    /// A listener from its configured settings: `config.max_bytes` is the
    /// cap as written in the config, lowered here to what a window of
    /// `window_capacity` bytes can hold (and raised to one record header).
    /// `catch_all` replaces `config.catch_all`.
    pub fn new(
        mut config: PrereadConfig,
        window_capacity: usize,
        catch_all: Option<ClusterId>,
    ) -> Self {
        config.max_bytes = effective_max_bytes(config.max_bytes, window_capacity);
        config.catch_all = catch_all;
        Self {
            config,
            reject_with: RejectWith::default(),
        }
    }

    /// The cluster of the listener's frontend without SNI, if it has one:
    /// it takes every connection, unread.
    pub fn catch_all(&self) -> Option<&ClusterId> {
        self.config.catch_all.as_ref()
    }

    /// Sets the cap again after a settings change, with the same rule.
    pub fn set_cap(&mut self, configured: usize, window_capacity: usize) {
        self.config.max_bytes = effective_max_bytes(configured, window_capacity);
    }

    /// The effective cap: the window never grows past it.
    pub fn cap(&self) -> usize {
        self.config.max_bytes
    }
}
