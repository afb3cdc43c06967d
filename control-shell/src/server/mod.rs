//! The command server: the main thread's event loop, which owns the command
//! socket and the desired state, and drives the workers with orders.
//!
//! Owns: the Unix command socket (mode 0600, root or the proxy's own user
//! only), the [`ConfigState`], the order bookkeeping, the serialization of
//! state changes (one in flight at a time, in arrival order), their
//! rollback when a worker refuses, the state file autosave (`saving`:
//! a journal and its snapshot), and the route sources' reports and merges
//! (`sources`; their threads are in [`crate::sources`]). Must never:
//! commit a change before every worker applied it; leave a worker with a
//! change the others refused; wait on a worker without a deadline.
//!
//! Workers are given to it (see [`CommandServer::add_worker`]), so tests
//! can drive it with fake workers that only speak
//! [`orders`](preread_worker::worker::orders).

mod boot;
mod changes;
mod channel_mio;
mod clients;
mod handlers;
mod pending;
mod reload_file;
mod reread;
mod responses;
mod saving;
mod signals;
mod socket;
mod sources;
mod upgrade;
mod upgrade_error;

use std::collections::{BTreeSet, VecDeque};
use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use command::config::GlobalSettings;
use command::proto;
use command::state::ConfigState;
use mio::{Events, Interest, Poll, Token, Waker};
use signal_hook_mio::v1_0::Signals;
use slab::Slab;

pub use boot::BootError;
use changes::Changes;
pub use clients::MAX_QUEUED_ANSWER_BYTES;
use clients::{Client, ClientRef};
use handlers::Query;
use pending::{Gathered, Pending};
use preread_worker::access_log::Reopener;
use preread_worker::answer_code::AnswerCode;
use preread_worker::shared::Shared;
use preread_worker::worker::orders::{Answer, Order, OrderId, Reply, WorkerHandle};
pub use saving::{COMPACT_INTERVAL, COMPACT_MIN_BYTES, COMPACT_SNAPSHOT_SHARE, SavedBase};
pub use socket::MAX_COMMAND_CLIENTS;

/// How long a worker may take to answer an order (a soft stop gets its
/// grace on top).
pub const DEFAULT_ORDER_TIMEOUT: Duration = Duration::from_secs(10);

/// `error_code` of a FAILURE because a worker did not answer in time.
pub const E_WORKER_TIMEOUT: &str = AnswerCode::WorkerTimeout.as_str();

/// `error_code` of a FAILURE because a worker refused, or is gone.
pub const E_WORKER_REFUSED: &str = AnswerCode::WorkerRefused.as_str();

const LISTENER: Token = Token(usize::MAX - 1);
const WAKER: Token = Token(usize::MAX - 2);
const SIGNALS: Token = Token(usize::MAX - 3);
/// Client tokens are slab keys, below every fixed token.
const MAX_CLIENT_KEY: usize = usize::MAX - 16;

/// How long the server keeps flushing answers to clients once it stops.
const FINAL_FLUSH: Duration = Duration::from_secs(1);

/// What the command server needs to know.
#[derive(Debug, Clone)]
pub struct ServerSettings {
    /// Where the command socket is created.
    pub socket_path: PathBuf,
    /// The state file of `automatic_state_save` (and the default path of a
    /// `SaveState` without one).
    pub saved_state: Option<PathBuf>,
    /// Save every accepted change to `saved_state` (journaled, see
    /// `saving`).
    pub automatic_state_save: bool,
    /// How long a worker may take to answer an order.
    pub order_timeout: Duration,
    /// How long a soft stop lets sessions finish.
    pub soft_stop_grace: Duration,
    /// Refuse to let the workers bind an address another socket holds
    /// (`listen::ensure_unbound`). Off only for tests whose workers are
    /// stand-ins that bind nothing.
    pub check_unbound: bool,
    /// The config file the proxy started from: what SIGHUP reloads.
    pub config_path: Option<PathBuf>,
    /// The binary an upgrade starts by default: this process's own, as its
    /// path was at start (a package upgrade replaces the file there).
    pub exe: Option<PathBuf>,
    /// The arguments this process was started with, given to the
    /// successor of an upgrade.
    pub argv: Vec<std::ffi::OsString>,
    /// How long the server waits on one command client
    /// (`command_client_timeout`, see `clients`).
    pub client_timeout: Duration,
}

