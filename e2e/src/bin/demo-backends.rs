//! Starts demo backends for a preread config, so the proxy can be tried by
//! hand with curl or openssl.
//!
//! Usage: see [`USAGE`].
//!
//! CONFIG defaults to `doc/examples/preread.toml`. For every backend of
//! every cluster it starts, on the backend's address:
//!
//! - an HTTP/2 backend ([`e2e::h2_backend::H2Backend`]) when the cluster's
//!   frontends list `h2` and it sends no PROXY header, so a plain `curl`
//!   gets an HTTP/2 answer;
//! - else a TLS backend ([`e2e::backend::TlsBackend`], HTTP mode on) when the
//!   cluster has SNI frontends, with a certificate for the names they route
//!   (an exact name as is; `*.x` and `**.x` as the wildcard `*.x` plus the
//!   sample name `demo.x`) and the ALPN protocols they list (none listed:
//!   no ALPN, so curl speaks HTTP/1.1 and gets an HTTP answer);
//! - a plain backend otherwise (e.g. the listener's default cluster).
//!
//! Two backends on one address share the first one's server. The
//! certificates are signed by a CA made at start; its certificate is
//! written to `DIR/ca.pem` (with an mTLS client certificate in
//! `DIR/client.pem` and `DIR/client-key.pem`), DIR defaulting to
//! [`default_out`], a directory of the user's own. It prints commands to
//! try, written for the config's first listener as it is (an IPv6 one
//! gets `--resolve 'NAME:PORT:[::1]'`). It runs until SIGINT (Ctrl-C) or SIGTERM, or
//! for `--for SECONDS`; standard input is not read, so it runs the same in
//! the background or with no terminal.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use command::proto::request::RequestType;
use e2e::backend::{BackendConfig, PlainBackend, TlsBackend};
use e2e::certs::TestCa;
use e2e::h2_backend::H2Backend;

const USAGE: &str = "\
usage: demo-backends [CONFIG] [--out DIR] [--for SECONDS]

Starts a TLS (or plain) backend for every backend of every cluster of
CONFIG (default doc/examples/preread.toml), with certificates from a CA
made at start, written to DIR/ca.pem (default ${XDG_RUNTIME_DIR:-/tmp}/preread-demo-UID,
UID being the user's id). Clusters whose frontends list h2 get an HTTP/2
backend.

Runs until SIGINT (Ctrl-C) or SIGTERM, or for SECONDS with --for.
Standard input is not read: it runs the same in the background.";

/// What `parse_args` found instead of arguments to run with.
enum NotRun {
    /// `--help`: print the usage, succeed.
    Help,
    /// A mistake in the arguments.
    Usage(String),
}

struct Args {
    config: PathBuf,
    out: PathBuf,
    run_for: Option<Duration>,
}

fn parse_args() -> Result<Args, NotRun> {
    let mut config = None;
    let mut out = default_out();
    let mut run_for = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--out" => {
                let dir = args
                    .next()
                    .ok_or(NotRun::Usage("--out needs a DIR".into()))?;
                out = PathBuf::from(dir);
            }
            "--for" => {
                let secs: u64 = args
                    .next()
                    .ok_or(NotRun::Usage("--for needs SECONDS".into()))?
                    .parse()
                    .map_err(|e| NotRun::Usage(format!("--for: {e}")))?;
                run_for = Some(Duration::from_secs(secs));
            }
            "-h" | "--help" => return Err(NotRun::Help),
            _ if config.is_none() => config = Some(PathBuf::from(arg)),
            _ => return Err(NotRun::Usage(format!("unexpected argument {arg:?}"))),
        }
    }
    let config = config.unwrap_or_else(|| {
        let local = PathBuf::from("doc/examples/preread.toml");
        if local.is_file() {
            local
        } else {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../doc/examples/preread.toml")
        }
    });
    Ok(Args {
        config,
        out,
        run_for,
    })
}

/// The demo's directory when `--out` is not given: one per user, so two
/// users of a machine do not overwrite each other's CA:
/// `$XDG_RUNTIME_DIR/preread-demo-UID` (the user's own runtime directory),
/// else `/tmp/preread-demo-UID`. The UID is in both, so one shell line,
/// `${XDG_RUNTIME_DIR:-/tmp}/preread-demo-$(id -u)`, finds it.
fn default_out() -> PathBuf {
    let base = std::env::var_os("XDG_RUNTIME_DIR")
        .map(PathBuf::from)
        .filter(|dir| dir.is_absolute() && dir.is_dir())
        .unwrap_or_else(|| PathBuf::from("/tmp"));
    // SAFETY: getuid(2) has no preconditions and cannot fail.
    let uid = unsafe { libc::getuid() };
    base.join(format!("preread-demo-{uid}"))
}

