//! The channel's protocol against a real fleet: auth at the upgrade, chats multiplexed on one
//! socket, streaming, and resuming after a disconnect.

use redis::AsyncCommands as _;
use serde_json::json;
use tokio_tungstenite::tungstenite::Error as WsError;

use nanobot_proto::keys;

use super::{REFUSAL, TOKEN, WsClient, ws_fleet, ws_url};
use crate::harness::wait_until;
use crate::scripted_llm::{Gate, Reply};

/// Returns the HTTP status a refused upgrade to `url` was answered with.
async fn refused_status(url: &str) -> u16 {
    let attempt = tokio::time::timeout(REFUSAL, tokio_tungstenite::connect_async(url))
        .await
        .expect("an answer to the upgrade");
    match attempt {
        Err(WsError::Http(response)) => response.status().as_u16(),
        Err(other) => panic!("refused with an error other than an HTTP status: {other}"),
        Ok(_) => panic!("{url} was accepted"),
    }
}

#[tokio::test]
async fn a_missing_or_wrong_token_is_refused_with_401_and_a_client_outside_allow_from_with_403() {
    let (mut fleet, port) =
        ws_fleet(json!({"allowFrom": ["alice"], "tokenIssueSecret": "webui-pa55"})).await;
    assert_eq!(refused_status(&ws_url(port, "alice", None)).await, 401);
    assert_eq!(
        refused_status(&ws_url(port, "alice", Some("ws-test-token-3f9b"))).await,
        401
    );
    assert_eq!(
        refused_status(&ws_url(port, "mallory", Some(TOKEN))).await,
        403
    );
    // The page's history reads are behind the same token.
    let http = reqwest::Client::new();
    let history = format!("http://127.0.0.1:{port}/history?chat_id=c1&client_id=alice");
    let wrong = http.get(&history).bearer_auth("nope").send().await.unwrap();
    assert_eq!(wrong.status(), 401);
    let right = http.get(&history).bearer_auth(TOKEN).send().await.unwrap();
    assert_eq!(right.status(), 200);
    // Upstream's WebUI password (Quick Start configs) is accepted as a token too.
    let (password, _) = tokio_tungstenite::connect_async(ws_url(port, "alice", Some("webui-pa55")))
        .await
        .expect("the tokenIssueSecret is a token");
    drop(password);
    // Alice with the token is in, and nothing refused reached the model.
    let mut alice = WsClient::connect(port, "alice").await;
    fleet.llm.push(Reply::text("hi alice"));
    alice.say("c1", "m1", "hello").await;
    assert_eq!(alice.final_for("m1").await["text"], "hi alice");
    assert_eq!(fleet.llm.request_count(), 1);
    let logs = fleet.service("gateway").logs();
    assert!(
        !logs.contains("ws-test-token-3f9b"),
        "a presented token is never logged"
    );
}

#[tokio::test]
async fn an_empty_allow_from_denies_every_client() {
    let (_fleet, port) = ws_fleet(json!({"allowFrom": []})).await;
    for client in ["alice", "anon", "*"] {
        assert_eq!(
            refused_status(&ws_url(port, client, Some(TOKEN))).await,
            403,
            "{client}"
        );
    }
}

#[tokio::test]
async fn two_chats_on_one_socket_are_answered_separately() {
    let (fleet, port) = ws_fleet(json!({"streaming": false})).await;
    fleet
        .llm
        .when_last_user_contains("alpha", Reply::text("answer for alpha"));
    fleet
        .llm
        .when_last_user_contains("beta", Reply::text("answer for beta"));
    let mut client = WsClient::connect(port, "alice").await;
    client.say("chat-a", "a1", "question alpha").await;
    client.say("chat-b", "b1", "question beta").await;
    let b = client.final_for("b1").await;
    let a = client.final_for("a1").await;
    assert_eq!(
        (a["chat_id"].as_str(), a["text"].as_str()),
        (Some("chat-a"), Some("answer for alpha"))
    );
    assert_eq!(
        (b["chat_id"].as_str(), b["text"].as_str()),
        (Some("chat-b"), Some("answer for beta"))
    );
    let accepted: Vec<_> = client
        .frames
        .iter()
        .filter(|f| f["event"] == "accepted")
        .collect();
    assert_eq!(accepted.len(), 2, "{:#?}", client.frames);
    // Two sessions: neither chat's model call saw the other's message.
    for request in fleet.llm.requests() {
        let text = serde_json::to_string(&request.messages()).unwrap();
        assert!(
            !(text.contains("question alpha") && text.contains("question beta")),
            "sessions crossed: {text}"
        );
    }
    // The second chat's turn is stored under its own session key.
    let mut redis = fleet.redis_conn().await.unwrap();
    let sessions: Vec<String> = redis.smembers(keys::sessions("default")).await.unwrap();
    for chat in ["websocket:chat-a", "websocket:chat-b"] {
        assert!(sessions.iter().any(|s| s == chat), "{chat} in {sessions:?}");
    }
}

