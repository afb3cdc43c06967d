//! `preread start`: runs the proxy in the foreground.
//!
//! Owns: the boot sequence: config, logging, the boot state (a valid saved
//! state file, with its journal replayed over it, wins over the config's
//! declarations, unless it is empty and `empty_saved_state` says
//! otherwise; stale temp files of killed saves are removed first; an
//! upgrade's handover wins over both), the command
//! socket, the access-log writer, the state the threads share, the
//! workers, replaying the state on them, the route sources (merged with
//! the config's declarations, whatever the boot state), the resolver and
//! the health checker, then the command server until a stop, and joining
//! the workers and then the writer. Must never: start with a
//! state the workers refused, or over another running proxy's command
//! socket (a successor moves its own over it only once it serves).

use std::path::{Path, PathBuf};
use std::sync::{Arc, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use command::codes::ErrorCode;
use command::config::{EmptySavedState, GlobalSettings, Outline, load_config_file_outlined};
use command::state::ConfigState;
use command::state_file::{
    StateFileError, journal_path, load_saved_state, remove_stale_temp_files,
};

use preread_control::server::{CommandServer, SavedBase, ServerSettings, StopKind};
use preread_control::upgrade::handover::Inherited;
use preread_control::upgrade::takeover::{self, Successor};
use preread_worker::access_log;
use preread_worker::shared::{Shared, checker, resolve};
use preread_worker::worker::{self, WorkerSettings};

/// How long `start` waits for the worker threads to end after they
/// answered the stop.
const JOIN_TIMEOUT: Duration = Duration::from_secs(5);

/// How long `start` waits, after the workers, for the access-log writer to
/// write the lines still queued (a writer stuck on a pipe nobody reads is
/// left behind).
const WRITER_FINISH: Duration = Duration::from_secs(2);

/// How long `start` waits for the first resolution of the named backends
/// before it says it is ready.
const FIRST_RESOLUTION_WAIT: Duration = Duration::from_secs(5);

/// Why `preread start` ended other than by a stop. The message was
/// printed or logged where it happened, with what only that place knows;
/// this says which exit status the command line gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartFailure {
    /// The config or the saved state file is not valid: the operator's
    /// input to fix.
    InvalidInput,
    /// Anything else: a socket, a thread, the workers, an upgrade's old
    /// process, the command server.
    Failed,
}

/// The boot state the saved files cannot give.
#[derive(Debug)]
enum BootError {
    /// The state file exists and cannot be loaded.
    InvalidStateFile {
        path: PathBuf,
        error: StateFileError,
    },
    /// The state file holds no routing, the config declares some, and
    /// `empty_saved_state = "refuse"`.
    EmptyRefused { path: PathBuf, declared: usize },
}

impl std::fmt::Display for BootError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::InvalidStateFile { path, error } => write!(
                f,
                "the state file {} is not valid, not starting (fix or remove it): {error}",
                path.display()
            ),
            Self::EmptyRefused { path, declared } => write!(
                f,
                "the state file {} holds no routing while the config declares {declared} \
                 request(s), not starting: {}: set empty_saved_state = \"use_config\" to boot \
                 from the config or \"keep_empty\" to boot with nothing, or delete the file",
                path.display(),
                ErrorCode::StateFileEmpty
            ),
        }
    }
}

