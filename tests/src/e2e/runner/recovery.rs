//! Crash recovery after SIGKILL of a runner, resumption of a redelivered message, and
//! `/stop` across runners.

use std::time::Duration;

use serde_json::json;

use nanobot_proto::keys;

use super::{kill_and_restart_agent, publish_inbound, session_metadata};
use crate::e2e::{TURN, ask, session_rows, wait_for_replies};
use crate::harness::{Fleet, wait_until};
use crate::scripted_llm::Reply;

#[tokio::test]
async fn a_runner_killed_mid_tool_is_replaced_and_the_turn_resumes_with_interrupted_results() {
    let mut fleet = Fleet::builder()
        .roles(&["agent", "tools"])
        .start()
        .await
        .unwrap();
    fleet
        .llm
        .push(Reply::tool_calls([("exec", json!({"command": "sleep 5"}))]));
    publish_inbound(&fleet, "crash-1", "cli:crash", "run the slow thing").await;
    let awaiting = || async {
        session_metadata(&fleet, "cli:crash").await["runtime_checkpoint"]["phase"]
            == "awaiting_tools"
    };
    wait_until(awaiting, TURN)
        .await
        .expect("checkpoint written before the tool runs");
    fleet.llm.push(Reply::text("The command was interrupted."));
    kill_and_restart_agent(&mut fleet).await;

    // Nobody asks again: the message comes back to a live runner, which resumes its turn.
    let replies = wait_for_replies(&fleet, "crash-1").await;
    assert_eq!(replies.len(), 1, "{replies:#?}");
    assert_eq!(replies[0].content, "The command was interrupted.");
    let requests = fleet.llm.requests();
    let messages = requests.last().unwrap().messages();
    let roles: Vec<&str> = messages
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(
        roles,
        ["system", "user", "assistant", "tool"],
        "{messages:#?}"
    );
    let call_id = messages[2]["tool_calls"][0]["id"].clone();
    assert_eq!(
        messages[3],
        json!({"role": "tool", "tool_call_id": call_id, "name": "exec", "content": "Error: Task interrupted before this tool finished."})
    );
    let mut conn = fleet.redis_conn().await.unwrap();
    let seen: bool = redis::cmd("EXISTS")
        .arg(keys::inbound_seen("default", "cli:crash", "crash-1"))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(seen, "a later copy of the message is dropped");
    let meta = session_metadata(&fleet, "cli:crash").await;
    assert!(
        meta.get("runtime_checkpoint").is_none() && meta.get("pending_user_turn").is_none(),
        "{meta}"
    );
    fleet.llm.push(Reply::text("All good now."));
    assert_eq!(
        ask(&mut fleet, "and now?", Some("cli:crash")).await,
        "All good now."
    );
}

#[tokio::test]
async fn a_runner_killed_before_any_reply_is_replaced_and_the_message_answered_once() {
    let mut fleet = Fleet::builder()
        .roles(&["agent", "tools"])
        .start()
        .await
        .unwrap();
    fleet
        .llm
        .push(Reply::text("too late").with_delay(Duration::from_secs(20)));
    publish_inbound(&fleet, "crash-2", "cli:early", "hello?").await;
    wait_until(|| async { fleet.llm.request_count() >= 1 }, TURN)
        .await
        .unwrap();
    fleet.llm.push(Reply::text("I'm back."));
    kill_and_restart_agent(&mut fleet).await;
    let replies = wait_for_replies(&fleet, "crash-2").await;
    assert_eq!(replies.len(), 1, "{replies:#?}");
    assert_eq!(replies[0].content, "I'm back.");
    let rows = session_rows(&fleet, "default", "cli:early").await;
    let shape: Vec<(&str, &str)> = rows
        .iter()
        .map(|r| {
            (
                r["role"].as_str().unwrap(),
                r["content"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        shape,
        [("user", "hello?"), ("assistant", "I'm back.")],
        "{rows:#?}"
    );
}

#[tokio::test]
async fn stop_cancels_a_running_turn_on_another_runner() {
    let mut fleet = Fleet::builder()
        .roles(&["agent", "tools"])
        .start()
        .await
        .unwrap();
    fleet.add_replica("agent").await.unwrap();
    fleet.wait_ready().await.unwrap();
    fleet
        .llm
        .push(Reply::text("never delivered").with_delay(Duration::from_secs(30)));
    publish_inbound(&fleet, "slow-1", "cli:stop", "take your time").await;
    wait_until(|| async { fleet.llm.request_count() >= 1 }, TURN)
        .await
        .unwrap();
    assert_eq!(
        ask(&mut fleet, "/stop", Some("cli:stop")).await,
        "Stopped 1 task(s)."
    );
    assert_eq!(
        ask(&mut fleet, "/stop", Some("cli:stop")).await,
        "No active task to stop."
    );
    let rows = session_rows(&fleet, "default", "cli:stop").await;
    let last = rows.last().unwrap();
    assert_eq!(
        (last["role"].as_str(), last["content"].as_str()),
        (
            Some("assistant"),
            Some("Error: Task interrupted before a response was generated.")
        ),
        "the stopped turn is restored at once: {rows:#?}"
    );
}

#[tokio::test]
async fn a_redelivered_interrupted_message_resumes_its_own_turn() {
    let mut fleet = Fleet::builder()
        .roles(&["agent", "tools"])
        .start()
        .await
        .unwrap();
    fleet
        .llm
        .push(Reply::tool_calls([("exec", json!({"command": "sleep 5"}))]));
    publish_inbound(&fleet, "crash-3", "cli:resume", "run the slow thing").await;
    let awaiting = || async {
        session_metadata(&fleet, "cli:resume").await["runtime_checkpoint"]["phase"]
            == "awaiting_tools"
    };
    wait_until(awaiting, TURN).await.unwrap();
    kill_and_restart_agent(&mut fleet).await;
    fleet
        .llm
        .push(Reply::text("The command was cut off; run it again?"));
    // JetStream redelivers an unacknowledged message; publishing the same id again is the
    // same event without waiting out the ack deadline.
    publish_inbound(&fleet, "crash-3", "cli:resume", "run the slow thing").await;
    wait_until(|| async { fleet.llm.request_count() >= 2 }, TURN)
        .await
        .unwrap();
    let messages = fleet.llm.requests()[1].messages();
    let roles: Vec<&str> = messages
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(
        roles,
        ["system", "user", "assistant", "tool"],
        "{messages:#?}"
    );
    assert_eq!(
        messages[3]["content"],
        "Error: Task interrupted before this tool finished."
    );
    let rows = || async { session_rows(&fleet, "default", "cli:resume").await };
    wait_until(|| async { rows().await.len() == 4 }, TURN)
        .await
        .unwrap();
    let rows = rows().await;
    let users = rows.iter().filter(|r| r["role"] == "user").count();
    assert_eq!(users, 1, "the user message is stored once: {rows:#?}");
    assert_eq!(rows[3]["content"], "The command was cut off; run it again?");
}
