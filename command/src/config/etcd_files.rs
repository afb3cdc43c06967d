//! The TLS files of `[sources.etcd]` as `preread config check` sees them:
//! each one read, and parsed as the etcd client will parse it (PEM: the
//! CA's certificates, the client certificate, its private key).
//!
//! Owns: the problems of the three files (E505). Must never: connect to
//! etcd, or judge the certificates' contents beyond their PEM shape (the
//! members judge them at the handshake).

use std::path::Path;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use super::{ConfigProblem, EtcdSettings};
use crate::codes::ErrorCode;

/// What a file must hold.
#[derive(Clone, Copy)]
enum Holds {
    Certificates,
    PrivateKey,
}

/// The problems of `settings`' TLS files (paths resolved already).
pub(super) fn problems(settings: &EtcdSettings) -> Vec<ConfigProblem> {
    [
        ("ca_file", &settings.ca_file, Holds::Certificates),
        ("cert_file", &settings.cert_file, Holds::Certificates),
        ("key_file", &settings.key_file, Holds::PrivateKey),
    ]
    .into_iter()
    .filter_map(|(key, path, holds)| Some((key, path.as_deref()?, holds)))
    .filter_map(|(key, path, holds)| {
        let why = judge(path, holds)?;
        Some(ConfigProblem {
            location: None,
            code: ErrorCode::EtcdTlsFile,
            message: format!("[sources.etcd] {key} {}: {why}", path.display()),
        })
    })
    .collect()
}

/// Why the file at `path` does not hold what it must; `None` when it does.
fn judge(path: &Path, holds: Holds) -> Option<String> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(why) => return Some(format!("cannot be read: {why}")),
    };
    match holds {
        Holds::Certificates => {
            let mut count = 0;
            for item in CertificateDer::pem_slice_iter(&bytes) {
                if let Err(why) = item {
                    return Some(format!("is not PEM: {why}"));
                }
                count += 1;
            }
            (count == 0).then(|| "holds no PEM certificate (-----BEGIN CERTIFICATE-----)".into())
        }
        Holds::PrivateKey => PrivateKeyDer::from_pem_slice(&bytes)
            .err()
            .map(|why| format!("holds no PEM private key: {why}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CERT: &str = "-----BEGIN CERTIFICATE-----\nMAA=\n-----END CERTIFICATE-----\n";
    const KEY: &str = "-----BEGIN PRIVATE KEY-----\nMAA=\n-----END PRIVATE KEY-----\n";

    #[test]
    fn unreadable_and_misplaced_files_are_named_with_their_key() {
        let dir = tempfile::tempdir().expect("temp dir");
        let cert = dir.path().join("cert.pem");
        let key = dir.path().join("key.pem");
        std::fs::write(&cert, CERT).expect("write");
        std::fs::write(&key, KEY).expect("write");
        let fine = EtcdSettings {
            ca_file: Some(cert.clone()),
            cert_file: Some(cert.clone()),
            key_file: Some(key.clone()),
            ..EtcdSettings::default()
        };
        assert_eq!(problems(&fine), []);

        let swapped = EtcdSettings {
            ca_file: Some(dir.path().join("missing.pem")),
            cert_file: Some(key.clone()),
            key_file: Some(cert),
            ..EtcdSettings::default()
        };
        let found = problems(&swapped);
        let keys: Vec<(&str, ErrorCode)> = found
            .iter()
            .map(|p| (p.message.split(' ').nth(1).unwrap_or(""), p.code))
            .collect();
        assert_eq!(
            keys,
            [
                ("ca_file", ErrorCode::EtcdTlsFile),
                ("cert_file", ErrorCode::EtcdTlsFile),
                ("key_file", ErrorCode::EtcdTlsFile),
            ],
            "{found:?}"
        );
        assert!(found[0].message.contains("cannot be read"), "{found:?}");
        assert!(found[1].message.contains("no PEM certificate"), "{found:?}");
        assert!(found[2].message.contains("no PEM private key"), "{found:?}");
    }
}
