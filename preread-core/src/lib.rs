//! The sans-io routing core of preread: one latched decision per connection
//! from its first bytes.
//!
//! Owns: [`SniPrereadCore`] and its message contract ([`Input`], [`Output`],
//! [`Route`]), the reject taxonomy ([`RejectReason`], [`FallbackReason`]),
//! SNI normalization ([`sni`]), the SNI pattern validator ([`pattern`]) and
//! the per-listener route table ([`routes`]).
//!
//! Must never: perform I/O, read a clock (`now` is an input), draw
//! randomness or take a lock. That is what lets the simulation, the fuzzers
//! and other proxies drive it exactly as the worker does.

mod alpn;
mod config;
pub mod names;
mod output;
pub mod pattern;
mod preread;
mod reject;
pub mod routes;
pub mod sni;
mod verdict;
pub mod window;

pub use alpn::AlpnOffer;
pub use config::{MIN_PREREAD_MAX_BYTES, PrereadConfig};
pub use output::{Input, Output, Route};
pub use preread::SniPrereadCore;
pub use reject::{FallbackReason, RejectReason};
