//! Replays the committed `fuzz/corpus/pcap` through the fuzz target's own
//! check function, so every input the fuzzer ever kept (the captures of
//! `testdata/pcap`, cut ones, findings) is re-checked by a plain
//! `cargo test` on stable.

#[allow(dead_code, unreachable_pub)]
#[path = "../../fuzz/src/checks_pcap.rs"]
mod checks;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;

use checks::PcapOutcome;

#[test]
fn pcap_corpus() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/pcap");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("corpus entry").path())
        .filter(|path| path.is_file())
        .collect();
    files.sort();
    assert!(
        files.len() >= 7,
        "fuzz/corpus/pcap holds {} files",
        files.len()
    );
    let outcomes: Vec<PcapOutcome> = files
        .iter()
        .map(|path| {
            let bytes = std::fs::read(path).expect("corpus file");
            catch_unwind(AssertUnwindSafe(|| checks::check_pcap(&bytes)))
                .unwrap_or_else(|_| panic!("{} breaks an invariant", path.display()))
        })
        .collect();
    for outcome in [PcapOutcome::Refused, PcapOutcome::Flights] {
        assert!(outcomes.contains(&outcome), "no seed is {outcome:?}");
    }
}

#[test]
fn tiny_and_damaged_inputs() {
    let lo = include_bytes!("../../testdata/pcap/lo.pcap");
    let mut inputs: Vec<Vec<u8>> = vec![
        Vec::new(),
        vec![0xd4, 0xc3, 0xb2, 0xa1],
        vec![0x0a, 0x0d, 0x0d, 0x0a, 0, 0, 0, 0],
        lo[..24].to_vec(),
        lo[..40].to_vec(),
    ];
    // Every record length of the first records set to a lie.
    for lie in [0_u32, 1, 15, 0x7fff_ffff, u32::MAX] {
        let mut file = lo.to_vec();
        file[32..36].copy_from_slice(&lie.to_le_bytes());
        inputs.push(file);
    }
    // Each byte of the headers flipped.
    for at in 0..120 {
        let mut file = lo.to_vec();
        file[at] ^= 0xff;
        inputs.push(file);
    }
    for input in &inputs {
        checks::check_pcap(input);
    }
}
