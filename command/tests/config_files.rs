//! The config file and the state file, end to end: the shipped example
//! loads, every broken config in `tests/data/` is refused with the expected
//! codes at the expected lines, and state files round-trip, refuse damaged
//! content line by line, and are replaced atomically.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use command::codes::ErrorCode;
use command::config::{
    AccessLogFormat, AccessLogTarget, ConfigProblem, EmptySavedState, GlobalSettings, Location,
    check_config, check_config_file, load_config, load_config_file,
};
use command::proto;
use command::proto::request::RequestType;
use command::state::ConfigState;
use command::state_file::{
    StateFileError, load_state, load_state_requests, parse_state, render_state, save_state, seal,
};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn example_path() -> PathBuf {
    repo_root().join("doc/examples/preread.toml")
}

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

fn show(problems: &[ConfigProblem]) -> String {
    problems
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("\n")
}

// ---------------------------------------------------------------------------
// The example config

#[test]
fn example_config_loads_without_problems() {
    let path = example_path();
    let problems = check_config_file(&path);
    assert!(problems.is_empty(), "{}", show(&problems));

    let loaded = load_config_file(&path).unwrap_or_else(|p| panic!("{}", show(&p)));
    // A relative path in a config file is relative to the file's folder.
    let folder = path.parent().expect("example has a folder");
    assert_eq!(loaded.global.command_socket, folder.join("./preread.sock"));
    let as_written = load_config(&std::fs::read_to_string(&path).expect("example"))
        .unwrap_or_else(|p| panic!("{}", show(&p)));
    assert_eq!(
        as_written.global.command_socket,
        Path::new("./preread.sock")
    );
    assert_eq!(loaded.global.worker_count, 1);
    assert_eq!(
        loaded.global.metrics_address,
        Some("127.0.0.1:9109".parse().unwrap())
    );

    // Dispatch order: clusters, listeners, frontends, backends.
    let rank = |request: &proto::Request| match request.request_type {
        Some(RequestType::AddCluster(_)) => 0,
        Some(RequestType::AddTcpListener(_)) => 1,
        Some(RequestType::AddTcpFrontend(_)) => 2,
        Some(RequestType::AddBackend(_)) => 3,
        _ => panic!("unexpected request {request:?}"),
    };
    let ranks: Vec<_> = loaded.requests().map(rank).collect();
    assert!(ranks.is_sorted(), "{ranks:?}");

    let mut state = ConfigState::default();
    for located in &loaded.requests {
        let _applied = state
            .dispatch(&located.request)
            .unwrap_or_else(|e| panic!("{}: {e}", located.location));
    }
    assert_eq!(state.listeners().len(), 1);
    assert_eq!(state.clusters().len(), 5);
    let frontends: Vec<_> = state.frontends().collect();
    let snis: BTreeSet<_> = frontends.iter().filter_map(|f| f.sni.as_deref()).collect();
    for sni in [
        "www.example.com",
        "*.example.org",
        "**.internal.example.net",
    ] {
        assert!(snis.contains(sni), "{sni} missing from {snis:?}");
    }
    // ALPN split: one name, two clusters.
    let api: BTreeSet<_> = frontends
        .iter()
        .filter(|f| f.sni.as_deref() == Some("api.example.com"))
        .map(|f| (f.cluster_id.as_str(), f.alpn.clone()))
        .collect();
    assert_eq!(
        api,
        BTreeSet::from([
            ("api-h1", vec!["http/1.1".to_owned()]),
            ("api-h2", vec!["h2".to_owned()]),
        ])
    );
    let ports: BTreeSet<u16> = state
        .backends()
        .map(|b| b.address.parse::<std::net::SocketAddr>().unwrap().port())
        .collect();
    assert_eq!(ports, (9001..=9006).collect());
}

