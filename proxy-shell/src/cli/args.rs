//! The command line of `preread`, as doc/configure.md documents it.
//!
//! Owns: flag and subcommand names, defaults and help texts. Must never: do
//! any work itself (building requests is `requests`, talking to the socket
//! is `client`).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use command::duration::Unit;
use command::proto;
use command::spelling::{HEALTH_CHECK_KIND, LOAD_BALANCING, PROTOCOL, PROXY_PROTOCOL, REJECT_WITH};

use super::arg_values::{
    connection_rate, millis, millis_u32, read_size, reject_reason, spelt, watch_interval,
};

/// preread: routes TLS connections by SNI and ALPN without terminating TLS.
#[derive(Debug, Parser)]
#[command(name = "preread", version)]
pub struct Cli {
    /// The TOML config (default: preread.toml in the working directory).
    #[arg(short = 'c', long, global = true, env = "PREREAD_CONFIG")]
    pub config: Option<PathBuf>,
    /// The command socket to talk to (overrides the config's command_socket).
    #[arg(long, value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// Machine-readable output: one JSON object per line.
    #[arg(short = 'j', long, global = true)]
    pub json: bool,
    /// How long a socket command waits for its answer, in milliseconds
    /// (default 5000).
    #[arg(short = 't', long, value_name = "MS")]
    pub timeout: Option<u64>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Work on the config file offline.
    Config {
        #[command(subcommand)]
        action: ConfigAction,
    },
    /// Describe a validation code: what it means, accepted shapes, the fix.
    Explain {
        /// A code such as E101 (case-insensitive); omit to list them all.
        code: Option<String>,
    },
    /// Parse captured client bytes offline and print what preread sees, one
    /// JSON object per input; with --config, also what it would decide.
    Inspect {
        /// The listener whose routes decide (default: the config's first).
        #[arg(long)]
        listener: Option<String>,
        /// Inputs are hex text (pairs of hex digits; white space and ':' ignored).
        #[arg(long)]
        hex: bool,
        /// A PROXY protocol v1/v2 header precedes the ClientHello (implied by
        /// the listener's expect_proxy when --config is given).
        #[arg(long)]
        expect_proxy: bool,
        /// Deliver each capture as reads of these sizes in bytes (then the
        /// rest as one last read), each capped as the worker caps reads;
        /// without it, the whole capture is one read. Needs --config.
        #[arg(long, value_delimiter = ',', value_parser = read_size)]
        reads: Vec<usize>,
        /// Each file holds one QUIC flow's client datagrams: one raw
        /// datagram, or datagrams each behind a 2-byte big-endian length
        /// (as `rejects --dump` writes them for QUIC).
        #[arg(long, conflicts_with_all = ["expect_proxy", "reads"])]
        quic: bool,
        /// Each file is a packet capture (pcap or pcapng, as `tcpdump -w`
        /// or `dumpcap -w` write it): every TCP and QUIC client first
        /// flight in it is reported, decided by the listener at the flow's
        /// server address (or `--listener`).
        #[arg(long, conflicts_with_all = ["quic", "reads", "hex"])]
        pcap: bool,
        /// Capture files; `-` reads standard input.
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Run the proxy in the foreground until SIGINT/SIGTERM or a shutdown.
    Start,
    /// Workers, listeners, sessions, uptime.
    Status,
    /// Stop the proxy: soft (stop accepting, let sessions finish) or hard.
    Shutdown {
        /// Close every session at once.
        #[arg(long)]
        hard: bool,
    },
    /// Listeners.
    Listener {
        #[command(subcommand)]
        action: ListenerAction,
    },
    /// Clusters.
    Cluster {
        #[command(subcommand)]
        action: ClusterAction,
    },
    /// Frontends: which (address, SNI, ALPN) goes to which cluster.
    Frontend {
        #[command(subcommand)]
        action: FrontendAction,
    },
    /// Backends of a cluster.
    Backend {
        #[command(subcommand)]
        action: BackendAction,
    },
    /// Save or load the routing state.
    State {
        #[command(subcommand)]
        action: StateAction,
    },
    /// Metrics.
    Metrics {
        #[command(subcommand)]
        action: MetricsAction,
    },
    /// The last rejected and fallback sessions each worker captured, with
    /// the bytes they sent (`reject_capture`), newest first.
    Rejects {
        /// Only this reason, as the access log spells it after `rejected:`
        /// or `fallback:` (e.g. not_tls, sni_unmatched).
        #[arg(long, value_parser = reject_reason)]
        reason: Option<String>,
        /// Only this listener, ip:port.
        #[arg(long)]
        listener: Option<std::net::SocketAddr>,
        /// Also write each window to DIR as a .bin file, which `preread
        /// inspect -c CONFIG --listener ADDR FILE` replays.
        #[arg(long, value_name = "DIR")]
        dump: Option<PathBuf>,
    },
    /// Diff the config file against the running state and apply only the difference.
    Reload,
    /// Each route source (the config file, Docker, a directory, etcd): last
    /// sync, routes declared, the etcd revision served, excluded fragments
    /// with their codes.
    Sources,
    /// A fleet fed by etcd (the config's [sources.etcd]): the replicas'
    /// status, or a config file's clusters published as route keys.
    Fleet {
        #[command(subcommand)]
        action: FleetAction,
    },
    /// Replace the running proxy by a new process of a (new) binary, with no
    /// connection refused: it hands over its listening sockets and its state.
    Upgrade {
        /// The binary to start (default: the file at the running proxy's own
        /// path, where a package upgrade put the new version).
        #[arg(long)]
        binary: Option<PathBuf>,
        /// Seconds the new process has to take over, else it is killed and
        /// the running proxy keeps serving.
        #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u32).range(1..=3600))]
        within: u32,
    },
}

impl Command {
    /// Whether this subcommand runs the proxy (and must survive a client
    /// closing a socket under it).
    pub fn is_long_running(&self) -> bool {
        matches!(self, Self::Start)
    }
}

/// Where the fleet's store is, when not the config's [sources.etcd].
#[derive(Debug, Args)]
pub struct StoreArgs {
    /// The etcd members' client URLs, comma-separated (default: the
    /// config's [sources.etcd] endpoints).
    #[arg(long, value_name = "URL,...", value_delimiter = ',')]
    pub endpoints: Vec<String>,
    /// The keys' prefix (default: the config's [sources.etcd] prefix, else
    /// /preread/).
    #[arg(long)]
    pub prefix: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum FleetAction {
    /// Every replica's status key: the revision it serves, its exclusions;
    /// laggards and silent replicas flagged (exit status 1 then).
    Status {
        /// How many replicas should report: the missing ones are silent.
        #[arg(long, value_name = "N")]
        expect: Option<usize>,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Write the config file's clusters as route keys in one transaction,
    /// and delete the route keys it no longer has.
    Publish {
        /// Only say what would be written and deleted.
        #[arg(long)]
        dry_run: bool,
        #[command(flatten)]
        store: StoreArgs,
    },
}

#[derive(Debug, Subcommand)]
pub enum ConfigAction {
    /// Validate the config; print every problem with its position and code.
    Check,
}

#[derive(Debug, Subcommand)]
pub enum ListenerAction {
    /// TCP listeners.
    Tcp {
        #[command(subcommand)]
        action: TcpListenerAction,
    },
    /// QUIC listeners (UDP; doc/configure.md §8).
    Quic {
        #[command(subcommand)]
        action: QuicListenerAction,
    },
    /// List the listeners.
    List,
}

#[derive(Debug, Subcommand)]
pub enum TcpListenerAction {
    /// Add and activate a TCP listener.
    Add(TcpListenerArgs),
    /// Change a listener's settings in place (timeouts, caps, default
    /// cluster, reject_with, max_unrouted_per_ip, allow, deny, rate); its
    /// frontends and
    /// sessions stay. A flag left
    /// out takes its default, as with `add`.
    Update(TcpListenerArgs),
    /// Remove a listener (it must have no frontends left).
    Remove(AddressArg),
    /// Start accepting on a listener.
    Activate(AddressArg),
    /// Stop accepting on a listener, keeping its routes.
    Deactivate(AddressArg),
}

#[derive(Debug, Subcommand)]
pub enum QuicListenerAction {
    /// Adds and activates a QUIC listener.
    Add(QuicListenerArgs),
    /// Changes a QUIC listener's settings in place (unset flags take their
    /// defaults).
    Update(QuicListenerArgs),
    /// Removes a QUIC listener (it must have no frontend left).
    Remove(AddressArg),
    /// Starts listening again.
    Activate(AddressArg),
    /// Stops listening, keeping the settings and routes.
    Deactivate(AddressArg),
}

#[derive(Debug, Args)]
pub struct QuicListenerArgs {
    /// The UDP address, `ip:port`.
    #[arg(short = 'a', long)]
    pub address: String,
    /// Where flows no frontend takes go (a quic cluster).
    #[arg(long)]
    pub default_cluster: Option<String>,
    /// From a flow's first datagram to the decision (bare number:
    /// milliseconds; default 1s).
    #[arg(long, value_parser = millis(Unit::Milliseconds))]
    pub quic_preread_timeout: Option<u64>,
    /// A flow silent both ways this long is forgotten (bare number:
    /// seconds; default 60s).
    #[arg(long, value_parser = millis(Unit::Seconds))]
    pub quic_idle_timeout: Option<u64>,
    /// Flows open at once on this listener, for the whole process (0: no
    /// limit; default 100000).
    #[arg(long)]
    pub max_flows: Option<u32>,
    /// Flows one client address may hold here, for the whole process (0,
    /// the default: no limit).
    #[arg(long)]
    pub max_flows_per_ip: Option<u32>,
    /// How a refused client is told: close (a CONNECTION_CLOSE it can
    /// read, the default) or drop (silence).
    #[arg(long, value_parser = spelt(REJECT_WITH))]
    pub reject_with: Option<proto::RejectWith>,
}

#[derive(Debug, Args)]
pub struct AddressArg {
    /// ip:port
    #[arg(short = 'a', long)]
    pub address: String,
}

#[derive(Debug, Args)]
pub struct TcpListenerArgs {
    /// ip:port
    #[arg(short = 'a', long)]
    pub address: String,
    /// An inbound PROXY v1/v2 header precedes the ClientHello.
    #[arg(long)]
    pub expect_proxy: bool,
    /// How long the ClientHello may take once its first byte arrived:
    /// milliseconds, or a duration such as 5s.
    #[arg(long, value_parser = millis_u32(Unit::Milliseconds))]
    pub sni_preread_timeout: Option<u32>,
    /// Byte cap on the preread window (at least 5).
    #[arg(long)]
    pub sni_preread_max_bytes: Option<u32>,
    /// Where non-TLS, SNI-less, unmatched and ECH-without-outer-SNI connections go.
    #[arg(long)]
    pub default_cluster: Option<String>,
    /// Client silence after which the default cluster takes the
    /// connection: milliseconds, or a duration such as 300ms.
    #[arg(long, value_parser = millis_u32(Unit::Milliseconds))]
    pub server_first_timeout: Option<u32>,
    /// Client inactivity: seconds, or a duration such as 90s or 1500ms.
    #[arg(long, value_parser = millis(Unit::Seconds))]
    pub front_timeout: Option<u64>,
    /// Backend inactivity: seconds, or a duration such as 90s or 1500ms.
    #[arg(long, value_parser = millis(Unit::Seconds))]
    pub back_timeout: Option<u64>,
    /// How long a backend connect may take: seconds, or a duration such
    /// as 500ms.
    #[arg(long, value_parser = millis(Unit::Seconds))]
    pub connect_timeout: Option<u64>,
    /// How a rejected client is told: the fatal TLS alert a server would
    /// send (the default), a bare close, or a reset.
    #[arg(long, value_parser = spelt(REJECT_WITH))]
    pub reject_with: Option<proto::RejectWith>,
    /// Connections one client address may hold before they are routed;
    /// one more is refused at accept. 0 (the default) is no limit.
    #[arg(long)]
    pub max_unrouted_per_ip: Option<u32>,
    #[command(flatten)]
    pub access: Box<AccessArgs>,
}

/// Who may connect: the `allow`, `deny`, `connection_rate_per_ip` and
/// `ipv6_prefix` keys of a listener or a cluster. Left out, each is unset
/// (as with every flag of `update`, the settings are replaced).
#[derive(Debug, Args)]
pub struct AccessArgs {
    /// Only sources in these prefixes may connect (repeat the flag, or
    /// give a comma-separated list): 10.0.0.0/8, 2001:db8::/32, 192.0.2.7.
    #[arg(long, value_delimiter = ',')]
    pub allow: Vec<String>,
    /// Sources in these prefixes are refused, whatever --allow says.
    #[arg(long, value_delimiter = ',')]
    pub deny: Vec<String>,
    /// Clients with these JA4 fingerprints are refused with an
    /// access_denied alert (repeat the flag, or a comma-separated list).
    #[arg(long = "deny-ja4", value_delimiter = ',')]
    pub deny_ja4: Vec<String>,
    /// New connections per source, a token bucket for the whole process:
    /// RATE/PER, such as 50/1s.
    #[arg(long, value_parser = connection_rate)]
    pub rate: Option<(u32, u64)>,
    /// Connections a full bucket holds (default: the rate).
    #[arg(long, requires = "rate")]
    pub burst: Option<u32>,
    /// IPv6 sources are counted per network of this prefix length
    /// (default 64).
    #[arg(long)]
    pub ipv6_prefix: Option<u32>,
}

#[derive(Debug, Subcommand)]
pub enum ClusterAction {
    /// Add a cluster.
    Add(ClusterArgs),
    /// Change a cluster's settings in place: its frontends and backends
    /// stay. Every setting is replaced: a flag left out takes its default,
    /// as with `add`.
    Update(ClusterArgs),
    /// Remove a cluster (it must have no frontends or backends left).
    Remove {
        /// Cluster id.
        #[arg(short = 'i', long = "id")]
        id: String,
    },
    /// List the clusters with their backends.
    List,
}

/// A cluster's settings, as `cluster add` and `cluster update` take them.
#[derive(Debug, Args)]
pub struct ClusterArgs {
    /// Cluster id.
    #[arg(short = 'i', long = "id")]
    pub id: String,
    /// How a backend is picked.
    #[arg(long, value_parser = spelt(LOAD_BALANCING), default_value = "round_robin")]
    pub load_balancing: proto::LoadBalancing,
    /// PROXY protocol towards the backends.
    #[arg(long, value_parser = spelt(PROXY_PROTOCOL), default_value = "none")]
    pub proxy_protocol: proto::ProxyProtocol,
    /// Concurrent connections per client address, for the whole process;
    /// 0 = unlimited.
    #[arg(long, default_value_t = 0)]
    pub max_connections_per_ip: u32,
    /// What its backends speak: tcp (the default) or quic (UDP QUIC
    /// servers, reached from QUIC listeners).
    #[arg(long, value_parser = spelt(PROTOCOL))]
    pub protocol: Option<proto::ListenerProtocol>,
    /// Check every backend actively: a connect (tcp), or a ClientHello
    /// answered by a TLS record (tls).
    #[arg(long, value_parser = spelt(HEALTH_CHECK_KIND))]
    pub health_check: Option<proto::HealthCheckKind>,
    /// Time between two checks of a backend: "500ms", "2s" (a bare number
    /// is seconds); default 2s.
    #[arg(long, requires = "health_check", value_parser = millis_u32(Unit::Seconds))]
    pub health_check_interval: Option<u32>,
    /// Time one check may take, at most the interval; default 1s.
    #[arg(long, requires = "health_check", value_parser = millis_u32(Unit::Seconds))]
    pub health_check_timeout: Option<u32>,
    /// Checks passed in a row that bring a down backend up; default 2.
    #[arg(long, requires = "health_check")]
    pub health_check_rise: Option<u32>,
    /// Checks failed in a row that take an up backend down; default 3.
    #[arg(long, requires = "health_check")]
    pub health_check_fall: Option<u32>,
    #[command(flatten)]
    pub access: Box<AccessArgs>,
}

#[derive(Debug, Subcommand)]
pub enum FrontendAction {
    /// TCP frontends.
    Tcp {
        #[command(subcommand)]
        action: TcpFrontendAction,
    },
    /// Frontends of QUIC listeners (same flags; the key is `(address, sni,
    /// alpn)` too).
    Quic {
        #[command(subcommand)]
        action: TcpFrontendAction,
    },
    /// List the frontends.
    List,
}

#[derive(Debug, Subcommand)]
pub enum TcpFrontendAction {
    /// Add a frontend.
    Add(FrontendArgs),
    /// Remove the frontend with exactly this (address, sni, alpn).
    Remove(FrontendArgs),
}

#[derive(Debug, Args)]
pub struct FrontendArgs {
    /// Cluster id.
    #[arg(short = 'i', long = "id")]
    pub cluster: String,
    /// ip:port of the listener.
    #[arg(short = 'a', long)]
    pub address: String,
    /// SNI pattern: a.example.com, *.example.com or **.example.com.
    #[arg(long)]
    pub sni: Option<String>,
    /// Protocols, comma-separated (h2,http/1.1); none = any offer.
    #[arg(long, value_delimiter = ',')]
    pub alpn: Vec<String>,
}

#[derive(Debug, Subcommand)]
pub enum BackendAction {
    /// Add a backend to a cluster.
    Add(BackendArgs),
    /// Change a backend's weight, backup flag or max_connections in place
    /// (its address is its identity: to move it, remove it and add it
    /// again).
    Update(BackendArgs),
    /// Remove a backend.
    Remove {
        /// Cluster id.
        #[arg(short = 'i', long = "id")]
        cluster: String,
        #[arg(long)]
        backend_id: String,
        /// ip:port or name:port, as it was added.
        #[arg(short = 'a', long)]
        address: String,
    },
    /// Every backend instance with its health (up or down, since when, the
    /// last error) and its connections, for the whole process.
    List,
}

/// A backend, as `backend add` and `backend update` take it.
#[derive(Debug, Args)]
pub struct BackendArgs {
    /// Cluster id.
    #[arg(short = 'i', long = "id")]
    pub cluster: String,
    #[arg(long)]
    pub backend_id: String,
    /// ip:port, or name:port (resolved every resolve_interval).
    #[arg(short = 'a', long)]
    pub address: String,
    /// Relative weight for load balancing.
    #[arg(long)]
    pub weight: Option<u32>,
    /// Use only when no primary backend is usable.
    #[arg(long)]
    pub backup: bool,
    /// Connections open at once to each instance, for the whole process;
    /// 0 (the default) is no limit.
    #[arg(long)]
    pub max_connections: Option<u32>,
}

#[derive(Debug, Subcommand)]
pub enum StateAction {
    /// Write the running state to FILE.
    Save {
        #[arg(short = 'f', long = "file")]
        file: PathBuf,
    },
    /// Replace the running routing state with FILE's.
    Load {
        #[arg(short = 'f', long = "file")]
        file: PathBuf,
    },
    /// Offline: check FILE line by line without trusting its trailer (a
    /// file of an older preread, or edited by hand), then rewrite it in the
    /// current format with a new trailer.
    Seal {
        #[arg(short = 'f', long = "file")]
        file: PathBuf,
    },
}

#[derive(Debug, Subcommand)]
pub enum MetricsAction {
    /// All metrics, per worker and in total.
    Get(MetricsGetArgs),
}

/// `metrics get`: one answer, or with `--watch` a table refreshed until
/// SIGINT or SIGTERM.
#[derive(Debug, Args)]
pub struct MetricsGetArgs {
    /// Refresh every INTERVAL until interrupted: the totals with each
    /// counter's rate per second; a bare number is seconds (2, 2s, 500ms;
    /// at least 100ms).
    #[arg(long, value_name = "INTERVAL", value_parser = watch_interval)]
    pub watch: Option<u64>,
    /// Only metrics whose name contains this text (e.g. `rejected`).
    #[arg(long, requires = "watch", value_name = "TEXT")]
    pub filter: Option<String>,
    /// Leave out metrics that are 0 and did not move since the last refresh.
    #[arg(long, requires = "watch")]
    pub hide_zero: bool,
}
