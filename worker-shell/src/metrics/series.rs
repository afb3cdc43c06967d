//! A labelled series: a family and its label values. It is the key of a
//! worker's registry, and becomes a `proto::MetricSeries` in a report;
//! reports are summed here, series by series.
//!
//! Owns: the label values a series may hold (a listener's address, config
//! ids, fixed names) and their protobuf form. Must never: take a label
//! value from a client's bytes, or allocate to build the key of a series
//! that exists (ids are shared `Arc`s).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

use command::proto::MetricSeries;

use super::families::{Family, Kind, Label};

/// `direction` of bytes from clients.
pub const IN: &str = "in";
/// `direction` of bytes to clients.
pub const OUT: &str = "out";

/// A family with its label values; the unset ones are not labels of it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Series {
    family: Family,
    listener: Option<SocketAddr>,
    cluster: Option<Arc<str>>,
    backend: Option<Arc<str>>,
    reason: Option<&'static str>,
    direction: Option<&'static str>,
    from: Option<&'static str>,
}

impl Series {
    /// A series of a family without labels.
    pub fn of(family: Family) -> Self {
        Self {
            family,
            listener: None,
            cluster: None,
            backend: None,
            reason: None,
            direction: None,
            from: None,
        }
    }

    /// A series of a family labelled by `listener`.
    pub fn on(family: Family, listener: SocketAddr) -> Self {
        Self {
            listener: Some(listener),
            ..Self::of(family)
        }
    }

    /// A series of a family labelled by `cluster` and `backend`.
    pub fn backend(family: Family, cluster: &Arc<str>, backend: &Arc<str>) -> Self {
        Self {
            cluster: Some(Arc::clone(cluster)),
            backend: Some(Arc::clone(backend)),
            ..Self::of(family)
        }
    }

    /// With a `reason` label (a reason's stable name).
    #[must_use]
    pub fn reason(self, reason: &'static str) -> Self {
        Self {
            reason: Some(reason),
            ..self
        }
    }

    /// With a `cluster` label.
    #[must_use]
    pub fn cluster(self, cluster: &Arc<str>) -> Self {
        Self {
            cluster: Some(Arc::clone(cluster)),
            ..self
        }
    }

    /// With a `direction` label: [`IN`] or [`OUT`].
    #[must_use]
    pub fn direction(self, direction: &'static str) -> Self {
        Self {
            direction: Some(direction),
            ..self
        }
    }

    /// With a `from` label: the side that reset (`backend`, `client`).
    #[must_use]
    pub fn from(self, side: &'static str) -> Self {
        Self {
            from: Some(side),
            ..self
        }
    }

    /// The series' family.
    pub fn family(&self) -> Family {
        self.family
    }

    /// The listener it is labelled by, if any.
    pub fn listener_label(&self) -> Option<SocketAddr> {
        self.listener
    }

    /// The cluster it is labelled by, if any.
    pub fn cluster_label(&self) -> Option<&str> {
        self.cluster.as_deref()
    }

    /// The backend it is labelled by, if any.
    pub fn backend_label(&self) -> Option<&str> {
        self.backend.as_deref()
    }

    /// Whether it holds exactly the labels of its family: every series the
    /// proxy counts does (checked in debug builds).
    pub fn is_well_formed(&self) -> bool {
        let held = [
            (Label::Listener, self.listener.is_some()),
            (Label::Cluster, self.cluster.is_some()),
            (Label::Backend, self.backend.is_some()),
            (Label::Reason, self.reason.is_some()),
            (Label::Direction, self.direction.is_some()),
            (Label::From, self.from.is_some()),
        ];
        held.iter()
            .all(|(label, set)| *set == self.family.labels().contains(label))
    }

    /// The labels by name, as in a report.
    pub fn labels(&self) -> BTreeMap<String, String> {
        let mut labels = BTreeMap::new();
        let mut put = |label: Label, value: Option<String>| {
            if let Some(value) = value {
                labels.insert(label.as_str().to_owned(), value);
            }
        };
        put(Label::Listener, self.listener.map(|a| a.to_string()));
        put(Label::Cluster, self.cluster.as_deref().map(str::to_owned));
        put(Label::Backend, self.backend.as_deref().map(str::to_owned));
        put(Label::Reason, self.reason.map(str::to_owned));
        put(Label::Direction, self.direction.map(str::to_owned));
        put(Label::From, self.from.map(str::to_owned));
        labels
    }

    /// A counter's or gauge's value as a report's series.
    pub fn to_proto(&self, value: i64) -> MetricSeries {
        MetricSeries {
            family: self.family.name().to_owned(),
            labels: self.labels(),
            value,
            ..MetricSeries::default()
        }
    }
}