/// Runs `preread start` on the config at `config` (`preread.toml` when
/// unset), with the command socket at `socket` when given.
pub fn run(config: Option<&Path>, socket: Option<&Path>) -> Result<(), StartFailure> {
    let config_path = config.map_or_else(|| PathBuf::from("preread.toml"), Path::to_path_buf);
    let mut inherited = Inherited::default();
    let control = match inherited.control() {
        Ok(control) => control,
        Err(error) => {
            eprintln!("preread: cannot take the upgrade's control socket: {error}; not starting");
            return Err(StartFailure::Failed);
        }
    };
    let (loaded, outline) = match load_config_file_outlined(&config_path) {
        Ok(loaded) => loaded,
        Err(problems) => {
            eprintln!(
                "preread: {} is not a valid config, not starting:",
                config_path.display()
            );
            for problem in &problems {
                eprintln!("{}:{problem}", config_path.display());
            }
            if let Some(mut control) = control {
                // Read what the old process sends before answering: a
                // socket closed with unread data resets, and the old
                // process would lose the verdict.
                let _ = preread_control::upgrade::handover::read_handover(&mut control);
                let errors: Vec<_> = problems.iter().filter(|p| !p.is_warning()).collect();
                let first = errors.first().map(ToString::to_string).unwrap_or_default();
                let why = format!(
                    "{} is not a valid config ({} error(s); the first: {first})",
                    config_path.display(),
                    errors.len()
                );
                takeover::refuse(&mut control, &why);
                return Err(StartFailure::Failed);
            }
            return Err(StartFailure::InvalidInput);
        }
    };
    let mut global = loaded.global;
    let file = FileDeclarations {
        routes: loaded.state.frontends().len(),
        // The route sources merge with the file's declarations whatever
        // the boot state: only then is a copy kept.
        state: global.sources.any().then(|| loaded.state.clone()),
        outline,
    };
    // The state is what the declarations built. `loaded` lives until the
    // process ends, so its requests would otherwise stay resident for the
    // whole run (about a third of the proxy's memory at 100,000 routes).
    drop(loaded.requests);
    if let Some(socket) = socket {
        global.command_socket = socket.to_path_buf();
    }
    init_logging(&global.log_level);
    for warning in &loaded.warnings {
        log::warn!("{}:{warning}", config_path.display());
    }
    if let Some(control) = control {
        return match Successor::receive(control, inherited) {
            Ok(mut successor) => {
                // Taken, not copied: the successor keeps serving with it.
                let state = std::mem::take(&mut successor.state);
                let boot = Boot {
                    state,
                    base: SavedBase::Other,
                    from_config: false,
                };
                serve(&global, boot, (&config_path, file), Some(successor))
            }
            Err(_) => Err(StartFailure::Failed),
        };
    }
    let boot = match boot_state(&global, loaded.state) {
        Ok(boot) => boot,
        Err(message) => {
            eprintln!("preread: {message}");
            return Err(StartFailure::InvalidInput);
        }
    };
    serve(&global, boot, (&config_path, file), None)
}

/// The config file's routing declarations, for the route sources and the
/// reloads.
struct FileDeclarations {
    /// How many frontends it declares.
    routes: usize,
    /// Its state, when a route source merges with it.
    state: Option<ConfigState>,
    /// The outline of its text: a reload reads only the tables that
    /// changed since.
    outline: Option<Outline>,
}

/// The state the proxy boots with.
struct Boot {
    state: ConfigState,
    base: SavedBase,
    /// Whether it is the config file's declarations.
    from_config: bool,
}

fn init_logging(log_level: &str) {
    let env = env_logger::Env::default().default_filter_or(log_level);
    // A second init (tests) keeps the first logger.
    let _ = env_logger::Builder::from_env(env).try_init();
}

