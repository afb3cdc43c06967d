//! The proxy as a process: a config written into a fresh temp dir,
//! `preread start -c <dir>/preread.toml` spawned, readiness awaited (the
//! command socket answers, every TCP listener accepts, and the probes that
//! showed it are closed, so a test starts with no session open), the
//! command socket spoken to, signals sent, and the process killed on Drop.
//!
//! # Which binary
//!
//! Cargo builds a package's binaries for its own integration tests only, so
//! the e2e crate cannot get `preread` from `env!("CARGO_BIN_EXE_preread")`.
//! [`preread_bin`] looks for it next to the test executable:
//! `target/<profile>/deps/<test>` → `target/<profile>/preread` (and
//! `target/<profile>/<bin>` → `target/<profile>/preread` for binaries), or
//! takes `$PREREAD_BIN`. It never builds: run `cargo build -p proxy-shell`
//! (same profile as the tests) before `cargo test -p e2e`. A binary older
//! than the proxy's sources gets a warning on stderr.
//!
//! # Config templates
//!
//! A config is TOML text with placeholders, filled in by the harness:
//!
//! - `${addr:NAME}`: `127.0.0.1:<free port>`, one port per NAME (so a
//!   listener and its frontends agree); read it back with
//!   [`ProxyProcess::addr`]. Listener ports must be explicit (port 0 is
//!   refused), hence this.
//! - `${dir}`: the temp dir (relative paths resolve beside the config file
//!   anyway, i.e. in that dir).
//!
//! Other `${NAME}` are the test's: fill them with [`fill`] first, or build
//! the text with [`ConfigBuilder`]. When the text has no `command_socket`,
//! `command_socket = "preread.sock"` (beside the config) is prepended.
//!
//! Free ports are picked by binding 127.0.0.1:0 and closing; a port is
//! handed out once per process. If the proxy still loses the race (it
//! exits early with "in use" on stderr), the start is retried with new
//! ports, 3 attempts in all.
//!
//! # Readiness
//!
//! [`ProxyProcess::start`] returns once the command socket answers a
//! `Status` request and every listener of the config accepts a TCP
//! connection (one bare connect-and-close per listener: `tcp.accepted` may
//! count it; compare metrics as deltas).
//!
//! # Crashes
//!
//! [`ProxyProcess::kill`] sends SIGKILL and reaps the process;
//! [`ProxyProcess::restart`] starts it again in the same dir, on the same
//! config and files (a saved state survives), as a supervisor would.

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::fs::File;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use command::channel::{BlockingChannel, MAX_ANSWER_LEN};
use command::proto::request::RequestType;
use command::proto::response_content::ContentType;
use command::proto::{self, Request, Response, ResponseStatus};

use crate::testkit::{TempDir, shut};

/// Default readiness bound of [`ProxyProcess::start`].
pub const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// Default bound of a command-socket exchange.
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(5);
/// Default bound of [`ProxyProcess::cli`] and [`run_preread`].
pub const CLI_TIMEOUT: Duration = Duration::from_secs(15);
/// Default bound of [`ProxyProcess::stop_soft`].
pub const STOP_TIMEOUT: Duration = Duration::from_secs(10);
/// The config file's name in the temp dir.
pub const CONFIG_FILE: &str = "preread.toml";
/// The proxy's stderr (logs and access logs) in the temp dir.
pub const STDERR_FILE: &str = "stderr.log";
/// The proxy's stdout in the temp dir.
pub const STDOUT_FILE: &str = "stdout.log";

const START_ATTEMPTS: usize = 3;
const POLL: Duration = Duration::from_millis(20);

/// A free port on 127.0.0.1, never handed out twice in this process.
///
/// # Panics
/// When 100 binds in a row give no new port.
pub fn free_addr() -> SocketAddr {
    static HANDED_OUT: Mutex<Option<HashSet<u16>>> = Mutex::new(None);
    let mut handed_out = HANDED_OUT.lock().unwrap_or_else(PoisonError::into_inner);
    let handed_out = handed_out.get_or_insert_with(HashSet::new);
    for _ in 0..100 {
        let addr = bind_and_free(([127, 0, 0, 1], 0).into()).expect("bind 127.0.0.1:0");
        if handed_out.insert(addr.port()) {
            return addr;
        }
    }
    panic!("free_addr: no new free port in 100 tries");
}

/// A port [`free_addr`] hands out that also binds on every address of
/// `ips` now. For listeners that share one port over several loopback
/// addresses: a port free on 127.0.0.1 may still be held on 127.0.0.2 by
/// another test's client socket in `TIME_WAIT` (bound there, then closed
/// first), which refuses the listener's bind for a minute.
pub fn free_port_on(ips: &[IpAddr]) -> u16 {
    for _ in 0..100 {
        let port = free_addr().port();
        if ips
            .iter()
            .all(|&ip| bind_and_free((ip, port).into()).is_some())
        {
            return port;
        }
    }
    panic!("free_port_on: no port free on all of {ips:?} in 100 tries");
}

/// The address a listener bound at `addr` got, the port free again on
/// return ([`shut`], not only dropped).
fn bind_and_free(addr: SocketAddr) -> Option<SocketAddr> {
    let listener = TcpListener::bind(addr).ok()?;
    let bound = listener.local_addr().ok();
    let _ = shut(&listener);
    bound
}

/// Replaces `${NAME}` by its value for each `(NAME, value)`.
pub fn fill(template: &str, vars: &[(&str, &str)]) -> String {
    vars.iter()
        .fold(template.to_owned(), |text, (name, value)| {
            text.replace(&format!("${{{name}}}"), value)
        })
}

