//! The checks of one request taken alone: addresses, ids, timeouts, SNI
//! patterns, ALPN lists, enum values, and the defaults that resolve unset
//! fields.
//!
//! Owns: the documented defaults, addresses and ids here, and below it
//! the canonical form of every object (what [`crate::state::ConfigState`]
//! stores and compares): `listener` (its address, byte cap and timeouts),
//! `objects` (clusters, frontends, backends) and `differences` (what two
//! versions of one object differ in). [`ValidationError`] itself lives in
//! [`crate::validation_error`], below the modules that build one.
//!
//! Must never: look at the state; the rules that need it (unknown
//! references, conflicts, objects in use) live in [`crate::state`]. The
//! SNI and ALPN rules are `preread-core`'s own validators, called here,
//! never copied.

mod access;
mod differences;
mod listener;
mod objects;

use crate::codes::ErrorCode;
use crate::spelling;

pub use crate::socket_address::parse_address;
pub(crate) use crate::socket_address::parse_address_of;
pub use crate::validation_error::ValidationError;
pub use access::AccessSettings;
pub(crate) use access::{AccessFields, resolve_access};
pub(crate) use differences::{cluster_differences, listener_differences};
pub(crate) use listener::resolve_listener;
pub(crate) use listener::whole_seconds;
pub use listener::{back_timeout, connect_timeout, front_timeout, is_quic_listener};
pub use objects::is_quic_cluster;
pub(crate) use objects::{
    FrontendKey, frontend_key, is_relay, resolve_backend, resolve_cluster, resolve_frontend,
};

/// Default `sni_preread_timeout`, in milliseconds.
pub const DEFAULT_SNI_PREREAD_TIMEOUT_MS: u32 = 5_000;
/// Default `sni_preread_max_bytes`.
pub const DEFAULT_SNI_PREREAD_MAX_BYTES: u32 = 65_536;
/// Default `front_timeout`, in milliseconds (60 s).
pub const DEFAULT_FRONT_TIMEOUT_MS: u64 = 60_000;
/// Default `back_timeout`, in milliseconds (30 s).
pub const DEFAULT_BACK_TIMEOUT_MS: u64 = 30_000;
/// Default `connect_timeout`, in milliseconds (3 s).
pub const DEFAULT_CONNECT_TIMEOUT_MS: u64 = 3_000;
/// Default `quic_preread_timeout`, in milliseconds.
pub const DEFAULT_QUIC_PREREAD_TIMEOUT_MS: u64 = 1_000;
/// Default `quic_idle_timeout`, in milliseconds (60 s).
pub const DEFAULT_QUIC_IDLE_TIMEOUT_MS: u64 = 60_000;
/// Default `max_flows` of a QUIC listener.
pub const DEFAULT_MAX_FLOWS: u32 = 100_000;
/// Default backend weight.
pub const DEFAULT_WEIGHT: u32 = 100;
/// The longest cluster or backend id, in bytes.
pub const MAX_ID_LEN: usize = 128;

/// Checks a cluster or backend id: 1 to [`MAX_ID_LEN`] bytes of printable
/// ASCII without spaces. `kind` is "cluster" or "backend".
pub fn validate_id(kind: &str, id: &str) -> Result<(), ValidationError> {
    let problem = if id.is_empty() {
        "is empty"
    } else if id.len() > MAX_ID_LEN {
        "is longer than 128 bytes"
    } else if !id.bytes().all(|b| b.is_ascii_graphic()) {
        "holds a space, a control character or non-ASCII text"
    } else {
        return Ok(());
    };
    Err(ValidationError::new(
        ErrorCode::InvalidId,
        format!(
            "the {kind} id {} {problem}: use 1 to {MAX_ID_LEN} printable ASCII characters \
             without spaces, such as `alpha-0`",
            spelling::quoted(id)
        ),
    ))
}

#[cfg(test)]
mod tests;
