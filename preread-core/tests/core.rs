//! The core's contract, through its public API only: every reject reason,
//! the latch, the deadline, the cap, chunk invariance over the corpus, SNI
//! and ALPN matching, and the default cluster.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{CORPUS_ROUTES, config, corpus_file, hello, manifest};
use preread_core::{FallbackReason, Input, Output, PrereadConfig, RejectReason, SniPrereadCore};
use proptest::prelude::*;

/// Feeds `window` whole, once, at `now`.
fn one_shot(config: &PrereadConfig, window: &[u8], now: Instant) -> Output {
    SniPrereadCore::new().handle_input(config, Input::Bytes { buf: window, now })
}

fn rejected(output: &Output) -> Option<RejectReason> {
    match output {
        Output::Reject(reason) => Some(*reason),
        _ => None,
    }
}

fn cluster(output: &Output) -> Option<&str> {
    match output {
        Output::Routed(route) => Some(&route.cluster),
        _ => None,
    }
}

fn corpus_config() -> PrereadConfig {
    config(CORPUS_ROUTES)
}

// One named test per reject reason.

#[test]
fn not_tls_is_reachable_through_the_core() {
    let out = one_shot(&corpus_config(), b"G", Instant::now());
    assert_eq!(
        out,
        Output::Reject(RejectReason::NotTls),
        "decided on the first byte"
    );
}

#[test]
fn malformed_record_is_reachable() {
    let out = one_shot(&corpus_config(), &[22, 3, 1, 0, 0], Instant::now());
    assert_eq!(out, Output::Reject(RejectReason::MalformedRecord));
}

#[test]
fn malformed_handshake_is_reachable() {
    let out = one_shot(
        &corpus_config(),
        &corpus_file("gen_handshake_type_2.bin"),
        Instant::now(),
    );
    assert_eq!(out, Output::Reject(RejectReason::MalformedHandshake));
}

#[test]
fn timeout_while_undecided_is_fragmented() {
    let config = corpus_config();
    let t0 = Instant::now();
    let window = corpus_file("curl_h2.bin");
    let mut core = SniPrereadCore::new();
    let Output::NeedMore { deadline } = core.handle_input(
        &config,
        Input::Bytes {
            buf: &window[..100],
            now: t0,
        },
    ) else {
        panic!("a partial hello needs more");
    };
    assert_eq!(deadline, t0 + config.timeout);
    let early = core.handle_input(
        &config,
        Input::Timeout {
            now: deadline - Duration::from_millis(1),
        },
    );
    assert_eq!(
        early,
        Output::NeedMore { deadline },
        "an early timer changes nothing"
    );
    let out = core.handle_input(&config, Input::Timeout { now: deadline });
    assert_eq!(out, Output::Reject(RejectReason::Fragmented));
}

#[test]
fn bytes_at_the_deadline_are_fragmented_even_when_complete() {
    let config = corpus_config();
    let t0 = Instant::now();
    let window = corpus_file("curl_h2.bin");
    let mut core = SniPrereadCore::new();
    let _ = core.handle_input(
        &config,
        Input::Bytes {
            buf: &window[..10],
            now: t0,
        },
    );
    let out = core.handle_input(
        &config,
        Input::Bytes {
            buf: &window,
            now: t0 + config.timeout,
        },
    );
    assert_eq!(out, Output::Reject(RejectReason::Fragmented));
}

#[test]
fn too_large_is_reachable() {
    // A hello dripped in one-byte records: no length says how far it goes
    // until its handshake header is whole, so only the cap ends it.
    let hello = corpus_file("curl_h2.bin");
    let mut window = Vec::new();
    for byte in &hello[5..] {
        window.extend_from_slice(&[22, 3, 1, 0, 1, *byte]);
    }
    let mut config = corpus_config();
    config.max_bytes = 12;
    let now = Instant::now();
    assert!(matches!(
        one_shot(&config, &window[..11], now),
        Output::NeedMore { .. }
    ));
    assert_eq!(
        one_shot(&config, &window[..12], now),
        Output::Reject(RejectReason::TooLarge)
    );
}

#[test]
fn a_record_length_past_the_cap_is_too_large_at_its_header() {
    let window = corpus_file("curl_h2.bin");
    let mut config = corpus_config();
    config.max_bytes = 516;
    let now = Instant::now();
    assert!(matches!(
        one_shot(&config, &window[..4], now),
        Output::NeedMore { .. }
    ));
    assert_eq!(
        one_shot(&config, &window[..5], now),
        Output::Reject(RejectReason::TooLarge),
        "a 512-byte record cannot end within 516 bytes"
    );
    config.max_bytes = 517;
    assert!(matches!(
        one_shot(&config, &window[..516], now),
        Output::NeedMore { .. }
    ));
}

