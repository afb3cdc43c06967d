//! The syslog targets of `access_logs`: `"syslog:PATH"` and
//! `"syslog:udp://IP:PORT"`.
//!
//! Owns: [`SyslogTarget`] and the spellings `access_logs` accepts for it,
//! with the message that says what to write instead. Must never: open a
//! socket (the proxy's access-log writer does), or take a value without the
//! `syslog:` prefix (that is a file path).

use core::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;

use crate::spelling::quoted;

/// The prefix that makes `access_logs` a syslog target.
const PREFIX: &str = "syslog:";

/// Where RFC 5424 access-log messages go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SyslogTarget {
    /// A local syslog daemon's Unix datagram socket, such as `/dev/log`.
    Unix(PathBuf),
    /// A syslog server over UDP.
    Udp(SocketAddr),
}

/// An `access_logs` value that starts with `syslog:` but names no target
/// preread can send to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum SyslogTargetError {
    /// `syslog:udp://` with something other than an `ip:port`.
    NotAnAddress { value: String, address: String },
    /// A transport other than a Unix socket or UDP.
    Scheme { value: String, scheme: String },
    /// `syslog:` and nothing after it.
    NoSocket { value: String },
}

impl fmt::Display for SyslogTargetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let usage = "write syslog:/dev/log (a Unix datagram socket) or syslog:udp://IP:PORT";
        match self {
            Self::NotAnAddress { value, address } => write!(
                f,
                "access_logs {}: `{address}` is not an ip:port address (host names are not \
                 resolved); {usage}",
                quoted(value)
            ),
            Self::Scheme { value, scheme } => write!(
                f,
                "access_logs {}: syslog over `{scheme}` is not supported; {usage}",
                quoted(value)
            ),
            Self::NoSocket { value } => {
                write!(f, "access_logs {} names no socket; {usage}", quoted(value))
            }
        }
    }
}

impl core::error::Error for SyslogTargetError {}

/// The syslog target `value` names, if it starts with `syslog:`: `None`
/// for any other value, `Some(Err(why))` for a syslog target written
/// wrong.
pub(super) fn syslog_target(value: &str) -> Option<Result<SyslogTarget, SyslogTargetError>> {
    let rest = value.strip_prefix(PREFIX)?;
    let value = value.to_owned();
    Some(match rest.split_once("://") {
        Some(("udp", address)) => {
            address
                .parse()
                .map(SyslogTarget::Udp)
                .map_err(|_| SyslogTargetError::NotAnAddress {
                    value,
                    address: address.to_owned(),
                })
        }
        Some((scheme, _)) => Err(SyslogTargetError::Scheme {
            value,
            scheme: scheme.to_owned(),
        }),
        None if rest.is_empty() => Err(SyslogTargetError::NoSocket { value }),
        None => Ok(SyslogTarget::Unix(PathBuf::from(rest))),
    })
}

#[cfg(test)]
mod tests {
    use super::{SyslogTarget, syslog_target};

    #[test]
    fn unix_paths_and_udp_addresses() {
        assert_eq!(
            syslog_target("syslog:/dev/log"),
            Some(Ok(SyslogTarget::Unix("/dev/log".into())))
        );
        assert_eq!(
            syslog_target("syslog:udp://127.0.0.1:514"),
            Some(Ok(SyslogTarget::Udp(([127, 0, 0, 1], 514).into())))
        );
        assert_eq!(
            syslog_target("syslog:udp://[::1]:5514"),
            Some(Ok(SyslogTarget::Udp("[::1]:5514".parse().unwrap())))
        );
        assert_eq!(syslog_target("/var/log/preread.log"), None);
    }

    #[test]
    fn what_is_written_wrong_says_what_to_write() {
        for (value, why) in [
            ("syslog:", "names no socket"),
            ("syslog:udp://localhost:514", "is not an ip:port address"),
            (
                "syslog:tcp://127.0.0.1:514",
                "syslog over `tcp` is not supported",
            ),
        ] {
            let Some(Err(error)) = syslog_target(value) else {
                panic!("{value} is refused");
            };
            let message = error.to_string();
            assert!(message.contains(why), "{message}");
            assert!(message.contains("syslog:udp://IP:PORT"), "{message}");
        }
    }
}
