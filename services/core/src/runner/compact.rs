//! In-flight compaction (upstream HEAD `compact_inflight_overflow`, reference §6.5): when the
//! request would overflow the input budget (`contextWindowTokens − maxTokens − 1024`, the
//! [`Budget`] every role shares), large results of this turn's read-type tools are replaced in
//! the model's copy, oldest first, by upstream's "compacted to fit context" error until the
//! estimate is at most 85% of the budget. A result compacted once stays compacted for the rest
//! of the run; the session keeps every result as it was.

use std::borrow::Cow;
use std::collections::HashSet;

use serde_json::Value;

use crate::memory::budget::{Budget, estimate_messages_by_bytes};

/// Tools whose results may be compacted (upstream `COMPACTABLE_TOOLS`).
pub const COMPACTABLE_TOOLS: &[&str] = &[
    "read_file",
    "exec",
    "grep",
    "find_files",
    "web_search",
    "web_fetch",
    "list_dir",
    "list_exec_sessions",
];
/// Results shorter than this are never compacted (upstream `MICROCOMPACT_MIN_CHARS`).
pub const MIN_CHARS: usize = 500;
/// Compaction stops once the estimate is at most this share of the budget, in percent
/// (upstream `INFLIGHT_COMPACT_TARGET_RATIO`).
const TARGET_PERCENT: u64 = 85;

/// Returns upstream's text replacing a compacted `name` result.
pub fn compacted_text(name: &str) -> String {
    format!(
        "Error: The previous {name} result was compacted to fit context because it was too \
         large. Do not repeat the same call unchanged. Retry with a narrower path, query, \
         range, or result limit, use another tool, or tell the user the task cannot fit in \
         the available context."
    )
}

/// The input budget of a run: `contextBlockLimit` when set, else `context_window −
/// max_tokens − 1024` (0: no compaction).
pub fn input_budget(context_window: u32, max_tokens: u32, block_limit: Option<u32>) -> u64 {
    match block_limit {
        Some(limit) if limit > 0 => u64::from(limit),
        _ => Budget::new(u64::from(context_window), u64::from(max_tokens), 1.0).budget,
    }
}

/// Returns the byte-heuristic estimate of a request: `messages` plus the tool definitions.
pub(super) fn estimate(messages: &[Value], tool_tokens: u64) -> u64 {
    estimate_messages_by_bytes(messages) as u64 + tool_tokens
}

/// Returns the messages to send: `messages` itself, or a copy with results compacted.
/// `turn_start` is the first message of this run; `compacted` the call ids compacted so far.
pub fn for_model<'a>(
    messages: &'a [Value],
    turn_start: usize,
    budget: u64,
    tool_tokens: u64,
    compacted: &mut HashSet<String>,
) -> Cow<'a, [Value]> {
    if budget == 0 {
        return Cow::Borrowed(messages);
    }
    let mut out = Cow::Borrowed(messages);
    let call_id = |m: &Value| {
        m.get("tool_call_id")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    for (i, m) in messages.iter().enumerate() {
        if m["role"] == "tool" && compacted.contains(&call_id(m)) {
            compact_at(out.to_mut(), i);
        }
    }
    let mut estimate_now = estimate(&out, tool_tokens);
    if estimate_now <= budget {
        return out;
    }
    let target = budget * TARGET_PERCENT / 100;
    let candidates: Vec<usize> = (turn_start..messages.len())
        .filter(|&i| {
            let m = &messages[i];
            m["role"] == "tool"
                && COMPACTABLE_TOOLS.contains(&m["name"].as_str().unwrap_or(""))
                && !compacted.contains(&call_id(m))
                && !call_id(m).is_empty()
                && m["content"]
                    .as_str()
                    .is_some_and(|c| c.chars().count() >= MIN_CHARS)
        })
        .collect();
    for (k, &i) in candidates.iter().enumerate() {
        if k + 1 == candidates.len() && estimate_now <= budget {
            break;
        }
        compacted.insert(call_id(&messages[i]));
        compact_at(out.to_mut(), i);
        estimate_now = estimate(&out, tool_tokens);
        if estimate_now <= target {
            break;
        }
    }
    tracing::debug!(
        estimate = estimate_now,
        budget,
        compacted = compacted.len(),
        "in-flight context compaction"
    );
    out
}

fn compact_at(messages: &mut [Value], i: usize) {
    let name = messages[i]["name"].as_str().unwrap_or("tool").to_string();
    messages[i]["content"] = Value::String(compacted_text(&name));
}
