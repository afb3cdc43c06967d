//! The Docker Engine API calls of the Docker source: the running
//! containers, and the stream of container events.
//!
//! Owns: the two requests (`GET /containers/json`, `GET /events` filtered
//! to containers), their bounds (a list within [`LIST_TIMEOUT`] and
//! [`MAX_LIST_BYTES`], an event line within [`MAX_EVENT_BYTES`]), and the
//! decoding of the JSON into [`Container`]s. Must never: decide what a
//! label means (`command::sources::labels` does), or wait on the list
//! without a bound. The event stream has no bound in time: it is the
//! source's wait for a change, ended by [`DockerApi::shutdown`].

use std::collections::BTreeMap;
use std::fmt;
use std::io::{BufRead, BufReader, Read};
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use command::sources::labels::Container;
use serde::Deserialize;
use ureq::Agent;

use super::docker_error::DockerError;
use super::unix_transport::{NoResolver, UnixConnector};

/// How long listing the containers may take.
pub(super) const LIST_TIMEOUT: Duration = Duration::from_secs(5);

/// The most bytes of a container list read (some 10,000 containers).
pub(super) const MAX_LIST_BYTES: u64 = 64 << 20;

/// The most bytes of one event line; a longer one ends the stream.
pub(super) const MAX_EVENT_BYTES: u64 = 1 << 20;

/// `{"type":["container"]}`, URL-encoded: container events only.
const CONTAINER_EVENTS: &str = "/events?filters=%7B%22type%22%3A%5B%22container%22%5D%7D";

/// A client of one Engine API socket. Clones share their connections, so
/// [`shutdown`](Self::shutdown) on one interrupts a read of another.
#[derive(Clone)]
pub(super) struct DockerApi {
    agent: Agent,
    socket: PathBuf,
}

impl fmt::Debug for DockerApi {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DockerApi")
            .field("socket", &self.socket)
            .finish_non_exhaustive()
    }
}

