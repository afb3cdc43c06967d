//! Replays the committed fuzz corpus (`fuzz/corpus/clienthello`,
//! `fuzz/corpus/proxy_header`) through the fuzz targets' own check
//! functions, so every input the fuzzers ever kept (seeds, findings) is
//! re-checked by a plain `cargo test` on stable.

#[allow(dead_code, unreachable_pub)]
#[path = "../../fuzz/src/checks_parser.rs"]
mod checks;

#[allow(dead_code, unreachable_pub)]
#[path = "../../testdata/fuzz_replay.rs"]
mod corpus;

use checks::TlsOutcome;
use corpus::replay;

#[test]
fn clienthello_corpus() {
    let outcomes = replay("clienthello", 40, checks::check_clienthello);
    let complete = outcomes
        .iter()
        .filter(|o| matches!(o, TlsOutcome::Complete(_)))
        .count();
    let multi_record = outcomes
        .iter()
        .filter(|o| matches!(o, TlsOutcome::Complete(h) if h.records > 1))
        .count();
    let errors = outcomes
        .iter()
        .filter(|o| matches!(o, TlsOutcome::Error(_)))
        .count();
    println!(
        "{} files: {complete} complete ({multi_record} multi-record), {errors} errors",
        outcomes.len()
    );
    assert!(
        complete >= 20 && multi_record >= 1 && errors >= 5,
        "the replay must reach whole, multi-record and refused ClientHellos: \
         {complete} complete ({multi_record} multi-record), {errors} errors"
    );
}

#[test]
fn proxy_header_corpus() {
    let complete = replay("proxy_header", 10, checks::check_proxy_header)
        .into_iter()
        .flatten()
        .count();
    assert!(
        complete >= 8,
        "only {complete} complete PROXY headers replayed"
    );
}

/// Each target must also hold up on the other's inputs.
#[test]
fn crossed_corpora() {
    replay("proxy_header", 10, checks::check_clienthello);
    replay("clienthello", 40, checks::check_proxy_header);
}

/// Short inputs of every first byte, which the seeds do not start with.
#[test]
fn tiny_inputs() {
    for b in 0..=255u8 {
        for data in [
            &[b][..],
            &[0x16, 3, 1, 0, b],
            b"PROXY ",
            b"\r\n\r\n\0\r\nQUIT\n",
        ] {
            let _ = checks::check_clienthello(data);
            let _ = checks::check_proxy_header(data);
        }
    }
}
