//! The QUIC step, event by event, against the TCP core's own answers.

use std::sync::Arc;
use std::time::{Duration, Instant};

use preread_parser::quic::{
    InitialPacket, PacketKeys, Side, Version, client_first_flight, frames, open_initial,
    parse_long_header, seal_initial,
};
use preread_parser::tls::{Ja4, Parsed, Transport, parse_client_hello_message};

use super::{QuicActions, QuicListener, QuicNext, QuicPrereadStep, QuicReject, QuicRejectWith};
use crate::config::PrereadConfig;
use crate::fingerprint::{DenyJa4, DenyRule};
use crate::output::{Input, Output};
use crate::pattern::validate_sni_pattern;
use crate::preread::SniPrereadCore;
use crate::reject::{FallbackReason, RejectReason};
use crate::routes::{AlpnSet, RouteTable};
use crate::step::test_hello;
use crate::step::{Left, TimerAction};

const TIMEOUT: Duration = Duration::from_millis(1_000);
const DCID: [u8; 8] = [0x83, 0x94, 0xc8, 0xf0, 0x3e, 0x51, 0x57, 0x08];
const SCID: [u8; 4] = [5, 6, 7, 8];

fn config() -> PrereadConfig {
    let mut routes = RouteTable::new();
    let a = validate_sni_pattern("a.example.com").expect("valid pattern");
    let h3 = AlpnSet::protocols([b"h3"]).expect("an ALPN set");
    routes
        .insert(a.clone(), h3, Arc::from("web-h3"))
        .expect("a route");
    let b = validate_sni_pattern("b.example.com").expect("valid pattern");
    routes
        .insert(b, AlpnSet::Any, Arc::from("web-b"))
        .expect("a route");
    let mut config = PrereadConfig::new(routes);
    config.timeout = TIMEOUT;
    config
}

fn listener() -> QuicListener {
    QuicListener::new(config(), QuicRejectWith::Close)
}

/// The ClientHello handshake message (the test record minus its header).
fn hello(sni: &str, alpn: Option<&str>) -> Vec<u8> {
    test_hello::hello(sni, alpn)[5..].to_vec()
}

fn flight(hello: &[u8], chunk: usize) -> Vec<Vec<u8>> {
    client_first_flight(Version::V1, &DCID, &SCID, hello, chunk)
}

/// What the TCP core decides on the same hello in one record, but for
/// `hello_end` (past the record's header there, the hello's length here).
fn tcp_oracle(config: &PrereadConfig, message: &[u8]) -> Output {
    let mut record = vec![22, 3, 1];
    record.extend_from_slice(&(message.len() as u16).to_be_bytes());
    record.extend_from_slice(message);
    let input = Input::Bytes {
        buf: &record,
        now: Instant::now(),
    };
    match SniPrereadCore::new().handle_input(config, input) {
        Output::Routed(route) => {
            let mut route = (*route).clone();
            route.hello_end = Some(message.len());
            Output::Routed(Arc::new(route))
        }
        other => other,
    }
}

fn ms(base: Instant, n: u64) -> Instant {
    base + Duration::from_millis(n)
}

fn rejected(actions: &QuicActions) -> &QuicReject {
    match &actions.next {
        QuicNext::Reject(reject) => reject,
        other => panic!("a reject, not {other:?}"),
    }
}

/// The CONNECTION_CLOSE error code in a reply, opened with the server's
/// Initial keys of the client's DCID.
fn close_code(reply: &[u8]) -> u64 {
    let header = parse_long_header(reply).expect("a long header");
    assert_eq!((header.dcid, header.scid), (&SCID[..], &DCID[..]));
    let keys = PacketKeys::initial(Version::V1, &DCID, Side::Server);
    let mut payload = reply.to_vec();
    let opened = open_initial(&keys, &mut payload, header.pn_offset)
        .expect("the server's keys open the reply");
    let mut code = None;
    frames::walk(opened, |frame| {
        if let frames::Frame::ConnectionClose(c) = frame {
            code = Some(c);
        }
        Ok::<_, preread_parser::quic::QuicError>(())
    })
    .expect("frames");
    code.expect("a CONNECTION_CLOSE")
}

