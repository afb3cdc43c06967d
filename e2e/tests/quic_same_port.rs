//! HTTP/3 beside TCP on one address (doc/configure.md §8): a TCP listener
//! and a QUIC listener at the same `ip:port`, each with its own cluster
//! for the same name. A TLS client (rustls over TCP) reaches the TCP
//! backend and a quinn client the QUIC backend, at once; the CLI changes
//! one listener or frontend and leaves the other.
//!
//! Each test starts its own proxy and backends on loopback; waits are
//! bounded and generous (the machine is shared).

use std::net::SocketAddr;
use std::time::Duration;

use command::proto;
use command::proto::request::RequestType;
use command::proto::response_content::ContentType;
use e2e::backend::{BackendConfig, TlsBackend};
use e2e::client::tls_request;
use e2e::proxy::{ProxyProcess, fill};
use e2e::quic;
use quinn::{ConnectionError, Endpoint};

/// How long a test waits for what should happen.
const WAIT: Duration = Duration::from_secs(20);
const NAME: &str = "a.example.com";

const SAME_PORT: &str = r#"
[[listeners]]
address = "${addr:main}"

[[listeners]]
protocol = "quic"
address = "${addr:main}"
# A lost Initial is sent again after the client's probe timeout.
quic_preread_timeout = "8s"

[clusters.web]
frontends = [ { address = "${addr:main}", sni = "a.example.com" } ]
backends = [ { address = "${web}", backend_id = "web-0" } ]

[clusters.webq]
protocol = "quic"
frontends = [ { address = "${addr:main}", sni = "a.example.com" } ]
backends = [ { address = "${webq}", backend_id = "webq-0" } ]
"#;

/// A QUIC backend for `NAME` (its certificate from the test CA, ALPN h3)
/// answering each bidirectional stream with `webq:` and what it read.
fn quic_backend() -> (Endpoint, SocketAddr) {
    quic::backend("webq", &[NAME], &["h3"], false, None)
}

/// A quinn client trusting the test CA, offering h3 (quinn's default
/// idle timeout of 30 s).
fn quic_client() -> Endpoint {
    let config = quic::client_config(&["h3".to_owned()], Duration::from_secs(30));
    quic::client_at(SocketAddr::from(([127, 0, 0, 1], 0)), config).expect("a client endpoint")
}

/// A QUIC connection to `NAME` through the proxy.
async fn quic_connect(
    endpoint: &Endpoint,
    proxy: SocketAddr,
) -> Result<quinn::Connection, ConnectionError> {
    let connecting = endpoint.connect(proxy, NAME).expect("a connect");
    match tokio::time::timeout(WAIT, connecting).await {
        Ok(outcome) => outcome,
        Err(_) => Err(ConnectionError::TimedOut),
    }
}

/// One request on a new stream: what the backend answered.
async fn ask(connection: &quinn::Connection, what: &str) -> Result<String, String> {
    let (mut send, mut recv) = connection.open_bi().await.map_err(|e| e.to_string())?;
    send.write_all(what.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    send.finish().map_err(|e| e.to_string())?;
    let answer = recv
        .read_to_end(64 * 1024)
        .await
        .map_err(|e| e.to_string())?;
    String::from_utf8(answer).map_err(|e| e.to_string())
}

/// The TCP backend a TLS request for `NAME` through the proxy reached.
async fn tcp_backend(proxy: SocketAddr) -> Result<String, String> {
    let outcome = tokio::task::spawn_blocking(move || tls_request(proxy, NAME, &[], None))
        .await
        .map_err(|e| e.to_string())??;
    outcome
        .backend()
        .map(str::to_owned)
        .ok_or_else(|| format!("no backend in {:?}", outcome.line))
}

/// The proxy with both listeners at `${addr:main}`, listening.
fn start(web: &TlsBackend, webq: SocketAddr) -> ProxyProcess {
    let template = fill(
        SAME_PORT,
        &[
            ("web", &web.addr().to_string()),
            ("webq", &webq.to_string()),
        ],
    );
    let proxy = ProxyProcess::start(&template).unwrap_or_else(|e| panic!("{e}"));
    let address = proxy.addr("main");
    proxy
        .wait_stderr(&format!("listening on {address} (QUIC"), WAIT)
        .unwrap_or_else(|e| panic!("{e}"));
    proxy
}

/// The listeners the proxy lists: (protocol field, config).
fn listeners(proxy: &ProxyProcess) -> Vec<proto::TcpListenerConfig> {
    let response = proxy
        .send(RequestType::ListListeners(proto::ListListeners {}))
        .unwrap_or_else(|e| panic!("{e}"));
    match response.content.and_then(|c| c.content_type) {
        Some(ContentType::Listeners(list)) => list
            .listeners
            .into_iter()
            .filter_map(|entry| entry.config)
            .collect(),
        other => panic!("not a listener list: {other:?}"),
    }
}

#[test]
fn one_address_routes_one_name_to_the_tcp_and_the_quic_backend_at_once() {
    let rt = quic::runtime();
    rt.block_on(async {
        let web = TlsBackend::start(BackendConfig::new("web-0", &[NAME]));
        let (_webq, webq) = quic_backend();
        let proxy = start(&web, webq);
        let at = proxy.addr("main");
        let endpoint = quic_client();
        let connection = quic_connect(&endpoint, at)
            .await
            .unwrap_or_else(|e| panic!("{e}\n{}", proxy.stderr_text()));
        // A TLS connection and QUIC streams side by side, by the same name.
        let (tcp, quic) = tokio::join!(tcp_backend(at), ask(&connection, "hello"));
        assert_eq!(tcp, Ok("web-0".to_owned()));
        assert_eq!(quic, Ok("webq:hello".to_owned()));
        assert_eq!(ask(&connection, "again").await, Ok("webq:again".to_owned()));
        assert_eq!(tcp_backend(at).await, Ok("web-0".to_owned()));
        connection.close(0u32.into(), b"done");
        endpoint.wait_idle().await;
        assert_eq!(web.accepted(), 2);
        // `listener list` shows both, one per protocol.
        let output = proxy.cli(&["listener", "list"]).expect("cli");
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        let rows: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with(&at.to_string()))
            .collect();
        assert_eq!(rows.len(), 2, "{text}");
        let protocol = |row: &&str| row.split_whitespace().last().map(str::to_owned);
        assert!(
            rows.iter().any(|r| protocol(r).as_deref() == Some("tcp")),
            "{text}"
        );
        assert!(
            rows.iter().any(|r| protocol(r).as_deref() == Some("quic")),
            "{text}"
        );
    });
}

