//! One seed of the control-plane simulation played: the shipped
//! [`Coordinator`] fed the script's requests and the world's events on a
//! simulated clock, and its effects performed against simulated workers,
//! clients, files, journal and successor.
//!
//! Owns: [`World`]: the event queue, the clock, the performance of each
//! effect, and the sabotage filters on the effects. Must never: decide
//! what the coordinator decides, read the clock, or let an event queue
//! run without a bound.

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap, HashMap};
use std::io;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, UNIX_EPOCH};

use command::generation::Generation;
use command::reread::file_state;
use command::sources::SourceKind;
use command::state::ConfigState;
use command::state_file::StateFileError;
use coordinator::{
    AddressCheck, ClientId, Coordinator, Effect, Input, Order, Settings, SourceReport, Unread,
    WorkerId,
};
use preread_core::rng::Rng;

use crate::control::checks::{
    Broken, ClientBook, DEADLINES, GONE_GETS_NOTHING, Journal, Ledger, QUIET_ROUTING, broken,
};
use crate::control::script::{Act, CONFIG_PATH, Script, ShellAct};
use crate::control::workers::SimWorker;
use crate::control::{ControlSabotage, Played};

/// How long a worker may take to answer an order.
pub(crate) const ORDER_TIMEOUT: Duration = Duration::from_millis(1_000);
/// How long a soft stop lets sessions finish.
pub(crate) const GRACE: Duration = Duration::from_millis(2_000);
/// The most events one seed may play before it counts as never quiet.
const MAX_EVENTS: usize = 5_000;

fn base() -> Instant {
    static BASE: OnceLock<Instant> = OnceLock::new();
    *BASE.get_or_init(Instant::now)
}

/// The one address another process holds, if any.
struct Taken(Option<core::net::SocketAddr>);

impl AddressCheck for Taken {
    fn ensure_unbound(&mut self, address: core::net::SocketAddr) -> io::Result<()> {
        if self.0 == Some(address) {
            return Err(io::Error::from(io::ErrorKind::AddrInUse));
        }
        Ok(())
    }
}

#[derive(Debug)]
#[allow(
    clippy::large_enum_variant,
    reason = "the simulation's events are few and short-lived; a box per answer would only slow the runs"
)]
enum Event {
    Client {
        client: usize,
        act: usize,
    },
    Take {
        worker: usize,
    },
    Deliver {
        worker: usize,
        order: u64,
        answer: coordinator::Answer,
    },
    Die {
        worker: usize,
    },
    Gone {
        worker: usize,
    },
    Shell(usize),
    Reply(Box<Input>),
    Tick,
}

/// One seed's world. See the module documentation.
pub(crate) struct World<'s> {
    script: &'s Script,
    rng: Rng,
    now: u64,
    queue: BinaryHeap<Reverse<(u64, u64)>>,
    events: HashMap<u64, Event>,
    next_event: u64,
    ticks: BTreeSet<u64>,
    coordinator: Coordinator,
    workers: Vec<SimWorker>,
    boot: ConfigState,
    ledger: Ledger,
    books: Vec<ClientBook>,
    journal: Journal,
    sabotage: ControlSabotage,
    played: Played,
    texts_read: usize,
    states_read: usize,
    upgrades: usize,
}

impl<'s> World<'s> {
    pub(crate) fn new(script: &'s Script, seed: u64, sabotage: ControlSabotage) -> Self {
        let settings = Settings {
            order_timeout: ORDER_TIMEOUT,
            soft_stop_grace: GRACE,
            config_path: Some(PathBuf::from(CONFIG_PATH)),
            pid: 4242,
        };
        let (boot, outline) = match file_state(&script.boot_text, None) {
            Ok(file) => (file.state, file.outline),
            Err(_) => (ConfigState::default(), None),
        };
        let taken = Taken(script.taken.and_then(|a| a.parse().ok()));
        let mut coordinator = Coordinator::new(settings, boot.clone(), Box::new(taken), base());
        sabotage.plant(&mut coordinator);
        let workers = script.workers.iter().enumerate().map(|(id, plan)| {
            let id = WorkerId::try_from(id).unwrap_or(WorkerId::MAX);
            coordinator.add_worker(id);
            SimWorker::new(id, plan.clone())
        });
        let workers = workers.collect();
        if script.sources {
            let slots = vec![(SourceKind::Directory, "/sim/routes.d".to_owned())];
            let routes = boot.frontends().len();
            coordinator.start_sources(routes, Some(boot.clone()), slots, base());
        }
        coordinator.know_config_text(outline, true);
        Self {
            script,
            rng: Rng::new(seed ^ 0x0057_0A1D_0000_0003),
            now: 0,
            queue: BinaryHeap::new(),
            events: HashMap::new(),
            next_event: 0,
            ticks: BTreeSet::new(),
            coordinator,
            workers,
            boot,
            ledger: Ledger::default(),
            books: script
                .clients
                .iter()
                .map(|_| ClientBook::default())
                .collect(),
            journal: Journal::default(),
            sabotage,
            played: Played::default(),
            texts_read: 0,
            states_read: 0,
            upgrades: 0,
        }
    }

