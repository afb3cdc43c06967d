//! Durations as an operator writes them, in the config file and on the
//! command line: a bare integer in the setting's historical unit, or a
//! string with its unit (`"1500ms"`, `"5s"`, `"2m"`, `"1h"`).
//!
//! Owns: [`Unit`] (the unit a bare integer is read in), parsing either form
//! into whole milliseconds ([`parse_setting`], [`millis_of_text`]), and
//! showing a millisecond count the way the config would write it
//! ([`shown`]). Must never: know which key has which unit or range; the
//! config loader and the CLI say that.
//!
//! Milliseconds are the finest unit preread carries: a string that needs a
//! finer one (`"1500us"`) is refused rather than rounded, so a value never
//! means less than it says.

use core::fmt;
use std::time::Duration;

/// The unit a bare integer of a duration setting is read in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// `sni_preread_timeout`, `server_first_timeout`.
    Milliseconds,
    /// `front_timeout`, `back_timeout`, `connect_timeout`,
    /// `soft_stop_grace`, `command_client_timeout`, `tcp_keepalive_idle`,
    /// `tcp_keepalive_interval`, `resolve_interval`, a `health_check`'s
    /// `interval` and `timeout`.
    Seconds,
}

impl Unit {
    /// Milliseconds in one of this unit.
    #[must_use]
    pub const fn millis(self) -> u64 {
        match self {
            Self::Milliseconds => 1,
            Self::Seconds => 1_000,
        }
    }

    /// The unit's name, plural, as the documentation writes it.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Self::Milliseconds => "milliseconds",
            Self::Seconds => "seconds",
        }
    }

    /// What a setting of this unit accepts, for type errors and `--help`.
    #[must_use]
    pub const fn accepted(self) -> &'static str {
        match self {
            Self::Milliseconds => {
                "milliseconds as an integer or a duration string like \"5s\" or \"1500ms\""
            }
            Self::Seconds => "seconds as an integer or a duration string like \"5s\" or \"1500ms\"",
        }
    }
}

/// A duration string that preread cannot take.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DurationError {
    /// Not a duration: no number, an unknown unit, a stray character.
    Unreadable {
        /// The text as written.
        text: String,
        /// What the parser stumbled on.
        reason: String,
    },
    /// A part below a millisecond (`"1500us"`).
    BelowMillisecond {
        /// The text as written.
        text: String,
    },
    /// More milliseconds than 64 bits hold.
    TooLong {
        /// The text as written.
        text: String,
    },
}

impl fmt::Display for DurationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unreadable { text, reason } => write!(
                f,
                "\"{text}\" is not a duration ({reason}): write a number and a unit, such as \
                 \"1500ms\", \"5s\", \"2m\" or \"1h\""
            ),
            Self::BelowMillisecond { text } => write!(
                f,
                "\"{text}\" is not a whole number of milliseconds, the finest unit preread \
                 carries: round it to ms, such as \"2ms\""
            ),
            Self::TooLong { text } => write!(f, "\"{text}\" is too long a duration"),
        }
    }
}

impl core::error::Error for DurationError {}

/// The whole milliseconds of a duration string such as `"1500ms"`, `"5s"`,
/// `"2m 30s"` or `"1h"`.
pub fn millis_of_text(text: &str) -> Result<u64, DurationError> {
    let parsed = humantime::parse_duration(text.trim()).map_err(|error| match error {
        humantime::DurationError::NumberOverflow => DurationError::TooLong {
            text: text.to_owned(),
        },
        other => DurationError::Unreadable {
            text: text.to_owned(),
            reason: other.to_string(),
        },
    })?;
    whole_millis(parsed).ok_or_else(|| {
        if parsed.subsec_nanos() % 1_000_000 == 0 {
            DurationError::TooLong {
                text: text.to_owned(),
            }
        } else {
            DurationError::BelowMillisecond {
                text: text.to_owned(),
            }
        }
    })
}

fn whole_millis(duration: Duration) -> Option<u64> {
    if duration.subsec_nanos() % 1_000_000 != 0 {
        return None;
    }
    u64::try_from(duration.as_millis()).ok()
}

/// A command-line duration that preread cannot take, with the unit a bare
/// integer of that option is read in.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SettingError {
    /// A bare integer whose milliseconds 64 bits do not hold.
    TooLong {
        /// The digits as written.
        count: String,
        /// The option's unit.
        unit: Unit,
    },
    /// A duration string that is not one preread carries.
    Text {
        /// Why the string was refused.
        error: DurationError,
        /// The option's unit, which a bare integer would be read in.
        unit: Unit,
    },
}

impl fmt::Display for SettingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TooLong { count, unit } => write!(
                f,
                "{count} {} is too long a duration: use a smaller count",
                unit.name()
            ),
            Self::Text { error, unit } => write!(f, "{error}; a bare integer is {}", unit.name()),
        }
    }
}

impl core::error::Error for SettingError {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        match self {
            Self::TooLong { .. } => None,
            Self::Text { error, .. } => Some(error),
        }
    }
}

