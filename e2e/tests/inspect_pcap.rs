//! `preread inspect --pcap` on a capture `tcpdump` took of real clients
//! talking to a running proxy (doc/configure.md §4.4): every first flight
//! in it is found and decided as the proxy decided it.
//!
//! One `preread start` has a TCP listener (`a.example.com` to a TLS
//! backend) and a QUIC listener (`big.example.com` to a quinn backend).
//! `tcpdump -i lo` records both listeners' ports while `openssl s_client`
//! asks for `a.example.com` and for an unknown name over TCP, and quinn
//! clients ask for `big.example.com` (a ClientHello over several Initial
//! packets, from a long ALPN list) and for an unknown name over QUIC.
//! `preread -c <the proxy's config> inspect --pcap` must then report the
//! four flows, each decided by the listener it reached, as the clients
//! saw it: the routed ones reached their backends, the others were
//! refused.
//!
//! Loopback only; every wait is bounded; tcpdump, the proxy and the
//! backends are stopped by their own handles. Run `cargo build -p
//! proxy-shell --bin preread` first.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use e2e::backend::{BackendConfig, TlsBackend};
use e2e::certs::{TestCa, provider};
use e2e::proxy::{ProxyProcess, fill, run_preread};
use e2e::tools::{require_tool, run};
use quinn::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use quinn::{ClientConfig, Endpoint, ServerConfig};
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(20);

const CONFIG: &str = r#"
[[listeners]]
address = "${addr:tcp}"

[[listeners]]
protocol = "quic"
address = "${addr:quic}"
quic_preread_timeout = "8s"

[clusters.web]
frontends = [ { address = "${addr:tcp}", sni = "a.example.com" } ]
backends = [ { address = "${web}", backend_id = "web-0" } ]

[clusters.h3]
protocol = "quic"
frontends = [ { address = "${addr:quic}", sni = "big.example.com" } ]
backends = [ { address = "${h3}", backend_id = "h3-0" } ]
"#;

/// A quinn server for `name` that answers each stream with `ok`.
fn quic_backend(name: &str) -> (Endpoint, SocketAddr) {
    let leaf = TestCa::shared().server_cert(&[name]);
    let mut crypto = rustls::ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .expect("TLS 1.3")
        .with_no_client_auth()
        .with_single_cert(leaf.chain(), leaf.key())
        .expect("the backend's certificate");
    crypto.alpn_protocols = big_alpn().into_iter().map(String::into_bytes).collect();
    let quic = QuicServerConfig::try_from(crypto).expect("a QUIC server config");
    let config = ServerConfig::with_crypto(Arc::new(quic));
    let endpoint = Endpoint::server(config, "127.0.0.1:0".parse().expect("an address"))
        .expect("a backend endpoint");
    let address = endpoint.local_addr().expect("the backend's address");
    let accepting = endpoint.clone();
    tokio::spawn(async move {
        while let Some(incoming) = accepting.accept().await {
            tokio::spawn(async move {
                let Ok(connection) = incoming.await else {
                    return;
                };
                while let Ok((mut send, _)) = connection.accept_bi().await {
                    let _ = send.write_all(b"ok").await;
                    let _ = send.finish();
                }
            });
        }
    });
    (endpoint, address)
}

/// Many long ALPN names: a ClientHello over several Initial packets.
fn big_alpn() -> Vec<String> {
    (0..70)
        .map(|i| format!("big-{i:02}-{}", "x".repeat(30)))
        .collect()
}

/// Connects through `proxy` to `name`: whether the handshake completed
/// and the backend answered.
async fn quic_exchange(proxy: SocketAddr, name: &str) -> bool {
    let mut crypto = rustls::ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .expect("TLS 1.3")
        .with_root_certificates(TestCa::shared().root_store())
        .with_no_client_auth();
    crypto.alpn_protocols = big_alpn().into_iter().map(String::into_bytes).collect();
    let quic = QuicClientConfig::try_from(crypto).expect("a QUIC client config");
    let mut endpoint =
        Endpoint::client("127.0.0.1:0".parse().expect("an address")).expect("a client endpoint");
    endpoint.set_default_client_config(ClientConfig::new(Arc::new(quic)));
    let Ok(connecting) = endpoint.connect(proxy, name) else {
        return false;
    };
    let answered = async {
        let connection = connecting.await.ok()?;
        let (mut send, mut recv) = connection.open_bi().await.ok()?;
        send.finish().ok()?;
        let answer = recv.read_to_end(64).await.ok()?;
        connection.close(0u32.into(), b"done");
        Some(answer == b"ok")
    };
    let answered = tokio::time::timeout(WAIT, answered).await;
    endpoint.wait_idle().await;
    matches!(answered, Ok(Some(true)))
}

/// `tcpdump -i lo` writing `file`, stopped (SIGINT, then waited for) on Drop.
struct Tcpdump {
    child: Child,
}

