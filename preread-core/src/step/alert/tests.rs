//! The farewell of every reject reason and every parser fault, as exact
//! bytes: `15 <version> 00 02 02 <code>`, or none; and the same through the
//! step on real windows.

use std::sync::Arc;
use std::time::Instant;

use preread_parser::tls::{HandshakeFault, RecordFault, TlsError};

use super::{Farewell, RejectWith, Seen, alert, farewell};
use crate::config::PrereadConfig;
use crate::pattern::validate_sni_pattern;
use crate::preread::SniPrereadCore;
use crate::reject::RejectReason;
use crate::routes::{AlpnSet, RouteTable};
use crate::step::{Close, Event, Next, PrereadListener, PrereadStep};

fn bytes(code: u8) -> [u8; 7] {
    [0x15, 0x03, 0x01, 0x00, 0x02, 0x02, code]
}

fn tls_seen(fault: Option<TlsError>) -> Seen {
    Seen {
        fault,
        offers_tls13: false,
        record_version: Some(0x0301),
        content_offset: 0,
    }
}

#[test]
fn every_parser_fault_has_its_alert_bytes() {
    let records = [
        (RecordFault::EmptyRecord, 50),
        (RecordFault::Oversized(16_385), 22),
        (RecordFault::Oversized(u16::MAX), 22),
        (RecordFault::UnexpectedContentType(20), 10),
        (RecordFault::BadVersion(2), 50),
    ];
    for (fault, code) in records {
        let seen = tls_seen(Some(TlsError::MalformedRecord(fault)));
        let got = alert(RejectReason::MalformedRecord, &seen, &[], 16_384);
        assert_eq!(
            got.map(|a| a.record(seen.version())),
            Some(bytes(code)),
            "{fault:?}"
        );
    }
    let hellos = [
        (HandshakeFault::NotClientHello(2), 10),
        (HandshakeFault::TrailingHandshakeData, 50),
        (HandshakeFault::Truncated, 50),
        (HandshakeFault::SessionIdTooLong, 50),
        (HandshakeFault::BadCipherSuites, 50),
        (HandshakeFault::NoCompressionMethod, 50),
        (HandshakeFault::ExtensionsLengthMismatch, 50),
        (HandshakeFault::DuplicateExtension(0x10), 47),
        (HandshakeFault::BadServerNameList, 50),
        (HandshakeFault::EmptyHostName, 50),
        (HandshakeFault::BadHostName, 47),
        (HandshakeFault::DuplicateHostName, 47),
        (HandshakeFault::BadAlpn, 50),
        (HandshakeFault::BadSupportedVersions, 50),
        (HandshakeFault::EmptyEch, 50),
        (HandshakeFault::UnknownEchType(2), 47),
    ];
    for (fault, code) in hellos {
        let seen = tls_seen(Some(TlsError::MalformedHandshake(fault)));
        let got = alert(RejectReason::MalformedHandshake, &seen, &[], 16_384);
        assert_eq!(
            got.map(|a| a.record(seen.version())),
            Some(bytes(code)),
            "{fault:?}"
        );
    }
}

#[test]
fn every_reject_reason_has_its_alert_or_none() {
    let seen = tls_seen(None);
    let tls13 = Seen {
        offers_tls13: true,
        ..seen
    };
    let cases = [
        (RejectReason::SniUnmatched, &seen, Some(112)),
        (RejectReason::AlpnUnmatched, &seen, Some(120)),
        (RejectReason::NoSni, &seen, Some(40)),
        (RejectReason::NoSni, &tls13, Some(109)),
        (RejectReason::EchOuterAbsent, &seen, Some(40)),
        (RejectReason::EchOuterAbsent, &tls13, Some(109)),
        (RejectReason::NotTls, &seen, None),
        (RejectReason::ProxyHeaderInvalid, &seen, None),
        (RejectReason::Fragmented, &seen, None),
        (RejectReason::FrontClosed, &seen, None),
        (RejectReason::QuicUndecryptable, &seen, None),
        (RejectReason::QuicVersion, &seen, None),
    ];
    for (reason, seen, code) in cases {
        let got = alert(reason, seen, &[], 16_384).map(|a| a.record(seen.version()));
        assert_eq!(got, code.map(bytes), "{reason}");
    }
    for reason in RejectReason::ALL {
        // Malformed windows without their fault, and every reason of a
        // peer that never showed a TLS record, say nothing they do not know.
        let unknown = Seen::default();
        if matches!(
            reason,
            RejectReason::MalformedRecord
                | RejectReason::MalformedHandshake
                | RejectReason::TooLarge
        ) {
            assert_eq!(alert(reason, &unknown, &[], 100), None, "{reason}");
        }
    }
}