    fn at(&mut self, when: u64, event: Event) {
        let id = self.next_event;
        self.next_event += 1;
        self.queue.push(Reverse((when, id)));
        self.events.insert(id, event);
    }

    fn instant(&self) -> Instant {
        base() + Duration::from_millis(self.now)
    }

    /// Plays the script to quiet, then checks the quiet invariants.
    pub(crate) fn run(mut self) -> Result<Played, Broken> {
        let script = self.script;
        for (client, acts) in script.clients.iter().enumerate() {
            for (act, (when, _)) in acts.iter().enumerate() {
                self.at(*when, Event::Client { client, act });
            }
        }
        for (index, (when, _)) in script.shell.iter().enumerate() {
            self.at(*when, Event::Shell(index));
        }
        for (worker, plan) in script.workers.iter().enumerate() {
            if let Some(when) = plan.dies_at {
                self.at(when, Event::Die { worker });
            }
        }
        let Some(generation) = Generation::replay(&self.boot) else {
            return Err(broken(QUIET_ROUTING, "the boot state does not replay"));
        };
        self.feed(Input::Boot {
            generation: Arc::new(generation),
        })?;
        let mut played_events = 0;
        while let Some(Reverse((when, id))) = self.queue.pop() {
            played_events += 1;
            if played_events > MAX_EVENTS {
                return Err(broken(DEADLINES, "the world never became quiet"));
            }
            self.now = self.now.max(when);
            if let Some(event) = self.events.remove(&id) {
                self.play(event)?;
            }
        }
        self.quiet()?;
        self.played.events = played_events;
        self.played.committed = self.journal.committed.len();
        self.played.refused = self.ledger.refused();
        Ok(self.played)
    }

    fn play(&mut self, event: Event) -> Result<(), Broken> {
        match event {
            Event::Client { client, act } => match &self.script.clients[client][act].1 {
                Act::Ask(asked) => {
                    let (request, expect) = asked.as_ref();
                    self.books[client].expects.push(expect.clone());
                    let request = request.clone();
                    let client = ClientId(client as u64);
                    self.feed(Input::Request { client, request })
                }
                Act::Leave => {
                    self.books[client].gone = true;
                    let client = ClientId(client as u64);
                    self.feed(Input::ClientGone { client })
                }
            },
            Event::Take { worker } => self.take(worker),
            Event::Deliver {
                worker,
                order,
                answer,
            } => {
                let id = self.workers[worker].id;
                let done = matches!(answer, coordinator::Answer::Done);
                self.ledger.answered(order, id, done);
                self.feed(Input::WorkerAnswer {
                    worker: id,
                    order,
                    answer,
                })
            }
            Event::Die { worker } => {
                let w = &mut self.workers[worker];
                if !w.dead {
                    w.dead = true;
                    w.inbox.clear();
                    self.played.workers_lost += 1;
                    let when = self.now + self.rng.range_u64(0, 30);
                    self.at(when, Event::Gone { worker });
                }
                Ok(())
            }
            Event::Gone { worker } => {
                self.workers[worker].gone_told = true;
                let worker = self.workers[worker].id;
                self.feed(Input::WorkerGone { worker })
            }
            Event::Shell(index) => self.shell(index),
            Event::Reply(input) => self.feed(*input),
            Event::Tick => {
                self.ticks.remove(&self.now);
                self.feed(Input::Tick)
            }
        }
    }