/// The state to boot with: the saved state file when there is one (it is
/// the source of truth), with its journal's records replayed over it, else
/// the config's declarations. An empty saved state against a config that
/// declares routing is `empty_saved_state`'s choice. Also says whether the
/// saved files hold it, and whether it is the config's.
fn boot_state(global: &GlobalSettings, from_config: ConfigState) -> Result<Boot, BootError> {
    let config = |state| Boot {
        state,
        base: SavedBase::Other,
        from_config: true,
    };
    let Some(path) = &global.saved_state else {
        return Ok(config(from_config));
    };
    for stale in remove_stale_temp_files(path)
        .into_iter()
        .chain(remove_stale_temp_files(journal_path(path)))
    {
        match stale {
            Ok(file) => log::info!("removed {}, left by a save that was killed", file.display()),
            Err(error) => log::warn!("{error}"),
        }
    }
    match load_saved_state(path) {
        Ok(saved) => {
            let declared = from_config.generate_requests().len();
            if is_empty(&saved.state) && declared > 0 {
                return empty_state(global.empty_saved_state, path, declared, from_config);
            }
            let journal = saved.journal.as_ref().map_or_else(String::new, |j| {
                format!(
                    " and {} journal record(s) after it from {}",
                    j.replayed,
                    j.path.display()
                )
            });
            log::info!(
                "booting from the state file {} ({} request(s)){journal}",
                path.display(),
                saved.snapshot_requests,
            );
            let base = saved.journal.map_or(SavedBase::Other, SavedBase::Saved);
            Ok(Boot {
                state: saved.state,
                base,
                from_config: false,
            })
        }
        Err(error) if error.is_not_found() => {
            log::info!(
                "no state file at {} yet: booting from the config's declarations",
                path.display()
            );
            Ok(config(from_config))
        }
        Err(error) => Err(BootError::InvalidStateFile {
            path: path.clone(),
            error,
        }),
    }
}

/// Whether `state` holds no routing object at all.
fn is_empty(state: &ConfigState) -> bool {
    state.listeners().len() == 0
        && state.clusters().len() == 0
        && state.frontends().len() == 0
        && state.backends().len() == 0
}

/// A valid state file with no routing, while the config declares
/// `declared` requests' worth.
fn empty_state(
    choice: EmptySavedState,
    path: &Path,
    declared: usize,
    from_config: ConfigState,
) -> Result<Boot, BootError> {
    let shown = path.display();
    match choice {
        EmptySavedState::UseConfig => {
            log::warn!(
                "the state file {shown} is empty: booting from the config's {declared} \
                 declaration(s) (empty_saved_state = \"use_config\")"
            );
            Ok(Boot {
                state: from_config,
                base: SavedBase::Other,
                from_config: true,
            })
        }
        EmptySavedState::KeepEmpty => {
            log::warn!(
                "the state file {shown} is empty: booting with no routing, the config's \
                 {declared} declaration(s) unused (empty_saved_state = \"keep_empty\")"
            );
            Ok(Boot {
                state: ConfigState::default(),
                base: SavedBase::Other,
                from_config: false,
            })
        }
        EmptySavedState::Refuse => Err(BootError::EmptyRefused {
            path: path.to_path_buf(),
            declared,
        }),
    }
}

