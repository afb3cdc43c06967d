//! Prints the proxy's answers: a readable table for people, one JSON object
//! per line with `--json` for scripts.
//!
//! Owns: the output format of every socket subcommand. Must never: print a
//! failure to stdout (errors go to stderr, so scripts can trust stdout).

use std::fmt::Write as _;

use command::proto::{self, response_content::ContentType};
use command::spelling;
use preread_parser::proxy::{ProxyParsed, parse_proxy_header};
use preread_parser::tls::{Ja4, Parsed, Transport, parse_client_hello};
use serde_json::{Map, Value, json};

use preread_worker::vocabulary::is_process_wide;

/// The config's name of a value (the spelling table is the config's own).
pub(super) fn lb_name(value: i32) -> &'static str {
    let name = proto::LoadBalancing::try_from(value)
        .ok()
        .and_then(|lb| spelling::name_of(spelling::LOAD_BALANCING, lb));
    name.map_or("unknown", |name| name)
}

pub(super) fn pp_name(value: i32) -> &'static str {
    let name = proto::ProxyProtocol::try_from(value)
        .ok()
        .and_then(|pp| spelling::name_of(spelling::PROXY_PROTOCOL, pp));
    name.map_or("unknown", |name| name)
}

fn opt<T: ToString>(value: Option<T>) -> String {
    value.map_or_else(|| "-".to_owned(), |v| v.to_string())
}

/// Lays out rows under a header with columns padded to their widest cell.
fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    let mut out = String::new();
    let mut line = |cells: Vec<&str>| {
        let joined: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        let _ = writeln!(out, "{}", joined.join("  ").trim_end());
    };
    line(header.to_vec());
    for row in rows {
        line(row.iter().map(String::as_str).collect());
    }
    out
}

/// `tcp` or `quic`, for a listener's or frontend's `protocol`: a TCP and
/// a QUIC listener may share an address.
fn protocol_name(protocol: Option<i32>) -> &'static str {
    if protocol == Some(proto::ListenerProtocol::Quic as i32) {
        "quic"
    } else {
        "tcp"
    }
}

fn listeners_text(list: &proto::ListenerList) -> String {
    let rows: Vec<Vec<String>> = list
        .listeners
        .iter()
        .map(|entry| {
            let c = entry.config.clone().unwrap_or_default();
            vec![
                c.address,
                if entry.active { "active" } else { "inactive" }.to_owned(),
                c.expect_proxy.to_string(),
                opt(c.sni_preread_timeout),
                opt(c.sni_preread_max_bytes),
                opt(c.default_cluster),
                opt(c.server_first_timeout),
                protocol_name(c.protocol).to_owned(),
            ]
        })
        .collect();
    table(
        &[
            "ADDRESS",
            "STATE",
            "EXPECT_PROXY",
            "PREREAD_MS",
            "MAX_BYTES",
            "DEFAULT_CLUSTER",
            "SERVER_FIRST_MS",
            "PROTOCOL",
        ],
        &rows,
    )
}

fn clusters_text(list: &proto::ClusterList) -> String {
    let rows: Vec<Vec<String>> = list
        .clusters
        .iter()
        .map(|entry| {
            let c = entry.cluster.clone().unwrap_or_default();
            let backends: Vec<String> = entry
                .backends
                .iter()
                .map(|b| {
                    let backup = if b.backup { " backup" } else { "" };
                    format!("{}={} w{}{backup}", b.backend_id, b.address, opt(b.weight))
                })
                .collect();
            vec![
                c.cluster_id,
                lb_name(c.load_balancing).to_owned(),
                pp_name(c.proxy_protocol).to_owned(),
                c.max_connections_per_ip.to_string(),
                command::health_check::describe_health_check(c.health_check.as_ref()),
                backends.join(", "),
            ]
        })
        .collect();
    table(
        &[
            "CLUSTER",
            "LOAD_BALANCING",
            "PROXY_PROTOCOL",
            "MAX_PER_IP",
            "HEALTH_CHECK",
            "BACKENDS",
        ],
        &rows,
    )
}

/// `2026-11-30T18:00:23Z`, from milliseconds since the Unix epoch; `-`
/// for 0 (no instance, so no state).
fn since(ms: u64) -> String {
    if ms == 0 {
        return "-".to_owned();
    }
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms);
    humantime::format_rfc3339_seconds(at).to_string()
}

