//! Metrics over OTLP beside `/metrics` (issue 32): the gateway and agent send the registry
//! `/metrics` serves to the suite's collector on loopback ([`OtlpCollector`]), configured
//! as spans are (the same keys and `OTEL_EXPORTER_OTLP_*`, the `…_METRICS_*` overrides,
//! `OTEL_METRIC_EXPORT_INTERVAL`), with the same names and labels.

use std::time::Duration;

use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use opentelemetry_proto::tonic::metrics::v1::number_data_point::Value as Number;
use opentelemetry_proto::tonic::metrics::v1::{AggregationTemporality, Metric, metric};
use opentelemetry_proto::tonic::metrics::v1::{HistogramDataPoint, NumberDataPoint};
use serde_json::{Value, json};

use crate::harness::{Fleet, wait_until};
use crate::otlp_collector::{Export, OtlpCollector, TestPki};
use crate::scripted_llm::Reply;

/// An API key no log line may carry.
const KEY: &str = "mx-KEY-CANARY-7b3e";
const ROLES: [&str; 2] = ["gateway", "agent"];
/// The bot of the suite's default config.
const BOT: &str = "default";

/// Starts gateway + agent exporting to `endpoint` every `interval_ms`, with `extra` variables.
async fn fleet(endpoint: &str, interval_ms: &str, extra: &[(&str, &str)], config: Value) -> Fleet {
    let mut builder = Fleet::builder()
        .roles(&ROLES)
        .config(config)
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
        .env("OTEL_METRIC_EXPORT_INTERVAL", interval_ms);
    for (k, v) in extra {
        builder = builder.env(k, v);
    }
    builder.start().await.unwrap()
}

/// One API turn answered `answer`.
async fn turn(fleet: &mut Fleet, answer: &str) {
    fleet.llm.push(Reply::text(answer));
    let response: Value = reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", fleet.api_base()))
        .json(&json!({"messages": [{"role": "user", "content": "度量 📈"}]}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        response["choices"][0]["message"]["content"], answer,
        "{response}"
    );
}

fn label<'a>(
    attributes: &'a [opentelemetry_proto::tonic::common::v1::KeyValue],
    key: &str,
) -> Option<&'a str> {
    let kv = attributes.iter().find(|kv| kv.key == key)?;
    match kv.value.as_ref()?.value.as_ref()? {
        Any::StringValue(s) => Some(s),
        _ => None,
    }
}

fn of_role<'a>(exports: &'a [Export], role: &str) -> impl Iterator<Item = &'a Metric> {
    let role = format!("nanobot-{role}");
    exports
        .iter()
        .filter(move |e| e.resource.get("nanobot.role") == Some(&role))
        .flat_map(|e| &e.metrics)
}

/// The agent's answered-turn count of [`BOT`] on the API, as a cumulative monotonic sum.
fn turns_counted(exports: &[Export]) -> Option<f64> {
    of_role(exports, "agent")
        .filter(|m| m.name == "nanobot_turns_total")
        .filter_map(|m| match &m.data {
            Some(metric::Data::Sum(s))
                if s.is_monotonic
                    && s.aggregation_temporality
                        == i32::from(AggregationTemporality::Cumulative) =>
            {
                Some(&s.data_points)
            }
            _ => None,
        })
        .flatten()
        .filter(|p: &&NumberDataPoint| {
            label(&p.attributes, "bot") == Some(BOT)
                && label(&p.attributes, "channel") == Some("api")
                && label(&p.attributes, "outcome") == Some("answered")
        })
        .filter_map(|p| match p.value {
            Some(Number::AsDouble(x)) => Some(x),
            _ => None,
        })
        .reduce(f64::max)
}

/// The agent's turn-latency histogram points of [`BOT`].
fn turn_latency(exports: &[Export]) -> Vec<HistogramDataPoint> {
    of_role(exports, "agent")
        .filter(|m| m.name == "nanobot_turn_duration_seconds" && m.unit == "s")
        .filter_map(|m| match &m.data {
            Some(metric::Data::Histogram(h)) => Some(h.data_points.clone()),
            _ => None,
        })
        .flatten()
        .filter(|p| label(&p.attributes, "bot") == Some(BOT))
        .collect()
}

/// Waits until the agent has exported one answered turn (counter and histogram).
async fn wait_turn_exported(collector: &OtlpCollector) -> Vec<Export> {
    let done = || {
        let exports = collector.exports();
        turns_counted(&exports).is_some_and(|n| n >= 1.0)
            && turn_latency(&exports).iter().any(|p| p.count >= 1)
    };
    wait_until(|| async { done() }, Duration::from_secs(20))
        .await
        .unwrap_or_else(|_| panic!("no turn metrics arrived: {:#?}", collector.exports()));
    collector.exports()
}

fn assert_no_key_in_logs(fleet: &mut Fleet) {
    for role in ROLES {
        let logs = fleet.service(role).logs();
        assert!(
            !logs.contains(KEY),
            "{role} logged the otlp api key:\n{logs}"
        );
    }
}

