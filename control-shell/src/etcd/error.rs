//! [`EtcdError`]: what went wrong talking to etcd, worded for an
//! operator: which member, which request, and why.
//!
//! Owns: the wording. Must never: hide the member or the request.

use core::fmt;

/// A request to etcd that failed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum EtcdError {
    /// `[sources.etcd] endpoints` is empty.
    NoEndpoint,
    /// The member refused or failed the request.
    Request {
        endpoint: String,
        what: &'static str,
        why: String,
    },
    /// No answer within the request deadline.
    Timeout {
        endpoint: String,
        what: &'static str,
    },
    /// The watch ended, or etcd canceled it for a reason other than a
    /// compaction.
    WatchEnded { endpoint: String, why: String },
    /// The TLS settings of an `https://` member cannot be made (no
    /// `ca_file`, a file that cannot be read).
    Tls { endpoint: String, why: String },
}

impl EtcdError {
    pub(crate) fn request(endpoint: &str, what: &'static str, why: &etcdv3client::Error) -> Self {
        Self::Request {
            endpoint: endpoint.to_owned(),
            what,
            why: why.to_string(),
        }
    }

    /// A transport failure (connecting, the TLS handshake), with every
    /// cause it wraps: the last one says what to fix (`invalid peer
    /// certificate: UnknownIssuer`).
    pub(crate) fn transport(
        endpoint: &str,
        what: &'static str,
        why: &(dyn std::error::Error + 'static),
    ) -> Self {
        let mut text = why.to_string();
        let mut cause = why.source();
        while let Some(inner) = cause {
            text.push_str(": ");
            text.push_str(&inner.to_string());
            cause = inner.source();
        }
        Self::Request {
            endpoint: endpoint.to_owned(),
            what,
            why: text,
        }
    }

    pub(crate) fn timeout(endpoint: &str, what: &'static str) -> Self {
        Self::Timeout {
            endpoint: endpoint.to_owned(),
            what,
        }
    }
}

impl fmt::Display for EtcdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoEndpoint => write!(f, "etcd: no endpoint configured"),
            Self::Request {
                endpoint,
                what,
                why,
            } => write!(f, "etcd {endpoint}: {what} failed: {why}"),
            Self::Timeout { endpoint, what } => write!(
                f,
                "etcd {endpoint}: {what}: no answer within {} s",
                super::REQUEST_TIMEOUT.as_secs()
            ),
            Self::WatchEnded { endpoint, why } => {
                write!(f, "etcd {endpoint}: the watch ended: {why}")
            }
            Self::Tls { endpoint, why } => write!(f, "etcd {endpoint}: TLS: {why}"),
        }
    }
}

impl std::error::Error for EtcdError {}
