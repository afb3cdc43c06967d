//! The preread step, event by event: each action the caller must perform,
//! and each one it must not.

use std::sync::Arc;
use std::time::{Duration, Instant};

use preread_parser::proxy::write_v2;

use super::{
    Actions, Close, CoreCall, Event, Fed, Left, Next, PrereadListener, PrereadStep, StepTimer,
    TimerAction, TimerPlan, test_hello,
};
use crate::config::PrereadConfig;
use crate::output::Output;
use crate::pattern::validate_sni_pattern;
use crate::reject::{FallbackReason, RejectReason};
use crate::routes::{AlpnSet, RouteTable};

const TIMEOUT: Duration = Duration::from_millis(5_000);
const SERVER_FIRST: Duration = Duration::from_millis(300);

fn hello(sni: &str) -> Vec<u8> {
    test_hello::hello(sni, None)
}

fn config() -> PrereadConfig {
    let mut routes = RouteTable::new();
    let pattern = validate_sni_pattern("a.example.com").expect("valid pattern");
    routes
        .insert(pattern, AlpnSet::Any, Arc::from("alpha"))
        .expect("one route");
    let mut config = PrereadConfig::new(routes);
    config.timeout = TIMEOUT;
    config
}

fn listener() -> PrereadListener {
    PrereadListener::new(config(), None)
}

/// A listener with a default cluster and a server-first timer.
fn server_first(expect_proxy: bool) -> PrereadListener {
    let mut config = config();
    config.default_cluster = Some(Arc::from("fallback"));
    config.server_first_timeout = Some(SERVER_FIRST);
    config.expect_proxy = expect_proxy;
    PrereadListener::new(config, None)
}

fn read<'a>(window: &'a [u8], added: usize, eof: bool) -> Event<'a> {
    Event::Read { window, added, eof }
}

fn ms(base: Instant, n: u64) -> Instant {
    base + Duration::from_millis(n)
}

fn proxy_v2_header() -> Vec<u8> {
    let mut header = Vec::new();
    let source = "192.0.2.10:51234".parse().expect("addr");
    let destination = "198.51.100.20:443".parse().expect("addr");
    write_v2(&mut header, source, destination, &[]).expect("a small header");
    header
}

#[test]
fn the_cap_is_the_configured_one_raised_to_a_record_header() {
    let mut config = config();
    config.max_bytes = 65_536;
    let mut listener = PrereadListener::new(config, None);
    assert_eq!(listener.cap(), 65_536, "no buffer lowers it any more");
    listener.set_cap(1_000);
    assert_eq!(listener.cap(), 1_000);
    listener.set_cap(0);
    assert_eq!(listener.cap(), 5);
}

#[test]
fn the_window_grows_only_while_the_stage_reads_and_never_past_the_cap() {
    let now = Instant::now();
    let mut config = config();
    config.max_bytes = 65_536;
    let listener = PrereadListener::new(config, None);
    let (mut step, _) = PrereadStep::accept(&listener, now);
    let first = crate::window::FIRST_WINDOW_BYTES;
    assert_eq!(step.window_capacity(&listener, first, 100), first);
    assert_eq!(step.window_capacity(&listener, first, first), 2 * first);
    assert_eq!(step.window_capacity(&listener, 65_536, 65_536), 65_536);
    let _ = step.abandon(now);
    assert_eq!(
        step.window_capacity(&listener, first, first),
        first,
        "a decided session never grows its window"
    );
}

#[test]
fn accept_enters_preread_and_arms_the_silence_and_server_first_timers() {
    let base = Instant::now();
    let (step, actions) = PrereadStep::accept(&listener(), base);
    assert!(step.is_reading());
    assert_eq!(actions.next, Next::Read);
    assert_eq!(
        actions.timers,
        TimerPlan {
            silent: TimerAction::Arm(base + TIMEOUT),
            ..TimerPlan::default()
        },
        "a client's first byte is due within the preread timeout"
    );
    assert_eq!((actions.left, actions.core), (None, None));
    assert_eq!(step.preread_time(), None);

    let (step, actions) = PrereadStep::accept(&server_first(false), base);
    assert!(step.is_reading());
    assert_eq!(actions.next, Next::Read);
    assert_eq!(
        actions.timers,
        TimerPlan {
            preread: TimerAction::Keep,
            server_first: TimerAction::Arm(base + SERVER_FIRST),
            silent: TimerAction::Arm(base + TIMEOUT),
        }
    );
    assert_eq!(actions.left, None);
}

