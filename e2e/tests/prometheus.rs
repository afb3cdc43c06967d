//! Acceptance of the Prometheus endpoint (issue 17): a running proxy that
//! routed, fell back and rejected connections (real TLS clients and
//! backends) is scraped, and the page is read by real exposition parsers:
//! `promtool check metrics` (Debian's `prometheus`) and Python's
//! `prometheus_client` (Debian's `python3-prometheus-client`), in the
//! Prometheus text format and in OpenMetrics. The families then hold the
//! moves the traffic made, every family has its HELP and TYPE lines, and
//! no family name holds an id.
//!
//! Missing tools are installed with `apt-get` or the test fails saying so
//! (never skipped). Build the binary first: `cargo build -p proxy-shell`.
//! Loopback only; every wait is bounded; processes are stopped on Drop.

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::Duration;

use command::channel::{BlockingChannel, MAX_ANSWER_LEN};
use command::proto::{self, request::RequestType};
use e2e::backend::{BackendConfig, TlsBackend};
use e2e::client::{self, read_to_close, tls_request};
use e2e::proxy::{ConfigBuilder, ProxyProcess};
use e2e::testkit::{TempDir, start, stderr_tail};
use e2e::tools::{require_tool, run};
use prost::Message;
use serde_json::Value;

/// Bound of one wait or one tool run.
const T: Duration = Duration::from_secs(10);

/// Ids no family name may contain.
const CLUSTER: &str = "webcluster";
const BACKEND: &str = "webbackend7";

/// Parses the page given as argv[1] with `prometheus_client`, as the
/// format argv[2] (`text` or `openmetrics`), and prints its families as
/// JSON: any parse error exits non-zero with Python's message.
const PARSE: &str = r#"
import json, sys
from prometheus_client.parser import text_string_to_metric_families as text
from prometheus_client.openmetrics.parser import text_string_to_metric_families as om
page = open(sys.argv[1]).read()
parse = om if sys.argv[2] == "openmetrics" else text
out = []
for family in parse(page):
    out.append({"name": family.name, "type": family.type, "help": family.documentation,
                "samples": [{"name": s.name, "labels": s.labels, "value": s.value}
                            for s in family.samples]})
print(json.dumps(out))
"#;

/// A listener `main` that routes `www.example.com` to `webcluster`, and a
/// listener `fb` whose unmatched names go to `default_cluster`.
fn proxy() -> (TlsBackend, TlsBackend, ProxyProcess) {
    let web = TlsBackend::start(BackendConfig::new(BACKEND, &["www.example.com"]));
    let fallback = TlsBackend::start(BackendConfig::new("fallback-0", &["zz.example.net"]));
    let config = ConfigBuilder::new()
        .global("metrics_address = \"${addr:metrics}\"")
        .global("worker_count = 2")
        .listener("main", &[])
        .listener("fb", &["default_cluster = \"fallback\""])
        .frontend(CLUSTER, "main", Some("www.example.com"), &[])
        .backend(CLUSTER, BACKEND, web.addr())
        .backend("fallback", "fallback-0", fallback.addr())
        .build();
    (web, fallback, start(&config))
}

/// `GET /metrics` with `accept`: the `Content-Type` and the body of a 200.
fn scrape(address: SocketAddr, accept: Option<&str>) -> (String, String) {
    let mut stream = TcpStream::connect_timeout(&address, T).expect("connect to /metrics");
    stream.set_read_timeout(Some(T)).expect("read timeout");
    let accept = accept.map_or(String::new(), |a| format!("Accept: {a}\r\n"));
    let request = format!("GET /metrics HTTP/1.1\r\nHost: preread\r\n{accept}\r\n");
    stream
        .write_all(request.as_bytes())
        .expect("send the scrape");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("read the answer");
    let (head, body) = answer.split_once("\r\n\r\n").expect("an HTTP answer");
    assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
    let content_type = head
        .lines()
        .find_map(|line| line.strip_prefix("Content-Type: "))
        .expect("a Content-Type");
    (content_type.to_owned(), body.to_owned())
}

/// `promtool check metrics` accepts `page` (written to `dir`).
fn promtool_check(promtool: &Path, dir: &Path, page: &str) {
    std::fs::write(dir.join("page.txt"), page).expect("write the page");
    let promtool_path = promtool.display().to_string();
    let check = run(
        Path::new("sh"),
        &[
            "-c",
            &format!("\"{promtool_path}\" check metrics < page.txt"),
        ],
        dir,
        T,
    )
    .expect("run promtool");
    assert!(
        check.status.success(),
        "promtool check metrics: {}{}\n{page}",
        check.stdout,
        check.stderr
    );
}

