//! What a worker takes from the global settings.
//!
//! Owns: [`WorkerSettings`]. Must never: read the config file (the main
//! thread hands the settings in), or hold a cap of its own: `max_buffers`
//! and `max_connections` are counted once for the process
//! (`shared::Shared`), not split between the workers.

use command::config::{AccessLogFormat, AccessLogTarget, GlobalSettings};

/// What a worker needs from the global settings.
#[derive(Debug, Clone)]
pub struct WorkerSettings {
    pub buffer_size: usize,
    pub splice: bool,
    pub max_connection_attempts: u32,
    pub access_logs: AccessLogTarget,
    pub access_log_format: AccessLogFormat,
}

impl WorkerSettings {
    /// The settings of every worker.
    pub fn from_global(global: &GlobalSettings) -> Self {
        Self {
            buffer_size: global.buffer_size,
            splice: global.splice,
            max_connection_attempts: global.max_connection_attempts.max(1),
            access_logs: global.access_logs.clone(),
            access_log_format: global.access_log_format,
        }
    }
}
