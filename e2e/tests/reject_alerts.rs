//! Acceptance of the reject alerts (issue 19) with real TLS clients: what
//! `openssl s_client` and `curl` print when the proxy refuses their
//! ClientHello, compared with what curl prints against a real TLS server
//! (`openssl s_server -servername_fatal`) that has no certificate for the
//! name; the exact alert record of a lying length in a corpus capture; the
//! alert of every malformed-hello case of issue 28, against the one
//! `openssl s_server` sends for the same bytes; and the
//! `reject_with = "close"` and `"reset"` listeners seen from a socket.
//!
//! `openssl` and `curl` must be on `PATH`: a missing one is installed with
//! `apt-get` or the test fails saying so (never skipped). Certificates are
//! made at run time. Loopback only; every wait is bounded; every process
//! started here is killed by its PID on overrun or Drop. Run
//! `cargo build -p proxy-shell --bin preread` first.

use std::io::{self, Write};
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use e2e::certs::TestCa;
use e2e::client::{self, End};
use e2e::openssl::OpensslServer;
use e2e::proxy::{ConfigBuilder, ProxyProcess};
use e2e::testkit::{TempDir, capture, start, stderr_tail};
use e2e::tools::{require_tool, run};

/// The bound of a wait (a read, a metric, a server's start).
const T: Duration = Duration::from_secs(5);
/// The bound of one `openssl s_client` or `curl` run.
const TOOL_T: Duration = Duration::from_secs(10);

/// The name no frontend (and no certificate) has.
const UNKNOWN: &str = "unknown.example.com";

// ---------------------------------------------------------------------------
// Tools and child processes
// ---------------------------------------------------------------------------

/// The first line of `text` that holds `needle` (ASCII case-insensitive),
/// and in it the `:`-separated field that does: OpenSSL's reason string,
/// e.g. `tlsv1 unrecognized name` of
/// `error:0A000458:SSL routines::tlsv1 unrecognized name`.
fn reason_field(text: &str, needle: &str) -> Option<(String, String)> {
    let needle = needle.to_ascii_lowercase();
    let line = text
        .lines()
        .find(|line| line.to_ascii_lowercase().contains(&needle))?;
    let field = line
        .split(':')
        .find(|field| field.to_ascii_lowercase().contains(&needle))?;
    Some((line.trim().to_owned(), field.trim().to_owned()))
}

/// The OpenSSL error code (`error:0A000458`) of a line.
fn error_code(line: &str) -> Option<&str> {
    let at = line.find("error:")?;
    let code = line[at + "error:".len()..].split(':').next()?;
    Some(&line[at..at + "error:".len() + code.len()])
}

/// The name `openssl s_server` has a second certificate for.
const OTHER: &str = "other.example.com";

/// `openssl s_server` on loopback, with a certificate for
/// `default.example.com` and, for the SNI [`OTHER`], a second one; any
/// other SNI gets a fatal `unrecognized_name` alert (`-servername_fatal`).
/// Answers `GET /` with a status page (`-www`).
fn openssl_server(openssl: &Path, ca: &TestCa) -> OpensslServer {
    let default = ca.server_cert(&["default.example.com"]);
    let other = ca.server_cert(&[OTHER]);
    let files = [
        ("default.crt", default.cert_pem.as_str()),
        ("default.key", default.key_pem.as_str()),
        ("other.crt", other.cert_pem.as_str()),
        ("other.key", other.key_pem.as_str()),
    ];
    let args = [
        "-cert",
        "default.crt",
        "-key",
        "default.key",
        "-servername",
        OTHER,
        "-cert2",
        "other.crt",
        "-key2",
        "other.key",
        "-servername_fatal",
        "-www",
        "-ign_eof",
    ];
    OpensslServer::start(openssl, &files, &args)
}

/// Sends `bytes` as a client would (no half-close) and reads until the
/// proxy ends the connection: what it sent, and how it ended.
fn send_and_read(addr: SocketAddr, bytes: &[u8]) -> (Vec<u8>, End) {
    let mut stream = client::connect(addr, T).unwrap_or_else(|e| panic!("{e}"));
    stream
        .write_all(bytes)
        .unwrap_or_else(|e| panic!("write {} bytes to {addr}: {e}", bytes.len()));
    client::read_until_end(&mut stream, T)
}

