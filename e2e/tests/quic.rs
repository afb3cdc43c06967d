//! QUIC listeners end to end, with quinn on both sides: QUIC servers as
//! backends (each with its own certificate, from the test CA) and quinn
//! clients, through the proxy on loopback (doc/configure.md §8).
//!
//! Each test starts its own proxy and backends. Timings are compared with
//! generous bounds (the machine is shared): a refused client must read
//! the proxy's CONNECTION_CLOSE well before its own handshake timeout.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use e2e::certs::TestCa;
use e2e::proxy::{ProxyProcess, fill};
use e2e::quic::{ask, client_at, client_config, runtime};
use e2e::tools::require_tool;
use quinn::{ConnectionError, Endpoint};

#[path = "quic/observability.rs"]
mod observability;

/// How long a test client waits on a silent peer.
const CLIENT_IDLE: Duration = Duration::from_secs(10);
/// How long a test waits for what should happen.
const WAIT: Duration = Duration::from_secs(20);

/// A QUIC backend named `id` serving `names` with `alpn` (quinn's idle
/// timeout); with `retry`, it answers every first Initial with a Retry.
fn backend(id: &'static str, names: &[&str], alpn: &[&str], retry: bool) -> (Endpoint, SocketAddr) {
    e2e::quic::backend(id, names, alpn, retry, None)
}

/// A client endpoint trusting the test CA, offering `alpn`.
fn client(alpn: &[String]) -> Endpoint {
    client_with_idle(alpn, CLIENT_IDLE)
}

/// Connects through `proxy` to `name` and asks one thing.
async fn exchange(proxy: SocketAddr, name: &str, alpn: &[String]) -> Result<String, String> {
    let endpoint = client(alpn);
    let connecting = endpoint.connect(proxy, name).map_err(|e| e.to_string())?;
    let connection = tokio::time::timeout(WAIT, connecting)
        .await
        .map_err(|_| "no handshake in time".to_owned())?
        .map_err(|e| e.to_string())?;
    let answer = ask(&connection, "hello").await;
    connection.close(0u32.into(), b"done");
    endpoint.wait_idle().await;
    answer
}

fn alpn(list: &[&str]) -> Vec<String> {
    list.iter().map(|p| (*p).to_owned()).collect()
}

/// Starts the proxy with a QUIC listener at `${addr:quic}` and waits until
/// it listens.
fn start(template: &str) -> ProxyProcess {
    let proxy = ProxyProcess::start(template).unwrap_or_else(|e| panic!("{e}"));
    let address = proxy.addr("quic");
    proxy
        .wait_stderr(&format!("listening on {address} (QUIC"), WAIT)
        .unwrap_or_else(|e| panic!("{e}"));
    proxy
}

const TWO_NAMES: &str = r#"
[[listeners]]
protocol = "quic"
address = "${addr:quic}"
quic_idle_timeout = "30s"
# A lost Initial is sent again after the client's probe timeout (about a
# second with quinn's initial RTT of 333 ms): the preread waits for it.
quic_preread_timeout = "8s"

[clusters.alpha]
protocol = "quic"
frontends = [
  { address = "${addr:quic}", sni = "alpha.example.com" },
  { address = "${addr:quic}", sni = "big.example.com" },
  { address = "${addr:quic}", sni = "proto.example.com", alpn = ["proto-a"] },
]
backends = [ { address = "${alpha}", backend_id = "alpha-0" } ]

[clusters.beta]
protocol = "quic"
frontends = [
  { address = "${addr:quic}", sni = "beta.example.com" },
  { address = "${addr:quic}", sni = "proto.example.com", alpn = ["proto-b"] },
]
backends = [ { address = "${beta}", backend_id = "beta-0" } ]
"#;

/// Many long ALPN names: a ClientHello over two or three Initial packets.
fn big_alpn() -> Vec<String> {
    (0..70)
        .map(|i| format!("big-{i:02}-{}", "x".repeat(30)))
        .collect()
}

