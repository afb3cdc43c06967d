//! The TOML config file: its serde shape, the global settings, and the
//! translation of its routing declarations into command requests.
//!
//! Owns: the file's vocabulary (key names, units, defaults, as in
//! `INTERFACE.md`), the mapping of every problem to a `line:column` of the
//! file, and the order in which declarations become requests (clusters,
//! listeners, frontends, backends; document order within each group).
//!
//! Must never: validate a routing object itself. Every listener, cluster,
//! frontend and backend goes through [`ConfigState::dispatch`], the one
//! validator shared with the command socket and state replay, so a
//! declaration means the same thing whichever way it arrived. The checks
//! made here are only the ones a request cannot express: TOML syntax, key
//! names, value types and ranges, the spellings of enumerations, and the
//! global settings.
//!
//! Paths in the file (`command_socket`, `saved_state`, `access_logs`) are
//! kept as written by [`load_config`]; [`load_config_file`] resolves a
//! relative one against the config file's folder, so the proxy and the CLI
//! agree on them whatever their working directories.

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde::de::{Deserializer, MapAccess, Visitor};
use toml::Spanned;

use crate::codes::ErrorCode;
use crate::proto;
use crate::proto::request::RequestType;
use crate::state::ConfigState;

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
/// Default of `max_connection_attempts`.
pub const DEFAULT_MAX_CONNECTION_ATTEMPTS: u32 = 3;

/// The smallest accepted `buffer_size`: a buffer must at least hold a TLS
/// record header.
pub const MIN_BUFFER_SIZE: usize = preread_core::MIN_PREREAD_MAX_BYTES;

/// A position in the config text, both 1-based; the column counts
/// characters, not bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Location {
    /// 1-based line.
    pub line: usize,
    /// 1-based column, in characters.
    pub column: usize,
}

impl Location {
    /// The location of byte `offset` of `text` (clamped to the text's end
    /// and to a character boundary).
    #[must_use]
    pub fn from_offset(text: &str, offset: usize) -> Self {
        LineIndex::new(text).location(offset)
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.line, self.column)
    }
}

/// One problem of a config file: where, which stable code, what to change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigProblem {
    /// Where in the file; `None` when the problem is not in the text (an
    /// unreadable file).
    pub location: Option<Location>,
    /// The stable code (`preread explain CODE`).
    pub code: ErrorCode,
    /// What is wrong and how to fix it.
    pub message: String,
}

impl fmt::Display for ConfigProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(location) = self.location {
            write!(f, "{location}: ")?;
        }
        write!(f, "{}: {}", self.code.as_str(), self.message)
    }
}

impl std::error::Error for ConfigProblem {}

/// A request built from a config declaration, with the location of the
/// table or inline table it came from.
#[derive(Clone, Debug, PartialEq)]
pub struct LocatedRequest {
    /// The request, as the command socket would carry it.
    pub request: proto::Request,
    /// The declaration's table header or inline table.
    pub location: Location,
}

/// A config file that passed every check.
#[derive(Clone, Debug, PartialEq)]
pub struct LoadedConfig {
    /// The process-wide settings, defaults applied.
    pub global: GlobalSettings,
    /// The routing declarations, in an order [`ConfigState::dispatch`]
    /// accepts: clusters, listeners, frontends, backends.
    pub requests: Vec<LocatedRequest>,
    /// The state those declarations build: the desired state of a reload,
    /// and the routes `preread inspect --config` decides with.
    pub state: ConfigState,
}

impl LoadedConfig {
    /// The requests alone, in dispatch order.
    pub fn requests(&self) -> impl ExactSizeIterator<Item = &proto::Request> {
        self.requests.iter().map(|located| &located.request)
    }
}

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
    /// Backends tried per connection before giving up, at least 1.
    pub max_connection_attempts: u32,
}

impl GlobalSettings {
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
        if let AccessLogTarget::File(file) = &mut self.access_logs {
            resolve(file);
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
            metrics_address: None,
            buffer_size: DEFAULT_BUFFER_SIZE,
            max_buffers: DEFAULT_MAX_BUFFERS,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            splice: DEFAULT_SPLICE,
            max_connection_attempts: DEFAULT_MAX_CONNECTION_ATTEMPTS,
        }
    }
}

