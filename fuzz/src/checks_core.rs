//! Invariants of the routing core (`preread_core::SniPrereadCore`) as the
//! shell runs it: through the shipped preread step
//! (`preread_core::step::PrereadStep`), under a data-derived listener config
//! and a data-derived sequence of events (reads within the step's budget,
//! timers that fire on time or early, the front idle timeout, closes).
//!
//! Owns: [`check_core`], which panics when an invariant breaks, and the
//! driving half of it (the events, the step's actions, the timers, the exit
//! and the latch); the judging half, what the parsers read and how that
//! explains an answer, is `checks_core_reading.rs`. Included with `#[path]`
//! by `preread-core/tests/fuzz_replay.rs`, so it may use `preread_core`,
//! `preread_parser` (a dependency of the core) and `arbitrary` (a
//! dev-dependency there), and nothing of `checks_parser`.
//! Must never: model the core or the step a second time (the house rule:
//! call shipped code). Every expected value comes from shipped code: the
//! core itself (a twin fed the same inputs, a fresh core on the same window,
//! one shot on the whole stream), the parsers, `HostName::normalize` and the
//! route table's lookup; what is checked are the documented properties of
//! those answers (`LIFECYCLE.md` §2-§10), never a second verdict.
//!
//! Input layout: the whole input is the client's byte stream; the control
//! bytes (config and the event sequence) are its last [`CONTROL_LEN`] bytes
//! read backwards. A raw ClientHello therefore makes a useful seed: its
//! first bytes stay a well-formed record while mutations of its tail (mostly
//! opaque extension data) steer the config and the chunking.

#[path = "checks_core_reading.rs"]
mod reading;

use std::sync::Arc;
use std::time::{Duration, Instant};

use arbitrary::Unstructured;
use preread_core::pattern::validate_sni_pattern;
use preread_core::routes::{AlpnSet, RouteTable};
use preread_core::step::{
    Actions, Close, Event, Farewell, Fed, Next, PrereadListener, PrereadStep, StepTimer,
    TimerAction, TimerPlan,
};
use preread_core::window::FIRST_WINDOW_BYTES;
use preread_core::{DenyJa4, Input, Output, PrereadConfig, RejectReason, SniPrereadCore};
use preread_parser::proxy::{ProxyParsed, parse_proxy_header};
use preread_parser::tls::{Ja4, Parsed, Transport, parse_client_hello};

use reading::{
    Reading, client_spoke, ends_within, explain, learned, proxy_header, server_first_route,
};

/// How many bytes at the end of the input steer the config and the events.
pub const CONTROL_LEN: usize = 64;

/// At most this many steered events before the closing ones.
const MAX_STEPS: usize = 24;

/// The pool the route table is drawn from: `(pattern, alpn, cluster)`, an
/// empty ALPN list meaning "any". Conflict-free in every subset. Names
/// cover the committed corpus (`testdata/clienthellos`). The one copy is
/// `testdata/route_pool.rs`, which every includer of this file declares as
/// `crate::route_pool`.
const ROUTES: &[(&str, &[&str], &str)] = crate::route_pool::POOL;

const DEFAULT_CLUSTER: &str = "default";

/// How much later than the last event the probes after the exit come.
const LATER: Duration = Duration::from_secs(3600);

fn config(u: &mut Unstructured<'_>, data: &[u8]) -> PrereadConfig {
    // Control bytes of zero (a ClientHello's padding, an exhausted input)
    // pick the plain listener: every route, the largest cap, a 10 s timeout.
    let mask: u16 = !u.arbitrary::<u16>().unwrap_or(0);
    let mut routes = RouteTable::new();
    for (i, (pattern, alpn, cluster)) in ROUTES.iter().enumerate() {
        if mask & (1 << i) == 0 {
            continue;
        }
        let pattern = validate_sni_pattern(pattern).expect("valid pool pattern");
        let alpn = if alpn.is_empty() {
            AlpnSet::Any
        } else {
            AlpnSet::protocols(alpn.iter()).expect("valid pool ALPN")
        };
        routes
            .insert(pattern, alpn, Arc::from(*cluster))
            .expect("the route pool is conflict-free");
    }
    let mut config = PrereadConfig::new(routes);
    // Mostly a large cap, so that real ClientHellos fit (the default, past
    // which the window grows from its first 2 KiB); now and then a tiny
    // one, to reach TooLarge inside the record header or PROXY header.
    config.max_bytes = match u.int_in_range(0..=3u8).unwrap_or(0) {
        0 => 65_536,
        1 => 4096,
        2 => u.int_in_range(5..=4096).unwrap_or(4096),
        _ => u.int_in_range(5..=64).unwrap_or(5),
    };
    config.timeout = match u.int_in_range(0..=15u8).unwrap_or(0) {
        // Overflows `Instant`: the core falls back to a far-future deadline.
        14 => Duration::MAX,
        15 => Duration::ZERO,
        _ => Duration::from_millis(10_000 - u.int_in_range(0..=9_999).unwrap_or(0)),
    };
    // Mostly what the stream looks like, so that seeds with and without a
    // PROXY header both reach the ClientHello; the other way now and then.
    let looks_proxy = matches!(data.first(), Some(b'P' | b'\r'));
    config.expect_proxy = looks_proxy != (u.int_in_range(0..=7u8).unwrap_or(0) == 7);
    if u.arbitrary().unwrap_or(false) {
        config.default_cluster = Some(Arc::from(DEFAULT_CLUSTER));
    }
    if u.arbitrary().unwrap_or(false) {
        config.server_first_timeout =
            Some(Duration::from_millis(u.int_in_range(1..=5000).unwrap_or(1)));
    }
    config.deny_ja4 = deny_ja4(data, config.expect_proxy);
    config
}

