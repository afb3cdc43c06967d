//! A listener's settings resolved: the address canonical, the byte cap
//! checked, every timeout in milliseconds with its default, the timeouts a
//! worker reads from a stored config, and a QUIC listener's own settings
//! (its TCP-only ones refused, and a TCP listener's QUIC-only ones).
//!
//! Must never: look at the state (a listener's `default_cluster` must
//! exist: [`crate::state`] checks that).

use std::time::Duration;

use preread_core::MIN_PREREAD_MAX_BYTES;

use super::access::{AccessFields, resolve_access};
use super::{
    DEFAULT_BACK_TIMEOUT_MS, DEFAULT_CONNECT_TIMEOUT_MS, DEFAULT_FRONT_TIMEOUT_MS,
    DEFAULT_MAX_FLOWS, DEFAULT_QUIC_IDLE_TIMEOUT_MS, DEFAULT_QUIC_PREREAD_TIMEOUT_MS,
    DEFAULT_SNI_PREREAD_MAX_BYTES, DEFAULT_SNI_PREREAD_TIMEOUT_MS, parse_address,
};
use crate::codes::ErrorCode;
use crate::duration;
use crate::listener_key::ListenerKey;
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
) -> Result<(ListenerKey, proto::TcpListenerConfig), ValidationError> {
    let address = parse_address("listener", &config.address)?;
    let quic = is_quic_listener(config);
    let key = ListenerKey { address, quic };
    let what = format!("listener {key}");
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
                        "{what}: reject_with {with} is unknown: use alert (0), close (1), \
                         reset (2) or, on a QUIC listener, drop (3)"
                    ),
                ));
            }
            Some(with) => Some(with),
            None if quic => Some(proto::RejectWith::Close as i32),
            None => Some(proto::RejectWith::Alert as i32),
        },
        max_unrouted_per_ip: Some(config.max_unrouted_per_ip.unwrap_or(0)),
        allow: Vec::new(),
        deny: Vec::new(),
        connection_rate_per_ip: None,
        ipv6_prefix: None,
        protocol: None,
        quic_preread_timeout_ms: None,
        quic_idle_timeout_ms: None,
        max_flows: None,
        max_flows_per_ip: None,
        deny_ja4: Vec::new(),
    };
    let resolved = if quic {
        resolve_quic(&what, config, resolved)?
    } else {
        check_tcp(&what, config, &resolved)?;
        resolved
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
    Ok((key, resolved))
}

/// Whether a listener config is a QUIC listener's.
#[must_use]
pub fn is_quic_listener(config: &proto::TcpListenerConfig) -> bool {
    config.protocol == Some(proto::ListenerProtocol::Quic as i32)
}

/// A setting of the other protocol's listeners, refused with its name.
fn other_protocol(what: &str, key: &str, protocol: &str) -> ValidationError {
    ValidationError::new(
        ErrorCode::ListenerProtocolSetting,
        format!(
            "{what}: {key} applies to {protocol} listeners only: remove it, or set the \
             listener's protocol to {protocol}"
        ),
    )
}

/// A TCP listener's checks of the QUIC-only fields: none set, no `drop`.
fn check_tcp(
    what: &str,
    config: &proto::TcpListenerConfig,
    resolved: &proto::TcpListenerConfig,
) -> Result<(), ValidationError> {
    if let Some(protocol) = config.protocol {
        if proto::ListenerProtocol::try_from(protocol).is_err() {
            return Err(ValidationError::new(
                ErrorCode::InvalidValue,
                format!("{what}: protocol {protocol} is unknown: use tcp (0) or quic (1)"),
            ));
        }
    }
    let quic_only = [
        (
            "quic_preread_timeout",
            config.quic_preread_timeout_ms.is_some(),
        ),
        ("quic_idle_timeout", config.quic_idle_timeout_ms.is_some()),
        ("max_flows", config.max_flows.is_some()),
        ("max_flows_per_ip", config.max_flows_per_ip.is_some()),
        (
            "reject_with = \"drop\"",
            resolved.reject_with == Some(proto::RejectWith::Drop as i32),
        ),
    ];
    match quic_only.iter().find(|(_, set)| *set) {
        Some((key, _)) => Err(other_protocol(what, key, "quic")),
        None => Ok(()),
    }
}

/// A QUIC listener's own fields resolved, and the TCP-only ones refused
/// (a PROXY header cannot precede a datagram; a client that sends nothing
/// has no flow to route).
fn resolve_quic(
    what: &str,
    config: &proto::TcpListenerConfig,
    resolved: proto::TcpListenerConfig,
) -> Result<proto::TcpListenerConfig, ValidationError> {
    let tcp_only = [
        ("expect_proxy", config.expect_proxy),
        (
            "server_first_timeout",
            config.server_first_timeout.is_some(),
        ),
        (
            "max_unrouted_per_ip",
            config.max_unrouted_per_ip.unwrap_or(0) > 0,
        ),
        (
            "reject_with = \"alert\" or \"reset\"",
            matches!(
                resolved.reject_with.map(proto::RejectWith::try_from),
                Some(Ok(proto::RejectWith::Alert | proto::RejectWith::Reset))
            ),
        ),
    ];
    if let Some((key, _)) = tcp_only.iter().find(|(_, set)| *set) {
        return Err(other_protocol(what, key, "tcp"));
    }
    let positive = |key: &str, value: Option<u64>, default: u64| match value {
        Some(0) => Err(ValidationError::new(
            ErrorCode::InvalidTimeout,
            format!(
                "{what}: {key} is 0: set a positive duration, or leave it unset for {}",
                duration::shown(default)
            ),
        )),
        Some(value) => Ok(value),
        None => Ok(default),
    };
    Ok(proto::TcpListenerConfig {
        protocol: Some(proto::ListenerProtocol::Quic as i32),
        quic_preread_timeout_ms: Some(positive(
            "quic_preread_timeout",
            config.quic_preread_timeout_ms,
            DEFAULT_QUIC_PREREAD_TIMEOUT_MS,
        )?),
        quic_idle_timeout_ms: Some(positive(
            "quic_idle_timeout",
            config.quic_idle_timeout_ms,
            DEFAULT_QUIC_IDLE_TIMEOUT_MS,
        )?),
        max_flows: Some(config.max_flows.unwrap_or(DEFAULT_MAX_FLOWS)),
        max_flows_per_ip: Some(config.max_flows_per_ip.unwrap_or(0)),
        ..resolved
    })
}
