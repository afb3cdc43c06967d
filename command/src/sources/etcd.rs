//! The etcd source's vocabulary: a key `<prefix>routes/<name>` turned into
//! one fragment, the status a replica keeps under `<prefix>status/`, what
//! `preread fleet status` makes of the replicas' status keys, and the
//! route keys `preread fleet publish` writes for a config file's clusters.
//!
//! Owns: which keys are route keys ([`route_name`]), the fragment of a
//! key's value (the directory's format, through the config file's own
//! parser), [`ReplicaStatus`] (its JSON), [`judge`] (laggards and silent
//! replicas) and [`published_keys`]. Must never: talk to etcd (the shell's
//! source thread and the CLI do), or read a clock: `now` comes in.

use serde::{Deserialize, Serialize};

use super::directory::toml_fragment;
use super::{Fragment, FragmentBody, FragmentId, Problem, SourceKind};
use crate::codes::ErrorCode;

/// The name of a route key: what follows `routes_prefix`, when the key is
/// a route key (a name of printable text without `/`).
#[must_use]
pub fn route_name<'a>(key: &'a [u8], routes_prefix: &str) -> Option<&'a str> {
    let name = key.strip_prefix(routes_prefix.as_bytes())?;
    let name = std::str::from_utf8(name).ok()?;
    let fine = !name.is_empty() && !name.contains('/') && !name.chars().any(char::is_control);
    fine.then_some(name)
}

/// The fragment of route key `name` holding `value`: its cluster tables
/// as requests, each placed at `routes/<name>:line:column`; or why not.
#[must_use]
pub fn fragment(name: &str, value: &[u8]) -> Fragment {
    let place = format!("routes/{name}");
    match std::str::from_utf8(value) {
        Ok(text) => toml_fragment(SourceKind::Etcd, name, &place, text),
        Err(error) => Fragment {
            id: FragmentId::new(SourceKind::Etcd, name),
            body: FragmentBody::Broken(vec![Problem {
                code: ErrorCode::InvalidToml,
                message: format!("{place}: the value is not UTF-8 text ({error})"),
            }]),
        },
    }
}

/// One excluded route key, as a status key lists it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExcludedKey {
    /// The key's `<name>`.
    pub key: String,
    /// The stable code (`preread explain CODE`).
    pub code: String,
    /// Why, where, and what to change.
    pub message: String,
}

/// What a replica writes under `<prefix>status/<replica_id>`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicaStatus {
    /// The store revision whose routes the replica serves.
    pub revision: i64,
    /// The replica's routing generation serving them.
    pub generation: u64,
    /// The route keys left out, with why.
    pub excluded: Vec<ExcludedKey>,
    /// The replica's preread version.
    pub version: String,
    /// When it applied the revision, in milliseconds since the Unix epoch.
    pub at: u64,
}

impl ReplicaStatus {
    /// Whether writing `self` over `before` tells anything new: the time
    /// alone does not (a replica writes only when what it serves changes).
    #[must_use]
    pub fn differs_from(&self, before: &ReplicaStatus) -> bool {
        (
            self.revision,
            self.generation,
            &self.excluded,
            &self.version,
        ) != (
            before.revision,
            before.generation,
            &before.excluded,
            &before.version,
        )
    }
}

/// One replica, as `preread fleet status` judges it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplicaLine {
    /// Its `replica_id`.
    pub replica: String,
    /// Its status, or why its key does not read.
    pub status: Result<ReplicaStatus, UnreadableStatus>,
    /// It serves an older revision of the route keys than the store holds.
    pub lagging: bool,
}

/// A status key whose value is not a replica's status (written by
/// another tool, or by a version that writes another shape).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnreadableStatus {
    /// What the JSON reader said.
    pub reason: String,
}

impl std::fmt::Display for UnreadableStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the status key does not read: {}", self.reason)
    }
}

impl std::error::Error for UnreadableStatus {}

