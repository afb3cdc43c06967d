//! The route sources' threads: each reads its source (the Docker Engine
//! API, a watched directory, an etcd prefix), turns what it read into
//! fragments, and hands them to the command server, whose mio loop it
//! wakes.
//!
//! Owns: the threads (named `preread-source-<kind>`), what they report
//! ([`SourceEvent`]: a whole read, or why a read failed), and their stop.
//! Must never: touch the routing state or a worker (the command server
//! merges and applies, as a reload), run on a worker thread, or block the
//! command thread: a source that hangs holds only its own thread.
//!
//! A source reports every whole read, changed or not (the server keeps the
//! time of the last one and applies only a change), or, for etcd, what
//! changed at which revision; a failed read keeps the last good fragments
//! applied.

mod directory;
mod docker;
mod docker_api;
mod docker_error;
mod etcd;
mod unix_transport;

use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::thread::JoinHandle;
use std::time::SystemTime;

use command::config::SourceSettings;
use tokio::sync::mpsc::UnboundedSender;

use command::sources::{Fragment, SourceKind};
pub use etcd::{EtcdGauges, Served};
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
    /// What changed at the store's `revision` (etcd).
    Changed {
        kind: SourceKind,
        revision: i64,
        put: Vec<Fragment>,
        deleted: Vec<String>,
        at: SystemTime,
    },
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
    /// What the proxy serves of etcd, for its thread (dropped: it ends).
    etcd: Option<UnboundedSender<Served>>,
    /// The etcd source's gauges.
    gauges: Option<Arc<EtcdGauges>>,
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
            etcd: None,
            gauges: None,
            threads: Vec::new(),
        };
        if let Some(settings) = &settings.etcd {
            let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
            let gauges = Arc::new(EtcdGauges::default());
            threads.etcd = Some(tx);
            threads.gauges = Some(Arc::clone(&gauges));
            let settings = settings.clone();
            let replica = settings.replica_id.clone().unwrap_or_else(host_name);
            let reporter = reporter.clone();
            threads.threads.push(spawn_named(SourceKind::Etcd, move || {
                etcd::run(settings, &replica, &reporter, rx, gauges);
            })?);
        }
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

    /// Tells the etcd source what the proxy serves of it now.
    pub fn served(&self, served: Served) {
        if let Some(etcd) = &self.etcd
            && etcd.send(served).is_err()
        {
            log::debug!("etcd source: its thread is gone");
        }
    }

    /// The etcd source's gauges, when it runs.
    pub fn etcd_gauges(&self) -> Option<&Arc<EtcdGauges>> {
        self.gauges.as_ref()
    }

    /// Ends the threads: a blocked Docker read is interrupted, the
    /// directory thread sees the flag within its poll interval, the etcd
    /// thread sees its channel closed. Joined only when already finished:
    /// a source never holds up a stop.
    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        self.etcd = None;
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

/// This machine's host name (the default `replica_id`), or `preread`
/// when it has none.
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|name| name.trim().to_owned())
        .ok()
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "preread".to_owned())
}

fn spawn_named(
    kind: SourceKind,
    body: impl FnOnce() + Send + 'static,
) -> io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name(format!("preread-source-{kind}"))
        .spawn(body)
}
