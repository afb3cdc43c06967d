//! The route sources' threads: each reads its source (the Docker Engine
//! API, a watched directory), turns what it read into fragments, and hands
//! them to the command server, whose mio loop it wakes.
//!
//! Owns: the threads (named `preread-source-<kind>`), what they report
//! ([`SourceEvent`]: a whole read, or why a read failed), and their stop.
//! Must never: touch the routing state or a worker (the command server
//! merges and applies, as a reload), run on a worker thread, or block the
//! command thread: a source that hangs holds only its own thread.
//!
//! A source reports every whole read, changed or not (the server keeps the
//! time of the last one and applies only a change); a failed read keeps
//! the last good fragments applied.

mod directory;
mod docker;
mod docker_api;
mod docker_error;
mod unix_transport;

use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::thread::JoinHandle;
use std::time::SystemTime;

use command::config::SourceSettings;
use command::sources::{Fragment, SourceKind};
use mio::Waker;

/// What a source thread tells the command server.
#[derive(Debug)]
pub enum SourceEvent {
    /// The source was read whole: these are all its fragments.
    Synced {
        kind: SourceKind,
        fragments: Vec<Fragment>,
        at: SystemTime,
    },
    /// Reading the source failed: its last good fragments stay.
    Failed { kind: SourceKind, error: String },
}

/// The sending end a source thread reports through: the channel to the
/// command server, and its waker.
#[derive(Debug, Clone)]
pub struct Reporter {
    events: Sender<SourceEvent>,
    waker: Arc<Waker>,
    stop: Arc<AtomicBool>,
}

impl Reporter {
    /// Sends `event` and wakes the server; `false` once the source must end
    /// (the server is gone or stopped it).
    fn report(&self, event: SourceEvent) -> bool {
        if self.stopped() || self.events.send(event).is_err() {
            return false;
        }
        if let Err(error) = self.waker.wake() {
            log::warn!("route source: cannot wake the command server: {error}");
        }
        true
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
}

/// The running source threads; stopping them (or dropping this) ends them.
#[derive(Debug)]
pub struct SourceThreads {
    stop: Arc<AtomicBool>,
    docker: Option<docker_api::DockerApi>,
    threads: Vec<JoinHandle<()>>,
}

impl SourceThreads {
    /// Starts a thread per source of `settings`, each reporting on
    /// `events` and waking `waker`.
    pub fn spawn(
        settings: &SourceSettings,
        events: Sender<SourceEvent>,
        waker: Arc<Waker>,
    ) -> io::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let reporter = Reporter {
            events,
            waker,
            stop: Arc::clone(&stop),
        };
        let mut threads = SourceThreads {
            stop,
            docker: None,
            threads: Vec::new(),
        };
        if let Some(socket) = &settings.docker {
            let api = docker_api::DockerApi::new(socket.clone());
            threads.docker = Some(api.clone());
            let reporter = reporter.clone();
            threads
                .threads
                .push(spawn_named(SourceKind::Docker, move || {
                    docker::run(&api, &reporter);
                })?);
        }
        if let Some(path) = &settings.directory {
            let path: PathBuf = path.clone();
            threads
                .threads
                .push(spawn_named(SourceKind::Directory, move || {
                    directory::run(&path, &reporter);
                })?);
        }
        Ok(threads)
    }

    /// Ends the threads: a blocked Docker read is interrupted, the
    /// directory thread sees the flag within its poll interval. Joined only
    /// when already finished: a source never holds up a stop.
    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(api) = self.docker.take() {
            api.shutdown();
        }
        for thread in std::mem::take(&mut self.threads) {
            if thread.is_finished() && thread.join().is_err() {
                log::error!("a route source thread panicked");
            }
        }
    }
}

impl Drop for SourceThreads {
    fn drop(&mut self) {
        self.stop();
    }
}

fn spawn_named(
    kind: SourceKind,
    body: impl FnOnce() + Send + 'static,
) -> io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name(format!("preread-source-{kind}"))
        .spawn(body)
}