    fn shell(&mut self, index: usize) -> Result<(), Broken> {
        let input = match &self.script.shell[index].1 {
            ShellAct::Hangup => {
                self.played.reloads += 1;
                Input::Hangup
            }
            ShellAct::Synced(fragments) => {
                self.played.merges += 1;
                Input::SourceReport(SourceReport::Synced {
                    kind: SourceKind::Directory,
                    fragments: fragments.clone(),
                    at: UNIX_EPOCH + Duration::from_millis(self.now),
                })
            }
            ShellAct::SourceFailed => Input::SourceReport(SourceReport::Failed {
                kind: SourceKind::Directory,
                error: "directory source /sim/routes.d: cannot read (simulated)".to_owned(),
            }),
            ShellAct::Stop(kind) => Input::Stop(*kind),
        };
        self.feed(input)
    }

    /// A worker takes its next order, unless it hangs or is dead.
    fn take(&mut self, worker: usize) -> Result<(), Broken> {
        let now = self.now;
        let w = &mut self.workers[worker];
        w.scheduled = false;
        if w.dead {
            return Ok(());
        }
        if let Some((from, to)) = w.plan.hangs
            && (from..to).contains(&now)
        {
            w.scheduled = true;
            self.at(to, Event::Take { worker });
            return Ok(());
        }
        let refuse = w.plan.refuses && self.rng.chance(25);
        let Some((order, answer)) = self.workers[worker].take(refuse) else {
            return Ok(());
        };
        let plan = &self.workers[worker].plan;
        let delay = if plan.slow && self.rng.chance(10) {
            self.rng.range_u64(900, 2_500)
        } else {
            self.rng.range_u64(0, plan.answer_ms)
        };
        self.at(
            now + delay,
            Event::Deliver {
                worker,
                order,
                answer,
            },
        );
        self.schedule_take(worker);
        Ok(())
    }

    fn schedule_take(&mut self, worker: usize) {
        let w = &self.workers[worker];
        if w.scheduled || w.dead || w.inbox.is_empty() {
            return;
        }
        let when = self.now + self.rng.range_u64(0, w.plan.process_ms);
        self.workers[worker].scheduled = true;
        self.at(when, Event::Take { worker });
    }

    /// Feeds one input; performs the effects; checks that what waits has
    /// a near deadline, and ticks at it.
    fn feed(&mut self, input: Input) -> Result<(), Broken> {
        self.played.inputs += 1;
        let mut effects = self.coordinator.handle(input, self.instant());
        self.sabotage
            .filter(&mut effects, &self.ledger, self.script, &mut self.played);
        for effect in effects {
            self.perform(effect)?;
        }
        if let Some(deadline) = self.coordinator.next_deadline() {
            let ms = deadline.saturating_duration_since(base()).as_millis();
            let due = u64::try_from(ms).unwrap_or(u64::MAX);
            let bound = (ORDER_TIMEOUT + GRACE).as_millis() as u64;
            if due > self.now + bound {
                return Err(broken(
                    DEADLINES,
                    format!("a wait's deadline is {} ms away", due - self.now),
                ));
            }
            let due = due.max(self.now);
            if self.ticks.insert(due) {
                self.at(due, Event::Tick);
            }
        }
        Ok(())
    }

    fn later(&mut self, most: u64) -> u64 {
        self.now + self.rng.range_u64(1, most)
    }

