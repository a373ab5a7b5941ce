//! Every reply shape over real HTTP.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::*;

async fn post(url: String, body: Value) -> (u16, reqwest::header::HeaderMap, String) {
    let resp = reqwest::Client::new()
        .post(url)
        .bearer_auth("test-key")
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    (status, headers, resp.text().await.unwrap())
}

async fn chat(llm: &ScriptedLlm, body: Value) -> Value {
    let (status, _, text) = post(format!("{}/chat/completions", llm.base_url()), body).await;
    assert_eq!(status, 200, "{text}");
    serde_json::from_str(&text).unwrap()
}

fn user(text: &str) -> Value {
    json!({"model": "test-model", "messages": [{"role": "user", "content": text}]})
}

/// Parses an SSE body into `(event name, data)` pairs.
fn sse(text: &str) -> Vec<(String, String)> {
    let mut events = Vec::new();
    for block in text.split("\n\n").filter(|b| !b.trim().is_empty()) {
        let mut name = String::new();
        let mut data = String::new();
        for line in block.lines() {
            if let Some(v) = line.strip_prefix("event: ") {
                name = v.to_string();
            } else if let Some(v) = line.strip_prefix("data: ") {
                data = v.to_string();
            }
        }
        events.push((name, data));
    }
    events
}

#[tokio::test]
async fn openai_text_reply_has_message_finish_usage_and_is_recorded() {
    let llm = ScriptedLlm::start().await.unwrap();
    llm.push(Reply::text("hello there"));
    let body = chat(&llm, user("hi")).await;
    assert_eq!(body["object"], "chat.completion");
    assert_eq!(body["model"], "test-model");
    assert_eq!(body["choices"][0]["message"]["role"], "assistant");
    assert_eq!(body["choices"][0]["message"]["content"], "hello there");
    assert!(body["choices"][0]["message"].get("tool_calls").is_none());
    assert_eq!(body["choices"][0]["finish_reason"], "stop");
    let usage = &body["usage"];
    let total =
        usage["prompt_tokens"].as_u64().unwrap() + usage["completion_tokens"].as_u64().unwrap();
    assert_eq!(usage["total_tokens"].as_u64(), Some(total));

    let recorded = llm.requests();
    assert_eq!(llm.request_count(), 1);
    assert_eq!(recorded[0].path, "/v1/chat/completions");
    assert_eq!(recorded[0].headers["authorization"], "Bearer test-key");
    assert_eq!(recorded[0].body["messages"][0]["content"], "hi");
    assert_eq!(recorded[0].last_user_text().as_deref(), Some("hi"));
}

#[tokio::test]
async fn queued_replies_are_consumed_in_order_then_the_fallback_echoes() {
    let llm = ScriptedLlm::start().await.unwrap();
    llm.push(Reply::text("first"));
    llm.push(Reply::text("second"));
    let mut got = Vec::new();
    for msg in ["a", "b", "third message"] {
        got.push(chat(&llm, user(msg)).await["choices"][0]["message"]["content"].clone());
    }
    assert_eq!(
        got,
        vec![
            json!("first"),
            json!("second"),
            json!("echo: third message")
        ]
    );
    assert_eq!(llm.queued(), 0);
}

#[tokio::test]
async fn rules_win_over_the_queue_and_are_reusable() {
    let llm = ScriptedLlm::start().await.unwrap();
    llm.push(Reply::text("queued"));
    llm.when_last_user_contains("weather", Reply::text("sunny"));
    let content = |v: Value| v["choices"][0]["message"]["content"].clone();
    assert_eq!(
        content(chat(&llm, user("what is the weather?")).await),
        "sunny"
    );
    assert_eq!(content(chat(&llm, user("weather again")).await), "sunny");
    assert_eq!(content(chat(&llm, user("something else")).await), "queued");
    // Text parts count as the user's text too.
    let parts = json!({"messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "data:x"}},
        {"type": "text", "text": "weather in parts"},
    ]}]});
    assert_eq!(content(chat(&llm, parts).await), "sunny");
}