/// What `preread fleet status` found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FleetReport {
    /// The store's last change of a route key (0: none).
    pub routes_revision: i64,
    /// Every replica with a status key, by name.
    pub replicas: Vec<ReplicaLine>,
    /// How many replicas `--expect` asked for and are missing: a replica
    /// whose lease expired (stopped, or cut from the store) is silent.
    pub silent: usize,
}

impl FleetReport {
    /// Whether every replica serves the store's routes and none is
    /// silent.
    #[must_use]
    pub fn converged(&self) -> bool {
        self.silent == 0 && self.replicas.iter().all(|r| r.status.is_ok() && !r.lagging)
    }
}

/// Judges the replicas' status keys (`(replica_id, value)`) against the
/// store's `routes_revision` (the highest mod revision of a route key, or
/// of the routes prefix's last deletion), with `expect` replicas expected.
#[must_use]
pub fn judge(
    routes_revision: i64,
    statuses: &[(String, Vec<u8>)],
    expect: Option<usize>,
) -> FleetReport {
    let mut replicas: Vec<ReplicaLine> = statuses
        .iter()
        .map(|(replica, value)| {
            let status =
                serde_json::from_slice::<ReplicaStatus>(value).map_err(|e| UnreadableStatus {
                    reason: e.to_string(),
                });
            let lagging = status.as_ref().is_ok_and(|s| s.revision < routes_revision);
            ReplicaLine {
                replica: replica.clone(),
                status,
                lagging,
            }
        })
        .collect();
    replicas.sort_by(|a, b| a.replica.cmp(&b.replica));
    let silent = expect.map_or(0, |n| n.saturating_sub(replicas.len()));
    FleetReport {
        routes_revision,
        replicas,
        silent,
    }
}

/// What `preread fleet publish` makes of a config file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Published {
    /// The route keys: `<name>` and its TOML value, by name.
    pub keys: Vec<(String, String)>,
    /// The clusters that stay in the replicas' config file: a listener
    /// names them as its `default_cluster`, which must exist when the
    /// listener is declared.
    pub kept: Vec<String>,
}

/// The route keys of a config file's text: one key per cluster, named
/// after it, holding its `[clusters.<name>]` table; a listener's
/// `default_cluster` is kept out (it stays in the file).
///
/// # Errors
///
/// The text is not TOML (the config file's own check says more), or a
/// cluster table cannot be written back as TOML.
pub fn published_keys(config_text: &str) -> Result<Published, PublishError> {
    let table: toml::Table = toml::from_str(config_text).map_err(PublishError::Parse)?;
    let mut published = Published::default();
    let Some(toml::Value::Table(clusters)) = table.get("clusters") else {
        return Ok(published);
    };
    let defaults: Vec<&str> = table
        .get("listeners")
        .and_then(toml::Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|l| l.get("default_cluster")?.as_str())
        .collect();
    let mut keys = Vec::with_capacity(clusters.len());
    for (name, cluster) in clusters {
        if defaults.contains(&name.as_str()) {
            published.kept.push(name.clone());
            continue;
        }
        let mut inner = toml::Table::new();
        inner.insert(name.clone(), cluster.clone());
        let mut outer = toml::Table::new();
        outer.insert("clusters".to_owned(), toml::Value::Table(inner));
        let text = toml::to_string(&outer).map_err(PublishError::Render)?;
        keys.push((name.clone(), text));
    }
    keys.sort();
    published.kept.sort();
    published.keys = keys;
    Ok(published)
}

/// Why a config file's clusters cannot be published.
#[derive(Debug)]
#[non_exhaustive]
pub enum PublishError {
    /// The file is not TOML.
    Parse(toml::de::Error),
    /// A cluster table does not write back as TOML.
    Render(toml::ser::Error),
}

impl std::fmt::Display for PublishError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Parse(e) => write!(f, "the config file is not TOML: {e}"),
            Self::Render(e) => write!(f, "a cluster table cannot be written as TOML: {e}"),
        }
    }
}