/// The samples of `family` (by its sample name) on `page` whose labels
/// include `label="value"`, as whole lines.
fn lines_of<'p>(page: &'p str, family: &str, label: &str, value: &str) -> Vec<&'p str> {
    let needle = format!("{label}=\"{value}\"");
    page.lines()
        .filter(|line| line.starts_with(&format!("{family}{{")) && line.contains(&needle))
        .collect()
}

/// Python's view of `page`, parsed as `format`.
fn python_families(dir: &Path, page: &str, format: &str) -> Vec<Value> {
    let python = require_tool("/usr/bin/python3", "python3");
    require_tool(
        "/usr/lib/python3/dist-packages/prometheus_client/parser.py",
        "python3-prometheus-client",
    );
    std::fs::write(dir.join("parse.py"), PARSE).expect("write parse.py");
    std::fs::write(dir.join(format), page).expect("write the page");
    let ran = run(&python, &["parse.py", format, format], dir, T).expect("run python3");
    assert!(
        ran.status.success(),
        "prometheus_client refused the {format} page: {}\n{page}",
        ran.stderr
    );
    serde_json::from_str::<Vec<Value>>(&ran.stdout).expect("the parser's JSON")
}

/// The value of the sample `name` whose labels include `labels`.
fn sample(families: &[Value], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    families
        .iter()
        .flat_map(|f| f["samples"].as_array().into_iter().flatten())
        .find(|s| {
            s["name"] == name
                && labels
                    .iter()
                    .all(|(k, v)| s["labels"][*k].as_str() == Some(*v))
        })
        .and_then(|s| s["value"].as_f64())
}

