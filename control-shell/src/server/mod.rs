//! The command server: the main thread's event loop, which owns the command
//! socket, the workers' channels and the files, and performs what the
//! [`Coordinator`] decides.
//!
//! Owns: the Unix command socket (mode 0600, root or the proxy's own user
//! only) and its clients, the worker handles, the state file autosave
//! (`saving`: a journal and its snapshot), the route sources' threads
//! (`sources`), the signals, the upgrade's handover (`upgrade`), and the
//! effects of the coordinator: it feeds the coordinator every input
//! (requests, worker answers, time, file reads) and performs what comes
//! back, in order (`effects`). Must never: decide a commit, a rollback or
//! the order of a client's answers itself (the coordinator does), or feed
//! the coordinator from inside an effect (follow-up inputs wait in the
//! inbox until the batch is performed, so orders reach each worker in the
//! order they were sent).
//!
//! Workers are given to it (see [`CommandServer::add_worker`]), so tests
//! can drive it with fake workers that only speak
//! [`orders`](preread_worker::worker::orders).

mod boot;
mod channel_mio;
mod clients;
mod effects;
mod handlers;
mod reload_file;
mod responses;
mod saving;
mod signals;
mod socket;
mod sources;
mod upgrade;
mod upgrade_error;

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use command::config::GlobalSettings;
use command::state::ConfigState;
use coordinator::{Coordinator, Input, Settings};
use mio::{Events, Interest, Poll, Token, Waker};
use signal_hook_mio::v1_0::Signals;
use slab::Slab;

pub use boot::BootError;
pub use clients::MAX_QUEUED_ANSWER_BYTES;
use clients::{Client, ClientRef};
pub use coordinator::StopKind;
use preread_worker::access_log::Reopener;
use preread_worker::answer_code::AnswerCode;
use preread_worker::shared::Shared;
use preread_worker::worker::orders::{Reply, WorkerHandle};
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
    /// Each client's slab key, by the serial the coordinator knows it by.
    keys: HashMap<u64, usize>,
    /// New clients are refused for the cap: logged once per episode.
    clients_full: bool,
    next_serial: u64,
    /// Clients that may have requests to take (freed, or just accepted).
    woken: VecDeque<ClientRef>,
    workers: Vec<WorkerHandle>,
    replies: Receiver<Reply>,
    /// What decides: the job queue, the generations, commit or rollback.
    coordinator: Coordinator,
    /// Inputs an effect produced, fed once the batch it was in is done.
    inbox: VecDeque<Input>,
    /// The answer of the boot's generation, once in: its first refusal
    /// (or missing answer) as `Err`.
    booted: Option<Result<(), (u32, AnswerCode, String)>>,
    /// Whether every worker answered the last stop, once it is over.
    stopped: Option<bool>,
    /// The saved state's writer (`automatic_state_save`).
    saved: saving::Saver,
    started: Instant,
    /// Addresses the workers listen on with inherited sockets.
    adopted: BTreeSet<SocketAddr>,
    /// The route sources' threads and their reports.
    sources: sources::SourceFeed,
    /// Asks the access-log writer to reopen its file (SIGUSR1); `None`
    /// when the log is off.
    access_log: Option<Reopener>,
    /// The metrics endpoint, whose socket an upgrade hands over.
    metrics: crate::metrics_http::Slot,
    /// What the threads of the process share: the registry of backends
    /// (kept in step with each committed state), the health counters.
    shared: Arc<Shared>,
    /// Enough changes settled: the heap is trimmed once the answers are
    /// out.
    trim_due: bool,
    /// Changes settled since the last trim.
    untrimmed: crate::heap::Untrimmed,
}

impl fmt::Debug for CommandServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CommandServer")
            .field("settings", &self.settings)
            .field("clients", &self.clients.len())
            .field("workers", &self.workers)
            .field("coordinator", &self.coordinator)
            .finish_non_exhaustive()
    }
}

