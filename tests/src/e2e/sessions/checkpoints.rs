//! A turn's checkpoint saves against a real `redis-server`: once a save has failed (its rows
//! may or may not be stored: Redis can run a write and lose only the reply), the turn saves
//! and commits nothing more; it fails and is resumed from what the session holds.

use std::time::Duration;

use redis::AsyncCommands as _;
use serde_json::{Map, json};

use nanobot_agent::checkpoints::SessionCheckpoints;
use nanobot_agent::lease::Leases;
use nanobot_core::checkpoint::{Checkpoint, CheckpointSink as _, Phase};
use nanobot_core::session::SessionStore;
use nanobot_proto::keys;

use crate::harness::Redis;

const BOT: &str = "default";
const SESSION: &str = "cli:checkpoints";

fn final_response() -> Checkpoint {
    Checkpoint {
        phase: Phase::FinalResponse,
        iteration: 1,
        model: "test-model".into(),
        assistant_message: json!({"role": "assistant", "content": "first answer"}),
        completed_tool_results: Vec::new(),
        pending_tool_calls: Vec::new(),
    }
}

#[tokio::test]
async fn after_a_failed_checkpoint_save_the_turn_cannot_commit_its_rows_a_second_time() {
    let redis = Redis::start().await.unwrap();
    let mut conn = redis.conn().await.unwrap();
    let leases = Leases::new(conn.clone(), "runner-a", Duration::from_secs(5));
    let lease = leases
        .try_acquire(BOT, SESSION)
        .await
        .unwrap()
        .expect("free");
    let sessions = SessionStore::new(conn.clone(), BOT).fenced(lease.fence());
    let sink = SessionCheckpoints::new(sessions.clone(), SESSION, Map::new(), 16_000, None);
    // A reply followed by an injected follow-up: saved before the model answers it.
    let mut turn = vec![
        json!({"role": "assistant", "content": "first answer"}),
        json!({"role": "user", "content": "a follow-up"}),
    ];

    // The save fails (here: refused; in production also a reply lost to a Redis restart,
    // when the rows are stored after all), then Redis is fine again.
    let fence_key = keys::session_fence(BOT, SESSION);
    let token: String = conn.get(&fence_key).await.unwrap();
    let _: () = conn.set(&fence_key, "0:other").await.unwrap();
    sink.checkpoint(final_response(), &turn).await;
    let _: () = conn.set(&fence_key, &token).await.unwrap();

    // Nor does a later save of the same turn store them (a second follow-up injected).
    turn.push(json!({"role": "assistant", "content": "second answer"}));
    turn.push(json!({"role": "user", "content": "another follow-up"}));
    sink.checkpoint(final_response(), &turn).await;
    let stored = SessionStore::new(conn.clone(), BOT)
        .load(SESSION)
        .await
        .unwrap();
    assert!(
        stored.messages.is_empty(),
        "saved after a failed save: {:?}",
        stored.messages
    );

    turn.push(json!({"role": "assistant", "content": "third answer"}));
    let committed = sink.finish(&turn, |_| {}).await;
    assert!(
        committed.is_err(),
        "the turn must not commit rows whose save may have been stored: {committed:?}"
    );

    // A save that succeeds is not saved again: the final commit gets only the rest.
    let sink = SessionCheckpoints::new(sessions, SESSION, Map::new(), 16_000, None);
    sink.checkpoint(final_response(), &turn[..2]).await;
    let (rows, _) = sink.finish(&turn, |_| {}).await.unwrap();
    let contents: Vec<&str> = rows.iter().filter_map(|r| r["content"].as_str()).collect();
    assert_eq!(
        contents,
        ["second answer", "another follow-up", "third answer"]
    );
}