fn newest_mtime(dir: &Path, depth: usize, budget: &mut usize) -> Option<SystemTime> {
    let mut newest: Option<SystemTime> = None;
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        if *budget == 0 {
            break;
        }
        *budget -= 1;
        let Ok(meta) = entry.metadata() else { continue };
        let found = if meta.is_dir() && depth > 0 {
            newest_mtime(&entry.path(), depth - 1, budget)
        } else {
            meta.modified().ok()
        };
        newest = newest.max(found);
    }
    newest
}

fn warn_if_stale(bin: &Path) {
    static WARNED: OnceLock<()> = OnceLock::new();
    WARNED.get_or_init(|| {
        let Ok(built) = std::fs::metadata(bin).and_then(|m| m.modified()) else {
            return;
        };
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let mut budget = 5_000;
        let newest = [
            "proxy-shell/src",
            "control-shell/src",
            "worker-shell/src",
            "command/src",
            "preread-core/src",
            "preread-parser/src",
        ]
        .iter()
            .filter_map(|dir| newest_mtime(&root.join(dir), 6, &mut budget))
            .max();
        if newest.is_some_and(|newest| newest > built) {
            eprintln!(
                "e2e: warning: {} is older than the proxy's sources; run `cargo build -p proxy-shell`",
                bin.display()
            );
        }
    });
}

/// The `preread` binary: `$PREREAD_BIN`, or `preread` in the target
/// profile directory of the running executable. Never builds it.
pub fn preread_bin() -> Result<PathBuf, String> {
    if let Some(path) = std::env::var_os("PREREAD_BIN") {
        let path = PathBuf::from(path);
        return if path.is_file() {
            Ok(path)
        } else {
            Err(format!("PREREAD_BIN={} is not a file", path.display()))
        };
    }
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let dir = exe
        .parent()
        .ok_or_else(|| format!("{} has no parent", exe.display()))?;
    let profile_dir = if dir.file_name().is_some_and(|name| name == "deps") {
        dir.parent().unwrap_or(dir)
    } else {
        dir
    };
    let bin = profile_dir.join("preread");
    if bin.is_file() {
        warn_if_stale(&bin);
        Ok(bin)
    } else {
        Err(format!(
            "the preread binary is not built ({} does not exist): run `cargo build -p proxy-shell` \
             (same profile as the tests) before the e2e tests, or set PREREAD_BIN",
            bin.display()
        ))
    }
}

fn wait_bounded(child: &mut Child, timeout: Duration) -> Result<Option<ExitStatus>, String> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait().map_err(|e| format!("wait: {e}"))? {
            return Ok(Some(status));
        }
        if Instant::now() >= deadline {
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn next_id() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    NEXT.fetch_add(1, Ordering::SeqCst)
}

/// Runs `preread ARGS` in `cwd`, bounded by `timeout` (killed past it),
/// its output captured through files in `cwd`.
pub fn run_preread(args: &[&str], cwd: &Path, timeout: Duration) -> Result<Output, String> {
    run_preread_env(args, cwd, timeout, &[])
}

fn run_preread_env(
    args: &[&str],
    cwd: &Path,
    timeout: Duration,
    env: &[(String, String)],
) -> Result<Output, String> {
    let bin = preread_bin()?;
    let n = next_id();
    let out_path = cwd.join(format!("cli-{n}.out"));
    let err_path = cwd.join(format!("cli-{n}.err"));
    let out = File::create(&out_path).map_err(|e| format!("create {}: {e}", out_path.display()))?;
    let err = File::create(&err_path).map_err(|e| format!("create {}: {e}", err_path.display()))?;
    let mut child = Command::new(&bin)
        .args(args)
        .current_dir(cwd)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .map_err(|e| format!("spawn {}: {e}", bin.display()))?;
    let status = match wait_bounded(&mut child, timeout)? {
        Some(status) => status,
        None => {
            let _ = child.kill();
            let _ = wait_bounded(&mut child, Duration::from_secs(5));
            return Err(format!(
                "preread {args:?} did not finish within {timeout:?}"
            ));
        }
    };
    let stdout = std::fs::read(&out_path).unwrap_or_default();
    let stderr = std::fs::read(&err_path).unwrap_or_default();
    let _ = std::fs::remove_file(&out_path);
    let _ = std::fs::remove_file(&err_path);
    Ok(Output {
        status,
        stdout,
        stderr,
    })
}

/// Builds a config template (see the module documentation) declaration by
/// declaration; listeners are named and get `${addr:NAME}` addresses.
#[derive(Clone, Debug, Default)]
pub struct ConfigBuilder {
    globals: Vec<String>,
    listeners: Vec<(String, Vec<String>)>,
    clusters: Vec<ClusterDecl>,
}

#[derive(Clone, Debug)]
struct ClusterDecl {
    id: String,
    lines: Vec<String>,
    frontends: Vec<String>,
    backends: Vec<String>,
}

fn toml_str(value: &str) -> String {
    let mut out = String::from("\"");
    for c in value.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn toml_key(key: &str) -> String {
    if !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        key.to_owned()
    } else {
        toml_str(key)
    }
}

impl ConfigBuilder {
    /// An empty config.
    pub fn new() -> Self {
        Self::default()
    }

    /// A raw top-level line, e.g. `worker_count = 2`.
    #[must_use]
    pub fn global(mut self, line: &str) -> Self {
        self.globals.push(line.to_owned());
        self
    }

    /// A TCP listener at `${addr:NAME}`, with raw extra lines such as
    /// `default_cluster = "fallback"`.
    #[must_use]
    pub fn listener(mut self, name: &str, extra: &[&str]) -> Self {
        self.listeners.push((
            name.to_owned(),
            extra.iter().map(|l| (*l).to_owned()).collect(),
        ));
        self
    }

