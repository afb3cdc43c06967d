//! Why `preread inspect` cannot take an input file or the listener it was
//! asked to decide for.
//!
//! Owns: [`InspectInputError`] and [`ListenerChoiceError`], each message
//! naming the file or flag to fix. Must never: print or choose the exit
//! status (`offline` does: every one is bad usage).

use core::fmt;
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;

use command::config::ConfigProblem;

use crate::inspect::InputError;

/// An input file of `inspect` that cannot be read as bytes.
#[derive(Debug)]
pub(super) enum InspectInputError {
    Read {
        path: PathBuf,
        error: io::Error,
    },
    /// `--hex`, but the file is not UTF-8 text.
    NotText {
        path: PathBuf,
    },
    /// `--hex`, but the text is not hex.
    Hex {
        path: PathBuf,
        error: InputError,
    },
}

impl fmt::Display for InspectInputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Read { path, error } => write!(f, "cannot read {}: {error}", path.display()),
            Self::NotText { path } => write!(
                f,
                "{}: --hex input is not text (leave out --hex for a raw capture)",
                path.display()
            ),
            Self::Hex { path, error } => write!(f, "{}: {error}", path.display()),
        }
    }
}

impl core::error::Error for InspectInputError {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        match self {
            Self::Read { error, .. } => Some(error),
            Self::NotText { .. } => None,
            Self::Hex { error, .. } => Some(error),
        }
    }
}

/// `inspect --config`: no listener of that config to decide for.
#[derive(Debug)]
pub(super) enum ListenerChoiceError {
    /// The config does not load.
    Config {
        config: PathBuf,
        problems: Vec<ConfigProblem>,
    },
    /// `--listener` is not an address.
    NotAnAddress { text: String },
    /// No `--listener`, and the config declares none.
    NoListener { config: PathBuf },
    /// `--listener` names one the config does not declare.
    Unknown {
        config: PathBuf,
        address: SocketAddr,
    },
}

impl fmt::Display for ListenerChoiceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Config { config, problems } => {
                write!(f, "{} is not a valid config:", config.display())?;
                problems
                    .iter()
                    .try_for_each(|problem| write!(f, "\n  {problem}"))
            }
            Self::NotAnAddress { text } => write!(
                f,
                "--listener {text:?} is not an ip:port address: give one the config declares, \
                 such as 127.0.0.1:8443"
            ),
            Self::NoListener { config } => write!(
                f,
                "{} declares no listener: add a [[listeners]] entry, or inspect without --config",
                config.display()
            ),
            Self::Unknown { config, address } => write!(
                f,
                "{} has no listener {address}: give --listener one the config declares",
                config.display()
            ),
        }
    }
}

impl core::error::Error for ListenerChoiceError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_refusal_names_the_file_or_flag_to_fix() {
        let config = PathBuf::from("preread.toml");
        assert_eq!(
            ListenerChoiceError::Unknown {
                config: config.clone(),
                address: ([127, 0, 0, 1], 9).into(),
            }
            .to_string(),
            "preread.toml has no listener 127.0.0.1:9: give --listener one the config declares"
        );
        assert!(
            ListenerChoiceError::NotAnAddress { text: "web".into() }
                .to_string()
                .starts_with("--listener \"web\" is not an ip:port address: ")
        );
        assert!(
            ListenerChoiceError::NoListener { config }
                .to_string()
                .contains("add a [[listeners]] entry")
        );
        let shown = InspectInputError::NotText {
            path: PathBuf::from("capture.bin"),
        }
        .to_string();
        assert_eq!(
            shown,
            "capture.bin: --hex input is not text (leave out --hex for a raw capture)"
        );
    }
}
