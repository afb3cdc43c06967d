//! The etcd v3 API as preread uses it, over the `etcdv3client` crate (its
//! generated gRPC code ships in the crate: no `protoc` at build time):
//! a connection to one member at a time, tried in turn (its channel built
//! here, over TLS for an `https://` member, and signed in when a user is
//! configured: the crate's own constructor has no TLS settings, and signs
//! in over a plain channel of its own); the whole read of
//! a prefix, paginated at one revision; the replicas' status keys; and the
//! one transaction of `preread fleet publish`.
//!
//! Owns: [`Connection`], [`EtcdError`] (which member, what request, why),
//! the request deadline ([`REQUEST_TIMEOUT`]) and the page size
//! ([`PAGE`]). Must never: retry by itself (the source thread and the CLI
//! decide), hold more than one member's connection, or block: every call
//! is async, on the caller's runtime (the source thread's, or
//! [`block_on`]'s for the CLI).

mod error;
pub mod fleet;
mod tls;

use std::future::Future;
use std::time::Duration;

use command::config::EtcdSettings;
use etcdv3client::grpc::{CredentialInterceptor, TonicClient};
use etcdv3client::{Client, ErrKind, EtcdClient, pb};
use tonic::metadata::AsciiMetadataValue;
use tonic::transport::Endpoint;

pub use error::EtcdError;

/// The longest a connection or a unary request may take: past it the
/// member counts as unreachable and the next one is tried.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(3);

/// Keys per page of a whole read: well under gRPC's 4 MiB message limit
/// with fragments of a few KiB.
pub const PAGE: i64 = 500;

/// One key as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kv {
    pub key: Vec<u8>,
    pub value: Vec<u8>,
    pub mod_revision: i64,
}

impl From<pb::KeyValue> for Kv {
    fn from(kv: pb::KeyValue) -> Self {
        Self {
            key: kv.key,
            value: kv.value,
            mod_revision: kv.mod_revision,
        }
    }
}

/// The end of the range of every key under `prefix`.
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    // Every key (a prefix of 0xff bytes only).
    vec![0]
}

/// A connection to one member.
pub struct Connection {
    pub(crate) client: EtcdClient,
    endpoint: String,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

/// `future`, or a timeout error naming `what` at `endpoint`.
async fn bounded<T>(
    endpoint: &str,
    what: &'static str,
    future: impl Future<Output = Result<T, etcdv3client::Error>>,
) -> Result<T, EtcdError> {
    match tokio::time::timeout(REQUEST_TIMEOUT, future).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(why)) => Err(EtcdError::request(endpoint, what, &why)),
        Err(_) => Err(EtcdError::timeout(endpoint, what)),
    }
}

impl Connection {
    /// Connects to the member at `endpoint` (over TLS for `https://`),
    /// and signs in when `settings` has a user.
    ///
    /// # Errors
    ///
    /// It does not answer within [`REQUEST_TIMEOUT`], refuses, fails the
    /// TLS handshake or the sign-in, or its TLS files cannot be read.
    pub async fn open(settings: &EtcdSettings, endpoint: &str) -> Result<Self, EtcdError> {
        let mut target = Endpoint::from_shared(endpoint.to_owned())
            .map_err(|why| EtcdError::transport(endpoint, "connect", &why))?
            .connect_timeout(REQUEST_TIMEOUT)
            .tcp_nodelay(true);
        if let Some(tls) = tls::client_config(settings, endpoint)? {
            target = target
                .tls_config(tls)
                .map_err(|why| EtcdError::transport(endpoint, "TLS settings", &why))?;
        }
        let channel = match tokio::time::timeout(REQUEST_TIMEOUT, target.connect()).await {
            Ok(Ok(channel)) => channel,
            Ok(Err(why)) => return Err(EtcdError::transport(endpoint, "connect", &why)),
            Err(_) => return Err(EtcdError::timeout(endpoint, "connect")),
        };
        let transport = TonicClient::new(channel);
        let credential = settings.username.clone().zip(settings.password.clone());
        let token = match &credential {
            Some((name, password)) => sign_in(&transport, endpoint, name, password).await?,
            None => None,
        };
        Ok(Self {
            client: Client::with_service(CredentialInterceptor::new(credential, token, transport)),
            endpoint: endpoint.to_owned(),
        })
    }

