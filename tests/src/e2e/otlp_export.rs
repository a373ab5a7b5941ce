//! OTLP as operators configure it: the standard `OTEL_*` variables next to the `telemetry`
//! keys, OTLP/HTTP with API-key headers, TLS verified by a CA file. The collector is the
//! suite's own ([`OtlpCollector`]), on loopback.

use std::time::Duration;

use serde_json::{Value, json};

use crate::harness::{Fleet, wait_until};
use crate::otlp_collector::{Export, OtlpCollector, TestPki};
use crate::scripted_llm::Reply;

/// An API key no log line may carry.
const KEY: &str = "hc-KEY-CANARY-5e1f";
/// The service name from `OTEL_SERVICE_NAME` (CJK and emoji travel intact).
const SERVICE: &str = "机器人舰队 🤖";
const ROLES: [&str; 2] = ["gateway", "agent"];

/// Starts gateway + agent exporting over OTLP/HTTP with `endpoint` and `extra` variables
/// (a short batch delay, so spans leave within a turn's time).
async fn fleet(endpoint: &str, extra: &[(&str, &str)], config: Value) -> Fleet {
    let mut builder = Fleet::builder()
        .roles(&ROLES)
        .config(config)
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
        .env("OTEL_BSP_SCHEDULE_DELAY", "100");
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
        .json(&json!({"messages": [{"role": "user", "content": "你好 👋"}]}))
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

/// Waits until both roles' spans have arrived; returns every span export.
async fn exports_of_both_roles(collector: &OtlpCollector) -> Vec<Export> {
    let has = |role: &str| {
        collector.exports().iter().any(|e| {
            e.resource.get("nanobot.role") == Some(&format!("nanobot-{role}"))
                && !e.span_names.is_empty()
        })
    };
    wait_until(
        || async { ROLES.iter().all(|r| has(r)) },
        Duration::from_secs(20),
    )
    .await
    .unwrap_or_else(|_| {
        panic!(
            "spans of {ROLES:?} never arrived: {:?}",
            collector.exports()
        )
    });
    // Metrics exports (otlp_metrics.rs) go by the metrics variables: not these tests' subject.
    let mut exports = collector.exports();
    exports.retain(|e| e.metrics.is_empty());
    exports
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

#[tokio::test(flavor = "multi_thread")]
async fn spans_reach_an_otlp_http_collector_with_the_headers_and_the_resource_from_the_environment()
{
    let collector = OtlpCollector::start_http().await.unwrap();
    let headers = format!("x-api-key={KEY},x-team=from-env");
    let mut fleet = fleet(
        &collector.endpoint(),
        &[
            ("OTEL_EXPORTER_OTLP_HEADERS", &headers),
            ("OTEL_SERVICE_NAME", SERVICE),
            (
                "OTEL_RESOURCE_ATTRIBUTES",
                "deployment.environment=staging,team=infra",
            ),
        ],
        // The config key wins over the variable for the same header.
        json!({"telemetry": {"otlpHeaders": {"X-Team": "from-config"}}}),
    )
    .await;
    turn(&mut fleet, "好的 ✅").await;
    let exports = exports_of_both_roles(&collector).await;
    for export in &exports {
        assert_eq!(
            export.headers.get("x-api-key").map(String::as_str),
            Some(KEY)
        );
        assert_eq!(
            export.headers.get("x-team").map(String::as_str),
            Some("from-config")
        );
        assert_eq!(export.headers["content-type"], "application/x-protobuf");
        assert_eq!(
            export.resource.get("service.name").map(String::as_str),
            Some(SERVICE)
        );
        assert_eq!(export.resource["deployment.environment"], "staging");
        assert_eq!(export.resource["team"], "infra");
    }
    let names: Vec<&String> = exports.iter().flat_map(|e| &e.span_names).collect();
    assert!(names.iter().any(|n| n.as_str() == "turn"), "{names:?}");
    assert_no_key_in_logs(&mut fleet);
}

#[tokio::test(flavor = "multi_thread")]
async fn spans_reach_a_tls_collector_verified_by_the_ca_file() {
    let pki = TestPki::new().unwrap();
    let collector = OtlpCollector::start_tls(&pki).await.unwrap();
    let ca = pki.ca_path.to_str().unwrap().to_string();
    let mut fleet = fleet(
        &collector.endpoint(),
        &[
            (
                "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
                &format!("authorization=Bearer%20{KEY}"),
            ),
            ("OTEL_EXPORTER_OTLP_CERTIFICATE", &ca),
        ],
        json!({}),
    )
    .await;
    turn(&mut fleet, "ok").await;
    let exports = exports_of_both_roles(&collector).await;
    let bearer = format!("Bearer {KEY}");
    assert!(
        exports
            .iter()
            .all(|e| e.headers.get("authorization") == Some(&bearer))
    );
    // Without OTEL_SERVICE_NAME each role names its service.
    assert!(
        exports
            .iter()
            .all(|e| e.resource.get("service.name") == e.resource.get("nanobot.role"))
    );
    assert_no_key_in_logs(&mut fleet);
}

#[tokio::test(flavor = "multi_thread")]
async fn spans_reach_a_grpc_collector_over_tls_with_the_headers_as_metadata() {
    let pki = TestPki::new().unwrap();
    let collector = OtlpCollector::start_tls(&pki).await.unwrap();
    let ca = pki.ca_path.to_str().unwrap().to_string();
    // The config's protocol and CA win over the variables (which name http and no CA).
    let mut fleet = fleet(
        &collector.endpoint(),
        &[("OTEL_EXPORTER_OTLP_HEADERS", &format!("x-api-key={KEY}"))],
        json!({"telemetry": {"otlpProtocol": "grpc", "otlpCertificate": ca}}),
    )
    .await;
    turn(&mut fleet, "grpc 好").await;
    let exports = exports_of_both_roles(&collector).await;
    for export in &exports {
        assert_eq!(
            export.headers.get("x-api-key").map(String::as_str),
            Some(KEY)
        );
        assert_eq!(export.headers["content-type"], "application/grpc");
    }
    assert_no_key_in_logs(&mut fleet);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_wrong_ca_fails_the_export_with_a_clear_log_line_and_the_roles_keep_answering() {
    let server = TestPki::new().unwrap();
    let other = TestPki::new().unwrap();
    let collector = OtlpCollector::start_tls(&server).await.unwrap();
    let wrong_ca = other.ca_path.to_str().unwrap().to_string();
    let mut fleet = fleet(
        &collector.endpoint(),
        &[
            ("OTEL_EXPORTER_OTLP_CERTIFICATE", &wrong_ca),
            ("OTEL_EXPORTER_OTLP_HEADERS", &format!("x-api-key={KEY}")),
        ],
        json!({}),
    )
    .await;
    turn(&mut fleet, "first").await;
    let logged = |fleet: &mut Fleet| {
        ROLES.iter().all(|r| {
            fleet
                .service(r)
                .logs()
                .contains("otlp export failed; spans dropped")
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
    .expect("each role logs the failed export");
    turn(&mut fleet, "second").await;
    assert!(
        collector.exports().is_empty(),
        "nothing passes a CA that did not sign the server"
    );
    assert_no_key_in_logs(&mut fleet);
    for role in ROLES {
        let service = fleet.service(role);
        service.sigterm().unwrap();
        let status = service.wait_exit(Duration::from_secs(5)).await;
        assert!(
            status.is_some_and(|s| s.success()),
            "{role} did not exit cleanly: {status:?}"
        );
    }
}

/// Issue 32 (mutual TLS): the collector accepts only a client certificate its CA signed. Over
/// OTLP/HTTP (the `OTEL_EXPORTER_OTLP_CLIENT_*` variables) and over gRPC (the `telemetry`
/// keys) the roles present the one they were given, and the spans arrive with the API key.
#[tokio::test(flavor = "multi_thread")]
async fn spans_reach_a_collector_requiring_a_client_certificate_over_http_and_grpc() {
    let pki = TestPki::new().unwrap();
    let path = |p: &std::path::Path| p.to_str().unwrap().to_string();
    let (ca, cert, key) = (
        path(&pki.ca_path),
        path(&pki.client_cert_path),
        path(&pki.client_key_path),
    );
    let over_http = OtlpCollector::start_mtls(&pki).await.unwrap();
    let mut fleet_http = fleet(
        &over_http.endpoint(),
        &[
            ("OTEL_EXPORTER_OTLP_CERTIFICATE", &ca),
            ("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", &cert),
            ("OTEL_EXPORTER_OTLP_CLIENT_KEY", &key),
            ("OTEL_EXPORTER_OTLP_HEADERS", &format!("x-api-key={KEY}")),
        ],
        json!({}),
    )
    .await;
    turn(&mut fleet_http, "双向 🔐").await;
    for export in exports_of_both_roles(&over_http).await {
        assert_eq!(
            export.headers.get("x-api-key").map(String::as_str),
            Some(KEY)
        );
    }
    assert_no_key_in_logs(&mut fleet_http);
    drop(fleet_http);
    let over_grpc = OtlpCollector::start_mtls(&pki).await.unwrap();
    let telemetry = json!({"telemetry": {"otlpProtocol": "grpc", "otlpCertificate": ca,
        "otlpClientCertificate": cert, "otlpClientKey": key}});
    let mut fleet_grpc = fleet(
        &over_grpc.endpoint(),
        &[("OTEL_EXPORTER_OTLP_HEADERS", &format!("x-api-key={KEY}"))],
        telemetry,
    )
    .await;
    turn(&mut fleet_grpc, "gRPC 双向 🔐").await;
    for export in exports_of_both_roles(&over_grpc).await {
        assert_eq!(export.headers["content-type"], "application/grpc");
        assert_eq!(
            export.headers.get("x-api-key").map(String::as_str),
            Some(KEY)
        );
    }
    assert_no_key_in_logs(&mut fleet_grpc);
}

/// Issue 32 (mutual TLS): without a client certificate, or with one another CA signed, the
/// collector refuses the handshake: no span arrives, each role says so in one log line, and
/// the turns are answered all the same.
#[tokio::test(flavor = "multi_thread")]
async fn a_collector_requiring_a_client_certificate_refuses_spans_without_the_right_one() {
    let pki = TestPki::new().unwrap();
    let other = TestPki::new().unwrap();
    let collector = OtlpCollector::start_mtls(&pki).await.unwrap();
    let ca = pki.ca_path.to_str().unwrap().to_string();
    let (cert, key) = (
        other.client_cert_path.to_str().unwrap().to_string(),
        other.client_key_path.to_str().unwrap().to_string(),
    );
    let (endpoint, ca_only) = (
        collector.endpoint(),
        [("OTEL_EXPORTER_OTLP_CERTIFICATE", ca.as_str())],
    );
    let wrong = json!({"telemetry": {"otlpClientCertificate": cert, "otlpClientKey": key}});
    let mut fleets = vec![
        fleet(&endpoint, &ca_only, json!({})).await,
        fleet(&endpoint, &ca_only, wrong).await,
    ];
    for fleet in &mut fleets {
        turn(fleet, "first").await;
    }
    for fleet in &mut fleets {
        let logged = |fleet: &mut Fleet| {
            ROLES.iter().all(|r| {
                let logs = fleet.service(r).logs();
                logs.contains("otlp export failed; spans dropped")
            })
        };
        wait_until(
            || {
                let done = logged(fleet);
                async move { done }
            },
            Duration::from_secs(20),
        )
        .await
        .expect("each role logs the refused export");
        turn(fleet, "second").await;
    }
    assert!(
        collector.exports().is_empty(),
        "nothing passes without a client certificate the CA signed: {:?}",
        collector.exports()
    );
}