#[test]
fn a_handshake_length_past_the_cap_is_too_large_at_its_header() {
    // A 512-byte record whose handshake header announces 16 MiB.
    let mut window = corpus_file("curl_h2.bin");
    window[6..9].copy_from_slice(&[0xff, 0xff, 0xff]);
    let config = corpus_config();
    let now = Instant::now();
    assert!(matches!(
        one_shot(&config, &window[..8], now),
        Output::NeedMore { .. }
    ));
    for cut in [9, 100, window.len()] {
        assert_eq!(
            one_shot(&config, &window[..cut], now),
            Output::Reject(RejectReason::TooLarge),
            "{cut} bytes of a hello that announces 16 MiB"
        );
    }
    // What follows the announcement is not examined: a record of another
    // content type after the first one changes nothing.
    window.extend_from_slice(&[23, 3, 3, 0, 1, 0]);
    assert_eq!(
        one_shot(&config, &window, now),
        Output::Reject(RejectReason::TooLarge)
    );
}

#[test]
fn a_hello_over_several_records_counts_their_headers_against_the_cap() {
    // RFC 8446 lets a hello span records: the cap is on the bytes held, so
    // a hello of 17000 bytes needs two record headers, 17010 bytes at least.
    let mut window = vec![22, 3, 1, 0x40, 0x00, 1, 0x00, 0x42, 0x64];
    window.resize(9 + 100, 0);
    let mut config = corpus_config();
    config.max_bytes = 17_010;
    let now = Instant::now();
    assert!(matches!(
        one_shot(&config, &window, now),
        Output::NeedMore { .. }
    ));
    config.max_bytes = 17_009;
    assert_eq!(
        one_shot(&config, &window[..9], now),
        Output::Reject(RejectReason::TooLarge)
    );
}

#[test]
fn a_proxy_v2_length_past_the_cap_is_too_large_at_its_header() {
    let mut window = corpus_file("gen_m_proxy_v2_tlv.bin");
    let mut config = corpus_config();
    config.expect_proxy = true;
    config.max_bytes = 1000;
    window[14..16].copy_from_slice(&[0xff, 0xff]);
    let now = Instant::now();
    assert!(matches!(
        one_shot(&config, &window[..15], now),
        Output::NeedMore { .. }
    ));
    assert_eq!(
        one_shot(&config, &window[..16], now),
        Output::Reject(RejectReason::TooLarge),
        "a PROXY v2 length of 65535 against a 1000-byte cap"
    );
}

#[test]
fn exact_cap_boundary_complete_routes_incomplete_rejects() {
    let window = corpus_file("curl_h2.bin");
    let mut config = corpus_config();
    config.max_bytes = window.len();
    let now = Instant::now();
    assert_eq!(
        cluster(&one_shot(&config, &window, now)),
        Some("a.example.com")
    );
    config.max_bytes = window.len() - 1;
    assert_eq!(
        one_shot(&config, &window[..window.len() - 1], now),
        Output::Reject(RejectReason::TooLarge),
        "one byte short of a complete hello, at the cap"
    );
}

#[test]
fn complete_hello_with_trailing_bytes_over_cap_routes() {
    let window = corpus_file("gen_g_trailing_2k.bin");
    let mut config = corpus_config();
    config.max_bytes = 600;
    let out = one_shot(&config, &window, Instant::now());
    let Output::Routed(route) = out else {
        panic!("{out:?}")
    };
    assert_eq!(route.hello_end, Some(517));
}

#[test]
fn proxy_incomplete_at_cap_is_too_large() {
    let window = corpus_file("gen_n_proxy_v1.bin");
    let mut config = corpus_config();
    config.expect_proxy = true;
    config.max_bytes = 20;
    assert_eq!(
        one_shot(&config, &window[..20], Instant::now()),
        Output::Reject(RejectReason::TooLarge)
    );
    assert!(matches!(
        one_shot(&config, &window[..19], Instant::now()),
        Output::NeedMore { .. }
    ));
}

