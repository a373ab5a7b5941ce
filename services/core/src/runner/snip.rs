//! Snip (upstream `ContextGovernor.snip_history`, reference §6.5 and §7): when a request is
//! still over the input budget after in-flight compaction, the model's copy keeps the system
//! messages plus the newest messages that fit the rest of the budget (at least one), starting
//! at the first user message among them (else at the conversation's last user message, even
//! over budget) at a legal tool-call boundary; then tool rows are made legal again (orphan
//! results dropped, missing ones backfilled, as on replay). The session keeps every message.

use std::borrow::Cow;

use serde_json::Value;

use super::compact::estimate;
use crate::history::{find_legal_message_start, legal_tool_rows};
use crate::memory::estimate_messages;

fn is_user(m: &Value) -> bool {
    m["role"] == "user"
}

/// Returns the messages to send: `messages` itself when the request fits `budget` (or there
/// is no budget), else the snipped copy.
pub fn for_model<'a>(
    messages: Cow<'a, [Value]>,
    budget: u64,
    tool_tokens: u64,
) -> Cow<'a, [Value]> {
    if budget == 0 || estimate(&messages, tool_tokens) <= budget {
        return messages;
    }
    let (system, rest): (Vec<&Value>, Vec<&Value>) =
        messages.iter().partition(|m| m["role"] == "system");
    if rest.is_empty() {
        return messages;
    }
    let system: Vec<Value> = system.into_iter().cloned().collect();
    let remaining = budget.saturating_sub(estimate(&system, tool_tokens));
    let mut from = rest.len();
    let mut used = 0;
    for (i, m) in rest.iter().enumerate().rev() {
        let tokens = estimate(std::slice::from_ref(*m), 0);
        if from < rest.len() && used + tokens > remaining {
            break;
        }
        used += tokens;
        from = i;
    }
    let start = rest[from..]
        .iter()
        .position(|m| is_user(m))
        .map(|i| from + i)
        .or_else(|| rest.iter().rposition(|m| is_user(m)))
        .unwrap_or(from);
    let tail: Vec<Value> = rest[start..].iter().map(|m| (*m).clone()).collect();
    let legal = find_legal_message_start(&tail);
    tracing::debug!(
        kept = tail.len() - legal,
        dropped = start + legal,
        budget,
        "history snipped to fit context"
    );
    let mut out = system;
    out.extend(tail.into_iter().skip(legal));
    Cow::Owned(legal_tool_rows(out))
}

/// Returns 0.3.5's `ContextWindowExceededError` text when the request to send (already
/// snipped) is still over `budget` (0.3.5 `ensure_request_fits`); `None` when it fits or
/// there is no budget. Refused only when both our byte estimate and the tokenizer's count
/// are over: 0.3.5 counts tokens, and bytes overcount English text by about a quarter, so a
/// request 0.3.5 sends is never refused for our coarser estimate.
pub fn still_over(messages: &[Value], budget: u64, tool_tokens: u64) -> Option<String> {
    if budget == 0 || estimate(messages, tool_tokens) <= budget {
        return None;
    }
    let tokens = estimate_messages(messages) as u64 + tool_tokens;
    (tokens > budget).then(|| {
        format!(
            "Model input still exceeds the local context budget after request fitting: \
             {tokens}/{budget} via tokenizer"
        )
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_snipped_request_starts_after_a_result_whose_call_was_cut_off() {
        let messages = vec![
            json!({"role": "system", "content": "sys"}),
            json!({"role": "user", "content": "y".repeat(4000)}),
            json!({"role": "assistant", "content": "", "tool_calls": [
                {"id": "x", "type": "function", "function": {"name": "exec", "arguments": "{}"}}
            ]}),
            json!({"role": "user", "content": "interjected"}),
            json!({"role": "tool", "tool_call_id": "x", "name": "exec", "content": "done"}),
            json!({"role": "assistant", "content": "ok"}),
            json!({"role": "user", "content": "now"}),
        ];
        let sent = for_model(Cow::Borrowed(&messages), 200, 0);
        // The first user message that fits is followed by a result whose call came before it:
        // the request restarts after that result (upstream `find_legal_message_start`).
        assert_eq!(
            sent.as_ref(),
            [
                json!({"role": "system", "content": "sys"}),
                json!({"role": "assistant", "content": "ok"}),
                json!({"role": "user", "content": "now"}),
            ]
        );
        assert!(matches!(
            for_model(Cow::Borrowed(&messages), 2000, 0),
            Cow::Borrowed(_)
        ));
    }
}
