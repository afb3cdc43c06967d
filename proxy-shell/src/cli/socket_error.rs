//! Why a socket subcommand could not reach the proxy: no command socket
//! to try, or a channel that failed.
//!
//! Owns: [`NoSocket`] and [`SocketError`], each message saying what to
//! give or fix. Must never: print (the subcommand does, with its prefix)
//! or choose the exit status (a missing socket is bad usage in some
//! subcommands, a failure in others).

use core::fmt;
use std::path::PathBuf;

use command::channel::ChannelError;
use command::config::ConfigProblem;

/// No `--socket`, and the config that would name the socket does not load.
#[derive(Debug)]
pub(super) struct NoSocket {
    /// The config file read for its `command_socket`.
    pub(super) config: PathBuf,
    /// Why it does not load.
    pub(super) problems: Vec<ConfigProblem>,
}

impl fmt::Display for NoSocket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "cannot find the command socket: {} is not a valid config (give --socket PATH, or \
             fix it):",
            self.config.display()
        )?;
        self.problems
            .iter()
            .try_for_each(|problem| write!(f, "\n  {problem}"))
    }
}

impl core::error::Error for NoSocket {}

/// Either way of not reaching the proxy.
#[derive(Debug)]
pub(super) enum SocketError {
    NoSocket(NoSocket),
    /// The channel's message already asks whether the proxy runs on the
    /// path.
    Channel(ChannelError),
}

impl fmt::Display for SocketError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoSocket(error) => error.fmt(f),
            Self::Channel(error) => error.fmt(f),
        }
    }
}

impl core::error::Error for SocketError {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        match self {
            Self::NoSocket(error) => Some(error),
            Self::Channel(error) => Some(error),
        }
    }
}

impl From<NoSocket> for SocketError {
    fn from(error: NoSocket) -> Self {
        Self::NoSocket(error)
    }
}

impl From<ChannelError> for SocketError {
    fn from(error: ChannelError) -> Self {
        Self::Channel(error)
    }
}

#[cfg(test)]
mod tests {
    use command::config::load_global_settings_file;

    use super::*;

    #[test]
    fn a_missing_socket_says_to_give_one_or_fix_the_config() {
        let config = PathBuf::from("/nonexistent/preread.toml");
        let problems = match load_global_settings_file(&config) {
            Ok(global) => panic!("a missing file loads: {global:?}"),
            Err(problems) => problems,
        };
        let shown = SocketError::from(NoSocket {
            config,
            problems: problems.clone(),
        })
        .to_string();
        assert!(
            shown.starts_with(
                "cannot find the command socket: /nonexistent/preread.toml is not a valid \
                 config (give --socket PATH, or fix it):\n  "
            ),
            "{shown}"
        );
        assert!(shown.ends_with(&problems[0].to_string()), "{shown}");
    }
}
