//! Model presets (`modelPresets`, `/model`) and fallback models with the primary's circuit
//! breaker (upstream `agent/model_runtime.py`, `providers/fallback_provider.py`).

use std::time::Duration;

use serde_json::json;

use super::session_metadata;
use crate::e2e::{TURN, ask};
use crate::harness::Fleet;
use crate::scripted_llm::Reply;

#[tokio::test]
async fn model_switches_the_sessions_preset_and_the_next_turn_on_another_runner_uses_it() {
    let mut fleet = Fleet::builder()
        .roles(&["agent", "tools"])
        .config(json!({"modelPresets": {"fast": {
            "model": "fast-model", "provider": "custom", "maxTokens": 777,
            "contextWindowTokens": 50000, "temperature": 0.6
        }}}))
        .start()
        .await
        .unwrap();
    assert_eq!(
        ask(&mut fleet, "/model", Some("cli:m")).await,
        "## Model\n- Current model: `test-model`\n- Current preset: `default`\n- Available presets: `default`, `fast`"
    );
    assert_eq!(
        ask(&mut fleet, "/model FAST", Some("cli:m")).await,
        "Switched model preset to `fast`.\n- Scope: current session\n- Model: `fast-model`\n- Context window: 50000\n- Max output tokens: 777"
    );
    assert_eq!(
        session_metadata(&fleet, "cli:m").await["_nanobot_model_preset"],
        "fast",
        "the choice lives in the session's metadata in Redis"
    );

    // The runner that took the command goes away: a fresh replica serves the next turn.
    fleet.add_replica("agent").await.unwrap();
    fleet.wait_ready().await.unwrap();
    let first = fleet.service_at("agent", 0);
    first.sigkill().unwrap();
    first.wait_exit(Duration::from_secs(5)).await.unwrap();
    assert_eq!(ask(&mut fleet, "hello", Some("cli:m")).await, "echo: hello");
    let request = fleet.llm.requests().pop().unwrap();
    assert_eq!(
        (
            &request.body["model"],
            &request.body["max_tokens"],
            &request.body["temperature"]
        ),
        (&json!("fast-model"), &json!(777), &json!(0.6)),
        "the turn runs on the preset's model and settings"
    );
    assert!(
        ask(&mut fleet, "/model", Some("cli:m"))
            .await
            .contains("- Current model: `fast-model`\n- Current preset: `fast`")
    );

    // Another session keeps the configured model.
    ask(&mut fleet, "hi", Some("cli:other")).await;
    assert_eq!(
        fleet.llm.requests().pop().unwrap().body["model"],
        "test-model"
    );
}

#[tokio::test]
async fn an_unknown_preset_is_refused_with_upstreams_text_and_changes_nothing() {
    let mut fleet = Fleet::builder()
        .roles(&["agent", "tools"])
        .config(json!({"modelPresets": {"fast": {"model": "fast-model"}}}))
        .start()
        .await
        .unwrap();
    assert_eq!(
        ask(&mut fleet, "/model nope", Some("cli:u")).await,
        "Could not switch model preset: model_preset 'nope' not found. Available: fast, default\n\nAvailable presets: `default`, `fast`"
    );
    assert!(session_metadata(&fleet, "cli:u").await["_nanobot_model_preset"].is_null());
    ask(&mut fleet, "hi", Some("cli:u")).await;
    assert_eq!(
        fleet.llm.requests().pop().unwrap().body["model"],
        "test-model"
    );
}

/// Requests to `model` so far.
fn requests_to(fleet: &Fleet, model: &str) -> usize {
    fleet.llm.models().iter().filter(|m| *m == model).count()
}

#[tokio::test]
async fn a_failing_primary_falls_back_and_is_skipped_after_three_failures_until_the_cooldown_ends()
{
    let mut fleet = Fleet::builder()
        .roles(&["agent", "tools"])
        .config(json!({
            "agents": {"defaults": {"fallbackModels": [{"model": "backup-model", "provider": "custom"}]}},
            "runner": {"fallbackCooldownSecs": 5},
        }))
        .start()
        .await
        .unwrap();
    // The primary answers 503 (Retry-After 0, so its 3 retries go at once).
    fleet.llm.when_model(
        "test-model",
        Reply::error(503, r#"{"error":{"message":"overloaded"}}"#).with_retry_after(0),
    );
    for (i, text) in ["one", "two", "three"].into_iter().enumerate() {
        assert_eq!(
            ask(&mut fleet, text, Some("cli:fb")).await,
            format!("echo: {text}"),
            "the fallback answers"
        );
        assert_eq!(
            requests_to(&fleet, "test-model"),
            4 * (i + 1),
            "the primary is tried with its retries first"
        );
        assert_eq!(fleet.llm.models().last().unwrap(), "backup-model");
    }
    // Three failures in a row: the primary is skipped for the cooldown.
    assert_eq!(ask(&mut fleet, "four", Some("cli:fb")).await, "echo: four");
    assert_eq!(
        requests_to(&fleet, "test-model"),
        12,
        "no request to the primary while its circuit is open"
    );
    // The primary recovers; once the cooldown is over a turn probes it and it answers again.
    fleet.llm.clear_model("test-model");
    let deadline = std::time::Instant::now() + TURN;
    let mut turns = 0;
    while requests_to(&fleet, "test-model") == 12 {
        assert!(
            std::time::Instant::now() < deadline,
            "the primary was never probed again"
        );
        turns += 1;
        let text = format!("probe {turns}");
        assert_eq!(
            ask(&mut fleet, &text, Some("cli:fb")).await,
            format!("echo: {text}")
        );
    }
    assert_eq!(
        fleet.llm.models().last().unwrap(),
        "test-model",
        "after the cooldown the primary answers the turn itself"
    );
}

#[tokio::test]
async fn the_api_reply_names_the_model_that_answered_a_fallback_when_the_primary_failed() {
    let fleet = Fleet::builder()
        .roles(&["gateway", "agent", "tools"])
        .config(json!({
            "agents": {"defaults": {"fallbackModels": [{"model": "backup-model", "provider": "custom"}]}},
        }))
        .start()
        .await
        .unwrap();
    let api_model = |text: &'static str| {
        let fleet = &fleet;
        async move {
            let response = crate::e2e::api_completion(fleet, "fb-api", text).await;
            assert_eq!(
                response["choices"][0]["message"]["content"],
                format!("echo: {text}"),
                "{response}"
            );
            response["model"].as_str().unwrap_or_default().to_string()
        }
    };
    assert_eq!(api_model("first").await, "test-model");
    fleet.llm.when_model(
        "test-model",
        Reply::error(503, r#"{"error":{"message":"overloaded"}}"#).with_retry_after(0),
    );
    assert_eq!(api_model("second").await, "backup-model");
}