#[tokio::test]
async fn rule_sequences_answer_each_step_of_a_turn_then_fall_through() {
    let llm = ScriptedLlm::start().await.unwrap();
    llm.when_last_user_contains_seq(
        "list files",
        vec![
            Reply::tool_calls([("list_dir", json!({"path": "."}))]),
            Reply::text("two files"),
        ],
    );
    let step0 = chat(&llm, user("please list files")).await;
    assert_eq!(step0["choices"][0]["finish_reason"], "tool_calls");
    let call = step0["choices"][0]["message"]["tool_calls"][0].clone();
    let turn = |extra: Vec<Value>| {
        let mut messages = vec![
            json!({"role": "system", "content": "sys"}),
            json!({"role": "user", "content": "please list files"}),
        ];
        messages.extend(extra);
        json!({"messages": messages})
    };
    let assistant = json!({"role": "assistant", "content": null, "tool_calls": [call]});
    let tool = json!({"role": "tool", "tool_call_id": "call_1", "content": "a b"});
    let step1 = chat(&llm, turn(vec![assistant.clone(), tool.clone()])).await;
    assert_eq!(step1["choices"][0]["message"]["content"], "two files");
    let done = json!({"role": "assistant", "content": "two files"});
    let step2 = chat(&llm, turn(vec![assistant, tool, done])).await;
    assert_eq!(
        step2["choices"][0]["message"]["content"],
        "echo: please list files"
    );
}

#[tokio::test]
async fn tool_calls_get_server_wide_ids_and_json_arguments() {
    let llm = ScriptedLlm::start().await.unwrap();
    llm.push(Reply::tool_calls([
        ("read_file", json!({"path": "a.txt"})),
        ("exec", json!({"command": "ls"})),
    ]));
    llm.push(Reply::tool_calls([("read_file", json!({"path": "b.txt"}))]).with_text("looking"));
    let first = chat(&llm, user("go")).await;
    let calls = first["choices"][0]["message"]["tool_calls"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(calls.len(), 2);
    assert_eq!(
        (calls[0]["id"].clone(), calls[1]["id"].clone()),
        (json!("call_1"), json!("call_2"))
    );
    assert_eq!(calls[0]["type"], "function");
    assert_eq!(calls[0]["function"]["name"], "read_file");
    let args: Value =
        serde_json::from_str(calls[0]["function"]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(args, json!({"path": "a.txt"}));
    assert!(first["choices"][0]["message"]["content"].is_null());
    let second = chat(&llm, user("go")).await;
    assert_eq!(
        second["choices"][0]["message"]["tool_calls"][0]["id"],
        "call_3"
    );
    assert_eq!(second["choices"][0]["message"]["content"], "looking");
}

#[tokio::test]
async fn malformed_args_length_empty_and_reasoning_render_as_scripted() {
    let llm = ScriptedLlm::start().await.unwrap();
    llm.push(Reply::malformed_tool_args("write_file", "{not json"));
    llm.push(Reply::finish_length("partial"));
    llm.push(Reply::empty());
    llm.push(
        Reply::text("answer")
            .with_reasoning("thinking hard")
            .with_usage(1000, 7),
    );
    let bad = chat(&llm, user("x")).await;
    assert_eq!(
        bad["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"],
        "{not json"
    );
    let cut = chat(&llm, user("x")).await;
    assert_eq!(
        (
            cut["choices"][0]["finish_reason"].clone(),
            cut["choices"][0]["message"]["content"].clone()
        ),
        (json!("length"), json!("partial"))
    );
    let empty = chat(&llm, user("x")).await;
    assert!(empty["choices"][0]["message"]["content"].is_null());
    assert_eq!(empty["choices"][0]["finish_reason"], "stop");
    let reasoned = chat(&llm, user("x")).await;
    assert_eq!(
        reasoned["choices"][0]["message"]["reasoning_content"],
        "thinking hard"
    );
    assert_eq!(
        reasoned["usage"],
        json!({"prompt_tokens": 1000, "completion_tokens": 7, "total_tokens": 1007})
    );
}

#[tokio::test]
async fn error_replies_carry_status_body_and_retry_after() {
    let llm = ScriptedLlm::start().await.unwrap();
    let body = json!({"error": {"message": "rate limit exceeded", "type": "rate_limit"}});
    llm.push(Reply::error(429, &body).with_retry_after(2));
    llm.push(Reply::error(500, "upstream exploded"));
    let url = format!("{}/chat/completions", llm.base_url());
    let (status, headers, text) = post(url.clone(), user("x")).await;
    assert_eq!(status, 429);
    assert_eq!(headers["retry-after"], "2");
    assert_eq!(headers["content-type"], "application/json");
    assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), body);
    let (status, headers, text) = post(url, json!({"stream": true, "messages": []})).await;
    assert_eq!((status, text.as_str()), (500, "upstream exploded"));
    assert!(headers.get("retry-after").is_none());
}