#[test]
fn a_server_first_timer_as_long_as_the_timeout_takes_the_silent_clients() {
    let base = Instant::now();
    let mut config = server_first(false).config;
    config.server_first_timeout = Some(TIMEOUT);
    let listener = PrereadListener::new(config, None);
    let (_, actions) = PrereadStep::accept(&listener, base);
    assert_eq!(
        actions.timers,
        TimerPlan {
            server_first: TimerAction::Arm(base + TIMEOUT),
            ..TimerPlan::default()
        },
        "no silence timer: the operator chose to wait for the server-first route"
    );
}

#[test]
fn a_silent_client_is_refused_at_the_timeout_from_the_accept() {
    let base = Instant::now();
    let listener = listener();
    let (mut step, _) = PrereadStep::accept(&listener, base);
    let early = step.handle(&listener, Event::Timer(StepTimer::Silent), ms(base, 10));
    assert_eq!(early.next, Next::Read, "an early fire changes nothing");
    assert_eq!(early.timers.silent, TimerAction::Arm(base + TIMEOUT));
    let actions = step.handle(&listener, Event::Timer(StepTimer::Silent), base + TIMEOUT);
    assert_eq!(actions.next, Next::Close(Close::SilentTimeout));
    assert_eq!(actions.core, None, "nothing for the core to judge");
    assert_eq!(actions.left, Some(Left { sample: None }), "no sample");
    assert_eq!(
        actions.timers,
        TimerPlan::default(),
        "it fired; nothing else armed"
    );
    assert_eq!(step.preread_time(), Some(TIMEOUT));
    assert_eq!(
        step.handle(&listener, Event::Timer(StepTimer::Silent), base + TIMEOUT),
        Actions::ignore()
    );
}

#[test]
fn the_first_byte_cancels_the_silence_timer() {
    let base = Instant::now();
    let listener = listener();
    let (mut step, _) = PrereadStep::accept(&listener, base);
    let hello = hello("a.example.com");
    let actions = step.handle(&listener, read(&hello[..1], 1, false), ms(base, 4_000));
    assert_eq!(
        actions.timers,
        TimerPlan {
            preread: TimerAction::Arm(ms(base, 4_000) + TIMEOUT),
            silent: TimerAction::Cancel,
            ..TimerPlan::default()
        },
        "from the first byte, the preread deadline counts"
    );
    let stale = step.handle(&listener, Event::Timer(StepTimer::Silent), base + TIMEOUT);
    assert_eq!(stale, Actions::read(), "a timer it no longer holds");
}

#[test]
fn a_silent_client_behind_an_unfinished_header_is_refused_at_the_silence_timer() {
    // The server-first timer cannot route before the PROXY header: the core
    // waits for it, but a client that sent nothing at all is still silent.
    let base = Instant::now();
    let listener = server_first(true);
    let (mut step, _) = PrereadStep::accept(&listener, base);
    let fired = step.handle(
        &listener,
        Event::Timer(StepTimer::ServerFirst),
        base + SERVER_FIRST,
    );
    assert_eq!(fired.next, Next::Read);
    assert_eq!(
        fired.timers.preread,
        TimerAction::Arm(base + SERVER_FIRST + TIMEOUT)
    );
    let actions = step.handle(&listener, Event::Timer(StepTimer::Silent), base + TIMEOUT);
    assert_eq!(actions.next, Next::Close(Close::SilentTimeout));
    assert_eq!(actions.timers.preread, TimerAction::Cancel);
}

#[test]
fn a_proxy_header_then_nothing_until_the_deadline_is_a_silent_timeout() {
    let base = Instant::now();
    let mut config = config();
    config.expect_proxy = true;
    let listener = PrereadListener::new(config, None);
    let (mut step, _) = PrereadStep::accept(&listener, base);
    let header = proxy_v2_header();
    let actions = step.handle(&listener, read(&header, header.len(), false), ms(base, 5));
    assert_eq!(actions.timers.silent, TimerAction::Cancel, "bytes came");
    let actions = step.handle(
        &listener,
        Event::Timer(StepTimer::Preread),
        ms(base, 5) + TIMEOUT,
    );
    assert_eq!(
        actions.core.map(|c| c.output),
        Some(Output::Reject(RejectReason::Fragmented))
    );
    assert_eq!(
        actions.next,
        Next::Close(Close::SilentTimeout),
        "the load balancer's header is not the client speaking"
    );
    assert_eq!(actions.left, Some(Left { sample: None }));
}