/// Waits until the proxy counted `n` rejects for `reason`.
fn expect_rejected(proxy: &ProxyProcess, reason: &str, n: i64) {
    let name = format!("tcp.sni_preread.rejected.{reason}");
    proxy
        .wait_metric(&name, |v| v == n, T)
        .unwrap_or_else(|e| panic!("{e}\nstderr:\n{}", stderr_tail(proxy)));
}

/// One listener `main` whose only frontend is `a.example.com` with ALPN
/// `h2` (no backend: nothing is ever routed).
fn only_a_h2() -> ProxyProcess {
    start(
        &ConfigBuilder::new()
            .listener("main", &[])
            .frontend("alpha", "main", Some("a.example.com"), &["h2"])
            .build(),
    )
}

// ---------------------------------------------------------------------------
// 1. openssl s_client reads the alert
// ---------------------------------------------------------------------------

#[test]
fn openssl_s_client_prints_the_alert_of_the_refusal() {
    let openssl = require_tool("openssl", "openssl");
    let proxy = only_a_h2();
    let connect = proxy.addr("main").to_string();
    let dir = TempDir::new("s_client");
    let cases: [(&str, &[&str], &str, &str); 2] = [
        (
            "sni_unmatched",
            &["-servername", UNKNOWN],
            "unrecognized name",
            "alert number 112",
        ),
        (
            "alpn_unmatched",
            &["-servername", "a.example.com", "-alpn", "foo"],
            "no application protocol",
            "alert number 120",
        ),
    ];
    for (reason, extra, phrase, number) in cases {
        let mut args = vec!["s_client", "-connect", connect.as_str()];
        args.extend_from_slice(extra);
        let ran = run(&openssl, &args, dir.path(), TOOL_T).unwrap_or_else(|e| panic!("{e}"));
        eprintln!("openssl {args:?} exited {}:\n{}", ran.status, ran.both());
        assert!(
            !ran.status.success(),
            "{reason}: s_client succeeded:\n{}",
            ran.both()
        );
        let (line, field) = reason_field(&ran.stderr, phrase).unwrap_or_else(|| {
            panic!(
                "{reason}: no {phrase:?} in s_client's stderr:\n{}",
                ran.both()
            )
        });
        // OpenSSL names a received alert `tlsv1 <name>` or `tlsv1 alert <name>`
        // (`ssl/ssl_err.c`) and ends the line with its number.
        assert!(
            field.to_ascii_lowercase().starts_with("tlsv1 "),
            "{reason}: {field:?} is not a received alert's reason string: {line}"
        );
        assert!(
            line.to_ascii_lowercase().contains(number),
            "{reason}: no {number:?} in {line:?}"
        );
        // The 7-byte alert record is all the handshake read.
        assert!(
            ran.stdout.contains("SSL handshake has read 7 bytes"),
            "{reason}: s_client read more or less than one alert record:\n{}",
            ran.both()
        );
        expect_rejected(&proxy, reason, 1);
    }
}

// ---------------------------------------------------------------------------
// 2. curl sees the same alert as from a real server without the name
// ---------------------------------------------------------------------------

