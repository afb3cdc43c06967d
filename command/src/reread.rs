//! A config file read again for a reload: its whole text parsed and
//! checked, or, when the [`Outline`] of the text the file state came from
//! is known, only the cluster tables that changed, everything else reused.
//!
//! Owns: [`file_state`] (the state a text declares, for a reload whose
//! route sources merge with it) and [`changes`] (the diff from the running
//! state to it, when the running state is the file state of the outline's
//! text), and taking an edit's old tables out of a state and its new ones
//! in, through [`ConfigState::dispatch`] like every other change. Must
//! never: answer anything a full check and diff of the text would not. An
//! edit is used only when every one of its requests is accepted; any
//! refusal, and any text the outline cannot follow, reads the whole text,
//! so every error and refusal comes from the full check, with its code and
//! line (`tests/reread_props.rs` compares the two on random edits).
//!
//! Why an accepted edit gives the full check's state: the requests the
//! full check dispatches in a fresh state are the unchanged tables' (in
//! the state already, accepted last time) and the new ones; every rule of
//! `dispatch` compares two objects (one frontend per key, no protocol
//! listed twice for a pattern, no catch-all beside SNI routes, one backend
//! per id) or checks a reference the order of dispatch satisfies (clusters
//! and listeners before frontends and backends). So when all of them fit
//! together in one order, they fit in any, and the state is the same set
//! of canonical objects.

use crate::config::outline::Edit;
use crate::config::{ConfigProblem, LoadedConfig, Outline, load_config};
use crate::diff::diff;
use crate::generation::plan;
use crate::proto::request::RequestType;
use crate::proto::{self, BackendRef, ClusterRef};
use crate::state::{ConfigState, request};
use crate::validate::ValidationError;

/// How much of a text was parsed and checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Read {
    /// All of it.
    Whole,
    /// Only this many cluster tables (the changed and new ones).
    Tables(usize),
}

/// The state a config text declares.
#[derive(Clone, Debug, PartialEq)]
pub struct FileState {
    /// The state, as a full check builds it.
    pub state: ConfigState,
    /// The text's warnings, in file order.
    pub warnings: Vec<ConfigProblem>,
    /// The text's outline, for the next reload.
    pub outline: Option<Outline>,
    /// How much was read.
    pub read: Read,
}

/// The changes from the running state to the one a config text declares.
#[derive(Clone, Debug, PartialEq)]
pub struct Changes {
    /// The diff, as [`diff`] gives it.
    pub changes: Vec<proto::Request>,
    /// How many frontends the text declares.
    pub routes: usize,
    /// The text's warnings, in file order.
    pub warnings: Vec<ConfigProblem>,
    /// The text's outline, for the next reload.
    pub outline: Option<Outline>,
    /// How much was read.
    pub read: Read,
}

/// The state `text` declares. `last` is the outline of a text and the
/// state that text declares: only the tables that changed since are read.
/// `Err` holds every problem of the text, warnings included, as
/// [`load_config`] reports them.
pub fn file_state(
    text: &str,
    last: Option<(&Outline, &ConfigState)>,
) -> Result<FileState, Vec<ConfigProblem>> {
    if let Some((outline, base)) = last
        && let Some(edit) = outline.edit(text)
    {
        let requests = edit_requests(&edit, &base.part(&edit.leaving()));
        let mut state = base.clone();
        if requests.iter().all(|r| state.dispatch(r).is_ok()) {
            return Ok(FileState {
                state,
                read: Read::Tables(edit.tables_read()),
                warnings: edit.warnings,
                outline: Some(edit.outline),
            });
        }
    }
    let (loaded, outline) = whole(text)?;
    Ok(FileState {
        state: loaded.state,
        warnings: loaded.warnings,
        outline,
        read: Read::Whole,
    })
}

/// The diff from `running` to the state `text` declares. `last` is the
/// outline of the text whose state `running` is: only the tables that
/// changed since are read, and `running` is left as it is (an edit is
/// tried on it and taken back). `Err` as for [`file_state`].
pub fn changes(
    text: &str,
    last: Option<&Outline>,
    running: &mut ConfigState,
) -> Result<Changes, Vec<ConfigProblem>> {
    if let Some(outline) = last
        && let Some(edit) = outline.edit(text)
        && let Some((changes, routes)) = edited(&edit, running)
    {
        return Ok(Changes {
            changes,
            routes,
            read: Read::Tables(edit.tables_read()),
            warnings: edit.warnings,
            outline: Some(edit.outline),
        });
    }
    let (loaded, outline) = whole(text)?;
    Ok(Changes {
        changes: diff(running, &loaded.state),
        routes: loaded.state.frontends().len(),
        warnings: loaded.warnings,
        outline,
        read: Read::Whole,
    })
}

