//! The gateway's OpenAI-compatible API, end to end through the agent runner.

use serde_json::{Value, json};

use super::session_rows;
use crate::harness::Fleet;
use crate::scripted_llm::Reply;

#[tokio::test]
async fn chat_completions_reach_the_agent_and_use_the_api_session() {
    let fleet = Fleet::builder()
        .roles(&["gateway", "agent", "tools"])
        .start()
        .await
        .unwrap();
    fleet.llm.push(Reply::text("Hi over HTTP"));
    let http = reqwest::Client::new();
    let response: Value = http
        .post(format!("{}/v1/chat/completions", fleet.api_base()))
        .json(&json!({"model": "test-model", "session_id": "s1", "messages": [{"role": "user", "content": "hello"}]}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        response["choices"][0]["message"]["content"], "Hi over HTTP",
        "{response}"
    );
    assert_eq!(response["object"], "chat.completion");
    let rows = session_rows(&fleet, "default", "api:s1").await;
    assert_eq!(rows.len(), 2, "{rows:#?}");

    let models: Value = http
        .get(format!("{}/v1/models", fleet.api_base()))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(models["data"][0]["id"], "test-model");
}

#[tokio::test]
async fn streamed_completions_arrive_as_sse_chunks_ending_with_done() {
    let fleet = Fleet::builder()
        .roles(&["gateway", "agent", "tools"])
        .start()
        .await
        .unwrap();
    fleet.llm.push(Reply::text("streaming works fine"));
    let body = reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", fleet.api_base()))
        .json(&json!({"stream": true, "messages": [{"role": "user", "content": "stream please"}]}))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let chunks: Vec<Value> = body
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    let text: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(text, "streaming works fine", "{body}");
    assert!(
        chunks.len() >= 3,
        "content arrived in several deltas: {body}"
    );
    assert!(body.trim_end().ends_with("data: [DONE]"), "{body}");
    assert_eq!(
        fleet.llm.requests()[0].body["stream"],
        true,
        "the runner streamed from the model"
    );
}

#[tokio::test]
async fn a_gateway_asked_to_listen_on_every_interface_without_an_api_key_refuses_to_start() {
    let fleet = Fleet::builder().start().await.unwrap();
    let mut config: Value =
        serde_json::from_str(&std::fs::read_to_string(fleet.config_path()).unwrap()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    for host in ["::0", "0", "[::]", "0x0"] {
        config["api"]["host"] = json!(host);
        let path = dir.path().join("config.json");
        std::fs::write(&path, config.to_string()).unwrap();
        let path = path.display().to_string();
        let mut gateway = nanobot_runtime::testsuite::ServiceProc::spawn(
            "nanobot-gateway",
            &["--config", path.as_str(), "--health-addr", "127.0.0.1:0"],
            &[],
        )
        .unwrap();
        let status = gateway
            .wait_exit(std::time::Duration::from_secs(20))
            .await
            .unwrap_or_else(|| panic!("the gateway with api.host {host:?} kept running"));
        assert!(!status.success(), "{host:?}");
        let log = gateway.logs();
        assert!(
            log.contains("api.apiKey: required when api.host"),
            "{host:?} refused with a clear error: {log}"
        );
    }
}

#[tokio::test]
async fn completions_report_the_turns_token_usage_and_streams_report_it_when_asked() {
    let fleet = Fleet::builder()
        .roles(&["gateway", "agent", "tools"])
        .start()
        .await
        .unwrap();
    let http = reqwest::Client::new();
    let url = format!("{}/v1/chat/completions", fleet.api_base());
    // A turn of two LLM calls: the usage is their sum.
    fleet
        .llm
        .push(Reply::tool_calls([("list_dir", json!({"path": "."}))]).with_usage(100, 10));
    fleet.llm.push(Reply::text("listed").with_usage(130, 7));
    let response: Value = http
        .post(&url)
        .json(&json!({"session_id": "plain", "messages": [{"role": "user", "content": "list"}]}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        response["usage"],
        json!({"prompt_tokens": 230, "completion_tokens": 17, "total_tokens": 247}),
        "{response}"
    );

    let streamed = |include_usage: bool, session: &str| {
        let body = json!({
            "stream": true,
            "stream_options": {"include_usage": include_usage},
            "session_id": session,
            "messages": [{"role": "user", "content": "stream"}],
        });
        let request = http.post(&url).json(&body).send();
        async move {
            let text = request.await.unwrap().text().await.unwrap();
            let chunks: Vec<Value> = text
                .lines()
                .filter_map(|l| l.strip_prefix("data: "))
                .filter(|d| *d != "[DONE]")
                .map(|d| serde_json::from_str(d).unwrap())
                .collect();
            (text, chunks)
        }
    };
    fleet
        .llm
        .push(Reply::text("streamed reply").with_usage(50, 3));
    let (text, chunks) = streamed(true, "with-usage").await;
    let last = chunks.last().expect("chunks");
    // As OpenAI: the last chunk before [DONE] has no choices and the usage.
    assert_eq!(last["choices"], json!([]), "{text}");
    assert_eq!(
        last["usage"],
        json!({"prompt_tokens": 50, "completion_tokens": 3, "total_tokens": 53}),
        "{text}"
    );
    assert!(text.trim_end().ends_with("data: [DONE]"), "{text}");

    fleet
        .llm
        .push(Reply::text("no usage asked").with_usage(50, 3));
    let (text, chunks) = streamed(false, "without-usage").await;
    assert!(chunks.iter().all(|c| c.get("usage").is_none()), "{text}");
}