#[test]
fn curl_names_the_same_alert_as_against_openssl_s_server() {
    let curl = require_tool("curl", "curl");
    let openssl = require_tool("openssl", "openssl");
    let ca = TestCa::new("reject_alerts CA");
    let dir = TempDir::new("curl");
    let ca_path = dir.path().join("ca.pem");
    ca.write_pem(&ca_path).expect("write the CA");
    let ca_arg = ca_path.display().to_string();
    let curl_to = |host: &str, addr: SocketAddr| {
        let resolve = format!("{host}:{}:127.0.0.1", addr.port());
        let url = format!("https://{host}:{}/", addr.port());
        let args = [
            "--silent",
            "--show-error",
            "--max-time",
            "5",
            "--cacert",
            ca_arg.as_str(),
            "--resolve",
            resolve.as_str(),
            url.as_str(),
        ];
        let ran = run(&curl, &args, dir.path(), TOOL_T).unwrap_or_else(|e| panic!("{e}"));
        eprintln!(
            "curl {args:?} exited {}; stderr: {}",
            ran.status,
            ran.stderr.trim()
        );
        ran
    };

    let server = openssl_server(&openssl, &ca);
    // The control: the name it has is served (status page, exit 0), so its
    // refusal below is about the name alone.
    let served = curl_to(OTHER, server.addr());
    assert!(
        served.status.success() && served.stdout.contains("s_server"),
        "curl to s_server for {OTHER}:\n{}",
        served.both()
    );
    let real = curl_to(UNKNOWN, server.addr());
    // On the wire: one fatal unrecognized_name alert, then EOF, from both
    // (curl's own hello for www.b.example.com, a name neither has). The
    // record version may differ: s_server writes 0x0303, the proxy follows
    // the client's record version (0x0301 in this capture).
    let hello = capture("curl_http11.bin");
    let (from_server, server_end) = send_and_read(server.addr(), &hello);
    drop(server);

    let proxy = only_a_h2();
    let proxied = curl_to(UNKNOWN, proxy.addr("main"));
    let (from_proxy, proxy_end) = send_and_read(proxy.addr("main"), &hello);
    expect_rejected(&proxy, "sni_unmatched", 2);
    eprintln!("s_server sent {from_server:02x?} then {server_end:?}");
    eprintln!("the proxy sent {from_proxy:02x?} then {proxy_end:?}");
    for (who, bytes, end) in [
        ("s_server", &from_server, &server_end),
        ("the proxy", &from_proxy, &proxy_end),
    ] {
        assert!(
            bytes.len() == 7
                && bytes[..2] == [0x15, 0x03]
                && (0x01..=0x03).contains(&bytes[2])
                && bytes[3..] == [0x00, 0x02, 0x02, 112],
            "{who} sent {bytes:02x?}, not one fatal unrecognized_name alert record"
        );
        assert!(
            matches!(end, End::Eof),
            "{who}: {end:?} after the alert, not EOF"
        );
    }
    assert_eq!(
        from_proxy[2], 0x01,
        "the proxy's record version is the client's"
    );

    let needle = "unrecognized name";
    let (real_line, real_field) = reason_field(&real.stderr, needle)
        .unwrap_or_else(|| panic!("curl to s_server: no {needle:?}:\n{}", real.both()));
    let (proxied_line, proxied_field) = reason_field(&proxied.stderr, needle)
        .unwrap_or_else(|| panic!("curl through the proxy: no {needle:?}:\n{}", proxied.both()));
    assert_eq!(
        proxied_field, real_field,
        "the alert's name differs:\nproxy:    {proxied_line}\ns_server: {real_line}"
    );
    assert_eq!(
        error_code(&proxied_line),
        error_code(&real_line),
        "the OpenSSL error code differs:\nproxy:    {proxied_line}\ns_server: {real_line}"
    );
    assert!(
        error_code(&real_line).is_some(),
        "no error code in {real_line:?}"
    );
    assert!(
        !real.status.success(),
        "curl to s_server succeeded:\n{}",
        real.both()
    );
    assert_eq!(
        proxied.status.code(),
        real.status.code(),
        "curl's exit code differs:\nproxy:    {proxied_line}\ns_server: {real_line}"
    );
}

// ---------------------------------------------------------------------------
// 3. A lying length in a capture: decode_error, then EOF
// ---------------------------------------------------------------------------

#[test]
fn a_lying_extensions_length_gets_decode_error_then_eof() {
    let proxy = only_a_h2();
    // curl_h2.bin with its extensions length +7: record and handshake
    // lengths agree, only the extensions block claims more than it holds.
    let (received, end) = send_and_read(proxy.addr("main"), &capture("gen_d_ext_len_too_long.bin"));
    assert_eq!(
        received,
        [0x15, 0x03, 0x01, 0x00, 0x02, 0x02, 50],
        "not a decode_error alert record (then {end:?})"
    );
    assert!(
        matches!(end, End::Eof),
        "after the alert: {end:?}, not a clean EOF"
    );
    expect_rejected(&proxy, "malformed_handshake", 1);
}

// ---------------------------------------------------------------------------
// 4. Every malformed-hello case of issue 28: the alert of a real server
// ---------------------------------------------------------------------------

