//! The command target's invariants: the channel decoder never panics on any
//! byte stream and stays poisoned after an error, and `ConfigState::dispatch`
//! keeps its invariants on any request sequence: a refused request changes
//! nothing, and the accepted state replays to an equal one.
//!
//! Included by `command/tests/fuzz_replay.rs` too, so it may use only
//! `command`, `prost` and std.

use command::channel::FrameDecoder;
use command::proto;
use command::state::ConfigState;

/// Feeds `data` to a frame decoder in chunks sized by the data itself, then
/// dispatches every request that decodes into a fresh state.
pub fn check_command(data: &[u8]) {
    let mut decoder = FrameDecoder::with_max_frame_len(64 * 1024);
    let step = usize::from(data.first().copied().unwrap_or(1)).max(1);
    let mut requests = Vec::new();
    let mut failed = false;
    for chunk in data.chunks(step) {
        decoder.push(chunk);
        loop {
            match decoder.next_frame::<proto::Request>() {
                Ok(Some(request)) => {
                    assert!(!failed, "a frame decoded after the decoder failed");
                    requests.push(request);
                }
                Ok(None) => break,
                Err(_) => {
                    failed = true;
                    assert!(decoder.is_poisoned(), "an error must poison the decoder");
                    break;
                }
            }
        }
    }
    // The payload alone, as one request, reaches dispatch too: most random
    // inputs never form a valid frame.
    if let Ok(request) = <proto::Request as prost::Message>::decode(data) {
        requests.push(request);
    }
    check_dispatch(&requests);
}

/// Dispatches `requests` in order: a refusal leaves the state untouched,
/// invariants hold after every step, and the result replays to itself.
pub fn check_dispatch(requests: &[proto::Request]) {
    let mut state = ConfigState::default();
    for request in requests {
        let before = state.clone();
        if state.dispatch(request).is_err() {
            assert!(
                state == before,
                "a refused request changed the state: {request:?}"
            );
        }
        state.check_invariants();
    }
    let mut replayed = ConfigState::default();
    for request in state.generate_requests() {
        if let Err(error) = replayed.dispatch(&request) {
            panic!("generated request refused on replay: {error}: {request:?}");
        }
    }
    assert!(
        replayed == state,
        "replaying generate_requests gives another state"
    );
}
