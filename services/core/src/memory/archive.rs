//! What the Consolidator archives and how (upstream `Consolidator`, reference §8.2): the
//! boundary at a user turn, the LLM archive request (the replay prefix plus our instruction,
//! the tools offered with `tool_choice: none`), the checks that send a chunk to the raw
//! archive instead, and the `[Archived Context Summary]` kept in session metadata.

use serde_json::{Map, Value, json};
use sha2::{Digest as _, Sha256};

use super::budget::{estimate_message, estimate_messages, estimate_tools};
use crate::history;
use crate::provider::{ChatRequest, ChatResponse};
use crate::session::meta;

/// Cap of an LLM summary entry (upstream).
pub const SUMMARY_CHARS: usize = 8000;
/// Cap of a raw archive entry (upstream).
pub const RAW_ARCHIVE_CHARS: usize = 16_000;
/// Archive rounds per request (upstream `_MAX_CONSOLIDATION_ROUNDS`).
pub const MAX_ROUNDS: usize = 5;
/// Header of the summary section of the system prompt.
pub const SUMMARY_HEADER: &str = "[Archived Context Summary]";
/// The archive instruction (`{n}`: how many final messages to summarise).
const ARCHIVE_TEMPLATE: &str = include_str!("../../../../templates/agent/consolidator_archive.md");

/// Why a chunk went to the raw archive instead of an LLM summary (upstream's list).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RawReason {
    /// The provider failed.
    #[error("the provider failed: {0}")]
    Provider(String),
    /// `finish_reason` was `error` or `length`.
    #[error("the summary ended with finish_reason {0}")]
    Finish(String),
    /// The model called tools although told not to.
    #[error("the model called tools")]
    ToolCalls,
    /// The summary was empty.
    #[error("the summary was empty")]
    Empty,
    /// The bot has no context budget (`contextWindowTokens` too small).
    #[error("no context budget")]
    NoBudget,
    /// The replay prefix does not contain the chunk.
    #[error("the replay prefix cannot replay the chunk")]
    NoReplay,
    /// The replay prefix plus the instruction is over the budget.
    #[error("the replay prefix is over the budget")]
    OverBudget,
}

/// Returns the index of the `user` row after `from` up to which messages are archived so
/// that at least `needed` tokens go; the last candidate when none removes enough; `None`
/// when there is no later user row. A chunk holds at least one row an archive takes (a
/// summary checkpoint or a command alone is no chunk).
pub fn pick_boundary(messages: &[Value], from: usize, needed: usize) -> Option<usize> {
    let mut removed = 0;
    let mut last = None;
    let mut takes = false;
    for (i, m) in messages.iter().enumerate().skip(from) {
        if i > from && takes && m.get("role").and_then(Value::as_str) == Some("user") {
            last = Some(i);
            if removed >= needed {
                return Some(i);
            }
        }
        takes |= history::is_archivable(m);
        removed += estimate_message(m);
    }
    last
}

/// Returns the archive instruction for the final `n` messages.
pub fn instruction(n: usize) -> String {
    ARCHIVE_TEMPLATE.trim_end().replace("{n}", &n.to_string())
}

/// Returns the messages of the archive call for the chunk `messages[from..boundary]`: the
/// system prompt, the history replayed up to the boundary, and the instruction. Fails when
/// the prefix cannot replay the chunk or does not fit `budget` tokens with `tools`.
pub fn archive_messages(
    system_prompt: &str,
    messages: &[Value],
    from: usize,
    boundary: usize,
    tools: &[Value],
    budget: u64,
) -> Result<Vec<Value>, RawReason> {
    if budget == 0 {
        return Err(RawReason::NoBudget);
    }
    let prefix = history::replay(&messages[..boundary], from, usize::MAX);
    let chunk = history::replay(&archivable(&messages[from..boundary]), 0, usize::MAX);
    if chunk.is_empty() || prefix.len() < chunk.len() {
        return Err(RawReason::NoReplay);
    }
    let mut out = vec![json!({"role": "system", "content": system_prompt})];
    out.extend(prefix);
    out.push(json!({"role": "user", "content": instruction(chunk.len())}));
    let estimate = estimate_messages(&out) + estimate_tools(tools);
    if estimate as u64 > budget {
        return Err(RawReason::OverBudget);
    }
    Ok(out)
}

