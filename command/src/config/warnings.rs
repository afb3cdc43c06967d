//! The warnings of a config file: values preread accepts but that are
//! probably not what the operator meant, most often a number in the wrong
//! unit (`sni_preread_timeout = 5` is 5 ms, `front_timeout = 60000` is
//! 16 hours).
//!
//! Owns: every `W` rule and its threshold, as `doc/configure.md` §3.3
//! lists them. Must never: refuse anything (a warning is printed and the
//! value used as written), or report a value the other checks refuse: a
//! value that does not convert is left to them.

use toml::Spanned;

use super::lines::{Problems, millis_of};
use super::raw::{RawConfig, RawDuration};
use crate::codes::ErrorCode;
use crate::duration::{self, Unit};

/// Under this, a ClientHello over a slow link may not make it (W001).
const SHORTEST_PREREAD_MS: u64 = 50;
/// Over this, an idle session holds its socket for more than a day (W002).
const LONGEST_INACTIVITY_MS: u64 = 24 * 3_600 * 1_000;
/// Over this, a connect that has not completed is a backend that is gone
/// (W003).
const LONGEST_CONNECT_MS: u64 = 60 * 1_000;
/// A post-quantum ClientHello (X25519MLKEM768) is about 1,800 bytes
/// (W005).
const SMALLEST_PREREAD_CAP: i64 = 2_048;

pub(super) fn warnings(raw: &RawConfig, problems: &mut Problems<'_>) {
    for key in [
        (&raw.soft_stop_grace, "soft_stop_grace"),
        (&raw.command_client_timeout, "command_client_timeout"),
    ] {
        if let (Some(value), key) = key {
            seconds_like_millis(value, key, problems);
        }
    }
    for listener in &raw.listeners {
        let listener = listener.get_ref();
        for (value, key) in [
            (&listener.sni_preread_timeout, "sni_preread_timeout"),
            (&listener.server_first_timeout, "server_first_timeout"),
        ] {
            if let Some(value) = value {
                short_preread(value, key, problems);
            }
        }
        for (value, key, longest, code) in [
            (
                &listener.front_timeout,
                "front_timeout",
                LONGEST_INACTIVITY_MS,
                ErrorCode::InactivityTimeoutLong,
            ),
            (
                &listener.back_timeout,
                "back_timeout",
                LONGEST_INACTIVITY_MS,
                ErrorCode::InactivityTimeoutLong,
            ),
            (
                &listener.connect_timeout,
                "connect_timeout",
                LONGEST_CONNECT_MS,
                ErrorCode::ConnectTimeoutLong,
            ),
        ] {
            if let Some(value) = value {
                // One warning per value: the unit is the likelier mistake.
                if !seconds_like_millis(value, key, problems) {
                    too_long(value, key, longest, code, problems);
                }
            }
        }
        if let Some(cap) = &listener.sni_preread_max_bytes {
            let bytes = *cap.get_ref();
            if (preread_core::MIN_PREREAD_MAX_BYTES as i64..SMALLEST_PREREAD_CAP).contains(&bytes) {
                problems.push(
                    cap.span().start,
                    ErrorCode::PrereadCapSmall,
                    format!(
                        "sni_preread_max_bytes = {bytes} is under {SMALLEST_PREREAD_CAP} bytes: \
                         browsers with post-quantum key shares send ClientHellos of about 1,800 \
                         bytes, which this cap refuses as too_large"
                    ),
                );
            }
        }
    }
    for (id, cluster) in &raw.clusters.0 {
        let backends = &cluster.get_ref().backends;
        let drained = backends.iter().all(|backend| {
            backend
                .get_ref()
                .weight
                .as_ref()
                .is_some_and(|w| *w.get_ref() == 0)
        });
        if !backends.is_empty() && drained {
            problems.push(
                cluster.span().start,
                ErrorCode::NoBackendCanServe,
                format!(
                    "cluster `{}`: every backend has weight = 0, so none is ever picked and every \
                     connection routed here is refused as backend_unavailable",
                    id.get_ref()
                ),
            );
        }
    }
}

/// `key = 5` or `key = "5s"`, as the file writes it.
fn written<const SECONDS: bool>(value: &RawDuration<SECONDS>) -> String {
    match value {
        RawDuration::Integer(count) => count.to_string(),
        RawDuration::Text(text) => format!("\"{text}\""),
    }
}

fn short_preread<const SECONDS: bool>(
    value: &Spanned<RawDuration<SECONDS>>,
    key: &str,
    problems: &mut Problems<'_>,
) {
    let Ok(millis) = millis_of(value.get_ref()) else {
        return;
    };
    if millis == 0 || millis >= SHORTEST_PREREAD_MS {
        return;
    }
    let meant = match value.get_ref() {
        RawDuration::Integer(count) if RawDuration::<SECONDS>::UNIT == Unit::Milliseconds => {
            format!(
                "; a bare integer here is milliseconds: if seconds were meant, write \"{count}s\""
            )
        }
        _ => String::new(),
    };
    problems.push(
        value.span().start,
        ErrorCode::PrereadTimeoutShort,
        format!(
            "{key} = {} is {}, under {SHORTEST_PREREAD_MS} ms: a ClientHello over a slow or \
             distant link can take longer, and its client would be refused{meant}",
            written(value.get_ref()),
            duration::shown(millis)
        ),
    );
}

fn too_long<const SECONDS: bool>(
    value: &Spanned<RawDuration<SECONDS>>,
    key: &str,
    longest: u64,
    code: ErrorCode,
    problems: &mut Problems<'_>,
) {
    let Ok(millis) = millis_of(value.get_ref()) else {
        return;
    };
    if millis <= longest {
        return;
    }
    problems.push(
        value.span().start,
        code,
        format!(
            "{key} = {} is {}, over {}: lower it, unless so long a wait is meant",
            written(value.get_ref()),
            duration::shown(millis),
            duration::shown(longest)
        ),
    );
}

/// W004 for a bare integer of seconds that is a multiple of 1000; whether
/// it fired.
fn seconds_like_millis<const SECONDS: bool>(
    value: &Spanned<RawDuration<SECONDS>>,
    key: &str,
    problems: &mut Problems<'_>,
) -> bool {
    let RawDuration::Integer(count) = *value.get_ref() else {
        return false;
    };
    if !SECONDS || count < 1_000 || count % 1_000 != 0 {
        return false;
    }
    let Ok(millis) = millis_of(value.get_ref()) else {
        return false;
    };
    problems.push(
        value.span().start,
        ErrorCode::SecondsLikeMilliseconds,
        format!(
            "{key} = {count} is {count} seconds ({}): if milliseconds were meant, write \"{}\"; \
             to keep it, write \"{}\"",
            duration::shown(millis),
            duration::shown(millis / 1_000),
            duration::shown(millis)
        ),
    );
    true
}
