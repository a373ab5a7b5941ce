//! The OpenAI-compatible API end to end: a real nats-server, the gateway run in-process, and a
//! scripted runner standing in for the agent.

mod support;

use std::time::Duration;

use serde_json::{Value, json};

use support::{Gateway, Nats, Runner, add_bot, config};

async fn post_to(http: reqwest::Client, url: String, body: Value) -> (u16, Value) {
    let resp = http.post(url).json(&body).send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap())
}

async fn post(gw: &Gateway, body: Value) -> (u16, Value) {
    post_to(gw.http.clone(), gw.url("/v1/chat/completions"), body).await
}

fn user(content: &str) -> Value {
    json!({"messages": [{"role": "user", "content": content}]})
}

/// Returns the `data:` payloads of an SSE body.
fn sse_data(body: &str) -> Vec<String> {
    body.split("\n\n")
        .filter_map(|event| event.trim().strip_prefix("data: ").map(str::to_string))
        .collect()
}

async fn post_stream(gw: &Gateway, content: &str) -> (String, Vec<String>) {
    let body = json!({"messages": [{"role": "user", "content": content}], "stream": true});
    let resp = gw
        .http
        .post(gw.url("/v1/chat/completions"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let content_type = resp.headers()["content-type"].to_str().unwrap().to_string();
    (content_type, sse_data(&resp.text().await.unwrap()))
}

fn delta_texts(events: &[String]) -> Vec<String> {
    let mut texts = Vec::new();
    for data in events {
        let Ok(chunk) = serde_json::from_str::<Value>(data) else {
            continue;
        };
        if let Some(text) = chunk["choices"][0]["delta"]["content"].as_str() {
            texts.push(text.to_string());
        }
    }
    texts
}

#[tokio::test]
async fn completion_round_trip_publishes_api_session_and_returns_the_final_reply() {
    let nats = Nats::start().await;
    let ws = tempfile::tempdir().unwrap();
    let mut runner = Runner::start(&nats).await;
    let gw = Gateway::start(config(&nats, ws.path())).await;

    let mut body = user("hello");
    body["session_id"] = json!("abc");
    body["model"] = json!("test-model");
    let (status, reply) = post(&gw, body).await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(reply["object"], "chat.completion");
    assert_eq!(reply["model"], "test-model");
    assert_eq!(
        reply["choices"][0]["message"],
        json!({"role": "assistant", "content": "echo: hello"})
    );
    assert_eq!(reply["choices"][0]["finish_reason"], "stop");
    assert_eq!(reply["usage"]["total_tokens"], 0);
    let id = reply["id"].as_str().unwrap();
    assert!(
        id.starts_with("chatcmpl-") && id.len() == "chatcmpl-".len() + 12,
        "{id}"
    );
    assert!(reply["created"].as_u64().unwrap() > 0);

    let inbound = runner.next_inbound().await;
    assert_eq!(inbound.session_key, "api:abc");
    assert_eq!(
        (inbound.channel.as_str(), inbound.sender_id.as_str()),
        ("api", "api")
    );
    assert_eq!(
        (inbound.chat_id.as_str(), inbound.bot.as_str()),
        ("abc", "default")
    );
    assert_eq!((inbound.content.as_str(), inbound.stream), ("hello", false));
    assert_eq!(inbound.metadata_json, "{}");
    assert!(uuid::Uuid::parse_str(&inbound.id).is_ok() && inbound.timestamp_ms > 0);

    let (status, reply) = post(&gw, user("again")).await;
    assert_eq!(
        (status, reply["choices"][0]["message"]["content"].clone()),
        (200, json!("echo: again"))
    );
    let inbound = runner.next_inbound().await;
    assert_eq!(
        (inbound.session_key.as_str(), inbound.chat_id.as_str()),
        ("api:default", "default")
    );
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn streaming_sends_deltas_in_seq_order_then_stop_and_done() {
    let nats = Nats::start().await;
    let ws = tempfile::tempdir().unwrap();
    let mut runner = Runner::start(&nats).await;
    let gw = Gateway::start(config(&nats, ws.path())).await;

    let (content_type, events) = post_stream(&gw, "stream:Hel|lo |world").await;
    assert!(
        content_type.starts_with("text/event-stream"),
        "{content_type}"
    );
    assert_eq!(delta_texts(&events), vec!["Hel", "lo ", "world"]);
    assert_eq!(events.last().unwrap(), "[DONE]");
    let stop: Value = serde_json::from_str(&events[events.len() - 2]).unwrap();
    assert_eq!(stop["object"], "chat.completion.chunk");
    assert_eq!(stop["choices"][0]["finish_reason"], "stop");
    assert_eq!(stop["choices"][0]["delta"], json!({}));
    assert_eq!(stop["model"], "test-model");
    let first: Value = serde_json::from_str(&events[0]).unwrap();
    assert_eq!(
        first["id"], stop["id"],
        "one id for every chunk of a completion"
    );
    assert!(first["choices"][0]["finish_reason"].is_null());
    assert!(runner.next_inbound().await.stream);

    // A final reply without any delta is sent as one delta.
    let (_, events) = post_stream(&gw, "no deltas here").await;
    assert_eq!(delta_texts(&events), vec!["echo: no deltas here"]);
    assert_eq!(events.last().unwrap(), "[DONE]");
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn invalid_requests_get_the_upstream_error_texts() {
    let nats = Nats::start().await;
    let ws = tempfile::tempdir().unwrap();
    let mut cfg = config(&nats, ws.path());
    cfg.api.api_key = "sekrit".into();
    let gw = Gateway::start(cfg).await;
    let url = gw.url("/v1/chat/completions");

    let resp = gw.http.post(&url).json(&user("hi")).send().await.unwrap();
    assert_eq!(resp.status(), 401);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(
        body,
        json!({"error": {"message": "Missing Authorization header. Use: Bearer <api_key>",
                         "type": "invalid_request_error", "code": 401}})
    );
    let resp = gw
        .http
        .post(&url)
        .header("Authorization", "Basic c2Vrcml0")
        .json(&user("hi"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 401);
    assert_eq!(
        resp.json::<Value>().await.unwrap(),
        json!({"error": {"message": "Missing Authorization header. Use: Bearer <api_key>",
                         "type": "invalid_request_error", "code": 401}}),
        "a header not in the Bearer form is reported as missing, as upstream"
    );
    let resp = gw
        .http
        .post(&url)
        .bearer_auth("wrong")
        .json(&user("hi"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 401);
    assert_eq!(
        resp.json::<Value>().await.unwrap(),
        json!({"error": {"message": "Invalid API key", "type": "invalid_request_error", "code": 401}})
    );
    let resp = gw.http.get(gw.url("/v1/models")).send().await.unwrap();
    assert_eq!(resp.status(), 401, "models need the key too");

    let cases = [
        (
            json!({"messages": []}),
            "Only a single user message is supported",
        ),
        (
            json!({"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]}),
            "Only a single user message is supported",
        ),
        (
            json!({"messages": [{"role": "assistant", "content": "a"}]}),
            "Only a single user message is supported",
        ),
        (
            json!({"messages": [{"role": "user", "content": "a"}], "model": "gpt-4"}),
            "Only configured model 'test-model' is available",
        ),
        (
            json!({"messages": [{"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}]}]}),
            "Remote image URLs are not supported. Use base64 data URLs.",
        ),
    ];
    for (body, message) in cases {
        let resp = gw
            .http
            .post(&url)
            .bearer_auth("sekrit")
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 400, "{body}");
        let err: Value = resp.json().await.unwrap();
        assert_eq!(
            err,
            json!({"error": {"message": message, "type": "invalid_request_error", "code": 400}})
        );
    }
    let resp = gw
        .http
        .post(&url)
        .bearer_auth("sekrit")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    assert_eq!(
        resp.json::<Value>().await.unwrap()["error"]["message"],
        "Invalid JSON body"
    );
    let huge = vec![b' '; 20 * 1024 * 1024 + 1];
    let resp = gw
        .http
        .post(&url)
        .bearer_auth("sekrit")
        .body(huge)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 413);
    assert_eq!(
        resp.json::<Value>().await.unwrap()["error"]["message"],
        "Request body too large"
    );

    let resp = gw
        .http
        .post(&url)
        .bearer_auth("sekrit")
        .header("X-Nanobot-Bot", "nobody")
        .json(&user("hi"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);
    assert_eq!(
        resp.json::<Value>().await.unwrap()["error"]["message"],
        "Unknown bot 'nobody'"
    );
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn a_missing_reply_times_out_with_504_and_an_agent_error_is_a_500() {
    let nats = Nats::start().await;
    let ws = tempfile::tempdir().unwrap();
    let _runner = Runner::start(&nats).await;
    let mut cfg = config(&nats, ws.path());
    cfg.api.timeout = 0.5;
    let gw = Gateway::start(cfg).await;

    let (status, body) = post(&gw, user("silent")).await;
    assert_eq!(status, 504);
    assert_eq!(body["error"]["message"], "Request timed out after 0.5s");

    let (_, events) = post_stream(&gw, "silent").await;
    let last: Value = serde_json::from_str(events.last().unwrap()).unwrap();
    assert_eq!(last["error"]["message"], "Request timed out after 0.5s");
    assert!(!events.iter().any(|e| e == "[DONE]"));

    let (status, body) = post(&gw, user("error")).await;
    assert_eq!(status, 500);
    assert_eq!(
        body,
        json!({"error": {"message": "Sorry, the model is unavailable.", "type": "server_error", "code": 500}})
    );
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn concurrent_requests_each_get_their_own_reply() {
    let nats = Nats::start().await;
    let ws = tempfile::tempdir().unwrap();
    let _runner = Runner::start(&nats).await;
    let gw = Gateway::start(config(&nats, ws.path())).await;

    let slow =
        json!({"messages": [{"role": "user", "content": "delay:400:slow"}], "session_id": "s1"});
    let fast = json!({"messages": [{"role": "user", "content": "fast"}], "session_id": "s2"});
    let ((s1, slow), (s2, fast)) = tokio::join!(post(&gw, slow), post(&gw, fast));
    assert_eq!((s1, s2), (200, 200));
    assert_eq!(slow["choices"][0]["message"]["content"], "echo: slow");
    assert_eq!(fast["choices"][0]["message"]["content"], "echo: fast");
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn requests_for_one_session_run_one_at_a_time() {
    let nats = Nats::start().await;
    let ws = tempfile::tempdir().unwrap();
    let mut runner = Runner::start(&nats).await;
    let gw = Gateway::start(config(&nats, ws.path())).await;
    let url = gw.url("/v1/chat/completions");

    let first =
        json!({"messages": [{"role": "user", "content": "delay:800:first"}], "session_id": "same"});
    let first = tokio::spawn(post_to(gw.http.clone(), url.clone(), first));
    assert_eq!(runner.next_inbound().await.content, "delay:800:first");
    let second = json!({"messages": [{"role": "user", "content": "second"}], "session_id": "same"});
    let second = tokio::spawn(post_to(gw.http.clone(), url, second));
    // While the first turn runs, the second request of the session must wait.
    let early = tokio::time::timeout(Duration::from_millis(400), runner.inbound.recv()).await;
    assert!(
        early.is_err(),
        "second request published while its session was busy"
    );
    assert_eq!(runner.next_inbound().await.content, "second");
    let (first, second) = (first.await.unwrap(), second.await.unwrap());
    assert_eq!(first.1["choices"][0]["message"]["content"], "echo: first");
    assert_eq!(second.1["choices"][0]["message"]["content"], "echo: second");
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn models_health_and_bot_selection() {
    let nats = Nats::start().await;
    let ws = tempfile::tempdir().unwrap();
    let mut runner = Runner::start(&nats).await;
    let mut cfg = config(&nats, ws.path());
    add_bot(&mut cfg, "alpha", "alpha-model");
    add_bot(&mut cfg, "beta", "beta-model");
    cfg.api.api_key = "k".into();
    let gw = Gateway::start(cfg).await;

    let health: Value = gw
        .http
        .get(gw.url("/health"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(health, json!({"status": "ok"}));
    let models: Value = gw
        .http
        .get(gw.url("/v1/models"))
        .bearer_auth("k")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        models,
        json!({"object": "list", "data": [{"id": "alpha-model", "object": "model", "created": 0, "owned_by": "nanobot"}]})
    );

    let body = json!({"messages": [{"role": "user", "content": "hi beta"}], "model": "beta-model"});
    let resp = gw
        .http
        .post(gw.url("/v1/chat/completions"))
        .bearer_auth("k")
        .header("X-Nanobot-Bot", "beta")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let reply: Value = resp.json().await.unwrap();
    assert_eq!(reply["model"], "beta-model");
    let inbound = runner.next_inbound().await;
    assert_eq!(inbound.bot, "beta");
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn data_url_images_are_saved_and_passed_as_media() {
    let nats = Nats::start().await;
    let ws = tempfile::tempdir().unwrap();
    let mut runner = Runner::start(&nats).await;
    let gw = Gateway::start(config(&nats, ws.path())).await;

    let body = json!({"messages": [{"role": "user", "content": [
        {"type": "text", "text": "what is"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
        {"type": "text", "text": "this?"}]}]});
    let (status, _) = post(&gw, body).await;
    assert_eq!(status, 200);
    let inbound = runner.next_inbound().await;
    assert_eq!(inbound.content, "what is this?");
    assert_eq!(inbound.media.len(), 1);
    assert!(
        inbound.media[0].starts_with(ws.path().to_str().unwrap()),
        "{:?}",
        inbound.media
    );
    assert_eq!(
        std::fs::read(&inbound.media[0]).unwrap(),
        b"\x89PNG\r\n\x1a\n"
    );
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn shutdown_finishes_in_flight_requests_and_returns_ok() {
    let nats = Nats::start().await;
    let ws = tempfile::tempdir().unwrap();
    let mut runner = Runner::start(&nats).await;
    let gw = Gateway::start(config(&nats, ws.path())).await;

    let http = gw.http.clone();
    let url = gw.url("/v1/chat/completions");
    let in_flight = tokio::spawn(async move {
        let resp = http
            .post(url)
            .json(&user("delay:500:late"))
            .send()
            .await
            .unwrap();
        (resp.status().as_u16(), resp.json::<Value>().await.unwrap())
    });
    runner.next_inbound().await;
    let base = gw.base.clone();
    gw.stop().await.unwrap();
    let (status, reply) = in_flight.await.unwrap();
    assert_eq!(status, 200);
    assert_eq!(reply["choices"][0]["message"]["content"], "echo: late");
    assert!(
        reqwest::get(format!("{base}/health")).await.is_err(),
        "listener closed after shutdown"
    );
}
