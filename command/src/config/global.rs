//! The process-wide settings of a config file: their defaults, their types
//! and the checks of their values.
//!
//! Owns: every top-level key that is not a routing declaration
//! (`command_socket`, `worker_count`, `log_level`, the access log, the
//! buffer pool, ...), its default, its accepted range or spellings, and
//! resolving the relative paths among them beside the config file.
//!
//! Must never: read a routing declaration, open a file or socket named by a
//! setting, or stop at the first bad value: every problem is recorded and
//! the default stands in for the value.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use toml::Spanned;

use super::keepalive::{TcpKeepalive, tcp_keepalive};
use super::lines::{Problems, duration_millis, ranged};
use super::raw::RawConfig;
use super::sources::{SourceSettings, source_settings};
use super::syslog::{SyslogTarget, syslog_target};
use crate::codes::ErrorCode;
use crate::spelling::quoted;

/// Default of `command_socket`.
pub const DEFAULT_COMMAND_SOCKET: &str = "./preread.sock";
/// Default of `worker_count`.
pub const DEFAULT_WORKER_COUNT: usize = 1;
/// Default of `log_level`.
pub const DEFAULT_LOG_LEVEL: &str = "info";
/// Default of `buffer_size`, in bytes.
pub const DEFAULT_BUFFER_SIZE: usize = 16_384;
/// Default of `max_buffers`.
pub const DEFAULT_MAX_BUFFERS: usize = 10_000;
/// Default of `max_connections`.
pub const DEFAULT_MAX_CONNECTIONS: usize = 10_000;
/// Default of `splice`.
pub const DEFAULT_SPLICE: bool = true;
/// Default of `splice_threshold`, in bytes: a direction copies its first
/// 64 KiB (a short exchange never needs a kernel pipe) and splices from
/// there on.
pub const DEFAULT_SPLICE_THRESHOLD: u64 = 65_536;
/// The smallest `splice_pipe_size`: one page, the least a pipe holds.
pub const MIN_SPLICE_PIPE_SIZE: usize = 4096;
/// The largest `splice_pipe_size`: far past any `pipe-max-size` an
/// operator means, below what the kernel cannot allocate for one pipe.
pub const MAX_SPLICE_PIPE_SIZE: usize = 256 << 20;
/// Default of `splice_bulk_pipe_size`: `/proc/sys/fs/pipe-max-size`'s
/// default, the most an unprivileged process may ask for; 16 times
/// fewer `splice` calls per byte than the kernel's 64 KiB pipe.
pub const DEFAULT_SPLICE_BULK_PIPE_SIZE: usize = 1 << 20;
/// Default of `splice_bulk_budget`: half of the kernel's default
/// `fs.pipe-user-pages-soft` (16,384 pages, 64 MiB), so that the pipes of
/// the kernel's size, the ones every other spliced session takes, keep
/// the other half.
pub const DEFAULT_SPLICE_BULK_BUDGET: usize = 32 << 20;
/// Default of `backend_keepalive`: the backend is usually near and alive,
/// and the four `setsockopt` per connection it costs are for who asks.
pub const DEFAULT_BACKEND_KEEPALIVE: bool = false;
/// Default of `defer_accept`.
pub const DEFAULT_DEFER_ACCEPT: bool = true;
/// Default of `backend_delayed_ack`: off, since a backend socket that
/// delays its ACKs from the start can stall a backend that writes its first
/// answer in two small writes without `TCP_NODELAY` (doc/configure.md).
pub const DEFAULT_BACKEND_DELAYED_ACK: bool = false;
/// Default of `max_connection_attempts`.
pub const DEFAULT_MAX_CONNECTION_ATTEMPTS: u32 = 3;
/// Default of `soft_stop_grace`.
pub const DEFAULT_SOFT_STOP_GRACE: Duration = Duration::from_secs(30);
/// Default of `command_client_timeout`: far above what a command-line
/// client or a scrape needs to send a request or read its answer, short
/// enough that stuck clients do not pile up.
pub const DEFAULT_COMMAND_CLIENT_TIMEOUT: Duration = Duration::from_secs(10);
/// Default of `access_log_queue`, in lines: at 10,000 closed sessions a
/// second, the writer may stall for most of a second before a line drops.
pub const DEFAULT_ACCESS_LOG_QUEUE: usize = 8192;
/// Default of `reject_capture`, in windows per worker.
pub const DEFAULT_REJECT_CAPTURE: usize = 64;
/// The most windows `reject_capture` keeps per worker: each holds up to a
/// listener's cap (16 KiB by default).
pub const MAX_REJECT_CAPTURE: usize = 4096;
/// Default of `resolve_interval`.
pub const DEFAULT_RESOLVE_INTERVAL: Duration = Duration::from_secs(30);