#[test]
fn no_sni_is_reachable() {
    let out = one_shot(
        &corpus_config(),
        &corpus_file("openssl_noservername.bin"),
        Instant::now(),
    );
    assert_eq!(out, Output::Reject(RejectReason::NoSni));
}

#[test]
fn ech_outer_absent_is_reachable() {
    let out = one_shot(
        &corpus_config(),
        &corpus_file("chromium_ip_literal.bin"),
        Instant::now(),
    );
    assert_eq!(out, Output::Reject(RejectReason::EchOuterAbsent));
}

#[test]
fn sni_unmatched_is_reachable() {
    let config = config(&[("z.example.org", &[], "z")]);
    let out = one_shot(&config, &corpus_file("curl_h2.bin"), Instant::now());
    assert_eq!(out, Output::Reject(RejectReason::SniUnmatched));
}

#[test]
fn alpn_unmatched_is_reachable() {
    let config = config(&[("a.example.com", &["h3"], "a")]);
    let out = one_shot(&config, &corpus_file("curl_h2.bin"), Instant::now());
    assert_eq!(out, Output::Reject(RejectReason::AlpnUnmatched));
}

#[test]
fn a_refused_name_is_still_known_for_the_log() {
    let unmatched = config(&[("z.example.org", &[], "z")]);
    let mut core = SniPrereadCore::new();
    let window = corpus_file("openssl_sni_uppercase_trailing_dot.bin");
    let out = core.handle_input(
        &unmatched,
        Input::Bytes {
            buf: &window,
            now: Instant::now(),
        },
    );
    assert_eq!(out, Output::Reject(RejectReason::SniUnmatched));
    assert_eq!(core.sni().map(|s| s.as_str()), Some("a.example.com"));
    let mut silent = SniPrereadCore::new();
    let _ = silent.handle_input(
        &unmatched,
        Input::Bytes {
            buf: b"GET /",
            now: Instant::now(),
        },
    );
    assert_eq!(silent.sni(), None);
    // Refused for its ALPN: the name is known too.
    let h3_only = config(&[("a.example.com", &["h3"], "a")]);
    let mut alpn = SniPrereadCore::new();
    let window = corpus_file("curl_h2.bin");
    let out = alpn.handle_input(
        &h3_only,
        Input::Bytes {
            buf: &window,
            now: Instant::now(),
        },
    );
    assert_eq!(out, Output::Reject(RejectReason::AlpnUnmatched));
    assert_eq!(alpn.sni().map(|s| s.as_str()), Some("a.example.com"));
}

#[test]
fn proxy_header_invalid_is_reachable() {
    let mut config = corpus_config();
    config.expect_proxy = true;
    let out = one_shot(
        &config,
        &corpus_file("gen_n_proxy_v1_bad_protocol.bin"),
        Instant::now(),
    );
    assert_eq!(out, Output::Reject(RejectReason::ProxyHeaderInvalid));
    let out = one_shot(
        &config,
        &corpus_file("gen_m_proxy_v2_short_addr_len.bin"),
        Instant::now(),
    );
    assert_eq!(out, Output::Reject(RejectReason::ProxyHeaderInvalid));
}

#[test]
fn front_closed_before_decision_is_front_closed() {
    let config = corpus_config();
    let mut core = SniPrereadCore::new();
    let _ = core.handle_input(
        &config,
        Input::Bytes {
            buf: &[22, 3],
            now: Instant::now(),
        },
    );
    assert!(core.client_spoke());
    assert_eq!(
        core.handle_input(&config, Input::FrontClosed),
        Output::Reject(RejectReason::FrontClosed)
    );
    let silent = SniPrereadCore::new();
    assert!(
        !silent.client_spoke(),
        "a bare connect-and-close is told apart"
    );
}

// PROXY input.

#[test]
fn proxy_header_sets_content_offset_and_source() {
    let mut config = corpus_config();
    config.expect_proxy = true;
    for (file, len) in [("gen_n_proxy_v1.bin", 47), ("gen_m_proxy_v2_tlv.bin", 63)] {
        let out = one_shot(&config, &corpus_file(file), Instant::now());
        let Output::Routed(route) = out else {
            panic!("{file}: {out:?}")
        };
        assert_eq!(route.content_offset, len, "{file}");
        assert_eq!(
            route.proxy_source,
            Some("192.0.2.10:51234".parse().expect("addr")),
            "{file}"
        );
        assert_eq!(&*route.cluster, "a.example.com");
        assert_eq!(route.hello_end, Some(len + 517));
    }
}

// The latch and the deadline.

