//! Issue 33: per-bot limits (`bots.<id>.limits`) and token usage. A message over a limit gets
//! a clear refusal without a model call and counts in `nanobot_limit_refusals_total`, while
//! another bot keeps answering; every model call's tokens are kept per bot, model and day
//! (`nanobot usage`), once even when the runner is SIGKILLed mid-turn.

use std::time::Duration;

use serde_json::{Value, json};

use super::TURN;
use crate::harness::{Fleet, wait_until};
use crate::scripted_llm::Reply;

/// Sends one completion to `bot` through the gateway's API and returns its reply text.
async fn ask_bot(fleet: &Fleet, bot: &str, session: &str, text: &str) -> String {
    let response: Value = reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", fleet.api_base()))
        .header("x-nanobot-bot", bot)
        .json(&json!({"session_id": session, "messages": [{"role": "user", "content": text}]}))
        .timeout(TURN * 2)
        .send()
        .await
        .expect("send a completion")
        .json()
        .await
        .expect("a JSON completion");
    response["choices"][0]["message"]["content"]
        .as_str()
        .unwrap_or_else(|| panic!("a reply from {bot}: {response}"))
        .to_string()
}

/// `bot`'s tokens of today, as kept in Redis (`total`).
async fn spent_today(fleet: &Fleet, bot: &str) -> u64 {
    let redis = fleet.redis_conn().await.expect("redis");
    nanobot_runtime::usage::spent(&redis, bot)
        .await
        .expect("read usage")
        .0
}

/// The value of `nanobot_limit_refusals_total{bot,limit}` on the agent at `base`.
async fn refusals(base: &str, bot: &str, limit: &str) -> Option<f64> {
    let text = reqwest::get(format!("{base}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let scrape = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).unwrap();
    scrape
        .samples
        .iter()
        .find(|s| {
            s.metric == "nanobot_limit_refusals_total"
                && s.labels.get("bot") == Some(bot)
                && s.labels.get("limit") == Some(limit)
        })
        .map(|s| match s.value {
            prometheus_parse::Value::Counter(v) => v,
            _ => f64::NAN,
        })
}

/// A bot over its daily token budget is refused (no model call) while another bot keeps
/// answering; `nanobot usage` shows the tokens of both bots.
#[tokio::test]
async fn a_bot_over_its_daily_token_budget_is_refused_while_another_keeps_answering() {
    let mut fleet = Fleet::builder()
        .roles(&["gateway", "agent", "tools"])
        .config(json!({"bots": {
            "alpha": {"limits": {"dailyTokenBudget": 100}},
            "beta": {},
        }}))
        .start()
        .await
        .unwrap();
    fleet.llm.push(Reply::text("好的 ✅").with_usage(80, 30));
    assert_eq!(
        ask_bot(&fleet, "alpha", "预算-🧪", "数一数 🔢").await,
        "好的 ✅"
    );
    wait_until(|| async { spent_today(&fleet, "alpha").await == 110 }, TURN)
        .await
        .expect("alpha's tokens are recorded");
    let calls = fleet.llm.request_count();
    let refused = ask_bot(&fleet, "alpha", "预算-🧪", "再来一次 🔁").await;
    assert_eq!(
        refused,
        "This bot has used its daily token budget (100 tokens). It answers again after midnight UTC."
    );
    assert_eq!(
        fleet.llm.request_count(),
        calls,
        "a refusal costs no model call"
    );
    fleet.llm.push(Reply::text("beta 在此 🐝").with_usage(5, 7));
    assert_eq!(
        ask_bot(&fleet, "beta", "预算-🧪", "你好 👋").await,
        "beta 在此 🐝"
    );
    assert_eq!(
        refusals(
            &fleet.health_base("agent").unwrap(),
            "alpha",
            "daily_tokens"
        )
        .await,
        Some(1.0)
    );
    wait_until(|| async { spent_today(&fleet, "beta").await == 12 }, TURN)
        .await
        .expect("beta's tokens are recorded");
    let out = fleet.cli(&["usage"]).await.unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(
        stdout.contains("total alpha: 80 input, 30 output tokens"),
        "{stdout}"
    );
    assert!(
        stdout.contains("total beta: 5 input, 7 output tokens"),
        "{stdout}"
    );
    let out = fleet.cli(&["usage", "--bot", "beta"]).await.unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!stdout.contains("alpha"), "{stdout}");
    let out = fleet.cli(&["usage", "--since", "yesterday"]).await.unwrap();
    assert!(!out.status.success(), "a malformed --since is an error");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--since"),
        "{out:?}"
    );
}

