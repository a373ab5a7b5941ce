use std::collections::HashMap;

use super::*;

fn resolve(cfg: &TelemetryConfig, vars: &[(&str, &str)]) -> anyhow::Result<Option<OtlpSettings>> {
    let vars: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    OtlpSettings::resolve(cfg, |name| vars.get(name).cloned())
}

#[test]
fn without_an_endpoint_nothing_is_exported() {
    let cfg = TelemetryConfig::default();
    assert_eq!(
        resolve(&cfg, &[("OTEL_EXPORTER_OTLP_HEADERS", "a=b")]).unwrap(),
        None
    );
    assert_eq!(
        resolve(&cfg, &[("OTEL_EXPORTER_OTLP_ENDPOINT", " ")]).unwrap(),
        None,
        "empty is unset"
    );
}

#[test]
fn the_generic_http_endpoint_gets_the_traces_path_and_the_traces_one_is_kept() {
    let cfg = TelemetryConfig::default();
    let generic = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "https://api.honeycomb.io/"),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
    ];
    let s = resolve(&cfg, &generic).unwrap().unwrap();
    assert_eq!(s.endpoint, "https://api.honeycomb.io/v1/traces");
    assert_eq!(s.protocol, Protocol::HttpProtobuf);
    let mut both = generic.to_vec();
    both.push((
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "https://x.example/otel/traces",
    ));
    let s = resolve(&cfg, &both).unwrap().unwrap();
    assert_eq!(
        s.endpoint, "https://x.example/otel/traces",
        "the traces variable is the full URL"
    );
    let grpc = resolve(&cfg, &[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4317")])
        .unwrap()
        .unwrap();
    assert_eq!(
        (grpc.endpoint.as_str(), grpc.protocol),
        ("http://c:4317", Protocol::Grpc)
    );
}

#[test]
fn config_keys_override_traces_variables_which_override_generic_ones() {
    let cfg = TelemetryConfig {
        otlp_endpoint: Some("http://from-config:4318/v1/traces".into()),
        otlp_protocol: Some("http/protobuf".into()),
        otlp_headers: [("X-Team".to_string(), "config".to_string())].into(),
        ..Default::default()
    };
    let vars = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://generic:4317"),
        ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://traces:4317"),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ("OTEL_EXPORTER_OTLP_HEADERS", "x-team=generic,x-region=eu"),
        (
            "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
            "x-region=traces,x-org=o",
        ),
        ("OTEL_EXPORTER_OTLP_CERTIFICATE", "/generic.pem"),
        ("OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE", "/traces.pem"),
    ];
    let s = resolve(&cfg, &vars).unwrap().unwrap();
    assert_eq!(s.endpoint, "http://from-config:4318/v1/traces");
    assert_eq!(s.protocol, Protocol::HttpProtobuf);
    let headers: Vec<(&str, &str)> = s
        .headers
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    assert_eq!(
        headers,
        [("x-org", "o"), ("x-region", "traces"), ("x-team", "config")]
    );
    assert_eq!(s.ca_file, Some(PathBuf::from("/traces.pem")));
    let env_only = resolve(&TelemetryConfig::default(), &vars)
        .unwrap()
        .unwrap();
    assert_eq!(
        (env_only.endpoint.as_str(), env_only.protocol),
        ("http://traces:4317", Protocol::Grpc)
    );
}

#[test]
fn header_lists_are_percent_decoded_and_bad_ones_name_no_value() {
    let parsed = parse_headers("Api-Key=%E5%AF%86%E9%92%A5%F0%9F%94%91 , x-b = c%3Dd").unwrap();
    assert_eq!(parsed["api-key"], "密钥🔑");
    assert_eq!(parsed["x-b"], "c=d");
    let err = parse_headers("api-key").unwrap_err();
    assert!(!err.contains("api-key"), "{err}");
    let cfg = TelemetryConfig::default();
    let err = resolve(
        &cfg,
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "sk-SECRET"),
        ],
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("OTEL_EXPORTER_OTLP_HEADERS") && !err.contains("SECRET"),
        "{err}"
    );
}

#[test]
fn debug_output_names_headers_without_their_values() {
    let cfg = TelemetryConfig {
        otlp_endpoint: Some("http://c:4317".into()),
        otlp_headers: [("x-honeycomb-team".to_string(), "hc-SECRET".to_string())].into(),
        ..Default::default()
    };
    let s = resolve(&cfg, &[]).unwrap().unwrap();
    let debug = format!("{s:?}");
    assert!(
        debug.contains("x-honeycomb-team") && !debug.contains("hc-SECRET"),
        "{debug}"
    );
}

#[test]
fn unknown_protocols_and_half_a_client_identity_are_refused() {
    let bad = resolve(
        &TelemetryConfig::default(),
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
        ],
    );
    assert!(bad.unwrap_err().to_string().contains("http/protobuf"));
    let half = resolve(
        &TelemetryConfig::default(),
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "https://c"),
            ("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", "/c.pem"),
        ],
    );
    assert!(half.unwrap_err().to_string().contains("key"));
}

#[test]
fn the_role_names_the_service_unless_the_environment_does() {
    let name = |vars: &[(&str, &str)]| {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let resource = crate::telemetry::resource("agent", |n| vars.get(n).cloned());
        let get = |k: &'static str| {
            resource
                .get(&opentelemetry::Key::from_static_str(k))
                .map(|v| v.to_string())
        };
        (get("service.name"), get("nanobot.role"))
    };
    assert_eq!(name(&[]), (Some("agent".into()), Some("agent".into())));
}
