//! What bounds the channel: text over the bus limit is refused before anything is stored,
//! each client's bytes of the day are capped, and a listener on every interface needs a token.

use redis::AsyncCommands as _;
use serde_json::{Value, json};

use nanobot_proto::keys;

use super::{WsClient, ws_fleet};
use crate::harness::{Fleet, free_port};

/// Returns Redis's `used_memory` and the names of the channel's keys.
async fn redis_footprint(fleet: &Fleet) -> (u64, Vec<String>) {
    let mut redis = fleet.redis_conn().await.unwrap();
    let info: String = redis::cmd("INFO")
        .arg("memory")
        .query_async(&mut redis)
        .await
        .unwrap();
    let used = info
        .lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("used_memory");
    let mut names: Vec<String> = redis.keys("nanobot:*websocket*").await.unwrap();
    names.sort();
    (used, names)
}

#[tokio::test]
async fn text_over_the_bus_limit_is_refused_and_nothing_of_it_is_stored() {
    let (fleet, port) = ws_fleet(json!({"streaming": false})).await;
    let mut alice = WsClient::connect(port, "alice").await;
    let (used_before, keys_before) = redis_footprint(&fleet).await;
    // About 2 MB of CJK and emoji: twice the broker's 1 MB message limit.
    let huge = "你好🌊".repeat(200_000);
    for i in 0..8 {
        let id = format!("big{i}");
        alice.say("chat-big", &id, &huge).await;
        let refused = alice.until(|f| f["event"] == "error").await;
        assert_eq!(refused["msg_id"], id.as_str());
        let detail = refused["detail"].as_str().unwrap();
        assert!(detail.contains("message too large"), "{detail}");
    }
    assert!(
        !alice.frames.iter().any(|f| f["event"] == "accepted"),
        "{:#?}",
        alice.frames.iter().map(|f| &f["event"]).collect::<Vec<_>>()
    );
    let (used_after, keys_after) = redis_footprint(&fleet).await;
    eprintln!("redis used_memory around 8 refused 2 MB messages: {used_before} -> {used_after}");
    assert_eq!(keys_after, keys_before, "no key of a refused message");
    assert!(
        used_after < used_before + 1024 * 1024,
        "Redis grew from {used_before} to {used_after} bytes"
    );
    assert_eq!(fleet.llm.request_count(), 0);
    // The next normal message is served.
    alice.say("chat-big", "ok", "普通のメッセージ ✅").await;
    let reply = alice.final_for("ok").await;
    assert!(
        reply["text"]
            .as_str()
            .unwrap()
            .contains("普通のメッセージ ✅")
    );
}

#[tokio::test]
async fn a_clients_bytes_of_the_day_are_capped_over_all_its_chats() {
    let (fleet, port) = ws_fleet(json!({"streaming": false, "clientBytesPerDay": 4096})).await;
    let mut alice = WsClient::connect(port, "alice").await;
    // 1,501 bytes each: two fit in 4,096, the third does not, in any chat.
    let text = |n: usize| format!("{n}{}", "字".repeat(500));
    alice.say("c1", "m1", &text(1)).await;
    alice.final_for("m1").await;
    alice.say("c1", "m2", &text(2)).await;
    alice.final_for("m2").await;
    let mut redis = fleet.redis_conn().await.unwrap();
    let log_len = |redis: &mut nanobot_runtime::store::Store, chat: &str| {
        let key = keys::websocket_log("default", chat);
        let mut redis = redis.clone();
        async move {
            let len: usize = redis::cmd("XLEN")
                .arg(key)
                .query_async(&mut redis)
                .await
                .unwrap();
            len
        }
    };
    let before = log_len(&mut redis, "c1").await;
    for (chat, id) in [("c1", "m3"), ("c2", "m4")] {
        alice.say(chat, id, &text(3)).await;
        let refused = alice
            .until(|f| f["event"] == "error" && f["msg_id"] == id)
            .await;
        assert!(
            refused["detail"]
                .as_str()
                .unwrap()
                .contains("4096 bytes for today"),
            "{refused}"
        );
    }
    assert_eq!(
        log_len(&mut redis, "c1").await,
        before,
        "nothing of it stored"
    );
    assert_eq!(log_len(&mut redis, "c2").await, 0);
    // Resending an accepted message costs nothing more, and another client has its own budget.
    alice.say("c1", "m2", &text(2)).await;
    let again = alice
        .until(|f| f["event"] == "accepted" && f["msg_id"] == "m2")
        .await;
    assert_eq!(again["chat_id"], "c1");
    let mut bob = WsClient::connect(port, "bob").await;
    bob.say("c3", "m1", &text(4)).await;
    bob.final_for("m1").await;
}

#[tokio::test]
async fn a_websocket_listener_on_every_interface_without_a_token_refuses_to_start() {
    let fleet = Fleet::builder().start().await.unwrap();
    let mut config: Value =
        serde_json::from_str(&std::fs::read_to_string(fleet.config_path()).unwrap()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    for host in ["0.0.0.0", "::"] {
        config["channels"]["websocket"] = json!({
            "host": host, "port": free_port().unwrap(), "websocketRequiresToken": false,
        });
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
            .unwrap_or_else(|| panic!("the gateway with websocket host {host:?} kept running"));
        assert!(!status.success(), "{host:?}");
        let log = gateway.logs();
        assert!(
            log.contains("channels.websocket.host") && log.contains("all interfaces"),
            "{host:?} refused with a clear error: {log}"
        );
    }
}