/// A `deny_ja4` list for half the streams whose hello parses, picked by
/// the stream's length so that the control bytes keep their meaning: the
/// hello's own fingerprint (refused once routed), or one with its `a`
/// section and other hashes (the list's hint lets the hello on to the
/// thread's cache, which clears it).
fn deny_ja4(data: &[u8], expect_proxy: bool) -> DenyJa4 {
    let start = match parse_proxy_header(data) {
        Ok(ProxyParsed::Complete(header)) if expect_proxy => header.len(),
        _ if expect_proxy => return DenyJa4::default(),
        _ => 0,
    };
    let mut scratch = Vec::new();
    let Some(Ok(Parsed::Complete(hello))) = data
        .get(start..)
        .map(|tls| parse_client_hello(tls, &mut scratch))
    else {
        return DenyJa4::default();
    };
    let own = Ja4::of(&hello, Transport::Tcp);
    let section = own.as_str().get(..10).unwrap_or_default();
    let same_a = Ja4::parse(&format!("{section}_000000000000_000000000000"));
    match (data.len() % 4, same_a) {
        (0, _) => DenyJa4::new([own]),
        (1, Ok(other)) => DenyJa4::new([other]),
        _ => DenyJa4::default(),
    }
}

/// How far the clock moves before the next event: mostly not at all.
fn time_step(u: &mut Unstructured<'_>) -> Duration {
    match u.int_in_range(0..=15u8).unwrap_or(0) {
        0..=10 => Duration::ZERO,
        11..=13 => Duration::from_millis(u.int_in_range(1..=100).unwrap_or(1)),
        14 => Duration::from_millis(u.int_in_range(1..=10_000).unwrap_or(1)),
        _ => Duration::from_secs(24 * 3600),
    }
}

/// Drives one [`PrereadStep`] (and so one [`SniPrereadCore`]) over a
/// data-derived sequence of events, performing its actions as the worker
/// does, and checks after every event:
///
/// - the step: the window never passes the cap and a read never adds more
///   than `read_budget`; a timer is armed only when the caller does not
///   hold it and cancelled only when it does; while reading, the caller
///   holds the preread timer at the core's deadline, the server-first
///   timer until the client spoke or it fired, and the silence timer (at
///   `accept + timeout`, unless a server-first timer at least as long is
///   set) until the first byte; the silence timer, when it fires, refuses
///   a client that sent nothing, without a core call; each event feeds the core
///   what §10 of `LIFECYCLE.md` says; `left` comes exactly once, with every
///   timer cancelled, a duration sample only for a client that spoke, and
///   the exit `Next` the core's decision calls for (a timeout before the
///   client spoke is `SilentTimeout`, a close then is `Silent`); a farewell
///   only for a reject; after the exit every event (and `abandon`) answers
///   `Next::Ignore` with no core call, and the core's decision, deadline
///   and `client_spoke` do not move;
/// - the core, each call: a twin core fed what the step says it fed
///   answers the same (and a re-fed unchanged window changes nothing); the
///   deadline is armed once, at `now + timeout` (far in the future when
///   that overflows), by the first `Bytes` or by a server-first timeout
///   waiting for a PROXY header, and never moves; `NeedMore` carries it;
///   a terminal answer is latched, and replayed by the twin for every later
///   input; a fresh core fed the same window at the same `now` answers the
///   same and learns the same, except where §8 routes at once a client
///   still silent when its PROXY header completes after a server-first
///   timeout (and there it must); a terminal answer equals the one-shot
///   answer on the whole capped stream, however short the window (so a
///   `TooLarge` that a length announced does not depend on what follows),
///   and, unless `TooLarge`, on the whole uncapped one;
/// - the answer against the shipped parsers and lookup: each reason only
///   on the evidence that defines it (`ProxyHeaderInvalid` only when the
///   PROXY parser errs, `NotTls` / `MalformedRecord` / `MalformedHandshake`
///   only when the TLS parser says so, `TooLarge` only where the parsers
///   given the cap say the window cannot end within it (at the cap, or a
///   length announces more) and never when the whole stream, read with no
///   cap, holds a hello that ends within it, `NeedMore` only otherwise, `NoSni`,
///   `EchOuterAbsent`, `SniUnmatched`, `AlpnUnmatched` only on a complete
///   hello whose name and lookup say so); a matched route carries the
///   lookup's cluster, pattern and protocol and a `hello_end` within the
///   window; a fallback goes to the default cluster, and a reason with a
///   fallback is never refused when one is set; a `Timeout` routes only a
///   silent client, past its PROXY header, and a silent client's timeout
///   with that header in always does; `client_spoke`, `sni`,
///   `proxy_source`, `fault` and `content_offset` are what the parsers
///   read in the window.
///
/// Returns the decision, so a replay can tell what it exercised: the exit's
/// route or reject reason, `FrontClosed` standing for a silent close and
/// `Fragmented` for a silent timeout.
pub fn check_core(data: &[u8]) -> Output {
    let base = Instant::now();
    let control: Vec<u8> = data[data.len().saturating_sub(CONTROL_LEN)..]
        .iter()
        .rev()
        .copied()
        .collect();
    let mut u = Unstructured::new(&control);
    let listener = PrereadListener::new(config(&mut u, data), None);
    let mut run = Run::accept(&listener, data, base);
    for _ in 0..MAX_STEPS {
        if u.is_empty() {
            break;
        }
        run.now += time_step(&mut u);
        match u.int_in_range(0..=31u8).unwrap_or(0) {
            kind @ 0..=26 => {
                let grow = match u.int_in_range(0..=3u8).unwrap_or(0) {
                    0 => u.int_in_range(1..=16).unwrap_or(1),
                    1 => u.int_in_range(1..=512).unwrap_or(1),
                    2 => 0,
                    _ => data.len(),
                };
                // Now and then the client's FIN comes with its last bytes.
                run.read(grow, kind == 26);
            }
            27 | 28 => run.fire(Fire::Due),
            29 => run.fire(Fire::Early),
            30 => run.handle(Event::Idle),
            // A reset: the read fails.
            _ => run.close(),
        }
    }
    run.finish()
}