#[test]
fn two_names_alpn_and_a_hello_over_several_initials_reach_their_backends() {
    let rt = runtime();
    rt.block_on(async {
        let big = big_alpn();
        let big_refs: Vec<&str> = big.iter().map(String::as_str).collect();
        let mut alpha_alpn = vec!["proto-a", "h3"];
        alpha_alpn.extend(big_refs.iter().take(1));
        let (_alpha, alpha) = backend(
            "alpha",
            &["alpha.example.com", "big.example.com", "proto.example.com"],
            &alpha_alpn,
            false,
        );
        let (_beta, beta) = backend(
            "beta",
            &["beta.example.com", "proto.example.com"],
            &["proto-b", "h3"],
            false,
        );
        let template = fill(
            TWO_NAMES,
            &[("alpha", &alpha.to_string()), ("beta", &beta.to_string())],
        );
        let proxy = start(&template);
        let at = proxy.addr("quic");
        let h3 = alpn(&["h3"]);
        assert_eq!(
            exchange(at, "alpha.example.com", &h3).await,
            Ok("alpha:hello".to_owned())
        );
        assert_eq!(
            exchange(at, "beta.example.com", &h3).await,
            Ok("beta:hello".to_owned())
        );
        // One name, two clusters by ALPN.
        assert_eq!(
            exchange(at, "proto.example.com", &alpn(&["proto-b"])).await,
            Ok("beta:hello".to_owned())
        );
        assert_eq!(
            exchange(at, "proto.example.com", &alpn(&["proto-a"])).await,
            Ok("alpha:hello".to_owned())
        );
        // About 2.9 KB of ALPN: the hello spans several Initials.
        assert_eq!(
            exchange(at, "big.example.com", &big).await,
            Ok("alpha:hello".to_owned())
        );
    });
}

#[test]
fn an_unknown_name_reads_a_connection_close_at_once() {
    let rt = runtime();
    rt.block_on(async {
        let (_alpha, alpha) = backend("alpha", &["alpha.example.com"], &["h3"], false);
        let (_beta, beta) = backend("beta", &["beta.example.com"], &["h3"], false);
        let template = fill(
            TWO_NAMES,
            &[("alpha", &alpha.to_string()), ("beta", &beta.to_string())],
        );
        let proxy = start(&template);
        let endpoint = client(&alpn(&["h3"]));
        let started = Instant::now();
        let connecting = endpoint
            .connect(proxy.addr("quic"), "nobody.example.com")
            .expect("a connect");
        let outcome = tokio::time::timeout(WAIT, connecting).await;
        let elapsed = started.elapsed();
        let Ok(Err(ConnectionError::ConnectionClosed(close))) = outcome else {
            panic!("expected the proxy's CONNECTION_CLOSE, got {outcome:?}");
        };
        // CRYPTO_ERROR 0x100 + unrecognized_name (112).
        assert_eq!(u64::from(close.error_code), 0x100 + 112, "{close:?}");
        eprintln!("unknown name: CONNECTION_CLOSE read after {elapsed:?}");
        // Within the client's first round trip, far below its timeout.
        assert!(elapsed < CLIENT_IDLE / 4, "{elapsed:?}");
        // One access-log line for the flow.
        let deadline = Instant::now() + WAIT;
        let line = loop {
            let found = proxy.access_logs().into_iter().find(|line| {
                line.get("outcome").map(String::as_str) == Some("rejected:sni_unmatched")
            });
            match found {
                Some(line) => break line,
                None if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                None => panic!("no access-log line:\n{}", proxy.stderr_text()),
            }
        };
        let field = |key: &str| line.get(key).cloned().unwrap_or_default();
        assert_eq!(field("protocol"), "quic", "{line:?}");
        assert_eq!(field("quic_version"), "v1", "{line:?}");
        assert_eq!(field("sni"), "nobody.example.com", "{line:?}");
        assert!(
            field("datagrams_in").parse::<u64>().is_ok_and(|n| n >= 1),
            "{line:?}"
        );
        assert!(
            field("bytes_in").parse::<u64>().is_ok_and(|n| n >= 1200),
            "{line:?}"
        );
    });
}

const ONE_BACKEND: &str = r#"
[[listeners]]
protocol = "quic"
address = "${addr:quic}"
quic_idle_timeout = "${idle}"
max_flows_per_ip = ${per_ip}

[clusters.alpha]
protocol = "quic"
frontends = [ { address = "${addr:quic}", sni = "alpha.example.com" } ]
backends = [ { address = "${alpha}", backend_id = "alpha-0" } ]
"#;

#[test]
fn a_retry_server_and_a_rebinding_client_keep_their_connection() {
    let rt = runtime();
    rt.block_on(async {
        let (_alpha, alpha) = backend("alpha", &["alpha.example.com"], &["h3"], true);
        let template = fill(
            ONE_BACKEND,
            &[
                ("alpha", &alpha.to_string()),
                ("idle", "30s"),
                ("per_ip", "0"),
            ],
        );
        let proxy = start(&template);
        let endpoint = client(&alpn(&["h3"]));
        let connection = tokio::time::timeout(
            WAIT,
            endpoint
                .connect(proxy.addr("quic"), "alpha.example.com")
                .expect("a connect"),
        )
        .await
        .expect("a handshake in time")
        .expect("a handshake through the Retry");
        assert_eq!(ask(&connection, "one").await, Ok("alpha:one".to_owned()));
        // The client's port changes mid-connection.
        let socket = std::net::UdpSocket::bind("127.0.0.1:0").expect("a new socket");
        endpoint.rebind(socket).expect("a rebind");
        let answer = tokio::time::timeout(WAIT, ask(&connection, "two")).await;
        assert_eq!(answer, Ok(Ok("alpha:two".to_owned())));
        connection.close(0u32.into(), b"done");
        endpoint.wait_idle().await;
    });
}

