use std::fs;
use std::time::{Duration, Instant};

use super::*;
use crate::proto::request::RequestType;

fn cluster(id: &str) -> proto::Request {
    proto::Request {
        request_type: Some(RequestType::AddCluster(proto::Cluster {
            cluster_id: id.to_owned(),
            ..Default::default()
        })),
    }
}

fn three_clusters() -> String {
    render_state(&[cluster("a"), cluster("b"), cluster("c")]).unwrap()
}

fn refused(text: &str) -> (usize, ErrorCode, String) {
    let error = parse_state(text).unwrap_err();
    (error.line().unwrap(), error.code(), error.to_string())
}

#[test]
fn empty_state_is_the_header_and_its_trailer() {
    // The CRC-32 of `{"preread_state":2}\n`, from Python's zlib.crc32.
    let text = render_state(&[]).unwrap();
    assert_eq!(
        text,
        "{\"preread_state\":2}\n{\"preread_state_end\":{\"requests\":0,\"crc32\":\"ba2c9b3e\"}}\n"
    );
    assert_eq!(parse_state(&text).unwrap(), ConfigState::default());
    // Blank lines and CRLF line ends are tolerated, once sealed as they are.
    assert!(parse_state(&seal("{\"preread_state\":2}\r\n\n  \n")).is_ok());
}

#[test]
fn the_trailer_counts_and_checksums_what_precedes_it() {
    let text = three_clusters();
    let trailer = text.lines().last().unwrap();
    assert!(
        trailer.starts_with("{\"preread_state_end\":{\"requests\":3,\"crc32\":\""),
        "{trailer}"
    );
    let body = &text[..text.len() - trailer.len() - 1];
    assert_eq!(
        trailer,
        format!(
            "{{\"preread_state_end\":{{\"requests\":3,\"crc32\":\"{:08x}\"}}}}",
            crc32fast::hash(body.as_bytes())
        )
    );
    assert_eq!(parse_state(&text).unwrap().clusters().len(), 3);
}

#[test]
fn a_file_cut_at_any_line_boundary_is_refused() {
    let text = three_clusters();
    let mut ends: Vec<usize> = text.match_indices('\n').map(|(at, _)| at + 1).collect();
    assert_eq!(ends.pop(), Some(text.len()), "the whole file ends there");
    for end in ends {
        let (line, code, shown) = refused(&text[..end]);
        let lines = text[..end].lines().count();
        assert_eq!(
            (line, code),
            (lines + 1, ErrorCode::StateFileIntegrity),
            "{shown}"
        );
        assert!(shown.contains("cut short"), "{shown}");
    }
}

#[test]
fn a_file_cut_inside_a_line_is_refused() {
    let text = three_clusters();
    for end in [text.len() - 1, text.len() - 10, 25] {
        let (_, code, shown) = refused(&text[..end]);
        assert_eq!(code, ErrorCode::StateFileIntegrity, "{end}: {shown}");
    }
    let (line, code, _) = refused("{\"preread_state\":2}");
    assert_eq!((line, code), (1, ErrorCode::StateFileIntegrity));
}

#[test]
fn a_lost_added_or_edited_line_is_refused() {
    let text = three_clusters();
    let lines: Vec<&str> = text.lines().collect();
    let join = |lines: &[&str]| lines.iter().map(|l| format!("{l}\n")).collect::<String>();

    let mut lost = lines.clone();
    lost.remove(2);
    let (_, code, shown) = refused(&join(&lost));
    assert_eq!(code, ErrorCode::StateFileIntegrity);
    assert!(
        shown.contains("holds 2 request line(s) where its trailer says 3"),
        "{shown}"
    );

    let mut added = lines.clone();
    added.insert(1, lines[1]);
    let (_, code, shown) = refused(&join(&added));
    assert_eq!(code, ErrorCode::StateFileIntegrity, "{shown}");

    let edited = text.replacen("\"cluster_id\":\"b\"", "\"cluster_id\":\"x\"", 1);
    let (line, code, shown) = refused(&edited);
    assert_eq!((line, code), (5, ErrorCode::StateFileIntegrity));
    assert!(shown.contains("checksum"), "{shown}");

    let mut after = text.clone();
    after.push_str(lines[1]);
    after.push('\n');
    assert_eq!(refused(&after).1, ErrorCode::StateFileIntegrity);
}

