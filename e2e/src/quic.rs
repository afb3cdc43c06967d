//! QUIC peers for the tests, with quinn on both sides: a backend server
//! (its own certificate from the test CA) that answers each stream with
//! its name and what it read, and client endpoints trusting the test CA.
//!
//! Owns building quinn's configurations the same way for every QUIC test
//! (TLS 1.3 with the harness's ring provider), and the runtime they run
//! on ([`runtime`]). Must never: start anything outside a tokio runtime
//! (the caller's), or bind beyond loopback.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use quinn::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use quinn::{ClientConfig, Endpoint, ServerConfig, TransportConfig};

use crate::certs::{TestCa, provider};

/// The tokio runtime a QUIC test runs its quinn peers on: two worker
/// threads, I/O and timers.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

/// The largest answer [`ask`] reads, and the largest request a backend
/// reads.
const MAX_MESSAGE: usize = 64 * 1024;

/// A QUIC backend named `id` on `127.0.0.1` serving `names` with `alpn`;
/// with `retry`, it answers every first Initial with a Retry. Each
/// bidirectional stream is answered with `id:` and what the client sent.
/// `idle` is its connections' idle timeout (`None`: quinn's default).
/// Runs on the current tokio runtime until the endpoint is dropped.
pub fn backend(
    id: &'static str,
    names: &[&str],
    alpn: &[&str],
    retry: bool,
    idle: Option<Duration>,
) -> (Endpoint, SocketAddr) {
    let leaf = TestCa::shared().server_cert(names);
    let mut crypto = rustls::ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .expect("TLS 1.3")
        .with_no_client_auth()
        .with_single_cert(leaf.chain(), leaf.key())
        .expect("the backend's certificate");
    crypto.alpn_protocols = alpn.iter().map(|p| p.as_bytes().to_vec()).collect();
    let quic = QuicServerConfig::try_from(crypto).expect("a QUIC server config");
    let mut config = ServerConfig::with_crypto(Arc::new(quic));
    if let Some(idle) = idle {
        config.transport_config(Arc::new(transport(idle)));
    }
    let endpoint = Endpoint::server(config, SocketAddr::from(([127, 0, 0, 1], 0)))
        .expect("a backend endpoint");
    let address = endpoint.local_addr().expect("the backend's address");
    let accepting = endpoint.clone();
    tokio::spawn(async move {
        while let Some(incoming) = accepting.accept().await {
            if retry && !incoming.remote_address_validated() {
                let _ = incoming.retry();
                continue;
            }
            tokio::spawn(async move {
                let Ok(connection) = incoming.await else {
                    return;
                };
                while let Ok((mut send, mut recv)) = connection.accept_bi().await {
                    tokio::spawn(async move {
                        let Ok(received) = recv.read_to_end(MAX_MESSAGE).await else {
                            return;
                        };
                        let mut answer = format!("{id}:").into_bytes();
                        answer.extend_from_slice(&received);
                        let _ = send.write_all(&answer).await;
                        let _ = send.finish();
                    });
                }
            });
        }
    });
    (endpoint, address)
}

/// Transport settings whose connections give up after `idle` of silence
/// (a handshake that never completes, too). No keep-alive: a silent
/// connection sends nothing.
fn transport(idle: Duration) -> TransportConfig {
    let mut transport = TransportConfig::default();
    transport.max_idle_timeout(Some(idle.try_into().expect("an idle timeout")));
    transport
}

/// A client configuration trusting the test CA, offering `alpn`, whose
/// connections give up after `idle` of silence. One configuration serves
/// any number of endpoints.
pub fn client_config(alpn: &[String], idle: Duration) -> ClientConfig {
    let mut crypto = rustls::ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .expect("TLS 1.3")
        .with_root_certificates(TestCa::shared().root_store())
        .with_no_client_auth();
    crypto.alpn_protocols = alpn.iter().map(|p| p.as_bytes().to_vec()).collect();
    let quic = QuicClientConfig::try_from(crypto).expect("a QUIC client config");
    let mut config = ClientConfig::new(Arc::new(quic));
    config.transport_config(Arc::new(transport(idle)));
    config
}

/// A client endpoint with a UDP socket of its own at `local` (port 0: any
/// free port), connecting with `config`.
pub fn client_at(local: SocketAddr, config: ClientConfig) -> std::io::Result<Endpoint> {
    let mut endpoint = Endpoint::client(local)?;
    endpoint.set_default_client_config(config);
    Ok(endpoint)
}

/// One request on a new stream: what the backend answered, or why not.
pub async fn ask(connection: &quinn::Connection, what: &str) -> Result<String, String> {
    let (mut send, mut recv) = connection.open_bi().await.map_err(|e| e.to_string())?;
    send.write_all(what.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    send.finish().map_err(|e| e.to_string())?;
    let answer = recv
        .read_to_end(MAX_MESSAGE)
        .await
        .map_err(|e| e.to_string())?;
    String::from_utf8(answer).map_err(|e| e.to_string())
}