impl Tcpdump {
    fn start(file: &Path, filter: &str, dir: &Path) -> Self {
        let stderr = std::fs::File::create(dir.join("tcpdump.err")).expect("a file");
        let child = Command::new(require_tool("tcpdump", "tcpdump"))
            .args(["-i", "lo", "-s", "0", "-U", "-w"])
            .arg(file)
            .arg(filter)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("tcpdump runs");
        let capture = Self { child };
        let deadline = Instant::now() + WAIT;
        while !std::fs::read_to_string(dir.join("tcpdump.err"))
            .unwrap_or_default()
            .contains("listening on")
        {
            assert!(Instant::now() < deadline, "tcpdump did not start listening");
            std::thread::sleep(Duration::from_millis(20));
        }
        capture
    }

    fn stop(&mut self) {
        if self.child.try_wait().ok().flatten().is_some() {
            return;
        }
        let pid = libc::pid_t::try_from(self.child.id()).expect("a pid");
        // SAFETY: kill(2) on the pid of our own child, not yet reaped.
        unsafe { libc::kill(pid, libc::SIGINT) };
        let deadline = Instant::now() + WAIT;
        while self.child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Tcpdump {
    fn drop(&mut self) {
        self.stop();
    }
}

/// `openssl s_client` asks the proxy at `at` for `name`, then closes.
fn s_client(at: SocketAddr, name: &str, dir: &Path) {
    let openssl = require_tool("openssl", "openssl");
    let connect = at.to_string();
    let ran = run(
        &openssl,
        &[
            "s_client",
            "-connect",
            &connect,
            "-servername",
            name,
            "-alpn",
            "h2",
        ],
        dir,
        WAIT,
    )
    .expect("s_client runs");
    assert!(
        ran.both().contains("CONNECTED"),
        "s_client did not connect: {}",
        ran.both()
    );
}

#[test]
fn a_capture_of_tcp_and_quic_clients_is_decided_as_the_proxy_decided() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let _entered = runtime.enter();
    let web = TlsBackend::start(BackendConfig::new("web", &["a.example.com"]));
    let (_h3, h3) = quic_backend("big.example.com");
    let config = fill(
        CONFIG,
        &[("web", &web.addr().to_string()), ("h3", &h3.to_string())],
    );
    let proxy = ProxyProcess::start(&config).unwrap_or_else(|e| panic!("{e}"));
    let (tcp, quic) = (proxy.addr("tcp"), proxy.addr("quic"));
    proxy
        .wait_stderr(&format!("listening on {quic} (QUIC"), WAIT)
        .unwrap_or_else(|e| panic!("{e}"));
    let dir = tempfile::tempdir().expect("a temp dir");
    let file = dir.path().join("clients.pcap");
    let filter = format!("tcp port {} or udp port {}", tcp.port(), quic.port());
    let mut tcpdump = Tcpdump::start(&file, &filter, dir.path());

    s_client(tcp, "a.example.com", dir.path());
    s_client(tcp, "nobody.example.com", dir.path());
    assert!(
        runtime.block_on(quic_exchange(quic, "big.example.com")),
        "the routed QUIC client reached its backend"
    );
    assert!(
        !runtime.block_on(quic_exchange(quic, "unknown.example.com")),
        "the unknown name was refused"
    );
    std::thread::sleep(Duration::from_millis(300));
    tcpdump.stop();

    let config_path = proxy.config_path().display().to_string();
    let capture = file.display().to_string();
    let out = run_preread(
        &["-c", &config_path, "inspect", "--pcap", &capture],
        dir.path(),
        WAIT,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "inspect --pcap: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let flows: Vec<Value> = stdout
        .lines()
        .map(|line| serde_json::from_str(line).expect("one JSON object per line"))
        .collect();
    let summary: Vec<String> = flows
        .iter()
        .map(|f| {
            format!(
                "{} {} {} {} {}",
                f["protocol"],
                f["sni"],
                f["decision"]["verdict"],
                f["decision"]["cluster"],
                f["decision"]["reason"]
            )
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            r#""tcp" "a.example.com" "routed" "web" null"#,
            r#""tcp" "nobody.example.com" "rejected" null "sni_unmatched""#,
            r#""quic" "big.example.com" "routed" "h3" null"#,
            r#""quic" "unknown.example.com" "rejected" null "sni_unmatched""#,
        ],
        "{stdout}"
    );
    for flow in &flows[..2] {
        assert_eq!(flow["decision"]["listener"], tcp.to_string());
        assert_eq!(flow["flow"]["server"], tcp.to_string());
    }
    assert_eq!(flows[1]["decision"]["alert"], "unrecognized_name");
    for flow in &flows[2..] {
        assert_eq!(flow["decision"]["listener"], quic.to_string());
        assert_eq!(flow["flow"]["server"], quic.to_string());
        assert_eq!(flow["quic"]["version"], "v1");
    }
    let big = &flows[2];
    assert!(
        big["quic"]["packets"].as_u64() >= Some(2),
        "the big hello spans Initial packets: {big}"
    );
    assert_eq!(big["decision"]["read"], big["quic"]["datagrams"]);
    assert_eq!(flows[3]["decision"]["reply"], "connection_close");
}
