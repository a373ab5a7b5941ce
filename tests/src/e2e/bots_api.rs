//! The fleet's admin endpoints over HTTP with the API key (issue 33): `/v1/bots` changes the
//! bot registry as `nanobot bots` does — a bot added over the API answers on Telegram within
//! 10 s and stops after its `DELETE`, bad input is a 400 naming the problem with nothing
//! written, secrets never come back in plain text — and `GET /v1/usage` shows every bot's
//! tokens, the numbers of `nanobot usage`. Without a key configured both are refused (403);
//! without the key given, 401. The fleets run with every role confined to its own NATS and
//! Redis user, so the gateway's rights (registry writes, read-only usage) are the deployed ones.

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{Value, json};

use super::TURN;
use crate::e2e::telegram::{ALICE, TOKEN, TOKEN_B};
use crate::harness::{Fleet, wait_until};
use crate::scripted_llm::Reply;
use crate::telegram_fake::{FakeBot, Incoming, TelegramFake, TgUser};

/// The API key of these fleets.
const KEY: &str = "管理-key-🔑";
/// How soon a registry change must show on the platform.
const LIVE: Duration = Duration::from_secs(10);

/// Sends `method path` with `body` (JSON when an object or array, raw text when a string),
/// with the API key when `key`; returns the status and the JSON body.
async fn call(
    fleet: &Fleet,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
    key: bool,
) -> (StatusCode, Value) {
    let mut request = reqwest::Client::new()
        .request(method, format!("{}{path}", fleet.api_base()))
        .timeout(TURN);
    if key {
        request = request.bearer_auth(KEY);
    }
    request = match body {
        Some(Value::String(raw)) => request.header("content-type", "application/json").body(raw),
        Some(body) => request.json(&body),
        None => request,
    };
    let response = request.send().await.expect("send an admin request");
    let status = response.status();
    let text = response.text().await.expect("a body");
    let body = serde_json::from_str(&text).unwrap_or_else(|_| panic!("JSON body: {text}"));
    (status, body)
}

fn error_text(body: &Value) -> &str {
    body["error"]["message"].as_str().unwrap_or_default()
}

async fn wait_echo(fake: &TelegramFake, bot: &FakeBot, text: &str) {
    let want = format!("echo: {text}");
    fake.wait_until(&want, LIVE, |_| {
        bot.bot_messages(ALICE)
            .iter()
            .any(|m| m.text.as_deref() == Some(want.as_str()))
            .then_some(())
    })
    .await
    .unwrap_or_else(|e| panic!("{e}; shown: {:#?}", bot.bot_messages(ALICE)));
}

async fn secured_fleet(dir: &std::path::Path, extra: Value, env: &[(&str, &str)]) -> Fleet {
    let secured = crate::e2e::security::secured(dir).await;
    let mut builder = Fleet::builder()
        .secured(secured)
        .roles(&["gateway", "agent", "tools"])
        .config(json!({"api": {"apiKey": KEY}}))
        .config(extra);
    for (k, v) in env {
        builder = builder.env(k, v);
    }
    builder.start().await.unwrap()
}