/// A container as `/containers/json` lists it: only the fields read.
#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct ListedContainer {
    id: String,
    #[serde(default)]
    names: Vec<String>,
    #[serde(default)]
    labels: Option<BTreeMap<String, String>>,
    #[serde(default)]
    host_config: Option<HostConfig>,
    #[serde(default)]
    network_settings: Option<NetworkSettings>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct HostConfig {
    #[serde(default)]
    network_mode: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct NetworkSettings {
    #[serde(default)]
    networks: Option<BTreeMap<String, Network>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Network {
    #[serde(default, rename = "IPAddress")]
    ip_address: String,
}

/// An event line: only its action is read.
#[derive(Deserialize)]
struct Event {
    #[serde(default, rename = "Action")]
    action: String,
}

impl From<ListedContainer> for Container {
    fn from(listed: ListedContainer) -> Self {
        let addresses = listed
            .network_settings
            .and_then(|s| s.networks)
            .unwrap_or_default()
            .into_values()
            .filter_map(|network| network.ip_address.parse::<IpAddr>().ok())
            .collect();
        Container {
            name: listed.names.first().cloned().unwrap_or_else(|| {
                let short: String = listed.id.chars().take(12).collect();
                short
            }),
            id: listed.id,
            labels: listed.labels.unwrap_or_default(),
            host_network: listed
                .host_config
                .is_some_and(|host| host.network_mode == "host"),
            addresses,
        }
    }
}

/// Whether a container event can change what the labels declare: one that
/// starts, stops, removes, renames or pauses a container. Exec and health
/// events (frequent, and changing nothing) are not.
pub(super) fn changes_routes(action: &str) -> bool {
    !(action.starts_with("exec_") || action.starts_with("health_status") || action.is_empty())
}

impl DockerApi {
    pub(super) fn new(socket: PathBuf) -> Self {
        let config = Agent::config_builder().build();
        let agent = Agent::with_parts(
            config,
            UnixConnector {
                path: socket.clone(),
            },
            NoResolver,
        );
        Self { agent, socket }
    }

    /// The socket, for messages.
    pub(super) fn socket(&self) -> &std::path::Path {
        &self.socket
    }

    /// The running containers.
    pub(super) fn containers(&self) -> Result<Vec<Container>, DockerError> {
        let mut response = self
            .agent
            .get("http://docker/containers/json")
            .config()
            .timeout_global(Some(LIST_TIMEOUT))
            .build()
            .call()
            .map_err(|error| DockerError::Call {
                call: "GET /containers/json",
                error,
            })?;
        let body = response
            .body_mut()
            .with_config()
            .limit(MAX_LIST_BYTES)
            .read_to_vec()
            .map_err(DockerError::ReadList)?;
        let listed: Vec<ListedContainer> =
            serde_json::from_slice(&body).map_err(DockerError::NotAList)?;
        Ok(listed.into_iter().map(Container::from).collect())
    }

    /// The stream of container events, opened (its answer's head read).
    pub(super) fn events(&self) -> Result<Events, DockerError> {
        let response = self
            .agent
            .get(format!("http://docker{CONTAINER_EVENTS}"))
            .call()
            .map_err(|error| DockerError::Call {
                call: "GET /events",
                error,
            })?;
        Ok(Events {
            reader: BufReader::new(Box::new(response.into_body().into_reader())),
        })
    }

    /// Closes every connection, interrupting a blocked read; later requests
    /// fail.
    pub(super) fn shutdown(self) {
        self.agent.shutdown();
    }
}

/// An open event stream.
pub(super) struct Events {
    reader: BufReader<Box<dyn Read + Send>>,
}

impl Events {
    /// The action of the next event (`start`, `die`, ...); `Err` when the
    /// stream ends or breaks.
    pub(super) fn next_action(&mut self) -> Result<String, DockerError> {
        let mut line = Vec::new();
        loop {
            line.clear();
            let read = (&mut self.reader)
                .take(MAX_EVENT_BYTES)
                .read_until(b'\n', &mut line)
                .map_err(DockerError::StreamBroke)?;
            if read == 0 {
                return Err(DockerError::StreamEnded);
            }
            if line.last() != Some(&b'\n') && read as u64 == MAX_EVENT_BYTES {
                return Err(DockerError::EventTooLong {
                    max: MAX_EVENT_BYTES,
                });
            }
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let event: Event = serde_json::from_slice(&line).map_err(DockerError::EventNotJson)?;
            return Ok(event.action);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listed_containers_decode_with_what_labels_need() -> Result<(), serde_json::Error> {
        let text = r#"[
          {"Id":"abc","Names":["/web-1"],"Labels":{"preread.tcp.web.port":"9001"},
           "HostConfig":{"NetworkMode":"host"},
           "NetworkSettings":{"Networks":{"host":{"IPAddress":""}}},"State":"running"},
          {"Id":"def","Names":null,"Labels":null,"HostConfig":{"NetworkMode":"bridge"},
           "NetworkSettings":{"Networks":{"b":{"IPAddress":"172.18.0.3"},"a":{"IPAddress":"172.17.0.2"}}}}
        ]"#
        .replace("\"Names\":null,", "");
        let listed: Vec<ListedContainer> = serde_json::from_str(&text)?;
        let containers: Vec<Container> = listed.into_iter().map(Container::from).collect();
        assert_eq!(containers[0].name, "/web-1");
        assert!(containers[0].host_network);
        assert!(containers[0].addresses.is_empty());
        assert_eq!(containers[0].labels.len(), 1);
        assert_eq!(containers[1].name, "def");
        assert!(!containers[1].host_network);
        let shown: Vec<String> = containers[1]
            .addresses
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(shown, ["172.17.0.2", "172.18.0.3"], "network name order");
        Ok(())
    }

    #[test]
    fn exec_and_health_events_change_no_route() {
        for yes in ["start", "die", "stop", "destroy", "rename", "pause", "kill"] {
            assert!(changes_routes(yes), "{yes}");
        }
        for no in [
            "exec_create: sh",
            "exec_start: sh",
            "health_status: healthy",
            "",
        ] {
            assert!(!changes_routes(no), "{no}");
        }
    }
}
