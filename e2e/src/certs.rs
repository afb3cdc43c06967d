//! Test certificates made at run time (no key material is committed): a
//! test CA, leaf certificates signed by it, and the rustls configurations
//! of the backends and clients.
//!
//! Every server leaf also carries the IP address `127.0.0.1`, so a client
//! that sends no SNI (it connects "to 127.0.0.1") still verifies the
//! certificate; [`dns_names`] lists only the DNS names.

use std::fmt;
use std::path::Path;
use std::sync::{Arc, OnceLock};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};

/// The ring crypto provider every harness configuration uses.
pub fn provider() -> Arc<CryptoProvider> {
    static PROVIDER: OnceLock<Arc<CryptoProvider>> = OnceLock::new();
    Arc::clone(PROVIDER.get_or_init(|| Arc::new(rustls::crypto::ring::default_provider())))
}

/// A certificate authority made for one test process.
pub struct TestCa {
    issuer: Issuer<'static, KeyPair>,
    cert_der: CertificateDer<'static>,
    cert_pem: String,
}

impl fmt::Debug for TestCa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TestCa")
            .field("cert_der_len", &self.cert_der.len())
            .finish_non_exhaustive()
    }
}

impl TestCa {
    /// A fresh CA whose subject common name is `common_name`.
    ///
    /// # Panics
    /// When rcgen fails to make a key or a certificate (it does not with
    /// these fixed parameters).
    pub fn new(common_name: &str) -> Self {
        let key = KeyPair::generate().expect("generate the CA key");
        let mut params = CertificateParams::default();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let cert = params.self_signed(&key).expect("self-sign the CA");
        let cert_der = cert.der().clone();
        let cert_pem = cert.pem();
        Self {
            issuer: Issuer::new(params, key),
            cert_der,
            cert_pem,
        }
    }

    /// The process-wide CA: [`crate::backend`] signs its certificates with
    /// it and [`crate::client`] trusts it, unless told otherwise.
    pub fn shared() -> &'static TestCa {
        static SHARED: OnceLock<TestCa> = OnceLock::new();
        SHARED.get_or_init(|| TestCa::new("preread e2e test CA"))
    }

    /// The CA certificate, DER.
    pub fn cert_der(&self) -> CertificateDer<'static> {
        self.cert_der.clone()
    }

    /// The CA certificate, PEM (for `curl --cacert`, `openssl -CAfile`).
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// Writes the CA certificate as PEM to `path`.
    pub fn write_pem(&self, path: &Path) -> std::io::Result<()> {
        std::fs::write(path, &self.cert_pem)
    }

    /// A root store holding only this CA.
    ///
    /// # Panics
    /// Never in practice: the CA certificate is well formed.
    pub fn root_store(&self) -> RootCertStore {
        let mut roots = RootCertStore::empty();
        roots
            .add(self.cert_der())
            .expect("the test CA is a valid trust anchor");
        roots
    }

    /// A server certificate for `dns_names` (exact or wildcard `*.x`
    /// names), plus the IP address 127.0.0.1.
    ///
    /// # Panics
    /// On a name rcgen refuses (not IA5).
    pub fn server_cert(&self, dns_names: &[&str]) -> Leaf {
        self.leaf(dns_names, true, &[ExtendedKeyUsagePurpose::ServerAuth])
    }

    /// A server certificate, as [`server_cert`](Self::server_cert), that
    /// is also a client certificate: an etcd member's gateway dials the
    /// member with it when clients must show one.
    ///
    /// # Panics
    /// On a name rcgen refuses (not IA5).
    pub fn server_client_cert(&self, dns_names: &[&str]) -> Leaf {
        self.leaf(
            dns_names,
            true,
            &[
                ExtendedKeyUsagePurpose::ServerAuth,
                ExtendedKeyUsagePurpose::ClientAuth,
            ],
        )
    }

    /// A client certificate (for mTLS) whose common name and DNS name is
    /// `name`.
    ///
    /// # Panics
    /// On a name rcgen refuses (not IA5).
    pub fn client_cert(&self, name: &str) -> Leaf {
        self.leaf(&[name], false, &[ExtendedKeyUsagePurpose::ClientAuth])
    }

    fn leaf(
        &self,
        dns_names: &[&str],
        with_loopback: bool,
        eku: &[ExtendedKeyUsagePurpose],
    ) -> Leaf {
        let key = KeyPair::generate().expect("generate a leaf key");
        let mut params = CertificateParams::default();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params.distinguished_name.push(
            DnType::CommonName,
            dns_names.first().copied().unwrap_or("preread e2e"),
        );
        params.subject_alt_names = dns_names
            .iter()
            .map(|name| {
                SanType::DnsName(
                    (*name)
                        .to_owned()
                        .try_into()
                        .unwrap_or_else(|err| panic!("bad DNS name {name:?}: {err}")),
                )
            })
            .collect();
        if with_loopback {
            params
                .subject_alt_names
                .push(SanType::IpAddress([127, 0, 0, 1].into()));
        }
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = eku.to_vec();
        params.use_authority_key_identifier_extension = true;
        let cert = params
            .signed_by(&key, &self.issuer)
            .expect("sign a leaf certificate");
        Leaf {
            names: dns_names.iter().map(|name| (*name).to_owned()).collect(),
            cert_der: cert.der().clone(),
            cert_pem: cert.pem(),
            key_der: key.serialize_der(),
            key_pem: key.serialize_pem(),
        }
    }
}

