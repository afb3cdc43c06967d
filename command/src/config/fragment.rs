//! The files of a watched directory (`[sources.directory]`): cluster
//! tables, as in the config file, and nothing else.
//!
//! Owns: [`load_fragment`], the one entry to the config parser for such a
//! file. Must never: accept a listener or a global setting there (a
//! fragment routes on the config file's listeners, and only the config file
//! sets the process), or validate a routing object: the merge with the
//! config file's state does, through the same `dispatch`.

use serde::Deserialize;

use super::lines::{LineIndex, Problems};
use super::raw::{RawClusters, RawConfig};
use super::shape::shape;
use super::{ConfigProblem, LocatedRequest, declarations::routing_requests};

/// What a fragment file may hold; also a `[clusters.<id>]` table of the
/// config file, read on its own by a reload (`outline`).
#[derive(Deserialize)]
#[serde(deny_unknown_fields, expecting = "a file of [clusters.<id>] tables")]
pub(super) struct RawFragment {
    #[serde(default)]
    pub(super) clusters: RawClusters,
}

/// The requests of a fragment file's cluster tables (each cluster, then
/// its frontends, then its backends, in dispatch order), located in
/// `text`; or every problem of its syntax, keys and values, in file order.
pub fn load_fragment(text: &str) -> Result<Vec<LocatedRequest>, Vec<ConfigProblem>> {
    let lines = LineIndex::new(text);
    let shaped = shape::<RawFragment>(text, &lines);
    let mut problems = Problems {
        lines: &lines,
        list: shaped.problems,
    };
    let Some(raw) = shaped.raw else {
        return Err(problems.list);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codes::ErrorCode;

    /// A fragment's shape is checked as the config file's is: every
    /// problem in one pass, a listener there an unknown key.
    #[test]
    fn a_fragment_reports_every_shape_problem() {
        let text = "[clusters.a]\ncolour = 1\nload_balancing = 5\n\n[[listeners]]\n\
                    address = \"127.0.0.1:1\"\n";
        let problems = load_fragment(text).err().unwrap_or_default();
        let found: Vec<(usize, ErrorCode)> = problems
            .iter()
            .map(|p| (p.location.map_or(0, |l| l.line), p.code))
            .collect();
        assert_eq!(
            found,
            [
                (2, ErrorCode::UnknownKey),
                (3, ErrorCode::InvalidToml),
                (5, ErrorCode::UnknownKey)
            ],
            "{problems:#?}"
        );
        assert!(
            problems[1]
                .message
                .starts_with("clusters.a.load_balancing: expected a string"),
            "{}",
            problems[1]
        );
    }
}
