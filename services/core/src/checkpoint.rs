//! Checkpoints and crash recovery (upstream `loop.py`, reference §2.4). Around each tool batch
//! the runner emits a `runtime_checkpoint` (`phase` `awaiting_tools` / `tools_completed`,
//! `iteration`, `model`, `assistant_message`, `completed_tool_results`,
//! `pending_tool_calls`), which the agent stores in the Redis session metadata; the user
//! message is persisted before the first LLM call with `pending_user_turn` set. The next turn,
//! on any runner, calls [`restore`] to materialise an interrupted turn into history with
//! upstream's synthetic results.

use serde_json::{Map, Value, json};

use crate::clock::now_iso;
use crate::session::meta;

/// Synthetic result for a tool call that never finished.
pub const TOOL_INTERRUPTED: &str = "Error: Task interrupted before this tool finished.";
/// Synthetic reply for a user message that never got one.
pub const RESPONSE_INTERRUPTED: &str = "Error: Task interrupted before a response was generated.";

/// Where a turn stands when the runner emits a checkpoint (upstream's `phase` values).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// The model asked for tools; none has run yet.
    AwaitingTools,
    /// A tool batch finished; its results are in the checkpoint.
    ToolsCompleted,
    /// A final reply exists but follow-ups arrived: the turn goes on.
    FinalResponse,
}

impl Phase {
    /// Returns upstream's spelling (`awaiting_tools`, `tools_completed`, `final_response`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::AwaitingTools => "awaiting_tools",
            Self::ToolsCompleted => "tools_completed",
            Self::FinalResponse => "final_response",
        }
    }
}

/// One checkpoint of a running turn.
#[derive(Debug, Clone, PartialEq)]
pub struct Checkpoint {
    /// Where the turn stands.
    pub phase: Phase,
    /// The runner iteration.
    pub iteration: u32,
    /// The model in use.
    pub model: String,
    /// The assistant message of this iteration.
    pub assistant_message: Value,
    /// Tool result rows of the finished batch.
    pub completed_tool_results: Vec<Value>,
    /// Tool calls not run yet.
    pub pending_tool_calls: Vec<Value>,
}

impl Checkpoint {
    /// Returns the checkpoint in upstream's `runtime_checkpoint` format.
    pub fn to_json(&self) -> Value {
        payload(
            self.phase.as_str(),
            self.iteration,
            &self.model,
            &self.assistant_message,
            &self.completed_tool_results,
            &self.pending_tool_calls,
        )
    }
}

/// Receives the runner's checkpoints.
#[async_trait::async_trait]
pub trait CheckpointSink: Send + Sync {
    /// Stores `checkpoint`; `turn_messages` are the messages the run has appended so far.
    async fn checkpoint(&self, checkpoint: Checkpoint, turn_messages: &[Value]);
}

/// Returns a checkpoint payload in upstream's format.
fn payload(
    phase: &str,
    iteration: u32,
    model: &str,
    assistant_message: &Value,
    completed_tool_results: &[Value],
    pending_tool_calls: &[Value],
) -> Value {
    json!({
        "phase": phase,
        "iteration": iteration,
        "model": model,
        "assistant_message": assistant_message,
        "completed_tool_results": completed_tool_results,
        "pending_tool_calls": pending_tool_calls,
    })
}

fn key(m: &Value) -> [Value; 7] {
    [
        "role",
        "content",
        "tool_call_id",
        "name",
        "tool_calls",
        "reasoning_content",
        "thinking_blocks",
    ]
    .map(|k| m.get(k).cloned().unwrap_or(Value::Null))
}

/// How an interrupted turn is restored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Restore {
    /// Another message arrived: the interrupted turn is closed (a user message without a
    /// reply gets [`RESPONSE_INTERRUPTED`]).
    Close,
    /// The interrupted turn's own message was redelivered: its rows are restored and the
    /// turn continues from them, so no synthetic reply is added.
    Resume,
}

/// Returns the rows that restore an interrupted turn onto `history`, and clears the
/// checkpoint in `metadata`, and the pending markers when the turn is closed. A resumed turn
/// stays pending: an attempt that fails after this restore is written leaves the turn still
/// marked as its message's, so the next attempt resumes it too instead of storing the user
/// message again. Rows already at the end of `history` (a batch the runner persisted before
/// dying) are not repeated.
pub fn restore(history: &[Value], metadata: &mut Map<String, Value>, how: Restore) -> Vec<Value> {
    if how == Restore::Close {
        metadata.remove(meta::PENDING_TURN_ID);
    }
    let mut rows = Vec::new();
    if let Some(Value::Object(cp)) = metadata.remove(meta::RUNTIME_CHECKPOINT) {
        let mut restored = Vec::new();
        if let Some(assistant) = cp.get("assistant_message").filter(|v| v.is_object()) {
            restored.push(assistant.clone());
        }
        let completed: Vec<Value> = cp
            .get("completed_tool_results")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let done: Vec<&str> = completed
            .iter()
            .filter_map(|m| m.get("tool_call_id").and_then(Value::as_str))
            .collect();
        let mut pending_rows = Vec::new();
        for call in cp
            .get("pending_tool_calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let id = call.get("id").and_then(Value::as_str).unwrap_or("");
            if done.contains(&id) {
                continue;
            }
            let name = call
                .pointer("/function/name")
                .and_then(Value::as_str)
                .unwrap_or("");
            pending_rows.push(json!({"role": "tool", "tool_call_id": id, "name": name, "content": TOOL_INTERRUPTED}));
        }
        restored.extend(completed.iter().cloned());
        restored.extend(pending_rows);
        let overlap = overlap(history, &restored);
        rows.extend(restored.into_iter().skip(overlap));
    }
    let pending_user = how == Restore::Close
        && metadata
            .remove(meta::PENDING_USER_TURN)
            .is_some_and(|v| v.as_bool().unwrap_or(false));
    let last_role = rows
        .last()
        .or(history.last())
        .and_then(|m| m.get("role"))
        .and_then(Value::as_str);
    if pending_user && how == Restore::Close && last_role == Some("user") {
        rows.push(json!({"role": "assistant", "content": RESPONSE_INTERRUPTED}));
    }
    let now = now_iso();
    for row in &mut rows {
        if row.get("timestamp").is_none() {
            row["timestamp"] = Value::String(now.clone());
        }
    }
    rows
}

