//! Replays the committed corpus of the `command` fuzz target on stable, so
//! CI exercises the channel decoder and `ConfigState::dispatch` the way the
//! fuzzer does.

#[path = "../../fuzz/src/checks_command.rs"]
#[allow(unreachable_pub)]
mod checks;

#[allow(dead_code, unreachable_pub)]
#[path = "../../testdata/fuzz_replay.rs"]
mod corpus;

#[test]
fn command_corpus_replays() {
    let files = corpus::files("command", 10);
    // Real frames start with a zero byte, which the target reads as
    // 1-byte chunks: the example's whole request sequence goes through the
    // decoder byte by byte, then through dispatch and replay.
    assert!(
        files
            .iter()
            .any(|(path, bytes)| path.ends_with("example_all_frames.bin") && bytes[0] == 0)
    );
    corpus::replay("command", 10, checks::check_command);
}
