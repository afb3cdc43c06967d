//! The config target's invariants: whatever bytes an operator's file or a
//! store key holds, a config text, a state file's body and an etcd route
//! key each get an answer (loaded, or problems with a message and a
//! place), never a panic, and what loads saves and reads back as the same
//! state. (That every code is its own name and has an explanation is
//! `command::codes`' own test, over every code: nothing an input changes.)
//!
//! Owns: [`check_config`]. An input that starts with a state file's header
//! (`{"preread_state"`) is a state body: it is sealed with its trailer
//! (`command::state_file::seal`, as `preread state seal` does), so the
//! fuzzer reaches the request lines behind the checksum. One that starts
//! with `routes/` is an etcd route key (its first line, any bytes) and its
//! value (the rest): the fragment the source makes of them is merged onto
//! the example config's state, as a replica does. Any other input is a
//! config text.
//!
//! Included by `command/tests/fuzz_replay.rs` too, so it may use only
//! `command` and std. Must never: decide what a text means a second time;
//! every expectation is another shipped path's answer to the same text
//! (`check_config` against `load_config`, a saved state read back, the
//! merge's own account of what it applied).

use std::collections::BTreeSet;
use std::sync::OnceLock;

use command::config::{ConfigProblem, Outline, check_config as problems_of, load_config};
use command::diff::diff;
use command::proto;
use command::proto::request::RequestType;
use command::sources::etcd::{fragment, route_name};
use command::sources::merge;
use command::state::ConfigState;
use command::state_file::{parse_state_requests, render_state, seal};

/// What an input reached, so that the corpus replay can require each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reached {
    /// Not UTF-8: neither a config nor a state file.
    NotText,
    ConfigLoaded,
    ConfigRefused,
    StateRead,
    StateRefused,
    /// A key the etcd source does not read as a route key.
    KeyIgnored,
    FragmentApplied,
    FragmentExcluded,
}

/// How a state body starts: its version header's first bytes.
const STATE_HEADER: &[u8] = b"{\"preread_state\"";

/// The routes prefix of the etcd source's keys, as a replica whose
/// `prefix` is empty reads them.
const ROUTES_PREFIX: &str = "routes/";

/// The file a route key's fragment is merged onto: the example config.
const BASE_CONFIG: &str = include_str!("../../doc/examples/preread.toml");

/// Checks `data` as an etcd route key and its value when it starts with
/// [`ROUTES_PREFIX`], as a state body when it starts with
/// [`STATE_HEADER`], else as a config text; other bytes that are not
/// UTF-8 are none of them.
pub fn check_config(data: &[u8]) -> Reached {
    if data.starts_with(ROUTES_PREFIX.as_bytes()) {
        return check_route_key(data);
    }
    let Ok(text) = std::str::from_utf8(data) else {
        return Reached::NotText;
    };
    if data.starts_with(STATE_HEADER) {
        check_state_body(text)
    } else {
        check_config_text(text)
    }
}

/// `check_config` and `load_config` agree on the text; every problem says
/// something and is placed in it; a loaded config's state is the one its
/// requests build, and survives a save and a read.
fn check_config_text(text: &str) -> Reached {
    let problems = problems_of(text);
    for problem in &problems {
        check_problem(text, problem);
    }
    let refused = problems.iter().any(|problem| !problem.is_warning());
    match load_config(text) {
        Ok(loaded) => {
            assert!(!refused, "loaded despite {problems:?}");
            assert_eq!(loaded.warnings, problems, "the warnings are the check's");
            // The state file's reader dispatches every request in order,
            // all or nothing: the requests build the loaded state, and it
            // survives a save and a read.
            let requests: Vec<proto::Request> = loaded.requests().cloned().collect();
            assert_eq!(
                saved_and_read(&requests),
                loaded.state,
                "a loaded config's requests, saved and read, are its state"
            );
            let _ = Outline::of(text, &loaded);
            Reached::ConfigLoaded
        }
        Err(refusal) => {
            assert!(refused, "refused with warnings only: {refusal:?}");
            assert_eq!(refusal, problems, "the refusal is the check's problems");
            Reached::ConfigRefused
        }
    }
}

