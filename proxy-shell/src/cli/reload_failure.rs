//! Why `preread reload` got no report back from the proxy.
//!
//! Owns: [`ReloadFailure`], each message saying what went wrong with which
//! part and what to check. Must never: stand for a config with problems
//! (those are listed line by line, with their codes, before the exit) or
//! for a change the proxy skipped (that is in the report).

use core::fmt;

use command::channel::ChannelError;

use preread_worker::answer_code::AnswerCode;

/// A reload that ended without the proxy's report.
#[derive(Debug)]
pub(super) enum ReloadFailure {
    /// The proxy did not answer; `part` is `(index from 1, count)` when
    /// the declarations went in parts.
    NoAnswer {
        part: Option<(usize, usize)>,
        error: ChannelError,
    },
    /// The proxy refused the request, with its answer code and message.
    Refused { code: String, message: String },
    /// The proxy answered, but not with a report.
    NoReport,
}

impl fmt::Display for ReloadFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoAnswer {
                part: Some((index, count)),
                error,
            } => write!(
                f,
                "{}: the proxy did not answer part {index} of {count}: {error}",
                AnswerCode::NoAnswer
            ),
            Self::NoAnswer { part: None, error } => write!(
                f,
                "{}: the proxy did not answer: {error}",
                AnswerCode::NoAnswer
            ),
            Self::Refused { code, message } => write!(f, "{code}: {message}"),
            Self::NoReport => f.write_str(
                "the proxy answered without a report: is it older than this preread? \
                 (`preread status` shows its version)",
            ),
        }
    }
}

impl core::error::Error for ReloadFailure {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        match self {
            Self::NoAnswer { error, .. } => Some(error),
            Self::Refused { .. } | Self::NoReport => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_failure_names_its_code_or_what_to_check() {
        let part = ReloadFailure::NoAnswer {
            part: Some((2, 3)),
            error: ChannelError::Timeout,
        };
        let shown = part.to_string();
        assert!(
            shown.starts_with(&format!(
                "{}: the proxy did not answer part 2 of 3: ",
                AnswerCode::NoAnswer
            )),
            "{shown}"
        );
        assert!(
            shown.ends_with(&ChannelError::Timeout.to_string()),
            "{shown}"
        );
        let refused = ReloadFailure::Refused {
            code: "E_BUSY".into(),
            message: "try again".into(),
        };
        assert_eq!(refused.to_string(), "E_BUSY: try again");
        assert!(
            ReloadFailure::NoReport
                .to_string()
                .contains("`preread status` shows its version")
        );
    }
}
