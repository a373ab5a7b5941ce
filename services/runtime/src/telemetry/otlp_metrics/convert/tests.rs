use std::time::{Duration, SystemTime};

use opentelemetry_proto::tonic::metrics::v1::{Metric, metric, number_data_point};

use super::*;
use crate::metrics::{Metrics, Scope, scoped};

const BOT: &str = "机器人-α 🤖";

fn exported(m: &Metrics) -> Vec<Metric> {
    let resource = crate::telemetry::resource("nanobot-agent", |_| None);
    let start = SystemTime::now() - Duration::from_secs(5);
    let request = request(m.snapshot(), &resource, start, SystemTime::now());
    let [resource_metrics] = &request.resource_metrics[..] else {
        panic!("one resource: {request:?}");
    };
    let attributes = &resource_metrics.resource.as_ref().unwrap().attributes;
    assert!(attributes.iter().any(|kv| kv.key == "nanobot.role"));
    resource_metrics.scope_metrics[0].metrics.clone()
}

fn find<'a>(metrics: &'a [Metric], name: &str) -> &'a metric::Data {
    let metric = metrics.iter().find(|m| m.name == name);
    metric
        .and_then(|m| m.data.as_ref())
        .unwrap_or_else(|| panic!("{name} missing from {metrics:#?}"))
}

fn label<'a>(attributes: &'a [KeyValue], key: &str) -> Option<&'a str> {
    let kv = attributes.iter().find(|kv| kv.key == key)?;
    match kv.value.as_ref()?.value.as_ref()? {
        any_value::Value::StringValue(s) => Some(s),
        _ => None,
    }
}

#[tokio::test]
async fn counters_histograms_and_gauges_keep_the_names_and_labels_of_the_metrics_page() {
    let m = Metrics::new();
    m.serve_bots([BOT.to_string()]);
    let work = async {
        m.turn("answered", Duration::from_millis(30));
        m.turn("answered", Duration::from_millis(300));
        m.llm_call(
            "custom",
            "模型-🚀",
            Duration::from_millis(10),
            (120, 7),
            None,
        );
    };
    scoped(Scope::new(BOT, "telegram"), work).await;
    m.sessions_leased.set(3);
    let metrics = exported(&m);
    let text = m.render();
    for metric in &metrics {
        assert!(
            text.contains(&format!("# TYPE {} ", metric.name))
                || text.contains(&format!("{}{{", metric.name)),
            "{} is not a name of /metrics:\n{text}",
            metric.name
        );
    }
    let metric::Data::Sum(turns) = find(&metrics, "nanobot_turns_total") else {
        panic!("turns is not a sum");
    };
    assert!(turns.is_monotonic);
    assert_eq!(
        turns.aggregation_temporality,
        i32::from(AggregationTemporality::Cumulative)
    );
    let [point] = &turns.data_points[..] else {
        panic!("{turns:?}")
    };
    assert_eq!(label(&point.attributes, "bot"), Some(BOT));
    assert_eq!(label(&point.attributes, "channel"), Some("telegram"));
    assert_eq!(label(&point.attributes, "outcome"), Some("answered"));
    assert_eq!(point.value, Some(number_data_point::Value::AsDouble(2.0)));
    assert!(point.start_time_unix_nano < point.time_unix_nano);
    let metric::Data::Sum(tokens) = find(&metrics, "nanobot_llm_tokens_total") else {
        panic!("tokens is not a sum");
    };
    let input = tokens
        .data_points
        .iter()
        .find(|p| label(&p.attributes, "type") == Some("input"))
        .unwrap();
    assert_eq!(label(&input.attributes, "model"), Some("模型-🚀"));
    assert_eq!(input.value, Some(number_data_point::Value::AsDouble(120.0)));

    let metric::Data::Histogram(latency) = find(&metrics, "nanobot_turn_duration_seconds") else {
        panic!("turn duration is not a histogram");
    };
    let unit = metrics
        .iter()
        .find(|m| m.name == "nanobot_turn_duration_seconds");
    assert_eq!(unit.unwrap().unit, "s");
    let h = &latency.data_points[0];
    assert_eq!(h.count, 2);
    assert!((h.sum.unwrap() - 0.33).abs() < 1e-9);
    assert_eq!(h.bucket_counts.len(), h.explicit_bounds.len() + 1);
    assert_eq!(h.bucket_counts.iter().sum::<u64>(), 2);
    // Each observation sits in the first bucket whose bound holds it (0.04 and 0.32).
    for (bound, expected) in [(0.04, 1), (0.32, 1), (0.02, 0)] {
        let i = h.explicit_bounds.iter().position(|b| *b == bound).unwrap();
        assert_eq!(h.bucket_counts[i], expected, "bucket {bound}: {h:?}");
    }
    let metric::Data::Gauge(leased) = find(&metrics, "nanobot_sessions_leased") else {
        panic!("sessions leased is not a gauge");
    };
    assert_eq!(
        leased.data_points[0].value,
        Some(number_data_point::Value::AsDouble(3.0))
    );
}

#[test]
fn families_without_series_are_left_out() {
    let metrics = exported(&Metrics::new());
    let names: Vec<&str> = metrics.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(
        names,
        ["nanobot_sessions_leased"],
        "only the plain gauge has a value"
    );
}

#[test]
fn cumulative_buckets_become_each_buckets_own_count() {
    let bucket = |upper_bound: f64, cumulative_count: u64| prom::Bucket {
        upper_bound,
        cumulative_count,
        ..Default::default()
    };
    let with_inf = [
        bucket(0.1, 2),
        bucket(1.0, 2),
        bucket(10.0, 5),
        bucket(f64::INFINITY, 6),
    ];
    assert_eq!(
        buckets(&with_inf, 6),
        (vec![0.1, 1.0, 10.0], vec![2, 0, 3, 1])
    );
    // Prometheus may leave +Inf out: it holds the count.
    assert_eq!(
        buckets(&with_inf[..3], 6),
        (vec![0.1, 1.0, 10.0], vec![2, 0, 3, 1])
    );
    assert_eq!(buckets(&[], 4), (vec![], vec![4]));
}
