//! The sans-io routing core of preread: one latched decision per connection
//! from its first bytes.
//!
//! Owns: [`SniPrereadCore`] and its message contract ([`Input`], [`Output`],
//! [`Route`]), the reject taxonomy ([`RejectReason`], [`FallbackReason`]),
//! SNI normalization ([`sni`]), the SNI pattern validator ([`pattern`]) and
//! the per-listener route table ([`routes`]), and the preread step
//! ([`step`]): the shell's whole policy around the core, which the worker,
//! the simulation and `preread inspect` all run.
//!
//! Must never: perform I/O, read a clock (`now` is an input), draw
//! randomness or take a lock. That is what lets the simulation, the fuzzers
//! and other proxies drive it exactly as the worker does.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod alpn;
mod config;
mod output;
pub mod pattern;
mod preread;
mod reject;
pub mod rng;
pub mod routes;
pub mod sni;
pub mod step;
mod verdict;
pub mod window;

pub use alpn::AlpnOffer;
pub use config::{MIN_PREREAD_MAX_BYTES, PrereadConfig};
pub use output::{Input, Output, Route};
pub use preread::SniPrereadCore;
pub use reject::{FallbackReason, RejectReason};