/// Returns how many leading `restored` rows already end `history`.
fn overlap(history: &[Value], restored: &[Value]) -> usize {
    let max = restored.len().min(history.len());
    (1..=max)
        .rev()
        .find(|&n| {
            let tail = &history[history.len() - n..];
            tail.iter()
                .zip(&restored[..n])
                .all(|(a, b)| key(a) == key(b))
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(id: &str, name: &str) -> Value {
        json!({"id": id, "type": "function", "function": {"name": name, "arguments": "{}"}})
    }

    #[test]
    fn an_interrupted_tool_batch_gets_synthetic_results() {
        let assistant = json!({"role": "assistant", "content": null, "tool_calls": [call("c1", "exec"), call("c2", "read_file")]});
        let mut meta = Map::new();
        meta.insert(
            meta::RUNTIME_CHECKPOINT.into(),
            payload(
                "awaiting_tools",
                0,
                "m",
                &assistant,
                &[],
                &[call("c1", "exec"), call("c2", "read_file")],
            ),
        );
        meta.insert(meta::PENDING_USER_TURN.into(), json!(true));
        let history = vec![json!({"role": "user", "content": "run it"})];
        let rows = restore(&history, &mut meta, Restore::Close);
        assert!(meta.is_empty(), "markers cleared");
        assert_eq!(rows.len(), 3, "{rows:#?}");
        assert_eq!(rows[0]["tool_calls"][0]["id"], "c1");
        assert_eq!(rows[1]["content"], TOOL_INTERRUPTED);
        assert_eq!(
            (rows[2]["tool_call_id"].as_str(), rows[2]["name"].as_str()),
            (Some("c2"), Some("read_file"))
        );
        assert!(rows.iter().all(|r| r.get("timestamp").is_some()));
    }

    #[test]
    fn completed_results_are_kept_and_an_already_saved_tail_is_not_repeated() {
        let assistant =
            json!({"role": "assistant", "content": null, "tool_calls": [call("c1", "exec")]});
        let result = json!({"role": "tool", "tool_call_id": "c1", "name": "exec", "content": "ok"});
        let mut meta = Map::new();
        meta.insert(
            meta::RUNTIME_CHECKPOINT.into(),
            payload(
                "tools_completed",
                1,
                "m",
                &assistant,
                std::slice::from_ref(&result),
                &[],
            ),
        );
        meta.insert(meta::PENDING_USER_TURN.into(), json!(true));
        let mut saved = assistant.clone();
        saved["timestamp"] = json!("t");
        let history = vec![
            json!({"role": "user", "content": "go"}),
            saved,
            result.clone(),
        ];
        assert!(
            restore(&history, &mut meta, Restore::Close).is_empty(),
            "nothing to add; last row is not a user row"
        );
    }

    #[test]
    fn a_resumed_turn_stays_pending_and_a_closed_one_does_not() {
        let mut pending = Map::new();
        pending.insert(meta::PENDING_USER_TURN.into(), json!(true));
        pending.insert(meta::PENDING_TURN_ID.into(), json!("m1"));
        pending.insert(
            meta::RUNTIME_CHECKPOINT.into(),
            json!({"assistant_message": null}),
        );
        let history = [json!({"role": "user", "content": "hi"})];
        let mut resumed = pending.clone();
        restore(&history, &mut resumed, Restore::Resume);
        assert_eq!(resumed.get(meta::PENDING_TURN_ID), Some(&json!("m1")));
        assert_eq!(resumed.get(meta::PENDING_USER_TURN), Some(&json!(true)));
        assert!(!resumed.contains_key(meta::RUNTIME_CHECKPOINT));
        let mut closed = pending;
        restore(&history, &mut closed, Restore::Close);
        assert!(closed.is_empty(), "{closed:?}");
    }

    #[test]
    fn a_user_message_without_reply_gets_the_interrupted_reply() {
        let mut meta = Map::new();
        meta.insert(meta::PENDING_USER_TURN.into(), json!(true));
        let mut resumed = meta.clone();
        assert!(
            restore(
                &[json!({"role": "user", "content": "hi"})],
                &mut resumed,
                Restore::Resume
            )
            .is_empty()
        );
        let rows = restore(
            &[json!({"role": "user", "content": "hi"})],
            &mut meta,
            Restore::Close,
        );
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0]["role"], "assistant");
        assert_eq!(rows[0]["content"], RESPONSE_INTERRUPTED);
        let mut meta = Map::new();
        assert!(
            restore(
                &[json!({"role": "user", "content": "hi"})],
                &mut meta,
                Restore::Close
            )
            .is_empty()
        );
    }
}
