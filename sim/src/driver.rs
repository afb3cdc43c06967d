//! The driver: plays a [`Scenario`] through the shipped preread step
//! (`preread_core::step::PrereadStep`, the very code the worker runs) on
//! simulated sockets and a simulated clock, and checks the invariants after
//! every step.
//!
//! Owns: the world around the step, and only that: a client socket whose
//! bytes become readable as the scenario's arrivals say and whose reads add
//! at most the step's budget while the rest stays in the socket, a FIN, a
//! loop that does I/O before timers within a turn, timers that fire late but
//! never early (plus injected early fires), and the gauge and outcome the
//! step's actions produce. Every policy (the budget, the input an event
//! becomes, which timer to arm or cancel, leaving the stage once, the exit,
//! the PROXY handoff) is the step's; the driver performs its actions as the
//! worker does and checks them. The sabotages are defects of a caller (a
//! read past the budget, a delta instead of the window, ...), to show that
//! the checks catch them. Must never: read a real clock for the step (every
//! `now` is `base + simulated offset`), spawn a thread, touch a socket, or
//! re-implement a rule of the step.

use std::fmt;
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use preread_core::step::{
    Actions, Close, Event as StepEvent, Next, PrereadListener, PrereadStep, StepTimer, TimerAction,
    handoff,
};
use preread_core::window::FIRST_WINDOW_BYTES;
use preread_core::{
    FallbackReason, Input, Output, PrereadConfig, RejectReason, Route, SniPrereadCore,
};
use preread_parser::proxy::{ProxyParsed, parse_proxy_header};

pub use preread_core::step::Fed;

use crate::listener::{DEFAULT_CLUSTER, Expect, ProxyMode, ROUTES};
use crate::rng::Rng;
use crate::scenario::{Scenario, Target};

/// Turns of the simulated event loop before a scenario counts as stuck.
const MAX_TURNS: usize = 10_000;

/// How late a timer may wake (poll's resolution, a busy turn).
const MAX_TIMER_LATENESS: Duration = Duration::from_millis(2);

fn as_micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// The client's address on the front socket (the worker's `peer_addr`).
pub const CLIENT: SocketAddr = SocketAddr::new(
    std::net::IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 1)),
    5000,
);
/// The listener's local address.
pub const LOCAL: SocketAddr = SocketAddr::new(
    std::net::IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 0, 1)),
    8443,
);

/// The one base every simulated `now` is an offset of; the core only ever
/// adds to it and compares, so its value does not matter.
fn base() -> Instant {
    static BASE: OnceLock<Instant> = OnceLock::new();
    *BASE.get_or_init(Instant::now)
}

/// What the core answered, with times as offsets from the base.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// `Output::NeedMore`.
    NeedMore {
        /// The deadline, as an offset.
        deadline: Duration,
    },
    /// `Output::Routed`.
    Routed(Arc<Route>),
    /// `Output::Reject`.
    Reject(RejectReason),
}

impl Verdict {
    fn of(output: &Output) -> Self {
        match output {
            Output::NeedMore { deadline } => Self::NeedMore {
                deadline: deadline.saturating_duration_since(base()),
            },
            Output::Routed(route) => Self::Routed(route.clone()),
            Output::Reject(reason) => Self::Reject(*reason),
        }
    }
}

/// Who fed an input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Feeder {
    /// The worker's events (reads, the timers it armed).
    Worker,
    /// An early timer fire injected to probe the contract.
    Probe,
    /// An input after the decision, probing the latch.
    Latch,
}

/// Which timer fired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimerKind {
    /// The preread deadline's timer.
    Preread,
    /// The server-first timer.
    ServerFirst,
    /// The silence timer.
    Silent,
}

impl TimerKind {
    /// Every kind, in the order the worker performs their actions.
    const ALL: [Self; 3] = [Self::Preread, Self::ServerFirst, Self::Silent];

    fn step(self) -> StepTimer {
        match self {
            Self::Preread => StepTimer::Preread,
            Self::ServerFirst => StepTimer::ServerFirst,
            Self::Silent => StepTimer::Silent,
        }
    }
}

/// One line of a trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// Client bytes became readable, up to `end`.
    Arrive { at: Duration, end: usize },
    /// The client's FIN arrived.
    Fin { at: Duration },
    /// A preread read: bytes added, window after it, EOF seen.
    Read {
        at: Duration,
        added: usize,
        window: usize,
        eof: bool,
    },
    /// An input fed to the core and its answer.
    Feed {
        step: usize,
        at: Duration,
        by: Feeder,
        input: Fed,
        verdict: Verdict,
    },
    /// A timer fired.
    Timer { at: Duration, kind: TimerKind },
    /// The active gauge changed.
    Gauge { at: Duration, active: i64 },
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Arrive { at, end } => write!(f, "{at:>12?}  client bytes readable up to {end}"),
            Self::Fin { at } => write!(f, "{at:>12?}  client FIN"),
            Self::Read {
                at,
                added,
                window,
                eof,
            } => {
                write!(
                    f,
                    "{at:>12?}  read +{added} -> window {window}{}",
                    if *eof { ", EOF" } else { "" }
                )
            }
            Self::Feed {
                step,
                at,
                by,
                input,
                verdict,
            } => {
                write!(
                    f,
                    "{at:>12?}  step {step} [{by:?}] {input:?} => {verdict:?}"
                )
            }
            Self::Timer { at, kind } => write!(f, "{at:>12?}  timer {kind:?} fires"),
            Self::Gauge { at, active } => write!(f, "{at:>12?}  gauge active = {active}"),
        }
    }
}

/// How the preread ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Routed; `fallback` says whether by the default cluster.
    Routed {
        /// The fallback reason, if the default cluster took it.
        fallback: Option<FallbackReason>,
    },
    /// Refused and counted under this reason.
    Rejected(RejectReason),
    /// Closed before the client spoke: not counted (a health check).
    Silent,
    /// The client did not speak in time: refused as `silent_timeout`.
    SilentTimeout,
}

