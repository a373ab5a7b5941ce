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

/// Upstream's placeholder for a declared tool call whose result never came
/// (`BACKFILL_CONTENT`).
pub const BACKFILL_CONTENT: &str = "[Tool result unavailable — call was interrupted or lost]";

/// Returns the start of a recent window of `max` rows (upstream
/// `recent_message_start_index`): with `extend_to_user`, a window holding no user row is
/// extended back to the user that began its turn (or the proactive delivery just before it).
fn recent_start(messages: &[Value], max: usize, extend_to_user: bool) -> usize {
    if max == 0 {
        return messages.len();
    }
    let start = messages.len().saturating_sub(max);
    if !extend_to_user || messages.len() <= max {
        return start;
    }
    if messages[start..].iter().any(|m| role(m) == "user") {
        return start;
    }
    match (0..start).rev().find(|&i| role(&messages[i]) == "user") {
        Some(i) if i > 0 && is_channel_delivery(&messages[i - 1]) => i - 1,
        Some(i) => i,
        None => start,
    }
}

fn is_channel_delivery(m: &Value) -> bool {
    m.get("_channel_delivery")
        .is_some_and(|v| !v.is_null() && v != &Value::Bool(false))
}

/// Returns the first index whose tool results all follow their assistant call (upstream
/// `find_legal_message_start`).
pub(crate) fn find_legal_message_start(messages: &[Value]) -> usize {
    let mut declared = HashSet::new();
    let mut start = 0;
    for (i, m) in messages.iter().enumerate() {
        match role(m) {
            "assistant" => declared.extend(call_ids(m)),
            "tool" => {
                let id = m.get("tool_call_id").and_then(Value::as_str).unwrap_or("");
                if !id.is_empty() && !declared.contains(id) {
                    start = i + 1;
                    declared.clear();
                }
            }
            _ => {}
        }
    }
    start
}

fn call_ids(m: &Value) -> Vec<String> {
    m.get("tool_calls")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|c| c.get("id").and_then(Value::as_str).map(str::to_string))
        .collect()
}

/// Returns the messages replayed to the model, at most `max_messages` of them
/// ([`replay_within`] without a token budget).
pub fn replay(messages: &[Value], last_consolidated: usize, max_messages: usize) -> Vec<Value> {
    replay_within(messages, last_consolidated, max_messages, 0)
}

/// Returns the messages replayed to the model, as upstream `Session.get_history` (§8.3):
/// from `min(last_consolidated, the last 8 rows extended back to their user)`, at most
/// `max_messages`, aligned to the user row that began a turn (or the proactive delivery
/// right before it), at a legal tool-call boundary; command rows and empty assistant rows
/// dropped, assistant text sanitised ([`sanitize_assistant_text`]), media breadcrumbs on user
/// rows, only model-facing keys kept. Then, with `max_tokens > 0`, the newest rows within that
/// many tokens, re-aligned to a user row (the nearest one even over budget). Tool rows are
/// legal throughout: a result whose call is not in the replay is dropped, and a call whose
/// result is missing gets upstream's [`BACKFILL_CONTENT`].
pub fn replay_within(
    messages: &[Value],
    last_consolidated: usize,
    max_messages: usize,
    max_tokens: usize,
) -> Vec<Value> {
    let mut replay_start = last_consolidated.min(messages.len());
    if replay_start > 0 {
        replay_start =
            replay_start.min(recent_start(messages, MIN_COMPACTED_REPLAY_MESSAGES, true));
    }
    let replayable = &messages[replay_start..];
    let unarchived = messages.len().saturating_sub(last_consolidated);
    let cap_start = if replay_start < last_consolidated && unarchived < max_messages {
        // One tool-heavy turn spanning the archive boundary is kept whole.
        0
    } else {
        recent_start(replayable, max_messages, false)
    };
    let mut sliced = &replayable[cap_start..];
    if let Some(i) = sliced.iter().position(|m| role(m) == "user") {
        let from = if i > 0 && is_channel_delivery(&sliced[i - 1]) {
            i - 1
        } else {
            i
        };
        sliced = &sliced[from..];
    }
    sliced = &sliced[find_legal_message_start(sliced)..];
    let mut out = Vec::new();
    for m in sliced {
        if m.get("_command").and_then(Value::as_bool).unwrap_or(false) {
            continue;
        }
        let r = role(m);
        let mut row = serde_json::Map::new();
        for key in REPLAY_KEYS {
            if let Some(v) = m.get(*key)
                && !v.is_null()
            {
                row.insert((*key).to_string(), v.clone());
            }
        }
        if r == "assistant"
            && let Some(text) = m.get("content").and_then(Value::as_str)
        {
            row.insert("content".into(), json!(sanitize_assistant_text(text)));
        }
        let keeps_turn = ["tool_calls", "reasoning_content", "thinking_blocks"]
            .iter()
            .any(|k| row.contains_key(*k));
        if r == "assistant" && !keeps_turn && is_blank(row.get("content")) {
            continue;
        }
        if r == "user" {
            append_media_breadcrumbs(&mut row, m);
        }
        out.push(Value::Object(row));
    }
    if max_tokens > 0 && !out.is_empty() {
        out = newest_within(out, max_tokens);
    }
    legal_tool_rows(out)
}

