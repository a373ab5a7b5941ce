//! Chats have owners and clients have identities: a chat is its first client's on every
//! replica, and a token issued on `tokenIssuePath` is bound to one `client_id`.

use redis::AsyncCommands as _;
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Error as WsError;

use nanobot_proto::keys;

use super::replicas::second_replica;
use super::{REFUSAL, TOKEN, WsClient, ws_fleet, ws_url};

/// Alice's first message, with CJK and emoji.
const ALICE_TEXT: &str = "你好，世界 🌏 これは私のチャット";
/// What Bob tries to slip into Alice's chat.
const BOB_TEXT: &str = "乗っ取り 😈 hijack";

/// `GET {path}/history` of `chat` as `client` with `token`: the status and the body.
async fn history(port: u16, chat: &str, client: &str, token: &str) -> (u16, String) {
    let query = form(&[("chat_id", chat), ("client_id", client)]);
    let response = reqwest::Client::new()
        .get(format!("http://127.0.0.1:{port}/history?{query}"))
        .bearer_auth(token)
        .send()
        .await
        .expect("history answered");
    let status = response.status().as_u16();
    (status, response.text().await.unwrap())
}

/// Returns `pairs` as a URL query.
fn form(pairs: &[(&str, &str)]) -> String {
    url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs(pairs)
        .finish()
}

/// Returns the texts of the entries of `chat`'s log in Redis.
async fn logged_texts(fleet: &crate::harness::Fleet, chat: &str) -> Vec<String> {
    let mut redis = fleet.redis_conn().await.unwrap();
    let raw: Vec<(String, Vec<String>)> = redis::cmd("XRANGE")
        .arg(keys::websocket_log("default", chat))
        .arg("-")
        .arg("+")
        .query_async(&mut redis)
        .await
        .unwrap();
    raw.into_iter()
        .filter_map(|(_, fields)| {
            let at = fields.iter().position(|f| f == "text")?;
            fields.get(at + 1).cloned()
        })
        .collect()
}

#[tokio::test]
async fn another_client_is_refused_attach_history_and_messages_of_a_chat_on_every_replica_and_after_a_restart()
 {
    let (mut fleet, port_a) = ws_fleet(json!({"streaming": false})).await;
    let port_b = second_replica(&mut fleet).await;
    let mut alice = WsClient::connect(port_a, "alice").await;
    alice.say("chat-a", "m1", ALICE_TEXT).await;
    let reply = alice.final_for("m1").await;
    assert!(
        reply["text"].as_str().unwrap().contains(ALICE_TEXT),
        "{reply}"
    );

    // Bob, on the other replica with the shared token, is refused each way in.
    let mut bob = WsClient::connect(port_b, "bob").await;
    bob.send(json!({"type": "attach", "chat_id": "chat-a", "after": "0-0"}))
        .await;
    let refused = bob.until(|f| f["event"] == "error").await;
    assert_eq!(refused["chat_id"], "chat-a");
    assert!(
        refused["detail"]
            .as_str()
            .unwrap()
            .contains("belongs to another client"),
        "{refused}"
    );
    // Reusing Alice's message id changes nothing of hers.
    bob.say("chat-a", "m1", BOB_TEXT).await;
    let refused = bob.until(|f| f["event"] == "error").await;
    assert_eq!(
        (refused["chat_id"].as_str(), refused["msg_id"].as_str()),
        (Some("chat-a"), Some("m1"))
    );
    let (status, body) = history(port_b, "chat-a", "bob", TOKEN).await;
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("belongs to another client"), "{body}");
    // Bob's own chat still works, and saw nothing of Alice's.
    bob.say("chat-b", "m1", "我的聊天 🐻").await;
    bob.final_for("m1").await;
    let leaked = |f: &Value| f.to_string().contains("chat-a") && f["event"] != "error";
    assert!(!bob.frames.iter().any(leaked), "{:#?}", bob.frames);
    assert!(
        !bob.frames
            .iter()
            .any(|f| f.to_string().contains(ALICE_TEXT)),
        "{:#?}",
        bob.frames
    );

    // Alice's chat holds her message and its reply only; her history reads it.
    let texts = logged_texts(&fleet, "chat-a").await;
    assert_eq!(texts.len(), 2, "{texts:?}");
    assert_eq!(texts[0], ALICE_TEXT);
    let (status, body) = history(port_a, "chat-a", "alice", TOKEN).await;
    assert_eq!(status, 200, "{body}");
    assert!(
        body.contains(ALICE_TEXT) && !body.contains(BOB_TEXT),
        "{body}"
    );
    assert!(
        fleet
            .llm
            .requests()
            .iter()
            .all(|r| !serde_json::to_string(&r.messages())
                .unwrap()
                .contains(BOB_TEXT)),
        "Bob's text never reached the model"
    );
    let mut redis = fleet.redis_conn().await.unwrap();
    let owner: Option<String> = redis
        .get(keys::websocket_owner("default", "chat-a"))
        .await
        .unwrap();
    assert_eq!(
        owner.as_deref(),
        Some("alice"),
        "the owner is kept in Redis"
    );

    // A SIGKILLed and restarted replica still knows whose the chat is.
    fleet.service_at("gateway", 0).restart().unwrap();
    let listening = || async move {
        tokio::net::TcpStream::connect(("127.0.0.1", port_a))
            .await
            .is_ok()
    };
    crate::harness::wait_until(listening, super::TURN)
        .await
        .expect("the restarted replica listens");
    let mut bob = WsClient::connect(port_a, "bob").await;
    bob.send(json!({"type": "attach", "chat_id": "chat-a"}))
        .await;
    let refused = bob.until(|f| f["event"] == "error").await;
    assert_eq!(refused["chat_id"], "chat-a", "{refused}");
    let mut alice = WsClient::connect(port_a, "alice").await;
    alice
        .send(json!({"type": "attach", "chat_id": "chat-a"}))
        .await;
    alice.until(|f| f["event"] == "attached").await;
}