#[test]
fn request_locations_point_at_their_declarations() {
    let text = fs::read_to_string(example_path()).unwrap();
    let loaded = load_config(&text).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    for located in &loaded.requests {
        let line = lines[located.location.line - 1];
        let at = &line[line
            .char_indices()
            .nth(located.location.column - 1)
            .map_or(line.len(), |(i, _)| i)..];
        match &located.request.request_type {
            Some(RequestType::AddTcpListener(_)) => {
                assert!(at.starts_with("[[listeners]]"), "{at}")
            }
            Some(RequestType::AddCluster(c)) => {
                assert!(
                    at.starts_with(&format!("[clusters.{}]", c.cluster_id)),
                    "{at}"
                );
            }
            Some(RequestType::AddTcpFrontend(f)) => {
                assert!(
                    at.starts_with("{ address") && at.contains(&f.address),
                    "{at}"
                );
            }
            Some(RequestType::AddBackend(b)) => {
                assert!(
                    at.starts_with("{ address") && at.contains(&b.backend_id),
                    "{at}"
                );
            }
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn defaults_apply_to_an_empty_config() {
    let loaded = load_config("").unwrap();
    assert_eq!(loaded.global, GlobalSettings::default());
    assert!(loaded.requests.is_empty());
    let global = loaded.global;
    assert_eq!(global.worker_count, 1);
    assert_eq!(global.buffer_size, 16384);
    assert_eq!(global.max_buffers, 10000);
    assert_eq!(global.max_connections, 10000);
    assert!(global.splice);
    assert_eq!(global.splice_threshold, 65_536);
    assert_eq!(global.max_connection_attempts, 3);
    assert_eq!(global.access_logs, AccessLogTarget::Stderr);
    assert_eq!(global.access_log_format, AccessLogFormat::Logfmt);
    assert_eq!(global.saved_state, None);
    assert!(!global.automatic_state_save);
    assert_eq!(global.empty_saved_state, EmptySavedState::Refuse);
    assert_eq!(global.command_client_timeout, Duration::from_secs(10));
    assert_eq!(global.soft_stop_grace, Duration::from_secs(30));
    assert!(global.defer_accept);
    assert!(!global.backend_keepalive);
    assert!(!global.backend_delayed_ack);
}

#[test]
fn global_settings_are_typed() {
    let loaded = load_config(
        r#"
        command_socket = "/run/preread.sock"
        worker_count = 4
        saved_state = "/var/lib/preread/state"
        automatic_state_save = true
        log_level = "warn,preread=debug"
        access_logs = "/var/log/preread/access.log"
        access_log_format = "json"
        buffer_size = 4096
        max_buffers = 5
        max_connections = 7
        splice = false
        splice_threshold = 0
        max_connection_attempts = 1
        empty_saved_state = "use_config"
        command_client_timeout = 2
        defer_accept = false
        backend_keepalive = true
        backend_delayed_ack = true
        "#,
    )
    .unwrap_or_else(|p| panic!("{}", show(&p)));
    let g = loaded.global;
    assert_eq!(g.command_socket, Path::new("/run/preread.sock"));
    assert_eq!(g.worker_count, 4);
    assert_eq!(
        g.saved_state.as_deref(),
        Some(Path::new("/var/lib/preread/state"))
    );
    assert!(g.automatic_state_save);
    assert_eq!(g.log_level, "warn,preread=debug");
    assert_eq!(
        g.access_logs,
        AccessLogTarget::File("/var/log/preread/access.log".into())
    );
    assert_eq!(g.access_log_format, AccessLogFormat::Json);
    assert_eq!(
        (g.buffer_size, g.max_buffers, g.max_connections),
        (4096, 5, 7)
    );
    assert!(!g.splice);
    assert_eq!(g.splice_threshold, 0);
    assert_eq!(g.max_connection_attempts, 1);
    assert_eq!(g.empty_saved_state, EmptySavedState::UseConfig);
    assert_eq!(g.command_client_timeout, Duration::from_secs(2));
    assert!(!g.defer_accept);
    assert!(g.backend_keepalive);
    assert!(g.backend_delayed_ack);
    assert_eq!(
        load_config(r#"empty_saved_state = "keep_empty""#)
            .unwrap()
            .global
            .empty_saved_state,
        EmptySavedState::KeepEmpty
    );
    assert_eq!(
        load_config(r#"access_logs = "off""#)
            .unwrap()
            .global
            .access_logs,
        AccessLogTarget::Off
    );
}

#[test]
fn splice_threshold_is_a_byte_count_from_zero() {
    let problems = check_config("splice_threshold = -1\n");
    assert_eq!(problems.len(), 1, "{}", show(&problems));
    assert_eq!(problems[0].code, ErrorCode::InvalidValue);
    assert!(
        problems[0].message.contains("splice_threshold = -1"),
        "{}",
        problems[0].message
    );
    let loaded =
        load_config("splice_threshold = 1048576\n").unwrap_or_else(|p| panic!("{}", show(&p)));
    assert_eq!(loaded.global.splice_threshold, 1 << 20);
}

/// `text` is refused with one E003 whose message says `said`.
fn assert_one_invalid_value(text: &str, said: &str) {
    let problems = check_config(text);
    assert_eq!(problems.len(), 1, "{text}: {}", show(&problems));
    assert_eq!(problems[0].code, ErrorCode::InvalidValue);
    assert!(
        problems[0].message.contains(said),
        "{}",
        problems[0].message
    );
}

#[test]
fn splice_pipe_size_is_a_page_to_256_mib() {
    for (text, said) in [
        ("splice_pipe_size = 4095\n", "at least 4096"),
        ("splice_pipe_size = 268435457\n", "at most 268435456"),
    ] {
        assert_one_invalid_value(text, said);
    }
    let defaults = load_config("").unwrap_or_else(|p| panic!("{}", show(&p)));
    assert_eq!(defaults.global.splice_pipe_size, None);
    let loaded =
        load_config("splice_pipe_size = 262144\n").unwrap_or_else(|p| panic!("{}", show(&p)));
    assert_eq!(loaded.global.splice_pipe_size, Some(256 << 10));
}

#[test]
fn splice_bulk_pipe_size_is_off_or_a_page_to_256_mib_and_its_budget_not_negative() {
    for (text, said) in [
        ("splice_bulk_pipe_size = 4095\n", "at least 4096"),
        ("splice_bulk_pipe_size = -1\n", "at least 4096"),
        ("splice_bulk_pipe_size = 268435457\n", "at most 268435456"),
        ("splice_bulk_budget = -1\n", "at least 0"),
    ] {
        assert_one_invalid_value(text, said);
    }
    let defaults = load_config("").unwrap_or_else(|p| panic!("{}", show(&p)));
    assert_eq!(defaults.global.splice_bulk_pipe_size, 1 << 20);
    assert_eq!(defaults.global.splice_bulk_budget, 32 << 20);
    let loaded = load_config("splice_bulk_pipe_size = 0\nsplice_bulk_budget = 0\n")
        .unwrap_or_else(|p| panic!("{}", show(&p)));
    assert_eq!(loaded.global.splice_bulk_pipe_size, 0);
    assert_eq!(loaded.global.splice_bulk_budget, 0);
    let loaded =
        load_config("splice_bulk_pipe_size = 262144\n").unwrap_or_else(|p| panic!("{}", show(&p)));
    assert_eq!(loaded.global.splice_bulk_pipe_size, 256 << 10);
}

#[test]
fn automatic_state_save_needs_saved_state() {
    let problems = check_config("automatic_state_save = true\n");
    assert_eq!(problems.len(), 1, "{}", show(&problems));
    assert_eq!(problems[0].code, ErrorCode::InvalidValue);
    assert_eq!(
        problems[0].location,
        Some(Location {
            line: 1,
            column: 24
        })
    );
}

#[test]
fn load_balancing_spellings() {
    for (spelling, expected) in [
        ("round_robin", proto::LoadBalancing::RoundRobin),
        ("ROUND_ROBIN", proto::LoadBalancing::RoundRobin),
        ("random", proto::LoadBalancing::Random),
        ("RANDOM", proto::LoadBalancing::Random),
        ("least_connections", proto::LoadBalancing::LeastConnections),
        ("LEAST_LOADED", proto::LoadBalancing::LeastConnections),
        ("power_of_two", proto::LoadBalancing::PowerOfTwo),
        ("POWER_OF_TWO", proto::LoadBalancing::PowerOfTwo),
    ] {
        let text = format!("[clusters.a]\nload_balancing = \"{spelling}\"\n");
        let loaded = load_config(&text).unwrap_or_else(|p| panic!("{spelling}: {}", show(&p)));
        match &loaded.requests[0].request.request_type {
            Some(RequestType::AddCluster(c)) => {
                assert_eq!(c.load_balancing, expected as i32, "{spelling}");
            }
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn problem_display_is_line_col_code_message() {
    let problems = check_config("x = 1\n");
    assert_eq!(problems.len(), 1);
    let shown = problems[0].to_string();
    assert!(shown.starts_with("1:1: E002: "), "{shown}");
    let unreadable = check_config_file(data("does-not-exist.toml"));
    assert_eq!(unreadable.len(), 1);
    assert_eq!(unreadable[0].location, None);
    assert!(
        unreadable[0].message.contains("does-not-exist.toml"),
        "{}",
        unreadable[0]
    );
    assert!(load_config_file(data("does-not-exist.toml")).is_err());
}

#[test]
fn columns_count_characters() {
    // "é" is two bytes; the column of the unknown key counts it once.
    let problems = check_config("[clusters.a]\nfrontends = [{ sni = \"é\", zz = 1 }]\n");
    let codes: Vec<ErrorCode> = problems.iter().map(|p| p.code).collect();
    // The frontend also lacks its address (at its inline table).
    assert_eq!(
        codes,
        [ErrorCode::InvalidToml, ErrorCode::UnknownKey],
        "{}",
        show(&problems)
    );
    assert_eq!(
        problems[1].location,
        Some(Location {
            line: 2,
            column: 27
        })
    );
    assert_eq!(
        Location::from_offset("aé\nbc", 3),
        Location { line: 1, column: 3 }
    );
    assert_eq!(
        Location::from_offset("aé\nbc", 5),
        Location { line: 2, column: 2 }
    );
    assert_eq!(
        Location::from_offset("aé\nbc", 99),
        Location { line: 2, column: 3 }
    );
}

// ---------------------------------------------------------------------------
// The broken configs

/// Every broken config with the codes it must produce (in file order);
/// one with warnings alone loads.
/// Lines are taken from `# expect CODE...` markers on the offending lines,
/// and this table must agree with them.
const BROKEN: &[(&str, &[ErrorCode])] = {
    use ErrorCode::*;
    &[
        ("unknown_top_level_key.toml", &[UnknownKey]),
        ("unknown_key_listener.toml", &[UnknownKey]),
        ("unknown_key_cluster.toml", &[UnknownKey]),
        ("unknown_key_frontend.toml", &[UnknownKey]),
        ("bad_toml.toml", &[InvalidToml]),
        ("wrong_type.toml", &[InvalidToml]),
        ("missing_key.toml", &[InvalidToml]),
        (
            "invalid_value.toml",
            &[
                InvalidValue,
                InvalidValue,
                InvalidValue,
                InvalidAddress,
                InvalidValue,
                InvalidValue,
                InvalidValue,
                InvalidValue,
                InvalidValue,
                InvalidValue,
                InvalidValue,
            ],
        ),
        ("bad_address.toml", &[InvalidAddress, InvalidAddress]),
        ("bad_sni_pattern.toml", &[InvalidSniPattern]),
        ("empty_alpn_name.toml", &[InvalidAlpn]),
        ("alpn_protocol_taken.toml", &[AlpnProtocolTaken]),
        ("duplicate_frontend.toml", &[FrontendConflict]),
        ("catch_all_with_sni.toml", &[CatchAllMixedWithSni]),
        ("two_catch_alls.toml", &[MultipleCatchAll]),
        ("alpn_without_sni.toml", &[AlpnWithoutSni]),
        (
            "preread_max_bytes_too_small.toml",
            &[PrereadMaxBytesTooSmall],
        ),
        (
            "server_first_without_default_cluster.toml",
            &[ServerFirstWithoutDefaultCluster],
        ),
        ("frontend_unknown_listener.toml", &[UnknownListener]),
        ("default_cluster_unknown.toml", &[UnknownCluster]),
        (
            "relay_without_expect_proxy.toml",
            &[RelayWithoutExpectProxy],
        ),
        ("duplicate_backend_id.toml", &[DuplicateBackendId]),
        (
            "one_pass.toml",
            &[
                InvalidToml,
                UnknownKey,
                InvalidAddress,
                PrereadTimeoutShort,
                InvalidValue,
                InvalidValue,
                InvalidSniPattern,
            ],
        ),
        (
            "warnings_only.toml",
            &[
                SecondsLikeMilliseconds,
                PrereadTimeoutShort,
                PrereadCapSmall,
                SecondsLikeMilliseconds,
                InactivityTimeoutLong,
                ConnectTimeoutLong,
                NoBackendCanServe,
            ],
        ),
        (
            "several_problems.toml",
            &[
                InvalidValue,
                InvalidAddress,
                UnknownCluster,
                InvalidSniPattern,
                InvalidAlpn,
                BackendConflict,
                InvalidId,
                UnknownCluster,
                UnknownListener,
            ],
        ),
    ]
};

/// `(line, code)` of every `# expect E123 [E456...]` marker.
fn expected_markers(text: &str) -> Vec<(usize, ErrorCode)> {
    let mut expected = Vec::new();
    for (index, line) in text.lines().enumerate() {
        if let Some((_, codes)) = line.split_once("# expect ") {
            for code in codes.split_whitespace() {
                let code = ErrorCode::from_code(code)
                    .unwrap_or_else(|| panic!("line {}: unknown code {code}", index + 1));
                expected.push((index + 1, code));
            }
        }
    }
    expected
}

#[test]
fn broken_configs_report_each_problem_at_its_line() {
    for &(name, codes) in BROKEN {
        let text = fs::read_to_string(data(name)).unwrap();
        let expected = expected_markers(&text);
        assert_eq!(
            expected.iter().map(|(_, code)| *code).collect::<Vec<_>>(),
            codes,
            "{name}: the table and the file's markers disagree"
        );
        let problems = check_config(&text);
        let found: Vec<(usize, ErrorCode)> = problems
            .iter()
            .map(|p| (p.location.expect("located").line, p.code))
            .collect();
        assert_eq!(found, expected, "{name}:\n{}", show(&problems));
        for problem in &problems {
            assert!(!problem.message.is_empty(), "{name}: {problem}");
        }
        if problems.iter().all(ConfigProblem::is_warning) {
            let loaded = load_config(&text).unwrap_or_else(|p| panic!("{name}: {}", show(&p)));
            assert_eq!(loaded.warnings, problems, "{name}");
        } else {
            let refused = load_config(&text).expect_err(name);
            assert_eq!(refused, problems, "{name}");
        }
    }
}

#[test]
fn every_broken_config_is_listed() {
    let listed: BTreeSet<&str> = BROKEN.iter().map(|(name, _)| *name).collect();
    let on_disk: BTreeSet<String> =
        fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data"))
            .unwrap()
            .map(|entry| entry.unwrap().file_name().into_string().unwrap())
            .filter(|name| name.ends_with(".toml"))
            .collect();
    let on_disk: BTreeSet<&str> = on_disk.iter().map(String::as_str).collect();
    assert_eq!(listed, on_disk);
}

#[test]
fn refusals_caused_by_a_refused_declaration_point_at_it() {
    let text = fs::read_to_string(data("several_problems.toml")).unwrap();
    let problems = check_config(&text);
    let caused: Vec<_> = problems
        .iter()
        .filter(|p| p.message.contains("was refused"))
        .collect();
    assert_eq!(caused.len(), 1, "{}", show(&problems));
    assert!(
        caused[0]
            .message
            .contains("cluster `bad id` declared at 28:1"),
        "{}",
        caused[0]
    );

    let text = "[[listeners]]\naddress = \"127.0.0.1:8443\"\ndefault_cluster = \"nope\"\n\
                [clusters.a]\nfrontends = [{ address = \"127.0.0.1:8443\", sni = \"a.example.com\" }]\n";
    let problems = check_config(text);
    let codes: Vec<_> = problems.iter().map(|p| p.code).collect();
    assert_eq!(
        codes,
        [ErrorCode::UnknownCluster, ErrorCode::UnknownListener]
    );
    assert!(
        problems[1]
            .message
            .contains("listener 127.0.0.1:8443 declared at 1:1 was refused"),
        "{}",
        problems[1]
    );
}

#[test]
fn problems_name_what_to_change() {
    let text = fs::read_to_string(data("catch_all_with_sni.toml")).unwrap();
    let problems = check_config(&text);
    assert!(
        problems[0].message.contains("default_cluster"),
        "{}",
        problems[0]
    );

    let text = fs::read_to_string(data("unknown_key_listener.toml")).unwrap();
    let problems = check_config(&text);
    assert!(
        problems[0].message.contains("answer_503"),
        "{}",
        problems[0]
    );
}

// ---------------------------------------------------------------------------
// State files

/// A scratch directory (removed on drop), and what the state-file tests ask
/// of it.
struct Scratch(tempfile::TempDir);

impl Scratch {
    fn new(name: &str) -> Self {
        let dir = tempfile::Builder::new()
            .prefix(&format!("preread-state-test-{name}-"))
            .tempdir()
            .unwrap();
        Self(dir)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.path().join(name)
    }

    fn entries(&self) -> BTreeSet<String> {
        fs::read_dir(self.0.path())
            .unwrap()
            .map(|entry| entry.unwrap().file_name().into_string().unwrap())
            .collect()
    }
}

fn example_state() -> ConfigState {
    let loaded = load_config_file(example_path()).unwrap();
    let mut state = ConfigState::default();
    for request in loaded.requests() {
        let _applied = state.dispatch(request).unwrap();
    }
    state
}

fn request(kind: RequestType) -> proto::Request {
    proto::Request {
        request_type: Some(kind),
    }
}

#[test]
fn state_round_trips_through_a_file() {
    let scratch = Scratch::new("round-trip");
    let path = scratch.path("state.json");
    let state = example_state();
    save_state(&path, &state.generate_requests()).unwrap();
    assert_eq!(load_state(&path).unwrap(), state);
    let (replayed, requests) = load_state_requests(&path).unwrap();
    assert_eq!(replayed, state);
    assert_eq!(requests, state.generate_requests());

    let text = fs::read_to_string(&path).unwrap();
    assert!(text.starts_with("{\"preread_state\":2}\n"), "{text}");
    // The header, the requests, the trailer.
    assert_eq!(text.lines().count(), 2 + state.generate_requests().len());
    assert!(text.ends_with('\n'));
    // Only the target is left in the directory.
    assert_eq!(scratch.entries(), BTreeSet::from(["state.json".to_owned()]));

    // Saving again replaces the content.
    save_state(&path, &[]).unwrap();
    assert_eq!(load_state(&path).unwrap(), ConfigState::default());
    assert_eq!(scratch.entries(), BTreeSet::from(["state.json".to_owned()]));
}

#[test]
fn missing_state_file_is_its_own_kind() {
    let scratch = Scratch::new("missing");
    let error = load_state(scratch.path("nope.json")).unwrap_err();
    assert!(error.is_not_found(), "{error}");
    assert!(matches!(error, StateFileError::NotFound { .. }));
    assert_eq!(error.code(), ErrorCode::StateFileIo);
}

fn invalid(text: &str) -> (usize, ErrorCode, String) {
    match parse_state(text) {
        Err(error @ StateFileError::Invalid { .. }) => {
            let shown = error.to_string();
            let line = error.line().unwrap();
            assert!(
                shown.starts_with(&format!("line {line}: {}: ", error.code())),
                "{shown}"
            );
            (line, error.code(), shown)
        }
        other => panic!("expected a refused line, got {other:?}"),
    }
}

#[test]
fn damaged_state_files_are_refused_at_the_line() {
    let full = render_state(&example_state().generate_requests()).unwrap();
    let lines: Vec<&str> = full.lines().collect();
    assert!(lines.len() > 4);

    // Cut in the middle of the fourth line, or at its end: the trailer is
    // gone either way.
    let cut = lines[..3].join("\n").len() + 1 + lines[3].len() / 2;
    let (line, code, _) = invalid(&full[..cut]);
    assert_eq!((line, code), (4, ErrorCode::StateFileIntegrity));
    let (line, code, shown) = invalid(&(lines[..4].join("\n") + "\n"));
    assert_eq!((line, code), (5, ErrorCode::StateFileIntegrity));
    assert!(shown.contains("cut short"), "{shown}");

    // Cut right before the final newline: the trailer is whole JSON but
    // the file is still short.
    let (line, code, shown) = invalid(&full[..full.len() - 1]);
    assert_eq!((line, code), (lines.len(), ErrorCode::StateFileIntegrity));
    assert!(shown.contains("cut short"), "{shown}");

    // A corrupt JSON line: the checksum catches it; sealed anew, the line
    // itself is refused.
    let body: Vec<String> = lines[..lines.len() - 1]
        .iter()
        .map(|l| format!("{l}\n"))
        .collect();
    let mut corrupt = body.clone();
    corrupt[2] = corrupt[2].replacen('{', "[", 1);
    let corrupt = corrupt.concat();
    assert_eq!(
        invalid(&format!("{corrupt}{}\n", lines[lines.len() - 1])).1,
        ErrorCode::StateFileIntegrity
    );
    let (line, code, _) = invalid(&seal(&corrupt));
    assert_eq!((line, code), (3, ErrorCode::StateFileCorrupt));

    // An unknown field is corruption too (the types refuse unknown fields).
    let text = "{\"preread_state\":2}\n{\"request_type\":{\"add_cluster\":{\"cluster_id\":\"a\",\"load_balancing\":0,\"proxy_protocol\":0,\"max_connections_per_ip\":0,\"colour\":1}}}\n";
    assert_eq!(invalid(&seal(text)).0, 2);

    // Unknown version, foreign header, no header, empty file.
    let (line, code, _) = invalid(&full.replacen("\"preread_state\":2", "\"preread_state\":3", 1));
    assert_eq!((line, code), (1, ErrorCode::StateFileVersion));
    let (line, code, _) = invalid(&full.replacen("preread_state\"", "sozu_state\"", 1));
    assert_eq!((line, code), (1, ErrorCode::StateFileCorrupt));
    let (line, code, _) = invalid(&full[lines[0].len() + 1..]);
    assert_eq!((line, code), (1, ErrorCode::StateFileCorrupt));
    assert_eq!(invalid("").1, ErrorCode::StateFileCorrupt);
}

#[test]
fn refused_request_in_a_state_file_names_its_line() {
    let cluster = request(RequestType::AddCluster(proto::Cluster {
        cluster_id: "alpha".into(),
        ..Default::default()
    }));
    let frontend = request(RequestType::AddTcpFrontend(proto::TcpFrontend {
        cluster_id: "alpha".into(),
        address: "127.0.0.1:8443".into(),
        sni: Some("a.example.com".into()),
        alpn: vec![],
        tags: Default::default(),
        protocol: None,
    }));
    let listener = request(RequestType::AddTcpListener(proto::TcpListenerConfig {
        address: "127.0.0.1:8443".into(),
        ..Default::default()
    }));
    // Frontend before its listener.
    let text = render_state(&[cluster.clone(), frontend.clone(), listener.clone()]).unwrap();
    let (line, code, shown) = invalid(&text);
    assert_eq!((line, code), (3, ErrorCode::UnknownListener), "{shown}");
    // In order, it replays.
    let text = render_state(&[cluster, listener, frontend]).unwrap();
    let state = parse_state(&text).unwrap();
    assert_eq!(state.frontends().len(), 1);
    // A request that is not a state change.
    let text = render_state(&[request(RequestType::Status(proto::Status {}))]).unwrap();
    let (line, code, _) = invalid(&text);
    assert_eq!((line, code), (2, ErrorCode::UnsupportedRequest));
}

#[test]
fn failed_save_leaves_the_old_file_and_no_temp_file() {
    let scratch = Scratch::new("atomic");
    let path = scratch.path("state.json");
    let requests = example_state().generate_requests();
    save_state(&path, &requests).unwrap();
    let before = fs::read(&path).unwrap();

    // The target is a non-empty directory: the rename fails after the temp
    // file was written and synced.
    let blocked = scratch.path("blocked");
    fs::create_dir(&blocked).unwrap();
    fs::write(blocked.join("keep"), b"x").unwrap();
    let error = save_state(&blocked, &[]).unwrap_err();
    assert!(
        matches!(
            error,
            StateFileError::Io {
                operation: "rename",
                ..
            }
        ),
        "{error}"
    );
    assert_eq!(error.code(), ErrorCode::StateFileIo);
    assert!(blocked.join("keep").exists());

    // The target's directory does not exist: nothing can be created.
    let error = save_state(scratch.path("no-such-dir/state.json"), &requests).unwrap_err();
    assert!(matches!(error, StateFileError::Io { .. }), "{error}");

    assert_eq!(
        scratch.entries(),
        BTreeSet::from(["blocked".to_owned(), "state.json".to_owned()])
    );
    assert_eq!(fs::read(&path).unwrap(), before);
    assert_eq!(load_state(&path).unwrap(), example_state());
}