/// A sender over `maxMessagesPerMinutePerSender` is refused without a model call.
#[tokio::test]
async fn a_sender_over_the_per_minute_limit_is_refused_without_a_model_call() {
    let mut fleet = Fleet::builder()
        .roles(&["gateway", "agent", "tools"])
        .config(json!({"bots": {"alpha": {"limits": {"maxMessagesPerMinutePerSender": 2}}}}))
        .start()
        .await
        .unwrap();
    for i in 0..2 {
        fleet.llm.push(Reply::text(format!("回答 {i} ✅")));
        let reply = ask_bot(&fleet, "alpha", "速率-🧪", &format!("问题 {i} ❓")).await;
        assert_eq!(reply, format!("回答 {i} ✅"));
    }
    let calls = fleet.llm.request_count();
    let refused = ask_bot(&fleet, "alpha", "速率-🧪", "第三个 🚦").await;
    assert_eq!(
        refused,
        "You are sending messages too fast: this bot answers at most 2 messages a minute from one sender. Please wait a moment and try again."
    );
    assert_eq!(
        fleet.llm.request_count(),
        calls,
        "a refusal costs no model call"
    );
    assert_eq!(
        refusals(&fleet.health_base("agent").unwrap(), "alpha", "sender_rate").await,
        Some(1.0)
    );
}

/// A runner SIGKILLed while its model call is in flight: the call that never returned is not
/// counted, the retried turn's call is counted once, and the dead runner's slot of the bot's
/// one concurrent turn expires (the retried turn gets it).
#[tokio::test]
async fn a_runner_sigkilled_mid_turn_does_not_double_count_usage_nor_leak_its_turn_slot() {
    let mut fleet = Fleet::builder()
        .roles(&["gateway", "agent", "tools"])
        .config(json!({
            "bots": {"alpha": {"limits": {"maxConcurrentTurns": 1}}},
            "runner": {"sessionLeaseSecs": 2},
        }))
        .start()
        .await
        .unwrap();
    fleet.llm.push(
        Reply::text("慢 🐢")
            .with_usage(1000, 1000)
            .with_delay(Duration::from_secs(30)),
    );
    fleet.llm.push(Reply::text("快 🐇").with_usage(40, 2));
    let ask = {
        let base = fleet.api_base();
        tokio::spawn(async move {
            reqwest::Client::new()
                .post(format!("{base}/v1/chat/completions"))
                .header("x-nanobot-bot", "alpha")
                .json(&json!({"session_id": "杀-🧪", "messages": [{"role": "user", "content": "你好 👋"}]}))
                .timeout(TURN * 4)
                .send()
                .await
                .expect("send")
                .json::<Value>()
                .await
                .expect("json")
        })
    };
    fleet.llm.wait_for_requests(1, TURN).await.unwrap();
    let runner = fleet.service("agent");
    runner.sigkill().expect("sigkill");
    runner.wait_exit(Duration::from_secs(5)).await;
    runner.restart().expect("replace the runner");
    let response = ask.await.unwrap();
    assert_eq!(
        response["choices"][0]["message"]["content"], "快 🐇",
        "{response}"
    );
    wait_until(|| async { spent_today(&fleet, "alpha").await >= 42 }, TURN)
        .await
        .expect("the retried call is recorded");
    assert_eq!(
        spent_today(&fleet, "alpha").await,
        42,
        "each returned call counted once"
    );
}

/// A bot at `maxConcurrentTurns` runs no further turn (its message waits, redelivered later)
/// and does not delay another bot's turn.
#[tokio::test]
async fn a_bot_at_its_concurrency_limit_does_not_delay_another_bot() {
    let mut fleet = Fleet::builder()
        .roles(&["gateway", "agent", "tools"])
        .config(json!({"bots": {"alpha": {"limits": {"maxConcurrentTurns": 1}}, "beta": {}}}))
        .start()
        .await
        .unwrap();
    let slow = Duration::from_secs(6);
    fleet
        .llm
        .when_last_user_contains("慢", Reply::text("alpha 完成 ✅").with_delay(slow));
    fleet
        .llm
        .when_last_user_contains("快", Reply::text("beta 🐝"));
    let spawn_ask = |session: &'static str| {
        let base = fleet.api_base();
        tokio::spawn(async move {
            let response: Value = reqwest::Client::new()
                .post(format!("{base}/v1/chat/completions"))
                .header("x-nanobot-bot", "alpha")
                .json(&json!({"session_id": session, "messages": [{"role": "user", "content": "慢慢来 🐢"}]}))
                .timeout(TURN * 4)
                .send()
                .await
                .expect("send")
                .json()
                .await
                .expect("json");
            response["choices"][0]["message"]["content"].clone()
        })
    };
    let first = spawn_ask("甲-🧪");
    fleet.llm.wait_for_requests(1, TURN).await.unwrap();
    let second = spawn_ask("乙-🧪");
    let agent = fleet.health_base("agent").unwrap();
    wait_until(
        || async {
            refusals(&agent, "alpha", "concurrent_turns")
                .await
                .is_some()
        },
        TURN,
    )
    .await
    .expect("alpha's second turn waits for the first");
    let started = std::time::Instant::now();
    assert_eq!(ask_bot(&fleet, "beta", "丙-🧪", "快 ⚡").await, "beta 🐝");
    assert!(
        started.elapsed() < slow,
        "beta waited {:?}",
        started.elapsed()
    );
    assert!(!first.is_finished(), "alpha's first turn is still running");
    assert_eq!(
        fleet.llm.request_count(),
        2,
        "alpha's second turn has not called the model while its first runs"
    );
    assert_eq!(first.await.unwrap(), "alpha 完成 ✅");
    assert_eq!(second.await.unwrap(), "alpha 完成 ✅");
    assert_eq!(fleet.llm.request_count(), 3);
}
