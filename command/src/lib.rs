//! The control plane of preread: the command protocol, the TOML config and
//! its validation, the desired state, state files and the reload diff.
//!
//! Owns: everything an operator or controller says to the proxy, and the
//! rules that decide whether it may be applied. Must never: touch a data
//! socket or a session; the worker applies what this crate accepted.

pub mod answer_code;
pub mod backend_address;
pub mod change;
pub mod channel;
pub mod codes;
pub mod config;
pub mod diff;
pub mod duration;
pub mod generation;
pub mod health_check;
pub mod listener_key;
pub mod listing;
mod part;
pub mod proto;
pub mod request_kind;
pub mod reread;
pub mod socket_address;
pub mod sources;
pub mod spelling;
pub mod state;
pub mod state_file;
mod stored_frontend;
pub mod undo;
pub mod validate;
pub mod validation_error;