/// Which held timer an event fires.
#[derive(Debug, Clone, Copy)]
enum Fire {
    /// The one due first, at its time (the clock moves to it if earlier).
    Due,
    /// The preread timer if held (else the silence one, else the
    /// server-first one), now: a stale or early wake-up.
    Early,
}

/// The timers the caller holds, and when each fires.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Held {
    preread: Option<Instant>,
    server_first: Option<Instant>,
    silent: Option<Instant>,
}

impl Held {
    fn slot(&mut self, timer: StepTimer) -> &mut Option<Instant> {
        match timer {
            StepTimer::Preread => &mut self.preread,
            StepTimer::ServerFirst => &mut self.server_first,
            StepTimer::Silent => &mut self.silent,
        }
    }

    /// The preread timer if held, else the silence one, else the
    /// server-first one.
    fn preread_first(&self) -> Option<(StepTimer, Instant)> {
        let preread = self.preread.map(|at| (StepTimer::Preread, at));
        let silent = self.silent.map(|at| (StepTimer::Silent, at));
        preread
            .or(silent)
            .or(self.server_first.map(|at| (StepTimer::ServerFirst, at)))
    }

    /// The held timer due first; on a tie the one armed first: the
    /// server-first timer, then the silence timer (both at accept), then
    /// the preread one.
    fn first_due(&self) -> Option<(StepTimer, Instant)> {
        [
            self.server_first.map(|at| (StepTimer::ServerFirst, at)),
            self.silent.map(|at| (StepTimer::Silent, at)),
            self.preread.map(|at| (StepTimer::Preread, at)),
        ]
        .into_iter()
        .flatten()
        .reduce(|first, next| if next.1 < first.1 { next } else { first })
    }
}

/// The step's state when it left preread, which nothing may change after.
#[derive(Debug)]
struct Exit {
    next: Next,
    decision: Option<Output>,
    deadline: Option<Instant>,
    client_spoke: bool,
    preread_time: Option<Duration>,
}

struct Run<'a> {
    listener: &'a PrereadListener,
    config: &'a PrereadConfig,
    data: &'a [u8],
    base: Instant,
    now: Instant,
    step: PrereadStep,
    /// Fed every input the step's core is fed, and more: the latch probes
    /// and unchanged windows again.
    twin: SniPrereadCore,
    /// The window is `data[..len]`.
    len: usize,
    /// The window's buffer, grown as the step says: a read never adds
    /// more than it has room for.
    capacity: usize,
    held: Held,
    server_first_fired: bool,
    /// When the silence timer armed at accept is due, if it was armed.
    silent_due: Option<Instant>,
    first_byte_at: Option<Instant>,
    /// The deadline of the first `NeedMore`: every later one is the same.
    need_more: Option<Instant>,
    /// The length of the last window the core looked at (fed before its
    /// deadline).
    looked_at: usize,
    /// A `Timeout` came while the client was silent and its PROXY header
    /// incomplete: the core waits for the header to route (§8).
    server_first_waited: bool,
    exit: Option<Exit>,
    /// A fresh core on the whole stream as the cap lets it arrive.
    one_shot: Output,
    /// A fresh core on the whole stream, past the cap.
    one_shot_uncapped: Output,
}

