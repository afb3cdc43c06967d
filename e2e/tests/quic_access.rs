//! Who may connect, on QUIC listeners and QUIC clusters, with quinn
//! clients bound to 127.0.0.2 and 127.0.0.3 (doc/configure.md §8.4):
//!
//! - a listener's `allow`/`deny` and `connection_rate_per_ip` are checked
//!   on the datagram that would start a flow: a refused source's datagrams
//!   are dropped (its handshake times out), no flow is made, and each
//!   refusal has its access-log line and rule, and its datagram counts in
//!   `quic.dropped.access_denied` or `quic.dropped.rate_limited` (the
//!   `preread_quic_dropped_datagrams_total{reason}` series), once per line;
//! - a cluster's `deny` is checked once routed, and `deny_ja4` on a
//!   listener or a cluster once the ClientHello is read: the client reads
//!   CONNECTION_CLOSE with CRYPTO_ERROR `0x100 + access_denied` (49);
//! - every flow's line carries its `ja4` (`q…`).
//!
//! Each test starts its own proxies and backends, on loopback; every wait
//! is bounded and generous (the machine is shared).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use e2e::proxy::{ProxyProcess, fill};
use e2e::quic;
use quinn::{ConnectionError, Endpoint};

/// How long a test waits for what should happen.
const WAIT: Duration = Duration::from_secs(20);
/// How long a client whose datagrams are dropped waits: its handshake
/// times out after this.
const SHORT_IDLE: Duration = Duration::from_secs(2);
/// CRYPTO_ERROR 0x100 + access_denied (49).
const ACCESS_DENIED: u64 = 0x100 + 49;

const ALLOWED: &str = "127.0.0.2";
const OTHER: &str = "127.0.0.3";

type Line = BTreeMap<String, String>;

/// A QUIC backend named `id` for `names` (ALPN h3): each stream is
/// answered with `id:` and what the client sent.
fn backend(id: &'static str, names: &[&str]) -> (Endpoint, SocketAddr) {
    quic::backend(id, names, &["h3"], false, None)
}

/// A client endpoint bound to `ip`, trusting the test CA, offering h3.
fn client_from(ip: &str, idle: Duration) -> Endpoint {
    let bind: SocketAddr = format!("{ip}:0").parse().expect("an address");
    quic::client_at(bind, quic::client_config(&["h3".to_owned()], idle)).expect("a client endpoint")
}

/// What one connection from `ip` to `name` through `proxy` came to: the
/// backend's answer, or how the handshake ended.
async fn exchange(
    proxy: SocketAddr,
    ip: &str,
    name: &str,
    idle: Duration,
) -> Result<String, ConnectionError> {
    let endpoint = client_from(ip, idle);
    let connecting = endpoint.connect(proxy, name).expect("a connect");
    let connection = tokio::time::timeout(WAIT, connecting)
        .await
        .unwrap_or(Err(ConnectionError::TimedOut))?;
    let (mut send, mut recv) = connection.open_bi().await?;
    send.write_all(b"hello")
        .await
        .map_err(|_| ConnectionError::Reset)?;
    let _ = send.finish();
    let answer = recv
        .read_to_end(64 * 1024)
        .await
        .map_err(|_| ConnectionError::Reset)?;
    connection.close(0u32.into(), b"done");
    endpoint.wait_idle().await;
    Ok(String::from_utf8_lossy(&answer).into_owned())
}

/// The CONNECTION_CLOSE error code a refused handshake read.
fn close_code(outcome: &Result<String, ConnectionError>) -> u64 {
    match outcome {
        Err(ConnectionError::ConnectionClosed(close)) => u64::from(close.error_code),
        other => panic!("expected the proxy's CONNECTION_CLOSE, got {other:?}"),
    }
}

/// Starts the proxy and waits until its QUIC listener listens.
fn start(template: &str) -> ProxyProcess {
    let proxy = ProxyProcess::start(template).unwrap_or_else(|e| panic!("{e}"));
    let address = proxy.addr("quic");
    proxy
        .wait_stderr(&format!("listening on {address} (QUIC"), WAIT)
        .unwrap_or_else(|e| panic!("{e}"));
    proxy
}

