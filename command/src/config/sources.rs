//! `[sources.docker]`, `[sources.directory]` and `[sources.etcd]`: where
//! the route sources merged with the file's declarations are read.
//!
//! Owns: the three tables' keys, the default Docker endpoint, the
//! endpoint's one accepted scheme, and the etcd endpoints' and prefix's
//! shape. Must never: open the socket, the directory or a connection (the
//! proxy's source threads do), or stop at a bad value.

use std::path::PathBuf;

use super::lines::Problems;
use super::raw::{RawConfig, RawEtcdSource};
use crate::codes::ErrorCode;
use crate::spelling::quoted;

/// The default of `[sources.docker] endpoint`.
pub const DEFAULT_DOCKER_ENDPOINT: &str = "unix:///var/run/docker.sock";

/// The route sources of a config file.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct SourceSettings {
    /// The Docker Engine API's Unix socket (`endpoint` without `unix://`).
    pub docker: Option<PathBuf>,
    /// The directory whose `*.toml` files are fragments.
    pub directory: Option<PathBuf>,
    /// The etcd cluster whose `<prefix>routes/` keys are fragments.
    pub etcd: Option<EtcdSettings>,
}

/// The default of `[sources.etcd] prefix`.
pub const DEFAULT_ETCD_PREFIX: &str = "/preread/";

/// `[sources.etcd]`.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct EtcdSettings {
    /// `http://HOST:PORT` or `https://HOST:PORT`, tried in turn.
    pub endpoints: Vec<String>,
    /// The keys' prefix; ends with `/`.
    pub prefix: String,
    /// This replica's name in `<prefix>status/`; the host name when `None`.
    pub replica_id: Option<String>,
    /// etcd's authentication, when enabled there.
    pub username: Option<String>,
    /// The user's password.
    pub password: Option<String>,
    /// The CA that signs the members' certificates (`https://` endpoints).
    pub ca_file: Option<PathBuf>,
    /// A client certificate, when the members ask for one.
    pub cert_file: Option<PathBuf>,
    /// Its private key.
    pub key_file: Option<PathBuf>,
}

impl EtcdSettings {
    /// Where fragment keys live: `<prefix>routes/`.
    #[must_use]
    pub fn routes_prefix(&self) -> String {
        format!("{}routes/", self.prefix)
    }

    /// Where the replicas' status keys live: `<prefix>status/`.
    #[must_use]
    pub fn status_prefix(&self) -> String {
        format!("{}status/", self.prefix)
    }
}

impl SourceSettings {
    /// Whether any route source is configured.
    #[must_use]
    pub fn any(&self) -> bool {
        self.docker.is_some() || self.directory.is_some() || self.etcd.is_some()
    }
}

/// Whether `endpoint` is `http://` or `https://` followed by a host and,
/// optionally, a port, nothing else.
fn valid_endpoint(endpoint: &str) -> bool {
    let Some(rest) = endpoint
        .strip_prefix("http://")
        .or_else(|| endpoint.strip_prefix("https://"))
    else {
        return false;
    };
    !rest.is_empty() && !rest.contains(['/', '?', '#', ' '])
}