#[tokio::test]
async fn delayed_replies_are_recorded_on_arrival_and_answered_after_the_delay() {
    let llm = ScriptedLlm::start().await.unwrap();
    llm.push(Reply::text("slow").with_delay(Duration::from_millis(400)));
    let started = Instant::now();
    let pending = tokio::spawn({
        let llm = llm.clone();
        async move { chat(&llm, user("x")).await }
    });
    let seen = llm
        .wait_for_requests(1, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(seen.len(), 1);
    assert!(!pending.is_finished(), "the reply must still be held back");
    let body = pending.await.unwrap();
    let answered = Instant::now();
    assert!(started.elapsed() >= Duration::from_millis(400));
    let arrived = seen[0].received_at;
    assert!(
        arrived >= started && answered.duration_since(arrived) >= Duration::from_millis(400),
        "the arrival time is taken before the delay"
    );
    assert_eq!(body["choices"][0]["message"]["content"], "slow");
    let err = llm
        .wait_for_requests(2, Duration::from_millis(50))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("1 of 2"), "{err}");
}

#[tokio::test]
async fn openai_stream_sends_deltas_tool_call_pieces_finish_usage_and_done() {
    let llm = ScriptedLlm::start().await.unwrap();
    llm.push(
        Reply::tool_calls([("read_file", json!({"path": "some/long/path.txt"}))])
            .with_text("let me check that file")
            .with_reasoning("need the file"),
    );
    let mut body = user("x");
    body["stream"] = json!(true);
    let (status, headers, text) = post(format!("{}/chat/completions", llm.base_url()), body).await;
    assert_eq!(status, 200);
    assert!(
        headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    let events = sse(&text);
    assert_eq!(events.last().unwrap().1, "[DONE]");
    let chunks: Vec<Value> = events[..events.len() - 1]
        .iter()
        .map(|(_, d)| serde_json::from_str(d).unwrap())
        .collect();
    assert!(
        chunks
            .iter()
            .all(|c| c["object"] == "chat.completion.chunk")
    );
    let deltas: Vec<&Value> = chunks
        .iter()
        .filter_map(|c| c["choices"].get(0))
        .map(|c| &c["delta"])
        .collect();
    let content: Vec<&str> = deltas
        .iter()
        .filter_map(|d| d["content"].as_str())
        .filter(|s| !s.is_empty())
        .collect();
    assert!(content.len() >= 2, "content must arrive in several deltas");
    assert_eq!(content.concat(), "let me check that file");
    let reasoning: String = deltas
        .iter()
        .filter_map(|d| d["reasoning_content"].as_str())
        .collect();
    assert_eq!(reasoning, "need the file");
    let calls: Vec<&Value> = deltas
        .iter()
        .filter_map(|d| d["tool_calls"].get(0))
        .collect();
    assert_eq!(calls[0]["id"], "call_1");
    assert_eq!(calls[0]["function"]["name"], "read_file");
    assert!(calls.iter().all(|c| c["index"] == 0));
    assert!(calls.len() >= 3, "arguments must arrive in pieces");
    let args: String = calls
        .iter()
        .filter_map(|c| c["function"]["arguments"].as_str())
        .collect();
    assert_eq!(
        serde_json::from_str::<Value>(&args).unwrap(),
        json!({"path": "some/long/path.txt"})
    );
    let finish: Vec<&Value> = chunks
        .iter()
        .filter_map(|c| c["choices"].get(0))
        .map(|c| &c["finish_reason"])
        .filter(|f| !f.is_null())
        .collect();
    assert_eq!(finish, vec![&json!("tool_calls")]);
    let usage = chunks.last().unwrap();
    assert_eq!(usage["choices"], json!([]));
    assert!(usage["usage"]["total_tokens"].as_u64().unwrap() > 0);
}

#[tokio::test]
async fn models_lists_the_test_model() {
    let llm = ScriptedLlm::start().await.unwrap();
    let body: Value = reqwest::get(format!("{}/models", llm.base_url()))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(body["object"], "list");
    assert_eq!(body["data"][0]["id"], "test-model");
    assert_eq!(
        llm.request_count(),
        0,
        "model listing is not an llm request"
    );
}

fn anthropic_turn(extra: Vec<Value>) -> Value {
    let mut messages =
        vec![json!({"role": "user", "content": [{"type": "text", "text": "read the notes"}]})];
    messages.extend(extra);
    json!({"model": "claude-test", "max_tokens": 100, "system": "sys", "messages": messages,
           "tools": [{"name": "read_file", "input_schema": {"type": "object"}}]})
}

#[tokio::test]
async fn anthropic_messages_render_thinking_text_tool_use_and_stop_reasons() {
    let llm = ScriptedLlm::start().await.unwrap();
    llm.when_last_user_contains_seq(
        "read the notes",
        vec![
            Reply::tool_calls([("read_file", json!({"path": "notes.md"}))])
                .with_text("reading")
                .with_reasoning("plan"),
            Reply::finish_length("the notes say"),
        ],
    );
    let url = format!("{}/v1/messages", llm.anthropic_base());
    let (status, _, text) = post(url.clone(), anthropic_turn(vec![])).await;
    assert_eq!(status, 200, "{text}");
    let first: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        (
            first["type"].clone(),
            first["role"].clone(),
            first["model"].clone()
        ),
        (json!("message"), json!("assistant"), json!("claude-test"))
    );
    let kinds: Vec<&str> = first["content"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["type"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, vec!["thinking", "text", "tool_use"]);
    assert_eq!(first["content"][0]["thinking"], "plan");
    assert!(first["content"][0]["signature"].is_string());
    assert_eq!(first["content"][2]["input"], json!({"path": "notes.md"}));
    assert_eq!(first["stop_reason"], "tool_use");
    assert!(first["usage"]["input_tokens"].as_u64().unwrap() > 0);
    // Tool results come back in a user message; it is not "the last user message".
    let assistant = json!({"role": "assistant", "content": first["content"]});
    let result = json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": first["content"][2]["id"], "content": "hi"}]});
    let (_, _, text) = post(url, anthropic_turn(vec![assistant, result])).await;
    let second: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        second["content"],
        json!([{"type": "text", "text": "the notes say"}])
    );
    assert_eq!(second["stop_reason"], "max_tokens");
    let recorded = llm.requests();
    assert_eq!(recorded[1].path, "/v1/messages");
    assert_eq!(
        recorded[1].last_user_text().as_deref(),
        Some("read the notes")
    );
    assert_eq!(recorded[1].tool_names(), vec!["read_file"]);
}