#[tokio::test]
async fn a_bot_added_over_the_api_answers_on_telegram_within_10s_and_stops_after_its_delete() {
    let fake = TelegramFake::start().await.unwrap();
    let first = fake.add_bot(TOKEN, "first_bot");
    let second = fake.add_bot(TOKEN_B, "second_bot");
    let dir = tempfile::tempdir().unwrap();
    let fleet = secured_fleet(
        dir.path(),
        json!({
            "channels": {"telegram": {"apiBase": fake.api_url(), "leaseSecs": 2}},
            "bots": {"alpha": {"channels": {"telegram": {
                "enabled": true, "token": TOKEN, "allowFrom": ["*"], "streaming": false,
            }}}},
        }),
        &[("TG_TOKEN_LIVE", TOKEN_B)],
    )
    .await;
    first.wait_polling().await.unwrap();
    fleet.llm.set_fallback(Reply::echo());
    let alice = TgUser::new(ALICE, "alice");
    let entry = json!({"model": "模型-🤖", "channels": {"telegram": {
        "enabled": true, "token": "${TG_TOKEN_LIVE}", "allowFrom": ["*"], "streaming": false,
    }}});
    let post = reqwest::Method::POST;

    let added = Instant::now();
    let (status, body) = call(
        &fleet,
        post.clone(),
        "/v1/bots",
        Some(json!({"id": "beta", "entry": entry})),
        true,
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(
        body["entry"]["channels"]["telegram"]["token"],
        "${TG_TOKEN_LIVE}"
    );
    second.inject(Incoming::text_from(&alice, "你好 beta 🤖"));
    wait_echo(&fake, &second, "你好 beta 🤖").await;
    let answered_in = added.elapsed();

    let (status, body) = call(
        &fleet,
        post,
        "/v1/bots",
        Some(json!({"id": "beta", "entry": {}})),
        true,
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert!(error_text(&body).contains("exists"), "{body}");

    // Listed with secrets masked: the reference as written, the config bot's plain token never.
    let (status, listed) = call(&fleet, reqwest::Method::GET, "/v1/bots", None, true).await;
    assert_eq!(status, StatusCode::OK, "{listed}");
    let ids: Vec<&str> = listed["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|b| b["id"].as_str())
        .collect();
    assert_eq!(ids, ["alpha", "beta"], "{listed}");
    let text = listed.to_string();
    assert!(!text.contains(TOKEN) && !text.contains(TOKEN_B), "{text}");
    assert_eq!(
        listed["data"][0]["entry"]["channels"]["telegram"]["token"],
        "***"
    );

    let removed = Instant::now();
    let (status, body) = call(&fleet, reqwest::Method::DELETE, "/v1/bots/beta", None, true).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    fake.wait_until("beta's poller stopped", LIVE, |_| {
        (second.poll_stats().in_flight == 0).then_some(())
    })
    .await
    .unwrap();
    let stopped_in = removed.elapsed();
    second.inject(Incoming::text_from(&alice, "还在吗 beta？"));
    first.inject(Incoming::text_from(&alice, "alpha 还在 🌏"));
    wait_echo(&fake, &first, "alpha 还在 🌏").await;
    assert_eq!(
        second.pending_updates(),
        1,
        "the removed bot read its update"
    );
    let (status, body) = call(&fleet, reqwest::Method::GET, "/v1/bots/beta", None, true).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    let (status, _) = call(&fleet, reqwest::Method::DELETE, "/v1/bots/beta", None, true).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    eprintln!("added over the api: answered in {answered_in:?}; poller stopped in {stopped_in:?}");
}

#[tokio::test]
async fn bad_bot_input_over_the_api_is_a_400_with_its_reason_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let fleet = secured_fleet(
        dir.path(),
        json!({"bots": {"alpha": {"model": "m-α"}}}),
        &[],
    )
    .await;
    let post = reqwest::Method::POST;
    let patch = reqwest::Method::PATCH;
    let cases = [
        (
            post.clone(),
            "/v1/bots",
            json!({"id": "gamma", "entry": {"channels": {"telegram": {"token": "9:明文秘密"}}}}),
            "plain text",
        ),
        (
            post.clone(),
            "/v1/bots",
            json!({"id": "a.b", "entry": {}}),
            "bot id",
        ),
        (
            post.clone(),
            "/v1/bots",
            json!({"id": "gamma", "entry": {"nope": "🤷"}}),
            "not a valid bot entry",
        ),
        (
            post.clone(),
            "/v1/bots",
            json!("{not json"),
            "Invalid JSON body",
        ),
        (post, "/v1/bots", json!({"entry": {}}), "id"),
        (
            patch.clone(),
            "/v1/bots/alpha",
            json!({"model": 7}),
            "not a valid bot entry",
        ),
        (patch, "/v1/bots/alpha", json!(["model"]), "JSON object"),
        (
            reqwest::Method::PUT,
            "/v1/bots/alpha",
            json!({"providers": {"x": {"apiKey": "sk-明文"}}}),
            "plain text",
        ),
    ];
    for (method, path, body, reason) in cases {
        let (status, got) = call(&fleet, method.clone(), path, Some(body.clone()), true).await;
        assert_eq!(
            status,
            StatusCode::BAD_REQUEST,
            "{method} {path} {body}: {got}"
        );
        assert!(
            error_text(&got).contains(reason),
            "{method} {path} {body}: {got}"
        );
        let text = got.to_string();
        assert!(!text.contains("明文"), "a secret echoed: {text}");
    }
    let (status, listed) = call(&fleet, reqwest::Method::GET, "/v1/bots", None, true).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        listed["data"],
        json!([{"id": "alpha", "entry": {"model": "m-α"}}]),
        "nothing changed"
    );

    // Without the key: 401 and nothing written.
    let (status, body) = call(
        &fleet,
        reqwest::Method::POST,
        "/v1/bots",
        Some(json!({"id": "gamma", "entry": {}})),
        false,
    )
    .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    for (method, path) in [
        (reqwest::Method::GET, "/v1/bots"),
        (reqwest::Method::DELETE, "/v1/bots/alpha"),
        (reqwest::Method::GET, "/v1/usage"),
    ] {
        let (status, _) = call(&fleet, method.clone(), path, None, false).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{method} {path}");
    }
    let (_, listed) = call(&fleet, reqwest::Method::GET, "/v1/bots", None, true).await;
    assert_eq!(listed["data"].as_array().map(Vec::len), Some(1), "{listed}");
}

#[tokio::test]
async fn admin_endpoints_are_refused_with_403_when_no_api_key_is_configured() {
    let fleet = Fleet::builder()
        .roles(&["gateway", "agent", "tools"])
        .config(json!({"bots": {"alpha": {}}}))
        .start()
        .await
        .unwrap();
    let requests = [
        (reqwest::Method::GET, "/v1/bots", None),
        (
            reqwest::Method::POST,
            "/v1/bots",
            Some(json!({"id": "gamma", "entry": {}})),
        ),
        (reqwest::Method::DELETE, "/v1/bots/alpha", None),
        (reqwest::Method::GET, "/v1/usage", None),
    ];
    for (method, path, body) in requests {
        let (status, got) = call(&fleet, method.clone(), path, body, false).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{method} {path}: {got}");
        assert!(
            error_text(&got).contains("no API key is configured"),
            "{got}"
        );
    }
    let js = async_nats::jetstream::new(fleet.nats.client().await.unwrap());
    let store = nanobot_runtime::bot_registry::open(&js).await.unwrap();
    let bots = nanobot_runtime::bot_registry::list(&store).await.unwrap();
    assert!(!bots.contains_key("gamma"), "{bots:?}");
}

/// Sends one completion to `bot` with the key (SSE when `stream`); returns the status and
/// the reply text, or the error's message when the request was refused.
async fn complete(fleet: &Fleet, bot: &str, text: &str, stream: bool) -> (StatusCode, String) {
    let response = reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", fleet.api_base()))
        .bearer_auth(KEY)
        .header("x-nanobot-bot", bot)
        .json(&json!({"stream": stream, "session_id": "实时-🧪",
            "messages": [{"role": "user", "content": text}]}))
        .timeout(TURN * 2)
        .send()
        .await
        .expect("send a completion");
    let status = response.status();
    let body = response.text().await.expect("a completion body");
    if status != StatusCode::OK {
        let error: Value = serde_json::from_str(&body).unwrap_or_else(|_| panic!("{body}"));
        return (status, error_text(&error).to_string());
    }
    if !stream {
        let reply: Value = serde_json::from_str(&body).unwrap_or_else(|_| panic!("{body}"));
        let text = reply["choices"][0]["message"]["content"].as_str();
        return (status, text.unwrap_or_default().to_string());
    }
    let text = body
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str::<Value>(d).expect("a JSON chunk"))
        .filter_map(|c| {
            c["choices"][0]["delta"]["content"]
                .as_str()
                .map(str::to_string)
        })
        .collect();
    (status, text)
}

