//! The simulation as a test: 10,000 random seeds after the directed
//! scenarios of every reason, determinism, the generator's own guarantees,
//! and proof that the checks catch a broken shell.
//!
//! `SIM_SEED=<n> cargo test -p sim` replays seed `n` alone (decimal or
//! `0x` hex, as a failure prints it) and prints its trace.

use preread_core::RejectReason;
use preread_core::sni::HostName;
use preread_parser::tls::{Parsed, parse_client_hello};
use sim::corpus::{Class, entries};
use sim::hello::{HelloSpec, fragment, serialize, single_record};
use sim::listener::{ROUTED_NAMES, owned_offer};
use sim::rng::Rng;
use sim::{
    RunConfig, Sabotage, Target, parse_seed, play, play_sabotaged, run, scenario, scenario_for,
};

const SEEDS: u64 = 10_000;
const DIRECTED_PER_TARGET: u64 = 16;

fn replay_seed() -> Option<u64> {
    let text = std::env::var("SIM_SEED").ok()?;
    Some(parse_seed(&text).unwrap_or_else(|| panic!("SIM_SEED={text} is not a seed")))
}

#[test]
fn ten_thousand_seeds_hold_every_invariant() {
    if let Some(seed) = replay_seed() {
        let sc = scenario(seed);
        println!("{}", sc.describe());
        match play(&sc) {
            Ok(played) => {
                for event in &played.trace {
                    println!("  {event}");
                }
                println!("outcome: {:?}", played.outcome);
            }
            Err(failure) => panic!("{failure}"),
        }
        return;
    }
    let report = run(RunConfig {
        start: 0,
        seeds: SEEDS,
        directed_per_target: DIRECTED_PER_TARGET,
        // The control-plane scenarios have their own test (control.rs).
        control: None,
    });
    println!("{}", report.table());
    if let Some(first) = report.failures.first() {
        panic!(
            "{} scenario(s) broke an invariant; the first:\n{first}",
            report.failure_count
        );
    }
    assert_eq!(
        report.scenarios,
        SEEDS + DIRECTED_PER_TARGET * Target::ALL.len() as u64
    );
    for target in Target::ALL {
        assert_eq!(
            report.directed.count(target),
            DIRECTED_PER_TARGET,
            "every directed scenario of {} produces it",
            target.name()
        );
        assert!(
            report.total().count(target) >= 1,
            "{} never produced",
            target.name()
        );
    }
    // Every reject reason of a TCP listener and every fallback reason, by
    // construction (the QUIC reasons are `tests/quic.rs`'s).
    let quic = [RejectReason::QuicUndecryptable, RejectReason::QuicVersion];
    for (reason, &n) in RejectReason::ALL.iter().zip(&report.total().rejected) {
        assert!(n >= 1 || quic.contains(reason), "{reason} never produced");
    }
    assert!(report.total().fallback.iter().all(|&n| n >= 1));
    // A length past the cap decides at once, in every scenario built so.
    let (built, announced) = report.announced;
    assert!(
        built > 0,
        "no directed scenario announced a length past the cap"
    );
    assert_eq!(
        announced, built,
        "announced past the cap, decided otherwise"
    );
    // The silence timer refuses some silent clients on its own.
    let silence = sim::DecidedBy::ALL
        .iter()
        .position(|d| *d == sim::DecidedBy::Silence)
        .map_or(0, |i| report.decided_by[i]);
    assert!(silence > 0, "the silence timer never decided");
}

#[test]
fn the_same_seed_gives_the_same_trace() {
    let seeds = (0..300u64)
        .chain([154, 7, u64::MAX >> 1])
        .chain(Target::ALL.iter().map(|t| sim::directed_seed(*t, 5)));
    for seed in seeds {
        let (a, b) = (scenario(seed), scenario(seed));
        assert_eq!(a.stream, b.stream, "seed {seed}: stream");
        assert_eq!(a.arrivals, b.arrivals, "seed {seed}: timeline");
        assert_eq!((a.close, &a.probes), (b.close, &b.probes), "seed {seed}");
        assert_eq!(a.describe(), b.describe(), "seed {seed}");
        let (x, y) = (play(&a), play(&b));
        match (x, y) {
            (Ok(x), Ok(y)) => assert_eq!(x, y, "seed {seed}: the full trace"),
            (x, y) => panic!("seed {seed}: {x:?} / {y:?}"),
        }
    }
}

