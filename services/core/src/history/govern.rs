//! The model's copy of a request's messages, as 0.3.5's `ContextGovernor.prepare_for_model`
//! then `_merge_adjacent_user_messages_for_model`: compaction placeholders and tool calls
//! without a name left out, tool results made legal (orphans and duplicates dropped, missing
//! ones backfilled with [`BACKFILL_CONTENT`]), empty results given a no-output marker, and
//! adjacent user messages merged. The session keeps every row as stored.

use std::collections::HashSet;

use serde_json::{Value, json};

use super::{SUMMARY_CONTINUATION_TEXT, role, truthy};

/// 0.3.5's placeholder for a declared tool call whose result never came (`BACKFILL_CONTENT`).
pub const BACKFILL_CONTENT: &str = "[Tool result unavailable — call was interrupted or lost]";
/// Assistant texts that only stand for an omitted message (0.3.5 `PLACEHOLDER_TEXTS`).
const PLACEHOLDER_TEXTS: &[&str] = &["[Previous assistant message omitted.]"];

/// Returns the model's copy of `messages` (see the module docs).
pub fn prepare_for_model(messages: Vec<Value>) -> Vec<Value> {
    let messages = strip_placeholders(messages);
    let messages = strip_malformed_tool_calls(messages);
    let messages = legal_tool_rows(messages);
    let messages = nonempty_tool_results(messages);
    merge_adjacent_users(messages)
}

/// Drops orphan results then backfills missing ones (0.3.5 `drop_orphan_tool_results`,
/// `backfill_missing_tool_results`).
pub fn legal_tool_rows(messages: Vec<Value>) -> Vec<Value> {
    backfill_missing_results(drop_orphan_results(messages))
}

