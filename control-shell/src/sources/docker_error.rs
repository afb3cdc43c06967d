//! Why the Docker source lost its Engine API: a call that failed, a list
//! that is not one, or an event stream that ended or broke.
//!
//! Owns: [`DockerError`], whose message the source reports after `Docker
//! at SOCKET is unreachable:` (logged, and shown by `source list`). Must
//! never: lose the error behind a failure (it is part of the message).

use core::fmt;
use std::io;

/// A failed exchange with the Engine API; the source reconnects.
#[derive(Debug)]
pub(super) enum DockerError {
    /// A request got no answer, or an error status.
    Call {
        call: &'static str,
        error: ureq::Error,
    },
    /// The container list's body could not be read whole.
    ReadList(ureq::Error),
    /// The container list is not the JSON the API documents.
    NotAList(serde_json::Error),
    /// Reading the event stream failed.
    StreamBroke(io::Error),
    /// Docker closed the event stream.
    StreamEnded,
    /// An event line over `max` bytes, the most the source reads of one.
    EventTooLong { max: u64 },
    /// An event line that is not JSON.
    EventNotJson(serde_json::Error),
}

impl fmt::Display for DockerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Call { call, error } => write!(f, "{call}: {error}"),
            Self::ReadList(error) => {
                write!(f, "GET /containers/json: reading the answer: {error}")
            }
            Self::NotAList(error) => {
                write!(f, "GET /containers/json: not a container list: {error}")
            }
            Self::StreamBroke(error) => write!(f, "the event stream broke: {error}"),
            Self::StreamEnded => f.write_str("the event stream ended"),
            Self::EventTooLong { max } => {
                write!(
                    f,
                    "an event line is over {max} bytes: the stream is dropped"
                )
            }
            Self::EventNotJson(error) => write!(f, "an event is not JSON: {error}"),
        }
    }
}

impl core::error::Error for DockerError {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        match self {
            Self::Call { error, .. } | Self::ReadList(error) => Some(error),
            Self::NotAList(error) | Self::EventNotJson(error) => Some(error),
            Self::StreamBroke(error) => Some(error),
            Self::StreamEnded | Self::EventTooLong { .. } => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_loss_names_the_call_or_the_stream() {
        let not_json = serde_json::from_str::<u8>("{").err();
        let Some(error) = not_json else {
            panic!("`{{` is not JSON");
        };
        let shown = DockerError::NotAList(error).to_string();
        assert!(
            shown.starts_with("GET /containers/json: not a container list: "),
            "{shown}"
        );
        assert_eq!(
            DockerError::EventTooLong { max: 1024 }.to_string(),
            "an event line is over 1024 bytes: the stream is dropped"
        );
        assert_eq!(
            DockerError::StreamEnded.to_string(),
            "the event stream ended"
        );
    }
}
