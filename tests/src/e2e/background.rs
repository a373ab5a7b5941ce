//! Background roles: the memory worker archives old messages, cron fires jobs as turns, and
//! trace context travels in NATS headers.

use std::time::Duration;

use futures::StreamExt as _;
use serde_json::{Value, json};

use nanobot_proto::subjects;

use super::{TURN, ask, session_rows};
use crate::harness::{Fleet, wait_until};
use crate::scripted_llm::Reply;

#[tokio::test]
async fn memory_archives_old_messages_into_history_jsonl() {
    // A tiny context budget (4000 - 1000 - 1024 tokens) forces consolidation after a few turns.
    let mut fleet = Fleet::builder()
        .roles(&["agent", "tools", "memory"])
        .config(json!({"agents": {"defaults": {"contextWindowTokens": 4000, "maxTokens": 1000}}}))
        .start()
        .await
        .unwrap();
    let filler = "lorem ipsum dolor sit amet ".repeat(120);
    for i in 0..4 {
        ask(&mut fleet, &format!("turn {i}: {filler}"), Some("cli:mem")).await;
    }
    let history = fleet.workspace().join("memory/history.jsonl");
    let conn = fleet.redis_conn().await.unwrap();
    // The archive is appended to history.jsonl, then `last_consolidated` moves.
    let last_consolidated = || {
        let mut conn = conn.clone();
        async move {
            redis::cmd("HGET")
                .arg(nanobot_proto::keys::session_meta("default", "cli:mem"))
                .arg("last_consolidated")
                .query_async::<Option<usize>>(&mut conn)
                .await
                .unwrap()
        }
    };
    wait_until(
        || async { history.exists() && last_consolidated().await.is_some() },
        TURN,
    )
    .await
    .unwrap_or_else(|_| panic!("memory log: {}", fleet.service("memory").logs()));
    let text = std::fs::read_to_string(&history).unwrap();
    let first: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(first["cursor"], 1);
    assert_eq!(first["session_key"], "cli:mem");
    assert!(
        first["content"].as_str().unwrap().starts_with("[RAW] "),
        "{first}"
    );
    assert!(first["content"].as_str().unwrap().contains("USER: turn 0"));
    let last = last_consolidated().await.unwrap();
    assert!(
        last >= 2,
        "last_consolidated advanced to a user boundary: {last}"
    );
    assert_eq!(
        session_rows(&fleet, "default", "cli:mem").await[last]["role"],
        "user"
    );
}

