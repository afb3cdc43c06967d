//! End-to-end tests of a catch-all listener behind a load balancer
//! (`expect_proxy = true` and a frontend without `sni`), against the real
//! `preread` process: the inbound PROXY header is read and handed to the
//! backend as its cluster's `proxy_protocol` says (dropped, relayed or
//! replaced), byte for byte, exactly as an SNI listener does; the access
//! log names the header's client; `max_connections_per_ip` counts that
//! client, not the balancer. A client that speaks no TLS at all is served
//! too: the catch-all reads nothing past the header.
//!
//! Build the binary first: `cargo build -p proxy-shell`. Loopback only;
//! every wait is bounded; the proxy and the backends are stopped on Drop.

use std::collections::BTreeMap;
use std::io::Write;
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::time::Duration;

use e2e::backend::PlainBackend;
use e2e::client::{self, proxy_v1, proxy_v2, read_line, read_to_close};
use e2e::proxy::{ConfigBuilder, ProxyProcess};
use e2e::testkit::{capture, eventually, start, stderr_tail};
use preread_parser::proxy::{ProxyParsed, parse_proxy_header};

/// Bound of one wait.
const T: Duration = Duration::from_secs(5);

/// The captured ClientHello every test sends (curl, `a.example.com`).
fn hello() -> Vec<u8> {
    capture("curl_h2.bin")
}

/// The inbound header's client (TEST-NET-1) and the balancer's own
/// address (TEST-NET-2).
fn inbound(port: u16) -> (SocketAddr, SocketAddr) {
    (
        SocketAddr::from(([192, 0, 2, 10], port)),
        SocketAddr::from(([198, 51, 100, 20], 443)),
    )
}

/// A catch-all `expect_proxy` listener to cluster `plain`, whose cluster
/// lines are `cluster`, with one plain backend.
fn catch_all_proxy(cluster: &[&str]) -> (PlainBackend, ProxyProcess) {
    let backend = PlainBackend::start("plain-0");
    let config = ConfigBuilder::new()
        .listener("lb", &["expect_proxy = true"])
        .cluster("plain", cluster)
        .frontend("plain", "lb", None, &[])
        .backend("plain", "plain-0", backend.addr())
        .build();
    (backend, start(&config))
}

/// Sends `header` then `bytes` in one write, reads the backend's answer,
/// ends the write side and reads until the close. Returns the exact bytes
/// the backend received on the one connection this made.
fn exchange(proxy: &ProxyProcess, backend: &PlainBackend, header: &[u8], bytes: &[u8]) -> Vec<u8> {
    let index = backend.accepted();
    let mut stream = client::connect(proxy.listener(), T).expect("connect to the proxy");
    stream.write_all(&[header, bytes].concat()).expect("write");
    let line = read_line(&mut stream)
        .unwrap_or_else(|e| panic!("no answer through the proxy: {e}\n{}", stderr_tail(proxy)));
    assert_eq!(line, "backend=plain-0");
    stream.shutdown(Shutdown::Write).expect("shutdown write");
    let (rest, closed) = read_to_close(&mut stream, T);
    assert!(closed && rest.ends_with(b"bye\n"), "{rest:?}");
    // The backend wrote `bye` after the client's FIN: its record is whole.
    backend
        .connections()
        .get(index)
        .cloned()
        .expect("the backend recorded the connection")
}

/// The access-log lines of outcome `outcome`, once there are `count`.
fn wait_logs(proxy: &ProxyProcess, outcome: &str, count: usize) -> Vec<BTreeMap<String, String>> {
    let with = || {
        proxy
            .access_logs()
            .into_iter()
            .filter(|l| l.get("outcome").map(String::as_str) == Some(outcome))
            .collect::<Vec<_>>()
    };
    assert!(
        eventually(T, || with().len() >= count),
        "expected {count} line(s) with outcome={outcome}:\n{}",
        stderr_tail(proxy)
    );
    with()
}