/// A leaf certificate and its private key.
#[derive(Clone)]
pub struct Leaf {
    /// The DNS names it was made for.
    pub names: Vec<String>,
    /// The certificate, DER.
    pub cert_der: CertificateDer<'static>,
    /// The certificate, PEM.
    pub cert_pem: String,
    key_der: Vec<u8>,
    /// The private key, PKCS#8 PEM.
    pub key_pem: String,
}

impl fmt::Debug for Leaf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Leaf")
            .field("names", &self.names)
            .finish_non_exhaustive()
    }
}

impl Leaf {
    /// The chain to present: the leaf alone (clients and servers trust the
    /// CA directly).
    pub fn chain(&self) -> Vec<CertificateDer<'static>> {
        vec![self.cert_der.clone()]
    }

    /// The private key, as rustls takes it.
    pub fn key(&self) -> PrivateKeyDer<'static> {
        PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.key_der.clone()))
    }

    /// A leaf another process made, from its certificate and PKCS#8 key
    /// as PEM (what [`Leaf::cert_pem`] and [`Leaf::key_pem`] hold).
    pub fn from_pem(cert_pem: &str, key_pem: &str) -> Result<Self, String> {
        let cert_der = CertificateDer::from_pem_slice(cert_pem.as_bytes())
            .map_err(|e| format!("the certificate PEM: {e}"))?;
        let key_der = PrivatePkcs8KeyDer::from_pem_slice(key_pem.as_bytes())
            .map_err(|e| format!("the key PEM: {e}"))?;
        Ok(Self {
            names: dns_names(&cert_der),
            cert_der,
            cert_pem: cert_pem.to_owned(),
            key_der: key_der.secret_pkcs8_der().to_vec(),
            key_pem: key_pem.to_owned(),
        })
    }
}