#[test]
fn directed_scenarios_produce_their_reason() {
    for target in Target::ALL {
        for n in 0..200 {
            let sc = scenario_for(target, n);
            assert_eq!(sc.target, Some(target));
            let played = play(&sc).unwrap_or_else(|f| panic!("{f}"));
            assert!(
                played.outcome.matches(target),
                "{} gave {:?}\n{}",
                target.name(),
                played.outcome,
                sc.describe()
            );
        }
    }
}

/// Parses a whole hello and returns (server_name, ALPN list, ECH, records, end).
fn parsed(bytes: &[u8]) -> (Option<Vec<u8>>, Option<Vec<u8>>, bool, usize, usize) {
    let mut scratch = Vec::new();
    match parse_client_hello(bytes, &mut scratch) {
        Ok(Parsed::Complete(h)) => (
            h.server_name.map(<[u8]>::to_vec),
            h.alpn.map(|a| a.list_bytes().to_vec()),
            h.ech.is_some(),
            h.records,
            h.end,
        ),
        other => panic!("not a complete hello: {other:?}"),
    }
}

#[test]
fn reframed_hellos_still_parse_to_the_same_name() {
    let mut rng = Rng::new(99);
    // Every well-formed corpus hello, over and over re-framed.
    let corpus = entries().iter().filter(|e| {
        matches!(
            e.class,
            Class::Routed | Class::NoSni | Class::EchOuterAbsent
        )
    });
    for entry in corpus {
        let message = entry.message.as_ref().expect("clean framing");
        let original = &entry.tls()[..entry.records_end];
        let (name, alpn, ech, _, _) = parsed(original);
        for _ in 0..40 {
            let records = fragment(message, &mut rng, 8);
            let bytes = serialize(&records);
            let (n, a, e, count, end) = parsed(&bytes);
            assert_eq!((&n, &a, e), (&name, &alpn, ech), "{}", entry.name);
            assert_eq!((count, end), (records.len(), bytes.len()), "{}", entry.name);
        }
    }
    // Built hellos: the name normalizes to what was asked for.
    for &(raw, offer, _) in ROUTED_NAMES {
        for _ in 0..40 {
            let spec =
                HelloSpec::random(&mut rng, Some(raw.as_bytes().to_vec()), owned_offer(offer));
            let message = spec.message(&mut rng);
            let (one, ..) = parsed(&serialize(&single_record(&message)));
            let records = fragment(&message, &mut rng, 8);
            let (name, _, _, count, _) = parsed(&serialize(&records));
            assert_eq!(name, one);
            assert_eq!(count, records.len());
            let name = name.expect("a host_name");
            assert_eq!(
                HostName::normalize(&name),
                HostName::normalize(raw.as_bytes()),
                "{raw}"
            );
        }
    }
}

#[test]
fn the_checks_catch_a_broken_shell() {
    let sabotages = [
        Sabotage::IgnoreBudget,
        Sabotage::FeedDelta,
        Sabotage::EofFirst,
        Sabotage::FreshCore,
        Sabotage::UnguardedGauge,
        Sabotage::HeaderCancelsServerFirst,
        Sabotage::NoSilenceTimer,
    ];
    for sabotage in sabotages {
        let seeds = (0..2_000u64).chain(
            Target::ALL
                .iter()
                .flat_map(|t| (0..8).map(|n| sim::directed_seed(*t, n))),
        );
        let caught = seeds
            .filter(|&seed| play_sabotaged(&scenario(seed), sabotage).is_err())
            .count();
        assert!(caught > 0, "{sabotage:?} went unnoticed");
        println!("{sabotage:?}: caught in {caught} scenarios");
    }
}
