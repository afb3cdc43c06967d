//! What the threads of the process share, so that it behaves as one proxy
//! whatever `worker_count` is: admission counts, backend health, and named
//! backends' addresses.
//!
//! Owns: [`Shared`] (the session, buffer and grown-pipe caps, the unrouted counts per
//! listener and address, the listeners' connection rates per source, the registry of clusters and backends, the
//! process-wide counters), and the two threads that work on the registry
//! beside the workers: the health checker (`checker`) and the resolver
//! (`resolve`). Must never: be locked by a worker across a syscall, or on
//! the accept path beyond one atomic operation or one shard of a map.

pub mod admission;
pub mod checker;
pub mod events;
pub mod health;
pub mod instance;
pub mod quic_flows;
pub mod rates;
pub mod registry;
pub mod resolve;
pub(crate) mod shortage;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use command::config::GlobalSettings;

use admission::{PerIp, Slots};
use events::Counters;
use rates::SharedRates;
use registry::Registry;

/// The counts and state every thread of the process shares.
#[derive(Debug)]
pub struct Shared {
    /// Open sessions, capped at `max_connections`.
    pub sessions: Arc<Slots>,
    /// Pooled buffers checked out by all workers, capped at `max_buffers`.
    pub buffers: Arc<Slots>,
    /// Kernel pipes grown for bulk transfers, by all workers, capped at
    /// `splice_bulk_budget / splice_bulk_pipe_size`.
    pub bulk_pipes: Arc<Slots>,
    /// Connections not routed yet, per listener and client address
    /// (`max_unrouted_per_ip`).
    pub unrouted: Arc<PerIp<(SocketAddr, IpAddr)>>,
    /// The listeners' `connection_rate_per_ip` buckets, per listener and
    /// source.
    pub listener_rates: Arc<SharedRates<(SocketAddr, IpAddr)>>,
    pub registry: Arc<Registry>,
    pub counters: Arc<Counters>,
    /// QUIC flows per listener and per client address (`max_flows`,
    /// `max_flows_per_ip`).
    pub quic_flows: quic_flows::FlowCounts,
}

impl Shared {
    /// The shared state of a process started with `global`.
    #[must_use]
    pub fn new(global: &GlobalSettings) -> Arc<Self> {
        Arc::new(Self {
            sessions: Slots::new(global.max_connections),
            buffers: Slots::new(global.max_buffers),
            bulk_pipes: Slots::new(global.bulk_pipe_slots()),
            unrouted: PerIp::new(),
            listener_rates: SharedRates::new(),
            registry: Arc::new(Registry::default()),
            counters: Arc::new(Counters::default()),
            quic_flows: quic_flows::FlowCounts::new(),
        })
    }
}