#[test]
fn the_cli_changes_one_protocol_and_leaves_the_other() {
    let rt = quic::runtime();
    rt.block_on(async {
        let web = TlsBackend::start(BackendConfig::new("web-0", &[NAME]));
        let (_webq, webq) = quic_backend();
        let proxy = start(&web, webq);
        let at = proxy.addr("main");
        let address = at.to_string();
        let cli = |args: &[&str]| {
            let output = proxy.cli(args).expect("cli");
            let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
            (output.status.success(), stderr)
        };
        // Update the QUIC listener: the TCP one keeps its settings.
        let tcp_before = listeners(&proxy).into_iter().find(|l| l.protocol.is_none());
        let (ok, stderr) = cli(&[
            "listener",
            "quic",
            "update",
            "-a",
            &address,
            "--quic-preread-timeout",
            "8s",
            "--max-flows",
            "5",
        ]);
        assert!(ok, "{stderr}");
        let after = listeners(&proxy);
        assert_eq!(after.len(), 2, "{after:?}");
        let quic = Some(proto::ListenerProtocol::Quic as i32);
        assert_eq!(
            after
                .iter()
                .find(|l| l.protocol == quic)
                .and_then(|l| l.max_flows),
            Some(5)
        );
        assert_eq!(after.into_iter().find(|l| l.protocol.is_none()), tcp_before);
        // A QUIC cluster's frontend named as a TCP one: refused, with the fix.
        let frontend = ["-i", "webq", "-a", &address, "--sni", NAME];
        let (ok, stderr) = cli(&[&["frontend", "tcp", "remove"][..], &frontend[..]].concat());
        assert!(!ok && stderr.contains("E209"), "{stderr}");
        assert!(stderr.contains("preread frontend quic"), "{stderr}");
        // Removing the QUIC frontend: QUIC clients of the name are refused
        // at once, TCP clients still reach their backend.
        let (ok, stderr) = cli(&[&["frontend", "quic", "remove"][..], &frontend[..]].concat());
        assert!(ok, "{stderr}");
        let endpoint = quic_client();
        match quic_connect(&endpoint, at).await {
            // CRYPTO_ERROR 0x100 + unrecognized_name (112).
            Err(ConnectionError::ConnectionClosed(close)) => {
                assert_eq!(u64::from(close.error_code), 0x100 + 112, "{close:?}");
            }
            other => panic!("expected the proxy's CONNECTION_CLOSE, got {other:?}"),
        }
        assert_eq!(tcp_backend(at).await, Ok("web-0".to_owned()));
        // And back: a QUIC client reaches its backend again.
        let (ok, stderr) = cli(&[&["frontend", "quic", "add"][..], &frontend[..]].concat());
        assert!(ok, "{stderr}");
        let connection = quic_connect(&endpoint, at)
            .await
            .unwrap_or_else(|e| panic!("{e}\n{}", proxy.stderr_text()));
        assert_eq!(ask(&connection, "back").await, Ok("webq:back".to_owned()));
        connection.close(0u32.into(), b"done");
        endpoint.wait_idle().await;
        // The TCP listener still has its frontend: removing it is refused,
        // and the QUIC listener is not the one named.
        let (ok, stderr) = cli(&["listener", "tcp", "remove", "-a", &address]);
        assert!(
            !ok && stderr.contains("frontend (") && !stderr.contains("quic"),
            "{stderr}"
        );
        assert_eq!(listeners(&proxy).len(), 2);
    });
}