    fn cluster_mut(&mut self, id: &str) -> &mut ClusterDecl {
        let index = match self.clusters.iter().position(|c| c.id == id) {
            Some(index) => index,
            None => {
                self.clusters.push(ClusterDecl {
                    id: id.to_owned(),
                    lines: Vec::new(),
                    frontends: Vec::new(),
                    backends: Vec::new(),
                });
                self.clusters.len() - 1
            }
        };
        &mut self.clusters[index]
    }

    /// A cluster with raw extra lines such as `proxy_protocol = "send"`
    /// (clusters named by a frontend or backend exist without this).
    #[must_use]
    pub fn cluster(mut self, id: &str, extra: &[&str]) -> Self {
        self.cluster_mut(id)
            .lines
            .extend(extra.iter().map(|l| (*l).to_owned()));
        self
    }

    /// A frontend of `cluster` on the listener named `listener`, with an
    /// SNI pattern (None: catch-all) and an ALPN list (empty: any).
    #[must_use]
    pub fn frontend(self, cluster: &str, listener: &str, sni: Option<&str>, alpn: &[&str]) -> Self {
        self.frontend_with(cluster, listener, sni, alpn, &[])
    }

    /// A frontend with raw extra fields such as `tags = { team = "web" }`.
    #[must_use]
    pub fn frontend_with(
        mut self,
        cluster: &str,
        listener: &str,
        sni: Option<&str>,
        alpn: &[&str],
        extra: &[&str],
    ) -> Self {
        let mut fields = vec![format!("address = \"${{addr:{listener}}}\"")];
        if let Some(sni) = sni {
            fields.push(format!("sni = {}", toml_str(sni)));
        }
        if !alpn.is_empty() {
            let list: Vec<String> = alpn.iter().map(|p| toml_str(p)).collect();
            fields.push(format!("alpn = [{}]", list.join(", ")));
        }
        fields.extend(extra.iter().map(|field| (*field).to_owned()));
        self.cluster_mut(cluster)
            .frontends
            .push(format!("{{ {} }}", fields.join(", ")));
        self
    }

    /// A backend of `cluster`.
    #[must_use]
    pub fn backend(self, cluster: &str, backend_id: &str, addr: SocketAddr) -> Self {
        self.backend_with(cluster, backend_id, addr, "")
    }

    /// A backend of `cluster` with raw extra inline fields, e.g.
    /// `weight = 10, backup = true`.
    #[must_use]
    pub fn backend_with(
        self,
        cluster: &str,
        backend_id: &str,
        addr: SocketAddr,
        extra: &str,
    ) -> Self {
        self.backend_at(cluster, backend_id, &addr.to_string(), extra)
    }

    /// A backend of `cluster` at `address` as written (`name:port`, or
    /// anything the test wants the proxy to judge), with raw extra fields.
    #[must_use]
    pub fn backend_at(
        mut self,
        cluster: &str,
        backend_id: &str,
        address: &str,
        extra: &str,
    ) -> Self {
        let mut entry = format!(
            "{{ address = {}, backend_id = {}",
            toml_str(address),
            toml_str(backend_id)
        );
        if !extra.trim().is_empty() {
            entry.push_str(", ");
            entry.push_str(extra.trim());
        }
        entry.push_str(" }");
        self.cluster_mut(cluster).backends.push(entry);
        self
    }

    /// The TOML template.
    pub fn build(&self) -> String {
        let mut out = String::new();
        for line in &self.globals {
            out.push_str(line);
            out.push('\n');
        }
        for (name, extra) in &self.listeners {
            out.push_str("\n[[listeners]]\nprotocol = \"tcp\"\n");
            out.push_str(&format!("address = \"${{addr:{name}}}\"\n"));
            for line in extra {
                out.push_str(line);
                out.push('\n');
            }
        }
        for cluster in &self.clusters {
            out.push_str(&format!("\n[clusters.{}]\n", toml_key(&cluster.id)));
            for line in &cluster.lines {
                out.push_str(line);
                out.push('\n');
            }
            for (key, list) in [
                ("frontends", &cluster.frontends),
                ("backends", &cluster.backends),
            ] {
                if list.is_empty() {
                    continue;
                }
                out.push_str(&format!("{key} = [\n"));
                for entry in list {
                    out.push_str(&format!("  {entry},\n"));
                }
                out.push_str("]\n");
            }
        }
        out
    }
}

/// How [`ProxyProcess::start_with`] starts the proxy.
#[derive(Clone, Debug)]
pub struct StartOptions {
    /// Extra environment variables (e.g. `RUST_LOG`).
    pub env: Vec<(String, String)>,
    /// Readiness bound.
    pub ready_timeout: Duration,
    /// Wait for every listener of the config to accept (turn off for a
    /// config whose listeners cannot accept).
    pub wait_listeners: bool,
    /// Files written into the temp dir before the start: (name, contents),
    /// e.g. a saved state. `${addr:NAME}` and `${dir}` are filled in them too.
    pub files: Vec<(String, String)>,
    /// The proxy's descriptor limit (`RLIMIT_NOFILE`), soft and hard, set
    /// in the child before it runs, as `ulimit -n` would; `None`: inherited.
    pub nofile: Option<(u64, u64)>,
}

impl Default for StartOptions {
    fn default() -> Self {
        Self {
            env: Vec::new(),
            ready_timeout: READY_TIMEOUT,
            wait_listeners: true,
            files: Vec::new(),
            nofile: None,
        }
    }
}

impl StartOptions {
    /// Adds an environment variable.
    #[must_use]
    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.to_owned(), value.to_owned()));
        self
    }

    /// Adds a file to write into the temp dir.
    #[must_use]
    pub fn file(mut self, name: &str, contents: &str) -> Self {
        self.files.push((name.to_owned(), contents.to_owned()));
        self
    }

    /// Starts the proxy under this descriptor limit (soft, hard).
    #[must_use]
    pub fn nofile(mut self, soft: u64, hard: u64) -> Self {
        self.nofile = Some((soft, hard));
        self
    }
}