/// The smallest accepted `buffer_size`: a buffer must at least hold a TLS
/// record header.
pub const MIN_BUFFER_SIZE: usize = preread_core::MIN_PREREAD_MAX_BYTES;
/// Where the access log goes (`access_logs`).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum AccessLogTarget {
    /// `"stderr"` (default).
    #[default]
    Stderr,
    /// `"off"`: no access log.
    Off,
    /// Any other value: a file path, appended to.
    File(PathBuf),
    /// `"syslog:PATH"` or `"syslog:udp://IP:PORT"`: RFC 5424 messages.
    Syslog(SyslogTarget),
}

/// The shape of an access log line (`access_log_format`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum AccessLogFormat {
    /// `"logfmt"` (default): `key=value` pairs.
    #[default]
    Logfmt,
    /// `"json"`: one JSON object per line, same keys.
    Json,
}

/// What `preread start` does when `saved_state` is valid but empty while
/// the config declares routing (`empty_saved_state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum EmptySavedState {
    /// `"refuse"` (default): do not start (E014); the operator chooses.
    #[default]
    Refuse,
    /// `"use_config"`: boot from the config's declarations.
    UseConfig,
    /// `"keep_empty"`: boot with no routing, as the state file says.
    KeepEmpty,
}

/// The process-wide settings of a config file, typed, validated, defaults
/// applied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GlobalSettings {
    /// The Unix command socket (created mode 0600).
    pub command_socket: PathBuf,
    /// Worker threads, at least 1.
    pub worker_count: usize,
    /// The state file replayed at boot, if any.
    pub saved_state: Option<PathBuf>,
    /// Rewrite `saved_state` after every accepted change (needs
    /// `saved_state`).
    pub automatic_state_save: bool,
    /// The log filter (`error`, `warn`, `info`, `debug`, `trace`, `off`,
    /// or `target=level` directives separated by commas); `RUST_LOG`
    /// overrides it.
    pub log_level: String,
    /// Where the access log goes.
    pub access_logs: AccessLogTarget,
    /// The access log's line format.
    pub access_log_format: AccessLogFormat,
    /// Lines the workers may queue for the access-log writer, at least 1;
    /// past them, lines are dropped (and counted), never waited for.
    pub access_log_queue: usize,
    /// Rejected and fallback windows each worker keeps for `preread
    /// rejects`; 0 is off.
    pub reject_capture: usize,
    /// The Prometheus text endpoint, if any.
    pub metrics_address: Option<SocketAddr>,
    /// Bytes per pooled buffer, at least [`MIN_BUFFER_SIZE`].
    pub buffer_size: usize,
    /// Buffer pool cap, at least 1.
    pub max_buffers: usize,
    /// Global session cap, at least 1.
    pub max_connections: usize,
    /// Use the Linux zero-copy data path.
    pub splice: bool,
    /// With `splice`: bytes a direction copies before it splices (it also
    /// splices once it fills its buffer); 0 splices from the first byte
    /// after the window.
    pub splice_threshold: u64,
    /// With `splice`: the size each kernel pipe asks for (`F_SETPIPE_SZ`),
    /// in bytes, [`MIN_SPLICE_PIPE_SIZE`] to [`MAX_SPLICE_PIPE_SIZE`];
    /// unset, pipes keep the kernel's default size (64 KiB) and cost no
    /// `fcntl`. Unset by default: the kernel counts every pipe's whole size
    /// against its user's `fs.pipe-user-pages-soft` (64 MiB), so 1 MiB
    /// pipes would give an unprivileged service (the shipped unit's
    /// `DynamicUser`) 2-page pipes past 32 spliced sessions.
    pub splice_pipe_size: Option<usize>,
    /// With `splice`: the size a direction's pipe grows to once the
    /// direction proves a bulk transfer (its source filled the pipe again
    /// and again), [`MIN_SPLICE_PIPE_SIZE`] to [`MAX_SPLICE_PIPE_SIZE`];
    /// 0 never grows a pipe.
    pub splice_bulk_pipe_size: usize,
    /// Bytes of grown pipes the whole process holds at most, whatever
    /// `worker_count` is: `splice_bulk_budget / splice_bulk_pipe_size`
    /// pipes grown at once; a bulk direction past it splices through the
    /// pipe it has.
    pub splice_bulk_budget: usize,
    /// Backends tried per connection before giving up, at least 1.
    pub max_connection_attempts: u32,
    /// How long a soft stop lets open sessions finish.
    pub soft_stop_grace: Duration,
    /// What an empty `saved_state` means when the config declares routing.
    pub empty_saved_state: EmptySavedState,
    /// How long the command server waits on one client (for the rest of a
    /// request, or for it to read its answers), at least 1 ms.
    pub command_client_timeout: Duration,
    /// The route sources merged with the file's declarations
    /// (`[sources.*]`).
    pub sources: SourceSettings,
    /// Keepalive probes on the client sockets (and the backend sockets
    /// with `backend_keepalive`); `None` is off.
    pub tcp_keepalive: Option<TcpKeepalive>,
    /// Whether the backend sockets get `tcp_keepalive` too.
    pub backend_keepalive: bool,
    /// Whether a backend socket with bytes to write at once holds the
    /// handshake's last ACK for them (and so delays its ACKs from the start).
    pub backend_delayed_ack: bool,
    /// Whether listeners that wait for the client's first bytes ask the
    /// kernel to hand a connection over only once they are there.
    pub defer_accept: bool,
    /// The time between two resolutions of each named backend, at least
    /// 1 ms.
    pub resolve_interval: Duration,
}

