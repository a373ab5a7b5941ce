//! What marks a subagent's announcement, in its inbound metadata, mid-turn and in the session:
//! the keys, the rows and the rewrite between them. A leaf: the history and the providers read
//! these marks, and nothing here reaches back to them.

use serde_json::{Value, json};

/// Sender id of an announcement (the inbound message carrying a subagent's result).
pub const SENDER: &str = "subagent";
/// `injected_event` of an announcement's metadata and of its session row.
pub const INJECTED_EVENT: &str = "subagent_result";
/// Key of [`INJECTED_EVENT`] in an announcement's metadata and session row.
pub const INJECTED_EVENT_KEY: &str = "injected_event";
/// Key of the task id in an announcement's metadata and session row.
pub const TASK_ID_KEY: &str = "subagent_task_id";

/// The announcement's metadata.
pub fn announcement_metadata(task_id: &str, origin_message_id: &str) -> Value {
    let mut meta = json!({INJECTED_EVENT_KEY: INJECTED_EVENT, TASK_ID_KEY: task_id});
    if !origin_message_id.is_empty() {
        meta["origin_message_id"] = json!(origin_message_id);
    }
    meta
}

/// The task id an inbound message's metadata announces the result of, when it is a
/// subagent's announcement ([`announcement_metadata`]).
pub fn announced_task(metadata_json: &str) -> Option<String> {
    let meta: Value = serde_json::from_str(metadata_json).ok()?;
    if meta.get(INJECTED_EVENT_KEY).and_then(Value::as_str) != Some(INJECTED_EVENT) {
        return None;
    }
    meta.get(TASK_ID_KEY)?.as_str().map(str::to_string)
}

/// An announcement as the model reads it mid-turn: a user message, marked with its task so
/// [`crate::history::rows_to_save`] stores it as upstream's assistant row ([`result_row`]).
pub fn injected_row(content: &str, task_id: &str) -> Value {
    json!({"role": "user", "content": content, INJECTED_EVENT_KEY: INJECTED_EVENT, TASK_ID_KEY: task_id})
}

/// The session row of an announcement, as upstream: an assistant row tagged
/// `injected_event: "subagent_result"` with its task id and the `subagent` sender.
pub fn result_row(content: &str, task_id: &str) -> Value {
    json!({
        "role": "assistant",
        "content": content,
        "sender_id": SENDER,
        INJECTED_EVENT_KEY: INJECTED_EVENT,
        TASK_ID_KEY: task_id,
    })
}

/// Rewrites a row marked as an announcement ([`injected_row`]) into its stored shape
/// ([`result_row`]); other rows are left alone.
pub fn store_shape(row: &mut Value) {
    let task = match (
        row.get(INJECTED_EVENT_KEY).and_then(Value::as_str),
        row.get(TASK_ID_KEY).and_then(Value::as_str),
    ) {
        (Some(INJECTED_EVENT), Some(task)) => task.to_string(),
        _ => return,
    };
    let content = row.get("content").and_then(Value::as_str).unwrap_or("");
    let mut stored = result_row(content, &task);
    if let Some(ts) = row.get("timestamp") {
        stored["timestamp"] = ts.clone();
    }
    *row = stored;
}

/// Whether `row` is the stored announcement of task `task_id` (upstream de-duplicates by it).
pub fn is_result_row(row: &Value, task_id: &str) -> bool {
    row.get(INJECTED_EVENT_KEY).and_then(Value::as_str) == Some(INJECTED_EVENT)
        && row.get(TASK_ID_KEY).and_then(Value::as_str) == Some(task_id)
}
