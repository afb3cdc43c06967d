//! The values of `preread`'s flags that clap cannot read on its own:
//! durations in a setting's unit, `--watch` intervals, reject reasons,
//! `inspect --reads` sizes and the config's enumerated spellings.
//!
//! Owns: the value parsers `args` names and [`ArgValueError`], whose
//! message clap prints after `invalid value '…' for '--flag'`. Must never:
//! name a flag (clap does, in front of the message) or accept a value the
//! config file would refuse for the same setting.

use core::fmt;

use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
use command::duration::{self, SettingError, Unit};
use command::spelling::{self, Spelling};
use preread_core::{FallbackReason, RejectReason};

/// The shortest `--watch` interval: each refresh asks every worker, so a
/// tighter loop would load the proxy for a table nobody can read.
const WATCH_MIN_MS: u64 = 100;

/// A flag value `preread` refuses, worded to say what to write instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum ArgValueError {
    /// Not a duration in the flag's unit.
    Duration(SettingError),
    /// A duration longer than the `uint32` of milliseconds that carries it.
    TooLongForU32 { text: String },
    /// A `--watch` interval under [`WATCH_MIN_MS`].
    WatchTooShort { millis: u64 },
    /// A `--reason` that is neither a reject nor a fallback reason.
    UnknownReason,
    /// An `inspect --reads` size of 0.
    ZeroRead,
    /// An `inspect --reads` size that is not a whole number.
    NotAByteCount { text: String },
    /// A spelling the config's table does not hold.
    UnknownSpelling { text: String },
    /// A `--rate` that is not `RATE/PER`.
    NotARate { text: String },
}

impl fmt::Display for ArgValueError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Duration(error) => error.fmt(f),
            Self::TooLongForU32 { text } => write!(
                f,
                "{text} is too long: at most {}",
                duration::shown(u64::from(u32::MAX))
            ),
            Self::WatchTooShort { millis } => write!(
                f,
                "{} is too short an interval: give at least {}, such as 2, 2s or 500ms",
                duration::shown(*millis),
                duration::shown(WATCH_MIN_MS)
            ),
            Self::UnknownReason => {
                f.write_str("unknown reason; use one of ")?;
                let mut known = RejectReason::ALL
                    .iter()
                    .map(|r| r.as_str())
                    .chain(FallbackReason::ALL.iter().map(|r| r.as_str()));
                if let Some(first) = known.next() {
                    f.write_str(first)?;
                }
                known.try_for_each(|reason| write!(f, ", {reason}"))
            }
            Self::ZeroRead => f.write_str("a read adds at least one byte: use sizes of 1 or more"),
            Self::NotAByteCount { text } => write!(
                f,
                "{text:?} is not a byte count: use a whole number of bytes, such as 512"
            ),
            Self::UnknownSpelling { text } => {
                write!(f, "{} is not one of the values", spelling::quoted(text))
            }
            Self::NotARate { text } => write!(
                f,
                "{text:?} is not a rate: write connections/duration, such as 50/1s or 600/1m"
            ),
        }
    }
}

impl core::error::Error for ArgValueError {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        match self {
            Self::Duration(error) => Some(error),
            _ => None,
        }
    }
}

impl From<SettingError> for ArgValueError {
    fn from(error: SettingError) -> Self {
        Self::Duration(error)
    }
}

/// A value of an enumerated setting, spelt as the config file spells it
/// (`round_robin`, shown by `--help`), or as one of its other spellings
/// (`round-robin`, Sōzu's `ROUND_ROBIN`): the table is the config's own.
pub(super) fn spelt<T: Copy + Send + Sync + 'static>(
    table: &'static [Spelling<T>],
) -> impl TypedValueParser<Value = T> {
    PossibleValuesParser::new(table.iter().map(|spelling| {
        PossibleValue::new(spelling.name).aliases(spelling.aliases.iter().copied())
    }))
    .try_map(move |text| {
        spelling::parse(table, &text).ok_or(ArgValueError::UnknownSpelling { text })
    })
}

