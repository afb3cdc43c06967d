//! `preread upgrade` with QUIC flows open (doc/configure.md, "Upgrading
//! without dropping connections"; LIFECYCLE.md §13): the old process hands
//! its UDP sockets and its decided flows, with their backend sockets, to
//! the new one.
//!
//! A quinn client with an open connection through the proxy exchanges
//! requests with a quinn backend before the upgrade, while it runs, and
//! after it on the same connection; a new connection routes too; the old
//! process exits; the successor says it adopted the flow, and the flow's
//! single access-log line (written by the successor when it idles out)
//! covers its whole life, with the counts carried over.
//!
//! Without the handover the new process would not know the flow: the
//! client's short-header packets would be dropped and its requests would
//! time out. An upgrade that fails leaves the connection with the old
//! process, which reads its sockets again. Loopback only; every wait is
//! bounded.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use e2e::proxy::{ProxyProcess, fill};
use e2e::quic;
use e2e::testkit::stderr_tail;
use quinn::Endpoint;

/// How long a test waits for what should happen.
const WAIT: Duration = Duration::from_secs(30);
/// The client's idle timeout: far longer than an upgrade on a loaded
/// machine, so only a lost flow can end the connection.
const CLIENT_IDLE: Duration = Duration::from_secs(60);

const CONFIG: &str = r#"
worker_count = 2
soft_stop_grace = 20

[[listeners]]
protocol = "quic"
address = "${addr:quic}"
quic_idle_timeout = "8s"

[clusters.alpha]
protocol = "quic"
frontends = [ { address = "${addr:quic}", sni = "alpha.example.com" } ]
backends = [ { address = "${alpha}", backend_id = "alpha-0" } ]
"#;

/// A quinn backend for `alpha.example.com` answering each bidirectional
/// stream with `alpha:` and what the client sent.
fn backend() -> (Endpoint, SocketAddr) {
    quic::backend(
        "alpha",
        &["alpha.example.com"],
        &["h3"],
        false,
        Some(CLIENT_IDLE),
    )
}

/// A client endpoint trusting the test CA, offering `h3`.
fn client() -> Endpoint {
    let config = quic::client_config(&["h3".to_owned()], CLIENT_IDLE);
    quic::client_at(SocketAddr::from(([127, 0, 0, 1], 0)), config).expect("a client endpoint")
}

async fn connect(endpoint: &Endpoint, proxy: SocketAddr) -> quinn::Connection {
    let connecting = endpoint
        .connect(proxy, "alpha.example.com")
        .expect("a connect");
    tokio::time::timeout(WAIT, connecting)
        .await
        .expect("a handshake in time")
        .expect("a handshake")
}

/// One request on a new stream of `connection`: what the backend
/// answered, within [`WAIT`].
async fn ask(connection: &quinn::Connection, what: &str) -> Result<String, String> {
    tokio::time::timeout(WAIT, quic::ask(connection, what))
        .await
        .map_err(|_| format!("no answer to {what:?} in time"))?
}

/// `rounds` requests on the open `connection`, each answered by alpha.
fn answers_after(
    rt: &tokio::runtime::Runtime,
    proxy: &ProxyProcess,
    connection: &quinn::Connection,
    rounds: usize,
) {
    for round in 0..rounds {
        let what = format!("after-{round}");
        assert_eq!(
            rt.block_on(ask(connection, &what)),
            Ok(format!("alpha:{what}")),
            "{}",
            stderr_tail(proxy)
        );
    }
}

/// A connection opened now, from a new client socket, reaches alpha.
fn a_new_connection_routes(rt: &tokio::runtime::Runtime, at: SocketAddr) {
    let fresh = rt.block_on(async { client() });
    let second = rt.block_on(connect(&fresh, at));
    assert_eq!(rt.block_on(ask(&second, "new")), Ok("alpha:new".to_owned()));
}