/// A problem says something and points inside the text.
fn check_problem(text: &str, problem: &ConfigProblem) {
    assert!(!problem.message.is_empty(), "a problem without a message");
    if let Some(location) = problem.location {
        let lines = text.split('\n').count();
        assert!(
            (1..=lines).contains(&location.line) && location.column >= 1,
            "{location} is outside a text of {lines} lines: {problem}"
        );
    }
}

/// The sealed body reads as a state or is refused with a message and a
/// line inside the text; what reads saves and reads back as itself.
fn check_state_body(body: &str) -> Reached {
    let sealed = seal(body);
    match parse_state_requests(&sealed) {
        Ok((state, requests)) => {
            assert_eq!(saved_and_read(&requests), state, "the state reads back");
            let generated = state.generate_requests();
            assert_eq!(
                saved_and_read(&generated),
                state,
                "the state's own requests read back as it"
            );
            Reached::StateRead
        }
        Err(error) => {
            assert!(!error.to_string().is_empty(), "an error without a message");
            if let Some(line) = error.line() {
                let lines = sealed.split('\n').count();
                assert!(
                    (1..=lines).contains(&line),
                    "line {line} of {lines}: {error}"
                );
            }
            Reached::StateRefused
        }
    }
}

/// The key (the first line) and the value (the rest) as the etcd source
/// reads them: a route key's fragment, merged onto the example config's
/// state, applies or is excluded with its reasons, and adds to the file's
/// state without changing what the file declared.
fn check_route_key(data: &[u8]) -> Reached {
    let (key, value) = match data.iter().position(|&byte| byte == b'\n') {
        Some(end) => (&data[..end], &data[end + 1..]),
        None => (data, &[][..]),
    };
    let Some(name) = route_name(key, ROUTES_PREFIX) else {
        return Reached::KeyIgnored;
    };
    let fragment = fragment(name, value);
    let base = base_state();
    let merged = merge(base, [&fragment], &BTreeSet::new());
    merged.state.check_invariants();
    match (merged.applied.as_slice(), merged.excluded.is_empty()) {
        ([applied], true) => {
            assert_eq!(applied.id, fragment.id);
            for step in diff(base, &merged.state) {
                let addition = matches!(
                    step.request_type,
                    Some(
                        RequestType::AddCluster(_)
                            | RequestType::AddTcpFrontend(_)
                            | RequestType::AddBackend(_)
                    )
                );
                assert!(addition, "a fragment changed the file's state: {step:?}");
            }
            Reached::FragmentApplied
        }
        ([], false) => {
            assert_eq!(&merged.state, base, "an excluded fragment left a trace");
            for exclusion in &merged.excluded {
                assert_eq!(exclusion.id, fragment.id);
                assert!(
                    !exclusion.message.is_empty(),
                    "an exclusion without a message"
                );
            }
            Reached::FragmentExcluded
        }
        (applied, _) => panic!(
            "one fragment, {} applied and {} exclusions",
            applied.len(),
            merged.excluded.len()
        ),
    }
}

/// The example config's state, loaded once.
fn base_state() -> &'static ConfigState {
    static BASE: OnceLock<ConfigState> = OnceLock::new();
    BASE.get_or_init(|| match load_config(BASE_CONFIG) {
        Ok(loaded) => loaded.state,
        Err(problems) => panic!("the example config does not load: {problems:?}"),
    })
}

/// The state a state file holding `requests` reads as.
fn saved_and_read(requests: &[proto::Request]) -> ConfigState {
    let text = match render_state(requests) {
        Ok(text) => text,
        Err(error) => panic!("the state does not render: {error}"),
    };
    match parse_state_requests(&text) {
        Ok((state, _)) => state,
        Err(error) => panic!("a rendered state file does not read: {error}\n{text}"),
    }
}