fn etcd_settings(raw: &RawEtcdSource, problems: &mut Problems<'_>) -> Option<EtcdSettings> {
    let endpoints = raw.endpoints.get_ref();
    let mut fine = true;
    if endpoints.is_empty() {
        problems.push(
            raw.endpoints.span().start,
            ErrorCode::InvalidValue,
            "[sources.etcd] endpoints is empty: list the etcd members' client URLs, e.g. \
             [\"http://10.0.0.1:2379\"]"
                .to_owned(),
        );
        fine = false;
    }
    for endpoint in endpoints.iter().filter(|e| !valid_endpoint(e)) {
        problems.push(
            raw.endpoints.span().start,
            ErrorCode::InvalidValue,
            format!(
                "[sources.etcd] endpoint {} is not http://HOST:PORT or https://HOST:PORT: \
                 give a member's client URL without a path",
                quoted(endpoint)
            ),
        );
        fine = false;
    }
    let prefix = raw
        .prefix
        .as_ref()
        .map_or(DEFAULT_ETCD_PREFIX, |p| p.get_ref().as_str());
    if !prefix.ends_with('/') {
        problems.push(
            raw.prefix.as_ref().map_or(0, |p| p.span().start),
            ErrorCode::InvalidValue,
            format!(
                "[sources.etcd] prefix {} must end with `/`: the route keys are \
                 <prefix>routes/<name>",
                quoted(prefix)
            ),
        );
        fine = false;
    }
    if let Some(id) = &raw.replica_id
        && (id.get_ref().is_empty() || id.get_ref().contains(['/', ' ']))
    {
        problems.push(
            id.span().start,
            ErrorCode::InvalidValue,
            format!(
                "[sources.etcd] replica_id {} must be a non-empty name without `/` or spaces \
                 (it names the status key <prefix>status/<replica_id>)",
                quoted(id.get_ref())
            ),
        );
        fine = false;
    }
    let https = endpoints
        .iter()
        .filter(|e| e.starts_with("https://"))
        .count();
    if https > 0 && https < endpoints.len() {
        problems.push(
            raw.endpoints.span().start,
            ErrorCode::InvalidValue,
            "[sources.etcd] endpoints mix http:// and https://: the members of one etcd \
             cluster serve their clients one way; write every endpoint with the same scheme"
                .to_owned(),
        );
        fine = false;
    }
    if https > 0 && raw.ca_file.is_none() {
        problems.push(
            raw.endpoints.span().start,
            ErrorCode::InvalidValue,
            "[sources.etcd] https:// endpoints need ca_file: the PEM file of the CA that signs \
             the members' certificates (preread trusts no system root for etcd)"
                .to_owned(),
        );
        fine = false;
    }
    let tls_files = [&raw.ca_file, &raw.cert_file, &raw.key_file];
    if https == 0 && !endpoints.is_empty() && tls_files.iter().any(|f| f.is_some()) {
        problems.push(
            raw.endpoints.span().start,
            ErrorCode::InvalidValue,
            "[sources.etcd] ca_file, cert_file and key_file are TLS settings, and the endpoints \
             are http://: write them https://, or remove the files"
                .to_owned(),
        );
        fine = false;
    }
    if raw.cert_file.is_some() != raw.key_file.is_some() {
        problems.push(
            raw.endpoints.span().start,
            ErrorCode::InvalidValue,
            "[sources.etcd] cert_file and key_file go together: give both, or neither".to_owned(),
        );
        fine = false;
    }
    if raw.username.is_some() != raw.password.is_some() {
        problems.push(
            raw.endpoints.span().start,
            ErrorCode::InvalidValue,
            "[sources.etcd] username and password go together: give both, or neither".to_owned(),
        );
        fine = false;
    }
    fine.then(|| EtcdSettings {
        endpoints: endpoints.clone(),
        prefix: prefix.to_owned(),
        replica_id: raw.replica_id.as_ref().map(|id| id.get_ref().clone()),
        username: raw.username.clone(),
        password: raw.password.clone(),
        ca_file: raw.ca_file.as_ref().map(PathBuf::from),
        cert_file: raw.cert_file.as_ref().map(PathBuf::from),
        key_file: raw.key_file.as_ref().map(PathBuf::from),
    })
}

pub(super) fn source_settings(raw: &RawConfig, problems: &mut Problems<'_>) -> SourceSettings {
    let mut settings = SourceSettings::default();
    let Some(sources) = &raw.sources else {
        return settings;
    };
    if let Some(docker) = &sources.docker {
        let endpoint = docker
            .endpoint
            .as_ref()
            .map_or(DEFAULT_DOCKER_ENDPOINT, |e| e.get_ref().as_str());
        match endpoint
            .strip_prefix("unix://")
            .filter(|path| !path.is_empty())
        {
            Some(path) => settings.docker = Some(PathBuf::from(path)),
            None => problems.push(
                docker.endpoint.as_ref().map_or(0, |e| e.span().start),
                ErrorCode::InvalidValue,
                format!(
                    "[sources.docker] endpoint {} is not a unix:// endpoint: preread reads the \
                     Docker Engine API on its Unix socket, e.g. {}",
                    quoted(endpoint),
                    quoted(DEFAULT_DOCKER_ENDPOINT)
                ),
            ),
        }
    }
    if let Some(directory) = &sources.directory {
        if directory.path.get_ref().is_empty() {
            problems.push(
                directory.path.span().start,
                ErrorCode::InvalidValue,
                "[sources.directory] path is empty: give the directory whose *.toml files \
                 hold cluster tables"
                    .to_owned(),
            );
        } else {
            settings.directory = Some(PathBuf::from(directory.path.get_ref()));
        }
    }
    if let Some(etcd) = &sources.etcd {
        settings.etcd = etcd_settings(etcd, problems);
    }
    settings
}