/// Parses and validates a config text: `Ok` only when [`check_config`]
/// finds no problem; otherwise every problem, in file order.
pub fn load_config(text: &str) -> Result<LoadedConfig, Vec<ConfigProblem>> {
    let checked = check(text);
    match checked.global {
        Some(global) if checked.problems.is_empty() => Ok(LoadedConfig {
            global,
            requests: checked.requests,
            state: checked.state,
        }),
        _ => Err(checked.problems),
    }
}

/// Reads and loads a config file; an unreadable file is one problem
/// without a location.
pub fn load_config_file(path: impl AsRef<Path>) -> Result<LoadedConfig, Vec<ConfigProblem>> {
    let path = path.as_ref();
    let text = read_config_text(path).map_err(|problem| vec![problem])?;
    let mut loaded = load_config(&text)?;
    loaded.global.resolve_paths_beside(path);
    Ok(loaded)
}

/// Every problem of a config text, in file order; empty when the config
/// loads.
///
/// A TOML syntax error, an unknown key or a value of the wrong type is one
/// problem and stops there (the file's shape is unknown past it). Otherwise
/// every value problem of the global settings and of the declarations is
/// reported, and every declaration is dispatched into a fresh
/// [`ConfigState`] in load order: each refusal is reported at the location
/// of the declaration that caused it, and checking goes on with the rest.
#[must_use]
pub fn check_config(text: &str) -> Vec<ConfigProblem> {
    check(text).problems
}

/// [`check_config`] of a file; an unreadable file is one problem without a
/// location.
#[must_use]
pub fn check_config_file(path: impl AsRef<Path>) -> Vec<ConfigProblem> {
    match read_config_text(path.as_ref()) {
        Ok(text) => check_config(&text),
        Err(problem) => vec![problem],
    }
}

fn read_config_text(path: &Path) -> Result<String, ConfigProblem> {
    std::fs::read_to_string(path).map_err(|error| ConfigProblem {
        location: None,
        code: ErrorCode::InvalidToml,
        message: format!("cannot read config file {}: {error}", path.display()),
    })
}

/// The outcome of one full check: settings (when the shape parsed), the
/// requests built, and every problem found.
struct Checked {
    global: Option<GlobalSettings>,
    requests: Vec<LocatedRequest>,
    state: ConfigState,
    problems: Vec<ConfigProblem>,
}

fn check(text: &str) -> Checked {
    let lines = LineIndex::new(text);
    let raw = match toml::from_str::<RawConfig>(text) {
        Ok(raw) => raw,
        Err(error) => {
            return Checked {
                global: None,
                requests: Vec::new(),
                state: ConfigState::default(),
                problems: vec![shape_problem(text, &lines, &error)],
            };
        }
    };
    let mut problems = Problems {
        lines: &lines,
        list: Vec::new(),
    };
    let global = global_settings(&raw, &mut problems);
    check_caps_fit_buffers(&raw, &global, &mut problems);
    let requests = routing_requests(raw, &mut problems);

    let mut state = ConfigState::default();
    let mut refused = Refused::default();
    for located in &requests {
        if let Err(refusal) = state.dispatch(&located.request) {
            let mut message = refusal.message;
            if let Some(note) = refused.note(&located.request, refusal.code) {
                message.push_str(&note);
            }
            refused.record(located);
            problems.list.push(ConfigProblem {
                location: Some(located.location),
                code: refusal.code,
                message,
            });
        }
    }
    let mut problems = problems.list;
    // Stable: problems on one location keep their discovery order.
    problems.sort_by_key(|problem| problem.location);
    Checked {
        global: Some(global),
        requests,
        state,
        problems,
    }
}

/// The declarations refused so far, so that a refusal caused by an
/// earlier one (a frontend on a refused listener, a backend of a refused
/// cluster) says so instead of sending the operator after an object that
/// is in fact declared.
#[derive(Default)]
struct Refused {
    listeners: Vec<(SocketAddr, Location)>,
    clusters: BTreeMap<String, Location>,
}

impl Refused {
    fn record(&mut self, located: &LocatedRequest) {
        match &located.request.request_type {
            Some(RequestType::AddTcpListener(listener)) => {
                if let Ok(address) = listener.address.parse() {
                    self.listeners.push((address, located.location));
                }
            }
            Some(RequestType::AddCluster(cluster)) => {
                self.clusters
                    .entry(cluster.cluster_id.clone())
                    .or_insert(located.location);
            }
            _ => {}
        }
    }

