//! The heartbeat end to end (issue 12 item 4): the cron role fires the protected `heartbeat`
//! job, an agent runs `HEARTBEAT.md`'s active tasks in the `heartbeat` session, and the
//! notification gate decides whether the answer reaches the user's latest Telegram chat.

use std::time::Duration;

use serde_json::{Value, json};

use super::super::session_rows;
use super::{ALICE, TOKEN, wait_shown};
use crate::harness::{Fleet, wait_until};
use crate::scripted_llm::Reply;
use crate::telegram_fake::{Incoming, TelegramFake, TgUser};

const BEAT: &str = "You are executing periodic heartbeat tasks.";

/// Heartbeat fires recorded in `cron/jobs.json`.
fn beats(fleet: &Fleet) -> usize {
    let text =
        std::fs::read_to_string(fleet.workspace().join("cron/jobs.json")).unwrap_or_default();
    let jobs: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
    jobs["jobs"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|j| j["id"] == "heartbeat")
        .and_then(|j| j["state"]["runHistory"].as_array().map(Vec::len))
        .unwrap_or(0)
}

/// Requests whose last user message contains `needle`.
fn asked(fleet: &Fleet, needle: &str) -> usize {
    fleet
        .llm
        .requests()
        .iter()
        .filter(|r| r.last_user_text().is_some_and(|t| t.contains(needle)))
        .count()
}

#[tokio::test]
async fn the_heartbeat_reports_active_tasks_to_the_latest_chat_only_when_the_gate_agrees() {
    let fake = TelegramFake::start().await.unwrap();
    let bot = fake.add_bot(TOKEN, "nano_test_bot");
    let fleet = Fleet::builder()
        .roles(&["gateway", "agent", "tools", "cron"])
        .config(json!({
            "channels": {"telegram": {
                "enabled": true, "token": TOKEN, "apiBase": fake.api_url(),
                "allowFrom": [ALICE.to_string()], "streaming": false, "leaseSecs": 2,
            }},
            "gateway": {"heartbeat": {"intervalS": 1, "keepRecentMessages": 4}},
        }))
        .start()
        .await
        .unwrap();
    bot.wait_polling().await.unwrap();
    // The gate's message quotes the task too, so its rules come first.
    let gate = |notify: bool| {
        Reply::tool_calls([(
            "evaluate_notification",
            json!({"should_notify": notify, "reason": "test"}),
        )])
    };
    fleet
        .llm
        .when_last_user_contains("## Agent response\nAll clear.", gate(false));
    fleet
        .llm
        .when_last_user_contains("## Agent response\nWater the plants now!", gate(true));
    fleet
        .llm
        .when_last_user_contains("check the weather", Reply::text("All clear."));
    fleet
        .llm
        .when_last_user_contains("water the plants", Reply::text("Water the plants now!"));
    fleet
        .llm
        .when_last_user_contains("hello", Reply::text("Hi Alice"));

    // Alice's chat is the latest chat of an enabled channel.
    bot.inject(Incoming::text_from(&TgUser::new(ALICE, "alice"), "hello"));
    wait_shown(&fake, &bot, ALICE, "Hi Alice").await;

    // No HEARTBEAT.md, then one without active tasks: beats, but no model call.
    wait_until(|| async { beats(&fleet) >= 2 }, Duration::from_secs(30))
        .await
        .expect("the heartbeat job fires");
    let idle = include_str!("../../../../templates/HEARTBEAT.md");
    std::fs::write(fleet.workspace().join("HEARTBEAT.md"), idle).unwrap();
    let seen = beats(&fleet);
    wait_until(
        || async { beats(&fleet) >= seen + 2 },
        Duration::from_secs(30),
    )
    .await
    .unwrap();
    assert_eq!(
        asked(&fleet, BEAT),
        0,
        "an idle HEARTBEAT.md costs no model call"
    );

    // Active, but routine: the gate declines and Alice hears nothing.
    // A task line under 0.3.5's `## Active Tasks` (the template ends there).
    assert!(
        idle.trim_end()
            .ends_with("<!-- Add your periodic tasks below this line -->")
    );
    let tasks = |task: &str| format!("{idle}- {task}\n");
    std::fs::write(
        fleet.workspace().join("HEARTBEAT.md"),
        tasks("check the weather"),
    )
    .unwrap();
    let declined = || async { asked(&fleet, "## Agent response\nAll clear.") >= 2 };
    wait_until(declined, Duration::from_secs(30))
        .await
        .expect("the gate is asked about the routine answer");
    assert_eq!(
        bot.bot_messages(ALICE).len(),
        1,
        "{:#?}",
        bot.bot_messages(ALICE)
    );

    // Worth telling: the gate agrees and the answer reaches Alice's chat and session.
    std::fs::write(
        fleet.workspace().join("HEARTBEAT.md"),
        tasks("water the plants"),
    )
    .unwrap();
    wait_shown(&fake, &bot, ALICE, "Water the plants now!").await;
    let rows = session_rows(&fleet, "default", &format!("telegram:{ALICE}")).await;
    assert!(
        rows.iter().any(|r| r["role"] == "assistant"
            && r["content"] == "Water the plants now!"
            && r["_channel_delivery"] == true),
        "{rows:#?}"
    );
    let prompt = fleet
        .llm
        .requests()
        .iter()
        .filter_map(|r| r.last_user_text())
        .find(|t| t.contains(BEAT))
        .unwrap();
    assert!(
        prompt.contains("[Your response will be delivered directly to the user's messaging app.")
    );

    // The gate is asked as upstream's evaluator asks: temperature 0, max_tokens 4096.
    let gate_call = fleet
        .llm
        .requests()
        .into_iter()
        .find(|r| r.body.to_string().contains("evaluate_notification"))
        .expect("a gate call");
    assert_eq!(gate_call.body["max_tokens"], 4096, "{}", gate_call.body);
    assert_eq!(gate_call.body["temperature"], 0.0);

    // The heartbeat session stays short: its kept tail plus the last beat.
    let heartbeat = session_rows(&fleet, "default", "heartbeat").await;
    assert!(heartbeat.len() <= 4 + 2, "{heartbeat:#?}");
}
