//! The coordinator itself: its settings, its state, and the one entry
//! point, [`Coordinator::handle`].
//!
//! Owns: the dispatch of each input to the part that owns it. Must never:
//! read the clock (`now` comes with each input) or do I/O.

use std::io;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use core::net::SocketAddr;

use command::state::ConfigState;

use crate::effect::Effect;
use crate::input::Input;
use crate::orders::WorkerId;

/// How the proxy stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopKind {
    /// Stop accepting, let sessions finish within the grace.
    Soft,
    /// Close everything now.
    Hard,
}

/// What the coordinator needs to know.
#[derive(Debug, Clone)]
pub struct Settings {
    /// How long a worker may take to answer an order (a soft stop gets
    /// its grace on top).
    pub order_timeout: Duration,
    /// How long a soft stop lets sessions finish.
    pub soft_stop_grace: Duration,
    /// The config file the proxy started from: what SIGHUP reloads.
    pub config_path: Option<PathBuf>,
}

/// Whether the workers could listen at an address a change opens: the
/// one question planning asks the system, answered by the shell (a bind
/// test) or by the simulation.
pub trait AddressCheck {
    /// `Ok` when nothing else listens at `address`.
    fn ensure_unbound(&mut self, address: SocketAddr) -> io::Result<()>;
}

/// The control plane's coordinator. See the crate documentation.
pub struct Coordinator {
    settings: Settings,
    state: ConfigState,
    workers: Vec<WorkerId>,
    check: Box<dyn AddressCheck>,
    generation: u64,
    stopping: Option<StopKind>,
}

impl std::fmt::Debug for Coordinator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Coordinator")
            .field("settings", &self.settings)
            .field("workers", &self.workers)
            .field("generation", &self.generation)
            .field("stopping", &self.stopping)
            .finish_non_exhaustive()
    }
}

impl Coordinator {
    /// A coordinator of no worker yet, whose committed state is `state`.
    pub fn new(
        settings: Settings,
        state: ConfigState,
        check: Box<dyn AddressCheck>,
        now: Instant,
    ) -> Self {
        let _ = now;
        Self {
            settings,
            state,
            workers: Vec::new(),
            check,
            generation: 0,
            stopping: None,
        }
    }

    /// Takes one input at `now`; returns what the shell must do, in order.
    pub fn handle(&mut self, input: Input, now: Instant) -> Vec<Effect> {
        let _ = (input, now);
        Vec::new()
    }

    /// Adds a worker: every later order goes to it too.
    pub fn add_worker(&mut self, worker: WorkerId) {
        self.workers.push(worker);
    }

    /// The live workers.
    pub fn workers(&self) -> &[WorkerId] {
        &self.workers
    }

    /// The committed state.
    pub fn state(&self) -> &ConfigState {
        &self.state
    }

    /// Generations committed since the start (or since the predecessor's
    /// start, after an upgrade).
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The stop under way, if any.
    pub fn stopping(&self) -> Option<StopKind> {
        self.stopping
    }

    /// When the next [`Input::Tick`] is due: the earliest deadline of an
    /// open order. `None` when nothing waits.
    pub fn next_deadline(&self) -> Option<Instant> {
        None
    }
}
