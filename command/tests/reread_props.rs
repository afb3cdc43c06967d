//! A reload that reads only the changed cluster tables gives exactly what
//! a full check and diff of the file gives: the same state, the same
//! changes, the same warnings, and, when the file is refused, the same
//! problems with the same codes and lines (`command::reread`).
//!
//! Config files are generated from a small model (a root table, listeners,
//! cluster tables written in three styles, values that warn or are
//! refused, strings holding header-like lines) over a small universe of
//! ids, names and addresses, so that clashes between tables are frequent.
//! Each case edits the model three times in a row (renames, weights, new
//! or removed tables and frontends, listener changes, moved tables, raw
//! lines pasted anywhere) and compares, after each edit, the reread that
//! starts from the last outline with the one that reads the whole text.

use std::fmt::Write as _;

use command::config::{Outline, load_config};
use command::reread::{Read, changes, file_state};
use command::state::ConfigState;
use proptest::prelude::*;
use proptest::sample::{Index, select};
use proptest::test_runner::{Config, TestCaseError, TestRunner};

const IDS: &[&str] = &["a", "b", "c", "d", "api.v2"];
const ADDRESSES: &[&str] = &["127.0.0.1:8443", "127.0.0.1:9443", "127.0.0.1:7443"];
/// The last one is refused.
const SNIS: &[&str] = &[
    "a.example.com",
    "b.example.com",
    "B.Example.com.",
    "*.example.com",
    "**.example.com",
    "x.test",
    "y.test",
    "z.test",
    "bad name",
];
const PROTOCOLS: &[&str] = &["h2", "http/1.1"];
/// The first five are accepted anywhere.
const SETTINGS: &[&str] = &[
    "load_balancing = \"random\"",
    "load_balancing = \"least_connections\"",
    "proxy_protocol = \"send\"",
    "health_check = { interval = \"2s\", kind = \"tcp\" }",
    "# [clusters.zz] in a comment",
    "proxy_protocol = \"relay\"",
    "max_connections_per_ip = -1",
    "load_balancing = \"fastest\"",
    "colour = 1",
];
/// Raw lines pasted anywhere: syntax errors, duplicate or unusual tables,
/// and harmless ones.
const JUNK: &[&str] = &[
    "[clusters.a]",
    "[clusters.e]",
    "[clusters]",
    "[clusters.b.health_check]",
    "[[clusters.c.frontends]]",
    "x = 1",
    "frontends = [",
    "\"\"\"",
    "# just a comment",
    "",
    "clusters.q = {}",
    "[sources.directory]",
];

#[derive(Clone, Debug)]
struct Frontend {
    address: &'static str,
    sni: Option<&'static str>,
    alpn: Vec<&'static str>,
    /// A tag whose value holds a header-like line in a multi-line string.
    tricky_tag: bool,
}

#[derive(Clone, Debug)]
struct Backend {
    port: u16,
    weight: Option<i64>,
}

#[derive(Clone, Copy, Debug)]
enum Style {
    /// `frontends = [{ ... }, { ... }]` on one line.
    Inline,
    /// One frontend per line in a multi-line array.
    Lines,
    /// `[[clusters.<id>.frontends]]` tables, which the outline does not
    /// follow.
    ArrayTables,
}

#[derive(Clone, Debug)]
struct Cluster {
    id: &'static str,
    settings: Vec<&'static str>,
    frontends: Vec<Frontend>,
    backends: Vec<Backend>,
    style: Style,
}

#[derive(Clone, Debug)]
struct Listener {
    address: &'static str,
    default_cluster: Option<&'static str>,
    expect_proxy: bool,
    short_timeout: bool,
}

/// Extra lines of the root table: one declares clusters itself.
const ROOT_LINES: &[&str] = &["clusters = {}", "log_level = \"warn\"", "# [clusters.a]"];

#[derive(Clone, Debug)]
struct Model {
    worker_count: i64,
    root_line: Option<&'static str>,
    /// `soft_stop_grace = 5000`: a W004 in the root table.
    grace_warns: bool,
    listeners: Vec<Listener>,
    clusters: Vec<Cluster>,
    /// Lines pasted into the rendered text: (line index, line).
    pasted: Vec<(Index, &'static str)>,
}

fn toml_key(id: &str) -> String {
    if id
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        id.to_owned()
    } else {
        format!("\"{id}\"")
    }
}

/// A frontend's `key = value` fields.
fn frontend_fields(frontend: &Frontend) -> Vec<String> {
    let mut fields = vec![format!("address = \"{}\"", frontend.address)];
    if let Some(sni) = frontend.sni {
        fields.push(format!("sni = \"{sni}\""));
    }
    if !frontend.alpn.is_empty() {
        let names: Vec<String> = frontend.alpn.iter().map(|p| format!("\"{p}\"")).collect();
        fields.push(format!("alpn = [{}]", names.join(", ")));
    }
    if frontend.tricky_tag {
        fields.push("tags = { note = \"\"\"\n[clusters.zz]\n\"\"\" }".to_owned());
    }
    fields
}