#[cfg(test)]
mod tests {
    use crate::codes::ErrorCode;
    use crate::config::{check_config, load_config};

    #[test]
    fn sources_default_and_refusals() {
        let loaded = load_config("[sources.docker]\n[sources.directory]\npath = \"conf.d\"\n")
            .expect("loads");
        let sources = loaded.global.sources;
        assert_eq!(
            sources.docker.as_deref(),
            Some(std::path::Path::new("/var/run/docker.sock"))
        );
        assert_eq!(
            sources.directory.as_deref(),
            Some(std::path::Path::new("conf.d"))
        );
        assert!(sources.any());
        assert!(!load_config("").expect("loads").global.sources.any());
        let etcd = load_config(
            "[sources.etcd]\nendpoints = [\"https://127.0.0.1:2379\", \"https://e2:2379\"]\n\
             ca_file = \"ca.pem\"\n",
        )
        .expect("loads")
        .global
        .sources
        .etcd
        .expect("etcd");
        assert_eq!(etcd.prefix, "/preread/");
        assert_eq!(etcd.routes_prefix(), "/preread/routes/");
        assert_eq!(etcd.status_prefix(), "/preread/status/");
        assert_eq!(etcd.replica_id, None);

        for (text, code, at) in [
            (
                "[sources.docker]\nendpoint = \"tcp://127.0.0.1:2375\"\n",
                ErrorCode::InvalidValue,
                "2:12",
            ),
            (
                "[sources.directory]\npath = \"\"\n",
                ErrorCode::InvalidValue,
                "2:8",
            ),
            ("[sources.directory]\n", ErrorCode::InvalidToml, "1:1"),
            ("[sources.kubernetes]\n", ErrorCode::UnknownKey, "1:10"),
            (
                "[sources.etcd]\nendpoints = [\"10.0.0.1:2379\"]\n",
                ErrorCode::InvalidValue,
                "2:13",
            ),
            (
                "[sources.etcd]\nendpoints = []\n",
                ErrorCode::InvalidValue,
                "2:13",
            ),
            (
                "[sources.etcd]\nendpoints = [\"http://a:2379\"]\nprefix = \"/p\"\n",
                ErrorCode::InvalidValue,
                "3:10",
            ),
            (
                "[sources.etcd]\nendpoints = [\"http://a:2379\"]\nreplica_id = \"a/b\"\n",
                ErrorCode::InvalidValue,
                "3:14",
            ),
            (
                "[sources.etcd]\nendpoints = [\"http://a:2379\"]\nusername = \"u\"\n",
                ErrorCode::InvalidValue,
                "2:13",
            ),
            (
                "[sources.etcd]\nendpoints = [\"http://a:2379\", \"https://b:2379\"]\nca_file = \"ca.pem\"\n",
                ErrorCode::InvalidValue,
                "2:13",
            ),
            (
                "[sources.etcd]\nendpoints = [\"https://a:2379\"]\n",
                ErrorCode::InvalidValue,
                "2:13",
            ),
            (
                "[sources.etcd]\nendpoints = [\"http://a:2379\"]\nca_file = \"ca.pem\"\n",
                ErrorCode::InvalidValue,
                "2:13",
            ),
        ] {
            let problems = check_config(text);
            assert_eq!(problems.len(), 1, "{text:?}: {problems:?}");
            assert_eq!(problems[0].code, code, "{text:?}: {problems:?}");
            let location = problems[0].location.map(|l| l.to_string());
            assert_eq!(location.as_deref(), Some(at), "{text:?}: {problems:?}");
        }
    }

    #[test]
    fn source_paths_resolve_beside_the_config_file() {
        let mut global = load_config(
            "[sources.docker]\nendpoint = \"unix://run/docker.sock\"\n[sources.directory]\npath = \"conf.d\"\n",
        )
        .expect("loads")
        .global;
        global.resolve_paths_beside(std::path::Path::new("/etc/preread/preread.toml"));
        assert_eq!(
            global.sources.docker.as_deref(),
            Some(std::path::Path::new("/etc/preread/run/docker.sock"))
        );
        assert_eq!(
            global.sources.directory.as_deref(),
            Some(std::path::Path::new("/etc/preread/conf.d"))
        );
    }
}