/// Issue 28: a cut PROXY header is bytes that never made a header, so the
/// client's reject, logged and counted; a whole one then a close is a
/// health check, silent.
#[test]
fn a_cut_proxy_header_is_fragmented_on_the_deadline_and_front_closed_on_a_close() {
    let base = Instant::now();
    let mut config = config();
    config.expect_proxy = true;
    let listener = PrereadListener::new(config, None);
    let cut = b"PROXY TCP4 192.0.2.1 198.5";

    let (mut step, _) = PrereadStep::accept(&listener, base);
    let _ = step.handle(&listener, read(cut, cut.len(), false), ms(base, 5));
    assert!(!step.core().said_nothing(), "bytes came");
    let late = step.handle(
        &listener,
        Event::Timer(StepTimer::Preread),
        ms(base, 5) + TIMEOUT,
    );
    assert_eq!(
        late.next,
        Next::Close(Close::Rejected(RejectReason::Fragmented))
    );

    let (mut step, _) = PrereadStep::accept(&listener, base);
    let _ = step.handle(&listener, read(cut, cut.len(), false), ms(base, 5));
    let closed = step.handle(&listener, read(cut, 0, true), ms(base, 6));
    assert_eq!(
        closed.next,
        Next::Close(Close::Rejected(RejectReason::FrontClosed))
    );

    let header = proxy_v2_header();
    let (mut step, _) = PrereadStep::accept(&listener, base);
    let _ = step.handle(&listener, read(&header, header.len(), false), ms(base, 5));
    assert!(step.core().said_nothing(), "a whole header only");
    let closed = step.handle(&listener, read(&header, 0, true), ms(base, 6));
    assert_eq!(closed.next, Next::Close(Close::Silent), "a health check");
}

#[test]
fn a_catch_all_listener_connects_at_accept_unread() {
    let base = Instant::now();
    let catch_all = PrereadListener::new(config(), Some(Arc::from("tcp")));
    let (mut step, actions) = PrereadStep::accept(&catch_all, base);
    let Next::Connect(route) = &actions.next else {
        panic!("a catch-all connects at once: {actions:?}");
    };
    assert_eq!(&*route.cluster, "tcp");
    assert_eq!((route.content_offset, route.fallback), (0, None));
    assert_eq!(route.hello_end, None);
    assert_eq!((actions.left, actions.core), (None, None));
    assert_eq!(actions.timers, TimerPlan::default());
    assert!(!step.is_reading(), "a catch-all session never prereads");
    assert_eq!(step.read_budget(&catch_all, 0), 0);
    assert_eq!(step.preread_time(), None);
    let hello = hello("a.example.com");
    assert_eq!(
        step.handle(&catch_all, read(&hello, hello.len(), false), base),
        Actions::ignore()
    );
    assert_eq!(step.abandon(base).left, None, "nothing to leave");
}

#[test]
fn the_budget_stops_at_the_cap_and_at_the_decision() {
    let base = Instant::now();
    let mut config = config();
    config.max_bytes = 1_000;
    let listener = PrereadListener::new(config, None);
    let (mut step, _) = PrereadStep::accept(&listener, base);
    assert_eq!(step.read_budget(&listener, 0), 1_000);
    assert_eq!(step.read_budget(&listener, 999), 1);
    assert_eq!(step.read_budget(&listener, 1_000), 0);
    let hello = hello("a.example.com");
    let _ = step.handle(&listener, read(&hello, hello.len(), false), base);
    assert_eq!(
        step.read_budget(&listener, 0),
        0,
        "decided: read nothing more"
    );
}

