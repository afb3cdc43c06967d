//! The exposition of a report's series: the Prometheus text format
//! (0.0.4), or OpenMetrics when the scrape's `Accept` asks for it, both
//! encoded by `prometheus-client`.
//!
//! Owns: the choice of format from an `Accept` header, and the encoding of
//! every family of [`Family::ALL`], in that order, with its HELP and TYPE
//! lines even when it has no series yet. Must never: serve a series under a
//! family it does not belong to, or a label its family does not declare (a
//! malformed series is left out and logged).

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

use command::proto::MetricSeries;

use super::families::{Family, Kind};

/// The format a scrape is answered in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// The Prometheus text format, 0.0.4: what `curl` and `promtool` get.
    Text,
    /// OpenMetrics 1.0.0 text: what Prometheus asks for first.
    OpenMetrics,
}

impl Format {
    /// OpenMetrics when `accept` lists `application/openmetrics-text` with a
    /// quality above 0; the Prometheus text format otherwise.
    pub fn negotiate(accept: Option<&str>) -> Self {
        let asks = accept.is_some_and(|accept| {
            accept.split(',').any(|range| {
                let mut parts = range.split(';').map(str::trim);
                let media = parts.next().unwrap_or_default();
                let refused = parts.any(|p| {
                    p.strip_prefix("q=")
                        .and_then(|q| q.parse::<f64>().ok())
                        .is_some_and(|q| q <= 0.0)
                });
                media.eq_ignore_ascii_case("application/openmetrics-text") && !refused
            })
        });
        if asks { Self::OpenMetrics } else { Self::Text }
    }

    /// The answer's `Content-Type`.
    pub fn content_type(self) -> &'static str {
        match self {
            Self::Text => prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
            Self::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        }
    }
}

/// A report's series, grouped by family, as the registry's one collector.
#[derive(Debug)]
struct Families {
    by_family: Vec<(Family, Vec<MetricSeries>)>,
}

/// The labels of `series` in its family's order, or `None` when they are
/// not exactly the family's.
fn ordered_labels(family: Family, series: &MetricSeries) -> Option<Vec<(&'static str, &str)>> {
    if series.labels.len() != family.labels().len() {
        return None;
    }
    family
        .labels()
        .iter()
        .map(|label| {
            let name = label.as_str();
            series.labels.get(name).map(|value| (name, value.as_str()))
        })
        .collect()
}

impl Collector for Families {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        for (family, series) in &self.by_family {
            let (kind, name) = match family.kind() {
                // The encoders add `_total` to a counter's samples.
                Kind::Counter => (
                    MetricType::Counter,
                    family
                        .name()
                        .strip_suffix("_total")
                        .unwrap_or(family.name()),
                ),
                Kind::Gauge => (MetricType::Gauge, family.name()),
                Kind::Histogram => (MetricType::Histogram, family.name()),
            };
            let mut metric = encoder.encode_descriptor(name, family.help(), None, kind)?;
            for one in series {
                let Some(labels) = ordered_labels(*family, one) else {
                    log::warn!(
                        "metrics: a {} series with labels {:?} left out: its family's labels are {:?}",
                        family.name(),
                        one.labels,
                        family.labels()
                    );
                    continue;
                };
                let mut sample = metric.encode_family(&labels)?;
                match family.histogram() {
                    Some((bounds, per_unit)) => {
                        let buckets: Vec<(f64, u64)> = bounds
                            .iter()
                            .map(|bound| *bound as f64 / per_unit)
                            .chain([f64::INFINITY])
                            .zip(one.buckets.iter().copied().chain(std::iter::repeat(0)))
                            .collect();
                        let count = one.buckets.iter().fold(0u64, |n, b| n.saturating_add(*b));
                        sample.encode_histogram::<NoLabelSet>(
                            one.sum as f64 / per_unit,
                            count,
                            &buckets,
                            None,
                        )?;
                    }
                    None if kind == MetricType::Counter => {
                        ConstCounter::new(u64::try_from(one.value).unwrap_or(0)).encode(sample)?;
                    }
                    None => ConstGauge::new(one.value).encode(sample)?,
                }
            }
        }
        Ok(())
    }
}