    fn note(&self, request: &proto::Request, code: ErrorCode) -> Option<String> {
        match (code, &request.request_type) {
            (ErrorCode::UnknownListener, Some(RequestType::AddTcpFrontend(frontend))) => {
                let address: SocketAddr = frontend.address.parse().ok()?;
                let (_, at) = self.listeners.iter().find(|(a, _)| *a == address)?;
                Some(format!(
                    " (the listener {address} declared at {at} was refused: fix that first)"
                ))
            }
            (ErrorCode::UnknownCluster, Some(kind)) => {
                let id = match kind {
                    RequestType::AddTcpFrontend(frontend) => &frontend.cluster_id,
                    RequestType::AddBackend(backend) => &backend.cluster_id,
                    RequestType::AddTcpListener(listener) => listener.default_cluster.as_ref()?,
                    _ => return None,
                };
                let at = self.clusters.get(id)?;
                Some(format!(
                    " (the cluster `{id}` declared at {at} was refused: fix that first)"
                ))
            }
            _ => None,
        }
    }
}

/// The one problem of a text that does not deserialize.
fn shape_problem(text: &str, lines: &LineIndex, error: &toml::de::Error) -> ConfigProblem {
    // A text that is not even a TOML table is a syntax error; past that, an
    // unknown key has its own code, and a wrong type or a missing key is
    // the file's shape again (`InvalidToml`).
    let (code, error, message) = match toml::from_str::<toml::Table>(text) {
        Err(syntax) => {
            let message = format!("invalid TOML: {}", syntax.message().trim_end());
            (ErrorCode::InvalidToml, syntax, message)
        }
        Ok(_) if error.message().starts_with("unknown field") => (
            ErrorCode::UnknownKey,
            error.clone(),
            error.message().trim_end().to_owned(),
        ),
        Ok(_) => (
            ErrorCode::InvalidToml,
            error.clone(),
            error.message().trim_end().to_owned(),
        ),
    };
    ConfigProblem {
        location: Some(lines.location(error.span().map_or(0, |span| span.start))),
        code,
        message,
    }
}

// ---------------------------------------------------------------------------
// Global settings