/// The first access-log line `matches` takes, waited for.
async fn line_where(proxy: &ProxyProcess, matches: impl Fn(&Line) -> bool) -> Line {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(line) = proxy.access_logs().into_iter().find(|l| matches(l)) {
            return line;
        }
        assert!(
            Instant::now() < deadline,
            "no such access-log line:\n{}",
            proxy.stderr_text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until flat metric `metric` counts as many datagrams as there
/// are access-log lines with `rule` (each refused datagram is one of
/// each), at least one, and returns the count; fails with both after
/// [`WAIT`].
async fn counted_as_logged(proxy: &ProxyProcess, metric: &str, rule: &str) -> usize {
    let deadline = Instant::now() + WAIT;
    loop {
        let lines = (proxy.access_logs().iter())
            .filter(|l| field(l, "rule") == rule)
            .count();
        let counted = proxy.metric(metric);
        if lines > 0 && usize::try_from(counted).ok() == Some(lines) {
            return lines;
        }
        assert!(
            Instant::now() < deadline,
            "{metric} = {counted}, {lines} lines with rule={rule}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn field<'a>(line: &'a Line, key: &str) -> &'a str {
    line.get(key).map_or("", String::as_str)
}

fn from(line: &Line, ip: &str) -> bool {
    field(line, "client").starts_with(&format!("{ip}:"))
}

/// Two QUIC clusters behind one QUIC listener; `listener` and `alpha`
/// are extra keys of the listener and of cluster alpha.
fn config(listener: &str, alpha: &str, backends: (SocketAddr, SocketAddr)) -> String {
    let template = format!(
        r#"
[[listeners]]
protocol = "quic"
address = "${{addr:quic}}"
# A flow's line is written when it ends: soon after its client's close.
quic_idle_timeout = "2s"
quic_preread_timeout = "8s"
{listener}

[clusters.alpha]
protocol = "quic"
frontends = [ {{ address = "${{addr:quic}}", sni = "alpha.example.com" }} ]
backends = [ {{ address = "${{alpha}}", backend_id = "alpha-0" }} ]
{alpha}

[clusters.beta]
protocol = "quic"
frontends = [ {{ address = "${{addr:quic}}", sni = "beta.example.com" }} ]
backends = [ {{ address = "${{beta}}", backend_id = "beta-0" }} ]
"#
    );
    fill(
        &template,
        &[
            ("alpha", &backends.0.to_string()),
            ("beta", &backends.1.to_string()),
        ],
    )
}

#[test]
fn a_listener_allow_list_drops_other_sources_before_any_flow() {
    quic::runtime().block_on(async {
        let (_a, alpha) = backend("alpha", &["alpha.example.com"]);
        let (_b, beta) = backend("beta", &["beta.example.com"]);
        let proxy = start(&config(
            &format!("allow = [\"{ALLOWED}/32\"]"),
            "",
            (alpha, beta),
        ));
        let at = proxy.addr("quic");
        let routed = exchange(at, ALLOWED, "alpha.example.com", WAIT).await;
        assert_eq!(routed.ok().as_deref(), Some("alpha:hello"));
        let started = Instant::now();
        let dropped = exchange(at, OTHER, "alpha.example.com", SHORT_IDLE).await;
        assert!(
            matches!(dropped, Err(ConnectionError::TimedOut)),
            "a refused source hears nothing: {dropped:?}"
        );
        assert!(started.elapsed() >= SHORT_IDLE, "{:?}", started.elapsed());
        let refused = line_where(&proxy, |l| from(l, OTHER)).await;
        assert_eq!(field(&refused, "outcome"), "refused:access_denied");
        assert_eq!(field(&refused, "rule"), "listener_allow");
        assert_eq!(field(&refused, "protocol"), "quic");
        assert_eq!(field(&refused, "sni"), "-", "nothing was read: {refused:?}");
        // No flow: every line of the refused source is a refusal.
        let lines = proxy.access_logs();
        assert!(
            lines
                .iter()
                .filter(|l| from(l, OTHER))
                .all(|l| field(l, "rule") == "listener_allow" && field(l, "preread_ms") == "-"),
            "{lines:?}"
        );
        let routed = line_where(&proxy, |l| from(l, ALLOWED)).await;
        assert_eq!(field(&routed, "outcome"), "routed");
        assert!(field(&routed, "ja4").starts_with("q13d"), "{routed:?}");
        counted_as_logged(&proxy, "quic.dropped.access_denied", "listener_allow").await;
        assert_eq!(proxy.metric("quic.dropped.rate_limited"), 0);
    });
}

#[test]
fn a_listener_rate_refuses_past_the_burst_and_spares_another_source() {
    quic::runtime().block_on(async {
        let (_a, alpha) = backend("alpha", &["alpha.example.com"]);
        let (_b, beta) = backend("beta", &["beta.example.com"]);
        let rate = "connection_rate_per_ip = { rate = 2, per = \"1h\", burst = 2 }";
        let proxy = start(&config(rate, "", (alpha, beta)));
        let at = proxy.addr("quic");
        for _ in 0..2 {
            let routed = exchange(at, ALLOWED, "beta.example.com", WAIT).await;
            assert_eq!(routed.ok().as_deref(), Some("beta:hello"));
        }
        let third = exchange(at, ALLOWED, "beta.example.com", SHORT_IDLE).await;
        assert!(matches!(third, Err(ConnectionError::TimedOut)), "{third:?}");
        let other = exchange(at, OTHER, "beta.example.com", WAIT).await;
        assert_eq!(other.ok().as_deref(), Some("beta:hello"));
        let refused = line_where(&proxy, |l| field(l, "rule") == "listener_rate").await;
        assert!(from(&refused, ALLOWED), "{refused:?}");
        assert_eq!(field(&refused, "outcome"), "refused:rate_limited");
        counted_as_logged(&proxy, "quic.dropped.rate_limited", "listener_rate").await;
        assert_eq!(proxy.metric("quic.dropped.access_denied"), 0);
    });
}

#[test]
fn a_cluster_deny_list_answers_access_denied_once_routed() {
    quic::runtime().block_on(async {
        let (_a, alpha) = backend("alpha", &["alpha.example.com"]);
        let (_b, beta) = backend("beta", &["beta.example.com"]);
        let deny = format!("deny = [\"{OTHER}/32\"]");
        let proxy = start(&config("", &deny, (alpha, beta)));
        let at = proxy.addr("quic");
        let routed = exchange(at, ALLOWED, "alpha.example.com", WAIT).await;
        assert_eq!(routed.ok().as_deref(), Some("alpha:hello"));
        let refused = exchange(at, OTHER, "alpha.example.com", WAIT).await;
        assert_eq!(close_code(&refused), ACCESS_DENIED);
        // Another cluster's list does not apply.
        let beta_routed = exchange(at, OTHER, "beta.example.com", WAIT).await;
        assert_eq!(beta_routed.ok().as_deref(), Some("beta:hello"));
        let line = line_where(&proxy, |l| field(l, "rule") == "cluster_deny").await;
        assert!(from(&line, OTHER), "{line:?}");
        assert_eq!(field(&line, "outcome"), "refused:access_denied");
        assert_eq!(field(&line, "cluster"), "alpha");
        assert_eq!(field(&line, "sni"), "alpha.example.com");
        assert!(field(&line, "ja4").starts_with("q13d"), "{line:?}");
    });
}

#[test]
fn deny_ja4_on_a_quic_listener_and_on_a_quic_cluster() {
    quic::runtime().block_on(async {
        let (_a, alpha) = backend("alpha", &["alpha.example.com"]);
        let (_b, beta) = backend("beta", &["beta.example.com"]);
        // The client's fingerprint, as the proxy logs it.
        let ja4 = {
            let proxy = start(&config("", "", (alpha, beta)));
            let routed = exchange(proxy.addr("quic"), ALLOWED, "alpha.example.com", WAIT).await;
            assert_eq!(routed.ok().as_deref(), Some("alpha:hello"));
            let line = line_where(&proxy, |l| field(l, "outcome") == "routed").await;
            field(&line, "ja4").to_owned()
        };
        assert!(ja4.starts_with("q13d") && ja4.len() == 36, "{ja4}");
        let deny = format!("deny_ja4 = [\"{ja4}\"]");

        let proxy = start(&config(&deny, "", (alpha, beta)));
        let refused = exchange(proxy.addr("quic"), ALLOWED, "beta.example.com", WAIT).await;
        assert_eq!(close_code(&refused), ACCESS_DENIED);
        let line = line_where(&proxy, |l| field(l, "rule") == "listener_deny_ja4").await;
        assert_eq!(field(&line, "outcome"), "refused:access_denied");
        assert_eq!(field(&line, "ja4"), ja4);
        drop(proxy);

        let proxy = start(&config("", &deny, (alpha, beta)));
        let at = proxy.addr("quic");
        let refused = exchange(at, ALLOWED, "alpha.example.com", WAIT).await;
        assert_eq!(close_code(&refused), ACCESS_DENIED);
        let routed = exchange(at, ALLOWED, "beta.example.com", WAIT).await;
        assert_eq!(routed.ok().as_deref(), Some("beta:hello"));
        let line = line_where(&proxy, |l| field(l, "rule") == "cluster_deny_ja4").await;
        assert_eq!(field(&line, "sni"), "alpha.example.com");
        assert_eq!(field(&line, "ja4"), ja4);
        let beta_line = line_where(&proxy, |l| field(l, "sni") == "beta.example.com").await;
        assert_eq!(field(&beta_line, "ja4"), ja4);
        assert!(!beta_line.contains_key("rule"), "{beta_line:?}");
    });
}