/// Sets `RLIMIT_NOFILE` of the child `command` starts, before it runs.
fn limit_descriptors(command: &mut Command, soft: u64, hard: u64) {
    use std::os::unix::process::CommandExt;
    let limit = libc::rlimit {
        rlim_cur: soft,
        rlim_max: hard,
    };
    // SAFETY: the closure runs in the forked child before exec; it only
    // calls setrlimit(2), which is async-signal-safe, on a value copied in,
    // and allocates nothing.
    unsafe {
        command.pre_exec(move || {
            if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
}

/// Spawns `preread start -c <dir>/preread.toml` in `dir`, its output to
/// the files of the dir (appended to, for a restart).
fn spawn_start(
    bin: &Path,
    dir: &Path,
    options: &StartOptions,
    append: bool,
) -> Result<Child, String> {
    let open = |name: &str| {
        File::options()
            .create(true)
            .write(true)
            .append(append)
            .truncate(!append)
            .open(dir.join(name))
            .map_err(|e| format!("{name}: {e}"))
    };
    let config_arg = dir.join(CONFIG_FILE).display().to_string();
    let mut command = Command::new(bin);
    command
        .args(["start", "-c", &config_arg])
        .current_dir(dir)
        .envs(options.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(open(STDOUT_FILE)?)
        .stderr(open(STDERR_FILE)?);
    if let Some((soft, hard)) = options.nofile {
        limit_descriptors(&mut command, soft, hard);
    }
    command
        .spawn()
        .map_err(|e| format!("spawn {}: {e}", bin.display()))
}

/// A running `preread start`; killed (SIGKILL) on Drop. Its temp dir is a
/// [`TempDir`]: removed after the kill, unless the thread is panicking or
/// [`KEEP_ENV`](crate::testkit::KEEP_ENV) is set (its path is then printed).
pub struct ProxyProcess {
    child: Option<Child>,
    exit: Option<ExitStatus>,
    /// Removed after `child` is killed: fields drop after `Drop::drop`.
    dir: TempDir,
    socket: PathBuf,
    addrs: BTreeMap<String, SocketAddr>,
    listeners: Vec<SocketAddr>,
    env: Vec<(String, String)>,
    /// Processes that took over through `preread upgrade`: not children of
    /// the test, so stopped by pid on Drop.
    successors: Vec<u32>,
    /// Readiness probes connected to the running process's listeners: each
    /// is a session it accepts and closes.
    probes: i64,
}

impl fmt::Debug for ProxyProcess {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProxyProcess")
            .field("pid", &self.child.as_ref().map(Child::id))
            .field("dir", &self.dir)
            .field("listeners", &self.listeners)
            .finish_non_exhaustive()
    }
}

/// Fills `${addr:NAME}` (allocating into `addrs`) and `${dir}`; an unknown
/// `${...}` left is an error.
fn fill_harness(
    template: &str,
    dir: &Path,
    addrs: &mut BTreeMap<String, SocketAddr>,
) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = template;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after
            .find('}')
            .ok_or_else(|| format!("unclosed placeholder: {}", &rest[start..]))?;
        let name = &after[..end];
        if let Some(addr_name) = name.strip_prefix("addr:") {
            let addr = *addrs.entry(addr_name.to_owned()).or_insert_with(free_addr);
            out.push_str(&addr.to_string());
        } else if name == "dir" {
            out.push_str(&dir.display().to_string());
        } else {
            return Err(format!(
                "unknown placeholder ${{{name}}}: fill it with e2e::proxy::fill first"
            ));
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

enum Attempt {
    Ready(ProxyProcess),
    /// Lost a port race: try again with new ports.
    PortTaken(String),
}

impl ProxyProcess {
    /// Starts the proxy with the config `template` (see the module
    /// documentation) and waits until it is ready and has closed the
    /// readiness probes.
    pub fn start(template: &str) -> Result<Self, String> {
        Self::start_with(template, &StartOptions::default())
    }

    /// [`ProxyProcess::start`] with options.
    pub fn start_with(template: &str, options: &StartOptions) -> Result<Self, String> {
        let bin = preread_bin()?;
        let mut last = String::new();
        for _ in 0..START_ATTEMPTS {
            match Self::attempt(&bin, template, options)? {
                Attempt::Ready(proxy) => return Ok(proxy),
                Attempt::PortTaken(stderr) => last = stderr,
            }
        }
        Err(format!(
            "the proxy lost a port race {START_ATTEMPTS} times; last stderr:\n{last}"
        ))
    }

    fn attempt(bin: &Path, template: &str, options: &StartOptions) -> Result<Attempt, String> {
        let temp = TempDir::create("proxy").map_err(|e| format!("create the temp dir: {e}"))?;
        let dir = temp.path().to_owned();
        let mut addrs = BTreeMap::new();
        let mut text = fill_harness(template, &dir, &mut addrs)?;
        if !text.contains("command_socket") {
            text = format!("command_socket = \"preread.sock\"\n{text}");
        }
        let config_path = dir.join(CONFIG_FILE);
        std::fs::write(&config_path, &text).map_err(|e| format!("write config: {e}"))?;
        for (name, contents) in &options.files {
            let contents = fill_harness(contents, &dir, &mut addrs)?;
            std::fs::write(dir.join(name), contents).map_err(|e| format!("write {name}: {e}"))?;
        }
        let loaded = command::config::load_config_file(&config_path).map_err(|problems| {
            let list: Vec<String> = problems.iter().map(ToString::to_string).collect();
            format!(
                "the config does not load:\n{}\n--- config ---\n{text}",
                list.join("\n")
            )
        })?;
        let listeners: Vec<SocketAddr> = loaded
            .requests()
            .filter_map(|request| match &request.request_type {
                // A QUIC listener is UDP: nothing to connect to.
                Some(RequestType::AddTcpListener(listener)) if listener.protocol.is_none() => {
                    listener.address.parse().ok()
                }
                _ => None,
            })
            .collect();
        let socket = loaded.global.command_socket.clone();
        let child = spawn_start(bin, &dir, options, false)?;
        let mut proxy = ProxyProcess {
            child: Some(child),
            exit: None,
            dir: temp,
            socket,
            addrs,
            listeners,
            env: options.env.clone(),
            successors: Vec::new(),
            probes: 0,
        };
        let deadline = Instant::now() + options.ready_timeout;
        loop {
            if let Some(status) = proxy.try_wait()? {
                let stderr = proxy.stderr_text();
                // A bind that failed ("in use"), or the command server's
                // check that a new address is free ("already bound").
                if stderr.contains("in use") || stderr.contains("already bound") {
                    return Ok(Attempt::PortTaken(stderr));
                }
                return Err(format!(
                    "the proxy exited during start-up ({status}); stderr:\n{}",
                    tail(&stderr, 40)
                ));
            }
            if proxy.is_ready(options.wait_listeners) {
                proxy.wait_probes_closed(options.ready_timeout)?;
                return Ok(Attempt::Ready(proxy));
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "the proxy was not ready within {:?}; stderr:\n{}",
                    options.ready_timeout,
                    tail(&proxy.stderr_text(), 40)
                ));
            }
            std::thread::sleep(POLL);
        }
    }

    fn is_ready(&mut self, wait_listeners: bool) -> bool {
        let status = BlockingChannel::connect(&self.socket, Duration::from_millis(500)).and_then(
            |mut channel| {
                channel.request(
                    &Request {
                        request_type: Some(RequestType::Status(proto::Status {})),
                    },
                    |_| {},
                )
            },
        );
        if !status.is_ok_and(|response| response.status == ResponseStatus::Ok as i32) {
            return false;
        }
        if !wait_listeners {
            return true;
        }
        let mut made = 0;
        let ready = self.listeners.iter().all(|addr| {
            let Ok(probe) = TcpStream::connect_timeout(addr, Duration::from_millis(200)) else {
                return false;
            };
            made += 1;
            // Its FIN now: a late one would be a silent client to a short
            // preread timeout.
            shut(&probe).is_ok()
        });
        self.probes += made;
        ready
    }

    /// Waits (at most `timeout`) until the proxy has accepted every
    /// readiness probe and no session is open: a test's counts and limits
    /// then start from its own connections. Ready is not enough: a probe's
    /// connect completes in the kernel, before any worker accepts it.
    fn wait_probes_closed(&self, timeout: Duration) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        loop {
            let metrics = self.metrics()?;
            let get = |name: &str| metrics.get(name).copied().unwrap_or(0);
            let (accepted, active) = (get("tcp.accepted"), get("tcp.active"));
            if accepted >= self.probes && active == 0 {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "the proxy did not close the harness's {} readiness probes within \
                     {timeout:?}: tcp.accepted {accepted}, tcp.active {active}; stderr:\n{}",
                    self.probes,
                    tail(&self.stderr_text(), 40)
                ));
            }
            std::thread::sleep(POLL);
        }
    }

    fn try_wait(&mut self) -> Result<Option<ExitStatus>, String> {
        if let Some(status) = self.exit {
            return Ok(Some(status));
        }
        let Some(child) = self.child.as_mut() else {
            return Ok(None);
        };
        let status = child.try_wait().map_err(|e| format!("wait: {e}"))?;
        self.exit = status;
        Ok(status)
    }

    /// The address a `${addr:NAME}` placeholder got.
    ///
    /// # Panics
    /// When the config had no such placeholder.
    pub fn addr(&self, name: &str) -> SocketAddr {
        *self
            .addrs
            .get(name)
            .unwrap_or_else(|| panic!("no ${{addr:{name}}} in the config"))
    }

    /// The config's listener addresses, in order.
    pub fn listeners(&self) -> &[SocketAddr] {
        &self.listeners
    }

    /// The first listener's address.
    ///
    /// # Panics
    /// When the config has no listener.
    pub fn listener(&self) -> SocketAddr {
        *self.listeners.first().expect("the config has a listener")
    }

    /// The temp dir (config, socket, stderr.log, ...).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The config file.
    pub fn config_path(&self) -> PathBuf {
        self.dir.path().join(CONFIG_FILE)
    }

    /// The command socket.
    pub fn socket_path(&self) -> &Path {
        &self.socket
    }

    /// The proxy's process id.
    ///
    /// # Panics
    /// Never: the child exists until Drop.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(Child::id).expect("child exists")
    }

    /// The numbers of the descriptors the proxy holds open now
    /// (`/proc/<pid>/fd`). Some may be inherited from the test runner (a
    /// jobserver's pipe), above any limit the proxy was started under.
    pub fn descriptors(&self) -> Result<Vec<u32>, String> {
        let dir = format!("/proc/{}/fd", self.pid());
        let entries = std::fs::read_dir(&dir).map_err(|e| format!("read {dir}: {e}"))?;
        Ok(entries
            .flatten()
            .filter_map(|entry| entry.file_name().to_str()?.parse().ok())
            .collect())
    }

    /// Sends one request on a fresh command connection and returns the
    /// final response (progress responses are skipped).
    pub fn command(&self, request: &Request) -> Result<Response, String> {
        // As the CLI: a large proxy's answers (its metrics) go past the
        // request cap.
        let mut channel = BlockingChannel::connect(&self.socket, COMMAND_TIMEOUT)
            .map_err(|e| format!("connect to the command socket: {e}"))?
            .with_max_frame_len(MAX_ANSWER_LEN);
        channel
            .request(request, |_| {})
            .map_err(|e| format!("command {request:?}: {e}"))
    }

    /// [`ProxyProcess::command`] of a request type.
    pub fn send(&self, request_type: RequestType) -> Result<Response, String> {
        self.command(&Request {
            request_type: Some(request_type),
        })
    }

    /// [`ProxyProcess::send`], with a FAILURE response turned into `Err`
    /// (`"<code>: <message>"`).
    pub fn apply(&self, request_type: RequestType) -> Result<Response, String> {
        let response = self.send(request_type)?;
        if response.status == ResponseStatus::Ok as i32 {
            Ok(response)
        } else {
            Err(format!("{}: {}", response.error_code, response.message))
        }
    }

    /// Each route source as `preread sources` reports it (`ListSources`):
    /// the config file first.
    pub fn sources(&self) -> Result<Vec<proto::SourceEntry>, String> {
        let response = self.apply(RequestType::ListSources(proto::ListSources {}))?;
        match response.content.and_then(|c| c.content_type) {
            Some(ContentType::Sources(list)) => Ok(list.sources),
            other => Err(format!("not a source list: {other:?}")),
        }
    }

    /// The source of `kind` (`docker`, `directory`) of [`Self::sources`].
    pub fn source(&self, kind: &str) -> Result<proto::SourceEntry, String> {
        self.sources()?
            .into_iter()
            .find(|s| s.kind == kind)
            .ok_or_else(|| format!("no {kind} source"))
    }

    /// The metric totals over the workers (`QueryMetrics`).
    pub fn metrics(&self) -> Result<BTreeMap<String, i64>, String> {
        let response = self.apply(RequestType::QueryMetrics(proto::QueryMetrics::default()))?;
        match response.content.and_then(|content| content.content_type) {
            Some(ContentType::Metrics(report)) => Ok(report.total.into_iter().collect()),
            other => Err(format!("QueryMetrics answered {other:?}")),
        }
    }

    /// One metric of each worker, in worker order (0 where a worker does
    /// not have it).
    pub fn per_worker(&self, name: &str) -> Result<Vec<i64>, String> {
        let response = self.apply(RequestType::QueryMetrics(proto::QueryMetrics::default()))?;
        match response.content.and_then(|content| content.content_type) {
            Some(ContentType::Metrics(report)) => Ok(report
                .workers
                .iter()
                .map(|w| w.values.get(name).copied().unwrap_or(0))
                .collect()),
            other => Err(format!("QueryMetrics answered {other:?}")),
        }
    }

    /// `backend list`: every backend instance with its health, page after
    /// page.
    pub fn backends(&self) -> Result<Vec<proto::BackendStatus>, String> {
        let mut all: Vec<proto::BackendStatus> = Vec::new();
        loop {
            let after = all
                .last()
                .and_then(|s| s.backend.as_ref())
                .map(|b| b.backend_id.clone());
            let page = proto::ListBackends { after, limit: 0 };
            let response = self.apply(RequestType::ListBackends(page))?;
            match response.content.and_then(|content| content.content_type) {
                Some(ContentType::Backends(list)) => {
                    let more = list.more && !list.backends.is_empty();
                    all.extend(list.backends);
                    if !more {
                        return Ok(all);
                    }
                }
                other => return Err(format!("ListBackends answered {other:?}")),
            }
        }
    }

    /// Polls `backend list` until the instances of backend `id` satisfy
    /// `accept` (or `timeout` passes: `Err` with the last listing).
    pub fn wait_backend(
        &self,
        id: &str,
        accept: impl Fn(&[proto::BackendStatus]) -> bool,
        timeout: Duration,
    ) -> Result<Vec<proto::BackendStatus>, String> {
        let deadline = Instant::now() + timeout;
        loop {
            let of_id: Vec<proto::BackendStatus> = self
                .backends()?
                .into_iter()
                .filter(|b| b.backend.as_ref().is_some_and(|b| b.backend_id == id))
                .collect();
            if accept(&of_id) {
                return Ok(of_id);
            }
            if Instant::now() >= deadline {
                return Err(format!("backend {id} after {timeout:?}: {of_id:?}"));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// One metric total, 0 when absent.
    ///
    /// # Panics
    /// When the metrics cannot be queried.
    pub fn metric(&self, name: &str) -> i64 {
        self.metrics()
            .unwrap_or_else(|err| panic!("query metrics: {err}"))
            .get(name)
            .copied()
            .unwrap_or(0)
    }

    /// Polls metric `name` until `accept` says yes (or `timeout` passes:
    /// `Err` with the last value). Metrics are updated asynchronously, so
    /// use this rather than one read right after a connection.
    pub fn wait_metric(
        &self,
        name: &str,
        accept: impl Fn(i64) -> bool,
        timeout: Duration,
    ) -> Result<i64, String> {
        let deadline = Instant::now() + timeout;
        loop {
            let value = self.metrics()?.get(name).copied().unwrap_or(0);
            if accept(value) {
                return Ok(value);
            }
            if Instant::now() >= deadline {
                return Err(format!("metric {name} = {value} after {timeout:?}"));
            }
            std::thread::sleep(POLL);
        }
    }

    /// Everything the proxy wrote to stderr so far (logs, access logs).
    pub fn stderr_text(&self) -> String {
        String::from_utf8_lossy(
            &std::fs::read(self.dir.path().join(STDERR_FILE)).unwrap_or_default(),
        )
        .into_owned()
    }

    /// Polls stderr until a line contains `needle`; returns that line.
    pub fn wait_stderr(&self, needle: &str, timeout: Duration) -> Result<String, String> {
        let deadline = Instant::now() + timeout;
        loop {
            let text = self.stderr_text();
            if let Some(line) = text.lines().find(|line| line.contains(needle)) {
                return Ok(line.to_owned());
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "no stderr line with {needle:?} after {timeout:?}; stderr:\n{}",
                    tail(&text, 40)
                ));
            }
            std::thread::sleep(POLL);
        }
    }

    /// The logfmt access-log lines of stderr (those with both `outcome=`
    /// and `listener=`), parsed with [`parse_logfmt`].
    pub fn access_logs(&self) -> Vec<BTreeMap<String, String>> {
        self.stderr_text()
            .lines()
            .map(parse_logfmt)
            .filter(|fields| fields.contains_key("outcome") && fields.contains_key("listener"))
            .collect()
    }

    /// The access-log lines once `enough` says they are all there, or
    /// an error after `timeout`. A line is written by the access log's own
    /// thread after its session closed and its metrics were counted, so a
    /// test that waited for a metric waits for the lines too.
    pub fn wait_access_logs(
        &self,
        timeout: Duration,
        enough: impl Fn(&[BTreeMap<String, String>]) -> bool,
    ) -> Result<Vec<BTreeMap<String, String>>, String> {
        let deadline = Instant::now() + timeout;
        loop {
            let lines = self.access_logs();
            if enough(&lines) {
                return Ok(lines);
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "the access log is still short after {timeout:?}: {} line(s):\n{}",
                    lines.len(),
                    tail(&self.stderr_text(), 40)
                ));
            }
            std::thread::sleep(POLL);
        }
    }

    /// Rewrites the config file from a new template (same `${addr:NAME}`
    /// ports; new names get new ones), e.g. before a `reload`.
    pub fn write_config(&mut self, template: &str) -> Result<(), String> {
        let mut text = fill_harness(template, self.dir.path(), &mut self.addrs)?;
        if !text.contains("command_socket") {
            text = format!("command_socket = \"preread.sock\"\n{text}");
        }
        std::fs::write(self.config_path(), text).map_err(|e| format!("write config: {e}"))
    }

    /// Sends `signal` (e.g. `libc::SIGTERM`) to the proxy.
    pub fn signal(&mut self, signal: i32) -> Result<(), String> {
        if self.try_wait()?.is_some() {
            return Err("the proxy already exited".to_owned());
        }
        let pid = i32::try_from(self.pid()).map_err(|e| format!("pid: {e}"))?;
        // SAFETY: kill(2) has no memory-safety preconditions; `pid` is our
        // own child, not yet reaped (try_wait above saw it running), so the
        // id cannot have been reused by another process.
        let rc = unsafe { libc::kill(pid, signal) };
        if rc == 0 {
            Ok(())
        } else {
            Err(format!(
                "kill({pid}, {signal}): {}",
                std::io::Error::last_os_error()
            ))
        }
    }

    /// Waits for the proxy to exit, at most `timeout`.
    pub fn wait_exit(&mut self, timeout: Duration) -> Result<ExitStatus, String> {
        if let Some(status) = self.try_wait()? {
            return Ok(status);
        }
        let child = self.child.as_mut().ok_or("no child")?;
        match wait_bounded(child, timeout)? {
            Some(status) => {
                self.exit = Some(status);
                Ok(status)
            }
            None => Err(format!("the proxy did not exit within {timeout:?}")),
        }
    }

    /// Kills the proxy with SIGKILL, as a crash would, and reaps it.
    pub fn kill(&mut self) -> Result<ExitStatus, String> {
        self.signal(libc::SIGKILL)?;
        self.wait_exit(STOP_TIMEOUT)
    }

    /// Starts the proxy again, once it exited, in the same temp dir with
    /// the same config and environment (a supervisor's restart), and waits
    /// at most `timeout` until it is ready. Its stderr goes on in the same
    /// file.
    pub fn restart(&mut self, timeout: Duration) -> Result<(), String> {
        if self.try_wait()?.is_none() {
            return Err("the proxy is still running: stop or kill it first".to_owned());
        }
        let options = StartOptions {
            env: self.env.clone(),
            ..StartOptions::default()
        };
        let child = spawn_start(&preread_bin()?, self.dir.path(), &options, true)?;
        self.child = Some(child);
        self.exit = None;
        self.probes = 0;
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.try_wait()? {
                return Err(format!(
                    "the restarted proxy exited during start-up ({status}); stderr:\n{}",
                    tail(&self.stderr_text(), 40)
                ));
            }
            if self.is_ready(true) {
                return self.wait_probes_closed(timeout);
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "the restarted proxy was not ready within {timeout:?}; stderr:\n{}",
                    tail(&self.stderr_text(), 40)
                ));
            }
            std::thread::sleep(POLL);
        }
    }

    /// Soft stop: SIGTERM, then wait at most [`STOP_TIMEOUT`] for the exit.
    pub fn stop_soft(&mut self) -> Result<ExitStatus, String> {
        self.stop_soft_within(STOP_TIMEOUT)
    }

    /// Soft stop with a bound.
    pub fn stop_soft_within(&mut self, timeout: Duration) -> Result<ExitStatus, String> {
        self.signal(libc::SIGTERM)?;
        self.wait_exit(timeout)
    }

    /// The exit status, if the proxy exited.
    pub fn exit_status(&mut self) -> Option<ExitStatus> {
        self.try_wait().ok().flatten()
    }

    /// Runs `preread --socket <socket> ARGS` in the temp dir (so a bare
    /// `preread reload` finds preread.toml), bounded by [`CLI_TIMEOUT`],
    /// with the start's environment.
    pub fn cli(&self, args: &[&str]) -> Result<Output, String> {
        let socket = self.socket.display().to_string();
        let mut all = vec!["--socket", socket.as_str()];
        all.extend_from_slice(args);
        run_preread_env(&all, self.dir.path(), CLI_TIMEOUT, &self.env)
    }
}