fn arbitrary_input(kind: u8, cut: usize, offset_ms: u64, window: &[u8], t0: Instant) -> Input<'_> {
    let now = t0 + Duration::from_millis(offset_ms);
    match kind % 3 {
        0 => Input::Bytes {
            buf: &window[..cut.min(window.len())],
            now,
        },
        1 => Input::Timeout { now },
        _ => Input::FrontClosed,
    }
}

proptest! {
    #[test]
    fn latch_replays_the_same_terminal_forever(
        file in prop::sample::select(vec![
            "curl_h2.bin", "gen_l_http_get.bin", "openssl_noservername.bin",
            "gen_handshake_type_2.bin", "gen_truncated_200_of_517.bin", "chromium_a_1.bin",
        ]),
        first_cut in 0usize..2000,
        later in prop::collection::vec((0u8..3, 0usize..3000, 0u64..20_000), 1..12),
    ) {
        let config = corpus_config();
        let window = corpus_file(file);
        let t0 = Instant::now();
        let mut core = SniPrereadCore::new();
        let mut terminal = core.handle_input(&config, Input::Bytes { buf: &window[..first_cut.min(window.len())], now: t0 });
        if !terminal.is_terminal() {
            terminal = core.handle_input(&config, Input::FrontClosed);
        }
        prop_assert!(terminal.is_terminal());
        for (kind, cut, ms) in later {
            let again = core.handle_input(&config, arbitrary_input(kind, cut, ms, &window, t0));
            prop_assert_eq!(&again, &terminal);
        }
    }

    #[test]
    fn deadline_is_armed_once_and_never_moves(
        steps in prop::collection::vec((1usize..400, 0u64..4_000), 1..10),
    ) {
        let config = corpus_config();
        let window = corpus_file("chromium_a_1.bin");
        let t0 = Instant::now();
        let mut core = SniPrereadCore::new();
        let mut armed = None;
        let mut cut = 0;
        for (grow, ms) in steps {
            cut = (cut + grow).min(window.len() - 1);
            let now = t0 + Duration::from_millis(ms);
            let out = core.handle_input(&config, Input::Bytes { buf: &window[..cut], now });
            let deadline = core.deadline();
            prop_assert!(deadline.is_some());
            if armed.is_none() {
                armed = deadline;
                prop_assert_eq!(armed, Some(now + config.timeout));
            }
            prop_assert_eq!(deadline, armed);
            if let Output::NeedMore { deadline } = out {
                prop_assert_eq!(Some(deadline), armed);
            }
        }
    }
}

// Chunk invariance over the corpus.

fn corpus_verdicts(expect_proxy: bool) {
    let mut config = corpus_config();
    config.expect_proxy = expect_proxy;
    config.max_bytes = 65_536;
    for entry in manifest() {
        let file = entry["file"].as_str().unwrap_or_default();
        let has_proxy = entry.get("proxy_protocol").is_some();
        if has_proxy != expect_proxy {
            continue;
        }
        let window = corpus_file(file);
        let t0 = Instant::now();
        let whole = one_shot(&config, &window, t0);
        let expected = entry["expected"].as_str().unwrap_or_default();
        match expected {
            "routed" => {
                let name = entry["sni_normalized"].as_str().unwrap_or_default();
                let Output::Routed(route) = &whole else {
                    panic!("{file}: {whole:?}")
                };
                assert_eq!(route.sni.as_ref().map(|s| s.as_str()), Some(name), "{file}");
                assert_eq!(route.fallback, None);
            }
            "Incomplete" => assert!(
                matches!(whole, Output::NeedMore { .. }),
                "{file}: {whole:?}"
            ),
            other => {
                let reason = match other {
                    "NotTls" => RejectReason::NotTls,
                    "MalformedRecord" => RejectReason::MalformedRecord,
                    "MalformedHandshake" | "InvalidSni" => RejectReason::MalformedHandshake,
                    "NoSni" => RejectReason::NoSni,
                    "EchOuterAbsent" => RejectReason::EchOuterAbsent,
                    "ProxyHeaderInvalid" => RejectReason::ProxyHeaderInvalid,
                    _ => panic!("{file}: unknown verdict {other}"),
                };
                assert_eq!(rejected(&whole), Some(reason), "{file}");
            }
        }
        // Growing prefixes through one core: NeedMore until the verdict,
        // and the verdict is the one-shot verdict.
        let mut core = SniPrereadCore::new();
        let mut decided_at = None;
        for cut in 1..=window.len() {
            let out = core.handle_input(
                &config,
                Input::Bytes {
                    buf: &window[..cut],
                    now: t0,
                },
            );
            if out.is_terminal() {
                assert_eq!(out, whole, "{file}: verdict at {cut} differs from one-shot");
                decided_at.get_or_insert(cut);
            } else {
                assert!(decided_at.is_none(), "{file}: NeedMore after a verdict");
            }
        }
        if whole.is_terminal() {
            assert!(decided_at.is_some(), "{file}: never decided");
        }
        if let Output::Routed(route) = &whole {
            assert_eq!(
                decided_at, route.hello_end,
                "{file}: routed exactly when the hello completed"
            );
        }
    }
}

