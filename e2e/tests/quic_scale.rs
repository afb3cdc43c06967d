//! QUIC listeners at scale and at their limits (doc/configure.md §8.1),
//! with quinn on both sides: 10,000 flows held at once, `max_flows` and
//! `max_flows_per_ip` refusing exactly the flow past them, and
//! `quic_idle_timeout` forgetting a silent flow.
//!
//! The proxy keys a flow by the client's address, so every flow here is a
//! quinn client endpoint with a UDP socket of its own. Counts are checked
//! exactly (`status` reports the flows held); the idle timeout against
//! its configured value with a generous bound, never against a race.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use e2e::proxy::{ProxyProcess, fill};
use e2e::quic::{ask, backend, client_at, client_config, runtime};
use quinn::{ClientConfig, Connection, ConnectionError, Endpoint};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

/// The concurrent flows of the scale test.
const FLOWS: usize = 10_000;
/// Handshakes in progress at once: enough to keep both cores busy, few
/// enough that a burst of Initials fits the sockets' receive buffers.
const HANDSHAKES_AT_ONCE: usize = 16;
/// How long an established test connection may stay silent (longer than
/// any test).
const LONG_IDLE: Duration = Duration::from_secs(300);
/// How long a client the proxy refuses waits before its handshake gives
/// up (a handshake through the proxy takes milliseconds).
const REFUSED_IDLE: Duration = Duration::from_secs(3);
/// How long a test waits for what should happen.
const WAIT: Duration = Duration::from_secs(30);

/// Raises this process's descriptor limit (inherited by the proxy it
/// starts) to its hard limit, which must allow `need`.
fn raise_descriptor_limit(need: u64) {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct it is given, and nothing
    // else.
    let got = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
    assert_eq!(got, 0, "getrlimit");
    assert!(
        limit.rlim_max >= need,
        "this test needs {need} descriptors, and the hard limit (ulimit -Hn) is {}",
        limit.rlim_max
    );
    limit.rlim_cur = limit.rlim_max;
    // SAFETY: setrlimit reads the struct it is given, and nothing else.
    let set = unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) };
    assert_eq!(set, 0, "setrlimit");
}

/// The backend every test routes to: `alpha.example.com` over h3, its
/// connections idle for [`LONG_IDLE`] before giving up. Runs on the
/// current tokio runtime until the endpoint is dropped.
fn alpha_backend() -> (Endpoint, SocketAddr) {
    backend(
        "alpha",
        &["alpha.example.com"],
        &["h3"],
        false,
        Some(LONG_IDLE),
    )
}

fn h3() -> Vec<String> {
    vec!["h3".to_owned()]
}

fn local(ip: [u8; 4]) -> SocketAddr {
    SocketAddr::from((IpAddr::from(ip), 0))
}

/// Starts the proxy and waits until its QUIC listeners `names` listen.
fn start(template: &str, names: &[&str]) -> ProxyProcess {
    let proxy = ProxyProcess::start(template).unwrap_or_else(|e| panic!("{e}"));
    for name in names {
        let address = proxy.addr(name);
        proxy
            .wait_stderr(&format!("listening on {address} (QUIC"), WAIT)
            .unwrap_or_else(|e| panic!("{e}"));
    }
    proxy
}

/// The flows (and TCP sessions) the proxy holds.
fn sessions(proxy: &ProxyProcess) -> u64 {
    proxy
        .status()
        .unwrap_or_else(|e| panic!("status: {e}"))
        .sessions
}

/// A client endpoint at `from` connects through `proxy` and asks `what`:
/// the endpoint and its connection, or why not.
async fn connect(
    from: SocketAddr,
    config: ClientConfig,
    proxy: SocketAddr,
    what: &str,
) -> Result<(Endpoint, Connection), String> {
    let endpoint = client_at(from, config).map_err(|e| format!("a client socket: {e}"))?;
    let connecting = endpoint
        .connect(proxy, "alpha.example.com")
        .map_err(|e| e.to_string())?;
    let connection = tokio::time::timeout(WAIT, connecting)
        .await
        .map_err(|_| "no handshake in time".to_owned())?
        .map_err(|e| e.to_string())?;
    let answer = tokio::time::timeout(WAIT, ask(&connection, what))
        .await
        .map_err(|_| "no answer in time".to_owned())??;
    if answer != format!("alpha:{what}") {
        return Err(format!("asked {what}, answered {answer}"));
    }
    Ok((endpoint, connection))
}

/// A client at `from` the proxy must refuse: its handshake times out.
async fn refused(from: SocketAddr, proxy: SocketAddr) -> Result<(), String> {
    let endpoint =
        client_at(from, client_config(&h3(), REFUSED_IDLE)).map_err(|e| e.to_string())?;
    let connecting = endpoint
        .connect(proxy, "alpha.example.com")
        .map_err(|e| e.to_string())?;
    match tokio::time::timeout(WAIT, connecting).await {
        Ok(Err(ConnectionError::TimedOut)) => Ok(()),
        other => Err(format!("expected a handshake timeout, got {other:?}")),
    }
}