/// The issue route of the token fleets.
const ISSUE: &str = "/auth/token";
/// Their issue secret.
const ISSUE_SECRET: &str = "issue-secret-7c21";

/// Asks `port`'s issue route for a token for `client` (none: no `client_id`) with
/// `secret`; returns the status and the JSON body (null when not JSON).
async fn issue(port: u16, client: Option<&str>, secret: Option<&str>) -> (u16, Value) {
    let query = client
        .map(|c| form(&[("client_id", c)]))
        .unwrap_or_default();
    let url = format!("http://127.0.0.1:{port}{ISSUE}?{query}");
    let mut request = reqwest::Client::new().get(url);
    if let Some(secret) = secret {
        request = request.bearer_auth(secret);
    }
    let response = request.send().await.expect("issue answered");
    let status = response.status().as_u16();
    let cache = response.headers().get("cache-control").cloned();
    let body = response.json::<Value>().await.unwrap_or(Value::Null);
    if status == 200 {
        assert_eq!(cache.unwrap(), "no-store", "an issued token is not cached");
    }
    (status, body)
}

/// The HTTP status a refused upgrade to `url` was answered with.
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
async fn a_token_issued_to_one_client_cannot_act_as_another_on_any_replica() {
    let (mut fleet, port_a) = ws_fleet(json!({
        "token": "", "tokenIssuePath": ISSUE, "tokenIssueSecret": ISSUE_SECRET,
        "streaming": false,
    }))
    .await;
    let port_b = second_replica(&mut fleet).await;
    assert_eq!(issue(port_a, Some("alice"), None).await.0, 401);
    assert_eq!(issue(port_a, Some("alice"), Some("nope")).await.0, 401);
    let (status, alice) = issue(port_a, Some("alice"), Some(ISSUE_SECRET)).await;
    assert_eq!(status, 200, "{alice}");
    assert_eq!(
        (alice["client_id"].as_str(), alice["expires_in"].as_u64()),
        (Some("alice"), Some(300))
    );
    let alice_token = alice["token"].as_str().unwrap().to_string();
    assert!(alice_token.starts_with("nbwt_"), "{alice_token}");
    // Upstream's other header for the secret, and a client named in CJK and emoji.
    let panda = reqwest::Client::new()
        .get(format!(
            "http://127.0.0.1:{port_a}{ISSUE}?{}",
            form(&[("client_id", "小明🐼")])
        ))
        .header("X-Nanobot-Auth", ISSUE_SECRET)
        .send()
        .await
        .unwrap()
        .json::<Value>()
        .await
        .unwrap();
    assert_eq!(panda["client_id"], "小明🐼");

    // Alice's token names Alice only, on either replica; the issue secret is no token.
    for port in [port_a, port_b] {
        assert_eq!(
            refused_status(&ws_url(port, "bob", Some(&alice_token))).await,
            403
        );
        assert_eq!(
            refused_status(&ws_url(port, "alice", Some(ISSUE_SECRET))).await,
            401
        );
        assert_eq!(refused_status(&ws_url(port, "alice", None)).await, 401);
    }
    let (status, _) = history(port_b, "chat-a", "bob", &alice_token).await;
    assert_eq!(status, 403);
    // With no client_id the token's own is taken.
    let bare = format!("ws://127.0.0.1:{port_b}/?token={alice_token}");
    let (socket, _) = tokio_tungstenite::connect_async(bare).await.unwrap();
    let mut alice_ws = WsClient::from_socket(socket, "alice").await;
    alice_ws.say("chat-a", "m1", ALICE_TEXT).await;
    alice_ws.final_for("m1").await;
    let panda_token = panda["token"].as_str().unwrap();
    let (socket, _) =
        tokio_tungstenite::connect_async(format!("ws://127.0.0.1:{port_a}/?token={panda_token}"))
            .await
            .unwrap();
    let mut panda_ws = WsClient::from_socket(socket, "小明🐼").await;
    panda_ws.say("chat-a", "m1", BOB_TEXT).await;
    let refused = panda_ws.until(|f| f["event"] == "error").await;
    assert!(
        refused["detail"]
            .as_str()
            .unwrap()
            .contains("belongs to another client")
    );

    // Tokens are kept by hash only, and never logged.
    let mut redis = fleet.redis_conn().await.unwrap();
    let stored: Vec<String> = redis.keys("nanobot:*websocket:token:*").await.unwrap();
    assert_eq!(stored.len(), 2, "{stored:?}");
    assert!(
        stored.iter().all(|k| !k.contains(&alice_token)),
        "{stored:?}"
    );
    for index in [0, 1] {
        let logs = fleet.service_at("gateway", index).logs();
        assert!(!logs.contains(&alice_token) && !logs.contains(ISSUE_SECRET));
    }
}