fn backends_text(list: &proto::BackendList) -> String {
    let rows: Vec<Vec<String>> = list
        .backends
        .iter()
        .map(|status| {
            let b = status.backend.clone().unwrap_or_default();
            let instance = if status.instance.is_empty() {
                "-".to_owned()
            } else {
                status.instance.clone()
            };
            let mut flags = format!("w{}", opt(b.weight));
            if b.backup {
                flags.push_str(" backup");
            }
            if let Some(max) = b.max_connections.filter(|&max| max > 0) {
                flags.push_str(&format!(" max{max}"));
            }
            vec![
                b.cluster_id,
                b.backend_id,
                b.address,
                instance,
                flags,
                if status.up { "up" } else { "down" }.to_owned(),
                since(status.since_ms),
                status.connections.to_string(),
                if status.last_error.is_empty() {
                    "-".to_owned()
                } else {
                    status.last_error.clone()
                },
            ]
        })
        .collect();
    table(
        &[
            "CLUSTER",
            "BACKEND",
            "ADDRESS",
            "INSTANCE",
            "SETTINGS",
            "HEALTH",
            "SINCE",
            "CONNECTIONS",
            "LAST_ERROR",
        ],
        &rows,
    )
}

fn frontends_text(list: &proto::FrontendList) -> String {
    let rows: Vec<Vec<String>> = list
        .frontends
        .iter()
        .map(|f| {
            let alpn = if f.alpn.is_empty() {
                "any".to_owned()
            } else {
                f.alpn.join(",")
            };
            vec![
                f.address.clone(),
                opt(f.sni.clone()),
                alpn,
                f.cluster_id.clone(),
                tags_text(&f.tags),
                protocol_name(f.protocol).to_owned(),
            ]
        })
        .collect();
    table(
        &["ADDRESS", "SNI", "ALPN", "CLUSTER", "TAGS", "PROTOCOL"],
        &rows,
    )
}

/// A frontend's tags as `key=value,key=value` in key order; `-` for none.
pub(super) fn tags_text(tags: &std::collections::BTreeMap<String, String>) -> String {
    if tags.is_empty() {
        return "-".to_owned();
    }
    let pairs: Vec<String> = tags.iter().map(|(k, v)| format!("{k}={v}")).collect();
    pairs.join(",")
}

fn metrics_text(report: &proto::MetricsReport) -> String {
    let mut header = vec!["METRIC".to_owned(), "TOTAL".to_owned()];
    header.extend(
        report
            .workers
            .iter()
            .map(|w| format!("WORKER_{}", w.worker_id)),
    );
    let rows: Vec<Vec<String>> = report
        .total
        .iter()
        .map(|(name, total)| {
            let mut row = vec![name.clone(), total.to_string()];
            // A process-wide name has no worker's share to show.
            let process_wide = is_process_wide(name);
            row.extend(report.workers.iter().map(|w| match w.values.get(name) {
                Some(value) => value.to_string(),
                None if process_wide => "-".to_owned(),
                None => "0".to_owned(),
            }));
            row
        })
        .collect();
    let header: Vec<&str> = header.iter().map(String::as_str).collect();
    table(&header, &rows)
}

