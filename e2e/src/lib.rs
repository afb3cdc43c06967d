//! End-to-end harness of preread: real sockets on loopback, real TLS.
//!
//! preread routes TLS connections by the ClientHello's SNI/ALPN without
//! terminating TLS, so the backends hold the certificates and complete the
//! handshake with the client through the proxy. The harness gives a test:
//!
//! - [`certs`]: a test CA made at run time and leaf certificates signed by
//!   it (servers, mTLS clients), rustls configurations (ring provider);
//! - [`backend`]: [`backend::TlsBackend`] (answers with its name, the ALPN
//!   and SNI it saw, then echoes; records the raw bytes it received) and
//!   [`backend::PlainBackend`]; [`h2_backend::H2Backend`] answers HTTP/2;
//! - [`client`]: TLS requests and streams, raw byte exchanges, slow clients,
//!   PROXY headers;
//! - [`proxy`]: the `preread` process with a config in a temp dir, its
//!   command socket, metrics, stderr (access logs), signals;
//! - [`openssl`]: `openssl s_server`, a TLS server that is not rustls;
//! - [`quic`]: quinn QUIC backends and clients;
//! - [`promql`]: the series names a PromQL expression reads, to check the
//!   shipped alert rules and dashboard against the served families.
//!
//! Only loopback is used; every wait is bounded; processes and threads
//! started here are stopped on Drop.
//!
//! ```no_run
//! use e2e::backend::{BackendConfig, TlsBackend};
//! use e2e::client::tls_request;
//! use e2e::proxy::{ConfigBuilder, ProxyProcess};
//!
//! let alpha = TlsBackend::start(BackendConfig::new("alpha-0", &["a.example.com"]).alpn(&["h2"]));
//! let config = ConfigBuilder::new()
//!     .listener("main", &[])
//!     .frontend("alpha", "main", Some("a.example.com"), &[])
//!     .backend("alpha", "alpha-0", alpha.addr())
//!     .build();
//! let proxy = ProxyProcess::start(&config).expect("proxy ready");
//! let outcome = tls_request(proxy.addr("main"), "a.example.com", &["h2"], None).expect("routed");
//! assert_eq!(outcome.backend(), Some("alpha-0"));
//! assert_eq!(outcome.dns_names, ["a.example.com"]);
//! ```

pub mod backend;
pub mod certs;
pub mod client;
pub mod docker;
pub mod etcd;
pub mod h2_backend;
pub mod openssl;
pub mod promql;
pub mod proxy;
pub mod quic;
pub mod testkit;
pub mod tools;
