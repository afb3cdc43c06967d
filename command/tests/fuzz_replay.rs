//! Replays the committed corpora of the `command` and `config` fuzz
//! targets on stable, so CI exercises the channel decoder,
//! `ConfigState::dispatch`, the config loader and the state file's reader
//! the way the fuzzers do.

#[path = "../../fuzz/src/checks_command.rs"]
#[allow(unreachable_pub)]
mod checks;

#[path = "../../fuzz/src/checks_config.rs"]
#[allow(unreachable_pub)]
mod config_checks;

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

#[test]
fn config_corpus_replays() {
    use config_checks::Reached;
    let reached = corpus::replay("config", 30, config_checks::check_config);
    // The seeds are the example configs, the loader's test files (most of
    // them refused), state bodies rendered from configs (one of them
    // refused by a mutation) and etcd route keys (one that applies, one
    // that clashes with the file, one broken, one not a route key); each
    // kind of answer must stay reachable.
    for kind in [
        Reached::ConfigLoaded,
        Reached::ConfigRefused,
        Reached::StateRead,
        Reached::StateRefused,
        Reached::KeyIgnored,
        Reached::FragmentApplied,
        Reached::FragmentExcluded,
    ] {
        assert!(
            reached.contains(&kind),
            "no input of the corpus reaches {kind:?}"
        );
    }
}