fn metric_exports(exports: &[Export]) -> Vec<&Export> {
    exports.iter().filter(|e| !e.metrics.is_empty()).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_turns_counter_and_latency_reach_an_otlp_http_collector_with_the_auth_header() {
    let collector = OtlpCollector::start_http().await.unwrap();
    let headers = format!("authorization=Bearer%20{KEY}");
    let mut fleet = fleet(
        &collector.endpoint(),
        "200",
        &[("OTEL_EXPORTER_OTLP_HEADERS", &headers)],
        json!({}),
    )
    .await;
    turn(&mut fleet, "指标 ✅").await;
    let exports = wait_turn_exported(&collector).await;
    let latency = turn_latency(&exports);
    let point = latency.iter().find(|p| p.count >= 1).unwrap();
    assert_eq!(point.bucket_counts.len(), point.explicit_bounds.len() + 1);
    assert_eq!(point.bucket_counts.iter().sum::<u64>(), point.count);
    // The gateway sends its own, under its own role, the dependency families included.
    let bus_up = |exports: &[Export]| {
        of_role(exports, "gateway").any(|m| {
            m.name == "nanobot_bus_connected"
                && matches!(&m.data, Some(metric::Data::Gauge(g))
                    if g.data_points.iter().any(|p| p.value == Some(Number::AsDouble(1.0))))
        })
    };
    wait_until(
        || async { bus_up(&collector.exports()) },
        Duration::from_secs(20),
    )
    .await
    .expect("the gateway exports nanobot_bus_connected 1");
    let bearer = format!("Bearer {KEY}");
    for export in metric_exports(&collector.exports()) {
        assert_eq!(export.headers.get("authorization"), Some(&bearer));
        assert_eq!(export.headers["content-type"], "application/x-protobuf");
    }
    assert_no_key_in_logs(&mut fleet);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_turns_counter_and_latency_reach_a_grpc_collector_behind_tls_verified_by_the_ca_file() {
    let pki = TestPki::new().unwrap();
    let collector = OtlpCollector::start_tls(&pki).await.unwrap();
    let ca = pki.ca_path.to_str().unwrap().to_string();
    // The metrics variables win over the generic ones (http/protobuf, no CA, no key).
    let mut fleet = fleet(
        &collector.endpoint(),
        "200",
        &[
            ("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "grpc"),
            ("OTEL_EXPORTER_OTLP_METRICS_CERTIFICATE", &ca),
            (
                "OTEL_EXPORTER_OTLP_METRICS_HEADERS",
                &format!("x-api-key={KEY}"),
            ),
            // Spans stay off this test's collector: no CA for them.
            ("OTEL_TRACES_SAMPLER", "always_off"),
        ],
        json!({}),
    )
    .await;
    turn(&mut fleet, "gRPC 指标 🔐").await;
    let exports = wait_turn_exported(&collector).await;
    for export in metric_exports(&exports) {
        assert_eq!(export.headers["content-type"], "application/grpc");
        assert_eq!(
            export.headers.get("x-api-key").map(String::as_str),
            Some(KEY)
        );
    }
    assert_no_key_in_logs(&mut fleet);
}

/// The `telemetry` keys (CA, client certificate and key) serve metrics as they serve spans.
#[tokio::test(flavor = "multi_thread")]
async fn a_turns_counter_reaches_a_collector_requiring_a_client_certificate_from_the_config_keys() {
    let pki = TestPki::new().unwrap();
    let collector = OtlpCollector::start_mtls(&pki).await.unwrap();
    let path = |p: &std::path::Path| p.to_str().unwrap().to_string();
    let telemetry = json!({"telemetry": {
        "otlpCertificate": path(&pki.ca_path),
        "otlpClientCertificate": path(&pki.client_cert_path),
        "otlpClientKey": path(&pki.client_key_path),
        "otlpHeaders": {"x-api-key": KEY},
    }});
    let mut fleet = fleet(&collector.endpoint(), "200", &[], telemetry).await;
    turn(&mut fleet, "双向 📈").await;
    let exports = wait_turn_exported(&collector).await;
    for export in metric_exports(&exports) {
        assert_eq!(
            export.headers.get("x-api-key").map(String::as_str),
            Some(KEY)
        );
    }
    assert_no_key_in_logs(&mut fleet);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_last_interval_of_metrics_leaves_when_the_role_stops() {
    let collector = OtlpCollector::start_http().await.unwrap();
    // An hour between exports: only the one at shutdown can carry the turn.
    let mut fleet = fleet(&collector.endpoint(), "3600000", &[], json!({})).await;
    turn(&mut fleet, "再见 👋").await;
    assert_eq!(turns_counted(&collector.exports()), None);
    let agent = fleet.service("agent");
    agent.sigterm().unwrap();
    let status = agent.wait_exit(Duration::from_secs(10)).await;
    assert!(status.is_some_and(|s| s.success()), "{status:?}");
    let exports = collector.exports();
    assert_eq!(turns_counted(&exports), Some(1.0), "{exports:#?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_refused_metrics_export_is_one_warning_naming_the_endpoint_and_the_role_keeps_answering()
{
    let server = TestPki::new().unwrap();
    let other = TestPki::new().unwrap();
    let collector = OtlpCollector::start_tls(&server).await.unwrap();
    let wrong_ca = other.ca_path.to_str().unwrap().to_string();
    let mut fleet = fleet(
        &collector.endpoint(),
        "200",
        &[
            ("OTEL_EXPORTER_OTLP_CERTIFICATE", &wrong_ca),
            ("OTEL_EXPORTER_OTLP_HEADERS", &format!("x-api-key={KEY}")),
        ],
        json!({}),
    )
    .await;
    turn(&mut fleet, "first").await;
    let warning = "otlp metrics export failed; the next export carries the totals";
    let endpoint = format!("{}/v1/metrics", collector.endpoint());
    let logged = |fleet: &mut Fleet| {
        ROLES.iter().all(|r| {
            let logs = fleet.service(r).logs();
            logs.lines()
                .any(|l| l.contains(warning) && l.contains(&endpoint))
        })
    };
    wait_until(
        || {
            let done = logged(&mut fleet);
            async move { done }
        },
        Duration::from_secs(20),
    )
    .await
    .expect("each role logs the refused export with its endpoint");
    turn(&mut fleet, "second").await;
    assert!(
        collector.exports().is_empty(),
        "nothing passes a CA that did not sign the server"
    );
    assert_no_key_in_logs(&mut fleet);
}
