//! The config file's serde shape: what `toml` deserializes before any
//! check runs.
//!
//! Owns: the key names and their TOML types, the refusal of unknown keys
//! (`deny_unknown_fields`), and the spans that place later problems.
//!
//! Must never: apply a default, check a range or spelling, or build a
//! request; the other parts read these structs and do that.
//!
//! Integers are read as `i64` (TOML's integer) and range-checked afterwards,
//! so an out-of-range value is a located problem that does not stop the
//! check. Durations are [`Millis`] or [`Seconds`]: the type names the unit
//! of a bare integer, and a type error says it. These structs are the one
//! list of keys: `shape` recovers from their serde errors, so a key added
//! here is checked, suggested and located with nothing else to change.

use std::collections::BTreeMap;
use std::fmt;

use serde::Deserialize;
use serde::de::{Deserializer, MapAccess, Visitor};
use toml::Spanned;

use crate::duration::Unit;

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, expecting = "a table of global keys")]
pub(super) struct RawConfig {
    pub(super) command_socket: Option<Spanned<String>>,
    pub(super) worker_count: Option<Spanned<i64>>,
    pub(super) saved_state: Option<Spanned<String>>,
    pub(super) automatic_state_save: Option<Spanned<bool>>,
    pub(super) log_level: Option<Spanned<String>>,
    pub(super) access_logs: Option<Spanned<String>>,
    pub(super) access_log_format: Option<Spanned<String>>,
    pub(super) access_log_queue: Option<Spanned<i64>>,
    pub(super) reject_capture: Option<Spanned<i64>>,
    pub(super) metrics_address: Option<Spanned<String>>,
    pub(super) buffer_size: Option<Spanned<i64>>,
    pub(super) max_buffers: Option<Spanned<i64>>,
    pub(super) max_connections: Option<Spanned<i64>>,
    pub(super) splice: Option<Spanned<bool>>,
    pub(super) splice_threshold: Option<Spanned<i64>>,
    pub(super) splice_pipe_size: Option<Spanned<i64>>,
    pub(super) splice_bulk_pipe_size: Option<Spanned<i64>>,
    pub(super) splice_bulk_budget: Option<Spanned<i64>>,
    pub(super) max_connection_attempts: Option<Spanned<i64>>,
    pub(super) soft_stop_grace: Option<Spanned<Seconds>>,
    pub(super) empty_saved_state: Option<Spanned<String>>,
    pub(super) command_client_timeout: Option<Spanned<Seconds>>,
    pub(super) tcp_keepalive: Option<Spanned<bool>>,
    pub(super) tcp_keepalive_idle: Option<Spanned<Seconds>>,
    pub(super) tcp_keepalive_interval: Option<Spanned<Seconds>>,
    pub(super) tcp_keepalive_count: Option<Spanned<i64>>,
    pub(super) backend_keepalive: Option<Spanned<bool>>,
    pub(super) backend_delayed_ack: Option<Spanned<bool>>,
    pub(super) defer_accept: Option<Spanned<bool>>,
    pub(super) resolve_interval: Option<Spanned<Seconds>>,
    #[serde(default)]
    pub(super) listeners: Vec<Spanned<RawListener>>,
    #[serde(default)]
    pub(super) clusters: RawClusters,
    pub(super) sources: Option<RawSources>,
}

/// `[sources.*]`: the route sources merged with the file's declarations.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, expecting = "a [sources] table")]
pub(super) struct RawSources {
    pub(super) docker: Option<RawDockerSource>,
    pub(super) directory: Option<RawDirectorySource>,
    pub(super) etcd: Option<RawEtcdSource>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, expecting = "a [sources.etcd] table")]
pub(super) struct RawEtcdSource {
    pub(super) endpoints: Spanned<Vec<String>>,
    pub(super) prefix: Option<Spanned<String>>,
    pub(super) replica_id: Option<Spanned<String>>,
    pub(super) username: Option<String>,
    pub(super) password: Option<String>,
    pub(super) ca_file: Option<String>,
    pub(super) cert_file: Option<String>,
    pub(super) key_file: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, expecting = "a [sources.docker] table")]
pub(super) struct RawDockerSource {
    pub(super) endpoint: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, expecting = "a [sources.directory] table")]
pub(super) struct RawDirectorySource {
    pub(super) path: Spanned<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, expecting = "a [[listeners]] table")]
pub(super) struct RawListener {
    pub(super) protocol: Option<Spanned<String>>,
    pub(super) address: String,
    pub(super) expect_proxy: Option<bool>,
    pub(super) sni_preread_timeout: Option<Spanned<Millis>>,
    pub(super) sni_preread_max_bytes: Option<Spanned<i64>>,
    pub(super) default_cluster: Option<String>,
    pub(super) server_first_timeout: Option<Spanned<Millis>>,
    pub(super) front_timeout: Option<Spanned<Seconds>>,
    pub(super) back_timeout: Option<Spanned<Seconds>>,
    pub(super) connect_timeout: Option<Spanned<Seconds>>,
    pub(super) reject_with: Option<Spanned<String>>,
    pub(super) max_unrouted_per_ip: Option<Spanned<i64>>,
    pub(super) quic_preread_timeout: Option<Spanned<Millis>>,
    pub(super) quic_idle_timeout: Option<Spanned<Seconds>>,
    pub(super) max_flows: Option<Spanned<i64>>,
    pub(super) max_flows_per_ip: Option<Spanned<i64>>,
    #[serde(default)]
    pub(super) allow: Vec<String>,
    #[serde(default)]
    pub(super) deny: Vec<String>,
    pub(super) connection_rate_per_ip: Option<Spanned<RawRate>>,
    pub(super) ipv6_prefix: Option<Spanned<i64>>,
    #[serde(default)]
    pub(super) deny_ja4: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, expecting = "a [clusters.<id>] table")]
