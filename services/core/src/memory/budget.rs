//! The context budget and token estimates: the one formula the agent (trigger, `/status`) and
//! the memory workers (how much to archive) share, and a real tokenizer (tiktoken's
//! `o200k_base`, embedded in the binary) with upstream's UTF-8 byte heuristic as the fallback.

use serde_json::Value;

use nanobot_runtime::config::AgentDefaults;

/// Tokens reserved besides the completion (upstream's safety margin).
pub const SAFETY_MARGIN_TOKENS: u64 = 1024;
/// Text appended to the probe prompt, as upstream counts it.
const PROBE: &str = "[token-probe]";
/// Tokens added per message for its framing (role, separators).
const PER_MESSAGE_TOKENS: usize = 4;

/// How many tokens the replayable context may hold, and what consolidation aims for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// `contextWindowTokens − maxTokens − 1024`: consolidation starts at or above it.
    pub budget: u64,
    /// `budget × consolidationRatio`: consolidation archives until the estimate is below it.
    pub target: u64,
}

impl Budget {
    /// Returns the budget of a window, a completion cap and a ratio.
    pub fn new(context_window: u64, max_tokens: u64, ratio: f64) -> Self {
        let budget = context_window.saturating_sub(max_tokens + SAFETY_MARGIN_TOKENS);
        let target = (budget as f64 * ratio.clamp(0.0, 1.0)) as u64;
        Self { budget, target }
    }

    /// Returns the budget of a bot's agent settings.
    pub fn of(d: &AgentDefaults) -> Self {
        Self::new(
            u64::from(d.context_window_tokens),
            u64::from(d.max_tokens),
            d.consolidation_ratio,
        )
    }

    /// Returns the tokens the replayed history of a turn may take (upstream's replay budget:
    /// the [`budget`](Self::budget) with a completion cap of at least 1, or `max(128, window /
    /// 2)` when that leaves nothing).
    pub fn replay_tokens(context_window_tokens: u32, max_tokens: u32) -> usize {
        let window = u64::from(context_window_tokens);
        let budget = Self::new(window, u64::from(max_tokens.max(1)), 1.0).budget;
        let tokens = if budget > 0 {
            budget
        } else {
            (window / 2).max(128)
        };
        usize::try_from(tokens).unwrap_or(usize::MAX)
    }

    /// Returns whether a context of `estimate` tokens must be consolidated.
    pub fn exceeded_by(&self, estimate: u64) -> bool {
        self.budget > 0 && estimate >= self.budget
    }
}

/// Texts longer than this are estimated by bytes: BPE merging is superlinear on long runs
/// without whitespace (a pasted blob, base64), and an estimate needs no precision there.
pub const TOKENIZER_MAX_BYTES: usize = 256 * 1024;

/// Returns the tokens of `text` under `o200k_base`; the byte heuristic for empty or very long
/// texts.
pub fn count_text(text: &str) -> usize {
    if text.is_empty() || text.len() > TOKENIZER_MAX_BYTES {
        return count_bytes_heuristic(text);
    }
    let bpe = tiktoken_rs::o200k_base_singleton();
    bpe.encode_ordinary(text).len()
}

/// Upstream's fallback estimate: UTF-8 bytes / 4, at least 1 for non-empty text.
pub fn count_bytes_heuristic(text: &str) -> usize {
    if text.is_empty() {
        0
    } else {
        text.len().div_ceil(4)
    }
}

fn content_text(content: Option<&Value>, out: &mut String) {
    match content {
        Some(Value::String(s)) => out.push_str(s),
        Some(Value::Array(blocks)) => {
            for b in blocks {
                if let Some(t) = b.get("text").and_then(Value::as_str) {
                    out.push_str(t);
                    out.push('\n');
                }
            }
        }
        Some(Value::Null) | None => {}
        Some(other) => out.push_str(&other.to_string()),
    }
}

/// Returns an upper bound of [`count_text`] without tokenizing: a token is at least one byte,
/// and the heuristic counts a quarter token per byte. Used to skip the tokenizer when even the
/// bound fits a budget (most turns), so its tables are only built once a session grows.
pub fn count_text_bound(text: &str) -> usize {
    text.len()
}

/// Returns the tokens of one message under `count`: its text, tool calls, tool name and
/// reasoning, plus framing.
fn message_tokens(m: &Value, count: fn(&str) -> usize) -> usize {
    let mut text = String::new();
    content_text(m.get("content"), &mut text);
    for key in ["name", "tool_call_id", "reasoning_content"] {
        if let Some(s) = m.get(key).and_then(Value::as_str) {
            text.push('\n');
            text.push_str(s);
        }
    }
    if let Some(calls) = m.get("tool_calls").filter(|v| !v.is_null()) {
        text.push('\n');
        text.push_str(&calls.to_string());
    }
    count(&text) + PER_MESSAGE_TOKENS
}

/// Returns the estimated tokens of one message: its text, tool calls, tool name and
/// reasoning, plus framing.
pub fn estimate_message(m: &Value) -> usize {
    message_tokens(m, count_text)
}

/// Returns an upper bound of [`estimate_message`] (see [`count_text_bound`]).
pub fn estimate_message_bound(m: &Value) -> usize {
    message_tokens(m, count_text_bound)
}