/// The full check of `text`, and its outline.
fn whole(text: &str) -> Result<(LoadedConfig, Option<Outline>), Vec<ConfigProblem>> {
    let loaded = load_config(text)?;
    let outline = Outline::of(text, &loaded);
    Ok((loaded, outline))
}

/// The diff an edit makes from `running` (the state of its old text), and
/// the frontends the new text declares; `None` when `dispatch` refuses
/// one of its requests. The edit is planned on `running`, which `plan`
/// leaves as it found it; the diff is taken between the parts of the old
/// and new states that concern the edited clusters, which is the diff of
/// the whole states (see `part`).
fn edited(edit: &Edit, running: &mut ConfigState) -> Option<(Vec<proto::Request>, usize)> {
    // A new table's cluster is in neither part before its requests: the
    // parts on the leaving clusters cover every object the edit touches.
    let before = running.part(&edit.leaving());
    let requests = edit_requests(edit, &before);
    let planned = plan::<ValidationError>(running, requests.iter().cloned(), |_, _| Ok(()));
    if !planned.skipped.is_empty() {
        return None;
    }
    let mut after = before.clone();
    for request in &requests {
        // Accepted on the whole state, so on this part of it too.
        let _applied = after.dispatch(request).ok()?;
    }
    let routes = running.frontends.len() - before.frontends.len() + after.frontends.len();
    Some((diff(&before, &after), routes))
}