/// A command-line value: a bare integer in `unit`, or a duration string.
/// Returns whole milliseconds; the message of an error is for `--help`
/// readers.
pub fn parse_setting(text: &str, unit: Unit) -> Result<u64, SettingError> {
    let trimmed = text.trim();
    if !trimmed.is_empty() && trimmed.bytes().all(|b| b.is_ascii_digit()) {
        return trimmed
            .parse::<u64>()
            .ok()
            .and_then(|count| count.checked_mul(unit.millis()))
            .ok_or_else(|| SettingError::TooLong {
                count: trimmed.to_owned(),
                unit,
            });
    }
    millis_of_text(trimmed).map_err(|error| SettingError::Text { error, unit })
}

/// A millisecond count as the config would write it: `"1500ms"`, `"5s"`,
/// `"2m"`, `"1h"`, or in parts when one unit would need a large count
/// (`"16h 40m"`). The text parses back to the same count.
#[must_use]
pub fn shown(millis: u64) -> String {
    let seconds = millis / 1_000;
    if millis % 1_000 != 0 {
        if millis < 60_000 {
            return format!("{millis}ms");
        }
    } else if seconds < 60 {
        return format!("{seconds}s");
    } else if seconds % 3_600 == 0 {
        return format!("{}h", seconds / 3_600);
    } else if seconds % 60 == 0 && seconds < 3_600 {
        return format!("{}m", seconds / 60);
    }
    humantime::format_duration(Duration::from_millis(millis)).to_string()
}

/// [`shown`] of a [`Duration`], whole milliseconds (a longer one than
/// 64 bits of them shows as the longest).
#[must_use]
pub fn shown_duration(duration: Duration) -> String {
    shown(u64::try_from(duration.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_carry_their_unit() {
        for (text, millis) in [
            ("1500ms", 1_500),
            ("5s", 5_000),
            ("2m", 120_000),
            ("1h", 3_600_000),
            ("2m 30s", 150_000),
            (" 1s ", 1_000),
            ("0s", 0),
        ] {
            assert_eq!(millis_of_text(text), Ok(millis), "{text}");
        }
    }

    #[test]
    fn strings_preread_cannot_carry_are_refused() {
        assert!(matches!(
            millis_of_text("1500us"),
            Err(DurationError::BelowMillisecond { .. })
        ));
        assert!(matches!(
            millis_of_text("5 parsecs"),
            Err(DurationError::Unreadable { .. })
        ));
        assert!(matches!(
            millis_of_text(""),
            Err(DurationError::Unreadable { .. })
        ));
        assert!(matches!(
            millis_of_text("99999999999999999999h"),
            Err(DurationError::TooLong { .. })
        ));
        let shown = millis_of_text("5 parsecs").map_err(|e| e.to_string());
        assert!(
            shown.as_ref().is_err_and(|e| e.contains("\"5 parsecs\"")),
            "{shown:?}"
        );
    }

    #[test]
    fn bare_integers_keep_the_unit_of_their_setting() {
        assert_eq!(parse_setting("60", Unit::Seconds), Ok(60_000));
        assert_eq!(parse_setting("300", Unit::Milliseconds), Ok(300));
        assert_eq!(parse_setting("1500ms", Unit::Seconds), Ok(1_500));
        assert_eq!(parse_setting("5s", Unit::Milliseconds), Ok(5_000));
    }

    #[test]
    fn a_refused_setting_says_what_to_write() {
        let too_long = parse_setting("18446744073709551615", Unit::Seconds);
        assert!(
            matches!(
                too_long,
                Err(SettingError::TooLong {
                    unit: Unit::Seconds,
                    ..
                })
            ),
            "{too_long:?}"
        );
        let shown = too_long.map_err(|e| e.to_string());
        assert_eq!(
            shown,
            Err("18446744073709551615 seconds is too long a duration: use a smaller count".into())
        );
        let unreadable = parse_setting("soon", Unit::Seconds).map_err(|e| e.to_string());
        assert!(
            unreadable
                .as_ref()
                .is_err_and(|e| e.contains("\"soon\" is not a duration")
                    && e.contains("such as \"1500ms\"")
                    && e.ends_with("; a bare integer is seconds")),
            "{unreadable:?}"
        );
    }

    #[test]
    fn shown_durations_parse_back() {
        for millis in [
            0, 1, 999, 1_000, 1_500, 60_000, 61_500, 90_000, 3_600_000, 60_000_000, 86_400_000,
            90_061_001,
        ] {
            let text = shown(millis);
            assert_eq!(millis_of_text(&text), Ok(millis), "{text}");
        }
        assert_eq!(shown(60_000), "1m");
        assert_eq!(shown(30_000), "30s");
        assert_eq!(shown(1_500), "1500ms");
        assert_eq!(shown(7_200_000), "2h");
        assert_eq!(shown(60_000_000), "16h 40m");
        assert_eq!(shown_duration(Duration::from_secs(30)), "30s");
    }
}
