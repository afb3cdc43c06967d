//! JA4 through the core: the fingerprint it gives after its decision for
//! every captured hello (the values `testdata/clienthellos/ja4.py` computed
//! on its own), a hello spread over records included, and `deny_ja4`
//! lists of the listener and of a cluster refusing exactly the matching
//! client.

mod common;

use std::time::Instant;

use common::{CORPUS_ROUTES, config, corpus_dir, corpus_file};
use preread_core::{DenyJa4, DenyRule, Input, Output, PrereadConfig, RejectReason, SniPrereadCore};
use preread_parser::tls::{Ja4, Transport};

fn expected() -> Vec<(String, String, String)> {
    std::fs::read_to_string(corpus_dir().join("ja4.jsonl"))
        .expect("ja4.jsonl")
        .lines()
        .map(|line| {
            let v: serde_json::Value = serde_json::from_str(line).expect("a JSON line");
            let text = |key: &str| v[key].as_str().expect("a string").to_owned();
            (text("file"), text("ja4"), text("ja4_r"))
        })
        .collect()
}

fn decide(config: &PrereadConfig, window: &[u8]) -> (SniPrereadCore, Output) {
    let mut core = SniPrereadCore::new();
    let output = core.handle_input(
        config,
        Input::Bytes {
            buf: window,
            now: Instant::now(),
        },
    );
    (core, output)
}

fn ja4_of(file: &str) -> Ja4 {
    let want = expected()
        .into_iter()
        .find(|(f, ..)| f == file)
        .expect("in ja4.jsonl");
    Ja4::parse(&want.1).expect("a fingerprint")
}

/// The same hello, its handshake message cut over records of `cut` bytes.
fn reframed(record: &[u8], cut: usize) -> Vec<u8> {
    let message = &record[5..];
    message
        .chunks(cut)
        .flat_map(|piece| {
            let mut out = vec![22, 3, 1];
            out.extend((piece.len() as u16).to_be_bytes());
            out.extend(piece);
            out
        })
        .collect()
}

#[test]
fn every_parsed_capture_has_the_independent_fingerprint_after_the_decision() {
    let config = config(CORPUS_ROUTES);
    let all = expected();
    for (file, ja4, raw) in &all {
        if file.starts_with("gen_m_") || file.starts_with("gen_n_") {
            continue; // PROXY-prefixed: the listener would expect the header
        }
        let window = corpus_file(file);
        let (core, _) = decide(&config, &window);
        assert_eq!(
            core.ja4(&window).map(|j| j.to_string()).as_deref(),
            Some(ja4.as_str()),
            "{file}"
        );
        let input = core.ja4_input(&window).expect("a parsed hello");
        assert_eq!(Ja4::raw(input, Transport::Tcp).to_string(), *raw, "{file}");
    }
    assert!(all.len() >= 30);
}

#[test]
fn a_hello_over_several_records_is_fingerprinted_from_the_reassembly() {
    let config = config(CORPUS_ROUTES);
    let window = reframed(&corpus_file("chromium_a_1.bin"), 300);
    let (core, output) = decide(&config, &window);
    assert!(matches!(output, Output::Routed(_)), "{output:?}");
    assert_eq!(core.ja4(&window), Some(ja4_of("chromium_a_1.bin")));
}

#[test]
fn a_fingerprint_before_a_whole_hello_is_none() {
    let window = corpus_file("curl_h2.bin");
    let (core, output) = decide(&config(CORPUS_ROUTES), &window[..100]);
    assert!(matches!(output, Output::NeedMore { .. }));
    assert_eq!(core.ja4(&window[..100]), None);
}

#[test]
fn a_listener_list_refuses_exactly_the_matching_client() {
    let mut config = config(CORPUS_ROUTES);
    config.deny_ja4 = DenyJa4::new([ja4_of("curl_h2.bin")]);
    let curl = corpus_file("curl_h2.bin");
    let (core, output) = decide(&config, &curl);
    assert_eq!(output, Output::Reject(RejectReason::AccessDenied));
    assert_eq!(core.denied_by(), Some(DenyRule::ListenerDenyJa4));
    assert_eq!(
        core.sni().map(|s| s.as_str().to_owned()).as_deref(),
        Some("a.example.com")
    );
    assert_eq!(core.ja4(&curl), Some(ja4_of("curl_h2.bin")));

    // Same name and ALPN, other client: routed.
    let (core, output) = decide(&config, &corpus_file("chromium_a_1.bin"));
    assert!(matches!(output, Output::Routed(_)), "{output:?}");
    assert_eq!(core.denied_by(), None);
}

/// An entry that shares the client's `a` section is fingerprinted
/// against in full: only the whole fingerprint refuses. (An entry of
/// another `a` is ruled out without hashing: the test above.)
#[test]
fn an_entry_with_the_same_a_section_refuses_only_if_whole() {
    let chromium = ja4_of("chromium_a_1.bin");
    let same_a = Ja4::parse(&format!(
        "{}_000000000000_000000000000",
        &chromium.as_str()[..10]
    ))
    .expect("a fingerprint");
    let mut config = config(CORPUS_ROUTES);
    config.deny_ja4 = DenyJa4::new([same_a]);
    let window = corpus_file("chromium_a_1.bin");
    let (_, output) = decide(&config, &window);
    assert!(matches!(output, Output::Routed(_)), "{output:?}");
    config.deny_ja4 = DenyJa4::new([same_a, chromium]);
    let (core, output) = decide(&config, &window);
    assert_eq!(output, Output::Reject(RejectReason::AccessDenied));
    assert_eq!(core.denied_by(), Some(DenyRule::ListenerDenyJa4));
}

