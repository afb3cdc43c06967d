//! The TOML config file: its serde shape, the global settings, and the
//! translation of its routing declarations into command requests.
//!
//! Owns: the file's vocabulary (key names, units, defaults, as in
//! `doc/configure.md`), the mapping of every problem to a `line:column` of the
//! file, and the order in which declarations become requests (clusters,
//! listeners, frontends, backends; document order within each group).
//!
//! Must never: validate a routing object itself. Every listener, cluster,
//! frontend and backend goes through [`ConfigState::dispatch`], the one
//! validator shared with the command socket and state replay, so a
//! declaration means the same thing whichever way it arrived. The checks
//! made here are only the ones a request cannot express: TOML syntax, key
//! names, value types and ranges, the spellings of enumerations, the
//! global settings, and the warnings.
//!
//! Paths in the file (`command_socket`, `saved_state`, `access_logs`, a
//! `syslog:` socket path) are
//! kept as written by [`load_config`]; [`load_config_file`] resolves a
//! relative one against the config file's folder, so the proxy and the CLI
//! agree on them whatever their working directories.
//!
//! Layout: `raw` is the file's serde shape (the one list of keys and
//! types), `shape` reads the text into it and reports every shape problem
//! in one pass, `global` the process-wide settings (`keepalive` the TCP
//! keepalive and `syslog` the syslog targets of the access log among
//! them), `sources` the `[sources.*]` tables, `declarations` the routing
//! tables turned into requests, `fragment` the files of a watched
//! directory (cluster tables only), `warnings` the values accepted but
//! probably meant otherwise (`W` codes), `lines` the byte offset →
//! `line:column` mapping and the range checks every problem goes through,
//! `pieces` the cut of a text at its table headers and `outline` what a
//! reload remembers of a text to read only its changed cluster tables
//! next time (`crate::reread` uses both); this file holds the public API
//! and the check that runs them in order.
//! Adding a key is one field in `raw` and its reading in `global`,
//! `sources` or `declarations`: `shape` checks its type, suggests it for
//! typos and names its path with nothing else to change.

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::Path;

use crate::codes::ErrorCode;
use crate::proto;
use crate::proto::request::RequestType;
use crate::state::ConfigState;

mod declarations;
mod etcd_files;
mod fragment;
mod global;
mod health_check;
mod keepalive;
mod lines;
pub(crate) mod outline;
mod pieces;
mod raw;
mod shape;
mod sources;
mod syslog;
mod warnings;

pub use global::{
    AccessLogFormat, AccessLogTarget, DEFAULT_ACCESS_LOG_QUEUE, DEFAULT_BACKEND_DELAYED_ACK,
    DEFAULT_BACKEND_KEEPALIVE, DEFAULT_BUFFER_SIZE, DEFAULT_COMMAND_CLIENT_TIMEOUT,
    DEFAULT_COMMAND_SOCKET, DEFAULT_DEFER_ACCEPT, DEFAULT_LOG_LEVEL, DEFAULT_MAX_BUFFERS,
    DEFAULT_MAX_CONNECTION_ATTEMPTS, DEFAULT_MAX_CONNECTIONS, DEFAULT_REJECT_CAPTURE,
    DEFAULT_RESOLVE_INTERVAL, DEFAULT_SOFT_STOP_GRACE, DEFAULT_SPLICE, DEFAULT_SPLICE_BULK_BUDGET,
    DEFAULT_SPLICE_BULK_PIPE_SIZE, DEFAULT_SPLICE_THRESHOLD, DEFAULT_WORKER_COUNT, EmptySavedState,
    GlobalSettings, MAX_REJECT_CAPTURE, MAX_SPLICE_PIPE_SIZE, MIN_BUFFER_SIZE,
    MIN_SPLICE_PIPE_SIZE,
};
pub use keepalive::{
    DEFAULT_KEEPALIVE_COUNT, DEFAULT_KEEPALIVE_IDLE_S, DEFAULT_KEEPALIVE_INTERVAL_S, TcpKeepalive,
};
pub use syslog::SyslogTarget;

