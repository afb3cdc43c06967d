//! Deterministic, seeded simulation of the preread core
//! (`preread_core::SniPrereadCore`) driven as the worker's preread shell
//! drives it: accumulate-and-cap reads, the whole window fed after each,
//! timers and closes on a simulated clock.
//!
//! Owns: the scenario generator ([`scenario`](mod@scenario): from one `u64` seed, a
//! listener, a client byte stream and a timeline; directed scenarios that
//! produce each reject and fallback reason by construction), the driver
//! ([`driver`]: the worker model and the invariants checked at every step)
//! and the run/report ([`report`]); and the QUIC flows ([`quic`]: a first
//! flight of Initials through a lossy network, the QUIC step judged by
//! the TCP core). Must never: use real time, threads or
//! sockets, read files at run time (the corpus is embedded), or copy the
//! shell's cap arithmetic (it calls `preread_core::window`).
//!
//! Reproduction: a failure prints its seed; `SIM_SEED=<n> cargo test -p sim`
//! replays that seed alone, and `cargo run -p sim --release -- --seeds N
//! [--start S]` runs more.

pub mod control;
pub mod corpus;
pub mod driver;
pub mod hello;
pub mod listener;
pub mod prefix;
pub mod quic;
pub mod report;
/// The route fixtures shared with the fuzz target and the core's tests,
/// compiled in (never read at run time).
#[path = "../../testdata/route_pool.rs"]
pub mod route_pool;
pub mod scenario;

pub use preread_core::rng;

pub use driver::{DecidedBy, Event, Failure, Outcome, Played, Sabotage, play, play_sabotaged};
pub use report::{Report, RunConfig, Tally, run};
pub use scenario::{Scenario, Target, directed_seed, scenario, scenario_for};

/// Parses a seed as `SIM_SEED` gives it: decimal, or hex with `0x`.
pub fn parse_seed(text: &str) -> Option<u64> {
    let text = text.trim();
    match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => text.parse().ok(),
    }
}
