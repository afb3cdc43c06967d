//! The bytes of a TLS check: the ClientHello it sends, and whether what
//! came back is a TLS server's answer.
//!
//! Owns: building the ClientHello with rustls (a real one, as a client of
//! today sends it, so a backend answers it as it would a client's), with
//! the cluster's SNI or none, and [`tls_answer`]: a ServerHello record or
//! an alert record proves a TLS server; anything else (a plain echo sends
//! the ClientHello back) does not. Must never: complete a handshake, trust
//! or check a certificate (nothing is verified: no handshake goes that
//! far), or do I/O.

use std::fmt;
use std::io;
use std::net::IpAddr;
use std::sync::Arc;

use rustls::pki_types::{InvalidDnsNameError, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore};

/// TLS record content types (RFC 8446 §5.1).
const ALERT: u8 = 21;
const HANDSHAKE: u8 = 22;
/// The handshake type of a ServerHello, and of a HelloRetryRequest.
const SERVER_HELLO: u8 = 2;

/// Why a check's ClientHello could not be built; the check fails with
/// this message.
#[derive(Debug)]
pub(super) enum HelloError {
    /// rustls refused its own default protocol versions.
    Versions(rustls::Error),
    /// The cluster's SNI is not a name a TLS client can send.
    ServerName {
        sni: String,
        error: InvalidDnsNameError,
    },
    /// rustls could not start the client connection.
    Connection(rustls::Error),
    /// rustls could not hand out the ClientHello's bytes.
    Write(io::Error),
}

impl fmt::Display for HelloError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("cannot build the check's ClientHello: ")?;
        match self {
            Self::Versions(error) | Self::Connection(error) => error.fmt(f),
            Self::ServerName { sni, error } => write!(
                f,
                "{sni}: {error} (give the cluster an exact SNI that is a DNS name, or use \
                 health_check kind = \"tcp\")"
            ),
            Self::Write(error) => error.fmt(f),
        }
    }
}

impl core::error::Error for HelloError {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        match self {
            Self::Versions(error) | Self::Connection(error) => Some(error),
            Self::ServerName { error, .. } => Some(error),
            Self::Write(error) => Some(error),
        }
    }
}

/// The ClientHello a check sends: with `sni` when the cluster has an
/// exact one, else without SNI (an IP address names no server).
pub(super) fn client_hello(sni: Option<&str>, ip: IpAddr) -> Result<Vec<u8>, HelloError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(HelloError::Versions)?
        .with_root_certificates(RootCertStore::empty())
        .with_no_client_auth();
    let name = match sni {
        Some(sni) => {
            ServerName::try_from(sni.to_owned()).map_err(|error| HelloError::ServerName {
                sni: sni.to_owned(),
                error,
            })?
        }
        None => ServerName::IpAddress(ip.into()),
    };
    let mut connection =
        ClientConnection::new(Arc::new(config), name).map_err(HelloError::Connection)?;
    let mut hello = Vec::new();
    while connection.wants_write() {
        connection
            .write_tls(&mut hello)
            .map_err(HelloError::Write)?;
    }
    Ok(hello)
}

/// What the first bytes of a backend's answer say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Answer {
    /// Too few bytes to tell.
    Incomplete,
    /// A ServerHello or an alert: a TLS server.
    Tls,
    /// Bytes no TLS server sends first.
    NotTls,
}

/// Reads the head of an answer: 5 bytes of record header, and the first
/// byte of a handshake record's body (its message type).
pub(super) fn tls_answer(head: &[u8]) -> Answer {
    let mut bytes = head.iter().copied();
    let content_type = bytes.next();
    let major = bytes.next();
    match (content_type, major) {
        (None, _) | (Some(ALERT | HANDSHAKE), None) => return Answer::Incomplete,
        (Some(ALERT | HANDSHAKE), Some(3)) => {}
        _ => return Answer::NotTls,
    }
    match (content_type, head.get(5)) {
        (Some(ALERT), _) if head.len() >= 5 => Answer::Tls,
        (Some(HANDSHAKE), Some(&SERVER_HELLO)) => Answer::Tls,
        (Some(HANDSHAKE), Some(_)) => Answer::NotTls,
        _ => Answer::Incomplete,
    }
}

/// The bytes a check reads at most before it can tell.
pub(super) const ANSWER_HEAD: usize = 6;

#[cfg(test)]
mod tests {
    use std::net::{IpAddr, Ipv4Addr};

    use preread_parser::tls::{Parsed, parse_client_hello};

    use std::error::Error;

    use super::{Answer, HelloError, client_hello, tls_answer};

    const IP: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

    /// The SNI of a complete ClientHello, as the proxy's own parser reads it.
    fn sni_of(hello: &[u8]) -> Result<Option<String>, String> {
        let mut scratch = Vec::new();
        match parse_client_hello(hello, &mut scratch) {
            Ok(Parsed::Complete(parsed)) => Ok(parsed
                .server_name
                .map(|name| String::from_utf8_lossy(name).into_owned())),
            other => Err(format!("{other:?}")),
        }
    }

    #[test]
    fn the_hello_carries_the_cluster_sni_or_none() -> Result<(), Box<dyn Error>> {
        let with = client_hello(Some("a.example.com"), IP)?;
        assert_eq!(sni_of(&with)?, Some("a.example.com".to_owned()));
        let without = client_hello(None, IP)?;
        assert_eq!(sni_of(&without)?, None);
        Ok(())
    }

    #[test]
    fn an_sni_tls_cannot_send_says_what_to_change() {
        let refused = client_hello(Some("not a name"), IP);
        assert!(
            matches!(&refused, Err(HelloError::ServerName { sni, .. }) if sni == "not a name"),
            "{refused:?}"
        );
        let shown = refused.map_err(|e| e.to_string());
        assert!(
            shown.as_ref().is_err_and(|e| e
                .starts_with("cannot build the check's ClientHello: not a name: ")
                && e.ends_with("or use health_check kind = \"tcp\")")),
            "{shown:?}"
        );
    }

    #[test]
    fn a_server_hello_or_an_alert_is_tls_and_an_echo_is_not() {
        assert_eq!(tls_answer(&[]), Answer::Incomplete);
        assert_eq!(tls_answer(&[22]), Answer::Incomplete);
        assert_eq!(tls_answer(&[22, 3, 3, 0, 90]), Answer::Incomplete);
        assert_eq!(tls_answer(&[22, 3, 3, 0, 90, 2]), Answer::Tls);
        assert_eq!(tls_answer(&[21, 3, 3, 0, 2]), Answer::Tls);
        assert_eq!(
            tls_answer(&[22, 3, 1, 0, 200, 1]),
            Answer::NotTls,
            "a ClientHello echoed back"
        );
        assert_eq!(tls_answer(b"HTTP/1.1 400"), Answer::NotTls);
        assert_eq!(tls_answer(&[22, 2]), Answer::NotTls);
        let echoed = client_hello(None, IP).unwrap_or_default();
        assert_eq!(tls_answer(&echoed[..6.min(echoed.len())]), Answer::NotTls);
    }
}
