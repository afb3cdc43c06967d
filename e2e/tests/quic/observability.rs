//! What an operator sees of a QUIC listener (doc/configure.md §5.3, §5.4,
//! §4.5): routed, rejected and dropped traffic through a running proxy
//! (quinn clients and backends, and raw datagrams from UDP sockets), its
//! Prometheus page checked by `promtool check metrics` and against what
//! was sent, and a rejected flow's datagrams dumped by `preread rejects
//! --dump` and read back by `preread inspect --quic`.
//!
//! Counts are exact where the test alone decides them (raw datagrams on
//! loopback). A quinn client's datagrams vary with its timers, so those
//! are checked against the proxy's own access-log lines, flow by flow,
//! once every flow of the listener has ended.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::path::Path;
use std::time::{Duration, Instant};

use e2e::proxy::{ProxyProcess, fill};
use e2e::testkit::capture;
use e2e::tools::{require_tool, run};
use preread_parser::quic::{Version, client_first_flight};
use serde_json::Value;

use super::{WAIT, alpn, ask, backend, client, exchange, runtime};

const CONFIG: &str = r#"
metrics_address = "${addr:metrics}"
worker_count = 2

[[listeners]]
protocol = "quic"
address = "${addr:quic}"
quic_idle_timeout = "3s"
quic_preread_timeout = "8s"

[[listeners]]
protocol = "quic"
address = "${addr:limited}"
max_flows = 1

[clusters.alpha]
protocol = "quic"
frontends = [
  { address = "${addr:quic}", sni = "alpha.example.com" },
  { address = "${addr:limited}", sni = "alpha.example.com" },
]
backends = [ { address = "${alpha}", backend_id = "alpha-0" } ]
"#;

/// Raw short-header datagrams sent from a socket with no flow.
const STRAYS: usize = 5;

/// The datagrams an undecided flow holds (doc/configure.md §8.1).
const FLOW_CAP: usize = 32;

/// The first Initial of a real client's flight whose ClientHello needs
/// more, [`FLOW_CAP`] + 1 times: the flow holds the first 32, and the
/// last overflows it.
fn one_initial_too_often() -> Vec<Vec<u8>> {
    let record = capture("curl_http11.bin");
    let hello = record.get(5..).expect("a TLS record");
    let flight = client_first_flight(Version::V1, &[0x77; 8], &[], hello, 100);
    assert!(flight.len() > 1, "the hello spans several Initials");
    vec![flight[0].clone(); FLOW_CAP + 1]
}

/// `GET /metrics`: the body of a 200, or why there is none yet.
fn scrape(address: SocketAddr) -> Result<String, String> {
    let mut stream =
        TcpStream::connect_timeout(&address, Duration::from_secs(5)).map_err(|e| e.to_string())?;
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(|e| e.to_string())?;
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: preread\r\n\r\n")
        .map_err(|e| e.to_string())?;
    let mut answer = String::new();
    stream
        .read_to_string(&mut answer)
        .map_err(|e| e.to_string())?;
    match answer.split_once("\r\n\r\n") {
        Some((head, body)) if head.starts_with("HTTP/1.1 200") => Ok(body.to_owned()),
        _ => Err(answer),
    }
}