pub(super) struct RawCluster {
    pub(super) protocol: Option<Spanned<String>>,
    pub(super) load_balancing: Option<Spanned<String>>,
    pub(super) proxy_protocol: Option<Spanned<String>>,
    pub(super) max_connections_per_ip: Option<Spanned<i64>>,
    pub(super) health_check: Option<Spanned<RawHealthCheck>>,
    #[serde(default)]
    pub(super) allow: Vec<String>,
    #[serde(default)]
    pub(super) deny: Vec<String>,
    pub(super) connection_rate_per_ip: Option<Spanned<RawRate>>,
    pub(super) ipv6_prefix: Option<Spanned<i64>>,
    #[serde(default)]
    pub(super) deny_ja4: Vec<String>,
    #[serde(default)]
    pub(super) frontends: Vec<Spanned<RawFrontend>>,
    #[serde(default)]
    pub(super) backends: Vec<Spanned<RawBackend>>,
}

#[derive(Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a frontend table such as { address = \"127.0.0.1:8443\", sni = \"a.example.com\" }"
)]
pub(super) struct RawFrontend {
    pub(super) address: String,
    pub(super) sni: Option<String>,
    #[serde(default)]
    pub(super) alpn: Vec<String>,
    #[serde(default)]
    pub(super) tags: BTreeMap<String, String>,
}

#[derive(Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a backend table such as { address = \"127.0.0.1:9001\" }"
)]
pub(super) struct RawBackend {
    pub(super) address: String,
    pub(super) backend_id: Option<String>,
    pub(super) weight: Option<Spanned<i64>>,
    pub(super) backup: Option<bool>,
    pub(super) max_connections: Option<Spanned<i64>>,
}

/// A cluster's `health_check = { kind, interval, timeout, rise, fall }`.
#[derive(Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a health_check table such as { kind = \"tcp\", interval = \"2s\" }"
)]
pub(super) struct RawHealthCheck {
    pub(super) kind: Option<Spanned<String>>,
    pub(super) interval: Option<Spanned<Seconds>>,
    pub(super) timeout: Option<Spanned<Seconds>>,
    pub(super) rise: Option<Spanned<i64>>,
    pub(super) fall: Option<Spanned<i64>>,
}

/// `connection_rate_per_ip = { rate, per, burst }`.
#[derive(Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a rate table such as { rate = 50, per = \"1s\", burst = 100 }"
)]
pub(super) struct RawRate {
    pub(super) rate: Spanned<i64>,
    pub(super) per: Option<Spanned<Millis>>,
    pub(super) burst: Option<Spanned<i64>>,
}

/// `[clusters.<id>]` tables, in the order the deserializer yields them
/// (sorted by position afterwards).
#[derive(Default)]
pub(super) struct RawClusters(pub(super) Vec<(Spanned<String>, Spanned<RawCluster>)>);

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

/// A duration key whose bare integers are milliseconds.
pub(super) type Millis = RawDuration<false>;
/// A duration key whose bare integers are seconds.
pub(super) type Seconds = RawDuration<true>;

/// A duration as written: an integer in the key's unit (seconds when
/// `SECONDS`, else milliseconds), or a string that names its unit. Read
/// and range-checked by `lines::duration_millis`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum RawDuration<const SECONDS: bool> {
    Integer(i64),
    Text(String),
}

impl<const SECONDS: bool> RawDuration<SECONDS> {
    pub(super) const UNIT: Unit = if SECONDS {
        Unit::Seconds
    } else {
        Unit::Milliseconds
    };
}

impl<'de, const SECONDS: bool> Deserialize<'de> for RawDuration<SECONDS> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct DurationVisitor<const SECONDS: bool>;

        impl<const SECONDS: bool> Visitor<'_> for DurationVisitor<SECONDS> {
            type Value = RawDuration<SECONDS>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(RawDuration::<SECONDS>::UNIT.accepted())
            }

            fn visit_i64<E: serde::de::Error>(self, value: i64) -> Result<Self::Value, E> {
                Ok(RawDuration::Integer(value))
            }

            fn visit_u64<E: serde::de::Error>(self, value: u64) -> Result<Self::Value, E> {
                i64::try_from(value)
                    .map(RawDuration::Integer)
                    .map_err(|_| E::invalid_value(serde::de::Unexpected::Unsigned(value), &self))
            }

            fn visit_str<E: serde::de::Error>(self, value: &str) -> Result<Self::Value, E> {
                Ok(RawDuration::Text(value.to_owned()))
            }
        }

        deserializer.deserialize_any(DurationVisitor::<SECONDS>)
    }
}