#[test]
fn a_complete_hello_connects_and_leaves_once_with_its_duration() {
    let base = Instant::now();
    let listener = listener();
    let (mut step, _) = PrereadStep::accept(&listener, base);
    let hello = hello("a.example.com");
    let actions = step.handle(&listener, read(&hello[..10], 10, false), ms(base, 100));
    assert_eq!(actions.next, Next::Read);
    assert_eq!(
        actions.timers.preread,
        TimerAction::Arm(ms(base, 100) + TIMEOUT),
        "armed at the first bytes' deadline"
    );
    assert_eq!(actions.timers.server_first, TimerAction::Keep);
    assert_eq!(actions.timers.silent, TimerAction::Cancel);
    let Some(CoreCall {
        fed: Fed::Bytes(10),
        output: Output::NeedMore { .. },
    }) = actions.core
    else {
        panic!("the first read fed 10 bytes: {actions:?}");
    };
    let actions = step.handle(
        &listener,
        read(&hello, hello.len() - 10, false),
        ms(base, 130),
    );
    let Next::Connect(route) = &actions.next else {
        panic!("routed: {actions:?}");
    };
    assert_eq!(&*route.cluster, "alpha");
    assert_eq!(
        actions.left,
        Some(Left {
            sample: Some(Duration::from_millis(30))
        }),
        "first byte to decision"
    );
    assert_eq!(actions.timers.preread, TimerAction::Cancel);
    assert_eq!(
        actions.timers.server_first,
        TimerAction::Keep,
        "never armed"
    );
    assert_eq!(
        actions.core.map(|c| c.fed),
        Some(Fed::Bytes(hello.len())),
        "the whole window, not the delta"
    );
    assert!(!step.is_reading());
    assert_eq!(step.preread_time(), Some(Duration::from_millis(30)));
    assert_eq!(step.core().sni().map(|s| s.as_str()), Some("a.example.com"));
    assert_eq!(step.abandon(ms(base, 500)).left, None, "left once");
    assert_eq!(
        step.handle(&listener, Event::Timer(StepTimer::Preread), ms(base, 9_000)),
        Actions::ignore()
    );
    assert_eq!(step.preread_time(), Some(Duration::from_millis(30)));
}

#[test]
fn the_preread_timer_is_armed_once() {
    let base = Instant::now();
    let listener = listener();
    let (mut step, _) = PrereadStep::accept(&listener, base);
    let hello = hello("a.example.com");
    let first = step.handle(&listener, read(&hello[..10], 10, false), base);
    assert_eq!(first.timers.preread, TimerAction::Arm(base + TIMEOUT));
    let second = step.handle(&listener, read(&hello[..20], 10, false), ms(base, 50));
    assert_eq!(second.timers, TimerPlan::default(), "armed already");
    assert_eq!(second.next, Next::Read);
}

#[test]
fn a_timer_that_fires_early_changes_nothing_but_is_armed_again() {
    let base = Instant::now();
    let listener = listener();
    let (mut step, _) = PrereadStep::accept(&listener, base);
    let hello = hello("a.example.com");
    let _ = step.handle(&listener, read(&hello[..10], 10, false), base);
    let early = step.handle(&listener, Event::Timer(StepTimer::Preread), ms(base, 10));
    assert_eq!(early.next, Next::Read);
    assert_eq!(
        early.timers.preread,
        TimerAction::Arm(base + TIMEOUT),
        "the caller no longer holds it: armed again at the same deadline"
    );
    assert_eq!(early.core.map(|c| c.fed), Some(Fed::Timeout));
    let late = step.handle(&listener, Event::Timer(StepTimer::Preread), base + TIMEOUT);
    assert_eq!(
        late.next,
        Next::Close(Close::Rejected(RejectReason::Fragmented))
    );
    assert_eq!(
        late.timers.preread,
        TimerAction::Keep,
        "it fired: nothing to cancel"
    );
    assert_eq!(
        late.left,
        Some(Left {
            sample: Some(TIMEOUT)
        })
    );
}

#[test]
fn bytes_are_decided_before_the_eof_that_came_with_them() {
    let base = Instant::now();
    let listener = listener();
    let (mut step, _) = PrereadStep::accept(&listener, base);
    let hello = hello("a.example.com");
    let with_eof = step.handle(&listener, read(&hello[..10], 10, true), base);
    assert_eq!(with_eof.next, Next::Read, "the bytes first");
    assert_eq!(with_eof.core.map(|c| c.fed), Some(Fed::Bytes(10)));
    let eof = step.handle(&listener, read(&hello[..10], 0, true), ms(base, 1));
    assert_eq!(
        eof.next,
        Next::Close(Close::Rejected(RejectReason::FrontClosed)),
        "the client spoke, then closed"
    );
    assert_eq!(eof.core.map(|c| c.fed), Some(Fed::FrontClosed));
    assert_eq!(eof.timers.preread, TimerAction::Cancel);
    assert_eq!(
        eof.left,
        Some(Left {
            sample: Some(Duration::from_millis(1))
        })
    );
}