#[test]
fn header_must_be_exactly_the_version_object() {
    for (text, code) in [
        (
            "{\"preread_state\":2,\"x\":2}\n",
            ErrorCode::StateFileCorrupt,
        ),
        ("[1]\n", ErrorCode::StateFileCorrupt),
        ("{\"preread_state\":0}\n", ErrorCode::StateFileVersion),
        ("{\"preread_state\":3}\n", ErrorCode::StateFileVersion),
        ("{\"preread_state\":\"2\"}\n", ErrorCode::StateFileVersion),
    ] {
        let error = parse_state(&seal(text)).unwrap_err();
        assert_eq!(
            (error.line(), error.code()),
            (Some(1), code),
            "{text}: {error}"
        );
    }
    assert_eq!(refused("").1, ErrorCode::StateFileCorrupt);
}

#[test]
fn a_version_1_file_is_refused_and_names_the_way_out() {
    let legacy = "{\"preread_state\":1}\n{\"request_type\":{\"add_cluster\":{\"cluster_id\":\"a\",\"load_balancing\":0,\"proxy_protocol\":0,\"max_connections_per_ip\":0}}}\n";
    let (line, code, shown) = refused(legacy);
    assert_eq!((line, code), (1, ErrorCode::StateFileVersion));
    assert!(shown.contains("preread state seal -f FILE"), "{shown}");
    // Sealed or not, version 1 is never trusted by a load.
    assert_eq!(refused(&seal(legacy)).1, ErrorCode::StateFileVersion);
}

#[test]
fn a_request_without_type_is_corrupt() {
    let error = parse_state(&seal("{\"preread_state\":2}\n{\"request_type\":null}\n")).unwrap_err();
    assert_eq!(
        (error.line(), error.code()),
        (Some(2), ErrorCode::StateFileCorrupt)
    );
    assert!(error.to_string().starts_with("line 2: E010: "), "{error}");
}

fn scratch() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

#[test]
fn seal_converts_a_version_1_file_and_keeps_its_requests() {
    let dir = scratch();
    let path = dir.path().join("state.json");
    let text = render_state(&[cluster("a"), cluster("b")]).unwrap();
    let trailer = text.lines().last().unwrap().len() + 1;
    let body = text[..text.len() - trailer].to_owned();
    let legacy = body.replacen("\"preread_state\":2", "\"preread_state\":1", 1);
    fs::write(&path, &legacy).unwrap();
    assert_eq!(
        load_state(&path).unwrap_err().code(),
        ErrorCode::StateFileVersion
    );
    assert_eq!(seal_state_file(&path).unwrap(), 2);
    assert_eq!(fs::read_to_string(&path).unwrap(), seal(&body));
    assert_eq!(load_state(&path).unwrap().clusters().len(), 2);
}

#[test]
fn seal_reseals_an_edited_file_but_never_a_broken_one() {
    let dir = scratch();
    let path = dir.path().join("state.json");
    let edited = three_clusters().replacen("\"cluster_id\":\"b\"", "\"cluster_id\":\"x\"", 1);
    fs::write(&path, &edited).unwrap();
    assert_eq!(seal_state_file(&path).unwrap(), 3);
    assert!(
        load_state(&path)
            .unwrap()
            .clusters()
            .any(|c| c.cluster_id == "x")
    );

    // A line that does not replay is refused, and the file stays as it was.
    let broken = "{\"preread_state\":1}\n{\"request_type\":{\"add_cluster\": not json\n";
    fs::write(&path, broken).unwrap();
    let error = seal_state_file(&path).unwrap_err();
    assert_eq!(
        (error.line(), error.code()),
        (Some(2), ErrorCode::StateFileCorrupt)
    );
    assert_eq!(fs::read_to_string(&path).unwrap(), broken);
    // So is a last line cut short.
    fs::write(&path, "{\"preread_state\":1}\n{\"request_type\"").unwrap();
    assert!(seal_state_file(&path).is_err());
}

/// Bounds every check that could hang: a FIFO must be refused at once.
fn quick<T>(what: &str, run: impl FnOnce() -> T) -> T {
    let started = Instant::now();
    let out = run();
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{what} took {:?}",
        started.elapsed()
    );
    out
}

#[test]
fn only_regular_files_are_read() {
    let dir = scratch();
    let fifo = dir.path().join("fifo");
    let c_path = std::ffi::CString::new(fifo.display().to_string()).unwrap();
    // SAFETY: a valid NUL-terminated path; mkfifo reads nothing else.
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
    let error = quick("a FIFO", || load_state(&fifo)).unwrap_err();
    assert!(
        matches!(error, StateFileError::NotRegular { kind: "a FIFO", .. }),
        "{error}"
    );
    assert_eq!(error.code(), ErrorCode::StateFileIo);
    assert!(error.to_string().contains("not a regular file"), "{error}");

    let error = quick("/dev/zero", || load_state("/dev/zero")).unwrap_err();
    assert!(
        matches!(
            error,
            StateFileError::NotRegular {
                kind: "a device",
                ..
            }
        ),
        "{error}"
    );
    let error = load_state(dir.path()).unwrap_err();
    assert!(
        matches!(
            error,
            StateFileError::NotRegular {
                kind: "a directory",
                ..
            }
        ),
        "{error}"
    );
}

