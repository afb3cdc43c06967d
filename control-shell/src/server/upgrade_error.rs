//! Why an upgrade did not happen, as the operator reads it.
//!
//! Owns: [`UpgradeError`] and [`Unready`], each message saying what went
//! wrong and, where the operator can, what to change. Must never: lose the
//! system error behind a failure (it is part of the message).

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitStatus;

/// Why the successor did not take over (it was reaped or killed).
#[derive(Debug)]
pub(super) enum Unready {
    /// It said it serves, under another pid.
    ClaimsPid(u32),
    /// It refused the handover.
    Refused(String),
    /// It closed the handover without a verdict.
    NoVerdict,
    /// The handover broke.
    Broken(io::Error),
}

impl fmt::Display for Unready {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ClaimsPid(pid) => write!(f, "it claims to be pid {pid}"),
            Self::Refused(why) => write!(f, "it refused the handover: {why}"),
            Self::NoVerdict => f.write_str("it closed the handover without a verdict"),
            Self::Broken(error) => write!(f, "the handover failed ({error})"),
        }
    }
}

/// Why an upgrade failed; this process keeps serving.
#[derive(Debug)]
pub(super) enum UpgradeError {
    /// No binary was given and this process does not know its own.
    NoBinary,
    /// A listening socket could not be duplicated.
    Duplicate {
        address: SocketAddr,
        error: io::Error,
    },
    /// The metrics endpoint's socket could not be duplicated.
    MetricsCopy(io::Error),
    /// A QUIC socket or a flow's backend socket could not be duplicated.
    QuicCopy(io::Error),
    /// The control socket to the successor could not be opened.
    ControlSocket(io::Error),
    /// A listening socket could not be made inheritable.
    PassListener(io::Error),
    /// The control socket could not be made inheritable.
    PassControl(io::Error),
    /// The successor could not be started.
    Start { binary: PathBuf, error: io::Error },
    /// The successor did not take over in time, and was killed.
    TimedOut { who: String },
    /// The successor exited before taking over.
    Exited {
        who: String,
        status: ExitStatus,
        why: Unready,
    },
    /// The successor did not take over, and was killed.
    Killed { who: String, why: Unready },
}

impl fmt::Display for UpgradeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoBinary => {
                f.write_str("this process does not know its own binary: give --binary PATH")
            }
            Self::Duplicate { address, error } => {
                write!(f, "cannot duplicate a socket of {address}: {error}")
            }
            Self::MetricsCopy(error) => {
                write!(f, "cannot duplicate the metrics endpoint's socket: {error}")
            }
            Self::QuicCopy(error) => {
                write!(f, "cannot duplicate a QUIC socket or flow: {error}")
            }
            Self::ControlSocket(error) => write!(f, "cannot open the control socket: {error}"),
            Self::PassListener(error) => write!(f, "cannot pass a listening socket on: {error}"),
            Self::PassControl(error) => write!(f, "cannot pass the control socket on: {error}"),
            Self::Start { binary, error } => {
                write!(f, "cannot start {}: {error}", binary.display())
            }
            Self::TimedOut { who } => write!(f, "{who} did not take over in time; it was killed"),
            Self::Exited { who, status, why } => {
                write!(f, "{who} exited before taking over ({status}): {why}")
            }
            Self::Killed { who, why } => write!(f, "{who}: {why}; it was killed"),
        }
    }
}

impl std::error::Error for UpgradeError {}
