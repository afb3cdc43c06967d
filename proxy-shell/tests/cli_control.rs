//! The control-plane command line run as the real binary: `config check`
//! on the example and on every broken config of the test data (exit 2, or
//! 0 for warnings alone), `explain`,
//! and the client half of the socket subcommands against a real Unix
//! socket server that records what it receives and answers as told.

use std::io::{Read, Write};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::thread;
use std::time::Duration;

use command::channel::{DEFAULT_MAX_FRAME_LEN, FrameDecoder, encode_frame};
use command::codes::ErrorCode;
use command::proto::{self, request::RequestType, response_content::ContentType};
use tempfile::TempDir;

fn root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

fn preread(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_preread"))
        .args(args)
        .env_remove("PREREAD_CONFIG")
        .output()
        .expect("run preread")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn config_check_passes_on_the_example() {
    let example = root().join("doc/examples/preread.toml");
    let out = preread(&[
        "config",
        "check",
        "-c",
        example.to_str().unwrap_or_default(),
    ]);
    assert!(
        out.status.success(),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    assert!(text(&out.stdout).ends_with(": ok\n"));
}

/// `(line, code)` of each `# expect E123 [E456 ...]` marker of a file.
fn markers(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if let Some((_, codes)) = line.split_once("# expect ") {
            out.extend(codes.split_whitespace().map(|c| (i + 1, c.to_owned())));
        }
    }
    out
}

#[test]
fn config_check_prints_every_expected_code_at_its_line() {
    let dir = root().join("command/tests/data");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("test data")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    files.sort();
    assert!(files.len() >= 20, "only {} broken configs", files.len());
    for file in files {
        let expected = markers(&std::fs::read_to_string(&file).expect("broken config"));
        assert!(
            !expected.is_empty(),
            "{} has no # expect marker",
            file.display()
        );
        let out = preread(&["config", "check", "-c", file.to_str().unwrap_or_default()]);
        // Warnings alone leave the config valid.
        let refused = expected.iter().any(|(_, code)| code.starts_with('E'));
        let status = if refused { 2 } else { 0 };
        assert_eq!(out.status.code(), Some(status), "{}", file.display());
        let stdout = text(&out.stdout);
        for (line, code) in &expected {
            let needle = format!("{}:{line}:", file.display());
            assert!(
                stdout
                    .lines()
                    .any(|l| l.starts_with(&needle) && l.contains(&format!(": {code}: "))),
                "{}: expected {code} at line {line} in:\n{stdout}",
                file.display()
            );
        }
        assert_eq!(
            stdout.lines().filter(|l| !l.ends_with(": ok")).count(),
            expected.len(),
            "{}: one line per problem:\n{stdout}",
            file.display()
        );
    }
}

#[test]
fn config_check_json_is_one_object_per_problem() {
    let file = root().join("command/tests/data/several_problems.toml");
    let out = preread(&[
        "config",
        "check",
        "--json",
        "-c",
        file.to_str().unwrap_or_default(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    let lines: Vec<serde_json::Value> = text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON line"))
        .collect();
    assert_eq!(
        lines.len(),
        markers(&std::fs::read_to_string(&file).expect("file")).len()
    );
    assert!(
        lines
            .iter()
            .all(|l| l["code"].as_str().is_some_and(|c| c.starts_with('E')))
    );
}

#[test]
fn explain_knows_every_code_and_refuses_unknown_ones() {
    for code in ErrorCode::ALL {
        let out = preread(&["explain", &code.as_str().to_lowercase()]);
        assert!(out.status.success(), "{}", code.as_str());
        let stdout = text(&out.stdout);
        assert!(
            stdout.starts_with(&format!("{}: ", code.as_str())) && stdout.contains("Fix: "),
            "{stdout}"
        );
    }
    let listing = preread(&["explain"]);
    assert_eq!(text(&listing.stdout).lines().count(), ErrorCode::ALL.len());
    let unknown = preread(&["explain", "E999"]);
    assert_eq!(unknown.status.code(), Some(2));
}

/// A one-connection-per-request server on a real Unix socket: answers
/// each request with `answer(request)` and hands back what it received.
fn serve(
    socket: &Path,
    connections: usize,
    answer: fn(&proto::Request) -> Vec<proto::Response>,
) -> thread::JoinHandle<Vec<proto::Request>> {
    let listener = UnixListener::bind(socket).expect("bind test socket");
    thread::spawn(move || {
        let mut seen = Vec::new();
        for _ in 0..connections {
            let Ok((mut stream, _)) = listener.accept() else {
                break;
            };
            stream.set_read_timeout(Some(Duration::from_secs(10))).ok();
            let mut decoder = FrameDecoder::new();
            let mut buf = [0u8; 4096];
            'conn: loop {
                let n = match stream.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                decoder.push(&buf[..n]);
                while let Ok(Some(request)) = decoder.next_frame::<proto::Request>() {
                    for response in answer(&request) {
                        let frame = encode_frame(&response, DEFAULT_MAX_FRAME_LEN).expect("encode");
                        if stream.write_all(&frame).is_err() {
                            break 'conn;
                        }
                    }
                    seen.push(request);
                }
            }
        }
        seen
    })
}

fn ok(content: Option<ContentType>) -> proto::Response {
    proto::Response {
        status: proto::ResponseStatus::Ok as i32,
        content: content.map(|c| proto::ResponseContent {
            content_type: Some(c),
        }),
        ..Default::default()
    }
}

/// A fresh temp dir, and the path of a socket in it (not created).
fn socket_path(name: &str) -> (TempDir, PathBuf) {
    let dir = tempfile::Builder::new()
        .prefix("preread-cli-")
        .tempdir()
        .expect("temp dir");
    let path = dir.path().join(format!("{name}.sock"));
    (dir, path)
}

#[test]
fn socket_subcommands_send_their_request_and_print_the_answer() {
    let (_dir, socket) = socket_path("answers");
    let server = serve(&socket, 3, |request| match &request.request_type {
        Some(RequestType::Status(_)) => vec![ok(Some(ContentType::Status(proto::StatusReport {
            uptime_ms: 1500,
            workers: 2,
            listeners: 1,
            sessions: 7,
            // An older proxy that does not say who it is.
            ..Default::default()
        })))],
        Some(RequestType::AddCluster(_)) => vec![
            proto::Response {
                status: proto::ResponseStatus::Processing as i32,
                message: "worker 0 applied".into(),
                ..Default::default()
            },
            ok(None),
        ],
        _ => vec![proto::Response {
            status: proto::ResponseStatus::Failure as i32,
            message: "frontend clashes".into(),
            error_code: "E203".into(),
            content: None,
        }],
    });
    let s = socket.to_str().unwrap_or_default();
    let status = preread(&["status", "--socket", s]);
    assert!(status.status.success(), "{}", text(&status.stderr));
    assert_eq!(
        text(&status.stdout),
        "uptime 1.5s, 2 worker(s), 1 listener(s), 7 session(s)\n"
    );

    let add = preread(&[
        "cluster",
        "add",
        "-i",
        "web",
        "--load-balancing",
        "least-connections",
        "--socket",
        s,
    ]);
    assert!(add.status.success(), "{}", text(&add.stderr));
    assert!(
        text(&add.stderr).contains("worker 0 applied"),
        "progress goes to stderr"
    );

    let refused = preread(&[
        "frontend",
        "tcp",
        "add",
        "-i",
        "web",
        "-a",
        "127.0.0.1:8443",
        "--sni",
        "a.example.com",
        "--socket",
        s,
    ]);
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        text(&refused.stderr).contains("error E203: frontend clashes"),
        "{}",
        text(&refused.stderr)
    );
    assert!(refused.stdout.is_empty(), "failures never go to stdout");

    let seen = server.join().expect("server thread");
    assert!(matches!(seen[0].request_type, Some(RequestType::Status(_))));
    assert!(
        matches!(&seen[1].request_type, Some(RequestType::AddCluster(c))
        if c.cluster_id == "web" && c.load_balancing == proto::LoadBalancing::LeastConnections as i32)
    );
    assert!(
        matches!(&seen[2].request_type, Some(RequestType::AddTcpFrontend(f)) if f.sni.as_deref() == Some("a.example.com"))
    );
}

#[test]
fn the_socket_comes_from_the_config_beside_it() {
    let dir = tempfile::Builder::new()
        .prefix("preread-cli-cfg-")
        .tempdir()
        .expect("temp dir");
    let config = dir.path().join("preread.toml");
    std::fs::write(&config, "command_socket = \"./ctl.sock\"\n").expect("config");
    let socket = dir.path().join("ctl.sock");
    let server = serve(&socket, 1, |_| vec![ok(None)]);
    // Run from another directory: the socket is found beside the config.
    let out = Command::new(env!("CARGO_BIN_EXE_preread"))
        .args(["shutdown", "--hard", "-c"])
        .arg(&config)
        .current_dir("/")
        .output()
        .expect("run preread");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let seen = server.join().expect("server");
    assert!(matches!(
        seen[0].request_type,
        Some(RequestType::HardStop(_))
    ));
}

#[test]
fn no_proxy_running_is_a_clear_error() {
    let (_dir, socket) = socket_path("absent");
    let out = preread(&[
        "status",
        "--socket",
        socket.to_str().unwrap_or_default(),
        "-t",
        "500",
    ]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "a request that could not be sent failed"
    );
    // One hint, the channel's, not a second one after it.
    let stderr = text(&out.stderr);
    assert!(
        stderr
            .contains("(is the proxy running, and is this the socket path of its configuration?)"),
        "{stderr}"
    );
    assert_eq!(stderr.matches("(is ").count(), 1, "{stderr}");
}