/// Binds the command socket, spawns and boots the workers, serves until a
/// stop, joins the workers. An upgrade's `successor` adopts the inherited
/// sockets, and takes the command socket path only once it serves.
fn serve(
    global: &GlobalSettings,
    Boot {
        state,
        base,
        from_config,
    }: Boot,
    (config_path, file): (&Path, FileDeclarations),
    mut successor: Option<Successor>,
) -> Result<(), StartFailure> {
    preread_worker::fd_budget::check(global, state.listeners().len());
    preread_worker::pipe_budget::check(global);
    let (replies_tx, replies_rx) = mpsc::channel();
    let settings = ServerSettings {
        config_path: Some(config_path.to_path_buf()),
        ..ServerSettings::from_global(global)
    };
    let bound = match &successor {
        Some(s) => CommandServer::bind_successor(settings, state, replies_rx, s.generation),
        None => CommandServer::bind(settings, state, replies_rx),
    };
    let mut server = match bound {
        Ok(server) => server,
        Err(error) => {
            let why = format!(
                "cannot open the command socket {}: {error}",
                global.command_socket.display()
            );
            log::error!("{why}");
            if let Some(s) = &mut successor {
                takeover::refuse(&mut s.control, &why);
            }
            return Err(StartFailure::Failed);
        }
    };
    let (access_log, writer) = match access_log::start(
        &global.access_logs,
        global.access_log_format,
        global.access_log_queue,
    ) {
        Ok(started) => started,
        Err(error) => {
            let why = format!(
                "cannot open the access log {:?}: {error}",
                global.access_logs
            );
            return fail(&mut server, Vec::new(), successor.as_mut(), &why);
        }
    };
    if let Some(writer) = &writer {
        server.set_access_log(writer.reopener());
    }
    let shared = Shared::new(global);
    server.share(Arc::clone(&shared));
    let mut threads = Vec::new();
    let count = u32::try_from(global.worker_count.max(1)).unwrap_or(u32::MAX);
    let (mut hands, mut quic_hands) = match &mut successor {
        Some(s) => {
            server.adopt(s.sockets.iter().map(|(address, _)| *address));
            (
                Successor::deal(std::mem::take(&mut s.sockets), count as usize).into_iter(),
                Successor::deal_quic(std::mem::take(&mut s.quic), count as usize).into_iter(),
            )
        }
        None => (Vec::new().into_iter(), Vec::new().into_iter()),
    };
    for id in 0..count {
        match worker::spawn(
            id,
            (WorkerSettings::from_global(global), Arc::clone(&shared)),
            replies_tx.clone(),
            server.waker(),
            worker::Inheritance {
                tcp: hands.next().unwrap_or_default(),
                quic: quic_hands.next().unwrap_or_default(),
            },
            access_log.clone(),
        ) {
            Ok((handle, thread)) => {
                server.add_worker(handle);
                threads.push(thread);
            }
            Err(error) => {
                let why = format!("cannot start worker {id}: {error}");
                return fail(&mut server, threads, successor.as_mut(), &why);
            }
        }
    }
    drop(replies_tx);
    // The workers hold the queue now: once they are gone, so is every
    // sender, and the writer knows no line can come.
    drop(access_log);

    match server.boot() {
        Ok(sent) => log::debug!("boot: {sent} request(s) applied by every worker"),
        Err(error) => {
            let why = format!("{error}");
            return fail(&mut server, threads, successor.as_mut(), &why);
        }
    }
    if let Err(error) = start_backend_threads(&shared, global) {
        let why = error.to_string();
        return fail(&mut server, threads, successor.as_mut(), &why);
    }
    let upgraded = successor.is_some();
    // Unless this config serves metrics on the same address, the inherited
    // copy closes here; the old process's closes when it exits.
    let inherited_metrics = successor.as_mut().and_then(|s| s.metrics.take());
    if let Some(mut s) = successor.take() {
        if let Err(error) = server.take_socket_path() {
            let why = format!(
                "cannot move the command socket over {}: {error}",
                global.command_socket.display()
            );
            return fail(&mut server, threads, Some(&mut s), &why);
        }
        takeover::ready(&mut s.control);
        preread_control::notify::main_pid(std::process::id());
    }
    if let Err(error) = server.resume_saved_state(base) {
        log::error!("cannot save the state: {error}; the next change tries again");
    }
    server.know_config_text(file.outline, from_config);
    if let Err(error) = server.start_sources(file.routes, file.state, &global.sources) {
        log::error!("cannot start the route sources: {error}");
        abort(&mut server, threads);
        return Err(StartFailure::Failed);
    }
    if let Err(error) = server.watch_signals() {
        log::error!(
            "cannot watch the signals (SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGQUIT): {error}"
        );
        abort(&mut server, threads);
        return Err(StartFailure::Failed);
    }
    let metrics = preread_control::metrics_http::Slot::default();
    if let Some(address) = global.metrics_address {
        let socket = server.socket_path().to_path_buf();
        let inherited = inherited_metrics.filter(|(at, _)| *at == address);
        if let Some((_, listener)) = inherited {
            if let Err(error) = metrics.adopt(listener, socket) {
                log::error!("cannot serve metrics on the inherited {address}: {error}");
            }
        } else if upgraded {
            // An old process that did not hand its endpoint over holds the
            // address until it exits.
            let until = Instant::now() + global.soft_stop_grace + Duration::from_secs(30);
            metrics.bind_once_free(address, socket, until);
        } else if let Err(error) = metrics.bind(address, socket) {
            log::error!("cannot serve metrics on {address}: {error}");
            abort(&mut server, threads);
            return Err(StartFailure::Failed);
        }
    }
    server.set_metrics(metrics.clone());
    let listeners: Vec<&str> = server
        .state()
        .listeners()
        .map(|l| l.address.as_str())
        .collect();
    let ready = format!(
        "{} worker(s), listeners [{}], command socket {}",
        threads.len(),
        listeners.join(", "),
        server.socket_path().display()
    );
    preread_control::heap::trim();
    log::info!("preread ready: {ready}");
    preread_control::notify::ready(&ready);

    let outcome = server.run();
    drop(server);
    join_all(threads);
    // After an upgrade the successor accepts on the same socket: what this
    // process accepted is answered before it leaves.
    metrics.retire(preread_control::metrics_http::REQUEST_DEADLINE);
    if let Some(writer) = writer {
        writer.finish(WRITER_FINISH);
    }
    match outcome {
        Ok(kind) => {
            log::info!("preread stopped ({kind:?} stop)");
            Ok(())
        }
        Err(error) => {
            log::error!("the command server failed: {error}");
            Err(StartFailure::Failed)
        }
    }
}