impl GlobalSettings {
    /// How many pipes may be grown at once, process-wide:
    /// `splice_bulk_budget / splice_bulk_pipe_size`, 0 when pipes never
    /// grow. The one reckoning of the budget: the workers' shared cap and
    /// the start's pipe-limit check both read it.
    pub fn bulk_pipe_slots(&self) -> usize {
        self.splice_bulk_budget
            .checked_div(self.splice_bulk_pipe_size)
            .unwrap_or(0)
    }

    /// Makes relative paths relative to the folder of `config_file`.
    pub fn resolve_paths_beside(&mut self, config_file: &Path) {
        let folder = config_file.parent().unwrap_or_else(|| Path::new(""));
        let resolve = |path: &mut PathBuf| {
            if path.is_relative() {
                *path = folder.join(&*path);
            }
        };
        resolve(&mut self.command_socket);
        if let Some(saved_state) = &mut self.saved_state {
            resolve(saved_state);
        }
        if let AccessLogTarget::File(file) | AccessLogTarget::Syslog(SyslogTarget::Unix(file)) =
            &mut self.access_logs
        {
            resolve(file);
        }
        if let Some(socket) = &mut self.sources.docker {
            resolve(socket);
        }
        if let Some(directory) = &mut self.sources.directory {
            resolve(directory);
        }
        if let Some(etcd) = &mut self.sources.etcd {
            for file in [&mut etcd.ca_file, &mut etcd.cert_file, &mut etcd.key_file]
                .into_iter()
                .flatten()
            {
                resolve(file);
            }
        }
    }
}