impl std::error::Error for PublishError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn route_keys_are_one_level_under_the_prefix() {
        let prefix = "/preread/routes/";
        assert_eq!(route_name(b"/preread/routes/web", prefix), Some("web"));
        for no in [
            &b"/preread/routes/"[..],
            b"/preread/routes/a/b",
            b"/preread/status/x",
            b"/preread/routes/\xff",
            b"/preread/routes/a\nb",
        ] {
            assert_eq!(route_name(no, prefix), None, "{no:?}");
        }
    }

    #[test]
    fn a_key_is_a_fragment_of_the_directory_format() {
        let text = "[clusters.web]\nfrontends = [{ address = \"*:8443\", sni = \"w.example\" }]\n";
        let fragment = fragment("web", text.as_bytes());
        assert_eq!(fragment.id, FragmentId::new(SourceKind::Etcd, "web"));
        assert_eq!(fragment.routes(), 1);
        let FragmentBody::Broken(problems) = super::fragment("bad", b"[clusters.x\n").body else {
            panic!("parsed");
        };
        assert_eq!(problems[0].code, ErrorCode::InvalidToml);
        assert!(
            problems[0].message.starts_with("routes/bad:1:"),
            "{problems:?}"
        );
        let FragmentBody::Broken(problems) = super::fragment("bin", b"\xff\xfe").body else {
            panic!("parsed");
        };
        assert!(problems[0].message.contains("not UTF-8"), "{problems:?}");
    }

    fn status(revision: i64) -> Vec<u8> {
        serde_json::to_vec(&ReplicaStatus {
            revision,
            generation: 3,
            excluded: Vec::new(),
            version: "1".into(),
            at: 5,
        })
        .unwrap_or_default()
    }

    #[test]
    fn laggards_and_silent_replicas_are_flagged() {
        let statuses = vec![
            ("b".to_owned(), status(7)),
            ("a".to_owned(), status(9)),
            ("c".to_owned(), b"{".to_vec()),
        ];
        let report = judge(9, &statuses, Some(5));
        let names: Vec<&str> = report.replicas.iter().map(|r| r.replica.as_str()).collect();
        assert_eq!(names, ["a", "b", "c"]);
        assert!(!report.replicas[0].lagging);
        assert!(report.replicas[1].lagging);
        assert!(report.replicas[2].status.is_err());
        assert_eq!(report.silent, 2);
        assert!(!report.converged());
        let fine = judge(9, &statuses[1..2], Some(1));
        assert!(fine.converged(), "{fine:?}");
    }

    #[test]
    fn a_status_differs_by_what_it_serves_not_by_its_time() {
        let one: ReplicaStatus = serde_json::from_slice(&status(4)).unwrap_or_else(|_| panic!());
        let later = ReplicaStatus {
            at: 99,
            ..one.clone()
        };
        assert!(!later.differs_from(&one));
        let newer = ReplicaStatus {
            revision: 5,
            ..one.clone()
        };
        assert!(newer.differs_from(&one));
    }

    #[test]
    fn a_config_file_publishes_one_key_per_cluster() {
        let text = "worker_count = 2\n[[listeners]]\naddress = \"127.0.0.1:1\"\n\
                    default_cluster = \"fb\"\n\
                    [clusters.web]\nfrontends = [{ address = \"127.0.0.1:1\", sni = \"w.example\" }]\n\
                    [clusters.api]\nbackends = [{ address = \"127.0.0.1:2\" }]\n\
                    [clusters.fb]\nbackends = [{ address = \"127.0.0.1:3\" }]\n";
        let published = published_keys(text).unwrap_or_default();
        assert_eq!(published.kept, ["fb"]);
        let keys = published.keys;
        let names: Vec<&str> = keys.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["api", "web"]);
        for (name, value) in &keys {
            let fragment = fragment(name, value.as_bytes());
            assert!(
                matches!(fragment.body, FragmentBody::Declared(_)),
                "{value}"
            );
        }
        assert!(published_keys("x = [").is_err());
        assert!(published_keys("").unwrap_or_default().keys.is_empty());
    }
}
