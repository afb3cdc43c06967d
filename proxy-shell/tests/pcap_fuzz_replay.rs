//! Replays the committed `fuzz/corpus/pcap` through the fuzz target's own
//! check function, so every input the fuzzer ever kept (the captures of
//! `testdata/pcap`, cut ones, findings) is re-checked by a plain
//! `cargo test` on stable.

#[allow(dead_code, unreachable_pub)]
#[path = "../../fuzz/src/checks_pcap.rs"]
mod checks;

#[allow(dead_code, unreachable_pub)]
#[path = "../../testdata/fuzz_replay.rs"]
mod corpus;

use checks::PcapOutcome;

#[test]
fn pcap_corpus() {
    let outcomes = corpus::replay("pcap", 7, checks::check_pcap);
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
