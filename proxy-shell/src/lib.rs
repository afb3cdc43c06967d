//! The preread worker and its command-line front end.
//!
//! Owns: the `preread` binary's subcommands: the offline ones (`inspect`,
//! `config check`, `explain`) and the client half of every command-socket
//! subcommand. The worker (event loop, preread shell, pipe, command server)
//! comes with the worker issue.

pub mod cli;
pub mod inspect;
pub mod metrics_http;
pub mod server;
pub mod start;
pub mod worker;