impl<'a> Run<'a> {
    fn accept(listener: &'a PrereadListener, data: &'a [u8], base: Instant) -> Self {
        let config = &listener.config;
        let one_shot =
            |buf| SniPrereadCore::new().handle_input(config, Input::Bytes { buf, now: base });
        let (step, actions) = PrereadStep::accept(listener, base);
        assert!(step.is_reading(), "a listener without a catch-all prereads");
        let server_first = config.server_first_timeout.map(|wait| base + wait);
        let silent_due = match actions.timers.silent {
            TimerAction::Arm(at) => Some(at),
            TimerAction::Keep | TimerAction::Cancel => None,
        };
        let silence = config
            .server_first_timeout
            .is_none_or(|wait| wait < config.timeout);
        assert_eq!(silent_due.is_some(), silence, "the accept's silence timer");
        if let Some(at) = silent_due {
            match base.checked_add(config.timeout) {
                Some(want) => assert_eq!(at, want, "the silence timer, not accept + timeout"),
                None => assert!(
                    at >= base + Duration::from_secs(24 * 3600),
                    "a timeout past Instant's range armed the silence timer at {at:?}"
                ),
            }
        }
        let timers = TimerPlan {
            preread: TimerAction::Keep,
            server_first: server_first.map_or(TimerAction::Keep, TimerAction::Arm),
            silent: silent_due.map_or(TimerAction::Keep, TimerAction::Arm),
        };
        assert_eq!(actions.timers, timers, "the accept's timers");
        assert_eq!(actions.next, Next::Read, "the accept");
        assert_eq!((actions.left, &actions.core), (None, &None), "the accept");
        Self {
            listener,
            config,
            data,
            base,
            now: base,
            step,
            twin: SniPrereadCore::new(),
            len: 0,
            capacity: FIRST_WINDOW_BYTES,
            held: Held {
                preread: None,
                server_first,
                silent: silent_due,
            },
            server_first_fired: false,
            silent_due,
            first_byte_at: None,
            need_more: None,
            looked_at: 0,
            server_first_waited: false,
            exit: None,
            one_shot: one_shot(&data[..data.len().min(listener.cap())]),
            one_shot_uncapped: one_shot(data),
        }
    }

    /// A read of up to `grow` more bytes of the stream, within the step's
    /// budget; with `fin`, the client's FIN comes with the last byte.
    fn read(&mut self, grow: usize, fin: bool) {
        let data = self.data;
        let cap = self.listener.cap();
        let budget = self.step.read_budget(self.listener, self.len);
        if self.step.is_reading() {
            assert!(
                budget > 0 && self.len + budget <= cap,
                "a budget of {budget} for a window of {} under the cap {cap}",
                self.len
            );
        } else {
            assert_eq!(budget, 0, "a read budget after the exit");
        }
        let want = self
            .step
            .window_capacity(self.listener, self.capacity, self.len);
        if want != self.capacity {
            assert!(
                self.step.is_reading() && self.len == self.capacity && want <= cap,
                "grew a {}-byte window holding {} to {want} (cap {cap})",
                self.capacity,
                self.len
            );
        } else if self.step.is_reading() && self.len == self.capacity {
            assert!(
                self.capacity >= cap,
                "a full {}-byte window under the cap {cap} did not grow",
                self.capacity
            );
        }
        self.capacity = want;
        let room = self.capacity.saturating_sub(self.len);
        let added = grow.min(budget).min(room).min(data.len() - self.len);
        self.len += added;
        let eof = fin && self.len == data.len();
        let window = &data[..self.len];
        self.handle(Event::Read { window, added, eof });
        if eof && added > 0 {
            // The caller sees the EOF again on its next read.
            self.handle(Event::Read {
                window,
                added: 0,
                eof: true,
            });
        }
        if added == 0 && !eof {
            self.refeed_twin();
        }
    }

    /// The client closes (or the read fails) with nothing more read.
    fn close(&mut self) {
        let window = &self.data[..self.len];
        self.handle(Event::Read {
            window,
            added: 0,
            eof: true,
        });
    }

    /// One held timer fires; with none held, the front idle timeout does.
    fn fire(&mut self, how: Fire) {
        let timer = match how {
            Fire::Due => self.held.first_due(),
            Fire::Early => self.held.preread_first(),
        };
        let Some((timer, at)) = timer else {
            return self.handle(Event::Idle);
        };
        if let Fire::Due = how {
            self.now = self.now.max(at);
        }
        self.handle(Event::Timer(timer));
    }

