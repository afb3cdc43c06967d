//! `preread fleet status` and `preread fleet publish`: the CLI's side of
//! a fleet fed by etcd.
//!
//! Owns: where the store is (`--endpoints`/`--prefix`, else the config's
//! `[sources.etcd]`), the printing, and the exit status. Must never: judge
//! the replicas or plan the keys (`command::sources::etcd`), or talk to
//! etcd itself (`preread_control::etcd::fleet`).

use std::process::ExitCode;

use command::config::{DEFAULT_ETCD_PREFIX, EtcdSettings, load_config_file};
use command::sources::etcd::{FleetReport, published_keys};
use preread_control::etcd::{block_on, fleet};
use serde_json::json;

use super::args::{FleetAction, StoreArgs};
use super::client::config_path;
use super::{EXIT_FAILED, EXIT_USAGE, Globals};

/// Runs `preread fleet ACTION`.
pub(super) fn run(globals: &Globals, action: &FleetAction) -> ExitCode {
    let path = config_path(globals);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(why) => {
            eprintln!("preread: cannot read {}: {why}", path.display());
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let loaded = match load_config_file(&path) {
        Ok(loaded) => loaded,
        Err(problems) => {
            for problem in &problems {
                eprintln!("{}:{problem}", path.display());
            }
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let (FleetAction::Status { store, .. } | FleetAction::Publish { store, .. }) = action;
    let Some(settings) = store_settings(store, loaded.global.sources.etcd) else {
        eprintln!(
            "preread: no etcd to talk to: give --endpoints, or a [sources.etcd] table in {}",
            path.display()
        );
        return ExitCode::from(EXIT_USAGE);
    };
    match action {
        FleetAction::Status { expect, .. } => status(globals, &settings, *expect),
        FleetAction::Publish { dry_run, .. } => publish(globals, &settings, &text, *dry_run),
    }
}

/// The store: the flags over the config's `[sources.etcd]`.
fn store_settings(store: &StoreArgs, configured: Option<EtcdSettings>) -> Option<EtcdSettings> {
    let mut settings = match configured {
        Some(settings) => settings,
        None if !store.endpoints.is_empty() => EtcdSettings {
            prefix: DEFAULT_ETCD_PREFIX.to_owned(),
            ..EtcdSettings::default()
        },
        None => return None,
    };
    if !store.endpoints.is_empty() {
        settings.endpoints.clone_from(&store.endpoints);
    }
    if let Some(prefix) = &store.prefix {
        settings.prefix.clone_from(prefix);
    }
    Some(settings)
}

fn status(globals: &Globals, settings: &EtcdSettings, expect: Option<usize>) -> ExitCode {
    let report = match block_on(fleet::status(settings, expect)) {
        Ok(Ok(report)) => report,
        Ok(Err(why)) => {
            eprintln!("preread: {why}");
            return ExitCode::from(EXIT_FAILED);
        }
        Err(why) => {
            eprintln!("preread: {why}");
            return ExitCode::from(EXIT_FAILED);
        }
    };
    if globals.json {
        for line in status_json(&report) {
            println!("{line}");
        }
    } else {
        print!("{}", status_text(&report));
    }
    if report.converged() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_FAILED)
    }
}

/// One JSON object per replica, then one for the fleet.
fn status_json(report: &FleetReport) -> Vec<serde_json::Value> {
    let mut lines: Vec<serde_json::Value> = report
        .replicas
        .iter()
        .map(|r| match &r.status {
            Ok(s) => json!({ "replica": r.replica, "revision": s.revision,
                "generation": s.generation, "excluded": s.excluded, "version": s.version,
                "at": s.at, "lagging": r.lagging }),
            Err(why) => json!({ "replica": r.replica, "error": why.to_string() }),
        })
        .collect();
    lines.push(json!({ "routes_revision": report.routes_revision,
        "replicas": report.replicas.len(), "silent": report.silent,
        "converged": report.converged() }));
    lines
}

fn status_text(report: &FleetReport) -> String {
    use std::fmt::Write;
    let mut out = format!(
        "{:<24} {:>10} {:>10} {:>8}  STATE\n",
        "REPLICA", "REVISION", "GENERATION", "EXCLUDED"
    );
    for r in &report.replicas {
        let _ = match &r.status {
            Ok(s) => writeln!(
                out,
                "{:<24} {:>10} {:>10} {:>8}  {}",
                r.replica,
                s.revision,
                s.generation,
                s.excluded.len(),
                if r.lagging { "LAGGING" } else { "ok" }
            ),
            Err(why) => writeln!(out, "{:<24} {why}", r.replica),
        };
        if let Ok(s) = &r.status {
            for e in &s.excluded {
                let _ = writeln!(out, "  excluded {}: {}: {}", e.key, e.code, e.message);
            }
        }
    }
    let _ = writeln!(
        out,
        "routes revision {}; {} replica(s){}",
        report.routes_revision,
        report.replicas.len(),
        match report.silent {
            0 => String::new(),
            n => format!("; {n} SILENT (expected but no status key)"),
        }
    );
    out
}

fn publish(globals: &Globals, settings: &EtcdSettings, text: &str, dry: bool) -> ExitCode {
    let published = match published_keys(text) {
        Ok(published) => published,
        Err(why) => {
            eprintln!("preread: {why}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let done = match block_on(fleet::publish(settings, &published.keys, dry)) {
        Ok(Ok(done)) => done,
        Ok(Err(why)) => {
            eprintln!("preread: {why}");
            return ExitCode::from(EXIT_FAILED);
        }
        Err(why) => {
            eprintln!("preread: {why}");
            return ExitCode::from(EXIT_FAILED);
        }
    };
    let routes = settings.routes_prefix();
    if globals.json {
        println!(
            "{}",
            json!({ "written": done.written, "deleted": done.deleted,
                "unchanged": done.unchanged, "kept": published.kept,
                "revision": done.revision, "dry_run": dry })
        );
    } else {
        let verb = if dry { "would write" } else { "wrote" };
        for name in &done.written {
            println!("{verb} {routes}{name}");
        }
        let verb = if dry { "would delete" } else { "deleted" };
        for name in &done.deleted {
            println!("{verb} {routes}{name}");
        }
        for name in &published.kept {
            println!(
                "kept in the config file: cluster {name} (a listener's default_cluster); \
                 keep it in the replicas' config file"
            );
        }
        println!(
            "{} written, {} deleted, {} unchanged{}",
            done.written.len(),
            done.deleted.len(),
            done.unchanged,
            if done.revision > 0 {
                format!(", at revision {}", done.revision)
            } else {
                String::new()
            }
        );
    }
    ExitCode::SUCCESS
}
