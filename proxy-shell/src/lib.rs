//! The preread worker and its command-line front end.
//!
//! Owns: the `preread` binary's subcommands. Today that is the offline
//! `inspect`; the worker (event loop, preread shell, pipe, command server)
//! comes with the worker issue.

pub mod inspect;
