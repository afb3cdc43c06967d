//! What a worker takes from the global settings.
//!
//! Owns: [`WorkerSettings`] and how one worker's share of the global caps is
//! computed. Must never: read the config file (the main thread hands the
//! settings in).

use command::config::GlobalSettings;

/// What a worker needs from the global settings.
#[derive(Debug, Clone)]
pub struct WorkerSettings {
    pub buffer_size: usize,
    /// This worker's share of the global buffer pool.
    pub max_buffers: usize,
    /// This worker's share of the global session cap.
    pub max_connections: usize,
    pub splice: bool,
    pub max_connection_attempts: u32,
    /// Rejected and fallback windows kept for `preread rejects`; 0 is off.
    pub reject_capture: usize,
    /// The keepalive options of both sockets of a session; `None` is off.
    pub tcp_keepalive: Option<socket2::TcpKeepalive>,
}

impl WorkerSettings {
    /// The settings of one worker out of `worker_count`: the pool and the
    /// session cap are split evenly (rounded up), since each worker admits
    /// on its own without locks.
    pub fn from_global(global: &GlobalSettings) -> Self {
        let workers = global.worker_count.max(1);
        Self {
            buffer_size: global.buffer_size,
            max_buffers: global.max_buffers.div_ceil(workers),
            max_connections: global.max_connections.div_ceil(workers),
            splice: global.splice,
            max_connection_attempts: global.max_connection_attempts.max(1),
            reject_capture: global.reject_capture,
            tcp_keepalive: global.tcp_keepalive.as_ref().map(super::keepalive::options),
        }
    }
}
