//! What a benchmark connection goes through, and how each proxy is set up.
//!
//! Every proxy gets two listeners: `rate` routes the SNI `a.example.com` to
//! the [`super::backends::RpcBackend`], `hold` routes it to the
//! [`super::backends::HoldBackend`]. Any other ClientHello, or one still
//! incomplete after 5 s, is refused. `workers` worker threads or processes
//! each (1 by default, `--workers`):
//!
//! - preread: `worker_count = workers`, access logs off, `splice` as
//!   given, `defer_accept` on (its default) but for `preread-nodefer`,
//!   `backend_delayed_ack` off (its default) but for `preread-delack`
//!   (copying), bulk directions' pipes grown (`splice_bulk_pipe_size`, its
//!   default) but for `preread-nogrow` (splicing);
//! - HAProxy: `nbthread workers`, TCP mode, `tcp-request inspect-delay 5s`,
//!   `accept if { req.ssl_hello_type 1 }`, else `reject`;
//!   `use_backend ... if { req.ssl_sni -i a.example.com }`, no logging;
//!   `haproxy-splice` adds `option splice-request` and `option
//!   splice-response` (HAProxy's own splice, forced: `splice-auto` did not
//!   splice these transfers);
//! - nginx: `master_process off` (the one process is the worker) for one
//!   worker; for more, `master_process on` with `worker_processes workers`
//!   (the CPU and the syscalls are then the master's and its workers'),
//!   `stream` with `ssl_preread on`, `preread_timeout 5s`,
//!   `map $ssl_preread_server_name`, unknown names to a closed port;
//!   no access log (the stream default), error log at `crit`.
//!
//! Listen backlogs are 1024 everywhere (preread's fixed value). Each is
//! started fresh for a measurement and stopped by its PID.

use std::fmt::Write as _;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use e2e::proxy::{ConfigBuilder, ProxyProcess, free_addr};

use super::SNI;

/// Where connections go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Direct,
    Preread {
        splice: bool,
        defer: bool,
        delack: bool,
        grow: bool,
    },
    Haproxy {
        splice: bool,
    },
    Nginx,
}

impl Kind {
    pub(crate) fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "direct" => Self::Direct,
            "preread-splice" => Self::Preread {
                splice: true,
                defer: true,
                delack: false,
                grow: true,
            },
            "preread-copy" => Self::Preread {
                splice: false,
                defer: true,
                delack: false,
                grow: true,
            },
            "preread-nodefer" => Self::Preread {
                splice: true,
                defer: false,
                delack: false,
                grow: true,
            },
            "preread-delack" => Self::Preread {
                splice: false,
                defer: true,
                delack: true,
                grow: true,
            },
            "preread-nogrow" => Self::Preread {
                splice: true,
                defer: true,
                delack: false,
                grow: false,
            },
            "haproxy" => Self::Haproxy { splice: false },
            "haproxy-splice" => Self::Haproxy { splice: true },
            "nginx" => Self::Nginx,
            _ => return None,
        })
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Direct => "direct",
            Self::Preread { delack: true, .. } => "preread-delack",
            Self::Preread { grow: false, .. } => "preread-nogrow",
            Self::Preread {
                splice: true,
                defer: true,
                ..
            } => "preread-splice",
            Self::Preread {
                splice: false,
                defer: true,
                ..
            } => "preread-copy",
            Self::Preread { defer: false, .. } => "preread-nodefer",
            Self::Haproxy { splice: false } => "haproxy",
            Self::Haproxy { splice: true } => "haproxy-splice",
            Self::Nginx => "nginx",
        }
    }
}

enum Process {
    None,
    Preread(Box<ProxyProcess>),
    Peer { child: Child, dir: PathBuf },
}

/// A started target.
pub(crate) struct Running {
    pub(crate) kind: Kind,
    pub(crate) rate: SocketAddr,
    pub(crate) hold: SocketAddr,
    process: Process,
}

impl std::fmt::Debug for Running {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Running")
            .field("kind", &self.kind)
            .field("pid", &self.pid())
            .finish_non_exhaustive()
    }
}

/// The preread config of the benchmark (a harness template).
pub(crate) fn preread_config(
    (splice, defer, delack, grow): (bool, bool, bool, bool),
    (workers, pipe_size): (usize, Option<u64>),
    rpc: SocketAddr,
    hold: SocketAddr,
) -> String {
    let mut config = ConfigBuilder::new();
    if let Some(size) = pipe_size {
        config = config.global(&format!("splice_pipe_size = {size}"));
    }
    if !grow {
        config = config.global("splice_bulk_pipe_size = 0");
    }
    config
        .global(&format!("worker_count = {workers}"))
        .global(&format!("splice = {splice}"))
        .global(&format!("defer_accept = {defer}"))
        .global(&format!("backend_delayed_ack = {delack}"))
        .global("access_logs = \"off\"")
        .global("log_level = \"warn\"")
        .listener("rate", &[])
        .listener("hold", &[])
        .frontend("rpc", "rate", Some(SNI), &[])
        .backend("rpc", "rpc-0", rpc)
        .frontend("hold", "hold", Some(SNI), &[])
        .backend("hold", "hold-0", hold)
        .build()
}