impl ServerSettings {
    /// The settings of a config file, with the default timeouts.
    pub fn from_global(global: &GlobalSettings) -> Self {
        Self {
            socket_path: global.command_socket.clone(),
            saved_state: global.saved_state.clone(),
            automatic_state_save: global.automatic_state_save,
            order_timeout: DEFAULT_ORDER_TIMEOUT,
            soft_stop_grace: global.soft_stop_grace,
            check_unbound: true,
            config_path: None,
            exe: std::env::current_exe().ok(),
            argv: std::env::args_os().skip(1).collect(),
            client_timeout: global.command_client_timeout,
        }
    }
}

/// How the proxy stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopKind {
    /// Stop accepting, let sessions finish within the grace.
    Soft,
    /// Close everything now.
    Hard,
}

/// Why an order was sent: what to do with its answers.
#[derive(Debug)]
enum Purpose {
    /// A client's status or metrics query.
    Query { client: ClientRef, query: Query },
    /// The step of the running state change.
    Step,
    /// Undoing a refused generation on the workers that applied it.
    Rollback { changes: usize },
    /// A soft or hard stop.
    Stop(StopKind),
    /// A request replayed at boot.
    Boot,
    /// Duplicates of the listening sockets, for an upgrade's successor.
    Export,
}

/// The main thread's command server. See the module documentation.
pub struct CommandServer {
    settings: ServerSettings,
    poll: Poll,
    listener: mio::net::UnixListener,
    socket: socket::SocketFile,
    waker: Arc<Waker>,
    signals: Option<Signals>,
    own_euid: u32,
    clients: Slab<Client>,
    /// New clients are refused for the cap: logged once per episode.
    clients_full: bool,
    next_serial: u64,
    /// Clients that may have requests to take (freed, or just accepted).
    woken: VecDeque<ClientRef>,
    workers: Vec<WorkerHandle>,
    replies: Receiver<Reply>,
    pending: Pending<Purpose>,
    /// Orders whose answers are all in, not yet acted on.
    completed: VecDeque<Gathered<Purpose>>,
    state: ConfigState,
    changes: Changes,
    /// The saved state's writer (`automatic_state_save`).
    saved: saving::Saver,
    started: Instant,
    /// State changes committed since the start (the routing generation
    /// `status` reports).
    generation: u64,
    stopping: Option<StopKind>,
    /// Addresses the workers listen on with inherited sockets.
    adopted: BTreeSet<SocketAddr>,
    /// The route sources merged with the config file's declarations.
    sources: sources::RouteSources,
    /// The outline of the config text the file state came from: a reload
    /// reads only the cluster tables that changed since.
    last_text: reread::LastText,
    /// Asks the access-log writer to reopen its file (SIGUSR1); `None`
    /// when the log is off.
    access_log: Option<Reopener>,
    /// The metrics endpoint, whose socket an upgrade hands over.
    metrics: crate::metrics_http::Slot,
    /// What the threads of the process share: the registry of backends
    /// (kept in step with each committed state), the health counters.
    shared: Arc<Shared>,
}

impl fmt::Debug for CommandServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CommandServer")
            .field("settings", &self.settings)
            .field("clients", &self.clients.len())
            .field("workers", &self.workers)
            .field("pending", &self.pending)
            .field("changes", &self.changes)
            .field("stopping", &self.stopping)
            .finish_non_exhaustive()
    }
}

impl CommandServer {
    /// Creates the command socket (refusing if another proxy answers on
    /// it) and the server's poll, with `state` as the desired state. Worker
    /// answers come on `replies`; workers must wake [`waker`](Self::waker)
    /// after each.
    pub fn bind(
        settings: ServerSettings,
        state: ConfigState,
        replies: Receiver<Reply>,
    ) -> io::Result<Self> {
        let poll = Poll::new()?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
        let (mut listener, socket) = socket::bind_command_socket(&settings.socket_path)?;
        poll.registry()
            .register(&mut listener, LISTENER, Interest::READABLE)?;
        let settings_config = settings.config_path.clone();
        let saved = saving::Saver::new(
            settings.saved_state.clone(),
            settings.automatic_state_save,
            Arc::clone(&waker),
        );
        Ok(Self {
            settings,
            poll,
            listener,
            socket,
            waker,
            signals: None,
            own_euid: socket::own_euid(),
            clients: Slab::new(),
            clients_full: false,
            next_serial: 0,
            woken: VecDeque::new(),
            workers: Vec::new(),
            replies,
            pending: Pending::new(),
            completed: VecDeque::new(),
            saved,
            state,
            changes: Changes::default(),
            started: Instant::now(),
            generation: 0,
            stopping: None,
            adopted: BTreeSet::new(),
            sources: sources::RouteSources::new(settings_config.as_deref()),
            last_text: reread::LastText::default(),
            access_log: None,
            metrics: crate::metrics_http::Slot::default(),
            shared: Shared::new(&GlobalSettings::default()),
        })
    }