/// `series` in `format`: every family of [`Family::ALL`], each with its
/// series; series of an unknown family are left out.
pub fn render(series: &[MetricSeries], format: Format) -> String {
    let by_family = Family::ALL
        .into_iter()
        .map(|family| {
            let mine = series
                .iter()
                .filter(|s| s.family == family.name())
                .cloned()
                .collect();
            (family, mine)
        })
        .collect();
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Families { by_family }));
    let mut out = String::new();
    let encoded = match format {
        Format::Text => prometheus_client::encoding::prometheus_text::encode(&mut out, &registry),
        Format::OpenMetrics => prometheus_client::encoding::text::encode(&mut out, &registry),
    };
    // Writing to a String cannot fail; an encoder's error would be a bug
    // of the crate, answered as what was encoded so far.
    if let Err(e) = encoded {
        log::error!("metrics: encoding failed: {e}");
    }
    out
}

#[cfg(test)]
mod tests {
    use command::proto::MetricSeries;

    use super::{Format, render};
    use crate::metrics::families::{DURATION_BOUNDS_US, Family, Label};
    use crate::metrics::series::plain;

    #[test]
    fn openmetrics_only_when_asked_for() {
        let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;\
                          version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(Format::negotiate(Some(prometheus)), Format::OpenMetrics);
        assert_eq!(Format::negotiate(None), Format::Text);
        assert_eq!(Format::negotiate(Some("*/*")), Format::Text);
        assert_eq!(Format::negotiate(Some("text/plain")), Format::Text);
        assert_eq!(
            Format::negotiate(Some("application/openmetrics-text; q=0")),
            Format::Text
        );
    }

    fn sample() -> Vec<MetricSeries> {
        let mut buckets = vec![0; DURATION_BOUNDS_US.len() + 1];
        buckets[3] = 2;
        vec![
            plain(
                Family::PrereadRejected,
                &[
                    (Label::Listener, "127.0.0.1:8443"),
                    (Label::Reason, "not_tls"),
                ],
                3,
            ),
            plain(
                Family::BackendUp,
                &[(Label::Cluster, "alpha"), (Label::Backend, "alpha-0")],
                1,
            ),
            MetricSeries {
                family: Family::PrereadDuration.name().to_owned(),
                labels: [("listener".to_owned(), "127.0.0.1:8443".to_owned())].into(),
                buckets,
                sum: 1_500,
                ..MetricSeries::default()
            },
            // Not the family's labels: left out.
            plain(Family::BackendUp, &[(Label::Cluster, "alpha")], 1),
        ]
    }

    #[test]
    fn the_text_format_names_counters_with_total_and_serves_every_family() {
        let text = render(&sample(), Format::Text);
        assert!(text.contains(
            "# TYPE preread_preread_rejected_total counter\n\
             preread_preread_rejected_total{listener=\"127.0.0.1:8443\",reason=\"not_tls\"} 3\n"
        ));
        assert!(text.contains("preread_backend_up{cluster=\"alpha\",backend=\"alpha-0\"} 1\n"));
        assert!(text.contains(
            "preread_preread_duration_seconds_bucket{listener=\"127.0.0.1:8443\",le=\"0.001\"} 2\n"
        ));
        assert!(text.contains(
            "preread_preread_duration_seconds_sum{listener=\"127.0.0.1:8443\"} 0.0015\n"
        ));
        assert!(text.contains(
            "preread_preread_duration_seconds_bucket{listener=\"127.0.0.1:8443\",le=\"+Inf\"} 2\n"
        ));
        assert_eq!(text.matches("preread_backend_up{").count(), 1);
        for family in Family::ALL {
            assert!(
                text.contains(&format!("# HELP {} ", family.name())),
                "{family:?}"
            );
            assert!(
                text.contains(&format!("# TYPE {} ", family.name())),
                "{family:?}"
            );
        }
        assert!(!text.contains("# EOF"));
    }

    #[test]
    fn openmetrics_declares_counters_without_total_and_ends_with_eof() {
        let text = render(&sample(), Format::OpenMetrics);
        assert!(text.contains("# TYPE preread_preread_rejected counter\n"));
        assert!(text.contains("preread_preread_rejected_total{"));
        assert!(text.ends_with("# EOF\n"));
    }
}