/// The HAProxy config.
pub(crate) fn haproxy_config(
    splice: bool,
    (workers, pipe_size): (usize, Option<u64>),
    rate: SocketAddr,
    hold: SocketAddr,
    rpc: SocketAddr,
    hold_backend: SocketAddr,
) -> String {
    let pipesize = pipe_size.map_or(String::new(), |size| format!("    tune.pipesize {size}\n"));
    let mut text = format!(
        "global\n    nbthread {workers}\n    maxconn 5000\n{pipesize}\n\
         defaults\n    mode tcp\n    maxconn 5000\n    backlog 1024\n\
         \x20   timeout connect 3s\n    timeout client 60s\n    timeout server 60s\n",
    );
    if splice {
        text.push_str("    option splice-request\n    option splice-response\n");
    }
    for (name, bind, backend) in [("rate", rate, rpc), ("hold", hold, hold_backend)] {
        let _ = write!(
            text,
            "\nfrontend {name}\n    bind {bind}\n    tcp-request inspect-delay 5s\n\
             \x20   tcp-request content accept if {{ req.ssl_hello_type 1 }}\n\
             \x20   tcp-request content reject\n\
             \x20   use_backend b_{name} if {{ req.ssl_sni -i {SNI} }}\n\
             \nbackend b_{name}\n    server s0 {backend}\n"
        );
    }
    text
}

/// The nginx config (`dir` holds its pid and error log).
pub(crate) fn nginx_config(
    dir: &Path,
    workers: usize,
    rate: SocketAddr,
    hold: SocketAddr,
    rpc: SocketAddr,
    hold_backend: SocketAddr,
) -> String {
    let dir = dir.display();
    let master = if workers > 1 { "on" } else { "off" };
    let mut text = format!(
        "load_module /usr/lib/nginx/modules/ngx_stream_module.so;\n\
         daemon off;\nmaster_process {master};\nworker_processes {workers};\n\
         worker_rlimit_nofile 20000;\n\
         pid {dir}/nginx.pid;\nerror_log {dir}/error.log crit;\n\
         events {{ worker_connections 8000; }}\n\
         stream {{\n    preread_timeout 5s;\n    proxy_connect_timeout 3s;\n    proxy_timeout 60s;\n"
    );
    for (name, bind, backend) in [("rate", rate, rpc), ("hold", hold, hold_backend)] {
        let _ = write!(
            text,
            "    map $ssl_preread_server_name ${name}_up {{ {SNI} {backend}; default 127.0.0.1:1; }}\n\
             \x20   server {{ listen {bind} backlog=1024; ssl_preread on; proxy_pass ${name}_up; }}\n"
        );
    }
    text.push_str("}\n");
    text
}