/// The page once the endpoint answers, within [`WAIT`].
fn page(proxy: &ProxyProcess) -> String {
    let deadline = Instant::now() + WAIT;
    loop {
        match scrape(proxy.addr("metrics")) {
            Ok(page) => return page,
            Err(why) if Instant::now() > deadline => panic!("no scrape: {why}"),
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

/// The value of the sample `name{labels}` (labels in any order, all of
/// them given); `None` when the page has no such sample.
fn sample(page: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    page.lines().find_map(|line| {
        let (series, value) = line.rsplit_once(' ')?;
        let (family, rest) = series.split_once('{')?;
        let held: Vec<&str> = rest.strip_suffix('}')?.split(',').collect();
        let wanted: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
        let same = family == name
            && held.len() == wanted.len()
            && wanted.iter().all(|w| held.contains(&w.as_str()));
        same.then(|| value.parse().ok()).flatten()
    })
}

/// [`sample`], which must be on the page.
fn value(page: &str, name: &str, labels: &[(&str, &str)]) -> u64 {
    let found = sample(page, name, labels)
        .unwrap_or_else(|| panic!("no sample {name}{labels:?} on the page:\n{page}"));
    // Every sample checked here is a whole count.
    found as u64
}

/// `promtool check metrics` accepts `page`.
fn promtool_check(page: &str) {
    let promtool = require_tool("promtool", "prometheus");
    let dir = tempfile::tempdir().expect("a temp dir");
    std::fs::write(dir.path().join("page.txt"), page).expect("write the page");
    let command = format!("\"{}\" check metrics < page.txt", promtool.display());
    let check = run(
        Path::new("sh"),
        &["-c", &command],
        dir.path(),
        Duration::from_secs(20),
    )
    .expect("run promtool");
    assert!(
        check.status.success(),
        "promtool check metrics: {}{}\n{page}",
        check.stdout,
        check.stderr
    );
}

/// A client Initial of QUIC version `version` (v1 is 1) with an 8-byte
/// DCID, padded to 1200 bytes, whose payload is not what the DCID's keys
/// protect: version 1 does not open (`quic_undecryptable`), an unknown
/// version is not read (`quic_version`).
fn forged_initial(version: u32) -> Vec<u8> {
    let mut datagram = vec![0xc3];
    datagram.extend_from_slice(&version.to_be_bytes());
    datagram.push(8);
    datagram.extend_from_slice(&[0x5a; 8]);
    datagram.push(0); // SCID length
    datagram.push(0); // token length
    let length = 1200 - datagram.len() - 2;
    let length = u16::try_from(length).expect("a 2-byte varint") | 0x4000;
    datagram.extend_from_slice(&length.to_be_bytes());
    datagram.resize(1200, 0x3c);
    datagram
}

/// Sends `datagrams` from a new socket to `to`, and waits up to a second
/// for an answer, which tells the proxy read them.
fn send_raw(to: SocketAddr, datagrams: &[Vec<u8>]) -> Option<Vec<u8>> {
    let socket = UdpSocket::bind("127.0.0.1:0").expect("a UDP socket");
    for datagram in datagrams {
        socket.send_to(datagram, to).expect("send a datagram");
    }
    socket
        .set_read_timeout(Some(Duration::from_secs(1)))
        .expect("a read timeout");
    let mut answer = vec![0; 2048];
    let len = socket.recv(&mut answer).ok()?;
    answer.truncate(len);
    Some(answer)
}

/// The access-log lines of listener `at`.
fn lines_of(proxy: &ProxyProcess, at: SocketAddr) -> Vec<BTreeMap<String, String>> {
    let at = at.to_string();
    proxy
        .access_logs()
        .into_iter()
        .filter(|line| line.get("listener") == Some(&at))
        .collect()
}

fn field(line: &BTreeMap<String, String>, key: &str) -> u64 {
    line.get(key)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no number {key} in {line:?}"))
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

#[test]
fn routed_rejected_and_dropped_datagrams_are_counted_and_a_reject_is_dumped() {
    let rt = runtime();
    rt.block_on(async {
        let (_alpha, alpha) = backend("alpha", &["alpha.example.com"], &["h3"], false);
        let proxy = super::start(&fill(CONFIG, &[("alpha", &alpha.to_string())]));
        let (at, limited) = (proxy.addr("quic"), proxy.addr("limited"));
        let (main, full) = (at.to_string(), limited.to_string());

        // Every series a QUIC listener's config names exists at 0 first.
        let first = page(&proxy);
        for listener in [main.as_str(), full.as_str()] {
            let l = ("listener", listener);
            assert_eq!(value(&first, "preread_quic_flows_active", &[l]), 0);
            for direction in ["in", "out"] {
                let labels = [l, ("direction", direction)];
                assert_eq!(value(&first, "preread_quic_datagrams_total", &labels), 0);
            }
            for reason in [
                "unknown_flow",
                "max_flows",
                "max_flows_per_ip",
                "flow_buffer_full",
                "buffer_full",
                "rejected",
                "refused",
                "closed",
                "send_failed",
            ] {
                let labels = [l, ("reason", reason)];
                let dropped = value(&first, "preread_quic_dropped_datagrams_total", &labels);
                assert_eq!(dropped, 0, "{labels:?}");
            }
            let routed = [l, ("cluster", "alpha")];
            assert_eq!(value(&first, "preread_preread_routed_total", &routed), 0);
            let rejected = [l, ("reason", "quic_undecryptable")];
            assert_eq!(
                value(&first, "preread_preread_rejected_total", &rejected),
                0
            );
            assert_eq!(
                value(&first, "preread_preread_duration_seconds_count", &[l]),
                0
            );
        }
        promtool_check(&first);

        // Dropped: short headers nobody knows, sent while no flow exists (a
        // short header from a new port of an IP holding one answered flow
        // would be taken for that flow's NAT rebinding, §8.2).
        send_raw(at, &vec![vec![0x40; 40]; STRAYS]);

        // Routed: two flows by name.
        let h3 = alpn(&["h3"]);
        for _ in 0..2 {
            let answer = exchange(at, "alpha.example.com", &h3).await;
            assert_eq!(answer, Ok("alpha:hello".to_owned()));
        }
        // Rejected: an unknown name (a CONNECTION_CLOSE), a version the
        // proxy cannot read (a Version Negotiation) and an Initial that
        // does not open.
        let endpoint = client(&h3);
        let refused = tokio::time::timeout(
            WAIT,
            endpoint
                .connect(at, "nobody.example.com")
                .expect("a connect"),
        )
        .await;
        assert!(matches!(refused, Ok(Err(_))), "{refused:?}");
        let negotiation = send_raw(at, &[forged_initial(0x1a2a_3a4a)]);
        let negotiation = negotiation.expect("a Version Negotiation packet");
        assert_eq!(negotiation.get(1..5), Some(&[0u8; 4][..]), "version 0");
        send_raw(at, &[forged_initial(1)]);
        // Dropped: one datagram past an undecided flow's cap, and the
        // flow's held ones with its rejection (`too_large`, no reply).
        send_raw(at, &one_initial_too_often());
        // Dropped: a second flow on a listener holding its one.
        let holder = client(&h3);
        let held = tokio::time::timeout(
            WAIT,
            holder
                .connect(limited, "alpha.example.com")
                .expect("a connect"),
        )
        .await
        .expect("a handshake in time")
        .expect("the limited listener's one flow");
        assert_eq!(ask(&held, "kept").await, Ok("alpha:kept".to_owned()));
        send_raw(limited, &[forged_initial(1)]);

        // Every flow of the main listener ends (quic_idle_timeout, 3 s),
        // and its access-log line (written by another thread) is out.
        let deadline = Instant::now() + WAIT + WAIT;
        let page = loop {
            let page = page(&proxy);
            let l = ("listener", main.as_str());
            let active = value(&page, "preread_quic_flows_active", &[l]);
            let decided = value(&page, "preread_preread_duration_seconds_count", &[l]);
            let logged = lines_of(&proxy, at).len() as u64;
            if active == 0 && logged == decided {
                break page;
            }
            assert!(Instant::now() < deadline, "flows still open:\n{page}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        promtool_check(&page);
        let lines = lines_of(&proxy, at);
        let outcome = |line: &BTreeMap<String, String>| line["outcome"].clone();
        let count = |wanted: &str| lines.iter().filter(|l| outcome(l) == wanted).count() as u64;
        let unmatched = count("rejected:sni_unmatched");
        assert_eq!(count("routed"), 2, "{lines:?}");
        assert!(unmatched >= 1, "{lines:?}");
        assert_eq!(count("rejected:quic_version"), 1, "{lines:?}");
        assert_eq!(count("rejected:quic_undecryptable"), 1, "{lines:?}");
        assert_eq!(count("rejected:too_large"), 1, "{lines:?}");
        assert_eq!(lines.len() as u64, 5 + unmatched, "{lines:?}");

        let l = ("listener", main.as_str());
        let with = |label: (&'static str, &'static str)| [l, label];
        let metric = |name: &str, labels: &[(&str, &str)]| value(&page, name, labels);
        assert_eq!(
            metric("preread_preread_routed_total", &[l, ("cluster", "alpha")]),
            2
        );
        for (reason, n) in [
            ("sni_unmatched", unmatched),
            ("quic_version", 1),
            ("quic_undecryptable", 1),
            ("too_large", 1),
            ("no_sni", 0),
        ] {
            let labels = [l, ("reason", reason)];
            assert_eq!(metric("preread_preread_rejected_total", &labels), n);
        }
        let decided = 2 + unmatched + 3;
        assert_eq!(
            metric("preread_preread_duration_seconds_count", &[l]),
            decided
        );
        assert_eq!(
            metric("preread_client_hello_bytes_count", &[l]),
            2 + unmatched,
            "the forged Initials carry no hello, the cut one no whole hello"
        );
        assert_eq!(metric("preread_preread_active", &[l]), 0);

        // Datagrams: each one read went to a flow (the access log's
        // datagrams_in) or was dropped before any flow.
        let dropped = |reason: &'static str| {
            metric(
                "preread_quic_dropped_datagrams_total",
                &with(("reason", reason)),
            )
        };
        let strays = dropped("unknown_flow");
        assert!(strays >= STRAYS as u64, "{strays}");
        let logged_in: u64 = lines.iter().map(|line| field(line, "datagrams_in")).sum();
        let logged_out: u64 = lines.iter().map(|line| field(line, "datagrams_out")).sum();
        let datagrams_in = metric("preread_quic_datagrams_total", &with(("direction", "in")));
        assert_eq!(datagrams_in, logged_in + strays, "{lines:?}");
        // Out: the backend's relayed datagrams, and one reply per rejected
        // flow that got one (not the undecryptable one's, at most).
        let datagrams_out = metric("preread_quic_datagrams_total", &with(("direction", "out")));
        let replies = datagrams_out
            .checked_sub(logged_out)
            .unwrap_or_else(|| panic!("{datagrams_out} out, {logged_out} logged"));
        assert!(
            (unmatched + 1..=unmatched + 2).contains(&replies),
            "{replies} replies for {unmatched} unknown names and two forged Initials"
        );
        // The rejected flows' datagrams are dropped, each of them: the
        // one past the cap as such, the others with their flow.
        let rejected_in: u64 = lines
            .iter()
            .filter(|line| outcome(line).starts_with("rejected:"))
            .map(|line| field(line, "datagrams_in"))
            .sum();
        assert_eq!(dropped("flow_buffer_full"), 1);
        assert_eq!(dropped("rejected") + 1, rejected_in);
        for reason in ["max_flows", "buffer_full", "refused", "closed"] {
            assert_eq!(dropped(reason), 0, "{reason}");
        }

        // The limited listener holds its one flow and dropped the other.
        let f = ("listener", full.as_str());
        assert_eq!(metric("preread_quic_flows_active", &[f]), 1);
        assert_eq!(
            metric(
                "preread_quic_dropped_datagrams_total",
                &[f, ("reason", "max_flows")]
            ),
            1
        );
        held.close(0u32.into(), b"done");
        holder.wait_idle().await;
        endpoint.wait_idle().await;

        // The rejected flows' datagrams, dumped, read back by inspect.
        let dir = tempfile::tempdir().expect("a temp dir");
        let dump = dir.path().join("windows").display().to_string();
        let listed = json_lines(&proxy, &["rejects", "--listener", &main, "--dump", &dump]);
        assert_eq!(listed.len() as u64, 3 + unmatched, "{listed:?}");
        let config = proxy.config_path().display().to_string();
        for entry in &listed {
            assert_eq!(entry["protocol"], "quic", "{entry}");
            let file = entry["file"].as_str().expect("the file written");
            assert!(file.ends_with(".quic.bin"), "{file}");
            let reason = entry["outcome"]
                .as_str()
                .and_then(|o| o.strip_prefix("rejected:"))
                .expect("a rejected flow");
            let read = json_lines(
                &proxy,
                &[
                    "inspect",
                    "-c",
                    &config,
                    "--listener",
                    &main,
                    "--quic",
                    file,
                ],
            );
            assert_eq!(read.len(), 1, "{read:?}");
            let decision = &read[0]["decision"];
            if reason == "too_large" {
                // A decision of the shell's (its buffer), not of the
                // datagrams: they still need more.
                assert_eq!(read[0]["quic"]["datagrams"], FLOW_CAP, "{}", read[0]);
                assert_eq!(decision["verdict"], "need_more", "{}", read[0]);
                continue;
            }
            assert_eq!(decision["verdict"], "rejected", "{file}: {}", read[0]);
            assert_eq!(decision["reason"], reason, "{file}: {}", read[0]);
            if reason == "sni_unmatched" {
                assert_eq!(read[0]["sni"], "nobody.example.com", "{}", read[0]);
                assert_eq!(read[0]["protocol"], "quic", "{}", read[0]);
            }
        }
    });
}