/// A report's series of `family` with `labels` (by name) and `value`.
pub fn plain(family: Family, labels: &[(Label, &str)], value: i64) -> MetricSeries {
    MetricSeries {
        family: family.name().to_owned(),
        labels: labels
            .iter()
            .map(|(label, value)| (label.as_str().to_owned(), (*value).to_owned()))
            .collect(),
        value,
        ..MetricSeries::default()
    }
}

/// Series summed by family and labels: counters and gauges add, histogram
/// buckets add bucket by bucket. Ordered by family name, then labels.
pub fn sum<'a>(series: impl IntoIterator<Item = &'a MetricSeries>) -> Vec<MetricSeries> {
    // One flat key per series, compared as bytes: a large proxy sums about
    // 100,000 series per scrape, and comparing label maps walks them on
    // every comparison. A NUL cannot be in a family name, a label name
    // or a label value (ids and addresses are printable), so the flat
    // keys order as (family, labels) do.
    let mut keyed: Vec<(Vec<u8>, &MetricSeries)> = series
        .into_iter()
        .map(|one| {
            let mut key = Vec::with_capacity(64);
            key.extend_from_slice(one.family.as_bytes());
            for (name, value) in &one.labels {
                key.push(0);
                key.extend_from_slice(name.as_bytes());
                key.push(0);
                key.extend_from_slice(value.as_bytes());
            }
            (key, one)
        })
        .collect();
    keyed.sort_by(|a, b| a.0.cmp(&b.0));
    let mut summed: Vec<MetricSeries> = Vec::with_capacity(keyed.len());
    let mut last: Option<&[u8]> = None;
    for (key, one) in &keyed {
        if last != Some(key.as_slice()) {
            summed.push(MetricSeries {
                family: one.family.clone(),
                labels: one.labels.clone(),
                ..MetricSeries::default()
            });
            last = Some(key.as_slice());
        }
        let Some(slot) = summed.last_mut() else {
            continue;
        };
        slot.value = slot.value.saturating_add(one.value);
        slot.sum = slot.sum.saturating_add(one.sum);
        if slot.buckets.len() < one.buckets.len() {
            slot.buckets.resize(one.buckets.len(), 0);
        }
        for (total, n) in slot.buckets.iter_mut().zip(&one.buckets) {
            *total = total.saturating_add(*n);
        }
    }
    summed
}

/// The sum of the values of `family`'s series in `series`.
pub fn family_total(series: &[MetricSeries], family: Family) -> i64 {
    debug_assert!(family.kind() != Kind::Histogram, "{family:?}");
    series
        .iter()
        .filter(|s| s.family == family.name())
        .fold(0i64, |total, s| total.saturating_add(s.value))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use command::proto::MetricSeries;

    use super::{Family, OUT, Series, family_total, sum};

    #[test]
    fn a_series_holds_the_labels_of_its_family() {
        let address = std::net::SocketAddr::from(([127, 0, 0, 1], 8443));
        let listener = Series::on(Family::ConnectionsAccepted, address);
        assert!(listener.is_well_formed());
        assert_eq!(listener.labels()["listener"], "127.0.0.1:8443");
        let (cluster, backend): (Arc<str>, Arc<str>) = ("alpha".into(), "alpha-0".into());
        let bytes = Series::backend(Family::BackendBytes, &cluster, &backend).direction(OUT);
        assert!(bytes.is_well_formed());
        assert_eq!(bytes.labels().len(), 3);
        assert!(!Series::of(Family::BackendBytes).is_well_formed());
        assert!(
            !Series::of(Family::SpliceFallbacks)
                .reason("x")
                .is_well_formed()
        );
    }

    #[test]
    fn reports_add_up_series_by_series() {
        let one = |family: Family, value: i64, buckets: Vec<u64>| MetricSeries {
            family: family.name().to_owned(),
            value,
            sum: buckets.iter().sum(),
            buckets,
            ..MetricSeries::default()
        };
        let summed = sum(&[
            one(Family::SpliceFallbacks, 2, vec![]),
            one(Family::SpliceFallbacks, 3, vec![]),
            one(Family::ClientHelloBytes, 0, vec![1, 2]),
            one(Family::ClientHelloBytes, 0, vec![1, 0, 4]),
        ]);
        assert_eq!(summed.len(), 2);
        assert_eq!(summed[0].family, "preread_client_hello_bytes");
        assert_eq!(summed[0].buckets, vec![2, 2, 4]);
        assert_eq!(summed[0].sum, 8);
        assert_eq!(family_total(&summed, Family::SpliceFallbacks), 5);
    }
}
