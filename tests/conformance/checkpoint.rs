//! The archive checkpoint against 0.3.5 (through `adapters_history.py`), in `checkpoint.json`:
//! what an archive leaves in a session — 0.3.5's `Session.commit_summary_checkpoint` inserts
//! a hidden continuation row at the archive boundary, moves the watermark to it and keeps the
//! summary — and what the next turn replays.
//!
//! Ours is [`SessionWriter::checkpoint`] on a real `redis-server` (the script the memory
//! workers commit with), read back with [`SessionStore::load`] and replayed with
//! [`Session::replay`]. A case's input is `{"messages", "last_archived", "archive_end",
//! "summary"}`; rows are compared without their timestamps.

use serde_json::{Map, Value, json};

use nanobot_core::history::MAX_REPLAY_MESSAGES;
use nanobot_core::memory::archive;
use nanobot_core::session::{SessionStore, meta};
use nanobot_proto::keys;
use nanobot_runtime::lease::Leases;
use nanobot_runtime::testsuite::Redis;

use crate::harness::{self, Case};

const TABLE: &str = include_str!("checkpoint.json");

fn index(case: &Case, key: &str) -> usize {
    case.input[key]
        .as_u64()
        .and_then(|n| usize::try_from(n).ok())
        .unwrap_or(0)
}

async fn call(redis: &Redis, n: usize, case: &Case) -> Result<Value, String> {
    let conn = redis.conn().await.map_err(|e| e.to_string())?;
    let key = format!("cli:checkpoint-{n}");
    let lease = Leases::new(
        conn.clone(),
        "conformance",
        std::time::Duration::from_secs(30),
    )
    .try_acquire(
        keys::session_lease("b", &key),
        keys::session_fence("b", &key),
    )
    .await
    .map_err(|e| e.to_string())?
    .ok_or("the session lease is taken")?;
    let store = SessionStore::new(conn, "b").fenced(lease.fence());
    let rows: Vec<Value> =
        serde_json::from_value(case.input["messages"].clone()).map_err(|e| e.to_string())?;
    let err = |e: nanobot_core::session::SessionError| e.to_string();
    store.append(&key, &rows).await.map_err(err)?;
    store
        .set_last_consolidated(&key, index(case, "last_archived"))
        .await
        .map_err(err)?;
    let mut metadata = Map::new();
    let summary = case.input["summary"].as_str().unwrap_or_default();
    archive::remember_summary(&mut metadata, summary);
    store
        .checkpoint(&key, index(case, "archive_end"), Some(&metadata))
        .await
        .map_err(err)?;
    let session = store.load(&key).await.map_err(err)?;
    let stored: Vec<Value> = session
        .messages
        .iter()
        .map(|m| {
            let mut m = m.clone();
            m.as_object_mut().map(|o| o.remove("timestamp"));
            m
        })
        .collect();
    Ok(json!({
        "messages": stored,
        "last_archived": session.last_consolidated,
        "summary": session.metadata[meta::LAST_SUMMARY]["text"],
        "history": session.replay(MAX_REPLAY_MESSAGES),
    }))
}

#[test]
fn an_archive_leaves_0_3_5s_hidden_continuation_row_and_replay_resumes_at_it() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let redis = rt.block_on(Redis::start()).expect("redis-server");
    let table = harness::parse(TABLE);
    let position = |case: &Case| table.cases.iter().position(|c| c.name == case.name);
    harness::check(TABLE, |case| {
        rt.block_on(call(&redis, position(case).unwrap_or(0), case))
    });
}