/// Returns the estimated tokens of `messages`.
pub fn estimate_messages(messages: &[Value]) -> usize {
    messages.iter().map(estimate_message).sum()
}

/// Returns the byte-heuristic estimate of `messages` (serialised bytes / 4, plus framing):
/// for usage figures a provider did not report, where a tokenizer pass is not worth its cost.
pub fn estimate_messages_by_bytes(messages: &[Value]) -> usize {
    messages
        .iter()
        .map(|m| count_bytes_heuristic(&m.to_string()) + PER_MESSAGE_TOKENS)
        .sum()
}

/// Returns the estimated tokens of the tool definitions offered to the model.
pub fn estimate_tools(tools: &[Value]) -> usize {
    if tools.is_empty() {
        return 0;
    }
    count_text(&serde_json::to_string(tools).unwrap_or_default())
}

/// Returns upstream's probe estimate: the system prompt, the replayable history, the probe
/// text and the tool definitions.
pub fn estimate_prompt(system_prompt: &str, history: &[Value], tools: &[Value]) -> usize {
    count_text(system_prompt)
        + PER_MESSAGE_TOKENS
        + estimate_messages(history)
        + count_text(PROBE)
        + estimate_tools(tools)
}

/// Returns an upper bound of [`estimate_prompt`] (see [`count_text_bound`]), given the
/// length of the tool definitions serialised as a JSON array.
pub fn estimate_prompt_bound(system_prompt: &str, history: &[Value], tools_bytes: usize) -> usize {
    count_text_bound(system_prompt)
        + PER_MESSAGE_TOKENS
        + history.iter().map(estimate_message_bound).sum::<usize>()
        + count_text_bound(PROBE)
        + tools_bytes
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn budget_is_window_minus_completion_minus_margin_and_target_its_ratio() {
        let b = Budget::new(200_000, 8192, 0.5);
        assert_eq!(b.budget, 200_000 - 8192 - 1024);
        assert_eq!(b.target, (200_000 - 8192 - 1024) / 2);
        assert!(b.exceeded_by(b.budget) && !b.exceeded_by(b.budget - 1));
        let none = Budget::new(1000, 8192, 0.5);
        assert_eq!(none.budget, 0);
        assert!(!none.exceeded_by(10_000), "no budget never triggers");
        let d = AgentDefaults {
            context_window_tokens: 4096,
            max_tokens: 1024,
            consolidation_ratio: 0.25,
            ..Default::default()
        };
        assert_eq!(Budget::of(&d), Budget::new(4096, 1024, 0.25));
        assert_eq!(Budget::replay_tokens(4096, 1024), 4096 - 1024 - 1024);
        assert_eq!(
            Budget::replay_tokens(1000, 1024),
            500,
            "max(128, window / 2)"
        );
    }

    #[test]
    fn tokens_come_from_a_real_tokenizer_not_bytes() {
        // "hello world" is 2 tokens under o200k_base; the byte heuristic says 3.
        assert_eq!(count_text("hello world"), 2);
        assert_eq!(count_bytes_heuristic("hello world"), 3);
        assert_eq!(count_text(""), 0);
        let blob = "x".repeat(TOKENIZER_MAX_BYTES + 4);
        assert_eq!(count_text(&blob), count_bytes_heuristic(&blob));
        let user = json!({"role": "user", "content": "hello world"});
        assert_eq!(estimate_message(&user), 2 + PER_MESSAGE_TOKENS);
        let call = json!({"role": "assistant", "content": null,
            "tool_calls": [{"id": "c1", "function": {"name": "read_file", "arguments": "{}"}}]});
        assert!(estimate_message(&call) > PER_MESSAGE_TOKENS + 5);
        let tools = vec![json!({"type": "function", "function": {"name": "exec"}})];
        assert!(
            estimate_prompt("sys", std::slice::from_ref(&user), &tools)
                > estimate_prompt("sys", &[user], &[])
        );
    }

    #[test]
    fn the_byte_bound_is_never_below_the_tokenizer_estimate() {
        let texts = [
            String::new(),
            "hello world".into(),
            "日本語のテキストと絵文字 🐈🐈🐈 mixed with ascii".into(),
            "a".repeat(5000),
            "x".repeat(TOKENIZER_MAX_BYTES + 4),
            (0..2000)
                .map(|i| char::from(b'!' + (i % 90) as u8))
                .collect(),
        ];
        let rows: Vec<Value> = texts
            .iter()
            .map(|t| json!({"role": "user", "content": t}))
            .chain([json!({"role": "assistant", "content": [{"type": "text", "text": "🐈 ok"}],
                "tool_calls": [{"id": "c1", "function": {"name": "exec", "arguments": "{\"cmd\":\"ls\"}"}}]})])
            .collect();
        for (t, m) in texts.iter().zip(&rows) {
            assert!(count_text_bound(t) >= count_text(t), "{t:.40}");
            assert!(estimate_message_bound(m) >= estimate_message(m));
        }
        let tools =
            vec![json!({"type": "function", "function": {"name": "exec", "description": "運行"}})];
        let tools_bytes = serde_json::to_string(&tools).unwrap().len();
        assert!(
            estimate_prompt_bound("système 🐈", &rows, tools_bytes)
                >= estimate_prompt("système 🐈", &rows, &tools)
        );
    }
}