    fn perform(&mut self, effect: Effect) -> Result<(), Broken> {
        match effect {
            Effect::Send {
                worker,
                order,
                what,
            } => self.send(worker, order, what),
            Effect::Answer { client, .. }
            | Effect::Report { client, .. }
            | Effect::Serve { client, .. } => {
                self.played.answers += 1;
                let index = usize::try_from(client.0).unwrap_or(usize::MAX);
                match self.books.get_mut(index) {
                    Some(book) => book.hear(client.0, &effect),
                    None => Ok(()),
                }
            }
            Effect::ReadConfig { job, .. } => {
                let texts = &self.script.later_texts;
                let text = texts.get(self.texts_read % texts.len().max(1)).cloned();
                self.texts_read += 1;
                let read = match text.flatten() {
                    Some(text) => Ok(text),
                    None => Err(Unread::Unseen(format!(
                        "{CONFIG_PATH}: cannot read (simulated)"
                    ))),
                };
                let when = self.later(60);
                self.at(
                    when,
                    Event::Reply(Box::new(Input::ConfigRead { job, read })),
                );
                Ok(())
            }
            Effect::ReadStateFile { job, path } => {
                self.played.loads += 1;
                let files = &self.script.state_files;
                let file = files.get(self.states_read % files.len().max(1)).cloned();
                self.states_read += 1;
                let read = match file.flatten() {
                    Some(requests) => {
                        let mut state = ConfigState::default();
                        for request in &requests {
                            // A refused declaration is left out, as a
                            // state file holds only what a state took.
                            let _ = state.dispatch(request);
                        }
                        Ok(state)
                    }
                    None => Err(StateFileError::NotFound { path: path.into() }),
                };
                let when = self.later(60);
                self.at(
                    when,
                    Event::Reply(Box::new(Input::StateFileRead { job, read })),
                );
                Ok(())
            }
            Effect::AppendJournal { job, changes } => {
                self.journal.appends.push((job, changes));
                let when = self.later(30);
                self.at(
                    when,
                    Event::Reply(Box::new(Input::Journaled { job, saved: Ok(()) })),
                );
                Ok(())
            }
            Effect::Settled {
                generation,
                committed,
            } => {
                if committed && !generation.is_empty() {
                    self.journal.committed.push(generation.changes.clone());
                }
                self.ledger.settled(&generation, committed)
            }
            Effect::StartUpgrade { job, .. } => {
                self.played.upgrades += 1;
                let succeeds = self.script.upgrades_succeed.get(self.upgrades).copied();
                self.upgrades += 1;
                let outcome = if succeeds.unwrap_or(false) {
                    Ok(4343)
                } else {
                    Err("the successor exited before it served (simulated)".into())
                };
                let when = self.later(200);
                self.at(
                    when,
                    Event::Reply(Box::new(Input::UpgradeFinished { job, outcome })),
                );
                Ok(())
            }
            Effect::Booted { .. }
            | Effect::Stopped { .. }
            | Effect::Notify(_)
            | Effect::Log { .. }
            | Effect::LogElapsed { .. }
            | Effect::SourceApplied { .. } => Ok(()),
        }
    }

    fn send(&mut self, worker: WorkerId, order: u64, what: Order) -> Result<(), Broken> {
        let Some(index) = self.workers.iter().position(|w| w.id == worker) else {
            return Err(broken(
                GONE_GETS_NOTHING,
                format!("order {order} to no worker {worker}"),
            ));
        };
        if self.workers[index].gone_told {
            return Err(broken(
                GONE_GETS_NOTHING,
                format!("order {order} sent to worker {worker}, known gone"),
            ));
        }
        let carried = match &what {
            Order::Apply(generation) => {
                let boot = self.ledger.is_empty();
                Some(self.ledger.sent(generation, order, worker, boot))
            }
            _ => None,
        };
        if let Order::SoftStop { .. } | Order::HardStop = what {
            self.played.stops += 1;
        }
        let w = &mut self.workers[index];
        if w.dead {
            w.missed |= carried.is_some();
        } else {
            w.inbox.push_back((order, what, carried));
            self.schedule_take(index);
        }
        Ok(())
    }

    /// Nothing is left to happen: check what must hold once quiet.
    fn quiet(&self) -> Result<(), Broken> {
        let coordinator = &self.coordinator;
        let owed = coordinator.answers_owed();
        if coordinator.is_busy() || coordinator.next_deadline().is_some() || owed > 0 {
            return Err(broken(
                DEADLINES,
                format!(
                    "quiet at {} ms, and still waiting (busy: {}, answers owed: {owed}, deadline: \
                     {:?})",
                    self.now,
                    coordinator.is_busy(),
                    coordinator
                        .next_deadline()
                        .map(|d| d.saturating_duration_since(base()))
                ),
            ));
        }
        for (client, book) in self.books.iter().enumerate() {
            if !book.gone && book.heard != book.expects.len() {
                return Err(broken(
                    crate::control::checks::CLIENT_ORDER,
                    format!(
                        "client {client} heard {} answer(s) to {} request(s)",
                        book.heard,
                        book.expects.len()
                    ),
                ));
            }
        }
        let state = coordinator.state();
        for worker in self.workers.iter().filter(|w| w.is_current()) {
            if worker.routing != *state {
                let missing = command::diff::diff(&worker.routing, state);
                return Err(broken(
                    QUIET_ROUTING,
                    format!(
                        "worker {} differs from the committed state: {} change(s) away (first: \
                         {:?})",
                        worker.id,
                        missing.len(),
                        missing.first()
                    ),
                ));
            }
            self.ledger.check_held(worker.id, &worker.held)?;
        }
        self.journal.check(&self.boot, state)
    }
}