#[test]
fn a_scrape_parses_in_both_formats_and_holds_the_traffic() {
    let promtool = require_tool("promtool", "prometheus");
    let (_web, _fallback, proxy) = proxy();
    let (main, fb) = (proxy.addr("main"), proxy.addr("fb"));
    let listener = main.to_string();

    // Routed, over real TLS, twice.
    for _ in 0..2 {
        let outcome = tls_request(main, "www.example.com", &[], None)
            .unwrap_or_else(|e| panic!("routed: {e}\n{}", stderr_tail(&proxy)));
        assert_eq!(outcome.backend(), Some(BACKEND));
    }
    // Fallen back: an unknown name on `fb` reaches the fallback backend.
    let outcome = tls_request(fb, "zz.example.net", &[], None)
        .unwrap_or_else(|e| panic!("fallback: {e}\n{}", stderr_tail(&proxy)));
    assert_eq!(outcome.backend(), Some("fallback-0"));
    // Rejected: plain HTTP on `main`.
    let mut plain = client::connect(main, T).expect("connect");
    plain
        .write_all(b"GET / HTTP/1.0\r\n\r\n")
        .expect("write HTTP");
    let (_, closed) = read_to_close(&mut plain, T);
    assert!(closed, "the not-TLS client was closed");

    let dir = TempDir::new("prometheus");
    let (content_type, page) = scrape(proxy.addr("metrics"), None);
    assert_eq!(content_type, "text/plain; version=0.0.4; charset=utf-8");
    promtool_check(&promtool, dir.path(), &page);

    let families = python_families(dir.path(), &page, "text");
    let rejected = sample(
        &families,
        "preread_preread_rejected_total",
        &[("listener", &listener), ("reason", "not_tls")],
    );
    assert_eq!(rejected, Some(1.0), "{page}");
    let routed = sample(
        &families,
        "preread_preread_routed_total",
        &[("listener", &listener), ("cluster", CLUSTER)],
    );
    assert_eq!(routed, Some(2.0), "{page}");
    let fallback = sample(
        &families,
        "preread_preread_fallback_total",
        &[("listener", &fb.to_string()), ("reason", "sni_unmatched")],
    );
    assert_eq!(fallback, Some(1.0), "{page}");
    let backend = [("cluster", CLUSTER), ("backend", BACKEND)];
    assert_eq!(sample(&families, "preread_backend_up", &backend), Some(1.0));
    for direction in ["in", "out"] {
        let mut labels = backend.to_vec();
        labels.push(("direction", direction));
        let bytes = sample(&families, "preread_backend_bytes_total", &labels);
        assert!(bytes.is_some_and(|b| b > 0.0), "{direction}: {page}");
    }
    let decided = sample(
        &families,
        "preread_preread_duration_seconds_bucket",
        &[("listener", &listener), ("le", "+Inf")],
    );
    assert_eq!(decided, Some(3.0), "routed twice, rejected once: {page}");
    let hellos = sample(
        &families,
        "preread_client_hello_bytes_count",
        &[("listener", &listener)],
    );
    assert_eq!(hellos, Some(2.0), "two parsed hellos on main: {page}");
    assert!(sample(&families, "preread_config_generation", &[]).is_some());
    let workers: BTreeSet<String> = families
        .iter()
        .filter(|f| f["name"] == "preread_worker_connections_active")
        .flat_map(|f| f["samples"].as_array().cloned().unwrap_or_default())
        .filter_map(|s| s["labels"]["worker"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(workers, BTreeSet::from(["0".into(), "1".into()]));

    // Every family declared once with HELP and TYPE; no id in a name.
    let declared = |prefix: &str| -> BTreeSet<String> {
        page.lines()
            .filter_map(|line| line.strip_prefix(prefix))
            .filter_map(|rest| rest.split(' ').next())
            .map(str::to_owned)
            .collect()
    };
    let (helped, typed) = (declared("# HELP "), declared("# TYPE "));
    assert_eq!(helped, typed, "a HELP and a TYPE for every family");
    assert!(typed.len() >= 28, "{typed:?}");
    for line in page.lines().filter(|l| !l.starts_with('#')) {
        let name = line.split(['{', ' ']).next().unwrap_or_default();
        assert!(
            !name.contains(CLUSTER) && !name.contains(BACKEND) && !name.contains("fallback_0"),
            "an id in a name: {line}"
        );
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|suffix| name.strip_suffix(suffix).filter(|f| typed.contains(*f)))
            .unwrap_or(name);
        assert!(typed.contains(family), "{name} has no TYPE line");
    }

    // OpenMetrics, when asked for as Prometheus asks: the strict parser.
    let (content_type, open) = scrape(
        proxy.addr("metrics"),
        Some("application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"),
    );
    assert!(
        content_type.starts_with("application/openmetrics-text; version=1.0.0"),
        "{content_type}"
    );
    assert!(open.ends_with("# EOF\n"));
    let families = python_families(dir.path(), &open, "openmetrics");
    let rejected = sample(
        &families,
        "preread_preread_rejected_total",
        &[("listener", &listener), ("reason", "not_tls")],
    );
    assert_eq!(rejected, Some(1.0), "{open}");
}

/// A proxy with more backends than one 1 MiB frame can list still answers
/// `metrics get` and a scrape whole: answers have their own, larger cap.
#[test]
fn a_large_proxys_metrics_go_past_the_request_cap() {
    // Hosting-shaped: many clusters of two backends, none connected. Each
    // backend has its six series from the start: 3,000 make an answer
    // past 1 MiB.
    const BACKENDS: u16 = 3_000;
    let mut config = ConfigBuilder::new()
        .global("metrics_address = \"${addr:metrics}\"")
        .listener("main", &[]);
    for n in 0..BACKENDS {
        let cluster = format!("site{}", n / 2);
        if n % 2 == 0 {
            let name = format!("{cluster}.example.com");
            config = config.frontend(&cluster, "main", Some(&name), &[]);
        }
        let address = SocketAddr::from(([127, 0, 0, 1], 20_000 + n));
        config = config.backend(&cluster, &format!("{BACKEND}-{n:05}"), address);
    }
    let proxy = start(&config.build());
    let (_, page) = scrape(proxy.addr("metrics"), None);
    let up = page
        .lines()
        .filter(|l| l.starts_with("preread_backend_up{"))
        .count();
    assert_eq!(up, usize::from(BACKENDS), "every backend's up series");
    // The answer itself is past the 1 MiB request cap.
    let mut channel = BlockingChannel::connect(proxy.socket_path(), T)
        .expect("connect to the command socket")
        .with_max_frame_len(MAX_ANSWER_LEN);
    let request = proto::Request {
        request_type: Some(RequestType::QueryMetrics(proto::QueryMetrics::default())),
    };
    channel.send(&request).expect("ask for the metrics");
    let answer = channel.recv().expect("the metrics");
    assert!(
        answer.encoded_len() > 1 << 20,
        "an answer past 1 MiB: {} bytes",
        answer.encoded_len()
    );
    let out = proxy
        .cli(&["--json", "metrics", "get"])
        .expect("metrics get");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let total = String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .map(|line| serde_json::from_str::<Value>(line).expect("JSON"))
        .expect("a total line");
    assert_eq!(total[format!("backend.{BACKEND}-02999.up").as_str()], 1);
}

/// Issue 28: every configured backend's series are served at 0 by a scrape
/// right after the boot, before any session, and a removed backend's are
/// gone from the next scrape, in every family.
#[test]
fn a_backends_series_exist_from_the_boot_and_go_with_it() {
    let promtool = require_tool("promtool", "prometheus");
    let web = TlsBackend::start(BackendConfig::new(BACKEND, &["www.example.com"]));
    let spare = TlsBackend::start(BackendConfig::new("spare-1", &["www.example.com"]));
    let config = ConfigBuilder::new()
        .global("metrics_address = \"${addr:metrics}\"")
        .global("worker_count = 2")
        .listener("main", &[])
        .frontend(CLUSTER, "main", Some("www.example.com"), &[])
        .backend(CLUSTER, BACKEND, web.addr())
        .backend(CLUSTER, "spare-1", spare.addr())
        .backend("idle", "idle-0", spare.addr())
        .build();
    let proxy = start(&config);
    let dir = TempDir::new("prometheus-boot");
    let (_, page) = scrape(proxy.addr("metrics"), None);
    promtool_check(&promtool, dir.path(), &page);
    let families = python_families(dir.path(), &page, "text");
    for (cluster, backend) in [(CLUSTER, BACKEND), (CLUSTER, "spare-1"), ("idle", "idle-0")] {
        let labels = [("cluster", cluster), ("backend", backend)];
        for direction in ["in", "out"] {
            let mut with = labels.to_vec();
            with.push(("direction", direction));
            let bytes = sample(&families, "preread_backend_bytes_total", &with);
            assert_eq!(bytes, Some(0.0), "{backend} {direction} at boot:\n{page}");
        }
        for family in [
            "preread_backend_connections",
            "preread_backend_connect_errors_total",
            "preread_backend_connect_retries_total",
        ] {
            assert_eq!(
                sample(&families, family, &labels),
                Some(0.0),
                "{family} {backend}"
            );
        }
        for direction in ["in", "out"] {
            let with = [("cluster", cluster), ("direction", direction)];
            let bytes = sample(&families, "preread_cluster_bytes_total", &with);
            assert_eq!(bytes, Some(0.0), "{cluster} {direction}");
        }
    }
    let listener = proxy.addr("main").to_string();
    let routed = [("listener", listener.as_str()), ("cluster", CLUSTER)];
    let at_boot = sample(&families, "preread_preread_routed_total", &routed);
    assert_eq!(at_boot, Some(0.0), "{page}");

    // Traffic to both backends (each worker's round robin), so the removed one has
    // counted series, not only zeros.
    let mut reached = BTreeSet::new();
    for _ in 0..20 {
        let outcome = tls_request(proxy.addr("main"), "www.example.com", &[], None)
            .unwrap_or_else(|e| panic!("routed: {e}\n{}", stderr_tail(&proxy)));
        reached.extend(outcome.backend().map(str::to_owned));
        if reached.len() == 2 {
            break;
        }
    }
    assert_eq!(reached.len(), 2, "both backends reached: {reached:?}");
    for backend in [BACKEND, "spare-1"] {
        proxy
            .wait_metric(&format!("backend.{backend}.bytes_in"), |v| v > 0, T)
            .unwrap_or_else(|e| panic!("{backend} carried a session: {e}"));
    }
    let removed = proxy
        .cli(&[
            "backend",
            "remove",
            "-i",
            CLUSTER,
            "--backend-id",
            "spare-1",
            "-a",
            &spare.addr().to_string(),
        ])
        .expect("run backend remove");
    assert!(
        removed.status.success(),
        "backend remove: {}",
        String::from_utf8_lossy(&removed.stderr)
    );
    let (_, page) = scrape(proxy.addr("metrics"), None);
    promtool_check(&promtool, dir.path(), &page);
    let left: Vec<&str> = page
        .lines()
        .filter(|line| !line.starts_with('#') && line.contains("backend=\"spare-1\""))
        .collect();
    assert!(left.is_empty(), "the removed backend's series: {left:?}");
    assert_eq!(
        lines_of(&page, "preread_backend_bytes_total", "backend", BACKEND).len(),
        2,
        "the remaining backend keeps both directions:\n{page}"
    );
    assert_eq!(
        lines_of(&page, "preread_backend_bytes_total", "backend", "idle-0").len(),
        2
    );
}