/// The rows of `chunk` an archive takes: no command rows, no summary checkpoint (0.3.5
/// `archive_session`'s filter).
pub fn archivable(chunk: &[Value]) -> Vec<Value> {
    chunk
        .iter()
        .filter(|m| history::is_archivable(m))
        .cloned()
        .collect()
}

/// Returns the archive request: `messages`, the bot's tools offered with `tool_choice: none`.
pub fn archive_request(
    model: &str,
    messages: Vec<Value>,
    tools: Vec<Value>,
    max_tokens: u32,
) -> ChatRequest<'static> {
    let tool_choice = (!tools.is_empty()).then(|| "none".to_string());
    ChatRequest {
        model: model.to_string(),
        messages: messages.into(),
        tools: tools.into(),
        max_tokens,
        temperature: 0.0,
        reasoning_effort: None,
        tool_choice,
    }
}

/// Returns the summary of an archive response (capped), or why it cannot be used.
pub fn summary_of(response: &ChatResponse) -> Result<String, RawReason> {
    if matches!(response.finish_reason.as_str(), "error" | "length") {
        return Err(RawReason::Finish(response.finish_reason.clone()));
    }
    if !response.tool_calls.is_empty() || response.malformed_tool_calls > 0 {
        return Err(RawReason::ToolCalls);
    }
    let text = response.content.as_deref().unwrap_or("").trim();
    if text.is_empty() {
        return Err(RawReason::Empty);
    }
    Ok(text.chars().take(SUMMARY_CHARS).collect())
}

/// Returns the id of the chunk `rows` of session `session_key`, written with its archive row
/// (`chunk_id`, see `MemoryFiles::append_once`): the same rows of the same session give the
/// same id in every process, whatever their summary says.
pub fn chunk_id(session_key: &str, rows: &[Value]) -> String {
    let mut hash = Sha256::new();
    hash.update(session_key.as_bytes());
    for row in rows {
        hash.update(b"\n");
        hash.update(row.to_string().as_bytes());
    }
    hash.finalize()[..12]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Formats messages as upstream's raw archive: `[RAW] {n} messages` then one
/// `[YYYY-MM-DDTHH:MM] ROLE[ [tools: a, b]]: content` line each (images as `[image: path]`),
/// capped at 16 000 chars.
pub fn raw_archive(messages: &[Value]) -> String {
    let mut out = format!("[RAW] {} messages\n", messages.len());
    for m in messages {
        let ts: String = m
            .get("timestamp")
            .and_then(Value::as_str)
            .unwrap_or("?")
            .chars()
            .take(16)
            .collect();
        let role = m
            .get("role")
            .and_then(Value::as_str)
            .unwrap_or("?")
            .to_uppercase();
        let tools: Vec<&str> = m
            .get("tool_calls")
            .and_then(Value::as_array)
            .map(|calls| {
                calls
                    .iter()
                    .filter_map(|c| c.pointer("/function/name").and_then(Value::as_str))
                    .collect()
            })
            .unwrap_or_default();
        let tools = if tools.is_empty() {
            String::new()
        } else {
            format!(" [tools: {}]", tools.join(", "))
        };
        let mut content = text_of(m.get("content"));
        for path in m
            .get("media")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
        {
            content.push_str(&format!(" [image: {path}]"));
        }
        out.push_str(&format!("[{ts}] {role}{tools}: {content}\n"));
    }
    out.chars().take(RAW_ARCHIVE_CHARS).collect()
}

fn text_of(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(blocks)) => blocks
            .iter()
            .map(|b| match b.get("text").and_then(Value::as_str) {
                Some(t) => t.to_string(),
                None => match b.pointer("/_meta/path").and_then(Value::as_str) {
                    Some(p) => format!("[image: {p}]"),
                    None => "[image]".to_string(),
                },
            })
            .collect::<Vec<_>>()
            .join(" "),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    }
}

/// Records `text` as the session's last summary (injected on its next turns).
pub fn remember_summary(metadata: &mut Map<String, Value>, text: &str) {
    metadata.insert(
        meta::LAST_SUMMARY.into(),
        json!({"text": text, "last_active": crate::clock::now_iso()}),
    );
}