impl ProxyProcess {
    /// Runs `preread upgrade ARGS` (bounded by `timeout`). When it
    /// succeeds, the new process (the pid `status` reports) is recorded, so
    /// Drop stops it too.
    pub fn upgrade(&mut self, args: &[&str], timeout: Duration) -> Result<Output, String> {
        let socket = self.socket.display().to_string();
        let mut all = vec!["--socket", socket.as_str(), "upgrade"];
        all.extend_from_slice(args);
        let out = run_preread_env(&all, self.dir.path(), timeout, &self.env)?;
        if out.status.success() {
            let pid = self.serving_pid()?;
            self.successors.push(pid);
        }
        Ok(out)
    }

    /// What `status` answers (its `sessions` count TCP sessions and QUIC
    /// flows over every worker).
    pub fn status(&self) -> Result<proto::StatusReport, String> {
        let response = self.send(RequestType::Status(proto::Status {}))?;
        match response.content.and_then(|c| c.content_type) {
            Some(ContentType::Status(status)) => Ok(status),
            other => Err(format!("status answered {other:?}")),
        }
    }

    /// The pid of the process answering on the command socket.
    pub fn serving_pid(&self) -> Result<u32, String> {
        self.status().map(|status| status.pid)
    }

    /// Whether process `pid`, not a child of the test, is still a running
    /// preread.
    pub fn is_running(pid: u32) -> bool {
        std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|cmdline| {
            String::from_utf8_lossy(&cmdline).contains("preread")
                && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
                    .is_ok_and(|stat| stat.split_whitespace().nth(2) == Some("Z"))
        })
    }
}