    /// Hands one event to the step, checks the core call it made (if any)
    /// and performs its actions.
    fn handle(&mut self, event: Event<'_>) {
        let now = self.now;
        let spoke_before = self.step.core().client_spoke();
        let deadline_before = self.step.core().deadline();
        if self.exit.is_none() {
            match event {
                Event::Timer(timer) => {
                    // The caller holds a timer that fired no more.
                    *self.held.slot(timer) = None;
                    self.server_first_fired |= timer == StepTimer::ServerFirst;
                }
                Event::Read { added, .. } if added > 0 => {
                    self.first_byte_at.get_or_insert(now);
                }
                Event::Read { .. } | Event::Idle => {}
            }
        }
        let actions = self.step.handle(self.listener, event, now);
        if let Some(exit) = &self.exit {
            self.check_ignored(&actions, exit, &format!("{event:?}"));
            return;
        }
        // §10: what each event feeds the core.
        let fed = match event {
            Event::Read { added, .. } if added > 0 => Some(Fed::Bytes(self.len)),
            Event::Read { eof: true, .. } => Some(Fed::FrontClosed),
            Event::Read { .. } | Event::Idle | Event::Timer(StepTimer::Silent) => None,
            Event::Timer(_) => Some(Fed::Timeout),
        };
        assert_eq!(
            actions.core.as_ref().map(|call| call.fed),
            fed,
            "{event:?} fed the core {:?}",
            actions.core
        );
        if let Some(call) = &actions.core {
            let input = match call.fed {
                Fed::Bytes(_) => Input::Bytes {
                    buf: &self.data[..self.len],
                    now,
                },
                Fed::Timeout => Input::Timeout { now },
                Fed::FrontClosed => Input::FrontClosed,
            };
            self.check_call(input, &call.output, spoke_before, deadline_before);
        }
        self.perform(&actions, &event);
    }

    /// An event after the exit: nothing to do, nothing moves.
    fn check_ignored(&self, actions: &Actions, exit: &Exit, what: &str) {
        let got = (&actions.next, actions.timers, actions.left, &actions.core);
        let ignored = (&Next::Ignore, TimerPlan::default(), None, &None);
        assert_eq!(got, ignored, "{what} after the exit ({exit:?})");
        assert_eq!(actions.farewell, Farewell::Fin, "{what} after the exit");
        let core = self.step.core();
        let now = (core.decision(), core.deadline(), core.client_spoke());
        let then = (exit.decision.as_ref(), exit.deadline, exit.client_spoke);
        assert_eq!(now, then, "{what} after the exit moved the core");
        assert_eq!(self.step.preread_time(), exit.preread_time, "{what}");
        assert!(!self.step.is_reading(), "{what} after the exit");
        assert_eq!(self.step.read_budget(self.listener, self.len), 0, "{what}");
    }

    /// The step's core and the twin are in the same state.
    fn same_state(&self, what: &str) {
        let (core, twin) = (self.step.core(), &self.twin);
        let state = (core.decision(), core.deadline(), learned(core));
        let twins = (twin.decision(), twin.deadline(), learned(twin));
        assert_eq!(state, twins, "the twin, {what}");
    }

    /// A read that added nothing made no core call; the twin gets the
    /// unchanged window again, before the deadline: nothing changes.
    fn refeed_twin(&mut self) {
        let (Some(deadline), None) = (self.twin.deadline(), self.twin.decision()) else {
            return;
        };
        if self.len == 0 || self.now >= deadline {
            return;
        }
        let buf = &self.data[..self.len];
        let again = self
            .twin
            .handle_input(self.config, Input::Bytes { buf, now: self.now });
        assert_eq!(
            again,
            Output::NeedMore { deadline },
            "the same {}-byte window again, before the deadline",
            buf.len()
        );
        self.same_state("after the same window again");
    }

