//! Helpers to encode families of constant samples read at scrape time: label sets,
//! single counters and gauges, and labelled families.

use std::borrow::Cow;
use std::fmt;

use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;

pub(super) type Labels = Vec<(Cow<'static, str>, Cow<'static, str>)>;

pub(super) fn labels(pairs: &[(&'static str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (Cow::Borrowed(*k), Cow::Owned(v.to_string())))
        .collect()
}

pub(super) fn counter(enc: &mut DescriptorEncoder, name: &str, help: &str, v: u64) -> fmt::Result {
    let c = ConstCounter::new(v);
    let m = enc.encode_descriptor(name, help, None, c.metric_type())?;
    c.encode(m)
}

pub(super) fn counter_f64(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    v: f64,
) -> fmt::Result {
    let c = ConstCounter::new(v);
    let m = enc.encode_descriptor(name, help, None, c.metric_type())?;
    c.encode(m)
}

pub(super) fn gauge(enc: &mut DescriptorEncoder, name: &str, help: &str, v: i64) -> fmt::Result {
    let g = ConstGauge::new(v);
    let m = enc.encode_descriptor(name, help, None, g.metric_type())?;
    g.encode(m)
}

/// One metric family: `(labels, value)` samples of one type.
pub(super) fn family(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    kind: MetricType,
    samples: &[(Labels, u64)],
) -> fmt::Result {
    let mut m = enc.encode_descriptor(name, help, None, kind)?;
    for (l, v) in samples {
        let s = m.encode_family(l)?;
        match kind {
            MetricType::Counter => ConstCounter::new(*v).encode(s)?,
            _ => ConstGauge::new(i64::try_from(*v).unwrap_or(i64::MAX)).encode(s)?,
        }
    }
    Ok(())
}

pub(super) const CLASSES: [&str; 5] = ["1xx", "2xx", "3xx", "4xx", "5xx"];