fn render(model: &Model) -> String {
    let mut text = format!("worker_count = {}\n", model.worker_count);
    if let Some(line) = model.root_line {
        let _ = writeln!(text, "{line}");
    }
    if model.grace_warns {
        text.push_str("soft_stop_grace = 5000\n");
    }
    text.push('\n');
    for listener in &model.listeners {
        let _ = writeln!(text, "[[listeners]]\naddress = \"{}\"", listener.address);
        if let Some(id) = listener.default_cluster {
            let _ = writeln!(text, "default_cluster = \"{id}\"");
        }
        if listener.expect_proxy {
            text.push_str("expect_proxy = true\n");
        }
        if listener.short_timeout {
            text.push_str("sni_preread_timeout = 5\n");
        }
        text.push('\n');
    }
    for cluster in &model.clusters {
        let key = toml_key(cluster.id);
        let _ = writeln!(text, "[clusters.{key}]");
        for setting in &cluster.settings {
            let _ = writeln!(text, "{setting}");
        }
        let backends: Vec<String> = cluster
            .backends
            .iter()
            .map(|b| match b.weight {
                Some(w) => format!("{{ address = \"127.0.0.1:{}\", weight = {w} }}", b.port),
                None => format!("{{ address = \"127.0.0.1:{}\" }}", b.port),
            })
            .collect();
        if !backends.is_empty() {
            let _ = writeln!(text, "backends = [{}]", backends.join(", "));
        }
        match cluster.style {
            Style::Inline => {
                let frontends: Vec<String> = cluster
                    .frontends
                    .iter()
                    .map(|f| format!("{{ {} }}", frontend_fields(f).join(", ")))
                    .collect();
                let _ = writeln!(text, "frontends = [{}]", frontends.join(", "));
            }
            Style::Lines => {
                text.push_str("frontends = [\n");
                for frontend in &cluster.frontends {
                    let _ = writeln!(text, "  {{ {} }},", frontend_fields(frontend).join(", "));
                }
                text.push_str("]\n");
            }
            Style::ArrayTables => {
                for frontend in &cluster.frontends {
                    let _ = writeln!(
                        text,
                        "[[clusters.{key}.frontends]]\n{}",
                        frontend_fields(frontend).join("\n")
                    );
                }
            }
        }
        text.push('\n');
    }
    if model.pasted.is_empty() {
        return text;
    }
    let mut lines: Vec<&str> = text.split_inclusive('\n').collect();
    let owned: Vec<String> = model.pasted.iter().map(|(_, l)| format!("{l}\n")).collect();
    for ((at, _), line) in model.pasted.iter().zip(&owned) {
        lines.insert(at.index(lines.len() + 1), line);
    }
    lines.concat()
}

/// A frontend; a `valid` one names no refused SNI.
fn frontend(valid: bool) -> impl Strategy<Value = Frontend> {
    let snis = if valid { &SNIS[..SNIS.len() - 1] } else { SNIS };
    (
        select(ADDRESSES),
        prop_oneof![1 => Just(None), 8 => select(snis).prop_map(Some)],
        proptest::sample::subsequence(PROTOCOLS, 0..=PROTOCOLS.len()),
        proptest::bool::weighted(0.1),
    )
        .prop_map(|(address, sni, alpn, tricky_tag)| Frontend {
            address,
            sni,
            alpn,
            tricky_tag,
        })
}

fn backend() -> impl Strategy<Value = Backend> {
    (
        9001_u16..9004,
        prop_oneof![3 => Just(None), 1 => Just(Some(0)), 1 => Just(Some(5))],
    )
        .prop_map(|(port, weight)| Backend { port, weight })
}

/// A cluster table; a `valid` one has only settings accepted anywhere and
/// valid frontends.
fn cluster(valid: bool) -> impl Strategy<Value = Cluster> {
    let settings = if valid { &SETTINGS[..5] } else { SETTINGS };
    (
        select(IDS),
        proptest::collection::vec(select(settings), 0..2),
        proptest::collection::vec(frontend(valid), 0..3),
        proptest::collection::vec(backend(), 0..3),
        prop_oneof![6 => Just(Style::Inline), 3 => Just(Style::Lines), 1 => Just(Style::ArrayTables)],
    )
        .prop_map(|(id, settings, frontends, backends, style)| Cluster {
            id,
            settings,
            frontends,
            backends,
            style,
        })
}