/// A duration flag: a bare integer in `unit`, as the config's key takes
/// it, or a string with its unit (`1500ms`, `5s`); whole milliseconds.
pub(super) fn millis(
    unit: Unit,
) -> impl Fn(&str) -> Result<u64, ArgValueError> + Clone + Send + Sync + 'static {
    move |text| Ok(duration::parse_setting(text, unit)?)
}

/// A duration flag carried in a `uint32` of milliseconds.
pub(super) fn millis_u32(
    unit: Unit,
) -> impl Fn(&str) -> Result<u32, ArgValueError> + Clone + Send + Sync + 'static {
    move |text| {
        let millis = duration::parse_setting(text, unit)?;
        u32::try_from(millis).map_err(|_| ArgValueError::TooLongForU32 {
            text: text.to_owned(),
        })
    }
}

/// A `--rate`: `RATE/PER` (`50/1s`; a bare `PER` is milliseconds, as
/// the config's `per`), as the connection count and the milliseconds.
/// Whether it is a rate (zeroes, a `per` over a day) is the proxy's to
/// judge (E121), as for the config file.
pub(super) fn connection_rate(text: &str) -> Result<(u32, u64), ArgValueError> {
    let not_a_rate = || ArgValueError::NotARate {
        text: text.to_owned(),
    };
    let (rate, per) = text.split_once('/').ok_or_else(not_a_rate)?;
    let rate = rate.trim().parse::<u32>().map_err(|_| not_a_rate())?;
    let per = duration::parse_setting(per.trim(), Unit::Milliseconds)?;
    Ok((rate, per))
}

/// A `--watch` interval, in milliseconds.
pub(super) fn watch_interval(text: &str) -> Result<u64, ArgValueError> {
    let millis = duration::parse_setting(text, Unit::Seconds)?;
    if millis < WATCH_MIN_MS {
        return Err(ArgValueError::WatchTooShort { millis });
    }
    Ok(millis)
}

/// A reason `rejects --reason` can match: a reject or a fallback reason.
pub(super) fn reject_reason(text: &str) -> Result<String, ArgValueError> {
    let known = RejectReason::ALL
        .iter()
        .map(|r| r.as_str())
        .chain(FallbackReason::ALL.iter().map(|r| r.as_str()))
        .any(|reason| reason == text);
    if known {
        Ok(text.to_owned())
    } else {
        Err(ArgValueError::UnknownReason)
    }
}

/// One size of `inspect --reads`: a read adds at least one byte.
pub(super) fn read_size(text: &str) -> Result<usize, ArgValueError> {
    match text.trim().parse::<usize>() {
        Ok(0) => Err(ArgValueError::ZeroRead),
        Ok(size) => Ok(size),
        Err(_) => Err(ArgValueError::NotAByteCount {
            text: text.to_owned(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_refused_value_says_what_to_write() {
        assert_eq!(
            watch_interval("50ms").map_err(|e| e.to_string()),
            Err(
                "50ms is too short an interval: give at least 100ms, such as 2, 2s or 500ms".into()
            )
        );
        assert_eq!(watch_interval("2"), Ok(2_000));
        assert!(
            millis(Unit::Seconds)("soon")
                .is_err_and(|e| e.to_string().ends_with("a bare integer is seconds")),
            "the duration's own message, with the flag's unit"
        );
        assert_eq!(
            millis_u32(Unit::Seconds)("5000000").map_err(|e| e.to_string()),
            Err(format!(
                "5000000 is too long: at most {}",
                duration::shown(u64::from(u32::MAX))
            ))
        );
        assert_eq!(
            read_size("ten").map_err(|e| e.to_string()),
            Err("\"ten\" is not a byte count: use a whole number of bytes, such as 512".into())
        );
        assert_eq!(read_size("0"), Err(ArgValueError::ZeroRead));
        assert_eq!(read_size(" 7 "), Ok(7));
        let reason = reject_reason("no_such_reason").map_err(|e| e.to_string());
        assert!(
            reason
                .as_ref()
                .is_err_and(|e| e.starts_with("unknown reason; use one of ")
                    && e.contains(RejectReason::ALL[0].as_str())
                    && !e.ends_with(", ")),
            "{reason:?}"
        );
        assert_eq!(
            reject_reason(RejectReason::ALL[0].as_str()),
            Ok(RejectReason::ALL[0].as_str().to_owned())
        );
    }
}