/// A client first seen while no entry had its `a` section leaves only
/// that section in the worker thread's cache; once a list (a reload, a
/// `listener update`) holds its whole fingerprint, its next connection
/// is refused, and routed again when the entry goes.
#[test]
fn a_list_that_gains_the_fingerprint_refuses_a_client_seen_before() {
    let chromium = ja4_of("chromium_a_1.bin");
    let other = Ja4::parse("t13d1516h2_8daaf6152771_e5627efa2ab1").expect("a fingerprint");
    assert_ne!(other.section_a(), chromium.section_a());
    let window = corpus_file("chromium_a_1.bin");
    let mut config = config(CORPUS_ROUTES);
    config.deny_ja4 = DenyJa4::new([other]);
    for _ in 0..2 {
        let (_, output) = decide(&config, &window);
        assert!(matches!(output, Output::Routed(_)), "{output:?}");
    }
    config.deny_ja4 = DenyJa4::new([other, chromium]);
    for _ in 0..2 {
        let (core, output) = decide(&config, &window);
        assert_eq!(output, Output::Reject(RejectReason::AccessDenied));
        assert_eq!(core.denied_by(), Some(DenyRule::ListenerDenyJa4));
    }
    config.deny_ja4 = DenyJa4::new([other]);
    let (_, output) = decide(&config, &window);
    assert!(matches!(output, Output::Routed(_)), "{output:?}");
}

/// A list of many entries, whose `a` sections differ in what the parse
/// gives for nothing (their extension counts): the hellos of none of
/// them are let through before any fingerprint, the client of one is
/// refused, short list or long.
#[test]
fn a_long_list_refuses_its_client_and_lets_the_others_through() {
    let curl = ja4_of("curl_h2.bin");
    let others: Vec<Ja4> = (20..60)
        .map(|count| {
            Ja4::parse(&format!("t13d31{count}h2_e8f1e7e78f70_b26ce05bbdd6"))
                .expect("a fingerprint")
        })
        .filter(|ja4| *ja4 != curl)
        .collect();
    for len in [3, others.len()] {
        let mut config = config(CORPUS_ROUTES);
        config.deny_ja4 = DenyJa4::new(others[..len].iter().copied());
        for file in ["curl_h2.bin", "chromium_a_1.bin"] {
            let (_, output) = decide(&config, &corpus_file(file));
            assert!(
                matches!(output, Output::Routed(_)),
                "{len} {file}: {output:?}"
            );
        }
        config.deny_ja4 = DenyJa4::new(others[..len].iter().copied().chain([curl]));
        let (core, output) = decide(&config, &corpus_file("curl_h2.bin"));
        assert_eq!(output, Output::Reject(RejectReason::AccessDenied), "{len}");
        assert_eq!(core.denied_by(), Some(DenyRule::ListenerDenyJa4));
    }
}

#[test]
fn a_cluster_list_refuses_only_connections_routed_to_it() {
    let curl_h2 = ja4_of("curl_h2.bin");
    let curl_http11 = ja4_of("curl_http11.bin");
    let mut config = config(CORPUS_ROUTES);
    let (_, routed) = decide(&config, &corpus_file("curl_http11.bin"));
    let Output::Routed(route) = routed else {
        panic!("curl_http11 routes");
    };
    config.deny_ja4 =
        DenyJa4::default().with_cluster(route.cluster.clone(), [curl_http11, curl_h2]);
    let (core, output) = decide(&config, &corpus_file("curl_http11.bin"));
    assert_eq!(output, Output::Reject(RejectReason::AccessDenied));
    assert_eq!(core.denied_by(), Some(DenyRule::ClusterDenyJa4));
    // curl_h2 goes to a.example.com's cluster, which has no list.
    let (_, output) = decide(&config, &corpus_file("curl_h2.bin"));
    assert!(matches!(output, Output::Routed(_)), "{output:?}");
}

#[test]
fn lists_never_refuse_what_is_refused_anyway() {
    let mut config = config(&[("z.example.com", &[], "z")]);
    config.deny_ja4 = DenyJa4::new([ja4_of("curl_h2.bin")]);
    let (_, output) = decide(&config, &corpus_file("curl_h2.bin"));
    assert_eq!(output, Output::Reject(RejectReason::SniUnmatched));
}

#[test]
fn the_step_tells_a_denied_client_access_denied() {
    use preread_core::step::{Close, Event, Farewell, Next, PrereadListener, PrereadStep};
    use preread_parser::tls::AlertDescription;

    let mut config = config(CORPUS_ROUTES);
    config.deny_ja4 = DenyJa4::new([ja4_of("openssl_tls12.bin")]);
    let listener = PrereadListener::new(config, None);
    let window = corpus_file("openssl_tls12.bin");
    let now = Instant::now();
    let (mut step, _) = PrereadStep::accept(&listener, now);
    let event = Event::Read {
        window: &window,
        added: window.len(),
        eof: false,
    };
    let actions = step.handle(&listener, event, now);
    assert_eq!(
        actions.next,
        Next::Close(Close::Rejected(RejectReason::AccessDenied))
    );
    // A TLS 1.2 client's record version, then fatal access_denied (49).
    assert_eq!(
        actions.farewell,
        Farewell::Alert(AlertDescription::AccessDenied.record(0x0301))
    );
    assert_eq!(AlertDescription::AccessDenied.record(0x0301)[6], 49);
}
