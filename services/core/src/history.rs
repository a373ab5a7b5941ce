//! Session history rules from nanobot: what is replayed to the model (aligned to a user turn,
//! legal tool-call boundaries) and how a turn's new messages are saved.

use std::collections::HashSet;

use serde_json::{Value, json};

use crate::session::now_iso;

/// Replay cap on messages (upstream `get_history(max_messages=120)`).
pub const MAX_REPLAY_MESSAGES: usize = 120;
/// Suffix kept replayable even when archived (upstream `MIN_COMPACTED_REPLAY_MESSAGES`).
pub const MIN_COMPACTED_REPLAY_MESSAGES: usize = 8;

const REPLAY_KEYS: &[&str] = &[
    "role",
    "content",
    "tool_calls",
    "tool_call_id",
    "name",
    "reasoning_content",
    "thinking_blocks",
];

fn role(m: &Value) -> &str {
    m.get("role").and_then(Value::as_str).unwrap_or("")
}

/// Returns the first index at or after `from` where history may legally start: a `user` row,
/// so no tool result appears before the assistant call that declared it.
pub fn legal_start(messages: &[Value], from: usize) -> Option<usize> {
    (from..messages.len()).find(|&i| role(&messages[i]) == "user")
}

/// Returns the messages replayed to the model: from `min(last_consolidated, start of the last
/// 8 messages)` on, at most `max_messages`, aligned to a user message, command rows and empty
/// assistant rows dropped, only model-facing keys kept, orphan tool results dropped.
pub fn replay(messages: &[Value], last_consolidated: usize, max_messages: usize) -> Vec<Value> {
    let tail_start = messages.len().saturating_sub(MIN_COMPACTED_REPLAY_MESSAGES);
    let mut start = last_consolidated.min(tail_start);
    start = start.max(messages.len().saturating_sub(max_messages));
    let Some(start) = legal_start(messages, start) else {
        return Vec::new();
    };
    let mut declared = HashSet::new();
    let mut out = Vec::new();
    for m in &messages[start..] {
        if m.get("_command").and_then(Value::as_bool).unwrap_or(false) {
            continue;
        }
        let r = role(m);
        let has_calls = m
            .get("tool_calls")
            .and_then(Value::as_array)
            .is_some_and(|a| !a.is_empty());
        if r == "assistant" && !has_calls && is_blank(m.get("content")) {
            continue;
        }
        if r == "tool" {
            let id = m.get("tool_call_id").and_then(Value::as_str).unwrap_or("");
            if !declared.remove(id) {
                continue;
            }
        }
        if has_calls {
            for call in m["tool_calls"].as_array().into_iter().flatten() {
                if let Some(id) = call.get("id").and_then(Value::as_str) {
                    declared.insert(id.to_string());
                }
            }
        }
        let mut row = serde_json::Map::new();
        for key in REPLAY_KEYS {
            if let Some(v) = m.get(*key)
                && !v.is_null()
            {
                row.insert((*key).to_string(), v.clone());
            }
        }
        if r == "user" {
            append_media_breadcrumbs(&mut row, m);
        }
        out.push(Value::Object(row));
    }
    out
}

fn append_media_breadcrumbs(row: &mut serde_json::Map<String, Value>, m: &Value) {
    let Some(media) = m.get("media").and_then(Value::as_array) else {
        return;
    };
    let mut text = row
        .get("content")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    for path in media.iter().filter_map(Value::as_str) {
        text.push_str(&format!("\n[image: {path}]"));
    }
    row.insert("content".into(), Value::String(text));
}

fn is_blank(content: Option<&Value>) -> bool {
    match content {
        None | Some(Value::Null) => true,
        Some(Value::String(s)) => s.trim().is_empty(),
        Some(Value::Array(a)) => a.is_empty(),
        _ => false,
    }
}

/// Truncates text to `max` characters with upstream's marker.
pub fn truncate_text(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let head: String = text.chars().take(max).collect();
    format!("{head}\n... (truncated)")
}

