//! TLS to etcd's members: an `https://` endpoint of `[sources.etcd]` is
//! verified against `ca_file`, and shown the client certificate of
//! `cert_file` and `key_file` when they are given.
//!
//! Owns: reading the three files (at every connection, so a renewed
//! certificate is used from the next reconnection on) and tonic's TLS
//! settings made of them. Must never: trust a root the operator did not
//! give (no system roots: an etcd cluster's members are signed by its own
//! CA), or talk in the clear to an `https://` endpoint.

use std::path::Path;

use command::config::EtcdSettings;
use tonic::transport::{Certificate, ClientTlsConfig, Identity};

use super::EtcdError;

/// The TLS settings for `endpoint`: `None` for an `http://` one.
///
/// # Errors
///
/// An `https://` endpoint without `ca_file`, or a file that cannot be
/// read.
pub(super) fn client_config(
    settings: &EtcdSettings,
    endpoint: &str,
) -> Result<Option<ClientTlsConfig>, EtcdError> {
    if !endpoint.starts_with("https://") {
        return Ok(None);
    }
    let Some(ca) = &settings.ca_file else {
        return Err(EtcdError::Tls {
            endpoint: endpoint.to_owned(),
            why: "an https:// endpoint needs [sources.etcd] ca_file, the CA that signs the \
                  members' certificates"
                .to_owned(),
        });
    };
    let mut config = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(read(endpoint, "ca_file", ca)?))
        // etcd 3.4's members may not announce h2 in ALPN: it is the only
        // protocol of their gRPC port.
        .assume_http2(true);
    if let (Some(cert), Some(key)) = (&settings.cert_file, &settings.key_file) {
        config = config.identity(Identity::from_pem(
            read(endpoint, "cert_file", cert)?,
            read(endpoint, "key_file", key)?,
        ));
    }
    Ok(Some(config))
}

fn read(endpoint: &str, key: &str, path: &Path) -> Result<Vec<u8>, EtcdError> {
    std::fs::read(path).map_err(|why| EtcdError::Tls {
        endpoint: endpoint.to_owned(),
        why: format!("cannot read [sources.etcd] {key} {}: {why}", path.display()),
    })
}