    /// One core call of the step, made while undecided.
    fn check_call(
        &mut self,
        input: Input<'_>,
        output: &Output,
        spoke_before: bool,
        deadline_before: Option<Instant>,
    ) {
        let config = self.config;
        let now = self.now;
        let twin = self.twin.handle_input(config, input);
        assert_eq!(
            &twin, output,
            "a twin core fed {input:?} answers differently"
        );
        self.same_state(&format!("after {input:?}"));
        let core = self.step.core();
        if let Some(before) = deadline_before {
            assert_eq!(
                core.deadline(),
                Some(before),
                "the deadline moved on {input:?}"
            );
        } else {
            // Armed by the first Bytes, or by a server-first timeout that
            // waits for the PROXY header (§4, §8).
            let arms = match input {
                Input::Bytes { .. } => true,
                Input::Timeout { .. } => self.waits_for_header(spoke_before),
                Input::FrontClosed => false,
            };
            let armed = core.deadline();
            assert_eq!(armed.is_some(), arms, "{input:?} armed {armed:?}");
            match (armed, now.checked_add(config.timeout)) {
                (None, _) => {}
                (Some(armed), Some(want)) => assert_eq!(armed, want, "not now + timeout"),
                (Some(armed), None) => assert!(
                    armed >= now + Duration::from_secs(24 * 3600),
                    "a timeout past Instant's range armed {armed:?}, not far in the future"
                ),
            }
        }
        match output {
            Output::NeedMore { deadline } => {
                assert_eq!(Some(*deadline), core.deadline(), "NeedMore's deadline");
                assert!(now < *deadline, "NeedMore at or after its deadline");
                assert_eq!(core.decision(), None, "NeedMore from a decided core");
                let first = *self.need_more.get_or_insert(*deadline);
                assert_eq!(first, *deadline, "NeedMore's deadline moved");
            }
            terminal => assert_eq!(core.decision(), Some(terminal), "not latched"),
        }
        match output {
            Output::Routed(route) if route.fallback.is_some() => {
                assert_eq!(&*route.cluster, DEFAULT_CLUSTER, "a fallback elsewhere");
                assert!(config.default_cluster.is_some());
            }
            Output::Reject(reason) => assert!(
                reason.fallback().is_none() || config.default_cluster.is_none(),
                "{reason} refused although a default cluster is set"
            ),
            Output::Routed(_) | Output::NeedMore { .. } => {}
        }
        match input {
            Input::FrontClosed => assert_eq!(
                output,
                &Output::Reject(RejectReason::FrontClosed),
                "a close before the decision"
            ),
            Input::Timeout { .. } => self.check_timeout(output, spoke_before),
            Input::Bytes { buf, .. } => self.check_bytes(buf, output),
        }
        let spoke = self.step.core().client_spoke();
        assert!(spoke || !spoke_before, "client_spoke went back to false");
        let looked_at = &self.data[..self.looked_at];
        assert_eq!(
            spoke,
            client_spoke(config, looked_at),
            "client_spoke with {} bytes looked at, the PROXY parser says {:?}",
            looked_at.len(),
            config.expect_proxy.then(|| parse_proxy_header(looked_at))
        );
    }

    /// The client is silent and its PROXY header not complete yet: a
    /// server-first timeout has to wait for the header (§8).
    fn waits_for_header(&self, spoke_before: bool) -> bool {
        self.silent(spoke_before) && proxy_header(self.config, &self.data[..self.len]).is_none()
    }

    /// The listener sends a client that has not spoken to the default
    /// cluster on a timeout.
    fn silent(&self, spoke_before: bool) -> bool {
        !spoke_before
            && self.config.server_first_timeout.is_some()
            && self.config.default_cluster.is_some()
    }

    /// A `Timeout` routes only a silent client, past its complete PROXY
    /// header; otherwise it waits only before the deadline.
    fn check_timeout(&mut self, output: &Output, spoke_before: bool) {
        let window = &self.data[..self.len];
        let header = proxy_header(self.config, window);
        let routable = self.silent(spoke_before) && header.is_some();
        let deadline = self.step.core().deadline();
        match (output, header) {
            (Output::Routed(route), Some((offset, source))) if routable => {
                assert_eq!(**route, server_first_route(offset, source));
                assert_eq!(window.len(), offset, "server-first with client bytes");
            }
            (Output::NeedMore { .. }, _) => assert!(
                !routable,
                "a silent client's timeout (header {header:?}) did not route"
            ),
            (Output::Reject(RejectReason::Fragmented), _) => {
                assert!(!routable, "a silent client's timeout was Fragmented");
                assert!(
                    deadline.is_none_or(|d| self.now >= d),
                    "a Timeout before the deadline {deadline:?} was Fragmented"
                );
            }
            (other, _) => panic!(
                "a Timeout (client spoke: {spoke_before}, header {header:?}) answered {other:?}"
            ),
        }
        if self.waits_for_header(spoke_before) {
            self.server_first_waited = true;
        }
    }

    /// `Bytes`: late ones are `Fragmented`; on time, the answer is a fresh
    /// core's and the whole stream's, and the parsers explain it.
    fn check_bytes(&mut self, buf: &[u8], output: &Output) {
        let config = self.config;
        let core = self.step.core();
        let deadline = core.deadline().expect("Bytes armed the deadline");
        if self.now >= deadline {
            assert_eq!(
                output,
                &Output::Reject(RejectReason::Fragmented),
                "Bytes at or after the deadline"
            );
            return;
        }
        self.looked_at = buf.len();
        assert!(
            buf.len() <= self.listener.cap(),
            "the window passed the cap"
        );
        let mut fresh = SniPrereadCore::new();
        let alone = fresh.handle_input(config, Input::Bytes { buf, now: self.now });
        // §8: the header completed after a server-first timeout that waited
        // for it, and the client is still silent: the core routes at once.
        let late_header = self.server_first_waited && !core.client_spoke() && !alone.is_terminal();
        if late_header {
            if let Some((offset, source)) = proxy_header(config, buf) {
                let want = Output::Routed(Arc::new(server_first_route(offset, source)));
                assert_eq!(
                    output, &want,
                    "the PROXY header completed after the server-first timeout, the client silent"
                );
            }
        } else {
            let same = match (&alone, output) {
                (Output::NeedMore { .. }, Output::NeedMore { .. }) => true,
                (a, b) => a == b,
            };
            assert!(same, "a fresh core answers {alone:?} for the same window");
            assert_eq!(
                learned(&fresh),
                learned(core),
                "a fresh core learns otherwise"
            );
            if *output == Output::Reject(RejectReason::TooLarge) {
                assert!(
                    !ends_within(config, self.data, self.listener.cap()),
                    "TooLarge, but the stream holds a hello that ends within the cap"
                );
            }
            if output.is_terminal() {
                assert_eq!(
                    output,
                    &self.one_shot,
                    "the {}-byte window decided differently from the whole capped stream",
                    buf.len()
                );
                if *output != Output::Reject(RejectReason::TooLarge) {
                    assert_eq!(
                        output,
                        &self.one_shot_uncapped,
                        "the {}-byte window decided differently from the whole stream",
                        buf.len()
                    );
                }
            }
        }
        let reading = Reading::of(config, buf);
        let got = (core.sni().copied(), core.proxy_source(), core.fault());
        let read = (reading.sni(), reading.source(), reading.fault());
        assert_eq!(
            got, read,
            "(sni, source, fault), the parsers read {reading:?}"
        );
        assert_eq!(core.content_offset(), reading.offset(), "{reading:?}");
        explain(config, buf, &reading, output, late_header);
    }