/// How a client reaches `listener` (an `ip:port`): the host part of
/// curl's `--resolve NAME:PORT:HOST` (an IPv6 address in brackets, the
/// whole argument then quoted for the shell) and `openssl -connect`'s
/// address. A wildcard address is reached on loopback.
fn reach(listener: &str) -> Option<(String, String, u16)> {
    let addr: SocketAddr = listener.parse().ok()?;
    let (host, connect) = match addr.ip() {
        IpAddr::V4(ip) => {
            let ip = if ip.is_unspecified() {
                Ipv4Addr::LOCALHOST
            } else {
                ip
            };
            (ip.to_string(), format!("{ip}:{}", addr.port()))
        }
        IpAddr::V6(ip) => {
            let ip = if ip.is_unspecified() {
                Ipv6Addr::LOCALHOST
            } else {
                ip
            };
            (format!("[{ip}]"), format!("[{ip}]:{}", addr.port()))
        }
    };
    Some((host, connect, addr.port()))
}

/// The `--resolve` argument for `name` on a listener reached at `host`,
/// quoted when the shell would glob it.
fn resolve_arg(name: &str, port: u16, host: &str) -> String {
    let arg = format!("{name}:{port}:{host}");
    if host.starts_with('[') {
        format!("'{arg}'")
    } else {
        arg
    }
}

/// What a cluster routes: its SNI patterns and ALPN protocols.
#[derive(Default)]
struct ClusterPlan {
    patterns: Vec<String>,
    alpn: Vec<String>,
    sends_proxy_header: bool,
    backends: Vec<(String, SocketAddr)>,
}

impl ClusterPlan {
    fn cert_names(&self) -> Vec<String> {
        let mut names = Vec::new();
        for pattern in &self.patterns {
            let wanted: Vec<String> = match pattern
                .strip_prefix("**.")
                .or_else(|| pattern.strip_prefix("*."))
            {
                Some(suffix) => vec![format!("*.{suffix}"), format!("demo.{suffix}")],
                None => vec![pattern.clone()],
            };
            for name in wanted {
                if !names.contains(&name) {
                    names.push(name);
                }
            }
        }
        names
    }
}

