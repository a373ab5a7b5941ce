//! Goal mode end to end (issue 29), as nanobot 0.3.5: a user's `/goal <task>` turn carries
//! 0.3.5's goal guidance; `create_goal` and `update_goal`, served by the runner, keep
//! `goal_state` in the session metadata in Redis; a model answering while the goal is active
//! is asked to go on; a turn whose tool budget runs out is continued by an internal message
//! whose reply answers the user's message; a runner SIGKILLed mid-goal is replaced and the
//! turn resumes with the goal still active. Expected texts come from 0.3.5 itself
//! (`services/core/src/goal/upstream_035.json`, written by its `goal_state`,
//! `turn_continuation` and `render_template`).

use serde_json::{Value, json};

use super::runner::{kill_and_restart_agent, publish_inbound, session_metadata};
use super::{TURN, ask, session_rows, wait_for_replies};
use crate::harness::{Fleet, wait_until};
use crate::scripted_llm::Reply;

/// 0.3.5's output for the goal below.
fn upstream(key: &str) -> String {
    let all: Value = serde_json::from_str(include_str!(
        "../../../services/core/src/goal/upstream_035.json"
    ))
    .unwrap();
    all[key].as_str().unwrap().to_string()
}

/// The objective 0.3.5's strings were produced for.
const OBJECTIVE: &str = "写一本书 📚\n第一章：👩‍👩‍👧‍👦 e\u{301}";

fn create_goal() -> Reply {
    Reply::tool_calls([(
        "create_goal",
        json!({"objective": OBJECTIVE, "ui_summary": "书 📚"}),
    )])
}

fn complete_goal() -> Reply {
    Reply::tool_calls([(
        "update_goal",
        json!({"action": "complete", "recap": "写完了 ✅"}),
    )])
}