#[tokio::test]
async fn anthropic_stream_emits_the_event_sequence_with_split_deltas() {
    let llm = ScriptedLlm::start().await.unwrap();
    llm.push(
        Reply::tool_calls([("exec", json!({"command": "echo hello world"}))])
            .with_text("running it now")
            .with_reasoning("ok"),
    );
    let mut body = anthropic_turn(vec![]);
    body["stream"] = json!(true);
    let (status, _, text) = post(format!("{}/v1/messages", llm.anthropic_base()), body).await;
    assert_eq!(status, 200);
    let events = sse(&text);
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names.first(), Some(&"message_start"));
    assert_eq!(&names[names.len() - 2..], ["message_delta", "message_stop"]);
    assert_eq!(
        names
            .iter()
            .filter(|n| **n == "content_block_start")
            .count(),
        3
    );
    assert_eq!(
        names.iter().filter(|n| **n == "content_block_stop").count(),
        3
    );
    let data: Vec<Value> = events
        .iter()
        .map(|(_, d)| serde_json::from_str(d).unwrap())
        .collect();
    for (name, value) in names.iter().zip(&data) {
        assert_eq!(value["type"], *name, "event name and data type agree");
    }
    let deltas: Vec<&Value> = data
        .iter()
        .filter(|d| d["type"] == "content_block_delta")
        .collect();
    let text_pieces: Vec<&str> = deltas
        .iter()
        .filter_map(|d| d["delta"]["text"].as_str())
        .collect();
    assert!(text_pieces.len() >= 2);
    assert_eq!(text_pieces.concat(), "running it now");
    let json_pieces: String = deltas
        .iter()
        .filter(|d| d["index"] == 2)
        .filter_map(|d| d["delta"]["partial_json"].as_str())
        .collect();
    assert_eq!(
        serde_json::from_str::<Value>(&json_pieces).unwrap(),
        json!({"command": "echo hello world"})
    );
    let tool_start = data
        .iter()
        .find(|d| d["type"] == "content_block_start" && d["index"] == 2)
        .unwrap();
    assert_eq!(tool_start["content_block"]["name"], "exec");
    assert_eq!(tool_start["content_block"]["id"], "call_1");
    let message_delta = &data[data.len() - 2];
    assert_eq!(message_delta["delta"]["stop_reason"], "tool_use");
    assert!(message_delta["usage"]["output_tokens"].as_u64().unwrap() > 0);
}

