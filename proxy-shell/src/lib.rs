//! The preread worker and its command-line front end.
//!
//! Owns: the `preread` binary's subcommands (the offline ones, `inspect`,
//! `config check` and `explain`, and the client half of every
//! command-socket subcommand), the command server, the access-log writer,
//! and the worker: I/O glue over the preread step of `preread_core::step`,
//! the pipe, backends and metrics. Must never: decide a connection's preread anywhere but in that
//! step, or block a worker thread.

pub mod access_log;
pub mod answer_code;
pub mod cli;
pub mod fd_budget;
pub mod handover;
pub mod heap;
pub mod inspect;
pub mod metrics;
pub mod metrics_http;
pub mod notify;
pub mod server;
pub mod shared;
pub mod sources;
pub mod start;
pub mod takeover;
pub mod vocabulary;
pub mod worker;
