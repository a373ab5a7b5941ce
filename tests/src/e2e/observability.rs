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
    // The executor's span of the list_dir call (not the tool-list request) is in the turn's
    // trace, and its ancestry leads back to the turn span.
    let executor_span = spans
        .iter()
        .find(|s| {
            s.name == "tool_call"
                && s.trace_id == turn.trace_id
                && s.attributes
                    .get("tool")
                    .is_some_and(|t| t.contains("list_dir"))
        })
        .unwrap_or_else(|| {
            panic!("no executor span of the list_dir call in the turn's trace: {same_trace:?}")
        });
    let mut current = executor_span;
    let mut hops = 0;
    while current.span_id != turn.span_id {
        current = spans
            .iter()
            .find(|s| s.span_id == current.parent_span_id)
            .unwrap_or_else(|| {
                panic!(
                    "the executor span's ancestry breaks at {:?} before the turn span",
                    current.name
                )
            });
        hops += 1;
        assert!(hops < 32, "span ancestry loops");
    }
}