pub use fragment::load_fragment;
pub use outline::Outline;
pub use sources::{DEFAULT_DOCKER_ENDPOINT, DEFAULT_ETCD_PREFIX, EtcdSettings, SourceSettings};

use declarations::routing_requests;
use global::global_settings;
use lines::{LineIndex, Problems};
use raw::RawConfig;
use shape::shape;
use warnings::warnings;

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

impl ConfigProblem {
    /// Whether this only warns ([`ErrorCode::is_warning`]): the config
    /// loads, and the value is used as written.
    #[must_use]
    pub fn is_warning(&self) -> bool {
        self.code.is_warning()
    }
}

/// A config file that passed every check; it may still carry warnings.
#[derive(Clone, Debug, PartialEq)]
pub struct LoadedConfig {
    /// The process-wide settings, defaults applied.
    pub global: GlobalSettings,
    /// The warnings of the file (`W` codes), in file order: `preread
    /// start` and reloads log them.
    pub warnings: Vec<ConfigProblem>,
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
/// Parses and validates a config text: `Ok` when [`check_config`] finds
/// nothing but warnings (they are in [`LoadedConfig::warnings`]); otherwise
/// every problem, warnings included, in file order.
pub fn load_config(text: &str) -> Result<LoadedConfig, Vec<ConfigProblem>> {
    let checked = check(text);
    let refused = checked.problems.iter().any(|problem| !problem.is_warning());
    match checked.global {
        Some(global) if !refused => Ok(LoadedConfig {
            global,
            warnings: checked.problems,
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

/// [`load_config_file`], and the [`Outline`] of the text it read: what the
/// proxy keeps at boot so that its first reload reads only the tables
/// that changed (`crate::reread`).
pub fn load_config_file_outlined(
    path: impl AsRef<Path>,
) -> Result<(LoadedConfig, Option<Outline>), Vec<ConfigProblem>> {
    let path = path.as_ref();
    let text = read_config_text(path).map_err(|problem| vec![problem])?;
    let mut loaded = load_config(&text)?;
    let outline = Outline::of(&text, &loaded);
    loaded.global.resolve_paths_beside(path);
    Ok((loaded, outline))
}

/// The global settings of a config file, without its routing tables: what
/// a CLI command needs to find the command socket. In TOML the root table's
/// keys all come before the first table header, so when the text before
/// the first line that opens with `[` parses as a config on its own, it
/// holds every global setting, and the tables (at 100,000 routes, 0.3 s of
/// parsing and checking) are not read. Otherwise (a header-like line inside
/// a multi-line string or array, or a problem there) the whole file is
/// loaded, and its problems are the answer.
pub fn load_global_settings_file(
    path: impl AsRef<Path>,
) -> Result<GlobalSettings, Vec<ConfigProblem>> {
    let path = path.as_ref();
    let text = read_config_text(path).map_err(|problem| vec![problem])?;
    let cut = root_table_end(&text);
    let mut global = match load_config(&text[..cut]) {
        Ok(loaded) => loaded.global,
        Err(_) if cut < text.len() => load_config(&text)?.global,
        Err(problems) => return Err(problems),
    };
    global.resolve_paths_beside(path);
    Ok(global)
}

/// The byte offset of the first line that opens with `[` (after blanks),
/// or the text's length.
fn root_table_end(text: &str) -> usize {
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        if line.trim_start().starts_with('[') {
            return offset;
        }
        offset += line.len();
    }
    text.len()
}

/// Every problem of a config text, errors and warnings, in file order;
/// the config loads when none is an error.
///
/// Only a TOML syntax error stops the check (the file cannot be read past
/// it; its message says so). An unknown key, a wrong type or a missing key
/// is reported and its entry set aside, and the check goes on with the
/// rest: every value problem of the global settings and of the
/// declarations is reported, every warning, and every declaration is
/// dispatched into a fresh [`ConfigState`] in load order: each refusal is
/// reported at the location of the declaration that caused it, and
/// checking goes on with the rest.
#[must_use]
pub fn check_config(text: &str) -> Vec<ConfigProblem> {
    check(text).problems
}

/// [`check_config`] of a file, and the files it names that the proxy
/// reads as it starts (`[sources.etcd]`'s TLS files, beside it when
/// relative: E505); an unreadable file is one problem without a location.
#[must_use]
pub fn check_config_file(path: impl AsRef<Path>) -> Vec<ConfigProblem> {
    let path = path.as_ref();
    match read_config_text(path) {
        Ok(text) => {
            let checked = check(&text);
            let mut problems = checked.problems;
            if let Some(mut global) = checked.global {
                global.resolve_paths_beside(path);
                if let Some(etcd) = &global.sources.etcd {
                    problems.extend(etcd_files::problems(etcd));
                }
            }
            problems
        }
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
    let shaped = shape::<RawConfig>(text, &lines);
    let Some(raw) = shaped.raw else {
        return Checked {
            global: None,
            requests: Vec::new(),
            state: ConfigState::default(),
            problems: shaped.problems,
        };
    };
    let mut problems = Problems {
        lines: &lines,
        list: shaped.problems,
    };
    warnings(&raw, &mut problems);
    let global = global_settings(&raw, &mut problems);
    let requests = routing_requests(raw, &mut problems);

    let mut state = ConfigState::default();
    let mut refused = Refused::default();
    for located in &requests {
        let damaged = shaped.damaged.contains(&located.location);
        // A frontend or backend that lost a key is another route than the
        // one written (a frontend without its misspelt sni is a
        // catch-all): left out, it cannot clash with the others. A
        // listener or cluster that lost one is still declared, so that
        // what depends on it is checked, but a refusal of its own would
        // only echo the problem already reported.
        let leaf = matches!(
            located.request.request_type,
            Some(RequestType::AddTcpFrontend(_) | RequestType::AddBackend(_))
        );
        if damaged && leaf {
            continue;
        }
        if let Err(refusal) = state.dispatch(&located.request) {
            if damaged {
                refused.record(located);
                continue;
            }
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

#[cfg(test)]
mod tests {
    use super::*;

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

    fn globals_of(text: &str) -> Result<GlobalSettings, Vec<ConfigProblem>> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("preread.toml");
        std::fs::write(&path, text).unwrap();
        load_global_settings_file(&path).map(|mut global| {
            // Relative paths resolve beside the file: strip the folder back.
            if let Ok(rest) = global.command_socket.strip_prefix(dir.path()) {
                global.command_socket = rest.to_owned();
            }
            global
        })
    }

    #[test]
    fn the_settings_come_from_the_root_table_alone() {
        // The cluster is refused by the full check, not by the prefix's.
        let text = "command_socket = \"a.sock\"\nworker_count = 3\n\n[clusters.x]\n\
                    frontends = [{ address = \"nowhere\" }]\n";
        assert!(!check_config(text).is_empty());
        let global = globals_of(text).unwrap();
        assert_eq!(global.command_socket, Path::new("a.sock"));
        assert_eq!(global.worker_count, 3);
        assert_eq!(root_table_end("a = 1\n  [t]\n"), 6);
        assert_eq!(root_table_end("a = 1\n"), 6);
    }

    #[test]
    fn a_header_like_line_in_a_string_falls_back_to_the_whole_file() {
        let text = "log_level = \"warn\"\nnote = \"\"\"\n[not a header]\n\"\"\"\n\
                    command_socket = \"b.sock\"\n";
        let problems = globals_of(text).unwrap_err();
        // `note` is not a key: the whole file was checked, and said so.
        assert!(
            problems.iter().any(|p| p.code == ErrorCode::UnknownKey),
            "{problems:?}"
        );
        let text = "worker_count = 2\nlisteners = [\n[1]]\ncommand_socket = \"c.sock\"\n";
        assert!(
            globals_of(text).is_err(),
            "a listener array of arrays is no config"
        );
    }

    #[test]
    fn a_bad_global_setting_is_the_answer() {
        let problems =
            globals_of("worker_count = 0\n[[listeners]]\naddress = \"x\"\n").unwrap_err();
        assert!(
            problems.iter().any(|p| p.message.contains("worker_count")),
            "{problems:?}"
        );
    }
}
