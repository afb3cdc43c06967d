//! A backend's address: an `ip:port`, or a `name:port` that the proxy
//! resolves.
//!
//! Owns: [`BackendAddress`], which names are accepted (DNS host names:
//! labels of letters, digits, hyphens and underscores, the last one not all
//! digits), and
//! the canonical form of each (an IP as `SocketAddr` prints it, a name in
//! lowercase without a trailing dot). Must never: resolve a name (the
//! proxy does, off its worker threads), or accept a port of 0.

use core::fmt;
use std::net::SocketAddr;

use crate::codes::ErrorCode;
use crate::validation_error::ValidationError;

/// The longest host name, in bytes, without its trailing dot (RFC 1035).
const MAX_NAME_LEN: usize = 253;
/// The longest label of a host name, in bytes.
const MAX_LABEL_LEN: usize = 63;

/// Where a backend listens.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum BackendAddress {
    /// One fixed `ip:port`: one instance.
    Ip(SocketAddr),
    /// A host name and a port: one instance per address the name resolves
    /// to.
    Name {
        /// Lowercase, without a trailing dot.
        host: String,
        /// Not 0.
        port: u16,
    },
}

impl BackendAddress {
    /// Parses `ip:port` or `name:port`; `what` names the backend in the
    /// message (E101).
    pub fn parse(what: &str, address: &str) -> Result<Self, ValidationError> {
        let invalid = |why: &str| {
            ValidationError::new(
                ErrorCode::InvalidAddress,
                format!(
                    "{what}: `{address}` {why}: write `ip:port` (e.g. `127.0.0.1:8443` or \
                     `[::1]:8443`) or `name:port` (e.g. `db.internal:5432`)"
                ),
            )
        };
        let parsed = match address.parse::<SocketAddr>() {
            Ok(ip) => Self::Ip(ip),
            Err(_) => {
                let Some((host, port)) = address.rsplit_once(':') else {
                    return Err(invalid("has no port"));
                };
                let port = port
                    .parse::<u16>()
                    .map_err(|_| invalid("has no port from 1 to 65535"))?;
                let host = host.strip_suffix('.').unwrap_or(host);
                if !is_host_name(host) {
                    return Err(invalid("is neither an IP address nor a host name"));
                }
                Self::Name {
                    host: host.to_ascii_lowercase(),
                    port,
                }
            }
        };
        if parsed.port() == 0 {
            return Err(ValidationError::new(
                ErrorCode::InvalidAddress,
                format!("{what}: `{address}` has port 0: give a fixed port from 1 to 65535"),
            ));
        }
        Ok(parsed)
    }

    /// The port, whatever the host.
    #[must_use]
    pub fn port(&self) -> u16 {
        match self {
            Self::Ip(ip) => ip.port(),
            Self::Name { port, .. } => *port,
        }
    }
}

/// The canonical form, as the state stores it.
impl fmt::Display for BackendAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Ip(ip) => write!(f, "{ip}"),
            Self::Name { host, port } => write!(f, "{host}:{port}"),
        }
    }
}

/// A DNS host name (RFC 1123): dot-separated labels of ASCII letters,
/// digits and hyphens, none empty, none starting or ending with a hyphen.
/// Underscores are accepted too, since Docker and Compose name services
/// with them and the system resolver answers for them. The last label is
/// not all digits, so a mistyped IPv4 address such as `127.0.0.300` is not
/// taken for a name.
fn is_host_name(host: &str) -> bool {
    let labels_ok = host.split('.').all(|label| {
        (1..=MAX_LABEL_LEN).contains(&label.len())
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            && !label.starts_with('-')
            && !label.ends_with('-')
    });
    let numeric_top = host
        .rsplit('.')
        .next()
        .is_some_and(|last| last.bytes().all(|b| b.is_ascii_digit()));
    !host.is_empty() && host.len() <= MAX_NAME_LEN && labels_ok && !numeric_top
}

#[cfg(test)]
mod tests {
    use super::BackendAddress;
    use crate::codes::ErrorCode;

    fn parsed(address: &str) -> Result<String, ErrorCode> {
        BackendAddress::parse("backend `b`", address)
            .map(|a| a.to_string())
            .map_err(|e| e.code)
    }

    #[test]
    fn ips_and_names_are_canonical() {
        assert_eq!(parsed("127.0.0.1:08443"), Ok("127.0.0.1:8443".into()));
        assert_eq!(parsed("[::1]:443"), Ok("[::1]:443".into()));
        assert_eq!(parsed("DB.Internal.:5432"), Ok("db.internal:5432".into()));
        assert_eq!(parsed("localhost:9001"), Ok("localhost:9001".into()));
        assert_eq!(parsed("shop_web_1:8443"), Ok("shop_web_1:8443".into()));
        assert_eq!(
            parsed("my-svc.ns.svc.cluster.local:80"),
            Ok("my-svc.ns.svc.cluster.local:80".into())
        );
    }

    #[test]
    fn what_is_neither_an_ip_nor_a_name_is_e101() {
        for bad in [
            "",
            "localhost",
            "localhost:0",
            "127.0.0.1:0",
            "127.0.0.1:99999",
            "127.0.0.300:80",
            "::1:80",
            "-db:80",
            "db-:80",
            "a..b:80",
            "space here:80",
            ":80",
        ] {
            assert_eq!(parsed(bad), Err(ErrorCode::InvalidAddress), "{bad:?}");
        }
        let long = format!("{}.example:80", "a".repeat(64));
        assert_eq!(parsed(&long), Err(ErrorCode::InvalidAddress));
    }

    #[test]
    fn the_message_shows_both_accepted_shapes() {
        let Err(error) = BackendAddress::parse("backend `b` of cluster `c`", "db") else {
            panic!("a name without a port is refused");
        };
        assert!(
            error.message.contains("backend `b` of cluster `c`")
                && error.message.contains("name:port"),
            "{}",
            error.message
        );
    }
}
