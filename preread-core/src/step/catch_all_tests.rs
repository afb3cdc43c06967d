//! A catch-all listener behind a load balancer (`expect_proxy`): the step
//! reads the PROXY header, and only the header, before it connects.

use std::error::Error;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use preread_parser::proxy::write_v2;

use super::{Close, Event, Left, Next, PrereadListener, PrereadStep, TimerAction, test_hello};
use crate::config::PrereadConfig;
use crate::output::{Output, Route};
use crate::preread::SniPrereadCore;
use crate::reject::RejectReason;
use crate::routes::RouteTable;

type Checked = Result<(), Box<dyn Error>>;

const TIMEOUT: Duration = Duration::from_millis(5_000);

fn source() -> Result<SocketAddr, Box<dyn Error>> {
    Ok("192.0.2.10:51234".parse()?)
}

fn header() -> Result<Vec<u8>, Box<dyn Error>> {
    let mut header = Vec::new();
    write_v2(&mut header, source()?, "198.51.100.20:443".parse()?, &[])?;
    Ok(header)
}

fn catch_all(expect_proxy: bool) -> PrereadListener {
    let mut config = PrereadConfig::new(RouteTable::new());
    config.timeout = TIMEOUT;
    config.expect_proxy = expect_proxy;
    PrereadListener::new(config, Some(Arc::from("tcp")))
}

fn read(window: &[u8], added: usize, eof: bool) -> Event<'_> {
    Event::Read { window, added, eof }
}

fn connected(next: &Next) -> Result<&Route, Box<dyn Error>> {
    match next {
        Next::Connect(route) => Ok(route),
        other => Err(format!("expected a connect, got {other:?}").into()),
    }
}

#[test]
fn the_header_alone_routes_past_itself_with_its_client() -> Checked {
    let (listener, base) = (catch_all(true), Instant::now());
    let (mut step, actions) = PrereadStep::accept(&listener, base);
    assert_eq!(actions.next, Next::Read, "the header is read first");
    assert!(step.is_reading());
    assert_eq!(actions.timers.silent, TimerAction::Arm(base + TIMEOUT));

    let header = header()?;
    let half = header.len() / 2;
    let early = step.handle(&listener, read(&header[..half], half, false), base);
    assert_eq!(early.next, Next::Read, "half a header routes nowhere yet");
    assert_eq!(early.timers.preread, TimerAction::Arm(base + TIMEOUT));

    let done = step.handle(&listener, read(&header, header.len() - half, false), base);
    let route = connected(&done.next)?;
    assert_eq!(&*route.cluster, "tcp");
    assert_eq!(route.content_offset, header.len(), "the header is not data");
    assert_eq!(route.proxy_source, Some(source()?));
    assert_eq!((route.fallback, route.hello_end), (None, None));
    assert!(route.matched_sni.is_none() && route.sni.is_none());
    // The client has not spoken: a server-first protocol behind the
    // balancer is served without waiting for it.
    assert_eq!(done.left, Some(Left { sample: None }));
    assert_eq!(done.timers.preread, TimerAction::Cancel);
    assert!(!step.is_reading());
    assert_eq!(step.core().proxy_source(), Some(source()?));
    Ok(())
}

#[test]
fn bytes_after_the_header_are_left_unread_whatever_they_are() -> Checked {
    let (listener, base) = (catch_all(true), Instant::now());
    let header = header()?;
    for after in [
        test_hello::hello("a.example.com", None),
        b"GET / HTTP/1.1\r\n\r\n".to_vec(),
    ] {
        let (mut step, _) = PrereadStep::accept(&listener, base);
        let window = [header.as_slice(), &after].concat();
        let later = base + Duration::from_millis(3);
        let actions = step.handle(&listener, read(&window, window.len(), false), later);
        let route = connected(&actions.next)?;
        assert_eq!(route.content_offset, header.len());
        assert_eq!(route.sni, None, "the hello is not parsed");
        assert_eq!(
            actions.left,
            Some(Left {
                sample: Some(Duration::ZERO)
            }),
            "the client spoke in the same read"
        );
    }
    Ok(())
}

#[test]
fn a_bad_header_is_refused_and_a_cut_one_is_the_clients_reject() -> Checked {
    let (listener, base) = (catch_all(true), Instant::now());
    let (mut step, _) = PrereadStep::accept(&listener, base);
    let bad = b"PROXY TCP9 nonsense\r\n";
    let refused = step.handle(&listener, read(bad, bad.len(), false), base);
    assert_eq!(
        refused.next,
        Next::Close(Close::Rejected(RejectReason::ProxyHeaderInvalid))
    );

    // Bytes came that never made a header: not a health check (issue 28).
    let header = header()?;
    let (mut step, _) = PrereadStep::accept(&listener, base);
    let _ = step.handle(&listener, read(&header[..4], 4, false), base);
    let closed = step.handle(&listener, read(&header[..4], 0, true), base);
    assert_eq!(
        closed.next,
        Next::Close(Close::Rejected(RejectReason::FrontClosed)),
        "a cut header, then a close"
    );

    let (mut step, _) = PrereadStep::accept(&listener, base);
    let _ = step.handle(&listener, read(&header[..4], 4, false), base);
    let late = step.handle(
        &listener,
        Event::Timer(super::StepTimer::Preread),
        base + TIMEOUT,
    );
    assert_eq!(
        late.next,
        Next::Close(Close::Rejected(RejectReason::Fragmented)),
        "a cut header, then the deadline"
    );
    Ok(())
}

#[test]
fn without_expect_proxy_it_still_connects_at_accept() -> Checked {
    let (listener, base) = (catch_all(false), Instant::now());
    let (step, actions) = PrereadStep::accept(&listener, base);
    assert_eq!(connected(&actions.next)?.content_offset, 0);
    assert!(!step.is_reading());
    Ok(())
}

#[test]
fn the_core_routes_a_catch_all_at_the_complete_header() -> Checked {
    let listener = catch_all(true);
    let header = header()?;
    let mut core = SniPrereadCore::new();
    let now = Instant::now();
    let partial = core.handle_input(
        &listener.config,
        crate::output::Input::Bytes {
            buf: &header[..header.len() - 1],
            now,
        },
    );
    assert!(matches!(partial, Output::NeedMore { .. }), "{partial:?}");
    let window = [header.as_slice(), b"\x00not tls"].concat();
    let decided = core.handle_input(
        &listener.config,
        crate::output::Input::Bytes { buf: &window, now },
    );
    let Output::Routed(route) = decided else {
        return Err(format!("a catch-all routes whatever follows: {decided:?}").into());
    };
    assert_eq!(
        (&*route.cluster, route.content_offset),
        ("tcp", header.len())
    );
    assert_eq!(
        core.fault(),
        None,
        "the bytes after the header are not judged"
    );
    Ok(())
}