#[test]
fn max_flows_per_ip_refuses_and_an_idle_flow_frees_its_place() {
    let rt = runtime();
    rt.block_on(async {
        let (_alpha, alpha) = backend("alpha", &["alpha.example.com"], &["h3"], false);
        let idle = Duration::from_secs(2);
        let template = fill(
            ONE_BACKEND,
            &[
                ("alpha", &alpha.to_string()),
                ("idle", "2s"),
                ("per_ip", "1"),
            ],
        );
        let proxy = start(&template);
        let at = proxy.addr("quic");
        let h3 = alpn(&["h3"]);
        let first = client(&h3);
        let kept = first
            .connect(at, "alpha.example.com")
            .expect("a connect")
            .await
            .expect("the first flow");
        assert_eq!(ask(&kept, "one").await, Ok("alpha:one".to_owned()));
        // A second flow of 127.0.0.1 is over the limit: its datagrams are
        // dropped, and its handshake times out.
        let mut short = client_with_idle(&h3, Duration::from_secs(1));
        let second = short
            .connect(at, "alpha.example.com")
            .expect("a connect")
            .await;
        assert!(
            matches!(second, Err(ConnectionError::TimedOut)),
            "{second:?}"
        );
        // The first connection goes silent; its flow idles out after
        // quic_idle_timeout, and a new flow is admitted.
        kept.close(0u32.into(), b"done");
        first.wait_idle().await;
        tokio::time::sleep(idle * 2).await;
        short = client(&h3);
        let third = tokio::time::timeout(
            WAIT,
            short.connect(at, "alpha.example.com").expect("a connect"),
        )
        .await
        .expect("a handshake in time")
        .expect("a flow after the idle timeout");
        assert_eq!(ask(&third, "three").await, Ok("alpha:three".to_owned()));
        third.close(0u32.into(), b"done");
        short.wait_idle().await;
    });
}

/// A client trusting the test CA, offering `alpn`, whose handshake gives
/// up after `idle`.
fn client_with_idle(alpn: &[String], idle: Duration) -> Endpoint {
    let local = SocketAddr::from(([127, 0, 0, 1], 0));
    client_at(local, client_config(alpn, idle)).expect("a client endpoint")
}