#[test]
fn a_file_over_the_cap_is_not_read() {
    let dir = scratch();
    let path = dir.path().join("big.json");
    let file = fs::File::create(&path).unwrap();
    // Sparse: no disk is used.
    file.set_len(MAX_STATE_FILE_LEN + 1).unwrap();
    let error = quick("a sparse file over the cap", || load_state(&path)).unwrap_err();
    assert!(
        matches!(error, StateFileError::TooLarge { len, max, .. } if len == MAX_STATE_FILE_LEN + 1 && max == MAX_STATE_FILE_LEN),
        "{error}"
    );
    assert_eq!(error.code(), ErrorCode::StateFileIo);
    // At the cap it is read (and refused for what it holds).
    file.set_len(MAX_STATE_FILE_LEN).unwrap();
    assert!(matches!(
        load_state(&path).unwrap_err(),
        StateFileError::Invalid { .. }
    ));
}

#[test]
fn stale_temp_files_of_dead_saves_are_removed_and_others_kept() {
    let dir = scratch();
    let path = dir.path().join("state.json");
    save_state(&path, &[cluster("a")]).unwrap();
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let dead = child.id();
    child.wait().unwrap();
    let names = [
        format!(".state.json.tmp.{dead}.0"),
        format!(".state.json.tmp.{dead}.17"),
    ];
    for name in &names {
        fs::write(dir.path().join(name), "half a save").unwrap();
    }
    let alive = format!(".state.json.tmp.{}.3", std::process::id());
    let init = ".state.json.tmp.1.0".to_owned();
    let foreign = format!(".other.json.tmp.{dead}.0");
    for name in [&alive, &init, &foreign] {
        fs::write(dir.path().join(name), "kept").unwrap();
    }

    let mut removed: Vec<String> = remove_stale_temp_files(&path)
        .into_iter()
        .map(|r| {
            r.unwrap()
                .file_name()
                .unwrap()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    removed.sort();
    let mut expected = names.to_vec();
    expected.sort();
    assert_eq!(removed, expected);
    let mut left: Vec<String> = fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    let mut kept = vec![alive, init, foreign, "state.json".to_owned()];
    kept.sort();
    assert_eq!(left, kept);
    assert_eq!(load_state(&path).unwrap().clusters().len(), 1);
    assert!(remove_stale_temp_files(dir.path().join("none/state.json")).is_empty());
}

#[test]
fn the_access_settings_are_carried_in_canonical_form_and_left_out_when_unset() {
    let text = "\
[[listeners]]
address = \"127.0.0.1:8443\"
deny = [\"10.9.0.0/16\", \"192.0.2.7\"]
connection_rate_per_ip = { rate = 50, per = \"1s\" }
ipv6_prefix = 48

[clusters.admin]
allow = [\"2001:db8::/32\", \"10.0.0.0/8\"]

[clusters.plain]
";
    let loaded = crate::config::load_config(text).unwrap();
    let mut state = ConfigState::default();
    for request in loaded.requests() {
        assert_eq!(state.dispatch(request), Ok(crate::state::Applied::Changed));
    }
    let saved = render_state(&state.generate_requests()).unwrap();
    assert!(
        saved.contains("\"deny\":[\"10.9.0.0/16\",\"192.0.2.7/32\"]"),
        "{saved}"
    );
    assert!(
        saved.contains("\"connection_rate_per_ip\":{\"rate\":50,\"per_ms\":1000,\"burst\":50}"),
        "{saved}"
    );
    assert!(saved.contains("\"ipv6_prefix\":48"), "{saved}");
    assert!(
        saved.contains("\"allow\":[\"10.0.0.0/8\",\"2001:db8::/32\"]"),
        "{saved}"
    );
    let plain = saved.lines().find(|l| l.contains("\"plain\"")).unwrap();
    for key in ["allow", "deny", "connection_rate_per_ip", "ipv6_prefix"] {
        assert!(!plain.contains(key), "{plain}");
    }
    assert_eq!(parse_state(&saved).unwrap(), state, "read back as it was");
}
