//! `deny_ja4` with real rustls clients: client A (TLS 1.3 and 1.2 offered)
//! has its fingerprint denied on the listener and reads an
//! `access_denied` alert; client B (TLS 1.2 only, other ciphers, another
//! fingerprint) to the same name is routed. The access log names both
//! fingerprints, and the refusal's rule.
//!
//! Client A's fingerprint is taken from its own ClientHello, read on a
//! plain loopback socket and fingerprinted by the parser. Loopback only;
//! every wait is bounded. Run `cargo build -p proxy-shell --bin preread`
//! first.

use std::io::Read;
use std::net::TcpListener;
use std::thread;
use std::time::Duration;

use e2e::backend::{BackendConfig, TlsBackend};
use e2e::client::{ClientOptions, tls_request_with};
use e2e::proxy::ConfigBuilder;
use e2e::testkit::{eventually, start, stderr_tail};
use preread_parser::tls::{Ja4, Parsed, Transport, parse_client_hello};

const T: Duration = Duration::from_secs(10);
const NAME: &str = "a.example.com";

/// The JA4 of the ClientHello `options` makes, read off a socket that
/// answers nothing and closes.
fn fingerprint_of(options: &ClientOptions) -> Ja4 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("address");
    let reader = thread::spawn(move || {
        let (mut stream, _) = listener.accept().expect("accept");
        stream.set_read_timeout(Some(T)).expect("timeout");
        let mut window = Vec::new();
        let mut buf = [0; 4096];
        loop {
            let mut scratch = Vec::new();
            if let Ok(Parsed::Complete(hello)) = parse_client_hello(&window, &mut scratch) {
                return Ja4::of(&hello, Transport::Tcp);
            }
            let n = stream.read(&mut buf).expect("the hello");
            assert!(n > 0, "the client closed before its hello was whole");
            window.extend_from_slice(&buf[..n]);
        }
    });
    let options = options.clone().timeout(Duration::from_secs(2));
    let _refused = tls_request_with(addr, &options);
    reader.join().expect("the reader")
}

#[test]
fn a_denied_fingerprint_reads_access_denied_and_another_client_routes() {
    let a = ClientOptions::new(NAME, &[]);
    let b = ClientOptions::new(NAME, &[]).tls12_only();
    let (ja4_a, ja4_b) = (fingerprint_of(&a), fingerprint_of(&b));
    assert_ne!(ja4_a, ja4_b, "the two clients must differ");

    let backend = TlsBackend::start(BackendConfig::new("web-0", &[NAME]));
    let deny = format!("deny_ja4 = [\"{ja4_a}\"]");
    let config = ConfigBuilder::new()
        .listener("main", &[&deny])
        .frontend("web", "main", Some(NAME), &[])
        .backend("web", "web-0", backend.addr())
        .build();
    let proxy = start(&config);

    let refused = tls_request_with(proxy.listener(), &a).expect_err("client A is refused");
    assert!(
        refused
            .to_ascii_lowercase()
            .replace(['_', ' '], "")
            .contains("accessdenied"),
        "client A reads access_denied: {refused}\n{}",
        stderr_tail(&proxy)
    );
    let routed = tls_request_with(proxy.listener(), &b)
        .unwrap_or_else(|e| panic!("client B routes: {e}\n{}", stderr_tail(&proxy)));
    assert_eq!(routed.field("backend"), Some("web-0"));

    let mut lines = Vec::new();
    assert!(
        eventually(T, || {
            lines = proxy.access_logs();
            lines.len() >= 2
        }),
        "two access-log lines: {lines:?}"
    );
    let field = |line: &std::collections::BTreeMap<String, String>, key: &str| {
        line.get(key).cloned().unwrap_or_default()
    };
    let denied = lines
        .iter()
        .find(|l| field(l, "outcome") == "refused:access_denied")
        .unwrap_or_else(|| panic!("a refusal line: {lines:?}"));
    assert_eq!(field(denied, "ja4"), ja4_a.to_string());
    assert_eq!(field(denied, "rule"), "listener_deny_ja4");
    assert_eq!(field(denied, "sni"), NAME);
    let piped = lines
        .iter()
        .find(|l| field(l, "outcome") == "routed")
        .unwrap_or_else(|| panic!("a routed line: {lines:?}"));
    assert_eq!(field(piped, "ja4"), ja4_b.to_string());
    assert!(!piped.contains_key("rule"));
}
