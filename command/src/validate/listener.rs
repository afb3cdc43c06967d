//! A listener's settings resolved: the address canonical, the byte cap
//! checked, every timeout in milliseconds with its default, and the
//! timeouts a worker reads from a stored config.
//!
//! Must never: look at the state (a listener's `default_cluster` must
//! exist: [`crate::state`] checks that).

use std::net::SocketAddr;
use std::time::Duration;

use preread_core::MIN_PREREAD_MAX_BYTES;

use super::access::{AccessFields, resolve_access};
use super::{
    DEFAULT_BACK_TIMEOUT_MS, DEFAULT_CONNECT_TIMEOUT_MS, DEFAULT_FRONT_TIMEOUT_MS,
    DEFAULT_SNI_PREREAD_MAX_BYTES, DEFAULT_SNI_PREREAD_TIMEOUT_MS, parse_address,
};
use crate::codes::ErrorCode;
use crate::duration;
use crate::proto;
use crate::validation_error::ValidationError;

/// A millisecond timeout that must be positive.
fn positive_millis(
    what: &str,
    field: &str,
    value: Option<u32>,
    default: u32,
) -> Result<u32, ValidationError> {
    match value {
        Some(0) => Err(ValidationError::new(
            ErrorCode::InvalidTimeout,
            format!(
                "{what}: {field} is 0: set a positive duration, or leave it unset for {}",
                duration::shown(u64::from(default))
            ),
        )),
        Some(value) => Ok(value),
        None => Ok(default),
    }
}

/// One of the three connection timeouts, in milliseconds, from its two
/// wire forms: `(seconds, milliseconds)`. Clients and state files older
/// than the millisecond fields send seconds; both forms are accepted, and
/// both together only when they agree, so no request means two things.
fn connection_timeout(
    what: &str,
    key: &str,
    (seconds, millis): (Option<u32>, Option<u64>),
    default: u64,
) -> Result<u64, ValidationError> {
    let from_seconds = seconds.map(|s| u64::from(s) * 1_000);
    let value = match (from_seconds, millis) {
        (Some(a), Some(b)) if a != b => {
            return Err(ValidationError::new(
                ErrorCode::InvalidValue,
                format!(
                    "{what}: {key} is given twice, as {} and as {}: send one of {key} \
                     (seconds) and {key}_ms (milliseconds)",
                    duration::shown(a),
                    duration::shown(b)
                ),
            ));
        }
        (from_seconds, millis) => millis.or(from_seconds),
    };
    match value {
        Some(0) => Err(ValidationError::new(
            ErrorCode::InvalidTimeout,
            format!(
                "{what}: {key} is 0: set a positive duration, or leave it unset for {}",
                duration::shown(default)
            ),
        )),
        Some(value) => Ok(value),
        None => Ok(default),
    }
}

/// The seconds field stored beside a millisecond timeout: set when the
/// value is whole seconds, so that an older preread handed this state (a
/// downgrade through `preread upgrade`, which ignores the fields it does
/// not know) keeps the timeout instead of falling back to its default.
pub(crate) fn whole_seconds(millis: u64) -> Option<u32> {
    if millis % 1_000 == 0 {
        u32::try_from(millis / 1_000).ok()
    } else {
        None
    }
}

/// The client-side inactivity timeout of a listener config, resolved or
/// not (either wire form, else the default).
#[must_use]
pub fn front_timeout(config: &proto::TcpListenerConfig) -> Duration {
    timeout_of(
        (config.front_timeout, config.front_timeout_ms),
        DEFAULT_FRONT_TIMEOUT_MS,
    )
}

/// The backend-side inactivity timeout of a listener config.
#[must_use]
pub fn back_timeout(config: &proto::TcpListenerConfig) -> Duration {
    timeout_of(
        (config.back_timeout, config.back_timeout_ms),
        DEFAULT_BACK_TIMEOUT_MS,
    )
}

/// How long a backend connect may take, from a listener config.
#[must_use]
pub fn connect_timeout(config: &proto::TcpListenerConfig) -> Duration {
    timeout_of(
        (config.connect_timeout, config.connect_timeout_ms),
        DEFAULT_CONNECT_TIMEOUT_MS,
    )
}

