//! What a reload remembers of the config text its file state came from,
//! and the edit that turns that text into a new one, table by table.
//!
//! Owns: [`Outline`] (a 128-bit hash of each top-level piece of the text,
//! the cluster each `[clusters.<id>]` table declares, and the warnings of
//! each piece, placed relative to it) and [`Edit`]: the clusters whose
//! tables went, changed or came, and the requests of the tables that
//! changed or came, parsed and checked on their own. Every other piece is
//! reused: the root table, the listeners and the sources must be byte for
//! byte the ones remembered, or there is no edit.
//!
//! Must never: produce an edit whose outcome could differ from a full
//! check of the new text. When anything is unusual (a piece the cutter is
//! unsure of, a changed table with any problem that is not a warning, two
//! tables of one cluster, a root table that declares clusters itself) it
//! answers `None`, and the whole text is read, so every error is the full
//! check's own, with its code and line. The state side of an edit (taking
//! the old tables' objects out, dispatching the new ones) is
//! `crate::reread`'s.

use std::collections::{BTreeSet, HashMap};

use siphasher::sip128::SipHasher13;
use toml::de::DeTable;

use super::declarations::routing_requests;
use super::fragment::RawFragment;
use super::lines::{LineIndex, Problems};
use super::pieces::{Opens, Piece, checked_pieces, pieces};
use super::raw::RawConfig;
use super::warnings::warnings;
use super::{ConfigProblem, LoadedConfig, Location};
use crate::codes::ErrorCode;
use crate::proto;
use crate::proto::request::RequestType;

/// A warning of a piece, its line counted from the piece's first line.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Placed {
    line: usize,
    column: usize,
    code: ErrorCode,
    message: String,
}

impl Placed {
    /// `problem` of the piece that starts at line `first`.
    fn of(problem: &ConfigProblem, first: usize) -> Option<Self> {
        let location = problem.location?;
        Some(Self {
            line: location.line.checked_sub(first)?,
            column: location.column,
            code: problem.code,
            message: problem.message.clone(),
        })
    }

    /// The warning again, for the piece now at line `first`.
    fn at(&self, first: usize) -> ConfigProblem {
        ConfigProblem {
            location: Some(Location {
                line: first + self.line,
                column: self.column,
            }),
            code: self.code,
            message: self.message.clone(),
        }
    }
}

/// A piece that is not a cluster table.
#[derive(Clone, Debug, PartialEq, Eq)]
struct HeadPiece {
    hash: u128,
    warnings: Vec<Placed>,
}

/// A `[clusters.<id>]` table.
#[derive(Clone, Debug, PartialEq, Eq)]
struct ClusterPiece {
    id: String,
    warnings: Vec<Placed>,
}

/// What a reload remembers of a config text that loaded: see the module
/// documentation. A few dozen bytes per table, never the text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outline {
    /// The root table and every table that is not a cluster's, in file
    /// order.
    head: Vec<HeadPiece>,
    /// The cluster tables, by the hash of their bytes.
    clusters: HashMap<u128, ClusterPiece>,
}

/// What turns the text of an [`Outline`] into another, cluster table by
/// cluster table. See the module documentation.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Edit {
    /// The clusters whose tables went.
    pub(crate) gone: Vec<String>,
    /// The clusters whose tables changed.
    pub(crate) replaced: Vec<String>,
    /// The clusters whose tables came.
    pub(crate) added: Vec<String>,
    /// The requests of the changed and new tables, in dispatch order:
    /// clusters, frontends, backends, each in file order.
    pub(crate) requests: Vec<proto::Request>,
    /// Every warning of the new text, in file order, as a full check
    /// reports them.
    pub(crate) warnings: Vec<ConfigProblem>,
    /// The new text's outline.
    pub(crate) outline: Outline,
}

impl Edit {
    /// The clusters whose old objects leave: those whose tables went or
    /// changed (a new table's cluster had none).
    pub(crate) fn leaving(&self) -> BTreeSet<&str> {
        self.gone
            .iter()
            .chain(&self.replaced)
            .map(String::as_str)
            .collect()
    }

    /// How many tables it read: the changed and new ones.
    pub(crate) fn tables_read(&self) -> usize {
        self.replaced.len() + self.added.len()
    }
}

fn hash(text: &str) -> u128 {
    SipHasher13::new().hash(text.as_bytes()).as_u128()
}