/// Keeps the newest rows within `max_tokens`, re-aligned to a user row (the nearest one even
/// over budget) at a legal tool-call boundary (upstream's `max_tokens` pass).
fn newest_within(out: Vec<Value>, max_tokens: usize) -> Vec<Value> {
    use crate::memory::budget::{estimate_message, estimate_message_bound};
    // When even the byte bound fits, every row does: no tokenizer pass (the common case).
    let bound: usize = out.iter().map(estimate_message_bound).sum();
    let mut from = out.len();
    if bound <= max_tokens {
        from = 0;
    } else {
        let mut used = 0;
        for (i, m) in out.iter().enumerate().rev() {
            let tokens = estimate_message(m);
            if from < out.len() && used + tokens > max_tokens {
                break;
            }
            used += tokens;
            from = i;
        }
    }
    let first_user = out[from..].iter().position(|m| role(m) == "user");
    let from = match first_user {
        Some(i) => from + i,
        None => out.iter().rposition(|m| role(m) == "user").unwrap_or(from),
    };
    let kept = &out[from..];
    kept[find_legal_message_start(kept)..].to_vec()
}

/// Drops tool results whose call is not declared before them (or already answered), and
/// gives every declared call without a result upstream's [`BACKFILL_CONTENT`] right after
/// its assistant row's results, so a provider never sees an illegal tool sequence.
pub(crate) fn legal_tool_rows(rows: Vec<Value>) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::with_capacity(rows.len());
    // Calls of the latest assistant row still waiting for their result, in call order.
    let mut open: Vec<(String, String)> = Vec::new();
    let mut answered = HashSet::new();
    let close = |out: &mut Vec<Value>, open: &mut Vec<(String, String)>| {
        for (id, name) in open.drain(..) {
            out.push(json!({"role": "tool", "tool_call_id": id, "name": name, "content": BACKFILL_CONTENT}));
        }
    };
    for m in rows {
        if role(&m) == "tool" {
            let id = m.get("tool_call_id").and_then(Value::as_str).unwrap_or("");
            let Some(pos) = open.iter().position(|(open_id, _)| open_id == id) else {
                continue;
            };
            if !answered.insert(id.to_string()) {
                continue;
            }
            open.remove(pos);
            out.push(m);
            continue;
        }
        close(&mut out, &mut open);
        if role(&m) == "assistant" {
            for call in m
                .get("tool_calls")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let id = call.get("id").and_then(Value::as_str).unwrap_or("");
                let name = call
                    .pointer("/function/name")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                if !id.is_empty() {
                    open.push((id.to_string(), name.to_string()));
                }
            }
        }
        out.push(m);
    }
    close(&mut out, &mut open);
    out
}