    /// Shares the process's state with the server: the one the workers
    /// were given, so `backend list` and the metrics show what they do.
    pub fn share(&mut self, shared: Arc<Shared>) {
        self.shared = shared;
    }

    /// Like [`bind`](Self::bind), for an upgrade's successor: the command
    /// socket is created beside `socket_path` (a live proxy answers
    /// there), and moved over it by
    /// [`take_socket_path`](Self::take_socket_path) once the successor
    /// serves.
    pub fn bind_successor(
        settings: ServerSettings,
        state: ConfigState,
        replies: Receiver<Reply>,
        generation: u64,
    ) -> io::Result<Self> {
        let beside = ServerSettings {
            socket_path: socket::successor_path(&settings.socket_path),
            ..settings.clone()
        };
        let mut server = Self::bind(beside, state, replies)?;
        server.settings.socket_path = settings.socket_path;
        server.generation = generation;
        Ok(server)
    }

    /// Moves the command socket over its configured path (see
    /// [`bind_successor`](Self::bind_successor)); a no-op when it is there.
    pub fn take_socket_path(&mut self) -> io::Result<()> {
        if self.socket.path() == self.settings.socket_path {
            return Ok(());
        }
        let path = self.settings.socket_path.clone();
        self.socket.move_over(&path)
    }

    /// Addresses whose listening sockets the workers inherited (an
    /// upgrade): [`boot`](Self::boot) does not check that they are free.
    pub fn adopt(&mut self, addresses: impl IntoIterator<Item = SocketAddr>) {
        self.adopted.extend(addresses);
    }

    /// The waker workers wake after each answer.
    pub fn waker(&self) -> Arc<Waker> {
        Arc::clone(&self.waker)
    }

    /// Where SIGUSR1 sends its reopen: the access-log writer.
    pub fn set_access_log(&mut self, reopener: Reopener) {
        self.access_log = Some(reopener);
    }

    /// The metrics endpoint, once it serves (an upgrade hands its socket
    /// over).
    pub fn set_metrics(&mut self, slot: crate::metrics_http::Slot) {
        self.metrics = slot;
    }

    /// Adds a worker: every later order goes to it too.
    pub fn add_worker(&mut self, handle: WorkerHandle) {
        self.workers.push(handle);
    }

    /// The desired state, as committed.
    pub fn state(&self) -> &ConfigState {
        &self.state
    }

    /// The command socket's path.
    pub fn socket_path(&self) -> &Path {
        self.socket.path()
    }

    /// The workers' ids.
    pub fn worker_ids(&self) -> Vec<u32> {
        self.workers.iter().map(|w| w.id).collect()
    }

    /// Serves the command socket until a stop (request or signal) was
    /// answered by every worker (or timed out). Returns the stop's kind.
    pub fn run(&mut self) -> io::Result<StopKind> {
        let mut events = Events::with_capacity(256);
        loop {
            self.settle();
            if let Some(kind) = self.stopping
                && !self.pending.any(|p| matches!(p, Purpose::Stop(_)))
            {
                self.stop_sources();
                self.finish_clients(&mut events);
                return Ok(kind);
            }
            let now = Instant::now();
            let timeout = [self.pending.next_deadline(), self.expire_clients(now)]
                .into_iter()
                .flatten()
                .min()
                .map(|d| d.saturating_duration_since(now));
            match self.poll.poll(&mut events, timeout) {
                Ok(()) => {}
                Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
                Err(error) => return Err(error),
            }
            for event in events.iter() {
                match event.token() {
                    LISTENER => self.accept_all(),
                    WAKER => {}
                    SIGNALS => self.on_signals(),
                    Token(key) => self.client_event(key, event.is_writable()),
                }
            }
        }
    }

    /// Sends `order` to `to` (every worker when `None`). A worker that is
    /// gone counts as a refusal at once.
    fn broadcast(
        &mut self,
        order: Order,
        purpose: Purpose,
        to: Option<&[u32]>,
        timeout: Duration,
    ) -> OrderId {
        let targets: Vec<u32> = match to {
            Some(to) => to.to_vec(),
            None => self.worker_ids(),
        };
        let deadline = deadline_after(timeout);
        let id = self
            .pending
            .open(purpose, targets.iter().copied(), deadline);
        for worker in targets {
            let sent = self
                .workers
                .iter()
                .find(|w| w.id == worker)
                .is_some_and(|w| w.send(id, order.clone()).is_ok());
            if !sent {
                let gone = Reply {
                    worker,
                    order: id,
                    answer: Answer::Refused {
                        code: AnswerCode::WorkerRefused,
                        message: format!("worker {worker} is gone"),
                    },
                };
                self.completed.extend(self.pending.record(gone));
            }
        }
        self.completed.extend(self.pending.take_complete(id));
        id
    }

