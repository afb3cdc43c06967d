//! `doc/configure.md` §5.4 lists exactly the families `GET /metrics`
//! serves, each with its type and labels as served.

use std::collections::BTreeMap;
use std::path::Path;

use preread_worker::metrics::families::{Family, Kind};

/// The family table's rows: name → (type, labels).
fn documented() -> Result<BTreeMap<String, (String, Vec<String>)>, String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../doc/configure.md");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut rows = BTreeMap::new();
    for line in text.lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let [_, name, kind, labels, ..] = cells.as_slice() else {
            continue;
        };
        let Some(name) = name
            .strip_prefix("`preread_")
            .and_then(|n| n.strip_suffix('`'))
        else {
            continue;
        };
        if !matches!(*kind, "counter" | "gauge" | "histogram") {
            continue;
        }
        let labels = labels
            .split(',')
            .map(|l| l.trim().trim_matches('`').to_owned())
            .filter(|l| !l.is_empty() && l != "–")
            .collect();
        rows.insert(format!("preread_{name}"), ((*kind).to_owned(), labels));
    }
    Ok(rows)
}

#[test]
fn the_family_table_is_what_is_served() -> Result<(), String> {
    let documented = documented()?;
    let served: BTreeMap<String, (String, Vec<String>)> = Family::ALL
        .into_iter()
        .map(|family| {
            let kind = match family.kind() {
                Kind::Counter => "counter",
                Kind::Gauge => "gauge",
                Kind::Histogram => "histogram",
            };
            let labels = family
                .labels()
                .iter()
                .map(|l| l.as_str().to_owned())
                .collect();
            (family.name().to_owned(), (kind.to_owned(), labels))
        })
        .collect();
    assert_eq!(documented, served);
    Ok(())
}