#[test]
fn growing_prefixes_of_every_corpus_file_give_the_one_shot_verdict() {
    corpus_verdicts(false);
}

#[test]
fn growing_prefixes_of_every_proxy_prefixed_file_give_the_one_shot_verdict() {
    corpus_verdicts(true);
}

#[test]
fn random_chunkings_give_the_one_shot_verdict() {
    // Chunk boundaries do not matter to a core fed whole windows, but the
    // deadline does: feed with time advancing well within the timeout.
    let config = corpus_config();
    let t0 = Instant::now();
    for file in [
        "chromium_a_2.bin",
        "openssl_psk_0rtt_full_flight.bin",
        "gen_o_record_exactly_16384.bin",
    ] {
        let window = corpus_file(file);
        let mut config = config.clone();
        config.max_bytes = 65_536;
        let whole = one_shot(&config, &window, t0);
        for seed in 0..20u64 {
            let mut core = SniPrereadCore::new();
            let mut cut = 0;
            let mut step = seed;
            let mut last = None;
            while cut < window.len() {
                step = step
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                cut = (cut + 1 + (step >> 33) as usize % 700).min(window.len());
                let now = t0 + Duration::from_millis(cut as u64 / 10);
                last = Some(core.handle_input(
                    &config,
                    Input::Bytes {
                        buf: &window[..cut],
                        now,
                    },
                ));
            }
            assert_eq!(last.as_ref(), Some(&whole), "{file} seed {seed}");
        }
    }
}

// SNI and ALPN matching.

fn route_of(config: &PrereadConfig, sni: &str, alpn: Option<&[&str]>) -> Output {
    one_shot(config, &hello(Some(sni), alpn, false), Instant::now())
}

#[test]
fn sni_is_normalized_before_lookup() {
    let out = one_shot(
        &corpus_config(),
        &corpus_file("openssl_sni_uppercase_trailing_dot.bin"),
        Instant::now(),
    );
    assert_eq!(cluster(&out), Some("a.example.com"));
    let config = config(&[("a.example.com", &[], "a")]);
    assert_eq!(
        cluster(&route_of(&config, "A.Example.COM.", None)),
        Some("a")
    );
    assert_eq!(
        rejected(&route_of(&config, "a.example.com..", None)),
        Some(RejectReason::SniUnmatched)
    );
}

#[test]
fn wildcard_depth_and_precedence() {
    let config = config(&[
        ("a.example.com", &[], "exact"),
        ("*.example.com", &[], "one"),
        ("**.example.com", &[], "deep"),
        ("**.b.example.com", &[], "deep-b"),
    ]);
    let cases = [
        ("a.example.com", Some("exact")),
        ("x.example.com", Some("one")),
        ("y.x.example.com", Some("deep")),
        ("y.b.example.com", Some("deep-b")),
        ("z.y.b.example.com", Some("deep-b")),
        ("b.example.com", Some("one")),
        ("example.com", None),
    ];
    for (sni, want) in cases {
        assert_eq!(cluster(&route_of(&config, sni, None)), want, "{sni}");
    }
    let only_one = self::config(&[("*.example.com", &[], "one")]);
    assert_eq!(
        cluster(&route_of(&only_one, "a.b.example.com", None)),
        None,
        "* is exactly one label"
    );
}