impl Outline {
    /// The outline of `text`, which `loaded` is the check of; `None` when
    /// its shape is one an edit could not be trusted on (see the module
    /// documentation).
    #[must_use]
    pub fn of(text: &str, loaded: &LoadedConfig) -> Option<Self> {
        // Checked against the TOML lexer: every piece remembered is one
        // the config parser would read as a whole on its own.
        let pieces = checked_pieces(text)?;
        let root = pieces.first()?;
        // A root table that names `clusters` (a dotted key, an inline
        // table) would meet a cluster table added later: only a full
        // check can tell whether they clash.
        if DeTable::parse(root.text)
            .ok()?
            .get_ref()
            .contains_key("clusters")
        {
            return None;
        }
        let mut ids: Vec<&str> = pieces
            .iter()
            .filter_map(|piece| match &piece.opens {
                Opens::Cluster(id) => Some(id.as_str()),
                _ => None,
            })
            .collect();
        ids.sort_unstable();
        // The check dispatched every table: the state holds one cluster per
        // table, nothing more.
        if !ids
            .iter()
            .copied()
            .eq(loaded.state.clusters().map(|c| c.cluster_id.as_str()))
        {
            return None;
        }
        let mut placed: Vec<Vec<Placed>> = vec![Vec::new(); pieces.len()];
        for warning in &loaded.warnings {
            let line = warning.location?.line;
            // The last piece starting at or before the line (only the root
            // can be empty, and an empty piece holds no warning).
            let index = pieces
                .partition_point(|piece| piece.line <= line)
                .checked_sub(1)?;
            placed[index].push(Placed::of(warning, pieces[index].line)?);
        }
        let mut outline = Outline {
            head: Vec::new(),
            clusters: HashMap::new(),
        };
        for (piece, warnings) in pieces.iter().zip(placed) {
            let hash = hash(piece.text);
            match &piece.opens {
                Opens::Cluster(id) => {
                    let id = id.clone();
                    if outline
                        .clusters
                        .insert(hash, ClusterPiece { id, warnings })
                        .is_some()
                    {
                        return None;
                    }
                }
                Opens::Root | Opens::Other => outline.head.push(HeadPiece { hash, warnings }),
            }
        }
        Some(outline)
    }

    /// The edit from this outline's text to `text`; `None` when `text` must
    /// be read whole (see the module documentation).
    pub(crate) fn edit(&self, text: &str) -> Option<Edit> {
        let pieces = pieces(text)?;
        let mut head = self.head.iter();
        let mut next = Outline {
            head: self.head.clone(),
            clusters: HashMap::with_capacity(self.clusters.len()),
        };
        let mut warnings = Vec::new();
        let mut fresh = Fresh::default();
        let mut kept = BTreeSet::new();
        let mut seen = BTreeSet::new();
        for piece in &pieces {
            let hash = hash(piece.text);
            let Opens::Cluster(id) = &piece.opens else {
                let remembered = head.next().filter(|h| h.hash == hash)?;
                warnings.extend(remembered.warnings.iter().map(|w| w.at(piece.line)));
                continue;
            };
            if !seen.insert(id.as_str()) {
                return None;
            }
            let cluster = match self.clusters.get(&hash) {
                Some(remembered) if remembered.id == *id => {
                    kept.insert(hash);
                    remembered.clone()
                }
                Some(_) => return None,
                None => fresh.read(piece, id)?,
            };
            warnings.extend(cluster.warnings.iter().map(|w| w.at(piece.line)));
            next.clusters.insert(hash, cluster);
        }
        if head.next().is_some() {
            return None;
        }
        let (mut gone, mut replaced) = (Vec::new(), Vec::new());
        for (hash, cluster) in &self.clusters {
            if kept.contains(hash) {
                continue;
            }
            if fresh.ids.contains(&cluster.id) {
                replaced.push(cluster.id.clone());
            } else {
                gone.push(cluster.id.clone());
            }
        }
        gone.sort_unstable();
        replaced.sort_unstable();
        let added = fresh
            .ids
            .iter()
            .filter(|id| replaced.binary_search(id).is_err())
            .cloned()
            .collect();
        let Fresh {
            clusters,
            frontends,
            backends,
            ..
        } = fresh;
        Some(Edit {
            gone,
            replaced,
            added,
            requests: [clusters, frontends, backends].concat(),
            warnings,
            outline: next,
        })
    }
}

/// The changed and new cluster tables of an edit, read on their own.
#[derive(Default)]
struct Fresh {
    ids: BTreeSet<String>,
    clusters: Vec<proto::Request>,
    frontends: Vec<proto::Request>,
    backends: Vec<proto::Request>,
}

