//! `preread start`: runs the proxy in the foreground.
//!
//! Owns: the boot sequence: config, logging, the boot state (a valid saved
//! state file wins over the config's declarations, unless it is empty and
//! `empty_saved_state` says otherwise; stale temp files of killed saves are
//! removed first), the command socket, the
//! workers, replaying the state on them, then the command server until a
//! stop, and joining the workers. Must never: start with a state the
//! workers refused, or over another running proxy's command socket.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use command::codes::ErrorCode;
use command::config::{EmptySavedState, GlobalSettings, load_config_file};
use command::state::ConfigState;
use command::state_file::{load_state_requests, remove_stale_temp_files, save_state};
use command::validate::check_cap_fits_buffer;

use crate::cli::{EXIT_FAILED, EXIT_USAGE, Globals};
use crate::server::{CommandServer, ServerSettings, StopKind};
use crate::worker::{self, WorkerSettings};

/// How long `start` waits for the worker threads to end after they
/// answered the stop.
const JOIN_TIMEOUT: Duration = Duration::from_secs(5);

/// Runs `preread start`.
pub fn run(globals: &Globals) -> ExitCode {
    let config_path = globals
        .config
        .clone()
        .unwrap_or_else(|| PathBuf::from("preread.toml"));
    let loaded = match load_config_file(&config_path) {
        Ok(loaded) => loaded,
        Err(problems) => {
            eprintln!(
                "preread: {} is not a valid config, not starting:",
                config_path.display()
            );
            for problem in &problems {
                eprintln!("{}:{problem}", config_path.display());
            }
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let mut global = loaded.global;
    if let Some(socket) = &globals.socket {
        global.command_socket.clone_from(socket);
    }
    init_logging(&global.log_level);
    let state = match boot_state(&global, loaded.state) {
        Ok(state) => state,
        Err(message) => {
            eprintln!("preread: {message}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    serve(&global, state, &config_path)
}

fn init_logging(log_level: &str) {
    let env = env_logger::Env::default().default_filter_or(log_level);
    // A second init (tests) keeps the first logger.
    let _ = env_logger::Builder::from_env(env).try_init();
}

/// The state to boot with: the saved state file when there is one (it is
/// the source of truth), else the config's declarations. An empty state
/// file against a config that declares routing is `empty_saved_state`'s
/// choice.
fn boot_state(global: &GlobalSettings, from_config: ConfigState) -> Result<ConfigState, String> {
    let Some(path) = &global.saved_state else {
        return Ok(from_config);
    };
    for stale in remove_stale_temp_files(path) {
        match stale {
            Ok(file) => log::info!("removed {}, left by a save that was killed", file.display()),
            Err(error) => log::warn!("{error}"),
        }
    }
    match load_state_requests(path) {
        Ok((state, requests)) => {
            if let Some(error) = requests
                .iter()
                .find_map(|r| check_cap_fits_buffer(r, global.buffer_size).err())
            {
                return Err(format!(
                    "the state file {} does not fit this config, not starting (fix the file, or raise buffer_size): {}: {}",
                    path.display(),
                    error.code.as_str(),
                    error.message
                ));
            }
            let declared = from_config.generate_requests().len();
            if requests.is_empty() && declared > 0 {
                return empty_state(global.empty_saved_state, path, declared, from_config);
            }
            log::info!(
                "booting from the state file {} ({} request(s))",
                path.display(),
                requests.len()
            );
            Ok(state)
        }
        Err(error) if error.is_not_found() => {
            log::info!(
                "no state file at {} yet: booting from the config's declarations",
                path.display()
            );
            Ok(from_config)
        }
        Err(error) => Err(format!(
            "the state file {} is not valid, not starting (fix or remove it): {error}",
            path.display()
        )),
    }
}

/// A valid state file with no routing, while the config declares
/// `declared` requests' worth.
fn empty_state(
    choice: EmptySavedState,
    path: &Path,
    declared: usize,
    from_config: ConfigState,
) -> Result<ConfigState, String> {
    let path = path.display();
    match choice {
        EmptySavedState::UseConfig => {
            log::warn!(
                "the state file {path} is empty: booting from the config's {declared} \
                 declaration(s) (empty_saved_state = \"use_config\")"
            );
            Ok(from_config)
        }
        EmptySavedState::KeepEmpty => {
            log::warn!(
                "the state file {path} is empty: booting with no routing, the config's \
                 {declared} declaration(s) unused (empty_saved_state = \"keep_empty\")"
            );
            Ok(ConfigState::default())
        }
        EmptySavedState::Refuse => Err(format!(
            "the state file {path} holds no routing while the config declares {declared} \
             request(s), not starting: {}: set empty_saved_state = \"use_config\" to boot \
             from the config or \"keep_empty\" to boot with nothing, or delete the file",
            ErrorCode::StateFileEmpty
        )),
    }
}

/// Binds the command socket, spawns and boots the workers, serves until a
/// stop, joins the workers.
fn serve(global: &GlobalSettings, state: ConfigState, config_path: &Path) -> ExitCode {
    let (replies_tx, replies_rx) = mpsc::channel();
    let settings = ServerSettings {
        config_path: Some(config_path.to_path_buf()),
        ..ServerSettings::from_global(global)
    };
    let mut server = match CommandServer::bind(settings, state, replies_rx) {
        Ok(server) => server,
        Err(error) => {
            log::error!(
                "cannot open the command socket {}: {error}",
                global.command_socket.display()
            );
            return ExitCode::from(EXIT_FAILED);
        }
    };
    let mut threads = Vec::new();
    let count = u32::try_from(global.worker_count.max(1)).unwrap_or(u32::MAX);
    for id in 0..count {
        match worker::spawn(
            id,
            WorkerSettings::from_global(global),
            replies_tx.clone(),
            server.waker(),
        ) {
            Ok((handle, thread)) => {
                server.add_worker(handle);
                threads.push(thread);
            }
            Err(error) => {
                log::error!("cannot start worker {id}: {error}");
                abort(&mut server, threads);
                return ExitCode::from(EXIT_FAILED);
            }
        }
    }
    drop(replies_tx);

    match server.boot() {
        Ok(sent) => log::debug!("boot: {sent} request(s) applied by every worker"),
        Err(error) => {
            log::error!("{error}; stopping");
            abort(&mut server, threads);
            return ExitCode::from(EXIT_FAILED);
        }
    }
    if global.automatic_state_save
        && let Some(path) = &global.saved_state
        && let Err(error) = save_state(path, &server.state().generate_requests())
    {
        log::error!("cannot write the state file {}: {error}", path.display());
    }
    if let Err(error) = server.watch_signals() {
        log::error!(
            "cannot watch the signals (SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGQUIT): {error}"
        );
        abort(&mut server, threads);
        return ExitCode::from(EXIT_FAILED);
    }
    if let Some(address) = global.metrics_address
        && let Err(error) = crate::metrics_http::spawn(address, server.socket_path().to_path_buf())
    {
        log::error!("cannot serve metrics on {address}: {error}");
        abort(&mut server, threads);
        return ExitCode::from(EXIT_FAILED);
    }
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
    log::info!("preread ready: {ready}");
    crate::notify::ready(&ready);

    let outcome = server.run();
    drop(server);
    join_all(threads);
    match outcome {
        Ok(kind) => {
            log::info!("preread stopped ({kind:?} stop)");
            ExitCode::SUCCESS
        }
        Err(error) => {
            log::error!("the command server failed: {error}");
            ExitCode::from(EXIT_FAILED)
        }
    }
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