/// Starts the resolver of named backends and the health checker, then
/// waits (at most [`FIRST_RESOLUTION_WAIT`]) for every name of the boot
/// state to have been tried once, so a named backend serves from the first
/// connection. A name that does not resolve is logged by the resolver and
/// does not hold the start.
fn start_backend_threads(
    shared: &Arc<Shared>,
    global: &GlobalSettings,
) -> Result<(), BackendThreadError> {
    let interval = global.resolve_interval;
    let first = resolve::spawn(
        Arc::clone(&shared.registry),
        Arc::clone(&shared.counters),
        interval,
    )
    .map_err(BackendThreadError::Resolver)?;
    checker::spawn(Arc::clone(&shared.registry), Arc::clone(&shared.counters))
        .map_err(BackendThreadError::Checker)?;
    if !first.wait(FIRST_RESOLUTION_WAIT) {
        log::warn!(
            "named backends not all resolved within {FIRST_RESOLUTION_WAIT:?}: serving, and \
             they take connections once they resolve"
        );
    }
    Ok(())
}

/// A backend thread that could not be started (the process is out of
/// threads or memory).
#[derive(Debug)]
enum BackendThreadError {
    Resolver(std::io::Error),
    Checker(std::io::Error),
}

impl std::fmt::Display for BackendThreadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Resolver(e) => write!(f, "cannot start the resolver of named backends: {e}"),
            Self::Checker(e) => write!(f, "cannot start the health checker: {e}"),
        }
    }
}

/// A start that cannot go on: an upgrade's old process hears why, the
/// workers started so far stop.
fn fail(
    server: &mut CommandServer,
    threads: Vec<JoinHandle<()>>,
    successor: Option<&mut Successor>,
    why: &str,
) -> Result<(), StartFailure> {
    log::error!("{why}; stopping");
    if let Some(s) = successor {
        takeover::refuse(&mut s.control, why);
    }
    abort(server, threads);
    Err(StartFailure::Failed)
}

/// Hard-stops the workers started so far and joins them.
fn abort(server: &mut CommandServer, threads: Vec<JoinHandle<()>>) {
    if !server.stop_workers(StopKind::Hard) {
        log::warn!("some worker did not answer the hard stop");
    }
    join_all(threads);
}

/// Joins the worker threads, waiting at most [`JOIN_TIMEOUT`] in all.
fn join_all(threads: Vec<JoinHandle<()>>) {
    let deadline = Instant::now() + JOIN_TIMEOUT;
    for thread in threads {
        while !thread.is_finished() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        if thread.is_finished() {
            if thread.join().is_err() {
                log::error!("a worker thread panicked");
            }
        } else {
            log::warn!("a worker thread did not end in time; exiting without it");
        }
    }
}