impl Default for GlobalSettings {
    fn default() -> Self {
        Self {
            command_socket: PathBuf::from(DEFAULT_COMMAND_SOCKET),
            worker_count: DEFAULT_WORKER_COUNT,
            saved_state: None,
            automatic_state_save: false,
            log_level: DEFAULT_LOG_LEVEL.to_owned(),
            access_logs: AccessLogTarget::Stderr,
            access_log_format: AccessLogFormat::Logfmt,
            access_log_queue: DEFAULT_ACCESS_LOG_QUEUE,
            reject_capture: DEFAULT_REJECT_CAPTURE,
            metrics_address: None,
            buffer_size: DEFAULT_BUFFER_SIZE,
            max_buffers: DEFAULT_MAX_BUFFERS,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            splice: DEFAULT_SPLICE,
            splice_threshold: DEFAULT_SPLICE_THRESHOLD,
            splice_pipe_size: None,
            splice_bulk_pipe_size: DEFAULT_SPLICE_BULK_PIPE_SIZE,
            splice_bulk_budget: DEFAULT_SPLICE_BULK_BUDGET,
            max_connection_attempts: DEFAULT_MAX_CONNECTION_ATTEMPTS,
            soft_stop_grace: DEFAULT_SOFT_STOP_GRACE,
            empty_saved_state: EmptySavedState::Refuse,
            command_client_timeout: DEFAULT_COMMAND_CLIENT_TIMEOUT,
            sources: SourceSettings::default(),
            tcp_keepalive: Some(TcpKeepalive::default()),
            backend_keepalive: DEFAULT_BACKEND_KEEPALIVE,
            backend_delayed_ack: DEFAULT_BACKEND_DELAYED_ACK,
            defer_accept: DEFAULT_DEFER_ACCEPT,
            resolve_interval: DEFAULT_RESOLVE_INTERVAL,
        }
    }
}
pub(super) fn global_settings(raw: &RawConfig, problems: &mut Problems<'_>) -> GlobalSettings {
    let mut global = GlobalSettings::default();

    if let Some(socket) = &raw.command_socket {
        if let Some(path) = non_empty_path(socket, "command_socket", problems) {
            global.command_socket = path;
        }
    }
    if let Some(count) = &raw.worker_count {
        if let Some(count) = ranged::<usize>(count, "worker_count", 1, problems) {
            global.worker_count = count;
        }
    }
    if let Some(saved) = &raw.saved_state {
        global.saved_state = non_empty_path(saved, "saved_state", problems);
    }
    if let Some(automatic) = &raw.automatic_state_save {
        global.automatic_state_save = *automatic.get_ref();
        if global.automatic_state_save && raw.saved_state.is_none() {
            problems.push(
                automatic.span().start,
                ErrorCode::InvalidValue,
                "automatic_state_save = true needs saved_state: set saved_state to the \
                 file to rewrite, or remove automatic_state_save"
                    .to_owned(),
            );
        }
    }
    if let Some(level) = &raw.log_level {
        if log_level_is_valid(level.get_ref()) {
            global.log_level.clone_from(level.get_ref());
        } else {
            problems.push(
                level.span().start,
                ErrorCode::InvalidValue,
                format!(
                    "log_level {} is not a log filter: use error, warn, info, debug, trace \
                     or off, or target=level directives separated by commas",
                    quoted(level.get_ref())
                ),
            );
        }
    }
    if let Some(logs) = &raw.access_logs {
        match logs.get_ref().as_str() {
            "stderr" => global.access_logs = AccessLogTarget::Stderr,
            "off" => global.access_logs = AccessLogTarget::Off,
            "" => problems.push(
                logs.span().start,
                ErrorCode::InvalidValue,
                "access_logs is empty: use \"stderr\", \"off\" or a file path".to_owned(),
            ),
            other => match syslog_target(other) {
                Some(Ok(syslog)) => global.access_logs = AccessLogTarget::Syslog(syslog),
                Some(Err(why)) => {
                    problems.push(logs.span().start, ErrorCode::InvalidValue, why.to_string());
                }
                None => global.access_logs = AccessLogTarget::File(PathBuf::from(other)),
            },
        }
    }
    if let Some(format) = &raw.access_log_format {
        match format.get_ref().as_str() {
            "logfmt" => global.access_log_format = AccessLogFormat::Logfmt,
            "json" => global.access_log_format = AccessLogFormat::Json,
            other => problems.push(
                format.span().start,
                ErrorCode::InvalidValue,
                format!(
                    "access_log_format {} is unknown: use \"logfmt\" or \"json\"",
                    quoted(other)
                ),
            ),
        }
    }
    if let Some(queue) = &raw.access_log_queue {
        if let Some(queue) = ranged::<usize>(queue, "access_log_queue", 1, problems) {
            global.access_log_queue = queue;
        }
    }
    if let Some(capture) = &raw.reject_capture {
        match ranged::<usize>(capture, "reject_capture", 0, problems) {
            Some(n) if n > MAX_REJECT_CAPTURE => problems.push(
                capture.span().start,
                ErrorCode::InvalidValue,
                format!(
                    "reject_capture = {n} is more than {MAX_REJECT_CAPTURE}: each window kept \
                     holds up to a listener's cap; use at most {MAX_REJECT_CAPTURE}, or 0 to turn \
                     capture off"
                ),
            ),
            Some(n) => global.reject_capture = n,
            None => {}
        }
    }
    if let Some(address) = &raw.metrics_address {
        match address.get_ref().parse::<SocketAddr>() {
            Ok(parsed) => global.metrics_address = Some(parsed),
            Err(_) => problems.push(
                address.span().start,
                ErrorCode::InvalidAddress,
                format!(
                    "metrics_address {} is not an ip:port address (e.g. \"127.0.0.1:9109\" \
                     or \"[::1]:9109\")",
                    quoted(address.get_ref())
                ),
            ),
        }
    }
    if let Some(size) = &raw.buffer_size {
        if let Some(size) = ranged::<usize>(size, "buffer_size", MIN_BUFFER_SIZE as i64, problems) {
            global.buffer_size = size;
        }
    }
    if let Some(buffers) = &raw.max_buffers {
        if let Some(buffers) = ranged::<usize>(buffers, "max_buffers", 1, problems) {
            global.max_buffers = buffers;
        }
    }
    if let Some(connections) = &raw.max_connections {
        if let Some(connections) = ranged::<usize>(connections, "max_connections", 1, problems) {
            global.max_connections = connections;
        }
    }
    if let Some(splice) = &raw.splice {
        global.splice = *splice.get_ref();
    }
    if let Some(threshold) = &raw.splice_threshold {
        if let Some(threshold) = ranged::<u64>(threshold, "splice_threshold", 0, problems) {
            global.splice_threshold = threshold;
        }
    }
    if let Some(size) = &raw.splice_pipe_size {
        if let Some(n) = pipe_size(size, "splice_pipe_size", problems) {
            global.splice_pipe_size = Some(n);
        }
    }
    if let Some(size) = &raw.splice_bulk_pipe_size {
        if *size.get_ref() == 0 {
            global.splice_bulk_pipe_size = 0;
        } else if let Some(n) = pipe_size(size, "splice_bulk_pipe_size", problems) {
            global.splice_bulk_pipe_size = n;
        }
    }
    if let Some(budget) = &raw.splice_bulk_budget {
        if let Some(budget) = ranged::<usize>(budget, "splice_bulk_budget", 0, problems) {
            global.splice_bulk_budget = budget;
        }
    }
    if let Some(attempts) = &raw.max_connection_attempts {
        if let Some(attempts) = ranged::<u32>(attempts, "max_connection_attempts", 1, problems) {
            global.max_connection_attempts = attempts;
        }
    }
    if let Some(grace) = &raw.soft_stop_grace {
        if let Some(grace) = duration_millis(grace, "soft_stop_grace", (0, u64::MAX), problems) {
            global.soft_stop_grace = Duration::from_millis(grace);
        }
    }
    if let Some(empty) = &raw.empty_saved_state {
        match empty.get_ref().as_str() {
            "refuse" => global.empty_saved_state = EmptySavedState::Refuse,
            "use_config" => global.empty_saved_state = EmptySavedState::UseConfig,
            "keep_empty" => global.empty_saved_state = EmptySavedState::KeepEmpty,
            other => problems.push(
                empty.span().start,
                ErrorCode::InvalidValue,
                format!(
                    "empty_saved_state {} is unknown: use \"refuse\", \"use_config\" or \
                     \"keep_empty\"",
                    quoted(other)
                ),
            ),
        }
    }
    if let Some(timeout) = &raw.command_client_timeout {
        if let Some(timeout) =
            duration_millis(timeout, "command_client_timeout", (1, u64::MAX), problems)
        {
            global.command_client_timeout = Duration::from_millis(timeout);
        }
    }
    global.sources = source_settings(raw, problems);
    global.tcp_keepalive = tcp_keepalive(raw, problems);
    if let Some(on) = &raw.backend_keepalive {
        global.backend_keepalive = *on.get_ref();
    }
    if let Some(on) = &raw.backend_delayed_ack {
        global.backend_delayed_ack = *on.get_ref();
    }
    if let Some(on) = &raw.defer_accept {
        global.defer_accept = *on.get_ref();
    }
    if let Some(interval) = &raw.resolve_interval {
        if let Some(interval) =
            duration_millis(interval, "resolve_interval", (1, u64::MAX), problems)
        {
            global.resolve_interval = Duration::from_millis(interval);
        }
    }
    global
}

