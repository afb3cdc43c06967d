//! The files of a watched directory (`[sources.directory]`): cluster
//! tables, as in the config file, and nothing else.
//!
//! Owns: [`load_fragment`], the one entry to the config parser for such a
//! file. Must never: accept a listener or a global setting there (a
//! fragment routes on the config file's listeners, and only the config file
//! sets the process), or validate a routing object: the merge with the
//! config file's state does, through the same `dispatch`.

use serde::Deserialize;

use super::lines::{LineIndex, Problems, shape_problem};
use super::raw::{RawClusters, RawConfig};
use super::{ConfigProblem, LocatedRequest, declarations::routing_requests};

/// What a fragment file may hold.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFragment {
    #[serde(default)]
    clusters: RawClusters,
}

/// The requests of a fragment file's cluster tables (each cluster, then
/// its frontends, then its backends, in dispatch order), located in
/// `text`; or every problem of its syntax, keys and values, in file order.
pub fn load_fragment(text: &str) -> Result<Vec<LocatedRequest>, Vec<ConfigProblem>> {
    let lines = LineIndex::new(text);
    let raw = toml::from_str::<RawFragment>(text)
        .map_err(|error| vec![shape_problem(text, &lines, &error)])?;
    let mut problems = Problems {
        lines: &lines,
        list: Vec::new(),
    };
    let config = RawConfig {
        clusters: raw.clusters,
        ..RawConfig::default()
    };
    let requests = routing_requests(config, &mut problems);
    let mut problems = problems.list;
    if problems.is_empty() {
        return Ok(requests);
    }
    problems.sort_by_key(|problem| problem.location);
    Err(problems)
}
