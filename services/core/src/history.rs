//! Session history rules from nanobot 0.3.5: what is replayed to the model
//! ([`get_history`], then [`prepare_for_model`]) and how a turn's new messages are saved.

use std::collections::HashSet;

use serde_json::{Value, json};

use crate::clock::now_iso;

mod govern;

pub use govern::{BACKFILL_CONTENT, prepare_for_model};
pub(crate) use govern::{legal_tool_rows, merge_content};

/// No count cap on replay: 0.3.5's turn calls `get_history()` with `max_messages=0`, and the
/// token budget ([`replay_within`]'s `max_tokens`, then the runner's snip) bounds what is
/// sent. Kept as a value callers can pass as "no cap".
pub const MAX_REPLAY_MESSAGES: usize = usize::MAX;

/// 0.3.5's hidden user row a summary checkpoint starts replay with (`SUMMARY_CONTINUATION_TEXT`):
/// never merged with a neighbouring user message.
pub const SUMMARY_CONTINUATION_TEXT: &str =
    "Continue the active task from the working-memory checkpoint above.";

/// The hidden row 0.3.5's `Session.commit_summary_checkpoint` inserts at an archive boundary:
/// replay resumes at it, after the summary the system prompt carries.
pub fn summary_checkpoint_row() -> Value {
    json!({
        "role": "user",
        "content": SUMMARY_CONTINUATION_TEXT,
        "_hidden_history": true,
        "timestamp": now_iso(),
    })
}

/// 0.3.5 `is_hidden_history_message`'s marker: `_hidden_history` true or an object.
pub(crate) fn is_hidden(m: &Value) -> bool {
    m.get("_hidden_history")
        .is_some_and(|v| v == &Value::Bool(true) || v.is_object())
}

/// 0.3.5 `is_summary_checkpoint`: a hidden row holding [`SUMMARY_CONTINUATION_TEXT`].
pub fn is_summary_checkpoint(m: &Value) -> bool {
    is_hidden(m) && m.get("content").and_then(Value::as_str) == Some(SUMMARY_CONTINUATION_TEXT)
}

/// Whether an archive takes the row (0.3.5 `archive_session`: not a command, not a checkpoint).
pub fn is_archivable(m: &Value) -> bool {
    !truthy(m.get("_command")) && !is_summary_checkpoint(m)
}

/// Keys of a stored row the model is sent (when the row has them, even as null).
const REPLAY_KEYS: &[&str] = &[
    "tool_calls",
    "tool_call_id",
    "name",
    "reasoning_content",
    "thinking_blocks",
];

/// Attached CLI apps named on a user row's replay (0.3.5 `cli_apps[:8]`).
const MAX_CLI_APPS: usize = 8;

fn role(m: &Value) -> &str {
    m.get("role").and_then(Value::as_str).unwrap_or("")
}

/// Python's truthiness of a JSON value (absent, null, false, 0, "", [] and {} are false).
pub(crate) fn truthy(v: Option<&Value>) -> bool {
    match v {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(Value::Number(n)) => n.as_f64().is_some_and(|f| f != 0.0),
        Some(Value::String(s)) => !s.is_empty(),
        Some(Value::Array(a)) => !a.is_empty(),
        Some(Value::Object(o)) => !o.is_empty(),
    }
}

pub(crate) use nanobot_runtime::pyfmt::{py_str, py_strip};

/// Returns the start of a recent window of `max` rows (0.3.5 `recent_message_start_index`):
/// with `extend_to_user`, a window holding no user row is extended back to the user that
/// began its turn (or the proactive delivery just before it).
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
    truthy(m.get("_channel_delivery"))
}