/// The requests that turn the state of the edit's old text into the new
/// text's, given that state's part on the leaving clusters: every frontend
/// and backend of the part out, the clusters whose tables went out, then
/// the new tables' declarations, a changed table's cluster updated in
/// place (a listener may name it as `default_cluster`).
fn edit_requests(edit: &Edit, part: &ConfigState) -> Vec<proto::Request> {
    let mut requests: Vec<proto::Request> = part
        .frontends
        .iter()
        .map(|(key, stored)| request(RequestType::RemoveTcpFrontend(stored.to_proto(key))))
        .collect();
    requests.extend(part.backends.values().map(|backend| {
        request(RequestType::RemoveBackend(BackendRef {
            cluster_id: backend.cluster_id.clone(),
            backend_id: backend.backend_id.clone(),
            address: backend.address.clone(),
        }))
    }));
    requests.extend(edit.gone.iter().map(|id| {
        request(RequestType::RemoveCluster(ClusterRef {
            cluster_id: id.clone(),
        }))
    }));
    requests.extend(
        edit.requests
            .iter()
            .map(|declared| match &declared.request_type {
                Some(RequestType::AddCluster(cluster))
                    if edit.replaced.binary_search(&cluster.cluster_id).is_ok() =>
                {
                    request(RequestType::UpdateCluster(cluster.clone()))
                }
                _ => declared.clone(),
            }),
    );
    requests
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEAD: &str = "[[listeners]]\naddress = \"127.0.0.1:8443\"\ndefault_cluster = \"a\"\n\n";

    fn table(id: &str, sni: &str, setting: &str) -> String {
        format!(
            "[clusters.{id}]\n{setting}\nfrontends = [{{ address = \"127.0.0.1:8443\", sni = \
             \"{sni}\" }}]\nbackends = [{{ address = \"127.0.0.1:9001\" }}]\n\n"
        )
    }

    fn texts(old: [(&str, &str, &str); 2], new: [(&str, &str, &str); 2]) -> (String, String) {
        let text = |tables: [(&str, &str, &str); 2]| {
            let tables: String = tables.iter().map(|(i, s, x)| table(i, s, x)).collect();
            format!("{HEAD}{tables}")
        };
        (text(old), text(new))
    }

    /// The reread of `new` from the outline of `old`, checked against the
    /// full one.
    fn reread(old: &str, new: &str) -> Result<Changes, Vec<ConfigProblem>> {
        let loaded = match load_config(old) {
            Ok(loaded) => loaded,
            Err(problems) => panic!("{old}: {problems:?}"),
        };
        let outline = Outline::of(old, &loaded);
        assert!(outline.is_some(), "no outline of {old}");
        let mut running = loaded.state.clone();
        let kept = changes(new, outline.as_ref(), &mut running);
        assert_eq!(running, loaded.state, "the running state is left as it was");
        let whole = changes(new, None, &mut running);
        match (&kept, whole) {
            (Ok(kept), Ok(whole)) => assert_eq!(
                (&kept.changes, &kept.warnings, &kept.outline),
                (&whole.changes, &whole.warnings, &whole.outline)
            ),
            (Err(kept), Err(whole)) => assert_eq!(kept, &whole),
            (kept, whole) => panic!("{kept:?}\n{whole:?}"),
        }
        kept
    }

    fn kinds(changes: &[proto::Request]) -> Vec<&'static str> {
        changes
            .iter()
            .map(|r| match &r.request_type {
                Some(RequestType::AddTcpFrontend(_)) => "add_frontend",
                Some(RequestType::RemoveTcpFrontend(_)) => "remove_frontend",
                Some(RequestType::UpdateCluster(_)) => "update_cluster",
                _ => "other",
            })
            .collect()
    }

    #[test]
    fn one_renamed_name_reads_one_table_and_moves_one_route() {
        let (old, new) = texts(
            [("a", "a.test", ""), ("b", "b.test", "")],
            [("a", "a.test", ""), ("b", "renamed.test", "")],
        );
        let Ok(reread) = reread(&old, &new) else {
            panic!("refused");
        };
        assert_eq!(reread.read, Read::Tables(1));
        assert_eq!(kinds(&reread.changes), ["remove_frontend", "add_frontend"]);
        assert_eq!(reread.routes, 2);
    }

    #[test]
    fn a_changed_default_cluster_is_updated_in_place() {
        let (old, new) = texts(
            [("a", "a.test", ""), ("b", "b.test", "")],
            [
                ("a", "a.test", "load_balancing = \"random\""),
                ("b", "b.test", ""),
            ],
        );
        let Ok(reread) = reread(&old, &new) else {
            panic!("refused");
        };
        assert_eq!(reread.read, Read::Tables(1));
        assert_eq!(kinds(&reread.changes), ["update_cluster"]);
    }

    #[test]
    fn a_clash_with_an_unchanged_table_is_the_full_checks_refusal() {
        let (old, new) = texts(
            [("a", "a.test", ""), ("b", "b.test", "")],
            [("a", "a.test", ""), ("b", "a.test", "")],
        );
        let Err(problems) = reread(&old, &new) else {
            panic!("a duplicate route loaded");
        };
        let found: Vec<(usize, &str)> = problems
            .iter()
            .map(|p| (p.location.map_or(0, |l| l.line), p.code.as_str()))
            .collect();
        assert_eq!(found, [(12, "E204")], "{problems:?}");
    }

    #[test]
    fn a_changed_listener_reads_the_whole_file() {
        let (old, _) = texts(
            [("a", "a.test", ""), ("b", "b.test", "")],
            [("a", "a.test", ""), ("b", "b.test", "")],
        );
        let new = old.replace("default_cluster = \"a\"", "default_cluster = \"b\"");
        assert_eq!(reread(&old, &new).map(|r| r.read), Ok(Read::Whole));
        let unchanged = reread(&old, &old);
        assert_eq!(
            unchanged.map(|r| (r.read, r.changes.len())),
            Ok((Read::Tables(0), 0))
        );
    }

    #[test]
    fn a_file_state_from_the_last_one_is_the_full_checks() {
        let (old, new) = texts(
            [("a", "a.test", ""), ("b", "b.test", "")],
            [("a", "a.test", ""), ("c", "c.test", "")],
        );
        let Ok(last) = file_state(&old, None) else {
            panic!("{old} refused");
        };
        let Some(outline) = &last.outline else {
            panic!("no outline of {old}");
        };
        let kept = file_state(&new, Some((outline, &last.state)));
        assert_eq!(kept.as_ref().map(|f| f.read), Ok(Read::Tables(1)));
        let whole = file_state(&new, None);
        assert_eq!(
            kept.map(|f| (f.state, f.warnings, f.outline)),
            whole.map(|f| (f.state, f.warnings, f.outline))
        );
    }
}