/// The corpus cases of issue 28, with the alert each must get: the alert
/// record's description code, and the reject reason counted.
const MALFORMED: [(&str, u8, &str); 11] = [
    ("gen_o_record_overflow_16385.bin", 22, "malformed_record"),
    (
        "gen_o_second_record_overflow_16385.bin",
        22,
        "malformed_record",
    ),
    ("gen_p_cipher_suites_len_2.bin", 50, "malformed_handshake"),
    ("gen_p_cipher_suites_len_12.bin", 50, "malformed_handshake"),
    ("gen_p_cipher_suites_len_14.bin", 50, "malformed_handshake"),
    (
        "gen_p_cipher_suites_len_2_no_ext.bin",
        50,
        "malformed_handshake",
    ),
    (
        "gen_p_cipher_suites_len_12_no_ext.bin",
        50,
        "malformed_handshake",
    ),
    (
        "gen_p_cipher_suites_len_14_no_ext.bin",
        50,
        "malformed_handshake",
    ),
    (
        "gen_q_compression_methods_len_0.bin",
        50,
        "malformed_handshake",
    ),
    (
        "gen_q_compression_methods_len_0_no_ext.bin",
        50,
        "malformed_handshake",
    ),
    ("gen_r_session_id_len_5.bin", 50, "malformed_handshake"),
];

/// A record of 16,384 + 1 bytes is `record_overflow`, in the first record
/// or a later one; a cipher-suites length fuzzed to 2, 12 or 14, a
/// compression-methods length of 0 (with and without extensions after
/// them) and a session id length that the extensions overrun are
/// `decode_error`. Each is sent to `openssl s_server` too: the proxy's
/// alert is the server's (the record version aside: the proxy follows the
/// client's, s_server writes 0x0303).
#[test]
fn each_malformed_hello_gets_the_alert_openssl_s_server_sends() {
    let openssl = require_tool("openssl", "openssl");
    let ca = TestCa::new("reject_alerts malformed CA");
    let server = openssl_server(&openssl, &ca);
    let proxy = only_a_h2();
    let mut counted = std::collections::BTreeMap::new();
    for (file, code, reason) in MALFORMED {
        let hello = capture(file);
        let (from_server, server_end) = send_and_read(server.addr(), &hello);
        let (from_proxy, proxy_end) = send_and_read(proxy.addr("main"), &hello);
        eprintln!(
            "{file}: s_server {from_server:02x?} {server_end:?}, proxy {from_proxy:02x?} {proxy_end:?}"
        );
        let record_version = [0x03, hello[2]];
        assert_eq!(
            from_proxy,
            [
                0x15,
                record_version[0],
                record_version[1],
                0x00,
                0x02,
                0x02,
                code
            ],
            "{file}: the proxy's alert (then {proxy_end:?})"
        );
        assert!(
            matches!(proxy_end, End::Eof),
            "{file}: {proxy_end:?} after the alert, not EOF"
        );
        assert!(
            from_server.len() == 7 && from_server[..2] == [0x15, 0x03],
            "{file}: s_server sent {from_server:02x?}, not one alert record"
        );
        assert_eq!(
            from_server[3..],
            from_proxy[3..],
            "{file}: s_server's alert differs from the proxy's"
        );
        *counted.entry(reason).or_insert(0) += 1;
        expect_rejected(&proxy, reason, counted[reason]);
    }
}

// ---------------------------------------------------------------------------
// 5. reject_with = "close" and "reset"
// ---------------------------------------------------------------------------

#[test]
fn reject_with_close_sends_nothing_and_reset_resets() {
    let proxy = start(
        &ConfigBuilder::new()
            .listener("close", &["reject_with = \"close\""])
            .listener("reset", &["reject_with = \"reset\""])
            .frontend("alpha", "close", Some("a.example.com"), &[])
            .frontend("alpha", "reset", Some("a.example.com"), &[])
            .build(),
    );
    // curl's hello for www.b.example.com: no frontend has that name.
    let hello = capture("curl_http11.bin");

    let (received, end) = send_and_read(proxy.addr("close"), &hello);
    assert!(received.is_empty(), "close: the proxy sent {received:02x?}");
    assert!(matches!(end, End::Eof), "close: {end:?}, not a clean EOF");
    expect_rejected(&proxy, "sni_unmatched", 1);

    let (received, end) = send_and_read(proxy.addr("reset"), &hello);
    assert!(received.is_empty(), "reset: the proxy sent {received:02x?}");
    assert!(
        matches!(end, End::Error(io::ErrorKind::ConnectionReset)),
        "reset: {end:?}, not ECONNRESET"
    );
    expect_rejected(&proxy, "sni_unmatched", 2);
}
