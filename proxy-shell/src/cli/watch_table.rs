//! What one refresh of `preread metrics get --watch` shows: the rows, each
//! counter's rate per second since the refresh before, and their layout as
//! an aligned table or as one JSON line.
//!
//! Owns: the selection of rows (`--filter`, `--hide-zero`), the rate rule
//! (counters only, by the flat view's gauge rule; a counter that went
//! down was reset by a new proxy process, so its whole value is the
//! increase), the header and outage lines, and cutting a frame to the
//! screen. Must never: read a clock, a terminal or a socket: the caller
//! passes the time as text, the elapsed time and the screen's size, so
//! tests drive these functions with exact numbers.

use std::collections::BTreeMap;
use std::time::Duration;

use command::duration;
use serde_json::{Map, Value, json};

use preread_worker::metrics::flat::is_gauge;

/// Which metrics a refresh shows.
#[derive(Debug, Clone, Default)]
pub(super) struct Selection {
    /// Only names containing this text.
    pub(super) filter: Option<String>,
    /// Leave out names that are 0 and did not move.
    pub(super) hide_zero: bool,
}

/// The refresh a rate is computed against.
#[derive(Debug, Clone, Copy)]
pub(super) struct Previous<'a> {
    /// Its totals.
    pub(super) total: &'a BTreeMap<String, i64>,
    /// The time from its answer to the current one.
    pub(super) elapsed: Duration,
}

/// One metric of a refresh.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Row {
    pub(super) name: String,
    pub(super) value: i64,
    /// Per second since the previous refresh; `None` for a gauge, and for
    /// every name on the first refresh.
    pub(super) rate: Option<f64>,
}

/// What the header line says about a refresh.
#[derive(Debug, Clone, Copy)]
pub(super) struct Frame<'a> {
    /// When the answer came, as text (UTC).
    pub(super) at: &'a str,
    pub(super) interval_ms: u64,
    pub(super) workers: usize,
    /// Every metric of the answer, shown or not.
    pub(super) metrics: usize,
    pub(super) filter: Option<&'a str>,
}

/// The rows of a refresh of `current`, by name, as `selection` keeps them.
pub(super) fn rows(
    previous: Option<Previous<'_>>,
    current: &BTreeMap<String, i64>,
    selection: &Selection,
) -> Vec<Row> {
    current
        .iter()
        .filter(|(name, _)| {
            selection
                .filter
                .as_deref()
                .is_none_or(|text| name.contains(text))
        })
        .map(|(name, &value)| Row {
            name: name.clone(),
            value,
            rate: previous.and_then(|previous| rate(name, value, previous)),
        })
        .filter(|row| !(selection.hide_zero && row.value == 0 && row.rate.is_none_or(|r| r == 0.0)))
        .collect()
}

/// The rate of counter `name` at `value`; `None` for a gauge or when no
/// time passed. A name the previous refresh lacked was registered since,
/// from 0.
fn rate(name: &str, value: i64, previous: Previous<'_>) -> Option<f64> {
    if is_gauge(name) || previous.elapsed.is_zero() {
        return None;
    }
    let before = previous.total.get(name).copied().unwrap_or(0);
    let increase = if value >= before {
        value - before
    } else {
        value
    };
    Some(increase as f64 / previous.elapsed.as_secs_f64())
}

/// `2025-12-01T18:00:23Z  every 2s  2 worker(s)  40 metric(s)`, with the
/// number shown and the filter when some are left out.
pub(super) fn header_line(frame: &Frame<'_>, shown: usize) -> String {
    let mut line = format!(
        "{}  every {}  {} worker(s)  ",
        frame.at,
        duration::shown(frame.interval_ms),
        frame.workers
    );
    if shown == frame.metrics {
        line.push_str(&format!("{} metric(s)", frame.metrics));
    } else {
        line.push_str(&format!("{shown} of {} metric(s)", frame.metrics));
    }
    if let Some(filter) = frame.filter {
        line.push_str(&format!("  filter {filter:?}"));
    }
    line
}

/// The rate as the table shows it: one decimal, blank without a rate.
fn shown_rate(rate: Option<f64>) -> String {
    rate.map_or_else(String::new, |rate| format!("{rate:.1}"))
}

