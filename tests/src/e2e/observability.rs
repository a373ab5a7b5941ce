//! Traces leave the fleet over OTLP when `telemetry.otlpEndpoint` is set, one trace per turn.

use std::time::Duration;

use fake_opentelemetry_collector::FakeCollectorServer;
use serde_json::json;

use super::ask;
use crate::harness::Fleet;
use crate::scripted_llm::Reply;

#[tokio::test(flavor = "multi_thread")]
async fn spans_are_exported_over_otlp_and_a_turn_is_one_trace() {
    let mut collector = FakeCollectorServer::start()
        .await
        .expect("start fake collector");
    let mut fleet = Fleet::builder()
        .roles(&["agent", "tools"])
        .config(json!({"telemetry": {"otlpEndpoint": collector.endpoint()}}))
        .start()
        .await
        .unwrap();
    fleet
        .llm
        .push(Reply::tool_calls([("list_dir", json!({"path": "."}))]));
    fleet.llm.push(Reply::text("done"));
    assert_eq!(ask(&mut fleet, "list the workspace", None).await, "done");
    // SIGTERM flushes the batch exporters.
    for role in ["agent", "tools"] {
        let service = fleet.service(role);
        service.sigterm().unwrap();
        service
            .wait_exit(Duration::from_secs(5))
            .await
            .expect("exits after SIGTERM");
    }
    let spans = collector.exported_spans(2, Duration::from_secs(10)).await;
    let turn = spans.iter().find(|s| s.name == "turn").unwrap_or_else(|| {
        panic!(
            "no turn span in {:?}",
            spans.iter().map(|s| &s.name).collect::<Vec<_>>()
        )
    });
    let same_trace: Vec<&str> = spans
        .iter()
        .filter(|s| s.trace_id == turn.trace_id)
        .map(|s| s.name.as_str())
        .collect();
    assert!(
        same_trace.iter().any(|n| *n != "turn"),
        "the tool executor's span joins the turn's trace: {same_trace:?}"
    );
}
