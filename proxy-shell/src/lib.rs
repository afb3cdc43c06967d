//! The `preread` binary's library: its command-line front end and the
//! start that wires the two wings together.
//!
//! Owns: the `preread` binary's subcommands (the offline ones, `inspect`,
//! `config check` and `explain`, and the client half of every
//! command-socket subcommand) and [`start`], which builds the workers of
//! `preread_worker` and the command server of `preread_control` and runs
//! them. Must never: decide a connection's preread (the worker's step
//! does) or hold control-plane policy (the command server does).

pub mod cli;
pub mod inspect;
pub mod inspect_pcap;
pub mod inspect_quic;
pub mod pcap;
pub mod start;