#[test]
fn a_read_that_added_nothing_feeds_nothing() {
    let base = Instant::now();
    let listener = listener();
    let (mut step, _) = PrereadStep::accept(&listener, base);
    let actions = step.handle(&listener, read(&[], 0, false), base);
    assert_eq!(actions, Actions::read());
    assert!(step.is_reading());
    assert_eq!(step.core().deadline(), None, "the core was not fed");
}

#[test]
fn a_close_before_any_byte_is_silent() {
    let base = Instant::now();
    let listener = server_first(false);
    let (mut step, _) = PrereadStep::accept(&listener, base);
    let actions = step.handle(&listener, read(&[], 0, true), ms(base, 20));
    assert_eq!(actions.next, Next::Close(Close::Silent));
    assert_eq!(actions.left, Some(Left { sample: None }), "no sample");
    assert_eq!(actions.timers.server_first, TimerAction::Cancel);
    assert_eq!(actions.timers.silent, TimerAction::Cancel);
    assert_eq!(actions.timers.preread, TimerAction::Keep, "never armed");
    assert_eq!(step.preread_time(), Some(Duration::from_millis(20)));
}

#[test]
fn a_reject_closes_with_its_reason() {
    let base = Instant::now();
    let listener = listener();
    let (mut step, _) = PrereadStep::accept(&listener, base);
    let actions = step.handle(&listener, read(b"GET /", 5, false), base);
    assert_eq!(
        actions.next,
        Next::Close(Close::Rejected(RejectReason::NotTls))
    );
    assert_eq!(
        actions.core,
        Some(CoreCall {
            fed: Fed::Bytes(5),
            output: Output::Reject(RejectReason::NotTls)
        })
    );
    assert_eq!(
        actions.timers,
        TimerPlan {
            silent: TimerAction::Cancel,
            ..TimerPlan::default()
        },
        "only the silence timer was armed"
    );
    assert_eq!(
        actions.left,
        Some(Left {
            sample: Some(Duration::ZERO)
        })
    );
}

#[test]
fn an_incomplete_window_at_the_cap_is_too_large() {
    let base = Instant::now();
    let mut config = config();
    config.max_bytes = 20;
    let listener = PrereadListener::new(config, None);
    let (mut step, _) = PrereadStep::accept(&listener, base);
    let hello = hello("a.example.com");
    let budget = step.read_budget(&listener, 0);
    assert_eq!(budget, 20);
    let actions = step.handle(&listener, read(&hello[..budget], budget, false), base);
    assert_eq!(
        actions.next,
        Next::Close(Close::Rejected(RejectReason::TooLarge))
    );
}

#[test]
fn server_first_routes_a_silent_client_to_the_default_cluster() {
    let base = Instant::now();
    let listener = server_first(false);
    let (mut step, _) = PrereadStep::accept(&listener, base);
    let actions = step.handle(
        &listener,
        Event::Timer(StepTimer::ServerFirst),
        base + SERVER_FIRST,
    );
    let Next::Connect(route) = &actions.next else {
        panic!("server-first: {actions:?}");
    };
    assert_eq!(route.fallback, Some(FallbackReason::ServerFirst));
    assert_eq!(&*route.cluster, "fallback");
    assert_eq!(actions.left, Some(Left { sample: None }));
    assert_eq!(
        actions.timers,
        TimerPlan {
            silent: TimerAction::Cancel,
            ..TimerPlan::default()
        },
        "the server-first timer fired; the preread one was never armed"
    );
}

#[test]
fn server_first_is_cancelled_once_the_client_spoke() {
    let base = Instant::now();
    let listener = server_first(false);
    let (mut step, _) = PrereadStep::accept(&listener, base);
    let hello = hello("a.example.com");
    let actions = step.handle(&listener, read(&hello[..3], 3, false), ms(base, 10));
    assert_eq!(actions.timers.server_first, TimerAction::Cancel);
    assert_eq!(actions.timers.silent, TimerAction::Cancel);
    assert_eq!(
        actions.timers.preread,
        TimerAction::Arm(ms(base, 10) + TIMEOUT)
    );
    let again = step.handle(&listener, read(&hello[..6], 3, false), ms(base, 20));
    assert_eq!(again.timers, TimerPlan::default(), "cancelled once");
}