fn calls(m: &Value) -> &[Value] {
    m.get("tool_calls")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// A call's id as 0.3.5 reads it (`str(id)` of a truthy id), `None` when it has none.
fn call_id(call: &Value) -> Option<String> {
    let id = call.get("id").filter(|id| truthy(Some(id)))?;
    Some(id.as_str().map_or_else(|| id.to_string(), str::to_string))
}

fn result_id(m: &Value) -> Option<String> {
    let id = m.get("tool_call_id").filter(|id| truthy(Some(id)))?;
    Some(id.as_str().map_or_else(|| id.to_string(), str::to_string))
}

fn strip_placeholders(messages: Vec<Value>) -> Vec<Value> {
    messages
        .into_iter()
        .filter(|m| {
            let text = m.get("content").and_then(Value::as_str).unwrap_or("");
            role(m) != "assistant"
                || !PLACEHOLDER_TEXTS.contains(&text.trim())
                || truthy(m.get("tool_calls"))
        })
        .collect()
}

/// A stored call is usable when its name (`function.name`, else a flat `name`) is a
/// non-empty string.
fn call_has_name(call: &Value) -> bool {
    let name = match call.get("function") {
        Some(Value::Object(f)) => f.get("name"),
        _ => call.get("name"),
    };
    call.is_object() && name.and_then(Value::as_str).is_some_and(|n| !n.is_empty())
}

fn strip_malformed_tool_calls(messages: Vec<Value>) -> Vec<Value> {
    let mut out = Vec::with_capacity(messages.len());
    for mut m in messages {
        if role(&m) != "assistant" || !truthy(m.get("tool_calls")) {
            out.push(m);
            continue;
        }
        let all = calls(&m);
        let kept: Vec<Value> = all.iter().filter(|c| call_has_name(c)).cloned().collect();
        if kept.len() == all.len() && m["tool_calls"].is_array() {
            out.push(m);
            continue;
        }
        tracing::warn!(
            dropped = all.len() - kept.len(),
            "stripping tool calls without a name from replayed history"
        );
        let row = m
            .as_object_mut()
            .expect("a row with tool calls is an object");
        if kept.is_empty() {
            row.remove("tool_calls");
            if !truthy(row.get("content")) {
                continue;
            }
        } else {
            row.insert("tool_calls".into(), Value::Array(kept));
        }
        out.push(m);
    }
    out
}

fn drop_orphan_results(messages: Vec<Value>) -> Vec<Value> {
    let mut declared = HashSet::new();
    let mut fulfilled = HashSet::new();
    let mut out = Vec::with_capacity(messages.len());
    for m in messages {
        match role(&m) {
            "assistant" => declared.extend(calls(&m).iter().filter_map(call_id)),
            "tool" => match result_id(&m) {
                Some(id) if declared.contains(&id) && fulfilled.insert(id.clone()) => {}
                _ => continue,
            },
            _ => {}
        }
        out.push(m);
    }
    out
}

fn backfill_missing_results(messages: Vec<Value>) -> Vec<Value> {
    let fulfilled: HashSet<String> = messages
        .iter()
        .filter(|m| role(m) == "tool")
        .filter_map(result_id)
        .collect();
    let mut out = Vec::with_capacity(messages.len());
    let mut pending: Vec<Value> = Vec::new();
    for m in messages {
        if role(&m) != "tool" {
            out.append(&mut pending);
        }
        let missing: Vec<Value> = if role(&m) == "assistant" {
            calls(&m)
                .iter()
                .filter_map(|c| Some((call_id(c)?, c)))
                .filter(|(id, _)| !fulfilled.contains(id))
                .map(|(id, c)| json!({"role": "tool", "tool_call_id": id, "name": backfill_name(c), "content": BACKFILL_CONTENT}))
                .collect()
        } else {
            Vec::new()
        };
        out.push(m);
        pending.extend(missing);
    }
    out.append(&mut pending);
    out
}

fn backfill_name(call: &Value) -> String {
    match call.get("function") {
        Some(Value::Object(f)) => match f.get("name") {
            None => String::new(),
            Some(Value::String(s)) => s.clone(),
            Some(other) => super::py_str(other),
        },
        _ => String::new(),
    }
}

/// Gives an empty result (null, blank text, no blocks, blank text blocks) 0.3.5's
/// `(<tool> completed with no output)` (`ensure_nonempty_tool_result`).
fn nonempty_tool_results(mut messages: Vec<Value>) -> Vec<Value> {
    for m in messages.iter_mut().filter(|m| role(m) == "tool") {
        let empty = match m.get("content") {
            None | Some(Value::Null) => true,
            Some(Value::String(s)) => s.trim().is_empty(),
            Some(Value::Array(blocks)) => blocks.is_empty() || blank_text_blocks(blocks),
            _ => false,
        };
        if empty {
            let name = match m.get("name") {
                Some(n) if truthy(Some(n)) => super::py_str(n),
                _ => "tool".to_string(),
            };
            m["content"] = json!(format!("({name} completed with no output)"));
        }
    }
    messages
}

/// 0.3.5 `stringify_text_blocks(...)` is blank: every block a text block, their texts blank.
fn blank_text_blocks(blocks: &[Value]) -> bool {
    blocks.iter().all(|b| {
        b.get("type").and_then(Value::as_str) == Some("text")
            && b.get("text").and_then(Value::as_str).is_some()
    }) && blocks
        .iter()
        .all(|b| b["text"].as_str().unwrap_or("").trim().is_empty())
}

fn mergeable_user(m: &Value) -> bool {
    let hidden = super::is_hidden(m);
    let boundary = m.pointer("/_meta/provider_state_boundary") == Some(&Value::Bool(true));
    role(m) == "user"
        && m.get("content").and_then(Value::as_str) != Some(SUMMARY_CONTINUATION_TEXT)
        && !hidden
        && !boundary
}

fn merge_adjacent_users(messages: Vec<Value>) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::with_capacity(messages.len());
    for m in messages {
        if let Some(last) = out.last_mut()
            && mergeable_user(last)
            && mergeable_user(&m)
        {
            let left = last["content"].take();
            last["content"] = merge_content(
                left,
                m.get("content").cloned().unwrap_or(Value::Null),
                false,
            );
            continue;
        }
        out.push(m);
    }
    out
}

/// 0.3.5's two `_merge_message_content`s (the governor's, and with `drop_empty_right` the
/// context builder's): texts joined by a blank line (the right one alone when the left is
/// empty; the left alone when the right is, for the builder's), anything else as the blocks of
/// both, a value that is not a block becoming a text block of its Python `str`.
pub(crate) fn merge_content(left: Value, right: Value, drop_empty_right: bool) -> Value {
    match (left, right) {
        (Value::String(l), Value::String(r)) if l.is_empty() => Value::String(r),
        (Value::String(l), Value::String(r)) if drop_empty_right && r.is_empty() => {
            Value::String(l)
        }
        (Value::String(l), Value::String(r)) => Value::String(format!("{l}\n\n{r}")),
        (l, r) => {
            let blocks = |v: Value| match v {
                Value::Array(items) => items
                    .into_iter()
                    .map(|i| match i {
                        Value::Object(_) => i,
                        other => json!({"type": "text", "text": super::py_str(&other)}),
                    })
                    .collect(),
                Value::Null => Vec::new(),
                other => vec![json!({"type": "text", "text": super::py_str(&other)})],
            };
            Value::Array(blocks(l).into_iter().chain(blocks(r)).collect())
        }
    }
}
