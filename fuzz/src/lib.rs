//! The invariants the fuzz targets check, as pure functions that panic when
//! one breaks.
//!
//! Owns: nothing of the product; only the checks. They live in two files so
//! that the ordinary test suite can replay the committed corpus on stable
//! without cargo-fuzz: `preread-parser/tests/fuzz_replay.rs` includes
//! [`checks_parser`] and `preread-parser/tests/quic_fuzz_replay.rs`
//! [`checks_quic`] (which may use only `preread_parser` and std), and
//! `preread-core/tests/fuzz_replay.rs` includes [`checks_core`] (which may
//! also use `preread_core` and `arbitrary`), and `command/tests/fuzz_replay.rs`
//! includes [`checks_command`] (`command` and `prost`) and [`checks_config`]
//! (`command`), and
//! `proxy-shell/tests/pcap_fuzz_replay.rs` includes [`checks_pcap`]
//! (`proxy_shell` and `serde_json`). Must never: read a clock other
//! than one `Instant::now()` as a base, or depend on anything but the input
//! bytes, so that a crash replays exactly.

pub mod checks_command;
pub mod checks_config;
pub mod checks_core;
pub mod checks_parser;
pub mod checks_pcap;
pub mod checks_quic;
/// The route fixtures `checks_core` draws its tables from; every crate that
/// includes `checks_core` declares it at its root too.
#[path = "../../testdata/route_pool.rs"]
pub mod route_pool;

pub use checks_command::check_command;
pub use checks_config::check_config;
pub use checks_core::check_core;
pub use checks_parser::{check_clienthello, check_proxy_header};
pub use checks_pcap::check_pcap;
pub use checks_quic::check_quic_initial;
