//! TCP keepalive of the proxy's sockets: the `tcp_keepalive*` global keys.
//!
//! Owns: [`TcpKeepalive`], its defaults, and the ranges of its three values
//! (what Linux accepts for `TCP_KEEPIDLE`, `TCP_KEEPINTVL` and
//! `TCP_KEEPCNT`, so a value the kernel would refuse is a located problem
//! instead of a silent failure on every socket). Must never: touch a
//! socket; the proxy applies the values.

use toml::Spanned;

use super::lines::{Problems, duration_millis, ranged};
use super::raw::{RawConfig, Seconds};
use crate::codes::ErrorCode;
use crate::duration;

/// Default of `tcp_keepalive_idle`, in seconds.
pub const DEFAULT_KEEPALIVE_IDLE_S: u32 = 60;
/// Default of `tcp_keepalive_interval`, in seconds.
pub const DEFAULT_KEEPALIVE_INTERVAL_S: u32 = 10;
/// Default of `tcp_keepalive_count`, in probes.
pub const DEFAULT_KEEPALIVE_COUNT: u32 = 6;

/// The largest `TCP_KEEPIDLE` and `TCP_KEEPINTVL` Linux takes, in seconds.
const MAX_KEEPALIVE_S: u64 = 32_767;
/// The largest `TCP_KEEPCNT` Linux takes.
const MAX_KEEPALIVE_COUNT: i64 = 127;

/// Keepalive probes on both sides of every session: after `idle_s` seconds
/// without traffic, a probe every `interval_s` seconds; `count` probes
/// unanswered and the kernel resets the connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TcpKeepalive {
    /// Seconds of silence before the first probe (`TCP_KEEPIDLE`).
    pub idle_s: u32,
    /// Seconds between probes (`TCP_KEEPINTVL`).
    pub interval_s: u32,
    /// Unanswered probes before the connection is dropped (`TCP_KEEPCNT`).
    pub count: u32,
}

impl Default for TcpKeepalive {
    fn default() -> Self {
        Self {
            idle_s: DEFAULT_KEEPALIVE_IDLE_S,
            interval_s: DEFAULT_KEEPALIVE_INTERVAL_S,
            count: DEFAULT_KEEPALIVE_COUNT,
        }
    }
}

/// The keepalive of the file: on with the defaults unless `tcp_keepalive =
/// false`; each value in range or reported, its default standing in.
pub(super) fn tcp_keepalive(raw: &RawConfig, problems: &mut Problems<'_>) -> Option<TcpKeepalive> {
    let mut keepalive = TcpKeepalive::default();
    for (value, key, slot) in [
        (
            &raw.tcp_keepalive_idle,
            "tcp_keepalive_idle",
            &mut keepalive.idle_s,
        ),
        (
            &raw.tcp_keepalive_interval,
            "tcp_keepalive_interval",
            &mut keepalive.interval_s,
        ),
    ] {
        if let Some(value) = value
            && let Some(seconds) = whole_seconds(value, key, problems)
        {
            *slot = seconds;
        }
    }
    if let Some(count) = &raw.tcp_keepalive_count
        && let Some(n) = at_most(count, "tcp_keepalive_count", MAX_KEEPALIVE_COUNT, problems)
    {
        keepalive.count = n;
    }
    match &raw.tcp_keepalive {
        Some(on) if !*on.get_ref() => None,
        _ => Some(keepalive),
    }
}

/// A keepalive duration in `[1 s, MAX_KEEPALIVE_S]`: the kernel counts
/// these in whole seconds, so a finer string is a problem, not rounded.
fn whole_seconds(value: &Spanned<Seconds>, key: &str, problems: &mut Problems<'_>) -> Option<u32> {
    let millis = duration_millis(value, key, (1_000, MAX_KEEPALIVE_S * 1_000), problems)?;
    if millis % 1_000 != 0 {
        problems.push(
            value.span().start,
            ErrorCode::InvalidValue,
            format!(
                "{key} = {} is not whole seconds: the kernel counts keepalive time in seconds, \
                 so write e.g. \"{}s\"",
                duration::shown(millis),
                millis.div_ceil(1_000)
            ),
        );
        return None;
    }
    u32::try_from(millis / 1_000).ok()
}