#[tokio::test]
async fn streamed_deltas_arrive_before_the_final_and_add_up_to_it() {
    let (fleet, port) = ws_fleet(json!({})).await;
    let answer = "Streaming works: one, two, three, four, five.";
    fleet
        .llm
        .push(Reply::text(answer).with_stream_pace(std::time::Duration::from_millis(40)));
    let mut client = WsClient::connect(port, "alice").await;
    client.say("c1", "m1", "stream please").await;
    let last = client.final_for("m1").await;
    assert_eq!(last["text"], answer);
    let deltas: Vec<&serde_json::Value> = client
        .frames
        .iter()
        .filter(|f| f["event"] == "delta")
        .collect();
    assert!(
        deltas.len() >= 2,
        "several deltas before the final: {:#?}",
        client.frames
    );
    let streamed: String = deltas.iter().map(|d| d["text"].as_str().unwrap()).collect();
    assert_eq!(streamed, answer);
    assert!(
        deltas
            .iter()
            .all(|d| d["stream_id"] == "m1" && d["chat_id"] == "c1")
    );
}

#[tokio::test]
async fn a_reply_produced_while_the_client_was_away_arrives_when_it_resumes() {
    let (fleet, port) = ws_fleet(json!({"streaming": false})).await;
    let gate = Gate::new();
    fleet
        .llm
        .push(Reply::text("made while you were away").held_by(&gate));
    let mut client = WsClient::connect(port, "alice").await;
    client.say("c1", "m1", "answer me later").await;
    let accepted = client.until(|f| f["event"] == "accepted").await;
    let cursor = accepted["id"].as_str().unwrap().to_string();
    client.close().await;

    // The reply is produced and delivered (into the chat's log) with nobody connected.
    gate.open();
    let redis = fleet.redis_conn().await.unwrap();
    let log = keys::websocket_log("default", "c1");
    wait_until(
        || {
            let mut redis = redis.clone();
            let log = log.clone();
            async move {
                let len: redis::RedisResult<usize> =
                    redis::cmd("XLEN").arg(&log).query_async(&mut redis).await;
                len.unwrap_or(0) >= 2
            }
        },
        super::TURN,
    )
    .await
    .expect("the reply is logged");

    let mut back = WsClient::connect(port, "alice").await;
    back.send(json!({"type": "attach", "chat_id": "c1", "after": cursor}))
        .await;
    let reply = back.final_for("m1").await;
    assert_eq!(reply["text"], "made while you were away");
    // Resuming from an older cursor replays the user's own message first, once.
    let mut again = WsClient::connect(port, "alice").await;
    again
        .send(json!({"type": "attach", "chat_id": "c1", "after": "0-0"}))
        .await;
    again.final_for("m1").await;
    let events: Vec<&str> = again
        .frames
        .iter()
        .filter_map(|f| f["event"].as_str())
        .filter(|e| *e == "user_message" || *e == "message")
        .collect();
    assert_eq!(events, ["user_message", "message"], "{:#?}", again.frames);
}

/// Runs one tool turn and returns the `(kind, text)` of every reply frame it got.
async fn interim_frames(extra: serde_json::Value) -> Vec<(String, String)> {
    let (fleet, port) = ws_fleet(extra).await;
    fleet.llm.push(
        Reply::tool_calls([("list_dir", json!({"path": "."}))]).with_text("Let me look around."),
    );
    fleet.llm.push(Reply::text("Done looking."));
    let mut client = WsClient::connect(port, "alice").await;
    client.say("c1", "m1", "look").await;
    client.final_for("m1").await;
    client
        .frames
        .iter()
        .filter(|f| f["event"] == "message" && f["reply_to"] == "m1")
        .map(|f| {
            (
                f["kind"].as_str().unwrap().to_string(),
                f["text"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[tokio::test]
async fn progress_and_tool_hints_reach_the_socket_only_when_their_switches_are_on() {
    let on = interim_frames(json!({"streaming": false})).await;
    let kinds: Vec<&str> = on.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(kinds, ["progress", "tool_hint", "final"], "{on:#?}");
    assert_eq!(on[0].1, "Let me look around.");
    assert!(on[1].1.contains("list_dir"), "{on:#?}");
    let off =
        interim_frames(json!({"streaming": false, "sendProgress": false, "sendToolHints": false}))
            .await;
    assert_eq!(off, [("final".to_string(), "Done looking.".to_string())]);
}