/// Returns the checkpoint a raw archive leaves (0.3.5 `_combine_raw_checkpoint`): the raw text
/// alone, or after the previous summary. 0.3.5 then bounds it to the bot's `maxTokens`
/// tokens; ours is bounded by the raw archive's [`RAW_ARCHIVE_CHARS`] and the summary's
/// [`SUMMARY_CHARS`].
pub fn raw_checkpoint(metadata: &Map<String, Value>, raw: &str) -> String {
    let previous = metadata
        .get(meta::LAST_SUMMARY)
        .and_then(|s| s.get("text"))
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty());
    match previous {
        None => raw.to_string(),
        Some(previous) => format!(
            "[Previous archived context]\n{previous}\n\n[Newly archived raw context]\n{raw}"
        ),
    }
}

/// Returns the `[Archived Context Summary]` section for a session's metadata, as 0.3.5 ends its
/// system prompt: `Previous conversation summary (last active <when>):` and the text as stored;
/// none without a summary or when it is `(nothing)`. A missing or unreadable `last_active` reads
/// as now (0.3.5: the session's `updated_at`).
pub fn summary_section(metadata: &Map<String, Value>) -> Option<String> {
    let summary = metadata.get(meta::LAST_SUMMARY)?;
    let text = summary
        .get("text")
        .and_then(Value::as_str)
        .or_else(|| summary.as_str())
        .filter(|t| !t.is_empty() && *t != "(nothing)")?;
    let last_active = summary
        .get("last_active")
        .and_then(Value::as_str)
        .filter(|t| is_iso_time(t))
        .map_or_else(crate::clock::now_iso, str::to_string);
    Some(format!(
        "{SUMMARY_HEADER}\n\nPrevious conversation summary (last active {last_active}):\n{text}"
    ))
}