    /// Connects to the first member of `settings` that answers, trying
    /// them in turn from the one at `start`; the index of the one that
    /// answered.
    ///
    /// # Errors
    ///
    /// None answered: the last one's error.
    pub async fn any(settings: &EtcdSettings, start: usize) -> Result<(Self, usize), EtcdError> {
        let count = settings.endpoints.len();
        let mut last = EtcdError::NoEndpoint;
        for offset in 0..count {
            let index = (start + offset) % count;
            match Self::open(settings, &settings.endpoints[index]).await {
                Ok(connection) => return Ok((connection, index)),
                Err(why) => last = why,
            }
        }
        Err(last)
    }

    /// The member's URL.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Every key under `prefix`, read page by page at one revision, and
    /// that revision.
    ///
    /// # Errors
    ///
    /// A page failed.
    pub async fn read_prefix(&mut self, prefix: &[u8]) -> Result<(i64, Vec<Kv>), EtcdError> {
        let end = prefix_end(prefix);
        let mut key = prefix.to_vec();
        let mut revision = 0;
        let mut keys = Vec::new();
        loop {
            let request = pb::RangeRequest {
                key: key.clone(),
                range_end: end.clone(),
                limit: PAGE,
                revision,
                ..Default::default()
            };
            let page = bounded(&self.endpoint, "range", self.client.kv.range(request)).await?;
            if revision == 0 {
                revision = page.header.as_ref().map_or(0, |h| h.revision);
            }
            let more = page.more;
            let Some(last) = page.kvs.last() else {
                break;
            };
            key = last.key.clone();
            key.push(0);
            keys.extend(page.kvs.into_iter().map(Kv::from));
            if !more {
                break;
            }
        }
        Ok((revision, keys))
    }

    /// Puts `value` at `key`, under `lease` (0: none).
    ///
    /// # Errors
    ///
    /// The put failed.
    pub async fn put(&mut self, key: &[u8], value: Vec<u8>, lease: i64) -> Result<(), EtcdError> {
        let request = pb::PutRequest {
            key: key.to_vec(),
            value,
            lease,
            ..Default::default()
        };
        bounded(&self.endpoint, "put", self.client.kv.put(request)).await?;
        Ok(())
    }

    /// Grants a lease of `ttl` seconds; its id.
    ///
    /// # Errors
    ///
    /// The grant failed.
    pub async fn grant(&mut self, ttl: i64) -> Result<i64, EtcdError> {
        let granted = bounded(&self.endpoint, "lease grant", self.client.lease.grant(ttl)).await?;
        Ok(granted.id)
    }
}

/// The token of user `name` at `endpoint`; `None` when the members do not
/// enable authentication.
async fn sign_in(
    transport: &TonicClient,
    endpoint: &str,
    name: &str,
    password: &str,
) -> Result<Option<AsciiMetadataValue>, EtcdError> {
    let mut client =
        Client::with_service(CredentialInterceptor::new(None, None, transport.clone()));
    let request = pb::AuthenticateRequest {
        name: name.to_owned(),
        password: password.to_owned(),
    };
    match tokio::time::timeout(REQUEST_TIMEOUT, client.auth.authenticate(request)).await {
        Ok(Ok(answer)) => AsciiMetadataValue::try_from(answer.token)
            .map(Some)
            .map_err(|why| EtcdError::transport(endpoint, "sign-in", &why)),
        Ok(Err(why)) if why.kind() == ErrKind::AuthNotEnabled => Ok(None),
        Ok(Err(why)) => Err(EtcdError::request(endpoint, "sign-in", &why)),
        Err(_) => Err(EtcdError::timeout(endpoint, "sign-in")),
    }
}

/// Runs `future` to its end on a runtime of the calling thread (the CLI's
/// way in).
///
/// # Errors
///
/// The runtime cannot start (no more threads or descriptors).
pub fn block_on<T>(future: impl Future<Output = T>) -> std::io::Result<T> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    Ok(runtime.block_on(future))
}

#[cfg(test)]
mod tests {
    use super::prefix_end;

    #[test]
    fn a_prefix_ends_after_its_last_byte_below_0xff() {
        assert_eq!(prefix_end(b"/p/"), b"/p0".to_vec());
        assert_eq!(prefix_end(b"a\xff"), b"b".to_vec());
        assert_eq!(prefix_end(b"\xff"), vec![0]);
    }
}