/// Removes replay artefacts a model could learn to repeat from an assistant row (upstream
/// `_sanitize_assistant_replay_text`): a leading `[Message Time: …]`, lines that are only a
/// local `[image: /…]` breadcrumb or an echoed `message(…)` / `generate_image(…)` call; then
/// think tags as [`crate::provider::strip_think`].
pub fn sanitize_assistant_text(text: &str) -> String {
    static PATTERNS: std::sync::LazyLock<[regex::Regex; 3]> = std::sync::LazyLock::new(|| {
        [
            r"^\[Message Time: [^\]]+\]\n?",
            r"^\[image: (?:/|~)[^\]]+\]\s*$",
            r"^\s*(?:generate_image|message)\([^)]*\)\s*$",
        ]
        .map(|p| regex::Regex::new(p).expect("static replay pattern"))
    });
    let [time, image, echo] = &*PATTERNS;
    let text = time.replace(text, "");
    let kept: Vec<&str> = text
        .lines()
        .filter(|line| !image.is_match(line) && !echo.is_match(line))
        .collect();
    crate::provider::strip_think(kept.join("\n").trim()).0
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

    fn call(id: &str) -> Value {
        json!({"role": "assistant", "content": null, "tool_calls": [{"id": id, "type": "function", "function": {"name": "exec", "arguments": "{}"}}]})
    }
    fn result(id: &str) -> Value {
        json!({"role": "tool", "tool_call_id": id, "name": "exec", "content": "ok"})
    }

    #[test]
    fn an_archived_replay_reaches_back_to_the_user_that_began_the_turn() {
        let mut msgs = vec![user("q0"), asst("a0"), user("q1")];
        for i in 0..6 {
            msgs.push(call(&format!("c{i}")));
            msgs.push(result(&format!("c{i}")));
        }
        msgs.push(asst("done"));
        let out = replay(&msgs, msgs.len(), 120);
        assert_eq!(out[0], user("q1"), "not mid-turn: {out:#?}");
        assert_eq!(out.len(), 14);
    }

    #[test]
    fn tool_rows_are_legal_missing_results_backfilled_and_orphans_cut() {
        let msgs = vec![user("q"), call("c1"), user("again"), asst("fine")];
        let out = replay(&msgs, 0, 120);
        assert_eq!(out[1]["tool_calls"], call("c1")["tool_calls"]);
        assert_eq!(
            out[2],
            json!({"role": "tool", "tool_call_id": "c1", "name": "exec", "content": BACKFILL_CONTENT})
        );
        assert_eq!(out[3], user("again"));
        // Upstream `find_legal_message_start`: history restarts after an orphan result.
        let orphan = vec![
            user("q"),
            asst("a"),
            result("zz"),
            user("again"),
            asst("fine"),
        ];
        assert_eq!(replay(&orphan, 0, 120), vec![user("again"), asst("fine")]);
    }

    #[test]
    fn assistant_text_is_sanitised_on_replay() {
        let msgs = vec![
            user("q"),
            asst(
                "[Message Time: 2026-04-01 10:30]\nHello\n[image: /tmp/a.png]\nmessage(content='hi')\nBye</think>",
            ),
            asst("<thi"),
        ];
        let out = replay(&msgs, 0, 120);
        assert_eq!(out[1], asst("Hello\nBye"));
        assert_eq!(out.len(), 2, "a row left empty is dropped");
    }

    #[test]
    fn a_token_budget_keeps_the_newest_turns_from_a_user_row() {
        let mut msgs =
            vec![json!({"role": "assistant", "content": "proactive", "_channel_delivery": true})];
        for i in 0..10 {
            msgs.push(user(&format!("question {i} {}", "word ".repeat(20))));
            msgs.push(asst(&format!("answer {i} {}", "word ".repeat(20))));
        }
        let all = replay(&msgs, 0, 120);
        assert_eq!(
            all[0]["content"], "proactive",
            "a delivery the user answers is kept"
        );
        let per_turn = crate::memory::budget::estimate_messages(&all[1..3]);
        let out = replay_within(&msgs, 0, 120, per_turn * 3 + per_turn / 2);
        assert_eq!(out.len(), 6, "{out:#?}");
        assert!(
            out[0]["content"]
                .as_str()
                .unwrap()
                .starts_with("question 7")
        );
        let tight = replay_within(&msgs, 0, 120, 5);
        assert_eq!(tight.len(), 2, "the nearest user is kept even over budget");
        assert!(
            tight[0]["content"]
                .as_str()
                .unwrap()
                .starts_with("question 9")
        );
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