/// A server configuration presenting `leaf`, offering `alpn` (server
/// preference order; empty: no ALPN), and, with `client_auth`, requiring a
/// client certificate signed by that CA. TLS 1.2 and 1.3.
///
/// # Panics
/// When rustls refuses the key or the verifier (it does not with harness
/// certificates).
pub fn server_config(
    leaf: &Leaf,
    alpn: &[&str],
    client_auth: Option<&TestCa>,
) -> Arc<ServerConfig> {
    let builder = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .expect("ring supports the default versions");
    let builder = match client_auth {
        Some(ca) => {
            let verifier =
                WebPkiClientVerifier::builder_with_provider(Arc::new(ca.root_store()), provider())
                    .build()
                    .expect("build the client verifier");
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut config = builder
        .with_single_cert(leaf.chain(), leaf.key())
        .expect("rustls accepts the leaf key");
    config.alpn_protocols = alpn.iter().map(|p| p.as_bytes().to_vec()).collect();
    Arc::new(config)
}

/// A client configuration trusting `ca` only, offering `alpn` (in order;
/// empty: no ALPN extension), presenting `client_cert` when asked, TLS 1.3
/// and 1.2 (or 1.2 only with `tls12_only`).
///
/// # Panics
/// When rustls refuses the client key (it does not with harness
/// certificates).
pub fn client_config(
    ca: &TestCa,
    alpn: &[&str],
    client_cert: Option<&Leaf>,
    tls12_only: bool,
) -> Arc<ClientConfig> {
    let builder = ClientConfig::builder_with_provider(provider());
    let builder = if tls12_only {
        builder.with_protocol_versions(&[&rustls::version::TLS12])
    } else {
        builder.with_safe_default_protocol_versions()
    }
    .expect("ring supports these versions")
    .with_root_certificates(ca.root_store());
    let mut config = match client_cert {
        Some(leaf) => builder
            .with_client_auth_cert(leaf.chain(), leaf.key())
            .expect("rustls accepts the client key"),
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = alpn.iter().map(|p| p.as_bytes().to_vec()).collect();
    Arc::new(config)
}

/// The DNS names (subjectAltName dNSName entries) of a DER certificate, in
/// order; empty when it has none or does not parse.
pub fn dns_names(cert_der: &[u8]) -> Vec<String> {
    san_dns_names(cert_der).unwrap_or_default()
}

/// One DER TLV: (tag, content, rest).
fn tlv(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let count = usize::from(first & 0x7f);
        if count == 0 || count > 4 || rest.len() < count {
            return None;
        }
        let (len_bytes, rest) = rest.split_at(count);
        let len = len_bytes
            .iter()
            .fold(0usize, |acc, &b| (acc << 8) | usize::from(b));
        (len, rest)
    };
    if rest.len() < len {
        return None;
    }
    let (content, rest) = rest.split_at(len);
    Some((tag, content, rest))
}

fn san_dns_names(cert: &[u8]) -> Option<Vec<String>> {
    const SEQUENCE: u8 = 0x30;
    // id-ce-subjectAltName 2.5.29.17
    const SAN_OID: &[u8] = &[0x55, 0x1d, 0x11];
    let (SEQUENCE, certificate, _) = tlv(cert)? else {
        return None;
    };
    let (SEQUENCE, mut tbs, _) = tlv(certificate)? else {
        return None;
    };
    // Walk the tbsCertificate fields up to [3] extensions.
    let extensions = loop {
        let (tag, content, rest) = tlv(tbs)?;
        if tag == 0xa3 {
            break content;
        }
        tbs = rest;
    };
    let (SEQUENCE, mut list, _) = tlv(extensions)? else {
        return None;
    };
    while !list.is_empty() {
        let (_, extension, rest) = tlv(list)?;
        list = rest;
        let (0x06, oid, mut fields) = tlv(extension)? else {
            continue;
        };
        if oid != SAN_OID {
            continue;
        }
        // Optional BOOLEAN critical, then OCTET STRING.
        let value = loop {
            let (tag, content, rest) = tlv(fields)?;
            if tag == 0x04 {
                break content;
            }
            fields = rest;
        };
        let (SEQUENCE, mut names, _) = tlv(value)? else {
            return None;
        };
        let mut found = Vec::new();
        while !names.is_empty() {
            let (tag, content, rest) = tlv(names)?;
            names = rest;
            // dNSName [2] IMPLICIT IA5String
            if tag == 0x82 {
                found.push(String::from_utf8_lossy(content).into_owned());
            }
        }
        return Some(found);
    }
    Some(Vec::new())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn san_names_round_trip() {
        let ca = TestCa::new("unit CA");
        let leaf = ca.server_cert(&["a.example.com", "*.b.example.com"]);
        assert_eq!(
            dns_names(&leaf.cert_der),
            vec!["a.example.com".to_owned(), "*.b.example.com".to_owned()]
        );
        assert!(dns_names(&[0x30, 0x03, 0x02]).is_empty());
    }
}