fn wait_listening(addrs: &[SocketAddr], child: &mut Child, bound: Duration) -> Result<(), String> {
    let deadline = Instant::now() + bound;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!("exited during start-up: {status}"));
        }
        if addrs
            .iter()
            .all(|addr| TcpStream::connect_timeout(addr, Duration::from_millis(200)).is_ok())
        {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(format!("not listening after {bound:?}"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

impl Running {
    /// Starts `kind` in front of the two backends, with `workers` threads
    /// and, if set, pipes of `pipe_size` bytes (preread's
    /// `splice_pipe_size`, HAProxy's `tune.pipesize`); `work` is a directory
    /// for the peers' configs and logs.
    pub(crate) fn start(
        kind: Kind,
        (workers, pipe_size): (usize, Option<u64>),
        rpc: SocketAddr,
        hold_backend: SocketAddr,
        work: &Path,
    ) -> Result<Self, String> {
        match kind {
            Kind::Direct => Ok(Self {
                kind,
                rate: rpc,
                hold: hold_backend,
                process: Process::None,
            }),
            Kind::Preread {
                splice,
                defer,
                delack,
                grow,
            } => {
                let config = preread_config(
                    (splice, defer, delack, grow),
                    (workers, pipe_size),
                    rpc,
                    hold_backend,
                );
                let proxy = ProxyProcess::start(&config)?;
                Ok(Self {
                    kind,
                    rate: proxy.addr("rate"),
                    hold: proxy.addr("hold"),
                    process: Process::Preread(Box::new(proxy)),
                })
            }
            Kind::Haproxy { .. } | Kind::Nginx => {
                let (rate, hold) = (free_addr(), free_addr());
                let dir = work.join(format!("{}-{}", kind.name(), rate.port()));
                std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
                let (file, text, mut command) = if let Kind::Haproxy { splice } = kind {
                    let file = dir.join("haproxy.cfg");
                    let mut command = Command::new("haproxy");
                    command.arg("-db").arg("-f").arg(&file);
                    (
                        file,
                        haproxy_config(splice, (workers, pipe_size), rate, hold, rpc, hold_backend),
                        command,
                    )
                } else {
                    let file = dir.join("nginx.conf");
                    let mut command = Command::new("nginx");
                    command
                        .arg("-e")
                        .arg(dir.join("error.log"))
                        .arg("-p")
                        .arg(&dir)
                        .arg("-c")
                        .arg(&file);
                    (
                        file,
                        nginx_config(&dir, workers, rate, hold, rpc, hold_backend),
                        command,
                    )
                };
                std::fs::write(&file, text).map_err(|e| format!("{}: {e}", file.display()))?;
                let log = |name: &str| {
                    std::fs::File::create(dir.join(name))
                        .map(Stdio::from)
                        .map_err(|e| format!("{name}: {e}"))
                };
                let mut child = command
                    .stdin(Stdio::null())
                    .stdout(log("stdout.log")?)
                    .stderr(log("stderr.log")?)
                    .spawn()
                    .map_err(|e| format!("spawn {}: {e}", kind.name()))?;
                if let Err(e) = wait_listening(&[rate, hold], &mut child, Duration::from_secs(10)) {
                    let _ = child.kill();
                    let _ = child.wait();
                    let stderr =
                        std::fs::read_to_string(dir.join("stderr.log")).unwrap_or_default();
                    return Err(format!("{}: {e}; stderr:\n{stderr}", kind.name()));
                }
                Ok(Self {
                    kind,
                    rate,
                    hold,
                    process: Process::Peer { child, dir },
                })
            }
        }
    }

    /// The proxy's PID (None for the direct connection).
    pub(crate) fn pid(&self) -> Option<u32> {
        match &self.process {
            Process::None => None,
            Process::Preread(proxy) => Some(proxy.pid()),
            Process::Peer { child, .. } => Some(child.id()),
        }
    }

    /// Every process doing the proxy's work: its own, and the worker
    /// processes of an nginx master (empty for the direct connection).
    pub(crate) fn pids(&self) -> Vec<u32> {
        let Some(pid) = self.pid() else {
            return Vec::new();
        };
        let children =
            std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
        std::iter::once(pid)
            .chain(children.split_whitespace().filter_map(|c| c.parse().ok()))
            .collect()
    }

    /// A preread metric total (None for the peers).
    pub(crate) fn preread_metric(&self, name: &str) -> Option<i64> {
        match &self.process {
            Process::Preread(proxy) => proxy
                .metrics()
                .ok()
                .map(|metrics| metrics.get(name).copied().unwrap_or(0)),
            _ => None,
        }
    }

    /// One preread metric of each worker, in worker order (None for the
    /// peers).
    pub(crate) fn preread_per_worker(&self, name: &str) -> Option<Vec<i64>> {
        match &self.process {
            Process::Preread(proxy) => proxy.per_worker(name).ok(),
            _ => None,
        }
    }

    /// Stops the proxy by its PID (SIGTERM, then SIGKILL after 5 s for the
    /// peers; SIGKILL for preread, through the harness) and returns what it
    /// wrote on stderr.
    pub(crate) fn stop(self) -> String {
        match self.process {
            Process::None => String::new(),
            Process::Preread(proxy) => {
                let stderr = proxy.stderr_text();
                drop(proxy);
                stderr
            }
            Process::Peer { mut child, dir } => {
                if let Ok(pid) = i32::try_from(child.id()) {
                    // SAFETY: kill(2) touches no memory of ours; `pid` is our
                    // own unreaped child, so it cannot name another process.
                    unsafe { libc::kill(pid, libc::SIGTERM) };
                }
                let deadline = Instant::now() + Duration::from_secs(5);
                while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(10));
                }
                if matches!(child.try_wait(), Ok(None)) {
                    let _ = child.kill();
                    let _ = child.wait();
                }
                let mut text = String::new();
                for name in ["stderr.log", "error.log"] {
                    text.push_str(&std::fs::read_to_string(dir.join(name)).unwrap_or_default());
                }
                text
            }
        }
    }
}
