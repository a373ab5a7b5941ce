use std::collections::HashMap;

use super::*;

fn resolve(
    cfg: &TelemetryConfig,
    vars: &[(&str, &str)],
) -> anyhow::Result<Option<MetricsSettings>> {
    let vars: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    MetricsSettings::resolve(cfg, |name| vars.get(name).cloned())
}

const HTTP: [(&str, &str); 2] = [
    ("OTEL_EXPORTER_OTLP_ENDPOINT", "https://otlp.example/otlp/"),
    ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
];

#[test]
fn metrics_go_where_spans_go_with_the_metrics_path() {
    let s = resolve(&TelemetryConfig::default(), &HTTP)
        .unwrap()
        .unwrap();
    assert_eq!(s.otlp.endpoint, "https://otlp.example/otlp/v1/metrics");
    assert_eq!(s.otlp.protocol, Protocol::HttpProtobuf);
    assert_eq!(s.interval, DEFAULT_INTERVAL);
    let cfg = TelemetryConfig {
        otlp_endpoint: Some("http://collector:4318".into()),
        otlp_protocol: Some("http/protobuf".into()),
        ..Default::default()
    };
    let s = resolve(&cfg, &[]).unwrap().unwrap();
    assert_eq!(s.otlp.endpoint, "http://collector:4318/v1/metrics");
    assert_eq!(resolve(&TelemetryConfig::default(), &[]).unwrap(), None);
}

#[test]
fn metrics_variables_override_the_generic_ones_and_traces_variables_do_not_apply() {
    let mut vars = HTTP.to_vec();
    vars.extend([
        ("OTEL_EXPORTER_OTLP_HEADERS", "x-team=generic,x-key=generic"),
        (
            "OTEL_EXPORTER_OTLP_METRICS_HEADERS",
            "x-key=%E5%AF%86%E9%92%A5",
        ),
        ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "x-traces=only"),
        (
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "https://traces.example/v1/traces",
        ),
        ("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "grpc"),
        ("OTEL_EXPORTER_OTLP_METRICS_CERTIFICATE", "/metrics-ca.pem"),
        ("OTEL_METRIC_EXPORT_INTERVAL", "250"),
    ]);
    let s = resolve(&TelemetryConfig::default(), &vars)
        .unwrap()
        .unwrap();
    assert_eq!(s.otlp.protocol, Protocol::Grpc);
    assert_eq!(
        s.otlp.endpoint, "https://otlp.example/otlp/",
        "gRPC: no path"
    );
    let headers: Vec<(&str, &str)> = s
        .otlp
        .headers
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    assert_eq!(headers, [("x-key", "密钥"), ("x-team", "generic")]);
    assert_eq!(s.otlp.ca_file, Some("/metrics-ca.pem".into()));
    assert_eq!(s.interval, Duration::from_millis(250));
    vars.push((
        "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
        "https://metrics.example/custom/path",
    ));
    let s = resolve(&TelemetryConfig::default(), &vars)
        .unwrap()
        .unwrap();
    assert_eq!(s.otlp.endpoint, "https://metrics.example/custom/path");
}

#[test]
fn the_metrics_exporter_variable_turns_the_export_off_and_refuses_what_it_cannot_do() {
    for off in ["none", "prometheus", "none,prometheus"] {
        let mut vars = HTTP.to_vec();
        vars.push(("OTEL_METRICS_EXPORTER", off));
        assert_eq!(
            resolve(&TelemetryConfig::default(), &vars).unwrap(),
            None,
            "{off}"
        );
    }
    let mut vars = HTTP.to_vec();
    vars.push(("OTEL_METRICS_EXPORTER", "otlp, prometheus"));
    assert!(
        resolve(&TelemetryConfig::default(), &vars)
            .unwrap()
            .is_some()
    );
    vars.push(("OTEL_METRICS_EXPORTER", "console"));
    let err = resolve(&TelemetryConfig::default(), &vars).unwrap_err();
    assert!(err.to_string().contains("console"), "{err}");
}

#[test]
fn a_bad_export_interval_is_refused_with_its_name() {
    for bad in ["0", "-5", "1m", "十"] {
        let mut vars = HTTP.to_vec();
        vars.push(("OTEL_METRIC_EXPORT_INTERVAL", bad));
        let err = resolve(&TelemetryConfig::default(), &vars).unwrap_err();
        assert!(
            err.to_string().contains("OTEL_METRIC_EXPORT_INTERVAL"),
            "{err}"
        );
    }
}