#[test]
fn a_hello_over_two_datagrams_the_second_first_routes_as_tcp_does() {
    let listener = listener();
    let message = hello("a.example.com", Some("h3"));
    let datagrams = flight(&message, message.len() / 2 + 1);
    assert_eq!(datagrams.len(), 2);
    let t0 = Instant::now();
    let (mut step, first) = QuicPrereadStep::first(&listener, &datagrams[1], t0);
    assert_eq!(first.next, QuicNext::Wait);
    assert_eq!(first.timer, TimerAction::Arm(ms(t0, 1_000)));
    assert_eq!(step.deadline(), ms(t0, 1_000));
    let decided = step.datagram(&listener, &datagrams[0], ms(t0, 30));
    let QuicNext::Connect(route) = &decided.next else {
        panic!("routed, not {decided:?}");
    };
    assert_eq!(&*route.cluster, "web-h3");
    assert_eq!(route.matched_alpn.as_deref(), Some(&b"h3"[..]));
    assert_eq!(decided.timer, TimerAction::Cancel);
    assert_eq!(
        decided.left,
        Some(Left {
            sample: Some(Duration::from_millis(30))
        })
    );
    assert_eq!(Some(&Output::Routed(route.clone())), step.decision());
    assert_eq!(
        step.decision(),
        Some(&tcp_oracle(&listener.config, &message))
    );
    assert_eq!(step.sni().map(|s| s.as_str()), Some("a.example.com"));
    assert_eq!(
        (step.initials().packets(), step.initials().datagrams()),
        (2, 2)
    );
    // Latched: later datagrams and timers are the relay's, not the step's.
    assert_eq!(
        step.datagram(&listener, &datagrams[0], ms(t0, 40)).next,
        QuicNext::Ignore
    );
    assert_eq!(
        step.timeout(&listener, ms(t0, 2_000)).next,
        QuicNext::Ignore
    );
}

#[test]
fn every_verdict_is_the_tcp_cores() {
    let mut fallback = config();
    fallback.default_cluster = Some(Arc::from("fallback"));
    let listeners = [
        listener(),
        QuicListener::new(fallback, QuicRejectWith::Close),
    ];
    let hellos = [
        hello("a.example.com", Some("h3")),
        hello("a.example.com", Some("h2")),
        hello("B.Example.Com.", None),
        hello("c.example.com", Some("h3")),
    ];
    for listener in &listeners {
        for message in &hellos {
            let (step, actions) =
                QuicPrereadStep::first(listener, &flight(message, 1100)[0], Instant::now());
            let expected = tcp_oracle(&listener.config, message);
            assert_eq!(step.decision(), Some(&expected));
            if let Output::Reject(reason) = expected {
                assert_eq!(rejected(&actions).reason, reason);
            }
        }
    }
}

#[test]
fn a_refused_name_gets_a_close_the_client_can_read() {
    let t0 = Instant::now();
    let datagram = &flight(&hello("c.example.com", Some("h3")), 1100)[0];
    let (_, actions) = QuicPrereadStep::first(&listener(), datagram, t0);
    let reject = rejected(&actions);
    assert_eq!(reject.reason, RejectReason::SniUnmatched);
    let reply = reject.reply.as_deref().expect("a CONNECTION_CLOSE");
    assert_eq!(close_code(reply), 0x100 + 112);
    // ALPN refused: no_application_protocol (120).
    let datagram = &flight(&hello("a.example.com", Some("h2")), 1100)[0];
    let (_, actions) = QuicPrereadStep::first(&listener(), datagram, t0);
    assert_eq!(rejected(&actions).reason, RejectReason::AlpnUnmatched);
    assert_eq!(
        close_code(rejected(&actions).reply.as_deref().expect("a close")),
        0x100 + 120
    );
    // "drop" says nothing.
    let silent = QuicListener::new(config(), QuicRejectWith::Drop);
    let datagram = &flight(&hello("c.example.com", None), 1100)[0];
    let (_, actions) = QuicPrereadStep::first(&silent, datagram, t0);
    assert_eq!(rejected(&actions).reply, None);
}

#[test]
fn a_malformed_hello_is_told_decode_error() {
    // Three bytes short of its extensions, the length fixed to match.
    let message = hello("a.example.com", None);
    let bad = {
        let mut m = message.clone();
        m.truncate(m.len() - 3);
        let len = (m.len() - 4) as u32;
        m[1..4].copy_from_slice(&len.to_be_bytes()[1..]);
        m
    };
    let (step, actions) =
        QuicPrereadStep::first(&listener(), &flight(&bad, 1100)[0], Instant::now());
    assert_eq!(rejected(&actions).reason, RejectReason::MalformedHandshake);
    assert!(step.fault().is_some());
    assert_eq!(
        close_code(rejected(&actions).reply.as_deref().expect("a close")),
        0x100 + 50
    );
}