#[test]
fn alpn_follows_the_client_preference() {
    let config = config(&[
        ("a.example.com", &["h2"], "h2-cluster"),
        ("a.example.com", &["http/1.1"], "h1-cluster"),
        ("a.example.com", &[], "any-cluster"),
    ]);
    // (client offer, expected cluster, expected matched protocol)
    type Case<'a> = (Option<&'a [&'a str]>, &'a str, Option<&'a str>);
    let cases: [Case<'_>; 5] = [
        (Some(&["http/1.1", "h2"]), "h1-cluster", Some("http/1.1")),
        (Some(&["h2", "http/1.1"]), "h2-cluster", Some("h2")),
        (Some(&["h3", "h2"]), "h2-cluster", Some("h2")),
        (Some(&["h3"]), "any-cluster", None),
        (None, "any-cluster", None),
    ];
    for (offer, want, matched) in cases {
        let out = route_of(&config, "a.example.com", offer);
        let Output::Routed(route) = &out else {
            panic!("{offer:?}: {out:?}")
        };
        assert_eq!(&*route.cluster, want, "{offer:?}");
        assert_eq!(
            route.matched_alpn.as_deref(),
            matched.map(str::as_bytes),
            "{offer:?}"
        );
        assert_eq!(
            route
                .matched_sni
                .as_ref()
                .map(ToString::to_string)
                .as_deref(),
            Some("a.example.com")
        );
        let offered: Option<Vec<String>> = route.alpn.as_ref().map(|a| {
            a.iter()
                .map(|p| String::from_utf8_lossy(p).into_owned())
                .collect()
        });
        assert_eq!(
            offered,
            offer.map(|o| o.iter().map(|s| s.to_string()).collect())
        );
    }
    let strict = self::config(&[("a.example.com", &["h2"], "h2-cluster")]);
    assert_eq!(
        rejected(&route_of(&strict, "a.example.com", None)),
        Some(RejectReason::AlpnUnmatched)
    );
}

// The default cluster.

fn with_default() -> PrereadConfig {
    let mut config = config(&[("a.example.com", &["h2"], "a")]);
    config.default_cluster = Some(Arc::from("fallback"));
    config
}

fn fallback_of(output: &Output) -> Option<FallbackReason> {
    match output {
        Output::Routed(route) if &*route.cluster == "fallback" => route.fallback,
        _ => None,
    }
}

#[test]
fn default_cluster_takes_the_unnamed_and_the_unmatched() {
    let config = with_default();
    let now = Instant::now();
    assert_eq!(
        fallback_of(&one_shot(&config, b"E", now)),
        Some(FallbackReason::NotTls),
        "on the first byte"
    );
    assert_eq!(
        fallback_of(&one_shot(&config, &hello(None, None, false), now)),
        Some(FallbackReason::NoSni)
    );
    assert_eq!(
        fallback_of(&one_shot(&config, &hello(None, Some(&["h2"]), true), now)),
        Some(FallbackReason::EchOuterAbsent)
    );
    assert_eq!(
        fallback_of(&one_shot(
            &config,
            &hello(Some("z.example.com"), Some(&["h2"]), false),
            now
        )),
        Some(FallbackReason::SniUnmatched)
    );
    let Output::Routed(route) = one_shot(&config, &hello(Some("z.example.com"), None, false), now)
    else {
        panic!("unmatched SNI falls back");
    };
    assert_eq!(
        route.sni.map(|s| s.as_str().to_owned()).as_deref(),
        Some("z.example.com")
    );
}

#[test]
fn default_cluster_never_takes_malformed_or_alpn_unmatched() {
    let config = with_default();
    let now = Instant::now();
    for (what, window, reason) in [
        (
            "malformed record",
            vec![22, 3, 1, 0, 0],
            RejectReason::MalformedRecord,
        ),
        (
            "malformed handshake",
            corpus_file("gen_handshake_type_2.bin"),
            RejectReason::MalformedHandshake,
        ),
        (
            "alpn unmatched",
            hello(Some("a.example.com"), Some(&["http/1.1"]), false),
            RejectReason::AlpnUnmatched,
        ),
    ] {
        assert_eq!(
            rejected(&one_shot(&config, &window, now)),
            Some(reason),
            "{what}"
        );
    }
}

#[test]
fn server_first_routes_a_silent_client_to_the_default_cluster() {
    let mut config = with_default();
    let now = Instant::now();
    let mut silent = SniPrereadCore::new();
    assert_eq!(
        silent.handle_input(&config, Input::Timeout { now }),
        Output::Reject(RejectReason::Fragmented),
        "without server_first_timeout a silent client is not routed"
    );
    config.server_first_timeout = Some(Duration::from_millis(300));
    let mut silent = SniPrereadCore::new();
    assert_eq!(
        fallback_of(&silent.handle_input(&config, Input::Timeout { now })),
        Some(FallbackReason::ServerFirst)
    );
    let mut spoke = SniPrereadCore::new();
    let _ = spoke.handle_input(&config, Input::Bytes { buf: &[22], now });
    assert_eq!(
        spoke.handle_input(
            &config,
            Input::Timeout {
                now: now + config.timeout
            }
        ),
        Output::Reject(RejectReason::Fragmented),
        "a client that sent a byte is not server-first"
    );
}

// Server-first behind a load balancer that sends a PROXY header.

const LB_HEADER: &[u8] = b"PROXY TCP4 192.0.2.10 192.0.2.1 51234 443\r\n";

fn server_first_behind_proxy() -> PrereadConfig {
    let mut config = with_default();
    config.expect_proxy = true;
    config.server_first_timeout = Some(Duration::from_millis(300));
    config
}

fn assert_server_first_past_the_header(output: &Output) {
    let Output::Routed(route) = output else {
        panic!("not routed: {output:?}")
    };
    assert_eq!(route.fallback, Some(FallbackReason::ServerFirst));
    assert_eq!(&*route.cluster, "fallback");
    assert_eq!(
        route.content_offset,
        LB_HEADER.len(),
        "the backend must not get the load balancer's header as data"
    );
    assert_eq!(
        route.proxy_source,
        Some("192.0.2.10:51234".parse().expect("addr"))
    );
    assert_eq!(route.hello_end, None);
}

#[test]
fn a_proxy_header_alone_is_not_the_client_speaking() {
    let mut config = with_default();
    config.expect_proxy = true;
    let now = Instant::now();
    let mut core = SniPrereadCore::new();
    let _ = core.handle_input(
        &config,
        Input::Bytes {
            buf: &LB_HEADER[..9],
            now,
        },
    );
    assert!(!core.client_spoke(), "part of the header");
    assert_eq!(core.proxy_source(), None, "part of the header");
    let _ = core.handle_input(
        &config,
        Input::Bytes {
            buf: LB_HEADER,
            now,
        },
    );
    assert!(!core.client_spoke(), "the whole header");
    assert_eq!(
        core.proxy_source(),
        Some("192.0.2.10:51234".parse().expect("addr")),
        "the header's client, before any decision"
    );
    assert_eq!(
        core.handle_input(&config, Input::FrontClosed),
        Output::Reject(RejectReason::FrontClosed)
    );
    assert!(!core.client_spoke(), "a health check closes silently");

    let mut spoke = SniPrereadCore::new();
    let mut window = LB_HEADER.to_vec();
    window.push(22);
    let _ = spoke.handle_input(&config, Input::Bytes { buf: &window, now });
    assert!(spoke.client_spoke(), "a byte past the header");

    let mut garbage = SniPrereadCore::new();
    let out = garbage.handle_input(
        &config,
        Input::Bytes {
            buf: b"GET / HTTP/1.1\r\n",
            now,
        },
    );
    assert_eq!(out, Output::Reject(RejectReason::ProxyHeaderInvalid));
    assert!(garbage.client_spoke(), "bytes that cannot be a header");

    config.expect_proxy = false;
    let mut plain = SniPrereadCore::new();
    let _ = plain.handle_input(
        &config,
        Input::Bytes {
            buf: &LB_HEADER[..9],
            now,
        },
    );
    assert!(
        plain.client_spoke(),
        "without expect_proxy every byte is the client's"
    );
}

#[test]
fn server_first_after_a_proxy_header_routes_past_it() {
    let config = server_first_behind_proxy();
    let now = Instant::now();
    let mut core = SniPrereadCore::new();
    let out = core.handle_input(
        &config,
        Input::Bytes {
            buf: LB_HEADER,
            now,
        },
    );
    assert_eq!(
        out,
        Output::NeedMore {
            deadline: now + config.timeout
        }
    );
    let fired = now + Duration::from_millis(300);
    let out = core.handle_input(&config, Input::Timeout { now: fired });
    assert_server_first_past_the_header(&out);

    let mut late = SniPrereadCore::new();
    let _ = late.handle_input(
        &config,
        Input::Bytes {
            buf: LB_HEADER,
            now,
        },
    );
    let out = late.handle_input(
        &config,
        Input::Timeout {
            now: now + config.timeout,
        },
    );
    assert_server_first_past_the_header(&out);

    let mut spoke = SniPrereadCore::new();
    let mut window = LB_HEADER.to_vec();
    window.push(22);
    let _ = spoke.handle_input(&config, Input::Bytes { buf: &window, now });
    assert_eq!(
        spoke.handle_input(&config, Input::Timeout { now: fired }),
        Output::NeedMore {
            deadline: now + config.timeout
        },
        "a client that spoke is waited for until the deadline"
    );
}

#[test]
fn server_first_before_the_proxy_header_waits_for_it() {
    let config = server_first_behind_proxy();
    let now = Instant::now();
    let deadline = now + config.timeout;
    let mut core = SniPrereadCore::new();
    assert_eq!(
        core.handle_input(&config, Input::Timeout { now }),
        Output::NeedMore { deadline },
        "no header yet: wait for it, for one preread timeout"
    );
    assert_eq!(core.deadline(), Some(deadline));
    let later = now + Duration::from_millis(10);
    let out = core.handle_input(
        &config,
        Input::Bytes {
            buf: &LB_HEADER[..20],
            now: later,
        },
    );
    assert_eq!(
        out,
        Output::NeedMore { deadline },
        "the deadline does not move"
    );
    let out = core.handle_input(
        &config,
        Input::Bytes {
            buf: LB_HEADER,
            now: later,
        },
    );
    assert_server_first_past_the_header(&out);

    let mut partial = SniPrereadCore::new();
    let _ = partial.handle_input(
        &config,
        Input::Bytes {
            buf: &LB_HEADER[..20],
            now,
        },
    );
    assert_eq!(
        partial.handle_input(&config, Input::Timeout { now: later }),
        Output::NeedMore { deadline },
        "a header begun before the timer keeps its deadline"
    );
    let mut late = SniPrereadCore::new();
    let _ = late.handle_input(
        &config,
        Input::Bytes {
            buf: &LB_HEADER[..20],
            now,
        },
    );
    assert_eq!(
        late.handle_input(
            &config,
            Input::Timeout {
                now: deadline + Duration::from_millis(1)
            }
        ),
        Output::Reject(RejectReason::Fragmented),
        "a server-first timer that fires after the deadline does not wait on"
    );
    assert_eq!(
        partial.handle_input(&config, Input::Timeout { now: deadline }),
        Output::Reject(RejectReason::Fragmented),
        "a header never finished is fragmented at the deadline"
    );

    let mut speaks = SniPrereadCore::new();
    let _ = speaks.handle_input(&config, Input::Timeout { now });
    let mut window = LB_HEADER.to_vec();
    window.extend_from_slice(&hello(Some("a.example.com"), Some(&["h2"]), false));
    let out = speaks.handle_input(
        &config,
        Input::Bytes {
            buf: &window,
            now: later,
        },
    );
    let Output::Routed(route) = out else {
        panic!("{out:?}")
    };
    assert_eq!(
        (&*route.cluster, route.fallback),
        ("a", None),
        "a client that spoke with the header is routed by its hello"
    );

    let mut silent_lb = SniPrereadCore::new();
    let _ = silent_lb.handle_input(&config, Input::Timeout { now });
    assert_eq!(
        silent_lb.handle_input(&config, Input::Timeout { now: deadline }),
        Output::Reject(RejectReason::Fragmented)
    );
}

#[test]
fn server_first_without_a_default_cluster_waits_for_nothing() {
    // The validator refuses this config (E104); the core must still not
    // invent a wait or a route for it.
    for expect_proxy in [false, true] {
        let mut config = corpus_config();
        config.expect_proxy = expect_proxy;
        config.server_first_timeout = Some(Duration::from_millis(300));
        let mut core = SniPrereadCore::new();
        assert_eq!(
            core.handle_input(
                &config,
                Input::Timeout {
                    now: Instant::now()
                }
            ),
            Output::Reject(RejectReason::Fragmented),
            "expect_proxy {expect_proxy}"
        );
        assert_eq!(core.deadline(), None, "expect_proxy {expect_proxy}");
    }
}

#[test]
fn a_timeout_too_large_for_the_clock_arms_a_year_instead_of_overflowing() {
    let mut config = corpus_config();
    config.timeout = Duration::MAX;
    let now = Instant::now();
    let mut core = SniPrereadCore::new();
    let out = core.handle_input(&config, Input::Bytes { buf: &[22], now });
    let year = Duration::from_secs(365 * 24 * 3600);
    assert_eq!(
        out,
        Output::NeedMore {
            deadline: now + year
        }
    );
}