/// Waits until a completion to `bot` gets `want` (status and text), streamed and not.
async fn wait_completion(fleet: &Fleet, bot: &str, text: &str, want: (StatusCode, &str)) {
    for stream in [false, true] {
        let last = std::sync::Mutex::new((StatusCode::OK, String::new()));
        let l = &last;
        let got = wait_until(
            move || async move {
                let got = complete(fleet, bot, text, stream).await;
                let done = got.0 == want.0 && got.1 == want.1;
                *l.lock().unwrap() = got;
                done
            },
            LIVE,
        )
        .await;
        let last = last.into_inner().unwrap();
        assert!(got.is_ok(), "stream {stream}: want {want:?}, last {last:?}");
    }
}

#[tokio::test]
async fn a_bot_added_over_the_api_answers_completions_by_its_header_and_is_unknown_after_its_delete()
 {
    let dir = tempfile::tempdir().unwrap();
    let fleet = secured_fleet(dir.path(), json!({"bots": {"alpha": {}}}), &[]).await;
    fleet.llm.set_fallback(Reply::echo());
    let ask = "你好 gamma 🤖，在吗？";
    let (status, _) = complete(&fleet, "gamma", ask, false).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "gamma is not a bot yet");

    let (status, body) = call(
        &fleet,
        reqwest::Method::POST,
        "/v1/bots",
        Some(json!({"id": "gamma", "entry": {"model": "模型-🤖"}})),
        true,
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let echo = format!("echo: {ask}");
    wait_completion(&fleet, "gamma", ask, (StatusCode::OK, &echo)).await;
    let models: Value = reqwest::Client::new()
        .get(format!("{}/v1/models", fleet.api_base()))
        .bearer_auth(KEY)
        .header("x-nanobot-bot", "gamma")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(models["data"][0]["id"], "模型-🤖", "{models}");

    let (status, body) = call(
        &fleet,
        reqwest::Method::DELETE,
        "/v1/bots/gamma",
        None,
        true,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let unknown = (StatusCode::NOT_FOUND, "Unknown bot 'gamma'");
    wait_completion(&fleet, "gamma", ask, unknown).await;
    assert_eq!(
        complete(&fleet, "alpha", "alpha 还在 🌏", false).await,
        (StatusCode::OK, "echo: alpha 还在 🌏".to_string())
    );
}

/// Sends one completion to `bot` with the key; returns the reply text.
async fn ask(fleet: &Fleet, bot: &str, text: &str) -> String {
    let response: Value = reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", fleet.api_base()))
        .bearer_auth(KEY)
        .header("x-nanobot-bot", bot)
        .json(&json!({"session_id": "用量-🧪", "messages": [{"role": "user", "content": text}]}))
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

#[tokio::test]
async fn usage_over_the_api_shows_both_bots_tokens_as_the_cli_does() {
    let dir = tempfile::tempdir().unwrap();
    let fleet = secured_fleet(dir.path(), json!({"bots": {"alpha": {}}}), &[]).await;
    fleet.llm.push(Reply::text("好的 ✅").with_usage(80, 30));
    assert_eq!(ask(&fleet, "alpha", "数一数 🔢").await, "好的 ✅");
    // beta is added live, so both reports must read the registry's bots, not the config's.
    let (status, body) = call(
        &fleet,
        reqwest::Method::POST,
        "/v1/bots",
        Some(json!({"id": "beta", "entry": {"model": "模型-🤖"}})),
        true,
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    // Until beta answers: `/help`, which the agent answers without the model (no tokens).
    let f = &fleet;
    let known = wait_until(
        move || async move { complete(f, "beta", "/help", false).await.0 == StatusCode::OK },
        LIVE,
    )
    .await;
    assert!(known.is_ok(), "beta answers within {LIVE:?} of its POST");
    fleet.llm.push(Reply::text("beta 在此 🐝").with_usage(5, 7));
    assert_eq!(ask(&fleet, "beta", "你好 👋").await, "beta 在此 🐝");

    let totals = |body: &Value| body["totals"].clone();
    let want = json!({
        "alpha": {"input_tokens": 80, "output_tokens": 30},
        "beta": {"input_tokens": 5, "output_tokens": 7},
    });
    let last = std::sync::Mutex::new(Value::Null);
    let (f, w, l) = (&fleet, &want, &last);
    let shown = wait_until(
        move || async move {
            let (_, body) = call(f, reqwest::Method::GET, "/v1/usage", None, true).await;
            let done = totals(&body) == *w;
            *l.lock().unwrap() = body;
            done
        },
        TURN,
    )
    .await;
    let last = last.into_inner().unwrap();
    assert!(shown.is_ok(), "usage shown: {last}");
    let rows = last["data"].as_array().unwrap();
    let beta = rows
        .iter()
        .find(|r| r["bot"] == "beta" && r["model"] == "模型-🤖")
        .unwrap_or_else(|| panic!("beta's row by model: {last}"));
    let today = beta["day"].as_str().unwrap().to_string();

    // The CLI reports the same numbers.
    let out = fleet.cli(&["usage"]).await.unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("total alpha: 80 input, 30 output tokens"),
        "{stdout}"
    );
    assert!(
        stdout.contains("total beta: 5 input, 7 output tokens"),
        "{stdout}"
    );

    let (status, one) = call(
        &fleet,
        reqwest::Method::GET,
        "/v1/usage?bot=beta",
        None,
        true,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        one["totals"],
        json!({"beta": {"input_tokens": 5, "output_tokens": 7}})
    );
    let path = format!("/v1/usage?since={today}");
    let (_, since_today) = call(&fleet, reqwest::Method::GET, &path, None, true).await;
    assert_eq!(totals(&since_today), want);
    let (status, bad) = call(
        &fleet,
        reqwest::Method::GET,
        "/v1/usage?since=昨天",
        None,
        true,
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}");
    assert!(error_text(&bad).contains("since"), "{bad}");
    let path = "/v1/usage?since=1900-01-01";
    let (status, bad) = call(&fleet, reqwest::Method::GET, path, None, true).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}");
    assert!(error_text(&bad).contains("at most 400 days"), "{bad}");
}