#[test]
fn an_open_quic_connection_keeps_exchanging_across_an_upgrade() {
    let rt = quic::runtime();
    let (_backend, alpha) = rt.block_on(async { backend() });
    let template = fill(CONFIG, &[("alpha", &alpha.to_string())]);
    let mut proxy = ProxyProcess::start(&template).unwrap_or_else(|e| panic!("{e}"));
    let at = proxy.addr("quic");
    proxy
        .wait_stderr(&format!("listening on {at} (QUIC"), WAIT)
        .unwrap_or_else(|e| panic!("{e}"));
    let old_pid = proxy.pid();

    let endpoint = rt.block_on(async { client() });
    let connection = rt.block_on(connect(&endpoint, at));
    let local = endpoint.local_addr().expect("the client's address");
    let opened = Instant::now();
    for round in 0..3 {
        let what = format!("before-{round}");
        assert_eq!(
            rt.block_on(ask(&connection, &what)),
            Ok(format!("alpha:{what}"))
        );
    }

    // Requests on the open connection while the upgrade runs: each is
    // answered (a datagram that waited in a socket during the handover is
    // read by the successor).
    let during = {
        let connection = connection.clone();
        rt.spawn(async move {
            let mut answers = Vec::new();
            for round in 0..20 {
                let what = format!("during-{round}");
                answers.push((what.clone(), ask(&connection, &what).await));
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            answers
        })
    };
    let out = proxy
        .upgrade(&[], Duration::from_secs(60))
        .expect("upgrade ran");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "upgrade failed: {stdout}{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        stderr_tail(&proxy)
    );
    let new_pid = proxy.serving_pid().expect("status answers");
    assert_ne!(new_pid, old_pid);
    proxy
        .wait_stderr("1 of 1 flow(s) adopted", WAIT)
        .unwrap_or_else(|e| panic!("the successor did not adopt the flow: {e}"));
    for (what, answer) in rt
        .block_on(during)
        .expect("the requests during the upgrade")
    {
        assert_eq!(
            answer,
            Ok(format!("alpha:{what}")),
            "{}",
            stderr_tail(&proxy)
        );
    }

    // The old process has no TCP session to drain: it exits, and the
    // successor alone relays the connection from now on.
    let status = proxy.wait_exit(WAIT).expect("the old process exits");
    assert!(status.success(), "{status}");
    answers_after(&rt, &proxy, &connection, 5);
    // A new connection routes through the successor.
    a_new_connection_routes(&rt, at);
    assert!(ProxyProcess::is_running(new_pid));

    // Once the connection is closed and its flow idles out, the successor
    // writes its one line: the old process wrote none, and the line covers
    // the whole connection (its first datagram came before the upgrade).
    connection.close(0u32.into(), b"done");
    let lived = opened.elapsed();
    let client_text = local.to_string();
    let deadline = Instant::now() + WAIT;
    let lines = loop {
        let lines: Vec<_> = proxy
            .access_logs()
            .into_iter()
            .filter(|line| line.get("client") == Some(&client_text))
            .collect();
        if !lines.is_empty() || Instant::now() >= deadline {
            break lines;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(lines.len(), 1, "{lines:?}\n{}", stderr_tail(&proxy));
    let field = |key: &str| lines[0].get(key).cloned().unwrap_or_default();
    assert_eq!(field("outcome"), "routed", "{lines:?}");
    assert_eq!(field("backend"), "alpha-0", "{lines:?}");
    assert_eq!(field("sni"), "alpha.example.com", "{lines:?}");
    assert_eq!(field("quic_version"), "v1", "{lines:?}");
    let duration = field("duration_ms").parse::<u128>().unwrap_or(0);
    assert!(
        duration + 1_000 >= lived.as_millis(),
        "the line covers {duration} ms of a connection of {lived:?}: {lines:?}"
    );
    // 3 + 20 + 5 requests, each at least one datagram each way.
    let datagrams_in = field("datagrams_in").parse::<u64>().unwrap_or(0);
    assert!(datagrams_in >= 28, "{lines:?}");
}

/// An upgrade that fails (the new binary exits at once) leaves the old
/// process relaying: its workers, which stopped reading their QUIC sockets
/// for the export, read them again, so the open connection goes on.
#[test]
fn a_failed_upgrade_leaves_the_open_connection_with_the_old_process() {
    let rt = quic::runtime();
    let (_backend, alpha) = rt.block_on(async { backend() });
    let template = fill(CONFIG, &[("alpha", &alpha.to_string())]);
    let mut proxy = ProxyProcess::start(&template).unwrap_or_else(|e| panic!("{e}"));
    let at = proxy.addr("quic");
    proxy
        .wait_stderr(&format!("listening on {at} (QUIC"), WAIT)
        .unwrap_or_else(|e| panic!("{e}"));
    let endpoint = rt.block_on(async { client() });
    let connection = rt.block_on(connect(&endpoint, at));
    assert_eq!(
        rt.block_on(ask(&connection, "before")),
        Ok("alpha:before".to_owned())
    );
    let out = proxy
        .upgrade(&["--binary", "/bin/false"], Duration::from_secs(30))
        .expect("upgrade ran");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("keeps serving"), "{stderr}");
    assert_eq!(proxy.serving_pid().expect("status"), proxy.pid());
    answers_after(&rt, &proxy, &connection, 3);
    a_new_connection_routes(&rt, at);
    assert!(proxy.exit_status().is_none());
}