/// Whether `text` is an ISO date-time as stored (`2026-01-01T10:00:00[.ffffff][+00:00]`).
fn is_iso_time(text: &str) -> bool {
    chrono::DateTime::parse_from_rfc3339(text).is_ok()
        || chrono::NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%S%.f").is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msgs() -> Vec<Value> {
        vec![
            json!({"role": "user", "content": "a ".repeat(200), "timestamp": "2026-01-01T10:00:00"}),
            json!({"role": "assistant", "content": null, "tool_calls": [{"id": "c", "type": "function", "function": {"name": "exec", "arguments": "{}"}}], "timestamp": "2026-01-01T10:00:05"}),
            json!({"role": "tool", "tool_call_id": "c", "content": "ok"}),
            json!({"role": "user", "content": "b", "media": ["/tmp/p.png"]}),
            json!({"role": "assistant", "content": "c"}),
            json!({"role": "user", "content": "d"}),
        ]
    }

    #[test]
    fn boundary_is_user_aligned() {
        let m = msgs();
        assert_eq!(pick_boundary(&m, 0, 50), Some(3));
        assert_eq!(pick_boundary(&m, 0, 100_000), Some(5), "last candidate");
        assert_eq!(pick_boundary(&m[..3], 0, 1), None);
        assert_eq!(pick_boundary(&m, 3, 1), Some(5));
    }

    /// After a checkpoint, archiving starts at the hidden row: it and command rows are no
    /// chunk of their own, and the archive counts and takes only the real rows (0.3.5
    /// `archive_session`'s filter).
    #[test]
    fn a_checkpoint_row_is_skipped_by_the_next_archive() {
        let mut m = msgs();
        m.insert(3, history::summary_checkpoint_row());
        m.insert(
            4,
            json!({"role": "user", "content": "/status", "_command": true}),
        );
        // [u, a(call), tool, HIDDEN, /status, u b, a c, u d]
        assert_eq!(pick_boundary(&m, 3, 1), Some(7), "not the /status row");
        assert_eq!(
            pick_boundary(&m[..6], 3, 1),
            None,
            "nothing to archive before b"
        );
        let tools = vec![];
        let out = archive_messages("SYS", &m, 3, 7, &tools, 10_000).unwrap();
        let last = out.last().unwrap()["content"].as_str().unwrap();
        assert!(
            last.starts_with("Write a memory overview of only the final 2 conversation"),
            "{last}"
        );
        let raw = raw_archive(&archivable(&m[3..7]));
        assert!(raw.starts_with("[RAW] 2 messages\n"), "{raw}");
        assert!(!raw.contains("Continue the active task"), "{raw}");
    }

    #[test]
    fn a_raw_checkpoint_keeps_the_previous_summary_before_the_raw_text_as_0_3_5() {
        let mut meta = Map::new();
        assert_eq!(
            raw_checkpoint(&meta, "[RAW] 1 messages\n…"),
            "[RAW] 1 messages\n…"
        );
        remember_summary(&mut meta, "- 用户喜欢猫 🐈");
        assert_eq!(
            raw_checkpoint(&meta, "[RAW] 1 messages\n…"),
            "[Previous archived context]\n- 用户喜欢猫 🐈\n\n[Newly archived raw context]\n[RAW] 1 messages\n…"
        );
    }

    #[test]
    fn raw_archive_matches_upstream_format() {
        let raw = raw_archive(&msgs()[..4]);
        assert!(raw.starts_with("[RAW] 4 messages\n[2026-01-01T10:00] USER: a a"));
        assert!(raw.contains("[2026-01-01T10:00] ASSISTANT [tools: exec]: \n"));
        assert!(raw.contains("] USER: b [image: /tmp/p.png]\n"), "{raw}");
        let long = vec![json!({"role": "user", "content": "x".repeat(20_000)})];
        assert_eq!(raw_archive(&long).chars().count(), RAW_ARCHIVE_CHARS);
    }

    #[test]
    fn archive_call_replays_the_prefix_and_fails_over_to_raw_as_upstream() {
        let m = msgs();
        let tools = vec![json!({"type": "function", "function": {"name": "exec"}})];
        let out = archive_messages("SYS", &m, 0, 3, &tools, 10_000).unwrap();
        assert_eq!(out[0]["content"], "SYS");
        assert_eq!(out.len(), 5, "system, 3 replayed rows, instruction");
        let last = out[4]["content"].as_str().unwrap();
        assert!(last.starts_with("Write a memory overview of only the final 3 conversation"));
        assert_eq!(
            archive_messages("SYS", &m, 0, 3, &tools, 0),
            Err(RawReason::NoBudget)
        );
        assert_eq!(
            archive_messages("SYS", &m, 0, 3, &tools, 20),
            Err(RawReason::OverBudget)
        );
        let orphans = vec![json!({"role": "tool", "content": "x"}), m[5].clone()];
        assert_eq!(
            archive_messages("SYS", &orphans, 0, 1, &[], 10_000),
            Err(RawReason::NoReplay)
        );
        let req = archive_request("m", out, tools, 500);
        assert_eq!(req.tool_choice.as_deref(), Some("none"));
        assert!(
            archive_request("m", vec![], vec![], 5)
                .tool_choice
                .is_none()
        );
    }

    #[test]
    fn summaries_are_checked_capped_and_injected() {
        let ok = ChatResponse {
            content: Some(format!("  - [durable] {}", "z".repeat(9000))),
            finish_reason: "stop".into(),
            ..Default::default()
        };
        assert_eq!(summary_of(&ok).unwrap().chars().count(), SUMMARY_CHARS);
        for (finish, content, calls, want) in [
            ("length", "x", 0, RawReason::Finish("length".into())),
            ("error", "x", 0, RawReason::Finish("error".into())),
            ("stop", " ", 0, RawReason::Empty),
            ("stop", "x", 1, RawReason::ToolCalls),
        ] {
            let r = ChatResponse {
                content: Some(content.into()),
                finish_reason: finish.into(),
                malformed_tool_calls: calls,
                ..Default::default()
            };
            assert_eq!(summary_of(&r), Err(want));
        }
        let mut meta = Map::new();
        assert_eq!(summary_section(&meta), None);
        remember_summary(&mut meta, "- [permanent] likes tea 🍵 喜欢 שלום e\u{301}");
        let when = meta[meta::LAST_SUMMARY]["last_active"].as_str().unwrap();
        assert_eq!(
            summary_section(&meta).unwrap(),
            format!(
                "[Archived Context Summary]\n\nPrevious conversation summary (last active \
                 {when}):\n- [permanent] likes tea 🍵 喜欢 שלום e\u{301}"
            )
        );
        meta.insert(
            meta::LAST_SUMMARY.into(),
            json!({"text": "- a\n", "last_active": "2026-03-02T18:30:00.654321"}),
        );
        assert_eq!(
            summary_section(&meta).unwrap(),
            "[Archived Context Summary]\n\nPrevious conversation summary (last active \
             2026-03-02T18:30:00.654321):\n- a\n"
        );
        meta.insert(meta::LAST_SUMMARY.into(), json!({"text": "(nothing)"}));
        assert_eq!(
            summary_section(&meta),
            None,
            "0.3.5 leaves out an empty summary"
        );
    }
}
