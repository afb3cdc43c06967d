//! The control-plane shell: the command server, the route sources, the
//! upgrade and the metrics endpoint.
//!
//! Owns: the command server that turns requests into generations for the
//! workers and saves the state ([`server`]), the route sources that feed it
//! ([`sources`]), the etcd API the etcd source and `preread fleet` share
//! ([`etcd`]), the handover of the sockets to a new process
//! ([`upgrade`]), the HTTP metrics endpoint ([`metrics_http`]), what systemd
//! is told ([`notify`]) and when freed heap goes back to the kernel
//! ([`heap`]). Must never: touch a connection: the workers of
//! `preread_worker` own those, and this crate reaches them only through
//! their orders.

pub mod etcd;
pub mod heap;
pub mod metrics_http;
pub mod notify;
pub mod server;
pub mod sources;
pub mod upgrade;
