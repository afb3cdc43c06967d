//! A listener's or a frontend's address: an `ip:port` with a non-zero port.
//!
//! Owns: how such an address is read from config and requests, and the
//! message that says how to write one. Must never: resolve a host name
//! (backends may name one: that is `backend_address`'s), or look at the
//! state.

use std::net::SocketAddr;

use crate::codes::ErrorCode;
use crate::validation_error::ValidationError;

/// Parses an `ip:port` address with a non-zero port; `what` names the
/// object in the message (e.g. "listener", "backend `alpha-0`").
///
/// Host names are refused, and leading zeros in the port are accepted, so
/// the canonical form is `SocketAddr`'s `Display`.
pub fn parse_address(what: &str, address: &str) -> Result<SocketAddr, ValidationError> {
    parse_address_of(|| what.to_owned(), address)
}

/// [`parse_address`] with the subject's name built only for an error: a
/// frontend's is a `format!`, and 100,000 of them are checked at a boot.
pub(crate) fn parse_address_of(
    what: impl Fn() -> String,
    address: &str,
) -> Result<SocketAddr, ValidationError> {
    let parsed: SocketAddr = address.parse().map_err(|_| {
        let what = what();
        ValidationError::new(
            ErrorCode::InvalidAddress,
            format!(
                "{what}: `{address}` is not an `ip:port` address: write e.g. `127.0.0.1:8443` \
                 or `[::1]:8443` (host names are not resolved)"
            ),
        )
    })?;
    if parsed.port() == 0 {
        return Err(ValidationError::new(
            ErrorCode::InvalidAddress,
            format!(
                "{}: `{address}` has port 0: give a fixed port from 1 to 65535",
                what()
            ),
        ));
    }
    Ok(parsed)
}
