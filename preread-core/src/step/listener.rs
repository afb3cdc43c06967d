//! What the preread step needs to know about a listener: the core's config
//! with the cap the shell can actually enforce (the catch-all cluster in
//! it), and how a rejected client is told.
//!
//! Owns: [`PrereadListener`] and the one place the configured byte cap
//! becomes the effective one. Must never: hand the core a cap the shell's
//! reads do not enforce, since the core trusts the cap it is given (a
//! complete but oversized hello read in one gulp would route): the window
//! grows up to the cap ([`crate::window::window_capacity`]) and the read
//! budget stops there.

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
    /// cap as written in the config (raised here to one record header).
    /// `catch_all` replaces `config.catch_all`.
    pub fn new(mut config: PrereadConfig, catch_all: Option<ClusterId>) -> Self {
        config.max_bytes = effective_max_bytes(config.max_bytes);
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
    pub fn set_cap(&mut self, configured: usize) {
        self.config.max_bytes = effective_max_bytes(configured);
    }

    /// The effective cap: the window never grows past it.
    pub fn cap(&self) -> usize {
        self.config.max_bytes
    }
}