const SCALE: &str = r#"
worker_count = 2

[[listeners]]
protocol = "quic"
address = "${addr:quic}"
quic_idle_timeout = "300s"
max_flows = 10000

[clusters.alpha]
protocol = "quic"
frontends = [ { address = "${addr:quic}", sni = "alpha.example.com" } ]
backends = [ { address = "${alpha}", backend_id = "alpha-0" } ]
"#;

/// 10,000 client endpoints, each one flow, complete an exchange and are
/// held at once by two workers; the 10,001st flow is over `max_flows`;
/// then every one of the 10,000 exchanges again through its flow.
#[test]
fn ten_thousand_concurrent_flows_and_the_next_is_over_max_flows() {
    // Each flow is a socket here and one in the proxy (to the backend).
    raise_descriptor_limit(FLOWS as u64 + 1_000);
    let rt = runtime();
    rt.block_on(async {
        let (_alpha, alpha) = alpha_backend();
        let proxy = start(&fill(SCALE, &[("alpha", &alpha.to_string())]), &["quic"]);
        let at = proxy.addr("quic");
        let config = client_config(&h3(), LONG_IDLE);
        let started = Instant::now();
        let gate = Arc::new(Semaphore::new(HANDSHAKES_AT_ONCE));
        let mut opening = JoinSet::new();
        for i in 0..FLOWS {
            let (gate, config) = (Arc::clone(&gate), config.clone());
            opening.spawn(async move {
                let _turn = gate.acquire_owned().await.map_err(|e| e.to_string())?;
                connect(local([127, 0, 0, 1]), config, at, &format!("first {i}"))
                    .await
                    .map(|open| (i, open))
                    .map_err(|e| format!("flow {i}: {e}"))
            });
        }
        let mut open = Vec::with_capacity(FLOWS);
        let mut failed = Vec::new();
        while let Some(joined) = opening.join_next().await {
            match joined.expect("a flow's task") {
                Ok(flow) => open.push(flow),
                Err(e) => failed.push(e),
            }
        }
        eprintln!("{} flows opened in {:?}", open.len(), started.elapsed());
        assert!(
            failed.is_empty(),
            "{} of {FLOWS} flows failed, e.g. {:?}",
            failed.len(),
            &failed[..failed.len().min(5)]
        );
        assert_eq!(sessions(&proxy), FLOWS as u64);

        // One more, from another address too: over max_flows.
        refused(local([127, 0, 0, 2]), at)
            .await
            .unwrap_or_else(|e| panic!("the flow past max_flows: {e}"));
        assert_eq!(sessions(&proxy), FLOWS as u64);

        // Every flow still relays: each connection asks again.
        let again = Instant::now();
        let mut asking = JoinSet::new();
        for (i, (_endpoint, connection)) in &open {
            let (i, connection, gate) = (*i, connection.clone(), Arc::clone(&gate));
            asking.spawn(async move {
                let _turn = gate.acquire_owned().await.map_err(|e| e.to_string())?;
                let what = format!("again {i}");
                match tokio::time::timeout(WAIT, ask(&connection, &what)).await {
                    Ok(Ok(answer)) if answer == format!("alpha:{what}") => Ok(()),
                    other => Err(format!("flow {i}: {other:?}")),
                }
            });
        }
        let mut failed = Vec::new();
        while let Some(joined) = asking.join_next().await {
            if let Err(e) = joined.expect("an exchange's task") {
                failed.push(e);
            }
        }
        eprintln!("{FLOWS} flows asked again in {:?}", again.elapsed());
        assert!(
            failed.is_empty(),
            "{} of {FLOWS} second exchanges failed, e.g. {:?}",
            failed.len(),
            &failed[..failed.len().min(5)]
        );
        for (_, (_endpoint, connection)) in &open {
            connection.close(0u32.into(), b"done");
        }
    });
}

const LIMITS: &str = r#"
worker_count = 2

[[listeners]]
protocol = "quic"
address = "${addr:capped}"
quic_idle_timeout = "300s"
max_flows = 3

[[listeners]]
protocol = "quic"
address = "${addr:per_ip}"
quic_idle_timeout = "300s"
max_flows_per_ip = 2

[clusters.alpha]
protocol = "quic"
frontends = [
  { address = "${addr:capped}", sni = "alpha.example.com" },
  { address = "${addr:per_ip}", sni = "alpha.example.com" },
]
backends = [ { address = "${alpha}", backend_id = "alpha-0" } ]
"#;

