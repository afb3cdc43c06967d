//! The pieces of the data-path benchmark (`e2e/src/bin/bench.rs`, driven
//! by `bench/run.sh`; results in `doc/performance.md`, "Data path").
//!
//! - [`procfs`]: CPU time (user + sys ticks of `/proc/<pid>/stat`), VmRSS,
//!   open descriptors and the load average;
//! - [`backends`]: the loopback backends: [`backends::RpcBackend`] (reads a
//!   ClientHello and a length header, discards the upload, sends the asked
//!   download) and [`backends::HoldBackend`] (keeps sessions open, idle);
//! - [`clients`]: one big upload or download, the connection-rate loop, the
//!   slow clients that drip a hello one byte per second, idle and
//!   established connection sets;
//! - [`targets`]: what a connection goes through: nothing (direct),
//!   preread, HAProxy, nginx: configs, processes, stop by PID;
//! - [`syscalls`]: `strace -c -f` on a running proxy, its summary parsed;
//! - [`report`]: raw records (JSON lines) and the median/spread summary;
//! - [`pin`]: the proxy and the load generator on separate CPUs (`--pin`).
//!
//! Every loop is bounded in count and time; only loopback is used.

pub(crate) mod backends;
pub(crate) mod clients;
pub(crate) mod pin;
pub(crate) mod procfs;
pub(crate) mod report;
pub(crate) mod syscalls;
pub(crate) mod targets;

/// The SNI of `testdata/clienthellos/curl_h2.bin`, routed by every proxy.
pub(crate) const SNI: &str = "a.example.com";
