//! `[sources.docker]` and `[sources.directory]`: where the route sources
//! merged with the file's declarations are read.
//!
//! Owns: the two tables' keys, the default Docker endpoint, and the
//! endpoint's one accepted scheme. Must never: open the socket or the
//! directory (the proxy's source threads do), or stop at a bad value.

use std::path::PathBuf;

use super::lines::Problems;
use super::raw::RawConfig;
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
}

impl SourceSettings {
    /// Whether any route source is configured.
    #[must_use]
    pub fn any(&self) -> bool {
        self.docker.is_some() || self.directory.is_some()
    }
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