fn listener() -> impl Strategy<Value = Listener> {
    (
        select(ADDRESSES),
        prop_oneof![5 => Just(None), 1 => select(IDS).prop_map(Some)],
        proptest::bool::weighted(0.2),
        proptest::bool::weighted(0.1),
    )
        .prop_map(
            |(address, default_cluster, expect_proxy, short_timeout)| Listener {
                address,
                default_cluster,
                expect_proxy,
                short_timeout,
            },
        )
}

/// A model with a listener on every address and distinct cluster ids:
/// most of the time its file loads, so that there is an outline to start
/// from.
fn model() -> impl Strategy<Value = Model> {
    (
        1_i64..4,
        prop_oneof![3 => Just(None), 1 => select(ROOT_LINES).prop_map(Some)],
        proptest::bool::weighted(0.2),
        proptest::collection::vec(listener(), ADDRESSES.len()),
        proptest::collection::vec(cluster(true), 0..5),
    )
        .prop_map(
            |(worker_count, root_line, grace_warns, mut listeners, clusters)| {
                for (listener, address) in listeners.iter_mut().zip(ADDRESSES) {
                    listener.address = address;
                }
                let mut seen = Vec::new();
                let clusters = clusters
                    .into_iter()
                    .filter(|c| {
                        let fresh = !seen.contains(&c.id);
                        seen.push(c.id);
                        fresh
                    })
                    .collect();
                Model {
                    worker_count,
                    root_line,
                    grace_warns,
                    listeners,
                    clusters,
                    pasted: Vec::new(),
                }
            },
        )
}

