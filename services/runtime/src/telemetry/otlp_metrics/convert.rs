//! The registry's data ([`crate::metrics::Metrics::snapshot`]) as an OTLP
//! `ExportMetricsServiceRequest`, named and labelled as on `/metrics`: a counter is a
//! cumulative monotonic sum (`nanobot_turns_total`), a histogram a cumulative histogram
//! (`nanobot_turn_duration_seconds`, unit `s`), a gauge a gauge. Values are doubles, as in
//! Prometheus.

use std::time::{SystemTime, UNIX_EPOCH};

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope, KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::{
    AggregationTemporality, Gauge, Histogram, HistogramDataPoint, Metric, NumberDataPoint,
    ResourceMetrics, ScopeMetrics, Sum, metric, number_data_point,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::transform::common::tonic::ResourceAttributesWithSchema;

use crate::metrics::data_model::{self as prom, MetricType};

/// The instrumentation scope of every exported metric.
pub const SCOPE: &str = "nanobot";

/// Builds the request for `families`, taken at `now`; cumulative points count from `start`
/// (when the process's counters were 0).
pub fn request(
    families: Vec<prom::MetricFamily>,
    resource: &opentelemetry_sdk::Resource,
    start: SystemTime,
    now: SystemTime,
) -> ExportMetricsServiceRequest {
    let times = Times {
        start: nanos(start),
        now: nanos(now),
    };
    let metrics = families
        .into_iter()
        .filter_map(|family| convert(family, times))
        .collect();
    let resource = ResourceAttributesWithSchema::from(resource);
    ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: Some(Resource {
                attributes: resource.attributes.0,
                ..Default::default()
            }),
            scope_metrics: vec![ScopeMetrics {
                scope: Some(InstrumentationScope {
                    name: SCOPE.into(),
                    version: env!("CARGO_PKG_VERSION").into(),
                    ..Default::default()
                }),
                metrics,
                schema_url: String::new(),
            }],
            schema_url: resource.schema_url.unwrap_or_default(),
        }],
    }
}

#[derive(Clone, Copy)]
struct Times {
    start: u64,
    now: u64,
}

fn nanos(t: SystemTime) -> u64 {
    let since = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    u64::try_from(since.as_nanos()).unwrap_or(u64::MAX)
}

/// One family as one OTLP metric; `None` for a family without series yet, or of a type the
/// fleet does not use (summary, untyped).
fn convert(family: prom::MetricFamily, times: Times) -> Option<Metric> {
    let kind = MetricType::try_from(family.r#type).ok()?;
    let series = family.metric.into_iter();
    let data = match kind {
        MetricType::Counter => metric::Data::Sum(Sum {
            data_points: series
                .filter_map(|m| {
                    let value = m.counter?.value;
                    Some(number_point(m.label, value, times.start, times.now))
                })
                .collect(),
            aggregation_temporality: AggregationTemporality::Cumulative.into(),
            is_monotonic: true,
        }),
        MetricType::Gauge => metric::Data::Gauge(Gauge {
            data_points: series
                .filter_map(|m| Some(number_point(m.label, m.gauge?.value, 0, times.now)))
                .collect(),
        }),
        MetricType::Histogram => metric::Data::Histogram(Histogram {
            data_points: series
                .filter_map(|m| Some(histogram(m.label, m.histogram?, times)))
                .collect(),
            aggregation_temporality: AggregationTemporality::Cumulative.into(),
        }),
        _ => return None,
    };
    let empty = match &data {
        metric::Data::Sum(s) => s.data_points.is_empty(),
        metric::Data::Gauge(g) => g.data_points.is_empty(),
        metric::Data::Histogram(h) => h.data_points.is_empty(),
        _ => true,
    };
    (!empty).then(|| Metric {
        name: family.name,
        description: family.help,
        unit: ucum(&family.unit).into(),
        data: Some(data),
        ..Default::default()
    })
}

/// The OTLP (UCUM) unit of a Prometheus one.
fn ucum(unit: &str) -> &str {
    match unit {
        "seconds" => "s",
        "bytes" => "By",
        "" => "1",
        other => other,
    }
}

fn attributes(labels: Vec<prom::LabelPair>) -> Vec<KeyValue> {
    labels
        .into_iter()
        .map(|label| KeyValue {
            key: label.name,
            value: Some(AnyValue {
                value: Some(any_value::Value::StringValue(label.value)),
            }),
            ..Default::default()
        })
        .collect()
}

fn number_point(labels: Vec<prom::LabelPair>, value: f64, start: u64, now: u64) -> NumberDataPoint {
    NumberDataPoint {
        attributes: attributes(labels),
        start_time_unix_nano: start,
        time_unix_nano: now,
        value: Some(number_data_point::Value::AsDouble(value)),
        ..Default::default()
    }
}

fn histogram(labels: Vec<prom::LabelPair>, h: prom::Histogram, times: Times) -> HistogramDataPoint {
    let (explicit_bounds, bucket_counts) = buckets(&h.bucket, h.sample_count);
    HistogramDataPoint {
        attributes: attributes(labels),
        start_time_unix_nano: times.start,
        time_unix_nano: times.now,
        count: h.sample_count,
        sum: Some(h.sample_sum),
        explicit_bounds,
        bucket_counts,
        ..Default::default()
    }
}

/// OTLP's bounds (without `+Inf`) and each bucket's own count (one more than the bounds),
/// from Prometheus's cumulative buckets (`+Inf` optional there: it holds `count`).
fn buckets(buckets: &[prom::Bucket], count: u64) -> (Vec<f64>, Vec<u64>) {
    let mut bounds = Vec::with_capacity(buckets.len());
    let mut counts = Vec::with_capacity(buckets.len() + 1);
    let mut below = 0;
    for b in buckets.iter().filter(|b| b.upper_bound.is_finite()) {
        bounds.push(b.upper_bound);
        counts.push(b.cumulative_count.saturating_sub(below));
        below = below.max(b.cumulative_count);
    }
    counts.push(count.saturating_sub(below));
    (bounds, counts)
}

#[cfg(test)]
mod tests;
