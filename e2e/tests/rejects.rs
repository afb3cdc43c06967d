//! End-to-end tests of `preread rejects` against the real `preread`
//! process: a not-TLS client, a malformed hello and an unmatched name are
//! captured with the bytes they sent, `--dump` writes each one as a file,
//! and `preread inspect` on each file gives back the reason the proxy
//! decided; a fallback is captured too; `--reason` filters; with
//! `reject_capture = 0` nothing is kept.
//!
//! Build the binary first: `cargo build -p proxy-shell`. Loopback only;
//! every wait is bounded; the proxy and the backends are stopped on Drop.

use std::io::Write;
use std::net::Shutdown;
use std::path::Path;
use std::time::Duration;

use e2e::backend::PlainBackend;
use e2e::client::{self, read_to_close};
use e2e::proxy::{ConfigBuilder, ProxyProcess};
use e2e::testkit::{TempDir, capture, start, stderr_tail};
use serde_json::Value;

/// Bound of one wait.
const T: Duration = Duration::from_secs(5);

/// A listener `main` that routes `a.example.com` only, and a listener `fb`
/// whose unmatched names go to `default_cluster = "fallback"`.
fn proxy(globals: &[&str]) -> (PlainBackend, ProxyProcess) {
    let backend = PlainBackend::start("plain-0");
    let mut config = ConfigBuilder::new()
        .listener("main", &[])
        .listener("fb", &["default_cluster = \"fallback\""])
        .frontend("alpha", "main", Some("a.example.com"), &[])
        .frontend("alpha", "fb", Some("a.example.com"), &[])
        .backend("alpha", "alpha-0", backend.addr())
        .backend("fallback", "fallback-0", backend.addr());
    for line in globals {
        config = config.global(line);
    }
    (backend, start(&config.build()))
}

/// Sends `bytes` to `listener` and reads until the proxy closes or the
/// backend answers and the client hangs up.
fn send(proxy: &ProxyProcess, listener: &str, bytes: &[u8]) {
    let mut stream = client::connect(proxy.addr(listener), T).expect("connect to the proxy");
    stream.write_all(bytes).expect("write");
    let _ = stream.shutdown(Shutdown::Write);
    let (_, closed) = read_to_close(&mut stream, T);
    assert!(closed, "the session ended\n{}", stderr_tail(proxy));
}

/// `preread --json ARGS` against the proxy: its JSON lines.
fn json_lines(proxy: &ProxyProcess, args: &[&str]) -> Vec<Value> {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let out = proxy.cli(&all).expect("run preread");
    assert!(
        out.status.success(),
        "preread {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).expect("a JSON line"))
        .collect()
}

/// What `preread inspect -c CONFIG --listener ADDR FILE` decides.
fn inspect(proxy: &ProxyProcess, listener: &str, file: &Path) -> Value {
    let config = proxy.config_path().display().to_string();
    let listener = proxy.addr(listener).to_string();
    let file = file.display().to_string();
    let lines = json_lines(
        proxy,
        &["inspect", "-c", &config, "--listener", &listener, &file],
    );
    assert_eq!(lines.len(), 1, "{lines:?}");
    lines[0]["decision"].clone()
}

#[test]
fn three_rejects_are_dumped_and_inspect_gives_each_its_reason_back() {
    let (_backend, proxy) = proxy(&[]);
    let sent = [
        (
            "main",
            b"GET / HTTP/1.0\r\n\r\n".to_vec(),
            "rejected:not_tls",
        ),
        (
            "main",
            capture("gen_d_ext_len_too_long.bin"),
            "rejected:malformed_handshake",
        ),
        ("main", capture("curl_http11.bin"), "rejected:sni_unmatched"),
        ("fb", capture("curl_http11.bin"), "fallback:sni_unmatched"),
    ];
    for (listener, bytes, _) in &sent {
        send(&proxy, listener, bytes);
    }
    let dir = TempDir::new("rejects-dump");
    let dump = dir.path().join("windows");
    let dump_arg = dump.display().to_string();
    let listed = json_lines(&proxy, &["rejects", "--dump", &dump_arg]);
    assert_eq!(listed.len(), sent.len(), "{listed:?}");
    let files = std::fs::read_dir(&dump).expect("the dump folder").count();
    assert_eq!(files, sent.len(), "one file per window");

    // Newest first: the reverse of the order they were sent in.
    for (entry, (listener, bytes, outcome)) in listed.iter().zip(sent.iter().rev()) {
        assert_eq!(entry["outcome"], *outcome, "{entry}");
        assert_eq!(entry["listener"], proxy.addr(listener).to_string());
        assert_eq!(entry["bytes"], bytes.len(), "the whole window: {entry}");
        let file = Path::new(entry["file"].as_str().expect("the file written"));
        assert_eq!(&std::fs::read(file).expect("the dumped window"), bytes);

        let decision = inspect(&proxy, listener, file);
        let (kind, reason) = outcome.split_once(':').expect("kind:reason");
        if kind == "rejected" {
            assert_eq!(decision["verdict"], "rejected", "{decision}");
            assert_eq!(decision["reason"], reason, "{file:?}: {decision}");
        } else {
            assert_eq!(decision["verdict"], "routed", "{decision}");
            assert_eq!(decision["fallback"], reason, "{file:?}: {decision}");
        }
    }

    let not_tls = json_lines(&proxy, &["rejects", "--reason", "not_tls"]);
    assert_eq!(not_tls.len(), 1, "{not_tls:?}");
    assert_eq!(not_tls[0]["outcome"], "rejected:not_tls");
    let fb = proxy.addr("fb").to_string();
    let on_fb = json_lines(&proxy, &["rejects", "--listener", &fb]);
    assert_eq!(on_fb.len(), 1, "{on_fb:?}");

    let text = proxy.cli(&["rejects"]).expect("run preread rejects");
    let table = String::from_utf8_lossy(&text.stdout);
    assert!(
        table.starts_with("TIME") && table.contains("rejected:malformed_handshake"),
        "{table}"
    );
}

#[test]
fn with_reject_capture_zero_nothing_is_kept() {
    let (_backend, proxy) = proxy(&["reject_capture = 0"]);
    send(&proxy, "main", b"GET / HTTP/1.0\r\n\r\n");
    send(&proxy, "fb", &capture("curl_http11.bin"));
    assert_eq!(proxy.metric("tcp.sni_preread.rejected.not_tls"), 1);
    assert!(json_lines(&proxy, &["rejects"]).is_empty());
}
