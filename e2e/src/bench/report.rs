//! Raw records (one JSON object per line) and the summary: per target and
//! value, the median and the spread (min–max) over the repetitions, and the
//! ratio against the direct connection of the same repetition.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;

/// One measurement: a phase's test on one target in one repetition.
#[derive(Clone, Debug)]
pub(crate) struct Record {
    pub(crate) test: String,
    pub(crate) target: String,
    pub(crate) rep: usize,
    pub(crate) values: BTreeMap<String, f64>,
    pub(crate) notes: BTreeMap<String, String>,
}

impl Record {
    pub(crate) fn new(test: &str, target: &str, rep: usize) -> Self {
        Self {
            test: test.to_owned(),
            target: target.to_owned(),
            rep,
            values: BTreeMap::new(),
            notes: BTreeMap::new(),
        }
    }

    pub(crate) fn value(&mut self, key: &str, value: f64) -> &mut Self {
        self.values.insert(key.to_owned(), value);
        self
    }

    pub(crate) fn note(&mut self, key: &str, value: impl Into<String>) -> &mut Self {
        self.notes.insert(key.to_owned(), value.into());
        self
    }

    pub(crate) fn to_json(&self) -> String {
        let mut out = format!(
            "{{\"test\":{},\"target\":{},\"rep\":{}",
            json_str(&self.test),
            json_str(&self.target),
            self.rep
        );
        for (key, value) in &self.values {
            if value.is_finite() {
                let _ = write!(out, ",{}:{}", json_str(key), value);
            } else {
                let _ = write!(out, ",{}:null", json_str(key));
            }
        }
        for (key, value) in &self.notes {
            let _ = write!(out, ",{}:{}", json_str(key), json_str(value));
        }
        out.push('}');
        out
    }
}

fn json_str(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Appends records to a JSON-lines file as they come.
#[derive(Debug)]
pub(crate) struct Sink {
    file: std::fs::File,
    pub(crate) records: Vec<Record>,
}

impl Sink {
    pub(crate) fn create(path: &std::path::Path) -> Result<Self, String> {
        let file = std::fs::File::create(path).map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(Self {
            file,
            records: Vec::new(),
        })
    }

    pub(crate) fn push(&mut self, record: Record) {
        let line = record.to_json();
        eprintln!("bench: {line}");
        let _ = writeln!(self.file, "{line}");
        let _ = self.file.flush();
        self.records.push(record);
    }
}

/// Median, min and max of `values` (NaN when empty).
pub(crate) fn stats(values: &[f64]) -> (f64, f64, f64) {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return (f64::NAN, f64::NAN, f64::NAN);
    }
    v.sort_by(f64::total_cmp);
    let median = if v.len() % 2 == 1 {
        v[v.len() / 2]
    } else {
        (v[v.len() / 2 - 1] + v[v.len() / 2]) / 2.0
    };
    (median, v[0], v[v.len() - 1])
}

/// `median (min–max)` with `digits` decimals; `–` when there is nothing.
pub(crate) fn fmt_stats(values: &[f64], digits: usize) -> String {
    let (median, min, max) = stats(values);
    if median.is_nan() {
        return "–".to_owned();
    }
    if values.len() < 2 {
        return format!("{median:.digits$}");
    }
    format!("{median:.digits$} ({min:.digits$}–{max:.digits$})")
}

/// The values of `key` for (test, target), in repetition order.
pub(crate) fn series(records: &[Record], test: &str, target: &str, key: &str) -> Vec<f64> {
    let mut found: Vec<(usize, f64)> = records
        .iter()
        .filter(|r| r.test == test && r.target == target)
        .filter_map(|r| Some((r.rep, *r.values.get(key)?)))
        .collect();
    found.sort_by_key(|(rep, _)| *rep);
    found.into_iter().map(|(_, v)| v).collect()
}

/// Per repetition, `key` of (test, target) divided by `key` of
/// (base_test, base_target) in the same repetition.
pub(crate) fn ratios(
    records: &[Record],
    test: &str,
    target: &str,
    base_test: &str,
    base_target: &str,
    key: &str,
) -> Vec<f64> {
    let value = |t: &str, tg: &str, rep: usize| {
        records
            .iter()
            .find(|r| r.test == t && r.target == tg && r.rep == rep)
            .and_then(|r| r.values.get(key).copied())
    };
    let mut reps: Vec<usize> = records
        .iter()
        .filter(|r| r.test == test && r.target == target)
        .map(|r| r.rep)
        .collect();
    reps.sort_unstable();
    reps.dedup();
    reps.into_iter()
        .filter_map(|rep| Some(value(test, target, rep)? / value(base_test, base_target, rep)?))
        .collect()
}