/// A value in `[1, max]`, or a problem at it.
fn at_most(value: &Spanned<i64>, key: &str, max: i64, problems: &mut Problems<'_>) -> Option<u32> {
    let n = ranged::<u32>(value, key, 1, problems)?;
    if i64::from(n) > max {
        problems.push(
            value.span().start,
            ErrorCode::InvalidValue,
            format!("{key} = {n} is more than the kernel accepts: use at most {max}"),
        );
        return None;
    }
    Some(n)
}

#[cfg(test)]
mod tests {
    use super::TcpKeepalive;
    use crate::codes::ErrorCode;
    use crate::config::{Location, check_config, load_config};

    fn keepalive(text: &str) -> Option<TcpKeepalive> {
        match load_config(text) {
            Ok(loaded) => loaded.global.tcp_keepalive,
            Err(problems) => panic!("{problems:?}"),
        }
    }

    #[test]
    fn on_by_default_with_the_documented_values() {
        let expected = TcpKeepalive {
            idle_s: 60,
            interval_s: 10,
            count: 6,
        };
        assert_eq!(keepalive(""), Some(expected));
        assert_eq!(keepalive("tcp_keepalive = true"), Some(expected));
    }

    #[test]
    fn each_value_is_set_on_its_own_and_false_turns_it_off() {
        assert_eq!(
            keepalive("tcp_keepalive_idle = 7\ntcp_keepalive_count = 2"),
            Some(TcpKeepalive {
                idle_s: 7,
                interval_s: 10,
                count: 2,
            })
        );
        assert_eq!(
            keepalive("tcp_keepalive_interval = 3"),
            Some(TcpKeepalive {
                interval_s: 3,
                ..TcpKeepalive::default()
            })
        );
        assert_eq!(
            keepalive("tcp_keepalive = false\ntcp_keepalive_idle = 7"),
            None
        );
    }

    #[test]
    fn out_of_range_values_are_located_problems() {
        let problems = check_config(
            "tcp_keepalive_idle = 0\ntcp_keepalive_interval = 32768\ntcp_keepalive_count = 128\n",
        );
        let found: Vec<(usize, ErrorCode)> = problems
            .iter()
            .map(|p| (p.location.map_or(0, |l: Location| l.line), p.code))
            .collect();
        assert_eq!(
            found,
            [
                (1, ErrorCode::InvalidValue),
                (2, ErrorCode::InvalidValue),
                (3, ErrorCode::InvalidValue)
            ]
        );
        assert!(
            problems[1]
                .message
                .contains("use at most 9h 6m 7s (32767000 ms)"),
            "{}",
            problems[1].message
        );
        assert!(
            problems[2].message.contains("use at most 127"),
            "{}",
            problems[2].message
        );
        assert!(
            problems[0].message.contains("at least 1s"),
            "{}",
            problems[0].message
        );
    }

    /// The two durations take strings too, in whole seconds: the kernel
    /// has no finer unit.
    #[test]
    fn durations_take_strings_of_whole_seconds() {
        assert_eq!(
            keepalive("tcp_keepalive_idle = \"2m\"\ntcp_keepalive_interval = \"15s\""),
            Some(TcpKeepalive {
                idle_s: 120,
                interval_s: 15,
                ..TcpKeepalive::default()
            })
        );
        let problems = check_config("tcp_keepalive_idle = \"1500ms\"\n");
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert_eq!(problems[0].code, ErrorCode::InvalidValue);
        assert!(
            problems[0].message.contains("is not whole seconds")
                && problems[0].message.contains("\"2s\""),
            "{}",
            problems[0].message
        );
    }
}