impl Drop for ProxyProcess {
    fn drop(&mut self) {
        for &pid in &self.successors {
            if Self::is_running(pid)
                && let Ok(raw) = i32::try_from(pid)
            {
                // SAFETY: kill(2) has no memory-safety preconditions; the
                // pid was just seen running a preread (the one this test
                // upgraded to), so it names that process.
                unsafe { libc::kill(raw, libc::SIGKILL) };
            }
        }
        if let Some(mut child) = self.child.take() {
            if self.exit.is_none() && matches!(child.try_wait(), Ok(None)) {
                let _ = child.kill();
            }
            if !matches!(
                wait_bounded(&mut child, Duration::from_secs(5)),
                Ok(Some(_))
            ) {
                eprintln!("e2e: proxy pid {} did not exit after SIGKILL", child.id());
            }
        }
    }
}

/// Parses the `key=value` and `key="quoted value"` pairs of a logfmt line
/// (anything before or between pairs that is not one is skipped).
pub fn parse_logfmt(line: &str) -> BTreeMap<String, String> {
    let mut fields = BTreeMap::new();
    let mut rest = line.trim_start();
    while !rest.is_empty() {
        let token_end = rest.find([' ', '=']).unwrap_or(rest.len());
        let key = &rest[..token_end];
        rest = &rest[token_end..];
        if let Some(after) = rest.strip_prefix('=') {
            let (value, remaining) = if let Some(quoted) = after.strip_prefix('"') {
                let mut value = String::new();
                let mut chars = quoted.char_indices();
                let mut end = quoted.len();
                while let Some((i, c)) = chars.next() {
                    match c {
                        '\\' => {
                            if let Some((_, escaped)) = chars.next() {
                                value.push(escaped);
                            }
                        }
                        '"' => {
                            end = i + 1;
                            break;
                        }
                        c => value.push(c),
                    }
                }
                (value, &quoted[end.min(quoted.len())..])
            } else {
                let end = after.find(' ').unwrap_or(after.len());
                (after[..end].to_owned(), &after[end..])
            };
            if !key.is_empty() {
                fields.insert(key.to_owned(), value);
            }
            rest = remaining;
        }
        rest = rest.trim_start();
    }
    fields
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logfmt() {
        let fields = parse_logfmt(
            r#"[INFO] ts=1 listener=127.0.0.1:1 sni="a b\"c" outcome=routed empty="" x"#,
        );
        assert_eq!(fields["listener"], "127.0.0.1:1");
        assert_eq!(fields["sni"], "a b\"c");
        assert_eq!(fields["outcome"], "routed");
        assert_eq!(fields["empty"], "");
        assert!(!fields.contains_key("x"));
    }

    #[test]
    fn builder_and_placeholders() {
        let backend: SocketAddr = "127.0.0.1:9".parse().expect("addr");
        let template = ConfigBuilder::new()
            .global("worker_count = 2")
            .listener("main", &["default_cluster = \"fallback\""])
            .frontend("alpha", "main", Some("a.example.com"), &["h2"])
            .backend("alpha", "alpha-0", backend)
            .backend_with("fallback", "fb-0", backend, "backup = false")
            .build();
        let mut addrs = BTreeMap::new();
        let text = fill_harness(&template, Path::new("/tmp/x"), &mut addrs).expect("fill");
        let main = addrs["main"];
        assert!(text.contains(&format!("address = \"{main}\"")));
        assert_eq!(text.matches(&main.to_string()).count(), 2);
        let text = format!("command_socket = \"preread.sock\"\n{text}");
        command::config::load_config(&text).unwrap_or_else(|problems| {
            panic!("{problems:?}\n{text}");
        });
        assert!(fill_harness("${nope}", Path::new("/"), &mut addrs).is_err());
        assert_eq!(fill("a=${x}", &[("x", "1")]), "a=1");
    }
}
