//! Memory end to end: the Consolidator archiving a session that crossed its context budget
//! (LLM summary, raw fallback, fenced against `/new`, once per request), Dream with git
//! history and its commands, AutoCompact.

mod consolidator;
mod dream;
mod schedule;

use std::path::Path;

use serde_json::{Value, json};

use crate::harness::{Fleet, wait_until};

/// The start of the archive instruction (our `templates/agent/consolidator_archive.md`).
pub(crate) const ARCHIVE_MARK: &str = "Write a memory overview of only the final";

/// Config for a session that crosses its budget on its second turn: budget 15 000 tokens
/// (window 17 024 − maxTokens 1 000 − 1 024), and turns of about 8 000 tokens (a 4 000-word
/// message and its echo) on top of a system prompt and tool definitions of a few thousand.
pub(crate) fn small_window() -> Value {
    json!({"agents": {"defaults": {"contextWindowTokens": 17_024, "maxTokens": 1000}}})
}

/// Returns a message of `words` copies of `word` (one token each under o200k).
pub(crate) fn long_message(word: &str, words: usize) -> String {
    format!("{word} ").repeat(words).trim_end().to_string()
}

/// Reads `memory/history.jsonl` of `workspace` (empty when missing).
pub(crate) fn history_rows(workspace: &Path) -> Vec<Value> {
    std::fs::read_to_string(workspace.join("memory/history.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).expect("history row is json"))
        .collect()
}

/// Waits until the history has `n` rows.
pub(crate) async fn wait_for_history(fleet: &Fleet, n: usize) -> Vec<Value> {
    let ws = fleet.workspace().to_path_buf();
    wait_until(
        || {
            let ws = ws.clone();
            async move { history_rows(&ws).len() >= n }
        },
        super::TURN,
    )
    .await
    .unwrap_or_else(|e| panic!("history never had {n} rows: {e}"));
    history_rows(fleet.workspace())
}

/// Reads a session's `last_consolidated` from Redis.
pub(crate) async fn last_consolidated(fleet: &Fleet, session: &str) -> usize {
    let mut conn = fleet.redis_conn().await.expect("redis");
    let v: Option<String> = redis::cmd("HGET")
        .arg(nanobot_proto::keys::session_meta("default", session))
        .arg("last_consolidated")
        .query_async(&mut conn)
        .await
        .expect("hget");
    v.and_then(|v| v.parse().ok()).unwrap_or(0)
}
