//! The config target's invariants: whatever bytes an operator's file holds,
//! a config text and a state file's body each get an answer (loaded, or
//! problems with a code, a message and a place in the text), never a panic,
//! and what loads saves and reads back as the same state.
//!
//! Owns: [`check_config`]. An input that starts with a state file's header
//! (`{"preread_state"`) is a state body: it is sealed with its trailer
//! (`command::state_file::seal`, as `preread state seal` does), so the
//! fuzzer reaches the request lines behind the checksum. Any other input is
//! a config text.
//!
//! Included by `command/tests/fuzz_replay.rs` too, so it may use only
//! `command` and std. Must never: decide what a text means a second time;
//! every expectation is another shipped path's answer to the same text
//! (`check_config` against `load_config`, a saved state read back).

use command::codes::ErrorCode;
use command::config::{ConfigProblem, Outline, check_config as problems_of, load_config};
use command::proto;
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
}

/// How a state body starts: its version header's first bytes.
const STATE_HEADER: &[u8] = b"{\"preread_state\"";

/// Checks `data` as a state body when it starts with [`STATE_HEADER`],
/// else as a config text; bytes that are not UTF-8 are neither.
pub fn check_config(data: &[u8]) -> Reached {
    let Ok(text) = std::str::from_utf8(data) else {
        return Reached::NotText;
    };
    if data.starts_with(STATE_HEADER) {
        check_state_body(text)
    } else {
        check_config_text(text)
    }
}

/// `check_config` and `load_config` agree on the text; every problem is
/// explained and placed in it; a loaded config's state is the one its
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
            let requests: Vec<proto::Request> = loaded.requests().cloned().collect();
            assert_eq!(
                replayed(&requests),
                loaded.state,
                "the requests build the loaded state"
            );
            assert_eq!(
                saved_and_read(&requests),
                loaded.state,
                "a loaded state reads back from its state file"
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

/// A problem names a code that `preread explain` knows, says something,
/// and points inside the text.
fn check_problem(text: &str, problem: &ConfigProblem) {
    assert!(!problem.message.is_empty(), "a problem without a message");
    let code = problem.code;
    assert_eq!(
        ErrorCode::from_code(code.as_str()),
        Some(code),
        "{code:?} is not its own name"
    );
    let _ = code.explain();
    if let Some(location) = problem.location {
        let lines = text.split('\n').count();
        assert!(
            (1..=lines).contains(&location.line) && location.column >= 1,
            "{location} is outside a text of {lines} lines: {problem}"
        );
    }
}

/// The sealed body reads as a state or is refused with a state-file code;
/// what reads saves and reads back as itself.
fn check_state_body(body: &str) -> Reached {
    let sealed = seal(body);
    match parse_state_requests(&sealed) {
        Ok((state, requests)) => {
            assert_eq!(replayed(&requests), state, "the lines build the state");
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
            let _ = error.code().explain();
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

/// `requests` dispatched in order into a fresh state, each accepted.
fn replayed(requests: &[proto::Request]) -> ConfigState {
    let mut state = ConfigState::default();
    for request in requests {
        if let Err(refusal) = state.dispatch(request) {
            panic!("{request:?} refused on replay: {refusal}");
        }
    }
    state
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