/// The shell's answer to whether the workers could listen at an address.
struct Binds {
    check: bool,
}

impl coordinator::AddressCheck for Binds {
    fn ensure_unbound(&mut self, address: SocketAddr) -> io::Result<()> {
        if self.check {
            preread_worker::worker::listen::ensure_unbound(address)
        } else {
            Ok(())
        }
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
        let saved = saving::Saver::new(
            settings.saved_state.clone(),
            settings.automatic_state_save,
            Arc::clone(&waker),
        );
        let started = Instant::now();
        let coordinator = Coordinator::new(
            Settings {
                order_timeout: settings.order_timeout,
                soft_stop_grace: settings.soft_stop_grace,
                config_path: settings.config_path.clone(),
                pid: std::process::id(),
            },
            state,
            Box::new(Binds {
                check: settings.check_unbound,
            }),
            started,
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
            keys: HashMap::new(),
            clients_full: false,
            next_serial: 0,
            woken: VecDeque::new(),
            workers: Vec::new(),
            replies,
            coordinator,
            inbox: VecDeque::new(),
            booted: None,
            stopped: None,
            saved,
            started,
            adopted: BTreeSet::new(),
            sources: sources::SourceFeed::default(),
            access_log: None,
            metrics: crate::metrics_http::Slot::default(),
            shared: Shared::new(&GlobalSettings::default()),
            trim_due: false,
            untrimmed: crate::heap::Untrimmed::default(),
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
        server.coordinator.resume_generation(generation);
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
        self.coordinator.add_worker(handle.id);
        self.workers.push(handle);
    }

    /// The desired state, as committed.
    pub fn state(&self) -> &ConfigState {
        self.coordinator.state()
    }

    /// The command socket's path.
    pub fn socket_path(&self) -> &Path {
        self.socket.path()
    }

    /// The workers' ids.
    pub fn worker_ids(&self) -> Vec<u32> {
        self.workers.iter().map(|w| w.id).collect()
    }

    /// Gives the coordinator the outline of the config text the boot
    /// read, and says whether the running state is that text's file state
    /// (the boot used the config's declarations): then the first reload
    /// reads only the cluster tables that changed.
    pub fn know_config_text(
        &mut self,
        outline: Option<command::config::Outline>,
        running_is_file: bool,
    ) {
        self.coordinator.know_config_text(outline, running_is_file);
    }

    /// Serves the command socket until a stop (request or signal) was
    /// answered by every worker (or timed out). Returns the stop's kind.
    pub fn run(&mut self) -> io::Result<StopKind> {
        let mut events = Events::with_capacity(256);
        loop {
            self.settle();
            if let Some(kind) = self.coordinator.stopping()
                && self.coordinator.is_stopped()
            {
                self.stop_sources();
                self.finish_clients(&mut events);
                return Ok(kind);
            }
            let now = Instant::now();
            let timeout = [self.coordinator.next_deadline(), self.expire_clients(now)]
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

    /// Feeds the coordinator one input now, and performs what it decides.
    fn feed(&mut self, input: Input) {
        let effects = self.coordinator.handle(input, Instant::now());
        self.perform(effects);
    }

    /// Takes the workers' answers, the sources' reports and the time in,
    /// and serves every freed client, until nothing is left to do without
    /// waiting.
    fn settle(&mut self) {
        loop {
            self.take_source_events();
            while let Ok(reply) = self.replies.try_recv() {
                self.inbox.push_back(Input::WorkerAnswer {
                    worker: reply.worker,
                    order: reply.order,
                    answer: reply.answer,
                });
            }
            if let Some(input) = self.inbox.pop_front() {
                self.feed(input);
                continue;
            }
            if self
                .coordinator
                .next_deadline()
                .is_some_and(|due| due <= Instant::now())
            {
                self.feed(Input::Tick);
                continue;
            }
            if let Some(client) = self.woken.pop_front() {
                self.pump(client);
                continue;
            }
            self.saved.tick(self.coordinator.state());
            return;
        }
    }
}