/// Returns the first index whose tool results all follow their assistant call (0.3.5
/// `find_legal_message_start`).
pub(crate) fn find_legal_message_start(messages: &[Value]) -> usize {
    let mut declared = HashSet::new();
    let mut start = 0;
    for (i, m) in messages.iter().enumerate() {
        match role(m) {
            "assistant" => declared.extend(call_ids(m)),
            "tool" => {
                let id = m.get("tool_call_id").filter(|id| truthy(Some(id)));
                if let Some(id) = id.map(py_str)
                    && !declared.contains(&id)
                {
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
        .filter_map(|c| c.get("id").filter(|id| truthy(Some(id))).map(py_str))
        .collect()
}

/// Returns the messages replayed to the model ([`replay_within`] without a token budget).
pub fn replay(messages: &[Value], last_consolidated: usize, max_messages: usize) -> Vec<Value> {
    replay_within(messages, last_consolidated, max_messages, 0)
}

/// Returns what a turn sends of its history: [`get_history`] (no subagent extension), then
/// the model's copy of it ([`prepare_for_model`]). `max_messages` is a caller-owned cap (0.3.5's
/// turn has none: pass [`MAX_REPLAY_MESSAGES`]); `max_tokens` 0 means no token budget.
pub fn replay_within(
    messages: &[Value],
    last_consolidated: usize,
    max_messages: usize,
    max_tokens: usize,
) -> Vec<Value> {
    let cap = if max_messages == usize::MAX {
        0
    } else {
        max_messages
    };
    prepare_for_model(get_history(
        messages,
        last_consolidated,
        cap,
        false,
        max_tokens,
    ))
}

/// Returns the replayable rows of a session as 0.3.5's `Session.get_history`: the rows from
/// `last_archived` on (every row when the watermark is past the end, as 0.3.5 resets a corrupt
/// one), the last `max_messages` of them when that is not 0 (extended back to their user with
/// `extend_to_user`), from the first user row (or the proactive delivery right before it), at a
/// legal tool-call boundary; command rows and assistant rows with nothing to say dropped,
/// assistant text sanitised ([`sanitize_assistant_text`]), media and CLI-app breadcrumbs on user
/// rows, only model-facing keys kept. Then, with `max_tokens > 0`, the newest rows within that
/// many tokens, re-aligned to a user row (the nearest one even over budget).
pub fn get_history(
    messages: &[Value],
    last_archived: usize,
    max_messages: usize,
    extend_to_user: bool,
    max_tokens: usize,
) -> Vec<Value> {
    let from = if last_archived > messages.len() {
        0
    } else {
        last_archived
    };
    let replayable = &messages[from..];
    let start = if max_messages == 0 {
        0
    } else {
        recent_start(replayable, max_messages, extend_to_user)
    };
    let mut sliced = &replayable[start..];
    if let Some(i) = sliced.iter().position(|m| role(m) == "user") {
        let from = if i > 0 && is_channel_delivery(&sliced[i - 1]) {
            i - 1
        } else {
            i
        };
        sliced = &sliced[from..];
    }
    sliced = &sliced[find_legal_message_start(sliced)..];
    let out: Vec<Value> = sliced.iter().filter_map(replay_row).collect();
    if max_tokens > 0 && !out.is_empty() {
        return newest_within(out, max_tokens);
    }
    out
}

/// One stored row as the model is sent it, `None` for a row it is not sent.
fn replay_row(m: &Value) -> Option<Value> {
    if truthy(m.get("_command")) {
        return None;
    }
    let r = role(m);
    let mut content = m.get("content").cloned().unwrap_or_else(|| json!(""));
    if let Value::String(text) = &content {
        let mut text = if r == "assistant" {
            sanitize_assistant_text(text)
        } else {
            text.clone()
        };
        if r == "user" {
            text = with_media_breadcrumbs(text, m.get("media"));
            if !m.get("_runtime_context").is_some_and(Value::is_object) {
                text = with_cli_app_breadcrumbs(text, m.get("cli_apps"));
            }
        }
        content = Value::String(text);
    }
    let says_nothing = content.as_str().is_some_and(|t| py_strip(t).is_empty());
    let keeps_turn = ["tool_calls", "reasoning_content", "thinking_blocks"]
        .iter()
        .any(|k| m.get(*k).is_some());
    if r == "assistant" && says_nothing && !keeps_turn {
        return None;
    }
    let mut row = serde_json::Map::new();
    row.insert("role".into(), m.get("role").cloned().unwrap_or(Value::Null));
    row.insert("content".into(), content);
    for key in REPLAY_KEYS {
        if let Some(v) = m.get(*key) {
            row.insert((*key).to_string(), v.clone());
        }
    }
    let mut row = Value::Object(row);
    // A stored call of the last release's `write_stdin` replays as 0.3.5 migrates it on load.
    nanobot_runtime::legacy_exec::migrate_row(&mut row);
    Some(row)
}

/// Keeps the newest rows within `max_tokens`, re-aligned to a user row (the nearest one even
/// over budget) at a legal tool-call boundary (0.3.5's `max_tokens` pass).
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

/// Removes replay artefacts a model could learn to repeat from an assistant row (0.3.5
/// `_sanitize_assistant_replay_text`): a leading `[Message Time: …]`, lines that are only a
/// local `[image: /…]` breadcrumb or an echoed `message(…)` / `generate_image(…)` call; then,
/// deliberately beyond 0.3.5, think tags as [`crate::provider::strip_think`] (a reasoning leak
/// stored in a reply is not shown back to the model as an example).
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
    let kept: Vec<&str> = py_lines(&text)
        .filter(|line| !image.is_match(line) && !echo.is_match(line))
        .collect();
    crate::provider::strip_think(py_strip(&kept.join("\n"))).0
}

/// Python's `str.splitlines()`: lines split at any line boundary Python knows.
fn py_lines(text: &str) -> impl Iterator<Item = &str> {
    const BREAKS: &[char] = &[
        '\n', '\r', '\u{b}', '\u{c}', '\u{1c}', '\u{1d}', '\u{1e}', '\u{85}', '\u{2028}',
        '\u{2029}',
    ];
    let mut rest = text;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let Some(at) = rest.find(BREAKS) else {
            return Some(std::mem::take(&mut rest));
        };
        let line = &rest[..at];
        let width = if rest[at..].starts_with("\r\n") {
            2
        } else {
            rest[at..].chars().next().map_or(1, char::len_utf8)
        };
        rest = &rest[at + width..];
        Some(line)
    })
}

/// 0.3.5 `content_with_media_breadcrumbs`: a user row's non-empty media paths as
/// `[image: path]` lines after its text (alone when it has none).
fn with_media_breadcrumbs(text: String, media: Option<&Value>) -> String {
    let Some(media) = media.and_then(Value::as_array) else {
        return text;
    };
    let crumbs: Vec<String> = media
        .iter()
        .filter_map(Value::as_str)
        .filter(|p| !p.is_empty())
        .map(|p| format!("[image: {p}]"))
        .collect();
    join_after(text, crumbs)
}

/// 0.3.5's replay of a user row's attached CLI apps (when its runtime context was not stored):
/// one `[CLI App Attachment: …]` line per named app, of the first eight.
fn with_cli_app_breadcrumbs(text: String, apps: Option<&Value>) -> String {
    let Some(apps) = apps.and_then(Value::as_array) else {
        return text;
    };
    let lines: Vec<String> = apps
        .iter()
        .take(MAX_CLI_APPS)
        .filter(|a| a.is_object())
        .filter_map(|app| {
            let field = |k: &str| app.get(k).filter(|v| truthy(Some(v))).map(py_str);
            let name = py_strip(&field("name").unwrap_or_default()).to_lowercase();
            if name.is_empty() {
                return None;
            }
            let entry = field("entry_point").unwrap_or_else(|| "unknown".into());
            let entry = match py_strip(&entry) {
                "" => "unknown",
                e => e,
            };
            Some(format!(
                "[CLI App Attachment: @{name}; tool=run_cli_app; entry_point={entry}; \
                 skill=skills/cli-app-{name}/SKILL.md]"
            ))
        })
        .collect();
    join_after(text, lines)
}

fn join_after(text: String, lines: Vec<String>) -> String {
    match (lines.is_empty(), text.is_empty()) {
        (true, _) => text,
        (false, true) => lines.join("\n"),
        (false, false) => format!("{text}\n{}", lines.join("\n")),
    }
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
/// assistant row ([`crate::subagent::rows::store_shape`]).
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
        crate::subagent::rows::store_shape(&mut row);
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
    fn archived_rows_are_never_replayed_and_there_is_no_count_cap() {
        let mut msgs = Vec::new();
        for i in 0..100 {
            msgs.push(user(&format!("q{i}")));
            msgs.push(asst(&format!("a{i}")));
        }
        assert_eq!(replay(&msgs, 200, MAX_REPLAY_MESSAGES), Vec::<Value>::new());
        assert_eq!(replay(&msgs, 196, MAX_REPLAY_MESSAGES)[0], user("q98"));
        let all = replay(&msgs, 0, MAX_REPLAY_MESSAGES);
        assert_eq!(all.len(), 200, "more than the old 120-row cap");
        let capped = replay(&msgs, 0, 5);
        assert_eq!(
            capped[0],
            user("q98"),
            "a caller's cap, aligned to a user row"
        );
        assert_eq!(capped.len(), 4);
    }

    fn call(id: &str) -> Value {
        json!({"role": "assistant", "content": null, "tool_calls": [{"id": id, "type": "function", "function": {"name": "exec", "arguments": "{}"}}]})
    }
    fn result(id: &str) -> Value {
        json!({"role": "tool", "tool_call_id": id, "name": "exec", "content": "ok"})
    }

    #[test]
    fn a_summary_checkpoint_starts_replay_at_its_hidden_row_never_merged() {
        let mut msgs = vec![user("q0"), asst("a0"), user("q1")];
        for i in 0..6 {
            msgs.push(call(&format!("c{i}")));
            msgs.push(result(&format!("c{i}")));
        }
        msgs.push(asst("done"));
        let boundary = msgs.len();
        msgs.push(
            json!({"role": "user", "content": SUMMARY_CONTINUATION_TEXT, "_hidden_history": true}),
        );
        msgs.push(user("next 🌏"));
        let out = replay(&msgs, boundary, MAX_REPLAY_MESSAGES);
        assert_eq!(out, vec![user(SUMMARY_CONTINUATION_TEXT), user("next 🌏")]);
    }

    #[test]
    fn adjacent_user_rows_are_merged_for_the_model() {
        let msgs = vec![
            user("你好"),
            json!({"role": "user", "content": "/status", "_command": true}),
            user("مرحبا"),
            json!({"role": "user", "content": "", "media": ["/m/猫.png"]}),
        ];
        let out = replay(&msgs, 0, MAX_REPLAY_MESSAGES);
        assert_eq!(out, vec![user("你好\n\nمرحبا\n\n[image: /m/猫.png]")]);
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