impl Outcome {
    /// Whether this is the outcome `target` asks for.
    pub fn matches(&self, target: Target) -> bool {
        match (self, target) {
            (Self::Routed { fallback: None }, Target::Routed) => true,
            (Self::Rejected(r), Target::Reject(want)) => *r == want,
            (Self::Routed { fallback: Some(f) }, Target::Fallback(want)) => *f == want,
            (Self::SilentTimeout, Target::SilentTimeout) => true,
            _ => false,
        }
    }
}

/// A deliberate defect in the caller of the step, so tests can show that
/// the invariants catch it. [`play`] never sabotages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sabotage {
    /// The worker as it is.
    None,
    /// Reads ignore the step's budget: the window may pass the cap.
    IgnoreBudget,
    /// Hands the step the bytes of the last read instead of the whole window.
    FeedDelta,
    /// Reports the EOF before the bytes that came with it.
    EofFirst,
    /// Builds a fresh step for every event: no latch, no fixed deadline.
    FreshCore,
    /// Lowers the gauge on every leave the caller asks for, not on the one
    /// the step reports.
    UnguardedGauge,
    /// Cancels the server-first timer whenever the step says to read on, a
    /// load balancer's PROXY header included.
    HeaderCancelsServerFirst,
    /// Never arms the silence timer: a client that sends nothing waits
    /// for ever.
    NoSilenceTimer,
}

/// Which input took the decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecidedBy {
    /// `Bytes` before the deadline.
    Bytes,
    /// `Bytes` before the deadline and below the cap, `TooLarge`: a record,
    /// handshake or PROXY v2 length announced more than the cap holds.
    Announcement,
    /// `Bytes` at or after the deadline (always `Fragmented`).
    LateBytes,
    /// The preread timer.
    Deadline,
    /// The server-first timer.
    ServerFirst,
    /// The client's close.
    Close,
    /// The step without the core: a client that sent no byte, refused by
    /// the silence timer (the preread timeout from the accept).
    Silence,
}

impl DecidedBy {
    /// Every kind, for reports.
    pub const ALL: [Self; 7] = [
        Self::Bytes,
        Self::Announcement,
        Self::LateBytes,
        Self::Deadline,
        Self::ServerFirst,
        Self::Close,
        Self::Silence,
    ];
}

/// A scenario that ran to its end with every invariant holding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Played {
    /// How it ended.
    pub outcome: Outcome,
    /// What decided it.
    pub decided_by: DecidedBy,
    /// Every step.
    pub trace: Vec<Event>,
    /// Inputs fed to the core (worker, probes and latch probes).
    pub steps: usize,
}