fn timeout_of((seconds, millis): (Option<u32>, Option<u64>), default: u64) -> Duration {
    match (millis, seconds) {
        (Some(millis), _) => Duration::from_millis(millis),
        (None, Some(seconds)) => Duration::from_secs(u64::from(seconds)),
        (None, None) => Duration::from_millis(default),
    }
}

/// A listener config with its address canonical and every default
/// resolved; `active` is kept as given (unset means "added active" for an
/// add and "unchanged" for an update). Checks everything that does not need
/// the state: address, byte cap, timeouts, and `server_first_timeout`
/// needing `default_cluster`.
pub(crate) fn resolve_listener(
    config: &proto::TcpListenerConfig,
) -> Result<(SocketAddr, proto::TcpListenerConfig), ValidationError> {
    let address = parse_address("listener", &config.address)?;
    let what = format!("listener {address}");
    let max_bytes = config
        .sni_preread_max_bytes
        .unwrap_or(DEFAULT_SNI_PREREAD_MAX_BYTES);
    if usize::try_from(max_bytes).is_ok_and(|max| max < MIN_PREREAD_MAX_BYTES) {
        return Err(ValidationError::new(
            ErrorCode::PrereadMaxBytesTooSmall,
            format!(
                "{what}: sni_preread_max_bytes is {max_bytes}, below the {MIN_PREREAD_MAX_BYTES} \
                 bytes of a TLS record header: raise it, or leave it unset for \
                 {DEFAULT_SNI_PREREAD_MAX_BYTES}"
            ),
        ));
    }
    let front = connection_timeout(
        &what,
        "front_timeout",
        (config.front_timeout, config.front_timeout_ms),
        DEFAULT_FRONT_TIMEOUT_MS,
    )?;
    let back = connection_timeout(
        &what,
        "back_timeout",
        (config.back_timeout, config.back_timeout_ms),
        DEFAULT_BACK_TIMEOUT_MS,
    )?;
    let connect = connection_timeout(
        &what,
        "connect_timeout",
        (config.connect_timeout, config.connect_timeout_ms),
        DEFAULT_CONNECT_TIMEOUT_MS,
    )?;
    let resolved = proto::TcpListenerConfig {
        address: address.to_string(),
        expect_proxy: config.expect_proxy,
        sni_preread_timeout: Some(positive_millis(
            &what,
            "sni_preread_timeout",
            config.sni_preread_timeout,
            DEFAULT_SNI_PREREAD_TIMEOUT_MS,
        )?),
        sni_preread_max_bytes: Some(max_bytes),
        default_cluster: config.default_cluster.clone(),
        server_first_timeout: match config.server_first_timeout {
            Some(0) => {
                return Err(ValidationError::new(
                    ErrorCode::InvalidTimeout,
                    format!(
                        "{what}: server_first_timeout is 0: set a positive number of \
                         milliseconds, or leave it unset to wait for the client"
                    ),
                ));
            }
            other => other,
        },
        front_timeout: whole_seconds(front),
        front_timeout_ms: Some(front),
        back_timeout: whole_seconds(back),
        back_timeout_ms: Some(back),
        connect_timeout: whole_seconds(connect),
        connect_timeout_ms: Some(connect),
        active: config.active,
        reject_with: match config.reject_with {
            Some(with) if proto::RejectWith::try_from(with).is_err() => {
                return Err(ValidationError::new(
                    ErrorCode::InvalidValue,
                    format!(
                        "{what}: reject_with {with} is unknown: use alert (0), close (1) or \
                         reset (2)"
                    ),
                ));
            }
            Some(with) => Some(with),
            None => Some(proto::RejectWith::Alert as i32),
        },
        max_unrouted_per_ip: Some(config.max_unrouted_per_ip.unwrap_or(0)),
        allow: Vec::new(),
        deny: Vec::new(),
        connection_rate_per_ip: None,
        ipv6_prefix: None,
        deny_ja4: Vec::new(),
    };
    let mut resolved = resolved;
    resolve_access(&what, AccessFields::of_listener(config))?.write_listener(&mut resolved);
    if resolved.server_first_timeout.is_some() && resolved.default_cluster.is_none() {
        return Err(ValidationError::new(
            ErrorCode::ServerFirstWithoutDefaultCluster,
            format!(
                "{what}: server_first_timeout needs a default_cluster to send silent clients \
                 to: set default_cluster, or remove server_first_timeout"
            ),
        ));
    }
    Ok((address, resolved))
}