    /// Performs the step's actions as the worker does and checks them
    /// against what the caller holds and what the core answered.
    fn perform(&mut self, actions: &Actions, event: &Event<'_>) {
        let output = actions.core.as_ref().map(|call| &call.output);
        for timer in [
            StepTimer::Preread,
            StepTimer::ServerFirst,
            StepTimer::Silent,
        ] {
            let slot = self.held.slot(timer);
            match actions.timers.get(timer) {
                TimerAction::Keep => {}
                TimerAction::Arm(at) => {
                    assert!(slot.is_none(), "{event:?} armed the {timer:?} timer held");
                    *slot = Some(at);
                    match timer {
                        StepTimer::Preread => assert!(
                            matches!(output, Some(Output::NeedMore { deadline }) if *deadline == at),
                            "the preread timer armed at {at:?}, the core answered {output:?}"
                        ),
                        StepTimer::Silent => assert!(
                            matches!(event, Event::Timer(StepTimer::Silent))
                                && self.silent_due == Some(at)
                                && self.now < at,
                            "the silence timer armed at {at:?} on {event:?}, not again after an early fire"
                        ),
                        StepTimer::ServerFirst => panic!("the server-first timer re-armed"),
                    }
                }
                TimerAction::Cancel => assert!(
                    slot.take().is_some(),
                    "{event:?} cancelled the {timer:?} timer, not held"
                ),
            }
        }
        let core = self.step.core();
        let spoke = core.client_spoke();
        // Bytes came (a cut PROXY header included) that were not a whole
        // header alone: a close or a deadline is then the client's reject.
        let said = !core.said_nothing();
        let reading = self.step.is_reading();
        if !matches!(actions.next, Next::Close(Close::Rejected(_))) {
            assert_eq!(actions.farewell, Farewell::Fin, "a farewell to {event:?}");
        }
        assert_eq!(
            actions.left.is_some(),
            !reading,
            "left {:?} on {event:?}, still reading: {reading}",
            actions.left
        );
        match &actions.next {
            Next::Read => {
                assert!(reading, "read on after the exit");
                assert!(self.len < self.listener.cap(), "undecided at the cap");
                assert!(
                    output.is_none_or(|o| !o.is_terminal()),
                    "read on after {output:?}"
                );
                assert_eq!(
                    self.held.preread,
                    core.deadline(),
                    "reading: the preread timer held, at the core's deadline"
                );
                let server_first = self.config.server_first_timeout.is_some()
                    && !self.server_first_fired
                    && !spoke;
                assert_eq!(
                    self.held.server_first.is_some(),
                    server_first,
                    "reading: the server-first timer held until the client spoke (spoke: {spoke})"
                );
                assert_eq!(
                    self.held.silent,
                    self.silent_due.filter(|_| self.first_byte_at.is_none()),
                    "reading: the silence timer held until the first byte"
                );
            }
            Next::Connect(route) => assert_eq!(
                output,
                Some(&Output::Routed(route.clone())),
                "connect without the core's route"
            ),
            Next::Close(Close::Silent) => {
                assert!(!said, "a silent close of a client that sent bytes");
                assert_eq!(
                    output,
                    Some(&Output::Reject(RejectReason::FrontClosed)),
                    "a silent close on {event:?}"
                );
            }
            Next::Close(Close::SilentTimeout) => {
                assert!(!said, "a silent timeout of a client that sent bytes");
                match event {
                    Event::Idle => assert_eq!(output, None, "idle"),
                    Event::Timer(StepTimer::Silent) => {
                        assert_eq!(output, None, "the silence timer asks no core");
                        assert!(self.first_byte_at.is_none(), "silent after a byte");
                        assert!(
                            self.silent_due.is_some_and(|due| self.now >= due),
                            "the silence timer refused at {:?}, due {:?}",
                            self.now,
                            self.silent_due
                        );
                    }
                    _ => assert_eq!(
                        output,
                        Some(&Output::Reject(RejectReason::Fragmented)),
                        "a silent timeout on {event:?}"
                    ),
                }
            }
            Next::Close(Close::Rejected(reason)) => {
                if let Event::Idle = event {
                    assert!(
                        said && *reason == RejectReason::Fragmented,
                        "idle: {reason}"
                    );
                } else {
                    assert_eq!(output, Some(&Output::Reject(*reason)), "closed as {reason}");
                    assert!(
                        !matches!(reason, RejectReason::FrontClosed | RejectReason::Fragmented)
                            || said,
                        "a client that said nothing counted as {reason}"
                    );
                }
            }
            Next::Ignore => panic!("{event:?} ignored before the exit"),
        }
        let Some(left) = actions.left else {
            return;
        };
        assert_eq!(self.held, Held::default(), "the exit left a timer held");
        let since = self.first_byte_at.unwrap_or(self.base);
        let time = self.now.saturating_duration_since(since);
        assert_eq!(left.sample, spoke.then_some(time), "the duration sample");
        assert!(
            !spoke || self.first_byte_at.is_some(),
            "spoke without a byte"
        );
        assert_eq!(self.step.preread_time(), Some(time), "preread_time");
        self.exit = Some(Exit {
            next: actions.next.clone(),
            decision: core.decision().cloned(),
            deadline: core.deadline(),
            client_spoke: spoke,
            preread_time: self.step.preread_time(),
        });
    }

