//! A cluster's `health_check`: its defaults and the checks of its values.
//!
//! Owns: the documented defaults of an active health check (interval,
//! timeout, rise, fall), the rule that a check ends before the next one
//! starts (timeout at most the interval), and the canonical form the state
//! stores (every field resolved). Must never: run a check (the proxy's
//! checker thread does) or look at the state.

use crate::codes::ErrorCode;
use crate::proto;
use crate::validation_error::ValidationError;

/// Default milliseconds between two checks of one backend.
pub const DEFAULT_INTERVAL_MS: u32 = 2_000;
/// Default milliseconds one check may take.
pub const DEFAULT_TIMEOUT_MS: u32 = 1_000;
/// Default checks passed in a row that bring a down backend up.
pub const DEFAULT_RISE: u32 = 2;
/// Default checks failed in a row that take an up backend down.
pub const DEFAULT_FALL: u32 = 3;

/// The health check with its kind checked and every default resolved;
/// `cluster` names it in messages.
pub fn resolve_health_check(
    cluster: &str,
    check: &proto::HealthCheck,
) -> Result<proto::HealthCheck, ValidationError> {
    let what = format!("cluster `{cluster}`: health_check");
    if proto::HealthCheckKind::try_from(check.kind).is_err() {
        return Err(ValidationError::new(
            ErrorCode::InvalidValue,
            format!(
                "{what}: kind {} is unknown: use tcp (0) or tls (1)",
                check.kind
            ),
        ));
    }
    let interval = check.interval_ms.unwrap_or(DEFAULT_INTERVAL_MS);
    let timeout = check.timeout_ms.unwrap_or(DEFAULT_TIMEOUT_MS.min(interval));
    if interval == 0 || timeout == 0 {
        return Err(ValidationError::new(
            ErrorCode::InvalidTimeout,
            format!(
                "{what}: interval and timeout must be positive (interval {interval} ms, timeout \
                 {timeout} ms): leave them unset for {DEFAULT_INTERVAL_MS} ms and \
                 {DEFAULT_TIMEOUT_MS} ms"
            ),
        ));
    }
    if timeout > interval {
        return Err(ValidationError::new(
            ErrorCode::InvalidTimeout,
            format!(
                "{what}: timeout {timeout} ms is longer than interval {interval} ms: a check \
                 must end before the next one starts; lower timeout or raise interval"
            ),
        ));
    }
    let count = |field: &str, value: Option<u32>, default: u32| match value {
        Some(0) => Err(ValidationError::new(
            ErrorCode::InvalidValue,
            format!("{what}: {field} is 0: set at least 1, or leave it unset for {default}"),
        )),
        Some(n) => Ok(n),
        None => Ok(default),
    };
    Ok(proto::HealthCheck {
        kind: check.kind,
        interval_ms: Some(interval),
        timeout_ms: Some(timeout),
        rise: Some(count("rise", check.rise, DEFAULT_RISE)?),
        fall: Some(count("fall", check.fall, DEFAULT_FALL)?),
    })
}

/// `kind=tcp interval=2000ms timeout=1000ms rise=2 fall=3`, for messages
/// and listings.
#[must_use]
pub fn describe_health_check(check: Option<&proto::HealthCheck>) -> String {
    let Some(check) = check else {
        return "none".to_owned();
    };
    let kind = match proto::HealthCheckKind::try_from(check.kind) {
        Ok(proto::HealthCheckKind::Tcp) => "tcp".to_owned(),
        Ok(proto::HealthCheckKind::Tls) => "tls".to_owned(),
        Err(_) => check.kind.to_string(),
    };
    let shown = |value: Option<u32>| value.map_or_else(|| "default".to_owned(), |v| v.to_string());
    format!(
        "kind={kind} interval={}ms timeout={}ms rise={} fall={}",
        shown(check.interval_ms),
        shown(check.timeout_ms),
        shown(check.rise),
        shown(check.fall)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(interval: Option<u32>, timeout: Option<u32>) -> proto::HealthCheck {
        proto::HealthCheck {
            kind: proto::HealthCheckKind::Tls as i32,
            interval_ms: interval,
            timeout_ms: timeout,
            rise: None,
            fall: None,
        }
    }

    #[test]
    fn defaults_are_resolved() {
        let resolved = resolve_health_check("c", &check(None, None));
        assert_eq!(
            resolved,
            Ok(proto::HealthCheck {
                kind: proto::HealthCheckKind::Tls as i32,
                interval_ms: Some(2_000),
                timeout_ms: Some(1_000),
                rise: Some(2),
                fall: Some(3),
            })
        );
        let short = resolve_health_check("c", &check(Some(200), None));
        assert_eq!(
            short.map(|c| c.timeout_ms),
            Ok(Some(200)),
            "the default timeout never passes a shorter interval"
        );
    }

    #[test]
    fn bad_values_are_refused_with_their_code() {
        let code = |c: proto::HealthCheck| resolve_health_check("c", &c).map_err(|e| e.code);
        assert_eq!(code(check(Some(0), None)), Err(ErrorCode::InvalidTimeout));
        assert_eq!(
            code(check(Some(100), Some(0))),
            Err(ErrorCode::InvalidTimeout)
        );
        assert_eq!(
            code(check(Some(100), Some(200))),
            Err(ErrorCode::InvalidTimeout)
        );
        assert_eq!(
            code(proto::HealthCheck {
                rise: Some(0),
                ..check(None, None)
            }),
            Err(ErrorCode::InvalidValue)
        );
        assert_eq!(
            code(proto::HealthCheck {
                kind: 7,
                ..check(None, None)
            }),
            Err(ErrorCode::InvalidValue)
        );
    }

    #[test]
    fn described_as_an_operator_writes_it() {
        let resolved = resolve_health_check("c", &check(Some(500), Some(250)));
        assert_eq!(
            resolved.map(|c| describe_health_check(Some(&c))),
            Ok("kind=tls interval=500ms timeout=250ms rise=2 fall=3".to_owned())
        );
        assert_eq!(describe_health_check(None), "none");
    }
}
