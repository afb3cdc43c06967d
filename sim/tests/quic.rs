//! The QUIC simulation as a test: thousands of seeded flows through a
//! lossy, duplicating, reordering network, each decided by the shipped
//! QUIC step and judged by the TCP core. `QUIC_SEED=<n>` replays one.

use std::collections::BTreeMap;

use preread_core::Output;
use sim::parse_seed;
use sim::quic::{Faults, Kind, play_quic, quic_scenario};

const SEEDS: u64 = 3_000;

#[test]
fn quic_flows_decide_as_the_tcp_core() {
    if let Ok(text) = std::env::var("QUIC_SEED") {
        let seed = parse_seed(&text).unwrap_or_else(|| panic!("QUIC_SEED={text} is not a seed"));
        let sc = quic_scenario(seed);
        println!("{sc}");
        match play_quic(&sc) {
            Ok(played) => println!("{played:?}"),
            Err(failure) => panic!("{failure}"),
        }
        return;
    }
    let mut outcomes: BTreeMap<String, u64> = BTreeMap::new();
    for seed in 0..SEEDS {
        let sc = quic_scenario(seed);
        let played = play_quic(&sc).unwrap_or_else(|failure| panic!("{failure}"));
        let name = match &played.decision {
            Output::Routed(route) if route.fallback.is_some() => "fallback".to_owned(),
            Output::Routed(_) => "routed".to_owned(),
            Output::Reject(reason) => reason.to_string(),
            Output::NeedMore { .. } => panic!("seed {seed}: an undecided flow"),
        };
        *outcomes.entry(name).or_default() += 1;
    }
    println!("{outcomes:?}");
    // The generator reaches what it is built to reach.
    for outcome in [
        "routed",
        "fallback",
        "sni_unmatched",
        "alpn_unmatched",
        "no_sni",
        "malformed_handshake",
        "too_large",
        "fragmented",
        "quic_version",
        "quic_undecryptable",
    ] {
        assert!(
            outcomes.get(outcome).is_some_and(|&n| n > 0),
            "no flow ends {outcome}: {outcomes:?}"
        );
    }
}

#[test]
fn flows_are_deterministic_and_really_faulty() {
    let mut total = Faults::default();
    for seed in 0..300 {
        let (a, b) = (quic_scenario(seed), quic_scenario(seed));
        assert_eq!(a.arrivals, b.arrivals, "seed {seed}");
        assert_eq!(play_quic(&a), play_quic(&b), "seed {seed}");
        if a.kind != Kind::Hello {
            continue;
        }
        let f = a.faults;
        total.lost += usize::from(f.lost > 0);
        total.duplicated += usize::from(f.duplicated > 0);
        total.reordered += usize::from(f.reordered > 0);
        total.coalesced += usize::from(f.coalesced > 0);
        total.zero_rtt += usize::from(f.zero_rtt > 0);
        total.other_dcid += usize::from(f.other_dcid > 0);
    }
    // Flows with each fault, out of about 270 hello flows.
    let each = [
        total.lost,
        total.duplicated,
        total.reordered,
        total.coalesced,
        total.zero_rtt,
        total.other_dcid,
    ];
    assert!(each.iter().all(|&n| n >= 10), "{total:?}");
}