#[test]
fn an_unknown_version_gets_version_negotiation() {
    let mut datagram = flight(&hello("a.example.com", None), 1100).remove(0);
    datagram[1..5].copy_from_slice(&0x1a2a_3a4au32.to_be_bytes());
    let (_, actions) = QuicPrereadStep::first(&listener(), &datagram, Instant::now());
    let reject = rejected(&actions);
    assert_eq!(reject.reason, RejectReason::QuicVersion);
    let reply = reject
        .reply
        .as_deref()
        .expect("a Version Negotiation packet");
    let header = parse_long_header(reply).expect("a long header");
    assert_eq!(
        (header.version, header.dcid, header.scid),
        (0, &SCID[..], &DCID[..])
    );
    // Never in answer to a datagram under 1200 bytes.
    datagram.truncate(600);
    let (_, actions) = QuicPrereadStep::first(&listener(), &datagram, Instant::now());
    assert_eq!(rejected(&actions).reply, None);
}

#[test]
fn undecryptable_not_quic_and_the_client_closing() {
    let t0 = Instant::now();
    let mut datagram = flight(&hello("a.example.com", None), 1100).remove(0);
    let last = datagram.len() - 1;
    datagram[last] ^= 1;
    let (_, actions) = QuicPrereadStep::first(&listener(), &datagram, t0);
    assert_eq!(
        rejected(&actions),
        &QuicReject {
            reason: RejectReason::QuicUndecryptable,
            reply: None
        }
    );
    let (_, actions) = QuicPrereadStep::first(&listener(), b"\x40GET / HTTP/1.1", t0);
    assert_eq!(rejected(&actions).reason, RejectReason::NotTls);
    let mut fallback = config();
    fallback.default_cluster = Some(Arc::from("fallback"));
    let fallback = QuicListener::new(fallback, QuicRejectWith::Close);
    let (_, actions) = QuicPrereadStep::first(&fallback, b"\x40GET / HTTP/1.1", t0);
    let QuicNext::Connect(route) = actions.next else {
        panic!("the default cluster takes a flow that is not QUIC");
    };
    assert_eq!(route.fallback, Some(FallbackReason::NotTls));
    // A client that gives up before the decision.
    let keys = PacketKeys::initial(Version::V1, &DCID, Side::Client);
    let mut payload = Vec::new();
    frames::write_connection_close(&mut payload, 0x0a, 0, b"");
    frames::write_padding(&mut payload, 1150);
    let packet = InitialPacket {
        version: Version::V1,
        dcid: &DCID,
        scid: &SCID,
        token: &[],
        packet_number: 0,
        pn_len: 4,
    };
    let mut close = Vec::new();
    seal_initial(&keys, &packet, &payload, &mut close);
    let (_, actions) = QuicPrereadStep::first(&listener(), &close, t0);
    assert_eq!(
        rejected(&actions),
        &QuicReject {
            reason: RejectReason::FrontClosed,
            reply: None
        }
    );
}

#[test]
fn the_deadline_is_armed_once_and_never_moves() {
    let listener = listener();
    let message = hello("a.example.com", Some("h3"));
    let datagrams = flight(&message, 30);
    let t0 = Instant::now();
    let (mut step, first) = QuicPrereadStep::first(&listener, &datagrams[0], t0);
    assert_eq!(first.timer, TimerAction::Arm(ms(t0, 1_000)));
    let second = step.datagram(&listener, &datagrams[1], ms(t0, 500));
    assert_eq!(
        (second.timer, second.next),
        (TimerAction::Keep, QuicNext::Wait)
    );
    // An early fire changes nothing.
    assert_eq!(step.timeout(&listener, ms(t0, 999)).next, QuicNext::Ignore);
    assert!(step.is_reading());
    let late = step.timeout(&listener, ms(t0, 1_000));
    assert_eq!(
        rejected(&late),
        &QuicReject {
            reason: RejectReason::Fragmented,
            reply: None
        }
    );
    assert_eq!(late.timer, TimerAction::Keep);
    assert_eq!(step.preread_time(), Some(TIMEOUT));
    // A datagram past the deadline decides the same, whatever it holds.
    let (mut step, _) = QuicPrereadStep::first(&listener, &datagrams[0], t0);
    let after = step.datagram(&listener, &datagrams[1], ms(t0, 1_001));
    assert_eq!(rejected(&after).reason, RejectReason::Fragmented);
    assert_eq!(after.timer, TimerAction::Cancel);
}