/// How long ago `unix_ms` was, for people: `never` for 0.
fn ago(unix_ms: u64, now_ms: u64) -> String {
    if unix_ms == 0 {
        return "never".to_owned();
    }
    let ms = now_ms.saturating_sub(unix_ms);
    format!("{:.1}s ago", ms as f64 / 1000.0)
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// One row per source, then its excluded fragments, indented, each with
/// its code.
fn sources_text(list: &proto::SourceList, now_ms: u64) -> String {
    let rows: Vec<Vec<String>> = list
        .sources
        .iter()
        .map(|s| {
            let status = if s.error.is_empty() {
                "ok".to_owned()
            } else {
                format!("failing: {}", s.error)
            };
            vec![
                s.kind.clone(),
                s.location.clone(),
                ago(s.last_sync_unix_ms, now_ms),
                s.routes.to_string(),
                s.fragments.to_string(),
                s.excluded_total.to_string(),
                s.errors.to_string(),
                if s.revision == 0 {
                    "-".to_owned()
                } else {
                    s.revision.to_string()
                },
                status,
            ]
        })
        .collect();
    let mut out = table(
        &[
            "KIND",
            "LOCATION",
            "LAST_SYNC",
            "ROUTES",
            "FRAGMENTS",
            "EXCLUDED",
            "ERRORS",
            "REVISION",
            "STATUS",
        ],
        &rows,
    );
    for source in &list.sources {
        for excluded in &source.excluded {
            let _ = writeln!(
                out,
                "excluded {} {}: {}: {}",
                source.kind, excluded.name, excluded.error_code, excluded.message
            );
        }
        let more = (source.excluded_total as usize).saturating_sub(source.excluded.len());
        if more > 0 {
            let _ = writeln!(out, "… and {more} more excluded from {}", source.kind);
        }
    }
    out
}

/// The captured windows as a table, one row each, newest first; `files`
/// are where `--dump` wrote them (empty without it).
pub fn rejects_text(list: &proto::RejectList, files: &[String]) -> String {
    let rows: Vec<Vec<String>> = list
        .windows
        .iter()
        .enumerate()
        .map(|(i, w)| {
            let mut row = vec![
                capture_time(w.at_unix_ms),
                w.worker.to_string(),
                w.listener.clone(),
                w.client.clone(),
                opt(w.proxy_client.as_ref()),
                w.outcome.clone(),
                w.window.len().to_string(),
                opt(captured_ja4(&w.window).as_ref()),
            ];
            row.extend(files.get(i).cloned());
            row
        })
        .collect();
    let mut header = vec![
        "TIME",
        "WORKER",
        "LISTENER",
        "CLIENT",
        "PROXY_CLIENT",
        "OUTCOME",
        "BYTES",
        "JA4",
    ];
    if !files.is_empty() {
        header.push("FILE");
    }
    table(&header, &rows)
}

/// The captured windows as JSON lines, the bytes in hex.
pub fn rejects_json(list: &proto::RejectList, files: &[String]) -> Vec<Value> {
    list.windows
        .iter()
        .enumerate()
        .map(|(i, w)| {
            let hex = w.window.iter().fold(String::new(), |mut out, b| {
                let _ = write!(out, "{b:02x}");
                out
            });
            json!({
                "ts": capture_time(w.at_unix_ms),
                "worker": w.worker,
                "seq": w.seq,
                "listener": w.listener,
                "client": w.client,
                "proxy_client": w.proxy_client,
                "outcome": w.outcome,
                "protocol": if w.quic { "quic" } else { "tcp" },
                "bytes": w.window.len(),
                "ja4": captured_ja4(&w.window).map(|j| j.to_string()),
                "hex": hex,
                "file": files.get(i),
            })
        })
        .collect()
}

/// The JA4 of a captured window's ClientHello, past a PROXY header the
/// window starts with; `None` when it holds no whole hello.
fn captured_ja4(window: &[u8]) -> Option<Ja4> {
    let offset = match parse_proxy_header(window) {
        Ok(ProxyParsed::Complete(header)) => header.len(),
        _ => 0,
    };
    let mut scratch = Vec::new();
    match parse_client_hello(window.get(offset..)?, &mut scratch) {
        Ok(Parsed::Complete(hello)) => Some(Ja4::of(&hello, Transport::Tcp)),
        _ => None,
    }
}

fn capture_time(at_unix_ms: u64) -> String {
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_millis(at_unix_ms);
    preread_worker::access_log::rfc3339_millis(at)
}

/// What to print on stdout for a successful answer, as human text.
pub fn success_text(response: &proto::Response) -> String {
    let content = response
        .content
        .as_ref()
        .and_then(|c| c.content_type.as_ref());
    match content {
        Some(ContentType::Status(s)) => {
            // A proxy that says who it is (every one since pid and version
            // were added) gets them printed after the counts.
            let who = if s.pid == 0 {
                String::new()
            } else {
                format!(
                    ", pid {}, version {}, generation {}",
                    s.pid, s.version, s.generation
                )
            };
            format!(
                "uptime {:.1}s, {} worker(s), {} listener(s), {} session(s){who}\n",
                s.uptime_ms as f64 / 1000.0,
                s.workers,
                s.listeners,
                s.sessions
            )
        }
        Some(ContentType::Listeners(list)) => listeners_text(list),
        Some(ContentType::Clusters(list)) => clusters_text(list),
        Some(ContentType::Frontends(list)) => frontends_text(list),
        Some(ContentType::Backends(list)) => backends_text(list),
        Some(ContentType::Metrics(report)) => metrics_text(report),
        Some(ContentType::Sources(list)) => sources_text(list, now_ms()),
        Some(ContentType::Rejects(list)) => rejects_text(list, &[]),
        Some(ContentType::Batch(_)) => format!("{}\n", response.message),
        None if response.message.is_empty() => "ok\n".to_owned(),
        None => format!("{}\n", response.message),
    }
}

/// The JSON lines for a successful answer. Metrics follow doc/configure.md:
/// one object of `{"name": value}` per worker, then one for the total.
pub fn success_json(response: &proto::Response) -> Vec<Value> {
    let content = response
        .content
        .as_ref()
        .and_then(|c| c.content_type.as_ref());
    if let Some(ContentType::Metrics(report)) = content {
        let object = |worker: Value, values: &std::collections::BTreeMap<String, i64>| {
            let mut map = Map::new();
            map.insert("worker".into(), worker);
            map.extend(values.iter().map(|(k, v)| (k.clone(), json!(v))));
            Value::Object(map)
        };
        let mut lines: Vec<Value> = report
            .workers
            .iter()
            .map(|w| object(json!(w.worker_id), &w.values))
            .collect();
        lines.push(object(json!("total"), &report.total));
        return lines;
    }
    if let Some(ContentType::Sources(list)) = content {
        return list
            .sources
            .iter()
            .map(|source| {
                serde_json::to_value(source).unwrap_or_else(|e| json!({ "error": e.to_string() }))
            })
            .collect();
    }
    if let Some(ContentType::Rejects(list)) = content {
        return rejects_json(list, &[]);
    }
    vec![serde_json::to_value(response).unwrap_or_else(|e| json!({ "error": e.to_string() }))]
}

/// The line printed on stderr for a refused or failed request.
pub fn failure_text(response: &proto::Response) -> String {
    if response.error_code.is_empty() {
        return format!("error: {}", response.message);
    }
    // Only validation codes have an explanation; the server's own codes
    // (E_WORKER_REFUSED, E_PERMISSION, ...) speak for themselves.
    if command::codes::ErrorCode::from_code(&response.error_code).is_some() {
        format!(
            "error {}: {} (see `preread explain {}`)",
            response.error_code, response.message, response.error_code
        )
    } else {
        format!("error {}: {}", response.error_code, response.message)
    }
}

#[cfg(test)]
mod tests {
    use command::proto::{self, response_content::ContentType};

    use super::{success_json, success_text};

    fn with(content: ContentType) -> proto::Response {
        proto::Response {
            content: Some(proto::ResponseContent {
                content_type: Some(content),
            }),
            ..Default::default()
        }
    }

    #[test]
    fn metrics_json_is_one_object_per_worker_plus_total() {
        let worker = |id: u32, n: i64| proto::WorkerMetrics {
            worker_id: id,
            values: [("tcp.accepted".to_owned(), n)].into_iter().collect(),
            series: Vec::new(),
        };
        let report = proto::MetricsReport {
            workers: vec![worker(0, 2), worker(1, 3)],
            total: [("tcp.accepted".to_owned(), 5)].into_iter().collect(),
            series: Vec::new(),
        };
        let lines = success_json(&with(ContentType::Metrics(report.clone())));
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[0]["worker"], 0);
        assert_eq!(lines[1]["tcp.accepted"], 3);
        assert_eq!(lines[2]["worker"], "total");
        assert_eq!(lines[2]["tcp.accepted"], 5);
        let mut report = report;
        report.total.insert("backend.down".to_owned(), 1);
        let text = success_text(&with(ContentType::Metrics(report)));
        assert!(text.contains("tcp.accepted  5      2         3"), "{text}");
        assert!(
            text.contains("backend.down  1      -         -"),
            "a process-wide name has no worker column: {text}"
        );
    }

    #[test]
    fn backends_table_shows_each_instance_with_its_health() {
        let backend = proto::Backend {
            cluster_id: "db".into(),
            backend_id: "db-0".into(),
            address: "db.internal:5432".into(),
            weight: Some(100),
            backup: false,
            max_connections: Some(50),
        };
        let list = proto::BackendList {
            backends: vec![
                proto::BackendStatus {
                    backend: Some(backend.clone()),
                    instance: "10.0.0.1:5432".into(),
                    up: true,
                    since_ms: 1_764_612_023_000,
                    last_error: String::new(),
                    connections: 3,
                },
                proto::BackendStatus {
                    backend: Some(backend),
                    instance: "10.0.0.2:5432".into(),
                    up: false,
                    since_ms: 1_764_612_024_500,
                    last_error: "check: connect to 10.0.0.2:5432 failed".into(),
                    connections: 0,
                },
            ],
            more: false,
        };
        let text = success_text(&with(ContentType::Backends(list)));
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert!(
            lines[0].starts_with("CLUSTER") && lines[0].contains("LAST_ERROR"),
            "{text}"
        );
        for (line, expected) in lines[1..].iter().zip([
            [
                "10.0.0.1:5432",
                "w100 max50",
                "up",
                "2025-12-01T18:00:23Z",
                "3",
                "-",
            ],
            [
                "10.0.0.2:5432",
                "w100 max50",
                "down",
                "2025-12-01T18:00:24Z",
                "0",
                "failed",
            ],
        ]) {
            for field in expected {
                assert!(line.contains(field), "{field:?} in {line:?}");
            }
        }
    }

    #[test]
    fn sources_list_each_source_then_its_exclusions() {
        let list = proto::SourceList {
            sources: vec![
                proto::SourceEntry {
                    kind: "file".into(),
                    location: "/etc/preread/preread.toml".into(),
                    last_sync_unix_ms: 10_000,
                    routes: 3,
                    fragments: 1,
                    ..Default::default()
                },
                proto::SourceEntry {
                    kind: "docker".into(),
                    location: "unix:///var/run/docker.sock".into(),
                    last_sync_unix_ms: 0,
                    excluded: vec![proto::ExcludedFragment {
                        name: "api".into(),
                        error_code: "E204".into(),
                        message: "label preread.tcp.api.sni of container /api-1: taken".into(),
                    }],
                    excluded_total: 2,
                    error: "Docker is unreachable".into(),
                    errors: 4,
                    ..Default::default()
                },
            ],
        };
        let text = super::sources_text(&list, 12_500);
        let lines: Vec<&str> = text.lines().collect();
        assert!(
            lines[1].starts_with("file") && lines[1].contains("2.5s ago"),
            "{text}"
        );
        assert!(
            lines[2].contains("never") && lines[2].contains("failing: Docker"),
            "{text}"
        );
        assert_eq!(
            lines[3],
            "excluded docker api: E204: label preread.tcp.api.sni of container /api-1: taken"
        );
        assert_eq!(lines[4], "… and 1 more excluded from docker");
        let json = success_json(&with(ContentType::Sources(list)));
        assert_eq!(json.len(), 2);
        assert_eq!(json[1]["excluded"][0]["error_code"], "E204");
        assert_eq!(json[1]["errors"], 4);
    }

    #[test]
    fn frontends_table_shows_the_tags() {
        let frontend = |tags: &[(&str, &str)]| proto::TcpFrontend {
            cluster_id: "web".into(),
            address: "127.0.0.1:8443".into(),
            sni: Some("*.example.org".into()),
            alpn: vec![],
            tags: tags
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            protocol: None,
        };
        let list = proto::FrontendList {
            frontends: vec![
                frontend(&[("team", "web"), ("owner", "ops")]),
                frontend(&[]),
            ],
            more: false,
        };
        let text = success_text(&with(ContentType::Frontends(list)));
        let lines: Vec<&str> = text.lines().collect();
        let columns = |line: &str| {
            line.split_whitespace()
                .map(str::to_owned)
                .collect::<Vec<_>>()
        };
        assert_eq!(
            columns(lines[0])[4..],
            ["TAGS".to_owned(), "PROTOCOL".to_owned()],
            "{text}"
        );
        assert_eq!(
            columns(lines[1])[4..],
            ["owner=ops,team=web".to_owned(), "tcp".to_owned()],
            "{text}"
        );
        assert_eq!(
            columns(lines[2])[4..],
            ["-".to_owned(), "tcp".to_owned()],
            "{text}"
        );
    }

    #[test]
    fn frontends_table_names_any_alpn() {
        let list = proto::FrontendList {
            frontends: vec![proto::TcpFrontend {
                cluster_id: "web".into(),
                address: "127.0.0.1:8443".into(),
                sni: Some("*.example.com".into()),
                alpn: vec![],
                tags: Default::default(),
                protocol: Some(proto::ListenerProtocol::Quic as i32),
            }],
            more: false,
        };
        let text = success_text(&with(ContentType::Frontends(list)));
        assert!(
            text.lines()
                .nth(1)
                .is_some_and(|l| l.contains("*.example.com")
                    && l.contains("any")
                    && l.contains("quic")),
            "{text}"
        );
    }
}