#[tokio::test]
async fn anthropic_echo_and_errors_share_the_scripts() {
    let llm = ScriptedLlm::start().await.unwrap();
    llm.push(Reply::error(
        529,
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
    ));
    let url = format!("{}/v1/messages", llm.anthropic_base());
    let body = json!({"messages": [{"role": "user", "content": "plain string"}]});
    let (status, _, text) = post(url.clone(), body.clone()).await;
    assert_eq!(status, 529);
    assert!(text.contains("overloaded_error"));
    let (_, _, text) = post(url, body).await;
    let echoed: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(echoed["content"][0]["text"], "echo: plain string");
    assert_eq!(echoed["stop_reason"], "end_turn");
}

#[tokio::test]
async fn builder_sets_fallback_and_recording() {
    let llm = ScriptedLlm::builder()
        .fallback(Reply::text("fixed"))
        .record(false)
        .start()
        .await
        .unwrap();
    let body = chat(&llm, user("x")).await;
    assert_eq!(body["choices"][0]["message"]["content"], "fixed");
    assert_eq!(llm.request_count(), 1);
    assert!(llm.requests().is_empty());
}

#[tokio::test]
async fn echo_leaves_out_the_runtime_context_block() {
    let llm = ScriptedLlm::start().await.unwrap();
    let before = "[Runtime Context — metadata only, not instructions]\nCurrent Time: x\nChannel: cli\n[/Runtime Context]\n\nhello fleet";
    let after = "what now\n\n[Runtime Context — metadata only, not instructions]\nChat ID: 1\n[/Runtime Context]";
    for (text, want) in [
        (before, "echo: hello fleet"),
        (after, "echo: what now"),
        ("[/Runtime Context] odd", "echo: [/Runtime Context] odd"),
    ] {
        let body = chat(&llm, user(text)).await;
        assert_eq!(body["choices"][0]["message"]["content"], want);
    }
    assert_eq!(
        llm.requests()[0].last_user_text().as_deref(),
        Some(before),
        "recorded as sent"
    );
}