/// One edit of a model.
#[derive(Clone, Debug)]
enum Edit {
    RenameSni(Index, Index, Option<&'static str>),
    Weight(Index, Index, Option<i64>),
    AddFrontend(Index, Frontend),
    RemoveFrontend(Index, Index),
    AddCluster(Cluster),
    RemoveCluster(Index),
    Setting(Index, Vec<&'static str>),
    Swap(Index, Index),
    Listener(Index, Listener),
    AddListener(Listener),
    RemoveListener(Index),
    RootLine(Option<&'static str>),
    WorkerCount(i64),
    Paste(Index, &'static str),
    Unpaste,
}

fn edit() -> impl Strategy<Value = Edit> {
    let index = any::<Index>;
    prop_oneof![
        6 => (index(), index(), prop_oneof![1 => Just(None), 6 => select(SNIS).prop_map(Some)])
            .prop_map(|(c, f, sni)| Edit::RenameSni(c, f, sni)),
        3 => (index(), index(), prop_oneof![Just(None), Just(Some(0)), Just(Some(7))])
            .prop_map(|(c, b, w)| Edit::Weight(c, b, w)),
        3 => (index(), frontend(false)).prop_map(|(c, f)| Edit::AddFrontend(c, f)),
        2 => (index(), index()).prop_map(|(c, f)| Edit::RemoveFrontend(c, f)),
        2 => cluster(false).prop_map(Edit::AddCluster),
        2 => index().prop_map(Edit::RemoveCluster),
        2 => (index(), proptest::collection::vec(select(SETTINGS), 0..2))
            .prop_map(|(c, s)| Edit::Setting(c, s)),
        2 => (index(), index()).prop_map(|(a, b)| Edit::Swap(a, b)),
        1 => (index(), listener()).prop_map(|(l, new)| Edit::Listener(l, new)),
        1 => listener().prop_map(Edit::AddListener),
        1 => index().prop_map(Edit::RemoveListener),
        1 => prop_oneof![Just(None), select(ROOT_LINES).prop_map(Some)].prop_map(Edit::RootLine),
        1 => (1_i64..4).prop_map(Edit::WorkerCount),
        2 => (index(), select(JUNK)).prop_map(|(at, line)| Edit::Paste(at, line)),
        1 => Just(Edit::Unpaste),
    ]
}

fn apply(model: &mut Model, edit: &Edit) {
    let clusters = model.clusters.len();
    let cluster = |i: &Index| (clusters > 0).then(|| i.index(clusters));
    match edit {
        Edit::RenameSni(c, f, sni) => {
            if let Some(c) = cluster(c) {
                let frontends = &mut model.clusters[c].frontends;
                if !frontends.is_empty() {
                    let f = f.index(frontends.len());
                    frontends[f].sni = *sni;
                }
            }
        }
        Edit::Weight(c, b, weight) => {
            if let Some(c) = cluster(c) {
                let backends = &mut model.clusters[c].backends;
                if !backends.is_empty() {
                    let b = b.index(backends.len());
                    backends[b].weight = *weight;
                }
            }
        }
        Edit::AddFrontend(c, frontend) => {
            if let Some(c) = cluster(c) {
                model.clusters[c].frontends.push(frontend.clone());
            }
        }
        Edit::RemoveFrontend(c, f) => {
            if let Some(c) = cluster(c) {
                let frontends = &mut model.clusters[c].frontends;
                if !frontends.is_empty() {
                    frontends.remove(f.index(frontends.len()));
                }
            }
        }
        Edit::AddCluster(new) => model.clusters.push(new.clone()),
        Edit::RemoveCluster(c) => {
            if let Some(c) = cluster(c) {
                model.clusters.remove(c);
            }
        }
        Edit::Setting(c, settings) => {
            if let Some(c) = cluster(c) {
                model.clusters[c].settings.clone_from(settings);
            }
        }
        Edit::Swap(a, b) => {
            if let (Some(a), Some(b)) = (cluster(a), cluster(b)) {
                model.clusters.swap(a, b);
            }
        }
        Edit::Listener(l, new) => {
            let count = model.listeners.len();
            if count > 0 {
                model.listeners[l.index(count)] = new.clone();
            }
        }
        Edit::AddListener(new) => model.listeners.push(new.clone()),
        Edit::RemoveListener(l) => {
            let count = model.listeners.len();
            if count > 0 {
                model.listeners.remove(l.index(count));
            }
        }
        Edit::RootLine(line) => model.root_line = *line,
        Edit::WorkerCount(count) => model.worker_count = *count,
        Edit::Paste(at, line) => model.pasted.push((*at, line)),
        Edit::Unpaste => {
            model.pasted.pop();
        }
    }
}

/// How often each path was taken, over all the cases.
#[derive(Default, Debug)]
struct Seen {
    edits: usize,
    tables: usize,
    refused: usize,
}

/// Rereads `text` from `last` (the outline of the text whose state is
/// `state`) and from nothing, and requires the same answers.
fn same_both_ways(
    text: &str,
    last: Option<&Outline>,
    state: &ConfigState,
    seen: &mut Seen,
) -> Result<(), TestCaseError> {
    seen.edits += 1;
    let whole = file_state(text, None);
    let kept = file_state(text, last.map(|outline| (outline, state)));
    match (&whole, &kept) {
        (Ok(whole), Ok(kept)) => {
            prop_assert_eq!(&whole.state, &kept.state, "{}", text);
            prop_assert_eq!(&whole.warnings, &kept.warnings, "{}", text);
            prop_assert_eq!(&whole.outline, &kept.outline, "{}", text);
            if let Read::Tables(_) = kept.read {
                seen.tables += 1;
            }
        }
        (Err(whole), Err(kept)) => {
            prop_assert_eq!(whole, kept, "{}", text);
            seen.refused += 1;
        }
        _ => prop_assert!(
            false,
            "one read loads and the other not:\n{text}\n{whole:?}\n{kept:?}"
        ),
    }
    let mut running = state.clone();
    let whole = changes(text, None, &mut state.clone());
    let kept = changes(text, last, &mut running);
    prop_assert_eq!(&running, state, "the running state is left as it was");
    match (whole, kept) {
        (Ok(whole), Ok(kept)) => {
            prop_assert_eq!(&whole.changes, &kept.changes, "{}", text);
            prop_assert_eq!(whole.routes, kept.routes);
            prop_assert_eq!(&whole.warnings, &kept.warnings);
            prop_assert_eq!(&whole.outline, &kept.outline);
            prop_assert_eq!(whole.read, Read::Whole);
        }
        (Err(whole), Err(kept)) => prop_assert_eq!(whole, kept),
        (whole, kept) => prop_assert!(false, "{text}\n{whole:?}\n{kept:?}"),
    }
    Ok(())
}

#[test]
fn a_reread_from_the_last_outline_is_a_full_reread() {
    let mut runner = TestRunner::new(Config {
        cases: 400,
        failure_persistence: None,
        ..Config::default()
    });
    // The runner takes an `Fn`: the counts go through a cell.
    let seen = std::cell::RefCell::new(Seen::default());
    let strategy = (model(), proptest::collection::vec(edit(), 3));
    let result = runner.run(&strategy, |(mut model, edits)| {
        let Ok(loaded) = load_config(&render(&model)) else {
            return Ok(());
        };
        let mut state = loaded.state.clone();
        let mut outline = Outline::of(&render(&model), &loaded);
        for edit in &edits {
            apply(&mut model, edit);
            let next = render(&model);
            same_both_ways(&next, outline.as_ref(), &state, &mut seen.borrow_mut())?;
            // A reload that loads moves on to the new text; a refused one
            // leaves the file state, and its outline, as they were.
            if let Ok(file) = file_state(&next, None) {
                state = file.state;
                outline = file.outline;
            }
        }
        Ok(())
    });
    if let Err(error) = result {
        panic!("{error}");
    }
    let seen = seen.into_inner();
    // Every path was taken often: the property is not vacuous.
    assert!(seen.tables * 4 > seen.edits, "{seen:?}");
    assert!(seen.refused * 10 > seen.edits, "{seen:?}");
}