/// `METRIC VALUE RATE/S`, then one line per row: names left-aligned,
/// numbers right-aligned, so digits of the same weight line up.
pub(super) fn table_lines(rows: &[Row]) -> Vec<String> {
    const HEADER: [&str; 3] = ["METRIC", "VALUE", "RATE/S"];
    let cells: Vec<[String; 3]> = rows
        .iter()
        .map(|row| {
            [
                row.name.clone(),
                row.value.to_string(),
                shown_rate(row.rate),
            ]
        })
        .collect();
    let mut widths = HEADER.map(|h| h.chars().count());
    for row in &cells {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let [name_w, value_w, rate_w] = widths;
    let line = |[name, value, rate]: [&str; 3]| {
        format!("{name:<name_w$}  {value:>value_w$}  {rate:>rate_w$}")
            .trim_end()
            .to_owned()
    };
    std::iter::once(line(HEADER))
        .chain(
            cells
                .iter()
                .map(|[name, value, rate]| line([name, value, rate])),
        )
        .collect()
}

/// The line that replaces a refresh while the proxy does not answer.
pub(super) fn outage_line(since: &str, failures: u32, why: &str, interval_ms: u64) -> String {
    format!(
        "proxy unreachable since {since} ({failures} failed refresh(es)): {why}; retrying every {}",
        duration::shown(interval_ms)
    )
}

/// `lines` cut to a screen of `columns` × `rows`, keeping the last row
/// free so that the final newline never scrolls the frame, and the last
/// column free so that clearing the rest of a line never erases its last
/// character (a terminal leaves the cursor on the last column it wrote);
/// what did not fit is counted on the last line kept. `None` (no terminal
/// size): as is.
pub(super) fn fit(mut lines: Vec<String>, screen: Option<(usize, usize)>) -> Vec<String> {
    let Some((columns, rows)) = screen else {
        return lines;
    };
    let room = rows.saturating_sub(1).max(1);
    if lines.len() > room {
        let kept = room.saturating_sub(1);
        let left_out = lines.len() - kept;
        lines.truncate(kept);
        lines.push(format!(
            "… {left_out} more line(s): narrow with --filter or --hide-zero, or enlarge the terminal"
        ));
    }
    let width = columns.saturating_sub(1).max(1);
    for line in &mut lines {
        if let Some((cut, _)) = line.char_indices().nth(width) {
            line.truncate(cut);
        }
    }
    lines
}

/// One refresh as one JSON object: `ts`, `interval_ms`, `elapsed_ms`
/// (since the previous refresh; `null` on the first), `workers`,
/// `values` by name, and `rates` per second of the counters that have one
/// (to the thousandth).
pub(super) fn json_line(frame: &Frame<'_>, elapsed: Option<Duration>, rows: &[Row]) -> Value {
    let values: Map<String, Value> = rows
        .iter()
        .map(|row| (row.name.clone(), json!(row.value)))
        .collect();
    let rates: Map<String, Value> = rows
        .iter()
        .filter_map(|row| {
            let rate = (row.rate? * 1000.0).round() / 1000.0;
            Some((row.name.clone(), json!(rate)))
        })
        .collect();
    json!({
        "ts": frame.at,
        "interval_ms": frame.interval_ms,
        "elapsed_ms": elapsed.map(|e| u64::try_from(e.as_millis()).unwrap_or(u64::MAX)),
        "workers": frame.workers,
        "values": values,
        "rates": rates,
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::time::Duration;

    use super::{Frame, Previous, Row, Selection, fit, header_line, json_line, rows, table_lines};

    fn totals(pairs: &[(&str, i64)]) -> BTreeMap<String, i64> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect()
    }

    fn frame(metrics: usize, filter: Option<&str>) -> Frame<'_> {
        Frame {
            at: "2025-12-01T18:00:23Z",
            interval_ms: 2_000,
            workers: 2,
            metrics,
            filter,
        }
    }

    #[test]
    fn counters_get_a_rate_per_second_and_gauges_none() {
        let before = totals(&[("tcp.accepted", 10), ("tcp.active", 4), ("bytes_in", 1_000)]);
        let now = totals(&[
            ("tcp.accepted", 15),
            ("tcp.active", 9),
            ("bytes_in", 1_000),
            ("backend.b-0.bytes_in", 30),
        ]);
        let previous = Previous {
            total: &before,
            elapsed: Duration::from_millis(2_000),
        };
        let got = rows(Some(previous), &now, &Selection::default());
        let rate_of = |name: &str| got.iter().find(|r| r.name == name).and_then(|r| r.rate);
        assert_eq!(rate_of("tcp.accepted"), Some(2.5));
        assert_eq!(rate_of("tcp.active"), None, "a gauge has no rate");
        assert_eq!(rate_of("bytes_in"), Some(0.0));
        assert_eq!(
            rate_of("backend.b-0.bytes_in"),
            Some(15.0),
            "a name registered since counts from 0"
        );
        let names: Vec<&str> = got.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "backend.b-0.bytes_in",
                "bytes_in",
                "tcp.accepted",
                "tcp.active"
            ]
        );
    }

    #[test]
    fn the_first_refresh_and_a_reset_counter() {
        let now = totals(&[("tcp.accepted", 6)]);
        let first = rows(None, &now, &Selection::default());
        assert_eq!(
            first,
            [Row {
                name: "tcp.accepted".into(),
                value: 6,
                rate: None
            }]
        );
        let before = totals(&[("tcp.accepted", 100)]);
        let restarted = rows(
            Some(Previous {
                total: &before,
                elapsed: Duration::from_millis(500),
            }),
            &now,
            &Selection::default(),
        );
        assert_eq!(restarted[0].rate, Some(12.0), "a new process counts from 0");
        let no_time = rows(
            Some(Previous {
                total: &before,
                elapsed: Duration::ZERO,
            }),
            &now,
            &Selection::default(),
        );
        assert_eq!(no_time[0].rate, None);
    }

    #[test]
    fn filter_and_hide_zero_keep_the_table_short() {
        let before = totals(&[
            ("tcp.sni_preread.rejected.not_tls", 3),
            ("tcp.sni_preread.rejected.no_sni", 0),
            ("tcp.sni_preread.rejected.too_large", 2),
            ("tcp.accepted", 9),
        ]);
        let now = totals(&[
            ("tcp.sni_preread.rejected.not_tls", 3),
            ("tcp.sni_preread.rejected.no_sni", 0),
            ("tcp.sni_preread.rejected.too_large", 4),
            ("tcp.accepted", 12),
        ]);
        let previous = Some(Previous {
            total: &before,
            elapsed: Duration::from_secs(1),
        });
        let selection = Selection {
            filter: Some("rejected".into()),
            hide_zero: true,
        };
        let names: Vec<String> = rows(previous, &now, &selection)
            .into_iter()
            .map(|r| r.name)
            .collect();
        assert_eq!(
            names,
            [
                "tcp.sni_preread.rejected.not_tls",
                "tcp.sni_preread.rejected.too_large"
            ],
            "a 0 that did not move is hidden; a value that stands still is not"
        );
        let zero_gauge = totals(&[("tcp.active", 0)]);
        let hide = Selection {
            filter: None,
            hide_zero: true,
        };
        assert!(rows(None, &zero_gauge, &hide).is_empty());
    }

    #[test]
    fn the_table_aligns_names_left_and_numbers_right() {
        let table = table_lines(&[
            Row {
                name: "tcp.accepted".into(),
                value: 1_234,
                rate: Some(12.26),
            },
            Row {
                name: "tcp.active".into(),
                value: 7,
                rate: None,
            },
            Row {
                name: "tcp.sni_preread.routed".into(),
                value: 5,
                rate: Some(0.0),
            },
        ]);
        assert_eq!(
            table,
            [
                "METRIC                  VALUE  RATE/S",
                "tcp.accepted             1234    12.3",
                "tcp.active                  7",
                "tcp.sni_preread.routed      5     0.0",
            ]
        );
    }

    #[test]
    fn the_header_says_when_where_and_how_much_is_shown() {
        assert_eq!(
            header_line(&frame(40, None), 40),
            "2025-12-01T18:00:23Z  every 2s  2 worker(s)  40 metric(s)"
        );
        assert_eq!(
            header_line(&frame(40, Some("rejected")), 11),
            "2025-12-01T18:00:23Z  every 2s  2 worker(s)  11 of 40 metric(s)  filter \"rejected\""
        );
    }

    #[test]
    fn a_frame_fits_the_screen_with_a_count_of_what_did_not() {
        let lines: Vec<String> = (0..10).map(|i| format!("line-{i}-abcdef")).collect();
        assert_eq!(fit(lines.clone(), None), lines);
        let cut = fit(lines.clone(), Some((9, 6)));
        assert_eq!(cut.len(), 5, "the last screen row stays free: {cut:?}");
        assert_eq!(
            &cut[..4],
            ["line-0-a", "line-1-a", "line-2-a", "line-3-a"],
            "the last column stays free"
        );
        assert_eq!(cut[4], "… 6 more", "{cut:?}");
        assert_eq!(fit(lines[..3].to_vec(), Some((80, 24))), lines[..3]);
    }

    #[test]
    fn a_json_line_carries_values_and_the_rates_of_counters() {
        let got = json_line(
            &frame(3, None),
            Some(Duration::from_millis(2_001)),
            &[
                Row {
                    name: "tcp.accepted".into(),
                    value: 5,
                    rate: Some(2.0 / 3.0),
                },
                Row {
                    name: "tcp.active".into(),
                    value: 1,
                    rate: None,
                },
            ],
        );
        assert_eq!(
            got.to_string(),
            r#"{"ts":"2025-12-01T18:00:23Z","interval_ms":2000,"elapsed_ms":2001,"workers":2,"values":{"tcp.accepted":5,"tcp.active":1},"rates":{"tcp.accepted":0.667}}"#
        );
        let first = json_line(&frame(0, None), None, &[]);
        assert_eq!(first["elapsed_ms"], serde_json::Value::Null);
    }
}