enum Running {
    H2(H2Backend),
    Tls(TlsBackend),
    Plain(PlainBackend),
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("demo-backends: {err}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), String> {
    let args = match parse_args() {
        Ok(args) => args,
        Err(NotRun::Help) => {
            println!("{USAGE}");
            return Ok(());
        }
        Err(NotRun::Usage(mistake)) => return Err(format!("{mistake}\n{USAGE}")),
    };
    // Before anything starts, so that a signal at any time stops it cleanly.
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, Arc::clone(&stop))
            .map_err(|e| format!("signal {signal}: {e}"))?;
    }
    let loaded = command::config::load_config_file(&args.config).map_err(|problems| {
        let list: Vec<String> = problems.iter().map(ToString::to_string).collect();
        format!("{}: {}", args.config.display(), list.join("\n"))
    })?;

    let mut clusters: BTreeMap<String, ClusterPlan> = BTreeMap::new();
    let mut listeners = Vec::new();
    for request in loaded.requests() {
        match &request.request_type {
            Some(RequestType::AddCluster(cluster)) => {
                clusters
                    .entry(cluster.cluster_id.clone())
                    .or_default()
                    .sends_proxy_header =
                    cluster.proxy_protocol != command::proto::ProxyProtocol::None as i32;
            }
            Some(RequestType::AddTcpListener(listener)) => listeners.push(listener.address.clone()),
            Some(RequestType::AddTcpFrontend(frontend)) => {
                let plan = clusters.entry(frontend.cluster_id.clone()).or_default();
                if let Some(sni) = &frontend.sni {
                    plan.patterns.push(sni.clone());
                }
                for protocol in &frontend.alpn {
                    if !plan.alpn.contains(protocol) {
                        plan.alpn.push(protocol.clone());
                    }
                }
            }
            Some(RequestType::AddBackend(backend)) => {
                let addr: SocketAddr = backend
                    .address
                    .parse()
                    .map_err(|e| format!("backend {}: {e}", backend.backend_id))?;
                clusters
                    .entry(backend.cluster_id.clone())
                    .or_default()
                    .backends
                    .push((backend.backend_id.clone(), addr));
            }
            _ => {}
        }
    }

    std::fs::create_dir_all(&args.out).map_err(|e| format!("{}: {e}", args.out.display()))?;
    let ca = TestCa::new("preread demo CA");
    let ca_path = args.out.join("ca.pem");
    ca.write_pem(&ca_path)
        .map_err(|e| format!("{}: {e}", ca_path.display()))?;
    let client = ca.client_cert("demo-client");
    let write = |name: &str, text: &str| {
        let path = args.out.join(name);
        std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))
    };
    write("client.pem", &client.cert_pem)?;
    write("client-key.pem", &client.key_pem)?;

    let mut running: BTreeMap<SocketAddr, (String, Running)> = BTreeMap::new();
    let mut rows = Vec::new();
    // TLS clusters first: an address shared with a plain cluster (a
    // backup of the default cluster, say) then serves TLS.
    let mut order: Vec<(&String, &ClusterPlan)> = clusters.iter().collect();
    order.sort_by_key(|(_, plan)| plan.patterns.is_empty());
    for (cluster_id, plan) in order {
        let names = plan.cert_names();
        for (backend_id, addr) in &plan.backends {
            if let Some((owner, _)) = running.get(addr) {
                rows.push(format!(
                    "{backend_id:<18} {cluster_id:<10} {addr:<21} (shared with {owner})"
                ));
                continue;
            }
            let alpn_refs: Vec<&str> = plan.alpn.iter().map(String::as_str).collect();
            let (kind, detail, server) = if names.is_empty() {
                let server = PlainBackend::start_on(*addr, backend_id, false)
                    .map_err(|e| format!("{backend_id} on {addr}: {e}"))?;
                ("plain", String::new(), Running::Plain(server))
            } else if alpn_refs.contains(&"h2") && !plan.sends_proxy_header {
                let name_refs: Vec<&str> = names.iter().map(String::as_str).collect();
                let server =
                    H2Backend::start_with_ca(*addr, backend_id, &name_refs, &alpn_refs, &ca)
                        .map_err(|e| format!("{backend_id} on {addr}: {e}"))?;
                (
                    "h2",
                    format!("cert={} alpn={}", names.join(","), plan.alpn.join(",")),
                    Running::H2(server),
                )
            } else {
                let name_refs: Vec<&str> = names.iter().map(String::as_str).collect();
                let config = BackendConfig::new(backend_id, &name_refs)
                    .alpn(&alpn_refs)
                    .http(true);
                let server = TlsBackend::start_with_ca(*addr, config, &ca)
                    .map_err(|e| format!("{backend_id} on {addr}: {e}"))?;
                let alpn = if plan.alpn.is_empty() {
                    "-".to_owned()
                } else {
                    plan.alpn.join(",")
                };
                (
                    "tls",
                    format!("cert={} alpn={alpn}", names.join(",")),
                    Running::Tls(server),
                )
            };
            rows.push(format!(
                "{backend_id:<18} {cluster_id:<10} {addr:<21} {kind:<5} {detail}"
            ));
            running.insert(*addr, (backend_id.clone(), server));
        }
    }

    println!(
        "{:<18} {:<10} {:<21} {:<5} details",
        "backend", "cluster", "address", "kind"
    );
    for row in &rows {
        println!("{row}");
    }
    println!();
    println!("CA certificate: {}", ca_path.display());
    println!(
        "mTLS client:    {} {}",
        args.out.join("client.pem").display(),
        args.out.join("client-key.pem").display()
    );
    if let Some((listener, (host, connect, port))) = listeners
        .first()
        .and_then(|listener| Some((listener, reach(listener)?)))
    {
        let sample = clusters
            .values()
            .flat_map(ClusterPlan::cert_names)
            .find(|name| !name.starts_with('*'))
            .unwrap_or_else(|| "www.example.com".to_owned());
        println!();
        println!("Try, with the proxy running on {listener}:");
        println!(
            "  curl --cacert {ca} --resolve {resolve} https://{sample}:{port}/",
            ca = ca_path.display(),
            resolve = resolve_arg(&sample, port, &host),
        );
        println!(
            "  openssl s_client -connect {connect} -servername {sample} -alpn h2 -CAfile {ca}",
            ca = ca_path.display()
        );
    }
    println!();
    match args.run_for {
        Some(limit) => println!(
            "Running for {} s, or until Ctrl-C or SIGTERM.",
            limit.as_secs()
        ),
        None => println!("Running until Ctrl-C or SIGTERM."),
    }

    let started = Instant::now();
    while !stop.load(Ordering::SeqCst) {
        if args.run_for.is_some_and(|limit| started.elapsed() >= limit) {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    println!("stopping {} backend server(s)", running.len());
    for (_, (_, server)) in running {
        match server {
            Running::H2(backend) => drop(backend),
            Running::Tls(backend) => drop(backend),
            Running::Plain(backend) => drop(backend),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{reach, resolve_arg};

    #[test]
    fn hints_follow_the_listeners_address_family() {
        let (host, connect, port) = reach("[::1]:28444").expect("an IPv6 listener");
        assert_eq!(
            resolve_arg("www.example.com", port, &host),
            "'www.example.com:28444:[::1]'"
        );
        assert_eq!(connect, "[::1]:28444");
        let (host, connect, port) = reach("127.0.0.1:8443").expect("an IPv4 listener");
        assert_eq!(
            resolve_arg("www.example.com", port, &host),
            "www.example.com:8443:127.0.0.1"
        );
        assert_eq!(connect, "127.0.0.1:8443");
        assert_eq!(
            reach("0.0.0.0:443").map(|r| r.1).as_deref(),
            Some("127.0.0.1:443")
        );
        assert_eq!(reach("[::]:443").map(|r| r.1).as_deref(), Some("[::1]:443"));
        assert_eq!(reach("not an address"), None);
    }
}