#[test]
fn a_proxy_header_alone_keeps_the_server_first_timer() {
    let base = Instant::now();
    let listener = server_first(true);
    let (mut step, _) = PrereadStep::accept(&listener, base);
    let header = proxy_v2_header();
    let actions = step.handle(&listener, read(&header, header.len(), false), ms(base, 5));
    assert_eq!(actions.next, Next::Read);
    assert_eq!(
        actions.timers.server_first,
        TimerAction::Keep,
        "the load balancer's header is not the client speaking"
    );
    let fired = step.handle(
        &listener,
        Event::Timer(StepTimer::ServerFirst),
        base + SERVER_FIRST,
    );
    let Next::Connect(route) = &fired.next else {
        panic!("server-first past the header: {fired:?}");
    };
    assert_eq!(route.content_offset, header.len());
    assert_eq!(
        fired.timers.preread,
        TimerAction::Cancel,
        "the header armed the deadline"
    );
    assert_eq!(
        fired.left,
        Some(Left { sample: None }),
        "the client never spoke"
    );
}

#[test]
fn an_idle_client_that_spoke_is_fragmented_and_a_silent_one_a_silent_timeout() {
    let base = Instant::now();
    let listener = server_first(false);
    let (mut silent, _) = PrereadStep::accept(&listener, base);
    let actions = silent.handle(&listener, Event::Idle, ms(base, 1_000));
    assert_eq!(actions.next, Next::Close(Close::SilentTimeout));
    assert_eq!(actions.left, Some(Left { sample: None }));
    assert_eq!(actions.timers.server_first, TimerAction::Cancel);
    assert_eq!(actions.timers.silent, TimerAction::Cancel);
    assert_eq!(actions.core, None, "not a core decision");

    let listener = self::listener();
    let (mut spoke, _) = PrereadStep::accept(&listener, base);
    let hello = hello("a.example.com");
    let _ = spoke.handle(&listener, read(&hello[..10], 10, false), ms(base, 1_000));
    let actions = spoke.handle(&listener, Event::Idle, ms(base, 3_000));
    assert_eq!(
        actions.next,
        Next::Close(Close::Rejected(RejectReason::Fragmented))
    );
    assert_eq!(
        actions.left,
        Some(Left {
            sample: Some(Duration::from_millis(2_000))
        }),
        "from the first byte, not the accept"
    );
    assert_eq!(actions.timers.preread, TimerAction::Cancel);
    assert!(!spoke.is_reading());
    assert_eq!(
        spoke.handle(&listener, Event::Idle, ms(base, 4_000)),
        Actions::ignore()
    );
}

#[test]
fn abandon_cancels_what_is_armed_and_leaves_once() {
    let base = Instant::now();
    let listener = server_first(false);
    let (mut step, _) = PrereadStep::accept(&listener, base);
    let first = step.abandon(ms(base, 40));
    assert_eq!(first.next, Next::Ignore);
    assert_eq!(
        first.timers,
        TimerPlan {
            preread: TimerAction::Keep,
            server_first: TimerAction::Cancel,
            silent: TimerAction::Cancel,
        }
    );
    assert_eq!(first.left, Some(Left { sample: None }));
    assert_eq!(step.preread_time(), Some(Duration::from_millis(40)));
    let second = step.abandon(ms(base, 80));
    assert_eq!(second, Actions::ignore());
    assert_eq!(step.preread_time(), Some(Duration::from_millis(40)));
}

#[test]
fn timer_plan_reads_each_timer() {
    let plan = TimerPlan {
        preread: TimerAction::Cancel,
        server_first: TimerAction::Keep,
        silent: TimerAction::Arm(Instant::now()),
    };
    assert_eq!(plan.get(StepTimer::Preread), TimerAction::Cancel);
    assert_eq!(plan.get(StepTimer::ServerFirst), TimerAction::Keep);
    assert!(matches!(plan.get(StepTimer::Silent), TimerAction::Arm(_)));
}

#[test]
fn a_refused_connection_never_enters_the_stage() {
    let base = Instant::now();
    let mut step = PrereadStep::refused(base);
    assert!(!step.is_reading());
    assert_eq!(step.read_budget(&listener(), 0), 0);
    assert_eq!(
        step.abandon(ms(base, 5)),
        Actions::ignore(),
        "no gauge to lower"
    );
    assert_eq!(step.preread_time(), None);
}