/// `max_flows = 3` admits three flows and refuses the fourth, whatever
/// its address; `max_flows_per_ip = 2` admits two flows of an address,
/// refuses its third, and admits another address's. Both count over the
/// two workers.
#[test]
fn max_flows_and_max_flows_per_ip_refuse_exactly_the_next_flow() {
    let rt = runtime();
    rt.block_on(async {
        let (_alpha, alpha) = alpha_backend();
        let proxy = start(
            &fill(LIMITS, &[("alpha", &alpha.to_string())]),
            &["capped", "per_ip"],
        );
        let (capped, per_ip) = (proxy.addr("capped"), proxy.addr("per_ip"));
        let config = client_config(&h3(), LONG_IDLE);
        let mut open = Vec::new();
        for (i, ip) in [[127, 0, 0, 1], [127, 0, 0, 1], [127, 0, 0, 2]]
            .into_iter()
            .enumerate()
        {
            let flow = connect(local(ip), config.clone(), capped, &format!("capped {i}")).await;
            open.push(flow.unwrap_or_else(|e| panic!("flow {i} within max_flows: {e}")));
        }
        assert_eq!(sessions(&proxy), 3);
        for ip in [[127, 0, 0, 1], [127, 0, 0, 3]] {
            refused(local(ip), capped)
                .await
                .unwrap_or_else(|e| panic!("a fourth flow from {ip:?}: {e}"));
        }
        assert_eq!(sessions(&proxy), 3);

        for i in 0..2 {
            let flow = connect(
                local([127, 0, 0, 1]),
                config.clone(),
                per_ip,
                &format!("ip {i}"),
            )
            .await;
            open.push(flow.unwrap_or_else(|e| panic!("flow {i} of 127.0.0.1: {e}")));
        }
        refused(local([127, 0, 0, 1]), per_ip)
            .await
            .unwrap_or_else(|e| panic!("a third flow of 127.0.0.1: {e}"));
        let other = connect(local([127, 0, 0, 2]), config.clone(), per_ip, "other").await;
        open.push(other.unwrap_or_else(|e| panic!("a flow of 127.0.0.2: {e}")));
        assert_eq!(sessions(&proxy), 6);
        for (_endpoint, connection) in &open {
            connection.close(0u32.into(), b"done");
        }
    });
}

const IDLE: &str = r#"
[[listeners]]
protocol = "quic"
address = "${addr:quic}"
quic_idle_timeout = "1s"

[clusters.alpha]
protocol = "quic"
frontends = [ { address = "${addr:quic}", sni = "alpha.example.com" } ]
backends = [ { address = "${alpha}", backend_id = "alpha-0" } ]
"#;

/// The configured idle timeout.
const IDLE_TIMEOUT: Duration = Duration::from_secs(1);
/// How late past it a loaded machine may forget the flow (the last
/// acknowledgements after the exchange, the timer, the log line).
const IDLE_SLACK: Duration = Duration::from_secs(5);

/// A connection that stays open but silent: the proxy forgets its flow
/// `quic_idle_timeout` after its last datagram (not before the request
/// went out plus the timeout; not long after the answer came back plus
/// the timeout), writes its access-log line and holds no flow after.
#[test]
fn a_silent_flow_is_forgotten_after_quic_idle_timeout() {
    let rt = runtime();
    rt.block_on(async {
        let (_alpha, alpha) = alpha_backend();
        let proxy = start(&fill(IDLE, &[("alpha", &alpha.to_string())]), &["quic"]);
        let at = proxy.addr("quic");
        let endpoint = client_at(local([127, 0, 0, 1]), client_config(&h3(), LONG_IDLE))
            .expect("a client endpoint");
        let connection = tokio::time::timeout(
            WAIT,
            endpoint
                .connect(at, "alpha.example.com")
                .expect("a connect"),
        )
        .await
        .expect("a handshake in time")
        .expect("a handshake");
        let asked = Instant::now();
        assert_eq!(ask(&connection, "one").await, Ok("alpha:one".to_owned()));
        let answered = Instant::now();
        let listener = at.to_string();
        let forgotten = loop {
            let ended = proxy
                .access_logs()
                .into_iter()
                .any(|line| line.get("listener") == Some(&listener));
            if ended {
                break Instant::now();
            }
            assert!(
                answered.elapsed() < IDLE_TIMEOUT + IDLE_SLACK,
                "the flow is still held {:?} after the answer:\n{}",
                answered.elapsed(),
                proxy.stderr_text()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let after = forgotten.duration_since(asked);
        eprintln!("forgotten {after:?} after the request");
        assert!(after >= IDLE_TIMEOUT, "forgotten after {after:?}");
        assert_eq!(sessions(&proxy), 0);
        connection.close(0u32.into(), b"done");
    });
}