#[test]
fn proxy_protocol_none_hands_the_backend_the_hello_and_nothing_before_it() {
    let (backend, proxy) = catch_all_proxy(&["proxy_protocol = \"none\""]);
    let (source, destination) = inbound(51234);
    for (version, header) in [
        ("v1", proxy_v1(source, destination)),
        ("v2", proxy_v2(source, destination)),
    ] {
        let raw = exchange(&proxy, &backend, &header, &hello());
        assert!(
            raw == hello(),
            "{version}: the backend got {} bytes, the first {:?}",
            raw.len(),
            String::from_utf8_lossy(&raw[..raw.len().min(48)])
        );
    }
    let lines = wait_logs(&proxy, "routed", 2);
    for line in &lines {
        assert_eq!(
            line.get("proxy_client").map(String::as_str),
            Some(source.to_string().as_str()),
            "{line:?}"
        );
        assert_eq!(line.get("cluster").map(String::as_str), Some("plain"));
        assert_eq!(line.get("sni").map(String::as_str), Some("-"), "unread");
    }
}

#[test]
fn relay_replays_the_header_and_send_replaces_it_with_the_real_client() {
    let (source, destination) = inbound(40000);
    let header = proxy_v2(source, destination);

    let (backend, proxy) = catch_all_proxy(&["proxy_protocol = \"relay\""]);
    let raw = exchange(&proxy, &backend, &header, &hello());
    assert!(
        raw == [header.as_slice(), &hello()].concat(),
        "relay: {raw:?}"
    );
    drop(proxy);

    let (backend, proxy) = catch_all_proxy(&["proxy_protocol = \"send\""]);
    let raw = exchange(&proxy, &backend, &proxy_v1(source, destination), &hello());
    let Ok(ProxyParsed::Complete(sent)) = parse_proxy_header(&raw) else {
        panic!(
            "send: no PROXY header first: {:?}",
            &raw[..raw.len().min(32)]
        );
    };
    assert_eq!(sent.version(), 2, "preread writes v2");
    assert_eq!(sent.source(), Some(source), "the balancer's client");
    assert_eq!(sent.destination(), Some(proxy.listener()));
    assert_eq!(sent.tlvs().count(), 0, "no SNI or ALPN was read");
    assert!(raw[sent.len()..] == hello(), "send: the hello after it");
}

#[test]
fn a_client_that_speaks_no_tls_is_served_past_the_header() {
    let (backend, proxy) = catch_all_proxy(&[]);
    let (source, destination) = inbound(40001);
    let request = b"GET / HTTP/1.0\r\n\r\n";
    let raw = exchange(&proxy, &backend, &proxy_v2(source, destination), request);
    assert_eq!(raw, request);
    assert_eq!(
        proxy.metric("tcp.sni_preread.rejected.not_tls"),
        0,
        "nothing past the header is judged"
    );
    assert_eq!(proxy.metric("tcp.sni_preread.routed"), 0, "no name matched");
}

/// Opens a session from `source` (by its header) and waits until it is
/// piped; the stream holds it open.
fn open_session(proxy: &ProxyProcess, source: SocketAddr) -> TcpStream {
    let (_, destination) = inbound(0);
    let mut stream = client::connect(proxy.listener(), T).expect("connect to the proxy");
    stream
        .write_all(&[proxy_v2(source, destination), hello()].concat())
        .expect("write");
    let line = read_line(&mut stream)
        .unwrap_or_else(|e| panic!("no answer through the proxy: {e}\n{}", stderr_tail(proxy)));
    assert_eq!(line, "backend=plain-0");
    stream
}

#[test]
fn the_per_ip_limit_counts_the_header_client_not_the_balancer() {
    let (backend, proxy) = catch_all_proxy(&["max_connections_per_ip = 1"]);
    let first = inbound(50001).0;
    let other = SocketAddr::from(([192, 0, 2, 11], 50002));
    let _held = open_session(&proxy, first);
    // Every connection comes from 127.0.0.1: only the header tells them
    // apart.
    let _other = open_session(&proxy, other);

    let (_, destination) = inbound(0);
    let mut again = client::connect(proxy.listener(), T).expect("connect to the proxy");
    again
        .write_all(
            &[
                proxy_v2(SocketAddr::from(([192, 0, 2, 10], 50003)), destination),
                hello(),
            ]
            .concat(),
        )
        .expect("write");
    let (answer, closed) = read_to_close(&mut again, T);
    assert!(closed && answer.is_empty(), "refused: {answer:?}");
    let refused = wait_logs(&proxy, "refused:per_ip_limit", 1);
    assert_eq!(
        refused[0].get("proxy_client").map(String::as_str),
        Some("192.0.2.10:50003")
    );
    assert_eq!(
        backend.accepted(),
        2,
        "the refused session never reached it"
    );
}