#[test]
fn the_cap_bounds_the_crypto_stream() {
    let mut small = config();
    small.max_bytes = 64;
    let small = QuicListener::new(small, QuicRejectWith::Close);
    let message = hello("a.example.com", Some("h3"));
    // The handshake length announces more than the cap: known at once.
    let (_, actions) = QuicPrereadStep::first(&small, &flight(&message, 30)[0], Instant::now());
    assert_eq!(rejected(&actions).reason, RejectReason::TooLarge);
    assert_eq!(
        close_code(rejected(&actions).reply.as_deref().expect("a close")),
        0x100 + 80
    );
    // Data past the cap in a frame.
    let (_, actions) = QuicPrereadStep::first(&small, &flight(&message, 100)[0], Instant::now());
    assert_eq!(rejected(&actions).reason, RejectReason::TooLarge);
    let shell = QuicPrereadStep::first(&listener(), &flight(&message, 30)[0], Instant::now()).0;
    let mut shell = shell;
    let abandoned = shell.abandon(RejectReason::TooLarge, Instant::now());
    assert_eq!(rejected(&abandoned).reply, None);
    assert_eq!(abandoned.timer, TimerAction::Cancel);
}

#[test]
fn a_catch_all_listener_routes_at_the_first_datagram() {
    let mut config = config();
    config.catch_all = Some(Arc::from("everything"));
    let listener = QuicListener::new(config, QuicRejectWith::Close);
    let (_, actions) = QuicPrereadStep::first(&listener, b"\x40anything", Instant::now());
    let QuicNext::Connect(route) = actions.next else {
        panic!("routed unread");
    };
    assert_eq!((&*route.cluster, route.sni.as_ref()), ("everything", None));
}

#[test]
fn deny_ja4_refuses_the_matching_flow_with_access_denied_and_names_the_rule() {
    let t0 = Instant::now();
    let message = hello("b.example.com", Some("h3"));
    let datagram = &flight(&message, 1100)[0];
    // The flow's fingerprint, from the hello as the step read it: `q`.
    let (step, _) = QuicPrereadStep::first(&listener(), datagram, t0);
    let ja4 = step.ja4().expect("a whole hello has a JA4");
    assert!(ja4.as_str().starts_with("q12d"), "{ja4}");
    let Ok(Parsed::Complete(parsed)) = parse_client_hello_message(&message, usize::MAX) else {
        panic!("the test hello parses");
    };
    assert_eq!(ja4, Ja4::of(&parsed, Transport::Quic));
    assert_eq!(step.denied_by(), None);

    let mut denying = config();
    denying.deny_ja4 = DenyJa4::new([ja4]);
    let (step, actions) = QuicPrereadStep::first(
        &QuicListener::new(denying, QuicRejectWith::Close),
        datagram,
        t0,
    );
    let reject = rejected(&actions);
    assert_eq!(reject.reason, RejectReason::AccessDenied);
    // CRYPTO_ERROR 0x100 + access_denied (49).
    assert_eq!(
        close_code(reject.reply.as_deref().expect("a close")),
        0x100 + 49
    );
    assert_eq!(step.denied_by(), Some(DenyRule::ListenerDenyJa4));
    assert_eq!(step.ja4(), Some(ja4));

    // A cluster's list refuses only the flows routed to it.
    let mut on_cluster = config();
    on_cluster.deny_ja4 = DenyJa4::default().with_cluster(Arc::from("web-b"), [ja4]);
    let listener = QuicListener::new(on_cluster, QuicRejectWith::Close);
    let (step, actions) = QuicPrereadStep::first(&listener, datagram, t0);
    assert_eq!(rejected(&actions).reason, RejectReason::AccessDenied);
    assert_eq!(step.denied_by(), Some(DenyRule::ClusterDenyJa4));
    let other = &flight(&hello("a.example.com", Some("h3")), 1100)[0];
    let (_, actions) = QuicPrereadStep::first(&listener, other, t0);
    assert!(matches!(actions.next, QuicNext::Connect(_)), "{actions:?}");
}

#[test]
fn a_flow_refused_after_its_route_reads_access_denied() {
    let t0 = Instant::now();
    let datagram = &flight(&hello("b.example.com", Some("h3")), 1100)[0];
    let (step, actions) = QuicPrereadStep::first(&listener(), datagram, t0);
    assert!(matches!(actions.next, QuicNext::Connect(_)), "{actions:?}");
    let reply = step
        .access_denied_reply(QuicRejectWith::Close)
        .expect("a CONNECTION_CLOSE");
    assert_eq!(close_code(&reply), 0x100 + 49);
    assert_eq!(step.access_denied_reply(QuicRejectWith::Drop), None);
    // Undecided: nothing to refuse yet.
    let parts = flight(&hello("b.example.com", Some("h3")), 40);
    let (waiting, actions) = QuicPrereadStep::first(&listener(), &parts[0], t0);
    assert_eq!(actions.next, QuicNext::Wait);
    assert_eq!(waiting.access_denied_reply(QuicRejectWith::Close), None);
    assert_eq!(waiting.ja4(), None);
}