fn global_settings(raw: &RawConfig, problems: &mut Problems<'_>) -> GlobalSettings {
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
                    "log_level {:?} is not a log filter: use error, warn, info, debug, trace \
                     or off, or target=level directives separated by commas",
                    level.get_ref()
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
            path => global.access_logs = AccessLogTarget::File(PathBuf::from(path)),
        }
    }
    if let Some(format) = &raw.access_log_format {
        match format.get_ref().as_str() {
            "logfmt" => global.access_log_format = AccessLogFormat::Logfmt,
            "json" => global.access_log_format = AccessLogFormat::Json,
            other => problems.push(
                format.span().start,
                ErrorCode::InvalidValue,
                format!("access_log_format {other:?} is unknown: use \"logfmt\" or \"json\""),
            ),
        }
    }
    if let Some(address) = &raw.metrics_address {
        match address.get_ref().parse::<SocketAddr>() {
            Ok(parsed) => global.metrics_address = Some(parsed),
            Err(_) => problems.push(
                address.span().start,
                ErrorCode::InvalidAddress,
                format!(
                    "metrics_address {:?} is not an ip:port address (e.g. \"127.0.0.1:9109\" \
                     or \"[::1]:9109\")",
                    address.get_ref()
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
    if let Some(attempts) = &raw.max_connection_attempts {
        if let Some(attempts) = ranged::<u32>(attempts, "max_connection_attempts", 1, problems) {
            global.max_connection_attempts = attempts;
        }
    }
    global
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

/// A TOML integer in `[min, T::MAX]`, or a problem at the value.
fn ranged<T: TryFrom<i64>>(
    value: &Spanned<i64>,
    key: &str,
    min: i64,
    problems: &mut Problems<'_>,
) -> Option<T> {
    let number = *value.get_ref();
    match T::try_from(number) {
        Ok(converted) if number >= min => Some(converted),
        _ => {
            problems.push(
                value.span().start,
                ErrorCode::InvalidValue,
                format!("{key} = {number} is out of range: use an integer of at least {min}"),
            );
            None
        }
    }
}

/// An optional request field: `None` when absent or out of range (the
/// problem is recorded and the request goes on with the default, so one bad
/// value does not cascade into refusals of the declarations that depend on
/// it).
fn optional_u32(
    value: Option<&Spanned<i64>>,
    key: &str,
    problems: &mut Problems<'_>,
) -> Option<u32> {
    value.and_then(|value| ranged::<u32>(value, key, 0, problems))
}

/// A preread window lives in one pooled buffer, so a listener cap above
/// `buffer_size` would silently shrink to it and refuse, as too large,
/// ClientHellos the operator meant to allow.
fn check_caps_fit_buffers(raw: &RawConfig, global: &GlobalSettings, problems: &mut Problems<'_>) {
    for listener in &raw.listeners {
        let Some(cap) = &listener.get_ref().sni_preread_max_bytes else {
            continue;
        };
        let buffer = global.buffer_size;
        if usize::try_from(*cap.get_ref()).is_ok_and(|cap| cap > buffer) {
            problems.push(
                cap.span().start,
                ErrorCode::InvalidValue,
                format!(
                    "sni_preread_max_bytes = {} is more than buffer_size = {buffer}: the preread window lives in one buffer, so the cap would silently be {buffer}; raise buffer_size to at least {} or lower sni_preread_max_bytes",
                    cap.get_ref(),
                    cap.get_ref()
                ),
            );
        }
    }
}

// ---------------------------------------------------------------------------
// Routing declarations

fn routing_requests(raw: RawConfig, problems: &mut Problems<'_>) -> Vec<LocatedRequest> {
    // (position, request) per group; sorted by position, then concatenated
    // in dispatch order.
    let mut clusters = Vec::new();
    let mut listeners = Vec::new();
    let mut frontends = Vec::new();
    let mut backends = Vec::new();

    for listener in raw.listeners {
        let position = listener.span().start;
        let listener = listener.into_inner();
        check_protocol(listener.protocol.as_ref(), "listener", problems);
        let config = proto::TcpListenerConfig {
            address: listener.address,
            expect_proxy: listener.expect_proxy.unwrap_or(false),
            sni_preread_timeout: optional_u32(
                listener.sni_preread_timeout.as_ref(),
                "sni_preread_timeout",
                problems,
            ),
            sni_preread_max_bytes: optional_u32(
                listener.sni_preread_max_bytes.as_ref(),
                "sni_preread_max_bytes",
                problems,
            ),
            default_cluster: listener.default_cluster,
            server_first_timeout: optional_u32(
                listener.server_first_timeout.as_ref(),
                "server_first_timeout",
                problems,
            ),
            front_timeout: optional_u32(listener.front_timeout.as_ref(), "front_timeout", problems),
            back_timeout: optional_u32(listener.back_timeout.as_ref(), "back_timeout", problems),
            connect_timeout: optional_u32(
                listener.connect_timeout.as_ref(),
                "connect_timeout",
                problems,
            ),
            active: None,
        };
        listeners.push((position, RequestType::AddTcpListener(config)));
    }

    for (id, cluster) in raw.clusters.0 {
        let cluster_id = id.into_inner();
        let position = cluster.span().start;
        let cluster = cluster.into_inner();
        check_protocol(cluster.protocol.as_ref(), "cluster", problems);
        let load_balancing = cluster
            .load_balancing
            .as_ref()
            .and_then(|value| load_balancing(value, problems))
            .unwrap_or(proto::LoadBalancing::RoundRobin);
        let proxy_protocol = cluster
            .proxy_protocol
            .as_ref()
            .and_then(|value| proxy_protocol(value, problems))
            .unwrap_or(proto::ProxyProtocol::None);
        let max_connections_per_ip = cluster
            .max_connections_per_ip
            .as_ref()
            .and_then(|value| ranged::<u32>(value, "max_connections_per_ip", 0, problems))
            .unwrap_or(0);
        clusters.push((
            position,
            RequestType::AddCluster(proto::Cluster {
                cluster_id: cluster_id.clone(),
                load_balancing: load_balancing as i32,
                proxy_protocol: proxy_protocol as i32,
                max_connections_per_ip,
            }),
        ));

        for frontend in cluster.frontends {
            let position = frontend.span().start;
            let frontend = frontend.into_inner();
            frontends.push((
                position,
                RequestType::AddTcpFrontend(proto::TcpFrontend {
                    cluster_id: cluster_id.clone(),
                    address: frontend.address,
                    sni: frontend.sni,
                    alpn: frontend.alpn,
                    tags: frontend.tags,
                }),
            ));
        }

        for (index, backend) in cluster.backends.into_iter().enumerate() {
            let position = backend.span().start;
            let backend = backend.into_inner();
            let weight = backend
                .weight
                .as_ref()
                .and_then(|value| ranged::<u32>(value, "weight", 0, problems));
            backends.push((
                position,
                RequestType::AddBackend(proto::Backend {
                    cluster_id: cluster_id.clone(),
                    backend_id: backend
                        .backend_id
                        .unwrap_or_else(|| format!("{cluster_id}-{index}")),
                    address: backend.address,
                    weight,
                    backup: backend.backup.unwrap_or(false),
                }),
            ));
        }
    }

    let mut requests = Vec::new();
    for mut group in [clusters, listeners, frontends, backends] {
        group.sort_by_key(|(position, _)| *position);
        requests.extend(group.into_iter().map(|(position, request)| LocatedRequest {
            request: proto::Request {
                request_type: Some(request),
            },
            location: problems.lines.location(position),
        }));
    }
    requests
}

fn check_protocol(protocol: Option<&Spanned<String>>, what: &str, problems: &mut Problems<'_>) {
    if let Some(protocol) = protocol {
        if protocol.get_ref() != "tcp" {
            problems.push(
                protocol.span().start,
                ErrorCode::InvalidValue,
                format!(
                    "{what} protocol {:?} is not supported: preread routes TLS without \
                     terminating it, use protocol = \"tcp\"",
                    protocol.get_ref()
                ),
            );
        }
    }
}

fn load_balancing(
    value: &Spanned<String>,
    problems: &mut Problems<'_>,
) -> Option<proto::LoadBalancing> {
    let parsed = match value.get_ref().as_str() {
        "round_robin" | "ROUND_ROBIN" => proto::LoadBalancing::RoundRobin,
        "random" | "RANDOM" => proto::LoadBalancing::Random,
        "least_connections" | "LEAST_LOADED" => proto::LoadBalancing::LeastConnections,
        "power_of_two" | "POWER_OF_TWO" => proto::LoadBalancing::PowerOfTwo,
        other => {
            problems.push(
                value.span().start,
                ErrorCode::InvalidValue,
                format!(
                    "load_balancing {other:?} is unknown: use \"round_robin\", \"random\", \
                     \"least_connections\" or \"power_of_two\" (or Sōzu's ROUND_ROBIN, RANDOM, \
                     LEAST_LOADED, POWER_OF_TWO)"
                ),
            );
            return None;
        }
    };
    Some(parsed)
}

fn proxy_protocol(
    value: &Spanned<String>,
    problems: &mut Problems<'_>,
) -> Option<proto::ProxyProtocol> {
    let parsed = match value.get_ref().as_str() {
        "none" => proto::ProxyProtocol::None,
        "send" => proto::ProxyProtocol::Send,
        "relay" => proto::ProxyProtocol::Relay,
        other => {
            problems.push(
                value.span().start,
                ErrorCode::InvalidValue,
                format!("proxy_protocol {other:?} is unknown: use \"none\", \"send\" or \"relay\""),
            );
            return None;
        }
    };
    Some(parsed)
}

// ---------------------------------------------------------------------------
// Problems and locations

struct Problems<'l> {
    lines: &'l LineIndex<'l>,
    list: Vec<ConfigProblem>,
}

impl Problems<'_> {
    fn push(&mut self, offset: usize, code: ErrorCode, message: String) {
        self.list.push(ConfigProblem {
            location: Some(self.lines.location(offset)),
            code,
            message,
        });
    }
}

/// Byte offset → 1-based line and character column.
struct LineIndex<'t> {
    text: &'t str,
    /// Byte offset of the start of each line.
    starts: Vec<usize>,
}

impl<'t> LineIndex<'t> {
    fn new(text: &'t str) -> Self {
        let starts = std::iter::once(0)
            .chain(text.match_indices('\n').map(|(at, _)| at + 1))
            .collect();
        Self { text, starts }
    }

    fn location(&self, offset: usize) -> Location {
        let mut offset = offset.min(self.text.len());
        while !self.text.is_char_boundary(offset) {
            offset -= 1;
        }
        // `starts[0] == 0 <= offset`, so the partition point is at least 1.
        let line = self.starts.partition_point(|&start| start <= offset);
        let start = self.starts[line - 1];
        let column = self.text[start..offset].chars().count() + 1;
        Location { line, column }
    }
}

// ---------------------------------------------------------------------------
// The file's serde shape. Integers are read as `i64` (TOML's integer) and
// range-checked afterwards, so an out-of-range value is a located problem
// that does not stop the check.

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    command_socket: Option<Spanned<String>>,
    worker_count: Option<Spanned<i64>>,
    saved_state: Option<Spanned<String>>,
    automatic_state_save: Option<Spanned<bool>>,
    log_level: Option<Spanned<String>>,
    access_logs: Option<Spanned<String>>,
    access_log_format: Option<Spanned<String>>,
    metrics_address: Option<Spanned<String>>,
    buffer_size: Option<Spanned<i64>>,
    max_buffers: Option<Spanned<i64>>,
    max_connections: Option<Spanned<i64>>,
    splice: Option<Spanned<bool>>,
    max_connection_attempts: Option<Spanned<i64>>,
    #[serde(default)]
    listeners: Vec<Spanned<RawListener>>,
    #[serde(default)]
    clusters: RawClusters,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawListener {
    protocol: Option<Spanned<String>>,
    address: String,
    expect_proxy: Option<bool>,
    sni_preread_timeout: Option<Spanned<i64>>,
    sni_preread_max_bytes: Option<Spanned<i64>>,
    default_cluster: Option<String>,
    server_first_timeout: Option<Spanned<i64>>,
    front_timeout: Option<Spanned<i64>>,
    back_timeout: Option<Spanned<i64>>,
    connect_timeout: Option<Spanned<i64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCluster {
    protocol: Option<Spanned<String>>,
    load_balancing: Option<Spanned<String>>,
    proxy_protocol: Option<Spanned<String>>,
    max_connections_per_ip: Option<Spanned<i64>>,
    #[serde(default)]
    frontends: Vec<Spanned<RawFrontend>>,
    #[serde(default)]
    backends: Vec<Spanned<RawBackend>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFrontend {
    address: String,
    sni: Option<String>,
    #[serde(default)]
    alpn: Vec<String>,
    #[serde(default)]
    tags: BTreeMap<String, String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBackend {
    address: String,
    backend_id: Option<String>,
    weight: Option<Spanned<i64>>,
    backup: Option<bool>,
}

/// `[clusters.<id>]` tables, in the order the deserializer yields them
/// (sorted by position afterwards).
#[derive(Default)]
struct RawClusters(Vec<(Spanned<String>, Spanned<RawCluster>)>);

impl<'de> Deserialize<'de> for RawClusters {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ClustersVisitor;

        impl<'de> Visitor<'de> for ClustersVisitor {
            type Value = RawClusters;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a table of clusters, one [clusters.<id>] table each")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawClusters, A::Error> {
                let mut clusters = Vec::new();
                while let Some(entry) = map.next_entry()? {
                    clusters.push(entry);
                }
                Ok(RawClusters(clusters))
            }
        }

        deserializer.deserialize_map(ClustersVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_index_is_one_based_and_counts_characters() {
        let text = "ab\néé x\n\nlast";
        let lines = LineIndex::new(text);
        assert_eq!(lines.location(0), Location { line: 1, column: 1 });
        assert_eq!(lines.location(2), Location { line: 1, column: 3 });
        assert_eq!(lines.location(3), Location { line: 2, column: 1 });
        // After "éé " (5 bytes, 3 characters).
        assert_eq!(lines.location(8), Location { line: 2, column: 4 });
        // Inside a character: its start.
        assert_eq!(lines.location(4), Location { line: 2, column: 1 });
        assert_eq!(lines.location(10), Location { line: 3, column: 1 });
        assert_eq!(lines.location(usize::MAX), Location { line: 4, column: 5 });
        assert_eq!(
            LineIndex::new("").location(0),
            Location { line: 1, column: 1 }
        );
    }

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

    #[test]
    fn problems_sort_by_location_and_show_it() {
        let problems = check_config("[[listeners]]\naddress = \"x\"\nfront_timeout = -1\n");
        let shown: Vec<String> = problems.iter().map(ToString::to_string).collect();
        assert_eq!(shown.len(), 2, "{shown:?}");
        assert!(shown[0].starts_with("1:1: E101: "), "{shown:?}");
        assert!(
            shown[1].starts_with("3:17: E003: front_timeout = -1"),
            "{shown:?}"
        );
    }
}
