//! The generated protobuf types of `proto/command.proto`.
//!
//! Owns: the wire vocabulary of the command socket and the state file. The
//! types also derive serde (JSON lines in the state file), with unknown
//! fields refused.

#![allow(missing_docs, unreachable_pub, clippy::all, clippy::pedantic)]

include!(concat!(env!("OUT_DIR"), "/preread.command.rs"));