/// The tool results the model got, in order.
fn tool_results(fleet: &Fleet) -> Vec<String> {
    let requests = fleet.llm.requests();
    let last = requests.last().unwrap().messages();
    last.iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// Checks the stored goal ended as 0.3.5's `update_goal` ends it.
fn assert_completed(meta: &Value) {
    let goal = &meta["goal_state"];
    assert_eq!(goal["status"], "completed", "{meta:#}");
    assert_eq!(goal["objective"], OBJECTIVE);
    assert_eq!(goal["ui_summary"], "书 📚");
    assert_eq!(goal["recap"], "写完了 ✅");
    assert_eq!(goal["completed_at"], goal["ended_at"]);
    assert!(
        goal["started_at"].as_str().is_some_and(|t| t.len() == 26),
        "{goal}"
    );
    assert!(
        meta.get("_sustained_goal_continuation_rounds").is_none(),
        "{meta:#}"
    );
}

#[tokio::test]
async fn a_users_goal_is_recorded_continued_after_an_answer_and_completed_as_upstream() {
    let mut fleet = Fleet::builder()
        .roles(&["agent", "tools"])
        .start()
        .await
        .unwrap();
    for reply in [
        create_goal(),
        Reply::text("第一章写好了 📖"),
        complete_goal(),
        Reply::text("书写完了 📚"),
    ] {
        fleet.llm.push(reply);
    }
    // The CLI prints the streamed text (the first answer included, as 0.3.5 streams it),
    // then the final reply.
    let answer = ask(&mut fleet, "/goal 写一本书 📚", Some("cli:goal")).await;
    assert!(answer.starts_with("第一章写好了 📖"), "{answer}");
    assert_eq!(answer.lines().last(), Some("书写完了 📚"), "{answer}");

    let requests = fleet.llm.requests();
    assert_eq!(requests.len(), 4);
    // The /goal turn's input: the command's text, then 0.3.5's guidance (no goal yet).
    assert_eq!(
        requests[0].last_user_text().unwrap(),
        format!("/goal 写一本书 📚\n\n{}", upstream("block_start_no_goal"))
    );
    let tools = requests[0].tool_names();
    for tool in ["create_goal", "update_goal", "message", "spawn"] {
        assert!(tools.iter().any(|t| t == tool), "{tool}: {tools:?}");
    }
    // The answer while the goal was active was followed by 0.3.5's continuation.
    assert_eq!(requests[2].last_user_text().unwrap(), upstream("answer"));
    let results = tool_results(&fleet);
    assert_eq!(
        results[0],
        "Goal recorded. Keep working toward the objective using ordinary tools. When fully \
         done and verified, call update_goal with action='complete'.\nSummary line: 书 📚"
    );
    let meta = session_metadata(&fleet, "cli:goal").await;
    assert_completed(&meta);
    let ended = meta["goal_state"]["ended_at"].as_str().unwrap();
    assert_eq!(
        results[1],
        format!("Goal marked complete ({ended}). Recap:\n写完了 ✅")
    );
    // The stored user row is the command's text alone: the guidance went to the model only.
    let rows = session_rows(&fleet, "default", "cli:goal").await;
    assert_eq!(rows[0]["role"], "user");
    assert_eq!(rows[0]["content"], "/goal 写一本书 📚");

    // With the goal over, the next turn has no guidance, and create_goal is refused.
    fleet.llm.push(Reply::tool_calls([(
        "create_goal",
        json!({"objective": "再写一本 📚"}),
    )]));
    fleet.llm.push(Reply::text("好的"));
    assert_eq!(
        ask(&mut fleet, "再写一本 📚", Some("cli:goal")).await,
        "好的"
    );
    let requests = fleet.llm.requests();
    assert_eq!(requests[4].last_user_text().unwrap(), "再写一本 📚");
    assert!(
        tool_results(&fleet)[2].starts_with(
            "Error: create_goal is unavailable for this turn. Ask the user to submit the \
             complete objective as `/goal <task>`."
        ),
        "{:?}",
        tool_results(&fleet)
    );
    assert_completed(&session_metadata(&fleet, "cli:goal").await);
}

#[tokio::test]
async fn a_goal_turn_out_of_tool_budget_is_continued_internally_and_its_reply_answers_the_user() {
    let mut fleet = Fleet::builder()
        .roles(&["agent", "tools"])
        .config(json!({"agents": {"defaults": {"maxToolIterations": 2}}}))
        .start()
        .await
        .unwrap();
    for reply in [
        create_goal(),
        Reply::tool_calls([("list_dir", json!({"path": "."}))]),
        // The budget's finalization (the goal was not active when the turn began): dropped.
        Reply::text("阶段总结 🚧"),
        complete_goal(),
        Reply::text("书写完了 📚"),
    ] {
        fleet.llm.push(reply);
    }
    let answer = ask(&mut fleet, "/goal 写一本书 📚", Some("cli:budget")).await;
    assert_eq!(answer, "书写完了 📚");

    let requests = fleet.llm.requests();
    assert_eq!(requests.len(), 5);
    // The continuation turn's input: 0.3.5's continuation prompt, then the active goal's
    // guidance and runtime lines.
    assert_eq!(
        requests[3].last_user_text().unwrap(),
        format!("{}\n\n{}", upstream("budget"), upstream("block_active"))
    );
    assert_completed(&session_metadata(&fleet, "cli:budget").await);
    let rows = session_rows(&fleet, "default", "cli:budget").await;
    let texts: Vec<&str> = rows.iter().filter_map(|r| r["content"].as_str()).collect();
    assert!(
        !texts
            .iter()
            .any(|t| t.contains("阶段总结") || t.starts_with("Continue the active")),
        "neither the dropped finalization nor the internal prompt is stored: {texts:#?}"
    );
    assert_eq!(
        rows.iter().filter(|r| r["role"] == "user").count(),
        1,
        "{rows:#?}"
    );
    assert_eq!(rows.last().unwrap()["content"], "书写完了 📚");
}

#[tokio::test]
async fn a_runner_killed_mid_goal_resumes_the_turn_with_the_goal_still_active() {
    let mut fleet = Fleet::builder()
        .roles(&["agent", "tools"])
        .start()
        .await
        .unwrap();
    fleet.llm.push(create_goal());
    fleet
        .llm
        .push(Reply::tool_calls([("exec", json!({"command": "sleep 5"}))]));
    publish_inbound(&fleet, "goal-kill", "cli:goal-kill", "/goal 写一本书 📚").await;
    // The goal is saved with create_goal's result row, before the next batch starts.
    let recorded = || async {
        let meta = session_metadata(&fleet, "cli:goal-kill").await;
        meta["goal_state"]["status"] == "active"
            && meta["runtime_checkpoint"]["phase"] == "awaiting_tools"
    };
    wait_until(recorded, TURN)
        .await
        .expect("goal saved and the slow tool running");
    fleet.llm.push(complete_goal());
    fleet.llm.push(Reply::text("书写完了 📚"));
    kill_and_restart_agent(&mut fleet).await;

    let replies = wait_for_replies(&fleet, "goal-kill").await;
    assert_eq!(replies.len(), 1, "{replies:#?}");
    assert_eq!(replies[0].content, "书写完了 📚");
    assert_eq!(
        fleet.llm.request_count(),
        4,
        "create_goal is not called again"
    );
    // The resumed turn reads the guidance and the active goal after its user message.
    let resumed = fleet.llm.requests()[2].messages();
    let user = resumed.iter().rev().find(|m| m["role"] == "user").unwrap();
    assert_eq!(
        user["content"],
        format!("/goal 写一本书 📚\n\n{}", upstream("block_both"))
    );
    assert_completed(&session_metadata(&fleet, "cli:goal-kill").await);
    let rows = session_rows(&fleet, "default", "cli:goal-kill").await;
    let recorded: Vec<&Value> = rows
        .iter()
        .filter(|r| r["role"] == "tool" && r["name"] == "create_goal")
        .collect();
    assert_eq!(recorded.len(), 1, "{rows:#?}");
}

#[tokio::test]
async fn a_continuation_arriving_after_its_goal_ended_is_dropped_without_a_model_call() {
    use prost::Message as _;
    let mut fleet = Fleet::builder()
        .roles(&["agent", "tools"])
        .start()
        .await
        .unwrap();
    // A continuation published by a turn that was then redone to the goal's end.
    let stale = nanobot_proto::InboundMessage {
        id: "old:goal-continuation:1".into(),
        bot: "default".into(),
        channel: "cli".into(),
        chat_id: "direct".into(),
        sender_id: "system:continuation".into(),
        content: upstream("budget"),
        metadata_json: json!({"_internal_continuation": true}).to_string(),
        session_key: "cli:stale".into(),
        ..Default::default()
    };
    let js = async_nats::jetstream::new(fleet.nats_client().await.unwrap());
    js.publish(stale.subject(), stale.encode_to_vec().into())
        .await
        .unwrap()
        .await
        .unwrap();
    fleet.llm.push(Reply::text("你好 👋"));
    assert_eq!(ask(&mut fleet, "你好", Some("cli:stale")).await, "你好 👋");
    assert_eq!(
        fleet.llm.request_count(),
        1,
        "the continuation reached no model"
    );
    let rows = session_rows(&fleet, "default", "cli:stale").await;
    assert_eq!(rows.len(), 2, "{rows:#?}");
    assert_eq!(rows[0]["content"], "你好");
}