/// A broken invariant: the seed, the step, what broke, and the trace.
#[derive(Debug, Clone)]
pub struct Failure {
    /// Replay with `SIM_SEED=<seed>`.
    pub seed: u64,
    /// The core input count when it broke.
    pub step: usize,
    /// What broke.
    pub message: String,
    /// The scenario, described.
    pub scenario: String,
    /// Every step up to the failure.
    pub trace: Vec<Event>,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "invariant broken at step {} of seed {} (replay: SIM_SEED={} cargo test -p sim)",
            self.step, self.seed, self.seed
        )?;
        writeln!(f, "  {}", self.message)?;
        writeln!(f, "  {}", self.scenario)?;
        writeln!(f, "  trace:")?;
        for event in &self.trace {
            writeln!(f, "    {event}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Failure {}

struct Timer {
    at: Duration,
    wake: Duration,
    seq: u64,
}

struct Decision {
    by: DecidedBy,
    /// When, on the simulated clock.
    at: Duration,
    output: Output,
    deadline: Option<Instant>,
    spoke: bool,
}

struct Driver<'s> {
    sc: &'s Scenario,
    /// The listener as the worker holds it.
    listener: PrereadListener,
    /// The core's config: `listener.config`, for the checks.
    config: PrereadConfig,
    step: PrereadStep,
    /// The preread window (the pooled buffer's data).
    window: Vec<u8>,
    /// The window's buffer, grown as the step says before each read.
    window_capacity: usize,
    /// The listener's effective cap.
    cap: usize,
    now: Duration,
    /// Bytes of the stream the kernel holds (read or not).
    arrived: usize,
    fin: bool,
    readable: bool,
    dirty: bool,
    preread_timer: Option<Timer>,
    server_first_timer: Option<Timer>,
    silent_timer: Option<Timer>,
    seq: u64,
    rng: Rng,
    decided: Option<Decision>,
    outcome: Option<Outcome>,
    /// When the step left preread, on the simulated clock.
    exit_at: Option<Duration>,
    gauge: i64,
    gauge_downs: u32,
    /// The core's verdict on the whole stream as the cap lets it arrive.
    one_shot: Output,
    capped_len: usize,
    trace: Vec<Event>,
    steps: usize,
    sabotage: Sabotage,
    /// Window length at the worker's last read that added bytes.
    fed: usize,
    /// When the window first held the whole PROXY header.
    header_done_at: Option<Duration>,
    /// The server-first timer fired while the PROXY header was incomplete:
    /// the core must route as soon as the header completes, if the client
    /// is still silent.
    server_first_due: bool,
}

/// Plays `sc`; `Err` names the first broken invariant.
pub fn play(sc: &Scenario) -> Result<Played, Failure> {
    play_sabotaged(sc, Sabotage::None)
}

/// Plays `sc` with a defect in the modelled shell (for testing the checks).
pub fn play_sabotaged(sc: &Scenario, sabotage: Sabotage) -> Result<Played, Failure> {
    let listener = sc.listener.preread();
    let config = listener.config.clone();
    let cap = listener.cap();
    let capped_len = sc.stream.len().min(cap);
    let one_shot = SniPrereadCore::new().handle_input(
        &config,
        Input::Bytes {
            buf: &sc.stream[..capped_len],
            now: base(),
        },
    );
    let (step, accepted) = PrereadStep::accept(&listener, base());
    let mut driver = Driver {
        sc,
        listener,
        config,
        step,
        window: Vec::new(),
        window_capacity: FIRST_WINDOW_BYTES,
        cap,
        now: Duration::ZERO,
        arrived: 0,
        fin: false,
        readable: false,
        dirty: false,
        preread_timer: None,
        server_first_timer: None,
        silent_timer: None,
        seq: 0,
        rng: Rng::new(sc.jitter_seed),
        decided: None,
        outcome: None,
        exit_at: None,
        gauge: 0,
        gauge_downs: 0,
        one_shot,
        capped_len,
        trace: Vec::new(),
        steps: 0,
        sabotage,
        fed: 0,
        header_done_at: None,
        server_first_due: false,
    };
    driver.run(accepted)?;
    driver.finish()
}

impl Driver<'_> {
    fn fail<T>(&self, message: impl Into<String>) -> Result<T, Failure> {
        Err(Failure {
            seed: self.sc.seed,
            step: self.steps,
            message: message.into(),
            scenario: self.sc.describe(),
            trace: self.trace.clone(),
        })
    }

    fn instant(&self) -> Instant {
        base() + self.now
    }

    /// The listener sends silent clients to its default cluster.
    fn server_first_on(&self) -> bool {
        self.config.server_first_timeout.is_some() && self.config.default_cluster.is_some()
    }

    /// The window holds the whole valid PROXY header the scenario wrote.
    fn header_in_window(&self) -> bool {
        self.config.expect_proxy
            && self.sc.truth.prefix_valid
            && self.window.len() >= self.sc.truth.prefix_len
    }

    /// The window holds exactly the PROXY header: the client is silent.
    fn header_only(&self) -> bool {
        self.header_in_window() && self.window.len() == self.sc.truth.prefix_len
    }

    /// A server-first `Timeout` that has to wait for the PROXY header.
    fn waits_for_header(&self, spoke_before: bool) -> bool {
        !spoke_before
            && self.server_first_on()
            && self.config.expect_proxy
            && !self.header_in_window()
    }

    /// Whether the client has spoken, from what the scenario wrote; `None`
    /// where only the parser can tell (bytes that are no valid header).
    fn spoke_model(&self) -> Option<bool> {
        if !self.config.expect_proxy {
            Some(!self.window.is_empty())
        } else if self.sc.truth.prefix_valid {
            Some(self.window.len() > self.sc.truth.prefix_len)
        } else {
            None
        }
    }

    /// The server-first route: past the PROXY header, with its source.
    fn server_first_route(&self) -> Output {
        let cluster = Arc::from(DEFAULT_CLUSTER);
        let mut route = Route::unread(cluster, Some(FallbackReason::ServerFirst));
        if self.config.expect_proxy {
            route.content_offset = self.sc.truth.prefix_len;
            route.proxy_source = self.sc.truth.source;
        }
        Output::Routed(Arc::new(route))
    }

    fn arm(&mut self, at: Duration) -> Timer {
        self.seq += 1;
        // The loop may wake late (poll's resolution, a busy turn), never early.
        let late = if self.rng.chance(70) {
            Duration::ZERO
        } else {
            Duration::from_micros(self.rng.range_u64(1, as_micros(MAX_TIMER_LATENESS)))
        };
        Timer {
            at,
            wake: at + late,
            seq: self.seq,
        }
    }

    fn gauge_event(&mut self) {
        self.trace.push(Event::Gauge {
            at: self.now,
            active: self.gauge,
        });
    }

    /// The worker's accept: the gauge goes up for a session that prereads,
    /// then the step's first actions (the server-first timer).
    fn accept(&mut self, actions: Actions) -> Result<(), Failure> {
        if !self.step.is_reading() {
            return self.fail("a listener without a catch-all did not enter preread");
        }
        self.gauge += 1;
        self.gauge_event();
        self.perform(actions)
    }

    /// The worker's close: the step leaves the stage if it had not (the
    /// gauge goes down only if the step says so, once).
    fn close(&mut self) -> Result<(), Failure> {
        let left = self.step.abandon(self.instant());
        if self.sabotage == Sabotage::UnguardedGauge && left.left.is_none() {
            self.gauge -= 1;
            self.gauge_downs += 1;
        }
        self.perform(left)
    }

    fn run(&mut self, accepted: Actions) -> Result<(), Failure> {
        self.accept(accepted)?;
        let sc = self.sc;
        let mut next_arrival = 0;
        let mut fin_delivered = false;
        let mut next_probe = 0;
        for _ in 0..MAX_TURNS {
            // poll: the socket events due by now.
            while let Some(a) = sc.arrivals.get(next_arrival).filter(|a| a.at <= self.now) {
                self.arrived = a.end;
                self.readable = true;
                self.dirty = true;
                self.trace.push(Event::Arrive {
                    at: self.now,
                    end: a.end,
                });
                next_arrival += 1;
            }
            if let Some(close) = sc.close
                && !fin_delivered
                && close <= self.now
                && next_arrival == sc.arrivals.len()
            {
                fin_delivered = true;
                self.fin = true;
                self.readable = true;
                self.dirty = true;
                self.trace.push(Event::Fin { at: self.now });
            }
            // drive_dirty, then fire_timers.
            if self.dirty && self.decided.is_none() {
                self.dirty = false;
                self.drive()?;
            }
            self.fire_timers()?;
            while let Some(&at) = sc.probes.get(next_probe).filter(|&&at| at <= self.now) {
                next_probe += 1;
                self.probe(at)?;
            }
            if self.decided.is_some() || self.outcome.is_some() {
                return Ok(());
            }
            if self.dirty {
                // Re-queued: driven again in the next turn, no time passes.
                continue;
            }
            let next = [
                sc.arrivals.get(next_arrival).map(|a| a.at),
                sc.close.filter(|_| !fin_delivered),
                self.preread_timer.as_ref().map(|t| t.wake),
                self.server_first_timer.as_ref().map(|t| t.wake),
                self.silent_timer.as_ref().map(|t| t.wake),
                sc.probes.get(next_probe).copied(),
            ]
            .into_iter()
            .flatten()
            .min();
            match next {
                Some(t) => self.now = self.now.max(t),
                None => return Ok(()),
            }
        }
        self.fail("the event loop made no progress")
    }

    /// The worker's `preread::drive`: the capped read into the window.
    fn drive(&mut self) -> Result<(), Failure> {
        let budget = if self.sabotage == Sabotage::IgnoreBudget {
            usize::MAX
        } else {
            self.step.read_budget(&self.listener, self.window.len())
        };
        let grown =
            self.step
                .window_capacity(&self.listener, self.window_capacity, self.window.len());
        // The window costs memory only for a hello that needs it: it grows
        // from full, never past the cap.
        if grown != self.window_capacity
            && (self.window.len() < self.window_capacity || grown > self.cap)
        {
            return self.fail(format!(
                "the window grew from {} bytes holding {} to {grown} (cap {})",
                self.window_capacity,
                self.window.len(),
                self.cap
            ));
        }
        self.window_capacity = grown;
        let capacity = self.window_capacity;
        let mut left = budget;
        let mut added = 0;
        let mut eof = false;
        while self.readable && left > 0 {
            let space = capacity.saturating_sub(self.window.len());
            if space == 0 {
                break;
            }
            let want = space.min(left);
            let len = self.window.len();
            if self.arrived > len {
                let n = want.min(self.arrived - len);
                self.window.extend_from_slice(&self.sc.stream[len..len + n]);
                added += n;
                left -= n;
            } else if self.fin {
                eof = true;
                break;
            } else {
                // WouldBlock.
                self.readable = false;
            }
        }
        self.trace.push(Event::Read {
            at: self.now,
            added,
            window: self.window.len(),
            eof,
        });
        if self.header_done_at.is_none() && self.header_in_window() {
            self.header_done_at = Some(self.now);
        }
        if self.window.len() > self.cap {
            return self.fail(format!(
                "the window ({} bytes) passed the effective cap ({})",
                self.window.len(),
                self.cap
            ));
        }
        if self.window.len() > capacity {
            return self.fail("the window passed the buffer's capacity");
        }
        let (added, eof) = if eof && added > 0 && self.sabotage == Sabotage::EofFirst {
            (0, true)
        } else {
            (added, eof)
        };
        if added == 0 && !eof {
            return Ok(());
        }
        if added > 0 {
            self.fed = self.window.len();
        }
        let from = if self.sabotage == Sabotage::FeedDelta {
            self.window.len() - added
        } else {
            0
        };
        // A copy: the checks read `self.window` while the step has it.
        let window = self.window.clone();
        self.handle(
            StepEvent::Read {
                window: &window[from..],
                added,
                eof,
            },
            Feeder::Worker,
        )
    }

    /// The slot of one timer.
    fn timer(&mut self, kind: TimerKind) -> &mut Option<Timer> {
        match kind {
            TimerKind::Preread => &mut self.preread_timer,
            TimerKind::ServerFirst => &mut self.server_first_timer,
            TimerKind::Silent => &mut self.silent_timer,
        }
    }

    /// `Worker::fire_timers` → `Worker::on_timer`, in (deadline, schedule) order.
    fn fire_timers(&mut self) -> Result<(), Failure> {
        loop {
            let now = self.now;
            let due = TimerKind::ALL
                .into_iter()
                .filter_map(|kind| {
                    let timer = self.timer(kind).as_ref()?;
                    Some((timer.at, timer.seq, kind))
                })
                .filter(|&(at, _, _)| at <= now)
                .min_by_key(|&(at, seq, _)| (at, seq));
            let Some((_, _, kind)) = due else {
                return Ok(());
            };
            *self.timer(kind) = None;
            self.trace.push(Event::Timer { at: self.now, kind });
            self.handle(StepEvent::Timer(kind.step()), Feeder::Worker)?;
        }
    }

    /// An early fire of the preread timer (a stale or early wake-up):
    /// allowed by the contract once the client spoke (before, a `Timeout`
    /// is the server-first timer's), it must change nothing but re-arm it.
    fn probe(&mut self, _at: Duration) -> Result<(), Failure> {
        let core = self.step.core();
        let ahead = core.deadline().is_some_and(|d| self.instant() < d);
        if self.decided.is_none() && core.client_spoke() && ahead {
            // The worker no longer holds a timer that fired.
            self.preread_timer = None;
            self.handle(StepEvent::Timer(StepTimer::Preread), Feeder::Probe)?;
        }
        Ok(())
    }

    /// Hands one event to the step, checks the core call it made (if any)
    /// against the contract, then performs the step's actions.
    fn handle(&mut self, event: StepEvent<'_>, by: Feeder) -> Result<(), Failure> {
        let now = self.instant();
        let deadline_before = self.step.core().deadline();
        let spoke_before = self.step.core().client_spoke();
        if self.sabotage == Sabotage::FreshCore && by == Feeder::Worker {
            self.step = PrereadStep::accept(&self.listener, now).0;
        }
        let actions = self.step.handle(&self.listener, event, now);
        if let Some(decision) = &self.decided {
            // The latch: after the decision the step acts on nothing, and
            // nothing of the core's state moves.
            let core = self.step.core();
            if actions.core.is_some() || actions.next != Next::Ignore || actions.left.is_some() {
                return self.fail(format!(
                    "the latch broke: {event:?} after {:?} gave {actions:?}",
                    decision.output
                ));
            }
            if core.decision() != Some(&decision.output)
                || core.deadline() != decision.deadline
                || core.client_spoke() != decision.spoke
            {
                return self.fail("a latched core changed its state");
            }
            return self.perform(actions);
        }
        if let Some(call) = &actions.core {
            self.steps += 1;
            self.check_call(call.fed, &call.output, by, spoke_before, deadline_before)?;
        }
        self.perform(actions)
    }

    /// One core call of the step, undecided before it: the trace, the
    /// deadline, the answer, `client_spoke`, and the decision.
    fn check_call(
        &mut self,
        input: Fed,
        output: &Output,
        by: Feeder,
        spoke_before: bool,
        deadline_before: Option<Instant>,
    ) -> Result<(), Failure> {
        let now = self.instant();
        self.trace.push(Event::Feed {
            step: self.steps,
            at: self.now,
            by,
            input,
            verdict: Verdict::of(output),
        });
        // The deadline: armed at now + timeout by the first Bytes (or by a
        // server-first timeout that must wait for a PROXY header), then fixed.
        match deadline_before {
            Some(before) if self.step.core().deadline() != Some(before) => {
                return self.fail(format!(
                    "the deadline moved from {before:?} to {:?}",
                    self.step.core().deadline()
                ));
            }
            Some(_) => {}
            None => match input {
                Fed::Bytes(_) => {
                    let want = now.checked_add(self.config.timeout);
                    if self.step.core().deadline() != want {
                        return self.fail(format!(
                            "the first Bytes armed {:?}, not now + timeout",
                            self.step.core().deadline()
                        ));
                    }
                }
                Fed::Timeout if self.waits_for_header(spoke_before) => {
                    if self.step.core().deadline() != now.checked_add(self.config.timeout) {
                        return self.fail(format!(
                            "a server-first timeout before the PROXY header armed {:?}, not now + timeout",
                            self.step.core().deadline()
                        ));
                    }
                }
                Fed::Timeout | Fed::FrontClosed => {
                    if self.step.core().deadline().is_some() {
                        return self.fail("an input other than Bytes armed the deadline");
                    }
                }
            },
        }
        match output {
            Output::NeedMore { deadline } => {
                if Some(*deadline) != self.step.core().deadline() {
                    return self.fail("NeedMore does not carry the armed deadline");
                }
                if self.step.core().decision().is_some() {
                    return self.fail("NeedMore from a decided core");
                }
            }
            terminal => {
                if self.step.core().decision() != Some(terminal) {
                    return self.fail("a terminal output was not latched");
                }
            }
        }
        self.check_answer(input, output, spoke_before, deadline_before)?;
        if input == Fed::Timeout && !output.is_terminal() && self.waits_for_header(spoke_before) {
            self.server_first_due = true;
        }
        if by == Feeder::Worker
            && matches!(input, Fed::Bytes(_))
            && !output.is_terminal()
            && let Some(want) = self.spoke_model()
            && self.step.core().client_spoke() != want
        {
            return self.fail(format!(
                "client_spoke is {} with {} bytes in the window, the PROXY header written was {} bytes",
                !want,
                self.window.len(),
                self.sc.truth.prefix_len
            ));
        }
        if output.is_terminal() {
            self.check_terminal(output, spoke_before)?;
            let server_first = matches!(output, Output::Routed(r) if r.fallback == Some(FallbackReason::ServerFirst));
            let by = match input {
                Fed::Bytes(_) if self.step.core().deadline().is_some_and(|d| now >= d) => {
                    DecidedBy::LateBytes
                }
                Fed::Bytes(_)
                    if *output == Output::Reject(RejectReason::TooLarge)
                        && self.window.len() < self.cap =>
                {
                    DecidedBy::Announcement
                }
                Fed::Bytes(_) => DecidedBy::Bytes,
                Fed::Timeout if server_first => DecidedBy::ServerFirst,
                Fed::Timeout => DecidedBy::Deadline,
                Fed::FrontClosed => DecidedBy::Close,
            };
            self.decided = Some(Decision {
                by,
                at: self.now,
                output: output.clone(),
                deadline: self.step.core().deadline(),
                spoke: self.step.core().client_spoke(),
            });
        }
        Ok(())
    }

    /// The undecided core's answer against the contract and the one-shot
    /// verdict on the whole capped stream.
    fn check_answer(
        &self,
        input: Fed,
        output: &Output,
        spoke_before: bool,
        deadline_before: Option<Instant>,
    ) -> Result<(), Failure> {
        let now = self.instant();
        if matches!(input, Fed::Timeout | Fed::FrontClosed) {
            // I/O before timers, bytes before their EOF: by the time a timer
            // or a close is acted on, every readable byte (up to the cap) is
            // in the window and the core has seen it.
            let readable = self.arrived.min(self.cap);
            if self.window.len() != readable || self.fed != self.window.len() {
                return self.fail(format!(
                    "{input:?} acted on with {readable} bytes readable, {} in the window, {} fed to the core",
                    self.window.len(),
                    self.fed
                ));
            }
        }
        match input {
            Fed::Bytes(_) => {
                let Some(deadline) = self.step.core().deadline() else {
                    return self.fail("Bytes left no deadline");
                };
                if now >= deadline {
                    if *output != Output::Reject(RejectReason::Fragmented) {
                        return self.fail(format!(
                            "Bytes at or after the deadline gave {output:?}, not Fragmented"
                        ));
                    }
                    return Ok(());
                }
                if let Some(at) = self.sc.truth.announced_at
                    && self.window.len() >= at
                    && *output != Output::Reject(RejectReason::TooLarge)
                {
                    return self.fail(format!(
                        "the window holds the {at} bytes whose length fields announce more than the cap ({}), yet the core answered {output:?}",
                        self.cap
                    ));
                }
                // A window at the cap is TooLarge first: more may wait unread.
                if self.server_first_due && self.header_only() && self.window.len() < self.cap {
                    let want = self.server_first_route();
                    if *output != want {
                        return self.fail(format!(
                            "the PROXY header completed after the server-first timer, the client silent: {output:?}, not {want:?}"
                        ));
                    }
                    return Ok(());
                }
                // No hidden state: a fresh core says the same of this window.
                let fresh = SniPrereadCore::new().handle_input(
                    &self.config,
                    Input::Bytes {
                        buf: &self.window,
                        now,
                    },
                );
                let same = match (&fresh, output) {
                    (Output::NeedMore { .. }, Output::NeedMore { .. }) => true,
                    (a, b) => a == b,
                };
                if !same {
                    return self.fail(format!("the core answered {output:?}, a fresh core answers {fresh:?} for the same window"));
                }
                if output.is_terminal() && *output != self.one_shot {
                    return self.fail(format!(
                        "the window of {} bytes decided {output:?}, but the whole stream as the cap lets it arrive ({} bytes) decides {:?}",
                        self.window.len(),
                        self.capped_len,
                        self.one_shot
                    ));
                }
                if self.window.len() == self.capped_len
                    && output.is_terminal() != self.one_shot.is_terminal()
                {
                    return self.fail(format!(
                        "the whole capped stream is in the window, yet the core answered {output:?} where one shot answers {:?}",
                        self.one_shot
                    ));
                }
            }
            Fed::Timeout => {
                let server_first = !spoke_before && self.server_first_on();
                let deadline = if self.waits_for_header(spoke_before) {
                    deadline_before.or(now.checked_add(self.config.timeout))
                } else {
                    deadline_before
                };
                let want = match deadline {
                    _ if server_first && (!self.config.expect_proxy || self.header_in_window()) => {
                        self.server_first_route()
                    }
                    Some(deadline) if now < deadline => Output::NeedMore { deadline },
                    _ => Output::Reject(RejectReason::Fragmented),
                };
                if *output != want {
                    return self.fail(format!(
                        "a timeout (client spoke: {spoke_before}, {} bytes in the window) gave {output:?}, not {want:?}",
                        self.window.len()
                    ));
                }
            }
            Fed::FrontClosed => {
                if *output != Output::Reject(RejectReason::FrontClosed) {
                    return self.fail(format!("a close gave {output:?}"));
                }
            }
        }
        Ok(())
    }

    /// What a terminal output must satisfy, whatever decided it.
    fn check_terminal(&self, output: &Output, spoke_before: bool) -> Result<(), Failure> {
        let config = &self.config;
        let truth = &self.sc.truth;
        match output {
            Output::Routed(route) => {
                let window = self.window.len();
                if route.content_offset > window {
                    return self.fail("content_offset lies past the window");
                }
                if let Some(end) = route.hello_end
                    && (end > window || end <= route.content_offset)
                {
                    return self.fail(format!(
                        "hello_end {end} outside ({}, {window}]",
                        route.content_offset
                    ));
                }
                match route.fallback {
                    None => {
                        let known = self
                            .sc
                            .listener
                            .routes
                            .iter()
                            .any(|&i| ROUTES[i].2 == &*route.cluster);
                        if !known
                            || route.matched_sni.is_none()
                            || route.sni.is_none()
                            || route.hello_end.is_none()
                        {
                            return self
                                .fail(format!("a frontend route without its evidence: {route:?}"));
                        }
                        if truth.sni.is_some() && route.sni != truth.sni {
                            return self.fail(format!(
                                "routed on {:?}, the hello says {:?}",
                                route.sni, truth.sni
                            ));
                        }
                    }
                    Some(reason) => {
                        if config.default_cluster.as_deref() != Some(DEFAULT_CLUSTER)
                            || &*route.cluster != DEFAULT_CLUSTER
                        {
                            return self.fail("a fallback outside the default cluster");
                        }
                        if reason == FallbackReason::ServerFirst && spoke_before {
                            return self.fail("server-first after the client spoke");
                        }
                    }
                }
                let (offset, source) = if config.expect_proxy {
                    (truth.prefix_len, truth.source)
                } else {
                    (0, None)
                };
                if (!config.expect_proxy || truth.prefix_valid)
                    && (route.content_offset != offset || route.proxy_source != source)
                {
                    return self.fail(format!(
                        "content_offset {} / source {:?}, the PROXY header written was {offset} bytes from {source:?}",
                        route.content_offset, route.proxy_source
                    ));
                }
                if let Some(expect) = &truth.lookup
                    && route.fallback.is_none()
                {
                    let got = Expect::Matched {
                        cluster: ROUTES
                            .iter()
                            .find(|r| r.2 == &*route.cluster)
                            .map_or("?", |r| r.2),
                        protocol: route.matched_alpn.as_deref().map(<[u8]>::to_vec),
                    };
                    if got != *expect {
                        return self.fail(format!(
                            "the lookup gave {got:?}, the precedence rules say {expect:?}"
                        ));
                    }
                }
                if route.fallback == Some(FallbackReason::SniUnmatched)
                    && let Some(expect) = &truth.lookup
                    && *expect != Expect::SniUnmatched
                {
                    return self.fail(format!(
                        "fell back as unmatched, the precedence rules say {expect:?}"
                    ));
                }
                if let (Some(want), Some(end)) = (truth.hello_end, route.hello_end)
                    && want != end
                {
                    return self.fail(format!("hello_end {end}, the records end at {want}"));
                }
            }
            Output::Reject(reason) => {
                if reason.fallback().is_some() && config.default_cluster.is_some() {
                    return self.fail(format!(
                        "{reason} refused although a default cluster is set"
                    ));
                }
                let lookup = match reason {
                    RejectReason::SniUnmatched => Some(Expect::SniUnmatched),
                    RejectReason::AlpnUnmatched => Some(Expect::AlpnUnmatched),
                    _ => None,
                };
                if let (Some(got), Some(expect)) = (lookup, &truth.lookup)
                    && got != *expect
                {
                    return self.fail(format!(
                        "refused {reason}, the precedence rules say {expect:?}"
                    ));
                }
            }
            Output::NeedMore { .. } => {}
        }
        Ok(())
    }

    /// Performs the step's actions as the worker does: the timers it arms
    /// or cancels (which must be the ones the worker holds), the gauge, and
    /// the outcome.
    fn perform(&mut self, actions: Actions) -> Result<(), Failure> {
        for kind in TimerKind::ALL {
            let action = match actions.timers.get(kind.step()) {
                TimerAction::Arm(_)
                    if kind == TimerKind::Silent && self.sabotage == Sabotage::NoSilenceTimer =>
                {
                    continue;
                }
                action => action,
            };
            let held = self.timer(kind).is_some();
            let timer = match action {
                TimerAction::Keep => continue,
                TimerAction::Arm(_) if held => {
                    return self.fail(format!("the step armed the {kind:?} timer twice"));
                }
                TimerAction::Cancel if !held => {
                    return self.fail(format!("the step cancelled a {kind:?} timer not armed"));
                }
                TimerAction::Arm(at) => Some(self.arm(at.saturating_duration_since(base()))),
                TimerAction::Cancel => None,
            };
            *self.timer(kind) = timer;
        }
        if actions.left.is_some() {
            self.gauge -= 1;
            self.gauge_downs += 1;
            self.gauge_event();
        }
        match actions.next {
            Next::Read => {
                if self.sabotage == Sabotage::HeaderCancelsServerFirst {
                    self.server_first_timer = None;
                }
                if self.readable {
                    self.dirty = true;
                }
            }
            Next::Ignore => {}
            Next::Close(Close::Silent) => self.exit(Outcome::Silent),
            Next::Close(Close::SilentTimeout) => self.exit(Outcome::SilentTimeout),
            Next::Close(Close::Rejected(reason)) => self.exit(Outcome::Rejected(reason)),
            Next::Connect(route) => self.exit(Outcome::Routed {
                fallback: route.fallback,
            }),
        }
        Ok(())
    }

    fn exit(&mut self, outcome: Outcome) {
        self.outcome = Some(outcome);
        self.exit_at.get_or_insert(self.now);
    }

    fn finish(mut self) -> Result<Played, Failure> {
        if self.outcome.is_none() {
            // Even a client that never sends a byte has a timer pending:
            // the silence timer, or the server-first one.
            return self.fail("no decision and no timer pending: the session would wait forever");
        }
        // The worker's close leaves the stage again: that changes nothing.
        self.close()?;
        if self.gauge != 0 || self.gauge_downs != 1 {
            return self.fail(format!(
                "the active gauge ends at {} after {} decrements",
                self.gauge, self.gauge_downs
            ));
        }
        let outcome = self.outcome.clone().unwrap_or(Outcome::Silent);
        // A load balancer's header and nothing else (a health check, or a
        // server-first client behind it): silent, or the server-first
        // fallback, or (without one) the deadline; never a client's reject
        // once the header is whole. A header still cut when the deadline
        // or the close came (or finished only by bytes past the deadline)
        // is bytes that never made a header: the client's `fragmented` or
        // `front_closed` (issue 28).
        if self.header_only() && self.sc.stream.len() == self.sc.truth.prefix_len {
            let late = self.decided.as_ref().map(|d| d.by) == Some(DecidedBy::LateBytes);
            let cut = self.window.len() < self.sc.truth.prefix_len || late;
            let fine = match &outcome {
                Outcome::Silent => !cut,
                Outcome::Routed {
                    fallback: Some(FallbackReason::ServerFirst),
                } => self.server_first_on(),
                Outcome::Rejected(RejectReason::TooLarge) => self.window.len() >= self.cap,
                Outcome::Rejected(RejectReason::Fragmented | RejectReason::FrontClosed) => cut,
                Outcome::SilentTimeout => !self.server_first_on() && !cut,
                _ => false,
            };
            if !fine {
                return self.fail(format!(
                    "only a PROXY header arrived, and the connection ended {outcome:?}"
                ));
            }
        }
        self.check_silence(&outcome)?;
        if let Some(target) = self.sc.target
            && !outcome.matches(target)
        {
            return self.fail(format!("built for {}, ended {outcome:?}", target.name()));
        }
        if self.decided.is_some() {
            self.latch_probes()?;
        }
        if let Some(decision) = &self.decided
            && let Output::Routed(route) = &decision.output
        {
            if route.fallback == Some(FallbackReason::ServerFirst)
                && let Some(timer) = self.config.server_first_timeout
            {
                // On time: by the timer, or on the load balancer's header
                // when that completes later.
                let bound =
                    (timer + MAX_TIMER_LATENESS).max(self.header_done_at.unwrap_or_default());
                if decision.at > bound {
                    return self.fail(format!(
                        "the server-first fallback came at {:?}, after its timer ({timer:?}) and the PROXY header ({:?})",
                        decision.at, self.header_done_at
                    ));
                }
            }
            let route = route.clone();
            self.check_handoff(&route)?;
        }
        self.check_reframing()?;
        let decided_by = self.decided.as_ref().map_or(DecidedBy::Silence, |d| d.by);
        Ok(Played {
            outcome,
            decided_by,
            trace: self.trace,
            steps: self.steps,
        })
    }

    /// A client that sends nothing, from the accept past the preread
    /// timeout, holds no slot beyond it: refused as a silent timeout when
    /// the silence timer fires (late by at most the loop's lateness), or
    /// routed by an earlier server-first timer. A server-first timer at
    /// least as long as the timeout takes such clients instead; a client
    /// that spoke or closed in time is judged by the rest.
    fn check_silence(&self, outcome: &Outcome) -> Result<(), Failure> {
        let timeout = self.config.timeout;
        let server_first = self.config.server_first_timeout;
        if server_first.is_some_and(|wait| wait >= timeout) {
            return Ok(());
        }
        let late = timeout + MAX_TIMER_LATENESS;
        let spoke_in_time = self.sc.arrivals.first().is_some_and(|a| a.at <= late);
        let closed_in_time = self.sc.close.is_some_and(|at| at <= late);
        if spoke_in_time || closed_in_time {
            if *outcome == Outcome::SilentTimeout
                && self.decided.is_none()
                && self.sc.arrivals.first().is_some_and(|a| a.at < timeout)
            {
                return self.fail("the silence timer refused a client that sent bytes before it");
            }
            return Ok(());
        }
        let exit = self.exit_at.unwrap_or(Duration::MAX);
        let fine = match outcome {
            Outcome::SilentTimeout => (timeout..=late).contains(&exit),
            Outcome::Routed {
                fallback: Some(FallbackReason::ServerFirst),
            } => server_first.is_some_and(|wait| exit <= wait + MAX_TIMER_LATENESS),
            _ => false,
        };
        if !fine {
            return self.fail(format!(
                "a client silent past the timeout ({timeout:?}) ended {outcome:?} at {exit:?}"
            ));
        }
        Ok(())
    }

    /// Every kind of event after the decision is ignored, and the core's
    /// decision, deadline and `client_spoke` stay as they were.
    fn latch_probes(&mut self) -> Result<(), Failure> {
        let everything = self.sc.stream.clone();
        let saved = self.window.clone();
        let later = self.now + Duration::from_secs(3600);
        let now = self.now;
        let events: [(StepEvent<'_>, Duration); 7] = [
            (
                StepEvent::Read {
                    window: &everything,
                    added: everything.len(),
                    eof: false,
                },
                now,
            ),
            (
                StepEvent::Read {
                    window: &saved,
                    added: saved.len(),
                    eof: false,
                },
                later,
            ),
            (
                StepEvent::Read {
                    window: &[],
                    added: 0,
                    eof: true,
                },
                Duration::ZERO,
            ),
            (StepEvent::Timer(StepTimer::Preread), later),
            (StepEvent::Timer(StepTimer::ServerFirst), Duration::ZERO),
            (StepEvent::Timer(StepTimer::Preread), now),
            (StepEvent::Idle, later),
        ];
        for (event, at) in events {
            self.now = at;
            self.handle(event, Feeder::Latch)?;
        }
        self.now = now;
        Ok(())
    }

    /// What the backend receives equals the client's bytes from the right
    /// offset: the window from `content_offset` (`none`, `send`) or 0
    /// (`relay`), then everything the client sends later.
    fn check_handoff(&mut self, route: &Route) -> Result<(), Failure> {
        let mode = self.sc.listener.mode;
        let plan = handoff(mode, route, CLIENT, LOCAL);
        match mode {
            ProxyMode::Send => match parse_proxy_header(&plan.prefix) {
                Ok(ProxyParsed::Complete(h))
                    if h.len() == plan.prefix.len()
                        && h.authority() == route.sni.as_ref().map(|s| s.as_bytes())
                        && h.alpn() == route.matched_alpn.as_deref()
                        && (h.source() == Some(route.proxy_source.unwrap_or(CLIENT))
                            || route.proxy_source.unwrap_or(CLIENT).is_ipv4()
                                != LOCAL.is_ipv4()) => {}
                other => {
                    return self.fail(format!(
                        "the send-mode header does not read back: {other:?}"
                    ));
                }
            },
            ProxyMode::None | ProxyMode::Relay => {
                if !plan.prefix.is_empty() {
                    return self.fail(format!("{mode:?} synthesized a header"));
                }
            }
        }
        let skip = plan.replay_from;
        let mut backend = self.window[skip.min(self.window.len())..].to_vec();
        backend.extend_from_slice(&self.sc.stream[self.window.len()..]);
        let client_from = match mode {
            ProxyMode::Relay => 0,
            ProxyMode::None | ProxyMode::Send => {
                if self.config.expect_proxy && self.sc.truth.prefix_valid {
                    self.sc.truth.prefix_len
                } else {
                    0
                }
            }
        };
        let want = &self.sc.stream[client_from.min(self.sc.stream.len())..];
        if backend != want {
            return self.fail(format!(
                "the backend ({mode:?}) would receive {} bytes from window offset {skip}, not the client's {} bytes from offset {client_from}",
                backend.len(),
                want.len()
            ));
        }
        Ok(())
    }

    /// A hello re-framed over other records gets the verdict of its
    /// original framing (only `hello_end` may move).
    fn check_reframing(&self) -> Result<(), Failure> {
        let Some((original, reframed)) = &self.sc.reframing else {
            return Ok(());
        };
        let mut config = self.config.clone();
        config.max_bytes = usize::MAX;
        let one = |bytes: &[u8]| {
            SniPrereadCore::new().handle_input(
                &config,
                Input::Bytes {
                    buf: bytes,
                    now: base(),
                },
            )
        };
        let (a, b) = (one(original), one(reframed));
        let same = match (&a, &b) {
            (Output::Routed(x), Output::Routed(y)) => {
                let mut x = Route::clone(x);
                x.hello_end = y.hello_end;
                x == **y
            }
            (Output::NeedMore { .. }, Output::NeedMore { .. }) => true,
            _ => a == b,
        };
        if !same {
            return self.fail(format!(
                "the original framing decides {a:?}, the re-framing {b:?}"
            ));
        }
        Ok(())
    }
}