impl Fresh {
    /// Reads the table `piece` (of cluster `id`) as the full check would:
    /// its shape, its values, its warnings. `None` on anything else than a
    /// warning: the full check reports it.
    fn read(&mut self, piece: &Piece<'_>, id: &str) -> Option<ClusterPiece> {
        let raw: RawFragment = toml::from_str(piece.text).ok()?;
        match raw.clusters.0.as_slice() {
            [(declared, _)] if declared.get_ref() == id => {}
            _ => return None,
        }
        let lines = LineIndex::new(piece.text);
        let mut problems = Problems {
            lines: &lines,
            list: Vec::new(),
        };
        let config = RawConfig {
            clusters: raw.clusters,
            ..RawConfig::default()
        };
        warnings(&config, &mut problems);
        let requests = routing_requests(config, &mut problems);
        let mut list = problems.list;
        if list.iter().any(|problem| !problem.is_warning()) {
            return None;
        }
        list.sort_by_key(|problem| problem.location);
        let warnings = list
            .iter()
            .map(|problem| Placed::of(problem, 1))
            .collect::<Option<Vec<_>>>()?;
        for located in requests {
            let group = match &located.request.request_type {
                Some(RequestType::AddCluster(_)) => &mut self.clusters,
                Some(RequestType::AddTcpFrontend(_)) => &mut self.frontends,
                Some(RequestType::AddBackend(_)) => &mut self.backends,
                _ => return None,
            };
            group.push(located.request);
        }
        self.ids.insert(id.to_owned());
        Some(ClusterPiece {
            id: id.to_owned(),
            warnings,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::load_config;

    const HEAD: &str = "[[listeners]]\naddress = \"127.0.0.1:8443\"\nsni_preread_timeout = 5\n\n";

    fn table(id: &str, sni: &str, weight: u32) -> String {
        format!(
            "[clusters.{id}]\nfrontends = [{{ address = \"127.0.0.1:8443\", sni = \"{sni}\" }}]\n\
             backends = [{{ address = \"127.0.0.1:9001\", weight = {weight} }}]\n\n"
        )
    }

    fn outline(text: &str) -> Option<Outline> {
        let loaded = load_config(text).ok()?;
        Outline::of(text, &loaded)
    }

    #[test]
    fn an_edit_reads_only_the_tables_that_changed() {
        let old = format!(
            "{HEAD}{}{}{}",
            table("a", "a.test", 1),
            table("b", "b.test", 1),
            table("c", "c.test", 1)
        );
        // A new first table moves every line after it; `a` now warns.
        let new = format!(
            "{HEAD}{}{}{}",
            table("d", "d.test", 1),
            table("a", "a.test", 0),
            table("b", "b.test", 1)
        );
        let edit = outline(&old).and_then(|o| o.edit(&new));
        let Some(edit) = edit else {
            panic!("no edit of {new}");
        };
        assert_eq!(
            (edit.gone, edit.replaced, edit.added),
            (
                vec!["c".to_owned()],
                vec!["a".to_owned()],
                vec!["d".to_owned()]
            )
        );
        let kinds: Vec<&str> = edit
            .requests
            .iter()
            .map(|r| match &r.request_type {
                Some(RequestType::AddCluster(c)) => c.cluster_id.as_str(),
                Some(RequestType::AddTcpFrontend(f)) => f.sni.as_deref().unwrap_or_default(),
                Some(RequestType::AddBackend(b)) => b.backend_id.as_str(),
                _ => "?",
            })
            .collect();
        assert_eq!(kinds, ["d", "a", "d.test", "a.test", "d-0", "a-0"]);
        let full = load_config(&new).map(|loaded| loaded.warnings);
        assert_eq!(Ok(edit.warnings.clone()), full);
        let shown: Vec<(usize, &str)> = edit
            .warnings
            .iter()
            .map(|w| (w.location.map_or(0, |l| l.line), w.code.as_str()))
            .collect();
        assert_eq!(shown, [(3, "W001"), (9, "W006")]);
        assert_eq!(Some(edit.outline), outline(&new));
    }

    #[test]
    fn a_text_the_outline_cannot_follow_has_no_edit() {
        let old = format!("{HEAD}{}", table("a", "a.test", 1));
        let Some(outline) = outline(&old) else {
            panic!("no outline of {old}");
        };
        for new in [
            // The listener changed.
            old.replace("= 5\n", "= 50\n"),
            // Two tables of one cluster.
            format!("{old}{}", table("a", "b.test", 1)),
            // A problem that is not a warning.
            format!(
                "{old}{}",
                table("b", "b.test", 1).replace("weight", "colour")
            ),
            // A piece the cutter is unsure of.
            format!("{old}[clusters.a.health_check]\n"),
            // One listener less.
            old.replace(HEAD, ""),
        ] {
            assert!(outline.edit(&new).is_none(), "{new}");
        }
    }

    #[test]
    fn an_outline_is_of_the_text_its_check_loaded() {
        let text = format!("{HEAD}{}", table("a", "a.test", 1));
        assert!(outline(&text).is_some());
        let Ok(other) = load_config(&format!("{text}{}", table("b", "b.test", 1))) else {
            panic!("the other text does not load");
        };
        assert_eq!(
            Outline::of(&text, &other),
            None,
            "its tables are not the state's"
        );
        for root in ["clusters = {}\n", "clusters.z = {}\n"] {
            let text = format!("{root}{HEAD}");
            assert!(load_config(&text).is_ok(), "{text}");
            assert_eq!(
                outline(&text),
                None,
                "{root} declares clusters in the root table"
            );
        }
    }

    #[test]
    fn a_table_is_read_only_as_the_cluster_its_header_names() {
        let piece = Piece {
            text: "[clusters.a]\n",
            line: 1,
            opens: Opens::Cluster("a".to_owned()),
        };
        assert!(Fresh::default().read(&piece, "b").is_none());
        assert!(Fresh::default().read(&piece, "a").is_some());
    }
}
