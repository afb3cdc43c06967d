//! A cluster's `health_check` table turned into its request field.
//!
//! Owns: the spellings of `kind` (`"tcp"`, `"tls"`), the units of
//! `interval` and `timeout` (a string with its unit, `"500ms"` or `"2s"`,
//! or a bare integer of seconds), and the range of `rise` and `fall`.
//! Must never: apply a default or judge the values together (timeout
//! against interval): [`resolve_health_check`](crate::health_check) does,
//! for the config file and the command socket alike.

use toml::Spanned;

use super::lines::{Problems, duration_millis, ranged};
use super::raw::{RawHealthCheck, Seconds};
use crate::codes::ErrorCode;
use crate::proto;
use crate::spelling::{self, HEALTH_CHECK_KIND, quoted};

/// The request's `health_check`; a bad value is a located problem and its
/// field stays unset (the default).
pub(super) fn health_check(
    raw: &RawHealthCheck,
    problems: &mut Problems<'_>,
) -> proto::HealthCheck {
    let kind = match raw.kind.as_ref() {
        None => proto::HealthCheckKind::Tcp,
        Some(kind) => match spelling::parse(HEALTH_CHECK_KIND, kind.get_ref()) {
            Some(kind) => kind,
            None => {
                problems.push(
                    kind.span().start,
                    ErrorCode::InvalidValue,
                    format!(
                        "health_check kind {} is unknown: use \"tcp\" (a connect) or \"tls\" \
                         (a ClientHello answered by a TLS record)",
                        quoted(kind.get_ref())
                    ),
                );
                proto::HealthCheckKind::Tcp
            }
        },
    };
    let count = |value: Option<&Spanned<i64>>, key: &str, problems: &mut Problems<'_>| {
        value.and_then(|value| ranged::<u32>(value, key, 1, problems))
    };
    proto::HealthCheck {
        kind: kind as i32,
        interval_ms: raw
            .interval
            .as_ref()
            .and_then(|value| milliseconds(value, "health_check interval", problems)),
        timeout_ms: raw
            .timeout
            .as_ref()
            .and_then(|value| milliseconds(value, "health_check timeout", problems)),
        rise: count(raw.rise.as_ref(), "health_check rise", problems),
        fall: count(raw.fall.as_ref(), "health_check fall", problems),
    }
}

/// A duration in milliseconds: `"1500ms"`, `"2s"`, or an integer of
/// seconds; `None` (with a problem) when it is not one, or does not fit.
fn milliseconds(value: &Spanned<Seconds>, key: &str, problems: &mut Problems<'_>) -> Option<u32> {
    let millis = duration_millis(value, key, (0, u64::from(u32::MAX)), problems)?;
    u32::try_from(millis).ok()
}

#[cfg(test)]
mod tests {
    use crate::codes::ErrorCode;
    use crate::config::{check_config, load_config};
    use crate::proto::{self, request::RequestType};

    fn cluster_with(health_check: &str) -> String {
        format!("[clusters.alpha]\nhealth_check = {health_check}\n")
    }

    fn loaded_check(health_check: &str) -> Option<proto::HealthCheck> {
        let loaded = load_config(&cluster_with(health_check)).ok()?;
        loaded.requests().find_map(|r| match &r.request_type {
            Some(RequestType::AddCluster(c)) => c.health_check,
            _ => None,
        })
    }

    #[test]
    fn durations_take_their_unit_and_integers_are_seconds() {
        let check = loaded_check(
            "{ kind = \"tls\", interval = \"1500ms\", timeout = 1, rise = 4, fall = 5 }",
        );
        assert_eq!(
            check,
            Some(proto::HealthCheck {
                kind: proto::HealthCheckKind::Tls as i32,
                interval_ms: Some(1_500),
                timeout_ms: Some(1_000),
                rise: Some(4),
                fall: Some(5),
            })
        );
        let defaults = loaded_check("{}");
        assert_eq!(
            defaults.map(|c| (c.kind, c.interval_ms)),
            Some((proto::HealthCheckKind::Tcp as i32, None)),
            "unset fields stay unset in the request: the state resolves them"
        );
    }

    #[test]
    fn each_bad_value_is_located_with_its_code() {
        let located = |health_check: &str| -> Vec<(usize, usize, ErrorCode)> {
            check_config(&cluster_with(health_check))
                .iter()
                .map(|p| {
                    let (line, column) = p.location.map_or((0, 0), |at| (at.line, at.column));
                    (line, column, p.code)
                })
                .collect()
        };
        assert_eq!(
            located("{ kind = \"udp\" }"),
            vec![(2, 25, ErrorCode::InvalidValue)]
        );
        assert_eq!(
            located("{ interval = \"soon\" }"),
            vec![(2, 29, ErrorCode::InvalidValue)]
        );
        assert_eq!(
            located("{ interval = -1 }"),
            vec![(2, 29, ErrorCode::InvalidValue)]
        );
        assert_eq!(
            located("{ rise = 0 }"),
            vec![(2, 25, ErrorCode::InvalidValue)]
        );
        assert_eq!(
            located("{ interval = \"1s\", timeout = \"2s\" }"),
            vec![(1, 1, ErrorCode::InvalidTimeout)],
            "a timeout past the interval is the cluster's refusal, at its table"
        );
        assert_eq!(
            located("{ kind = \"tcp\", every = \"1s\" }")
                .first()
                .map(|p| p.2),
            Some(ErrorCode::UnknownKey)
        );
    }
}