/// A pipe size key (`splice_pipe_size`, `splice_bulk_pipe_size`):
/// [`MIN_SPLICE_PIPE_SIZE`] to [`MAX_SPLICE_PIPE_SIZE`] bytes.
fn pipe_size(value: &Spanned<i64>, key: &str, problems: &mut Problems<'_>) -> Option<usize> {
    match ranged::<usize>(value, key, MIN_SPLICE_PIPE_SIZE as i64, problems) {
        Some(n) if n > MAX_SPLICE_PIPE_SIZE => {
            problems.push(
                value.span().start,
                ErrorCode::InvalidValue,
                format!(
                    "{key} = {n} is more than {MAX_SPLICE_PIPE_SIZE}: the kernel cannot make a \
                     pipe that large; use at most {MAX_SPLICE_PIPE_SIZE} (1048576 is the most \
                     an unprivileged process may ask for by default)"
                ),
            );
            None
        }
        other => other,
    }
}

fn non_empty_path(
    value: &Spanned<String>,
    key: &str,
    problems: &mut Problems<'_>,
) -> Option<PathBuf> {
    if value.get_ref().is_empty() {
        problems.push(
            value.span().start,
            ErrorCode::InvalidValue,
            format!("{key} is empty: give a file path"),
        );
        None
    } else {
        Some(PathBuf::from(value.get_ref()))
    }
}

const LOG_LEVELS: [&str; 6] = ["off", "error", "warn", "info", "debug", "trace"];

fn log_level_is_valid(filter: &str) -> bool {
    !filter.trim().is_empty()
        && filter.split(',').all(|directive| {
            let directive = directive.trim();
            let level = match directive.split_once('=') {
                Some((target, level)) if !target.trim().is_empty() => level.trim(),
                Some(_) => return false,
                None => directive,
            };
            LOG_LEVELS
                .iter()
                .any(|known| known.eq_ignore_ascii_case(level))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_filters() {
        for good in [
            "info",
            "WARN",
            "off",
            "warn,preread=debug",
            "a::b=trace, info",
        ] {
            assert!(log_level_is_valid(good), "{good}");
        }
        for bad in ["", " ", "inf", "=debug", "preread=loud", "info,"] {
            assert!(!log_level_is_valid(bad), "{bad}");
        }
    }
}