/// Prepares a turn's new messages for saving, as upstream `_save_turn`: empty assistant rows
/// skipped, tool results truncated to `max_tool_result_chars`, image blocks replaced by
/// placeholders, timestamps added, an injected subagent announcement stored as upstream's
/// assistant row ([`crate::subagent::store_shape`]).
pub fn rows_to_save(new_messages: &[Value], max_tool_result_chars: usize) -> Vec<Value> {
    let mut out = Vec::new();
    for m in new_messages {
        let mut row = m.clone();
        let r = role(m).to_string();
        let has_calls = m
            .get("tool_calls")
            .and_then(Value::as_array)
            .is_some_and(|a| !a.is_empty());
        if r == "assistant" && !has_calls && is_blank(m.get("content")) {
            continue;
        }
        if r == "tool" || r == "user" {
            let content = row.get("content").cloned().unwrap_or(Value::Null);
            let saved = match content {
                Value::String(s) if r == "tool" => {
                    Value::String(truncate_text(&s, max_tool_result_chars))
                }
                Value::Array(blocks) => Value::Array(strip_images(blocks)),
                other => other,
            };
            let empty = saved.as_str().is_some_and(str::is_empty)
                || saved.as_array().is_some_and(Vec::is_empty);
            let saved = if r == "tool" && empty {
                Value::String("[tool result omitted during persistence]".into())
            } else {
                saved
            };
            row["content"] = saved;
        }
        crate::subagent::store_shape(&mut row);
        if row.get("timestamp").is_none() {
            row["timestamp"] = Value::String(now_iso());
        }
        out.push(row);
    }
    out
}

fn strip_images(blocks: Vec<Value>) -> Vec<Value> {
    blocks
        .into_iter()
        .map(|b| {
            let url = b
                .pointer("/image_url/url")
                .and_then(Value::as_str)
                .unwrap_or("");
            if url.starts_with("data:image/") {
                let path = b
                    .pointer("/_meta/path")
                    .and_then(Value::as_str)
                    .unwrap_or("image");
                json!({"type": "text", "text": format!("[image: {path}]")})
            } else {
                b
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(t: &str) -> Value {
        json!({"role": "user", "content": t})
    }
    fn asst(t: &str) -> Value {
        json!({"role": "assistant", "content": t})
    }

    #[test]
    fn replay_starts_at_a_user_turn_and_drops_orphan_tool_results() {
        let msgs = vec![
            json!({"role": "tool", "tool_call_id": "x", "content": "orphan"}),
            asst("stray"),
            user("q1"),
            json!({"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}]}),
            json!({"role": "tool", "tool_call_id": "c1", "name": "read_file", "content": "data", "timestamp": "t"}),
            json!({"role": "tool", "tool_call_id": "c1", "name": "read_file", "content": "dup"}),
            asst(""),
            asst("a1"),
        ];
        let out = replay(&msgs, 0, 120);
        assert_eq!(out[0], user("q1"));
        assert_eq!(out.len(), 4, "{out:#?}");
        assert!(
            out[2].get("timestamp").is_none(),
            "only model keys are replayed"
        );
        assert_eq!(out[3], asst("a1"));
    }

    #[test]
    fn replay_keeps_the_last_eight_even_when_archived_and_honours_the_cap() {
        let mut msgs = Vec::new();
        for i in 0..10 {
            msgs.push(user(&format!("q{i}")));
            msgs.push(asst(&format!("a{i}")));
        }
        let out = replay(&msgs, 20, 120);
        assert_eq!(out.len(), 8);
        assert_eq!(out[0], user("q6"));
        let capped = replay(&msgs, 0, 5);
        assert_eq!(capped[0], user("q8"), "aligned forward to a user row");
        assert_eq!(capped.len(), 4);
    }

    #[test]
    fn saved_rows_follow_upstream_rules() {
        let long = "x".repeat(50);
        let rows = rows_to_save(
            &[
                asst(""),
                json!({"role": "tool", "tool_call_id": "c", "content": long}),
                json!({"role": "tool", "tool_call_id": "d", "content": ""}),
                json!({"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AA"}, "_meta": {"path": "/p.png"}}]}),
            ],
            10,
        );
        assert_eq!(rows.len(), 3, "empty assistant skipped");
        assert_eq!(rows[0]["content"], "xxxxxxxxxx\n... (truncated)");
        assert_eq!(
            rows[1]["content"],
            "[tool result omitted during persistence]"
        );
        assert_eq!(rows[2]["content"][0]["text"], "[image: /p.png]");
        assert!(rows.iter().all(|r| r.get("timestamp").is_some()));
    }
}