    /// Takes the workers' answers in and acts on every complete order and
    /// every freed client, until nothing is left to do without waiting.
    fn settle(&mut self) {
        loop {
            self.take_source_events();
            while let Ok(reply) = self.replies.try_recv() {
                self.completed.extend(self.pending.record(reply));
            }
            for expired in self.pending.expire(Instant::now()) {
                log::error!(
                    "order {} ({:?}): no answer from worker(s) {:?} in time",
                    expired.id,
                    expired.purpose,
                    expired.missing
                );
                self.completed.push_back(expired);
            }
            if let Some(gathered) = self.completed.pop_front() {
                self.on_gathered(gathered);
                continue;
            }
            if let Some(client) = self.woken.pop_front() {
                self.pump(client);
                continue;
            }
            self.saved.tick(&self.state);
            return;
        }
    }

    fn on_gathered(&mut self, gathered: Gathered<Purpose>) {
        match gathered.purpose {
            Purpose::Query { client, ref query } => {
                let response = self.query_response(query, &gathered);
                self.respond(client, &response);
            }
            Purpose::Step => self.step_done(&gathered),
            Purpose::Rollback { changes } => {
                if let Some((_, code, message)) = gathered.first_failure() {
                    log::error!(
                        "undoing a generation of {changes} change(s): {code}: {message}; that \
                         worker's routing may differ from the state until the proxy restarts"
                    );
                }
            }
            Purpose::Stop(kind) => match gathered.first_failure() {
                Some((_, code, message)) => {
                    log::warn!("{kind:?} stop: {code}: {message}");
                }
                None => log::info!("{kind:?} stop: every worker is done"),
            },
            // `wait_for` takes these itself; one that reaches here is stale.
            Purpose::Boot | Purpose::Export => {}
        }
    }

    /// Orders a stop, unless one as strong is already under way. Returns
    /// what to tell the client.
    fn start_stop(&mut self, kind: StopKind) -> String {
        if self.stopping.is_none() || kind == StopKind::Hard {
            crate::notify::stopping(&format!("{kind:?} stop"));
        }
        self.start_stop_quietly(kind)
    }

    /// [`start_stop`](Self::start_stop) without telling systemd: after an
    /// upgrade the service goes on in the successor.
    fn start_stop_quietly(&mut self, kind: StopKind) -> String {
        match (self.stopping, kind) {
            (Some(StopKind::Hard), _) | (Some(StopKind::Soft), StopKind::Soft) => {
                return "already stopping".to_owned();
            }
            _ => {}
        }
        self.stopping = Some(kind);
        self.fail_queued_changes();
        if kind == StopKind::Hard {
            // Workers may exit on the hard stop without finishing the soft
            // one: only the hard stop's answers are awaited.
            self.pending
                .cancel(|p| matches!(p, Purpose::Stop(StopKind::Soft)));
        }
        self.send_stop(kind);
        match kind {
            StopKind::Soft => format!(
                "soft stop ordered to {} worker(s): sessions get up to {} s to finish",
                self.workers.len(),
                self.settings.soft_stop_grace.as_secs()
            ),
            StopKind::Hard => format!("hard stop ordered to {} worker(s)", self.workers.len()),
        }
    }

    fn send_stop(&mut self, kind: StopKind) -> OrderId {
        let (order, timeout) = match kind {
            StopKind::Soft => (
                Order::SoftStop {
                    grace_ms: u64::try_from(self.settings.soft_stop_grace.as_millis())
                        .unwrap_or(u64::MAX),
                },
                self.settings
                    .soft_stop_grace
                    .saturating_add(self.settings.order_timeout),
            ),
            StopKind::Hard => (Order::HardStop, self.settings.order_timeout),
        };
        self.broadcast(order, Purpose::Stop(kind), None, timeout)
    }
}

/// `timeout` from now, capped at a year (an `Instant` cannot hold any
/// duration).
fn deadline_after(timeout: Duration) -> Instant {
    const YEAR: Duration = Duration::from_secs(365 * 24 * 3600);
    Instant::now() + timeout.min(YEAR)
}

/// A request as one line of JSON, for messages and logs.
fn describe(request: &proto::Request) -> String {
    serde_json::to_string(request).unwrap_or_else(|_| format!("{request:?}"))
}