    /// The rest of the stream, then the held timers, each at its time, must
    /// end the preread; then every later event is ignored and the core's
    /// latch holds.
    fn finish(mut self) -> Output {
        while self.step.is_reading() && self.len < self.data.len() {
            self.read(usize::MAX, false);
        }
        while self.step.is_reading() {
            let Some((timer, _)) = self.held.first_due() else {
                break;
            };
            self.fire(Fire::Due);
            assert!(
                timer == StepTimer::ServerFirst || !self.step.is_reading(),
                "no decision after the preread timer fired at the deadline"
            );
        }
        if self.step.is_reading() {
            assert_eq!(
                self.len, 0,
                "bytes arrived, yet no decision and no timer held"
            );
            self.handle(Event::Idle);
        }
        self.probe_after_exit();
        self.probe_latch();
        match &self.exit.as_ref().expect("the step left preread").next {
            Next::Connect(route) => Output::Routed(route.clone()),
            Next::Close(Close::Rejected(reason)) => Output::Reject(*reason),
            Next::Close(Close::Silent) => Output::Reject(RejectReason::FrontClosed),
            Next::Close(Close::SilentTimeout) => Output::Reject(RejectReason::Fragmented),
            other @ (Next::Read | Next::Ignore) => panic!("exited with {other:?}"),
        }
    }

    /// Every kind of event after the exit, at several times, and `abandon`.
    fn probe_after_exit(&mut self) {
        let (data, window) = (self.data, &self.data[..self.len]);
        let now = self.now;
        let later = now + LATER;
        let probes = [
            (
                Event::Read {
                    window: data,
                    added: data.len(),
                    eof: false,
                },
                now,
            ),
            (
                Event::Read {
                    window,
                    added: window.len(),
                    eof: true,
                },
                later,
            ),
            (
                Event::Read {
                    window: &[],
                    added: 0,
                    eof: true,
                },
                self.base,
            ),
            (Event::Timer(StepTimer::Preread), later),
            (Event::Timer(StepTimer::ServerFirst), self.base),
            (Event::Timer(StepTimer::Preread), now),
            (Event::Idle, later),
        ];
        for (event, at) in probes {
            self.now = at;
            self.handle(event);
        }
        self.now = now;
        let actions = self.step.abandon(later);
        let exit = self.exit.as_ref().expect("the step left preread");
        self.check_ignored(&actions, exit, "abandon");
    }

    /// The twin, decided, replays its decision for every kind of input.
    fn probe_latch(&mut self) {
        let Some(decision) = self.twin.decision().cloned() else {
            return;
        };
        let (deadline, spoke) = (self.twin.deadline(), self.twin.client_spoke());
        let later = self.now + LATER;
        for input in [
            Input::Bytes {
                buf: self.data,
                now: self.now,
            },
            Input::Bytes {
                buf: self.data,
                now: later,
            },
            Input::Timeout { now: later },
            Input::FrontClosed,
            Input::Bytes {
                buf: &[],
                now: self.base,
            },
            Input::Timeout { now: self.base },
        ] {
            let again = self.twin.handle_input(self.config, input);
            assert_eq!(again, decision, "{input:?} after the decision changed it");
            assert_eq!(self.twin.decision(), Some(&decision));
            assert_eq!(
                self.twin.deadline(),
                deadline,
                "{input:?} moved the deadline"
            );
            assert_eq!(
                self.twin.client_spoke(),
                spoke,
                "{input:?} moved client_spoke"
            );
        }
    }
}