#[tokio::test]
async fn cron_records_each_runs_outcome_and_disables_a_job_bound_to_no_chat() {
    let mut fleet = Fleet::builder()
        .roles(&["agent", "tools", "cron"])
        .start()
        .await
        .unwrap();
    std::fs::create_dir_all(fleet.workspace().join("cron")).unwrap();
    let now = chrono_ms();
    let jobs = json!({"version": 1, "jobs": [{
        "id": "tick1234", "name": "tick", "enabled": true,
        "schedule": {"kind": "every", "everyMs": 1000},
        "payload": {"kind": "agent_turn", "message": "cron says tick", "sessionKey": "cli:tick",
                    "originChannel": "cli", "originChatId": "tick"},
        "createdAtMs": now - 5000
    }, {
        "id": "lost5678", "name": "lost", "enabled": true,
        "schedule": {"kind": "every", "everyMs": 1000},
        "payload": {"kind": "agent_turn", "message": "nobody hears this", "deliver": false},
        "createdAtMs": now - 5000
    }]});
    let path = fleet.workspace().join("cron/jobs.json");
    std::fs::write(&path, jobs.to_string()).unwrap();
    // The first run's model call fails (a client error is not retried); later runs answer.
    fleet.llm.push(Reply::error(
        400,
        "{\"error\": {\"message\": \"model overloaded\"}}",
    ));
    fleet.llm.set_fallback(Reply::text("tock"));
    let job = |id: &str| {
        let file: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        file["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|j| j["id"] == id)
            .cloned()
            .unwrap()
    };
    let runs = || {
        job("tick1234")["state"]["runHistory"]
            .as_array()
            .map(|runs| runs.len())
            .unwrap_or_default()
    };
    wait_until(|| async { runs() >= 2 }, TURN)
        .await
        .unwrap_or_else(|_| {
            panic!(
                "runs: {:#}\n{}",
                job("tick1234"),
                fleet.service("agent").log_tail(30)
            )
        });
    let tick = job("tick1234");
    let mut runs = tick["state"]["runHistory"].as_array().unwrap().clone();
    runs.sort_by_key(|r| r["runAtMs"].as_i64());
    assert_eq!(runs[0]["status"], "error", "{tick:#}");
    assert_eq!(
        runs[0]["error"], "Sorry, I encountered an error calling the AI model.",
        "the turn's error text: {tick:#}"
    );
    assert_eq!(runs[1]["status"], "ok", "{tick:#}");
    assert_eq!(runs[1]["error"], Value::Null);
    assert!(
        runs.iter().all(|r| r["durationMs"].as_i64().unwrap() > 0),
        "{tick:#}"
    );
    assert!(tick["state"]["lastStatus"].is_string());

    let rows = session_rows(&fleet, "default", "cli:tick").await;
    assert_eq!(
        rows[0]["content"],
        "[Scheduled Task] Timer finished.\n\nTask 'tick' has been triggered.\nScheduled instruction: cron says tick"
    );
    assert!(
        rows.iter()
            .any(|r| r["role"] == "assistant" && r["content"] == "tock")
    );

    // As upstream, the job bound to no chat is disabled with the reason, and never ran.
    let lost = job("lost5678");
    assert_eq!(lost["enabled"], false, "{lost:#}");
    assert_eq!(lost["state"]["nextRunAtMs"], Value::Null);
    assert_eq!(lost["state"]["lastStatus"], "error");
    assert_eq!(
        lost["state"]["lastError"],
        "agent cron payload is missing bound session delivery context; recreate it from a chat session"
    );
    assert!(
        session_rows(&fleet, "default", "cron:lost5678")
            .await
            .is_empty()
    );
    assert!(
        !fleet
            .llm
            .requests()
            .iter()
            .any(|r| r.body.to_string().contains("nobody hears this"))
    );
}

fn chrono_ms() -> i64 {
    i64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}

#[tokio::test]
async fn one_turn_is_one_trace_across_inbound_and_tool_calls() {
    let mut fleet = Fleet::builder()
        .roles(&["agent", "tools"])
        .start()
        .await
        .unwrap();
    let client = fleet.nats_client().await.unwrap();
    let mut tool_calls = client.subscribe(subjects::TOOL_CALL_ALL).await.unwrap();
    let mut inbound = client.subscribe(subjects::INBOUND_ALL).await.unwrap();
    client.flush().await.unwrap();
    fleet
        .llm
        .push(Reply::tool_calls([("list_dir", json!({"path": "."}))]));
    fleet.llm.push(Reply::text("listed"));
    assert_eq!(ask(&mut fleet, "list files", None).await, "listed");
    let first = tokio::time::timeout(Duration::from_secs(5), inbound.next())
        .await
        .unwrap()
        .unwrap();
    let call = tokio::time::timeout(Duration::from_secs(5), tool_calls.next())
        .await
        .unwrap()
        .unwrap();
    let trace = |m: &async_nats::Message| {
        let tp = m
            .headers
            .as_ref()
            .and_then(|h| h.get("traceparent"))
            .map(|v| v.as_str().to_string());
        tp.expect("traceparent header")
            .split('-')
            .nth(1)
            .unwrap()
            .to_string()
    };
    assert_eq!(trace(&first).len(), 32);
    assert_eq!(
        trace(&first),
        trace(&call),
        "the tool call continues the inbound message's trace"
    );
}
