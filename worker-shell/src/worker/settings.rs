//! What a worker takes from the global settings.
//!
//! Owns: [`WorkerSettings`]. Must never: read the config file (the main
//! thread hands the settings in), or hold a cap of its own: `max_buffers`
//! and `max_connections` are counted once for the process
//! (`shared::Shared`), not split between the workers.

use command::config::GlobalSettings;

/// What a worker needs from the global settings.
#[derive(Debug, Clone)]
pub struct WorkerSettings {
    pub buffer_size: usize,
    pub splice: bool,
    /// Bytes a direction copies before it splices (`splice_threshold`).
    pub splice_threshold: u64,
    /// The size each kernel pipe asks for (`splice_pipe_size`); `None`
    /// keeps the kernel's default.
    pub splice_pipe_size: Option<usize>,
    /// The size a bulk direction's pipe grows to
    /// (`splice_bulk_pipe_size`); 0 never grows one.
    pub splice_bulk_pipe_size: usize,
    pub max_connection_attempts: u32,
    /// Rejected and fallback windows kept for `preread rejects`; 0 is off.
    pub reject_capture: usize,
    /// The keepalive options of the client sockets (inherited from the
    /// listener); `None` is off.
    pub tcp_keepalive: Option<socket2::TcpKeepalive>,
    /// The keepalive options of the backend sockets: `tcp_keepalive`'s
    /// with `backend_keepalive`, else `None`.
    pub backend_keepalive: Option<socket2::TcpKeepalive>,
    /// `defer_accept`: listeners that wait for the client's first bytes
    /// use `TCP_DEFER_ACCEPT` (`worker/defer.rs`).
    pub defer_accept: bool,
    /// `backend_delayed_ack`: the handshake's last ACK rides on the first
    /// bytes (`worker/backend_socket.rs`).
    pub backend_delayed_ack: bool,
}

impl WorkerSettings {
    /// The settings of every worker.
    pub fn from_global(global: &GlobalSettings) -> Self {
        Self {
            buffer_size: global.buffer_size,
            splice: global.splice,
            splice_threshold: global.splice_threshold,
            splice_pipe_size: global.splice_pipe_size,
            splice_bulk_pipe_size: global.splice_bulk_pipe_size,
            max_connection_attempts: global.max_connection_attempts.max(1),
            reject_capture: global.reject_capture,
            tcp_keepalive: global.tcp_keepalive.as_ref().map(super::keepalive::options),
            backend_keepalive: (global.tcp_keepalive.as_ref())
                .filter(|_| global.backend_keepalive)
                .map(super::keepalive::options),
            defer_accept: global.defer_accept,
            backend_delayed_ack: global.backend_delayed_ack,
        }
    }
}