#[test]
fn too_large_is_record_overflow_only_for_a_record_past_the_cap() {
    let seen = tls_seen(None);
    // One record announcing 2,000 bytes, cut at a 1,000-byte cap.
    let mut one = vec![22, 3, 1, 0x07, 0xd0];
    one.resize(1_000, 0);
    assert_eq!(
        alert(RejectReason::TooLarge, &seen, &one, 1_000).map(|a| a.code()),
        Some(22)
    );
    // Records of 100 bytes each: none is over the cap, the hello is.
    let mut many = Vec::new();
    while many.len() < 1_000 {
        many.extend_from_slice(&[22, 3, 1, 0, 95]);
        many.resize(many.len() + 95, 0);
    }
    many.truncate(1_000);
    assert_eq!(
        alert(RejectReason::TooLarge, &seen, &many, 1_000).map(|a| a.code()),
        Some(80)
    );
    let behind = Seen {
        content_offset: 16,
        ..seen
    };
    let mut proxied = vec![0; 16];
    proxied.extend_from_slice(&[22, 3, 1, 0x07, 0xd0]);
    proxied.resize(1_000, 0);
    assert_eq!(
        alert(RejectReason::TooLarge, &behind, &proxied, 1_000).map(|a| a.code()),
        Some(22),
        "records are read past the PROXY header"
    );
}

#[test]
fn the_record_version_follows_the_client_within_tls() {
    for (client, sent) in [
        (Some(0x0303), 0x0303),
        (Some(0x0302), 0x0302),
        (Some(0x0300), 0x0301),
        (Some(0x0304), 0x0301),
        (None, 0x0301),
    ] {
        let seen = Seen {
            record_version: client,
            ..tls_seen(None)
        };
        assert_eq!(seen.version(), sent, "{client:?}");
    }
}

fn listener(with: RejectWith) -> PrereadListener {
    let mut routes = RouteTable::new();
    let pattern = validate_sni_pattern("a.example.com").expect("pattern");
    let alpn = AlpnSet::protocols(["h2"]).expect("alpn");
    routes
        .insert(pattern, alpn, Arc::from("alpha"))
        .expect("route");
    let mut listener = PrereadListener::new(PrereadConfig::new(routes), None);
    listener.reject_with = with;
    listener
}

fn hello(sni: &str, alpn: &str) -> Vec<u8> {
    crate::step::test_hello::hello(sni, Some(alpn))
}

fn decide(with: RejectWith, window: &[u8]) -> (Next, Farewell) {
    let listener = listener(with);
    let now = Instant::now();
    let (mut step, _) = PrereadStep::accept(&listener, now);
    let event = Event::Read {
        window,
        added: window.len(),
        eof: false,
    };
    let actions = step.handle(&listener, event, now);
    (actions.next, actions.farewell)
}

#[test]
fn through_the_step_each_reject_gets_its_farewell() {
    let unknown = hello("unknown.example.com", "h2");
    assert_eq!(
        decide(RejectWith::Alert, &unknown),
        (
            Next::Close(Close::Rejected(RejectReason::SniUnmatched)),
            Farewell::Alert(bytes(112))
        )
    );
    let foreign = hello("a.example.com", "imap");
    assert_eq!(
        decide(RejectWith::Alert, &foreign).1,
        Farewell::Alert(bytes(120))
    );
    let not_hello = [22, 3, 1, 0, 4, 2, 0, 0, 0];
    assert_eq!(
        decide(RejectWith::Alert, &not_hello).1,
        Farewell::Alert(bytes(10))
    );
    assert_eq!(
        decide(RejectWith::Alert, b"GET / HTTP/1.1\r\n").1,
        Farewell::Fin
    );
    assert_eq!(decide(RejectWith::Close, &unknown).1, Farewell::Fin);
    assert_eq!(decide(RejectWith::Reset, &unknown).1, Farewell::Reset);
    assert_eq!(decide(RejectWith::Reset, b"GET").1, Farewell::Reset);
    let routed = hello("a.example.com", "h2");
    assert_eq!(
        decide(RejectWith::Reset, &routed).1,
        Farewell::Fin,
        "a routed session is untouched"
    );
}

#[test]
fn a_silent_close_and_an_idle_client_get_no_alert() {
    let listener = listener(RejectWith::Alert);
    let now = Instant::now();
    let (mut step, _) = PrereadStep::accept(&listener, now);
    let event = Event::Read {
        window: &[],
        added: 0,
        eof: true,
    };
    let silent = step.handle(&listener, event, now);
    assert_eq!(silent.next, Next::Close(Close::Silent));
    assert_eq!(silent.farewell, Farewell::Fin);
    let reset = self::listener(RejectWith::Reset);
    let (mut step, _) = PrereadStep::accept(&reset, now);
    let partial = &hello("a.example.com", "h2")[..10];
    let _ = step.handle(
        &reset,
        Event::Read {
            window: partial,
            added: 10,
            eof: false,
        },
        now,
    );
    let idle = step.handle(&reset, Event::Idle, now);
    assert_eq!(
        idle.next,
        Next::Close(Close::Rejected(RejectReason::Fragmented))
    );
    assert_eq!(idle.farewell, Farewell::Reset, "reset hides every reject");
    let core = SniPrereadCore::new();
    assert_eq!(
        farewell(RejectWith::Alert, RejectReason::Fragmented, &core, &[], 100),
        Farewell::Fin
    );
}