/// An ngtcp2 example server (`gtlsserver`, Debian's `ngtcp2-server`)
/// serving `hello.txt` (holding `marker`) over HTTP/3 with a certificate
/// of the test CA for `name`; with `retry`, it validates addresses with a
/// Retry. Killed on drop.
struct Ngtcp2Server {
    child: std::process::Child,
    address: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Drop for Ngtcp2Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn ngtcp2_server(name: &str, marker: &str, retry: bool) -> Ngtcp2Server {
    let dir = tempfile::tempdir().expect("a temp dir");
    let leaf = TestCa::shared().server_cert(&[name]);
    let (key, cert) = (dir.path().join("key.pem"), dir.path().join("cert.pem"));
    std::fs::write(&key, &leaf.key_pem).expect("the key file");
    std::fs::write(&cert, &leaf.cert_pem).expect("the certificate file");
    let htdocs = dir.path().join("htdocs");
    std::fs::create_dir(&htdocs).expect("htdocs");
    std::fs::write(htdocs.join("hello.txt"), marker).expect("hello.txt");
    // A free UDP port: bound, read, closed (ngtcp2 binds it at once).
    let port = std::net::UdpSocket::bind("127.0.0.1:0")
        .and_then(|s| s.local_addr())
        .expect("a free UDP port")
        .port();
    let mut command = std::process::Command::new(require_tool("gtlsserver", "ngtcp2-server"));
    command
        .arg("-q")
        .arg(format!("--htdocs={}", htdocs.display()));
    if retry {
        command.arg("--validate-addr");
    }
    let child = command
        .arg("127.0.0.1")
        .arg(port.to_string())
        .arg(&key)
        .arg(&cert)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("gtlsserver (Debian's ngtcp2-server) runs");
    Ngtcp2Server {
        child,
        address: SocketAddr::from(([127, 0, 0, 1], port)),
        _dir: dir,
    }
}

/// `gtlsclient` (Debian's `ngtcp2-client`) fetches `hello.txt` from `name`
/// through `proxy`: the body, or why not.
fn ngtcp2_get(proxy: SocketAddr, name: &str) -> Result<String, String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let mut child = std::process::Command::new(require_tool("gtlsclient", "ngtcp2-client"))
        .arg("-q")
        .arg(format!("--sni={name}"))
        .arg("--exit-on-all-streams-close")
        .arg("--timeout=10s")
        .arg(format!("--download={}", dir.path().display()))
        .arg(proxy.ip().to_string())
        .arg(proxy.port().to_string())
        .arg(format!("https://{name}/hello.txt"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("gtlsclient (Debian's ngtcp2-client): {e}"))?;
    let deadline = Instant::now() + WAIT;
    loop {
        if child.try_wait().map_err(|e| e.to_string())?.is_some() {
            break;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err("gtlsclient did not finish in time".to_owned());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    std::fs::read_to_string(dir.path().join("hello.txt")).map_err(|e| format!("no body: {e}"))
}

/// HTTP/3 with ngtcp2 on both sides, the server behind a Retry.
/// (Debian's libngtcp2 refuses QUIC v2, "unsupported version", so v2 is
/// covered by the parser's RFC 9369 vectors and the simulation only.)
#[test]
fn ngtcp2_http3_by_name_through_a_retry() {
    // gtlsclient sends `localhost` as the SNI of a numeric host.
    let alpha = ngtcp2_server("localhost", "from alpha", true);
    let template = fill(
        ONE_BACKEND,
        &[
            ("alpha", &alpha.address.to_string()),
            ("idle", "30s"),
            ("per_ip", "0"),
        ],
    )
    .replace("sni = \"alpha.example.com\"", "sni = \"localhost\"");
    let proxy = start(&template);
    let at = proxy.addr("quic");
    // The servers start while the proxy does; a first try may find one
    // not bound yet, so each fetch gets a few tries.
    let fetch = |name: &str| {
        let mut last = String::new();
        for _ in 0..5 {
            match ngtcp2_get(at, name) {
                Ok(body) => return Ok(body),
                Err(e) => last = e,
            }
        }
        Err(last)
    };
    assert_eq!(fetch("localhost"), Ok("from alpha".to_owned()));
}

/// A relay in front of the proxy for one client: of the client's first
/// datagrams it swaps the first two (the second Initial arrives first),
/// drops the third and sends the fourth twice; the rest, and everything
/// back, pass unchanged. Its address.
async fn lossy_relay(proxy: SocketAddr) -> SocketAddr {
    let front = tokio::net::UdpSocket::bind("127.0.0.1:0")
        .await
        .expect("the relay's front");
    let back = tokio::net::UdpSocket::bind("127.0.0.1:0")
        .await
        .expect("the relay's back");
    back.connect(proxy).await.expect("the relay's connect");
    let address = front.local_addr().expect("the relay's address");
    tokio::spawn(async move {
        let (mut to_proxy, mut to_client) = (vec![0; 65_536], vec![0; 65_536]);
        let mut client = None;
        let mut held: Option<Vec<u8>> = None;
        let mut seen = 0_u32;
        loop {
            tokio::select! {
                received = front.recv_from(&mut to_proxy) => {
                    let Ok((len, from)) = received else { return };
                    client = Some(from);
                    seen += 1;
                    let datagram = &to_proxy[..len];
                    match seen {
                        1 => held = Some(datagram.to_vec()),
                        2 => {
                            let _ = back.send(datagram).await;
                            if let Some(first) = held.take() {
                                let _ = back.send(&first).await;
                            }
                        }
                        3 => {}
                        4 => {
                            let _ = back.send(datagram).await;
                            let _ = back.send(datagram).await;
                        }
                        _ => {
                            let _ = back.send(datagram).await;
                        }
                    }
                }
                received = back.recv(&mut to_client) => {
                    let Ok(len) = received else { return };
                    if let Some(client) = client {
                        let _ = front.send_to(&to_client[..len], client).await;
                    }
                }
            }
        }
    });
    address
}

#[test]
fn a_hello_reordered_lost_and_duplicated_still_connects() {
    let rt = runtime();
    rt.block_on(async {
        let big = big_alpn();
        let (_alpha, alpha) = backend(
            "alpha",
            &["big.example.com", "alpha.example.com"],
            &[big[0].as_str()],
            false,
        );
        let (_beta, beta) = backend("beta", &["beta.example.com"], &["h3"], false);
        let template = fill(
            TWO_NAMES,
            &[("alpha", &alpha.to_string()), ("beta", &beta.to_string())],
        );
        let proxy = start(&template);
        let relay = lossy_relay(proxy.addr("quic")).await;
        // The hello spans several Initials: the second arrives first, one
        // is lost (the client sends it again), one comes twice.
        assert_eq!(
            exchange(relay, "big.example.com", &big).await,
            Ok("alpha:hello".to_owned())
        );
    });
}
