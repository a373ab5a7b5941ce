//! Upstream's fixed texts of the runner (`utils/runtime.py`, `agent/runner.py`,
//! `templates/agent/max_iterations_message.md`) and the request messages built from them.

use serde_json::{Value, json};

/// Error reply when the model cannot be called.
pub const LLM_ERROR_MESSAGE: &str = "Sorry, I encountered an error calling the AI model.";
/// Reply when a turn fails (0.3.5 `TurnDelivery.fail`): what a user is sent when a request
/// still does not fit the context window after snipping (0.3.5's `ContextWindowExceededError`
/// escapes the runner), and after a message's last failed attempt.
pub const TURN_ERROR_MESSAGE: &str = "Sorry, I encountered an error.";
/// Reply when a turn ends without text.
pub const EMPTY_FINAL_RESPONSE_MESSAGE: &str = "I completed the tool steps but couldn't produce a final answer. Please try again or narrow the task.";
/// Reply when the provider rejects the key for quota or billing (upstream arrearage text).
pub const ARREARAGE_ERROR_MESSAGE: &str = "The AI provider rejected the request because the API key is out of quota or the account is in arrears. Please top up / check the billing status of your API key and try again.";
/// Transcript placeholder for a reply lost to a model error.
pub const MODEL_ERROR_PLACEHOLDER: &str = "[Assistant reply unavailable due to model error.]";
/// The no-tools prompt after blank replies.
pub const FINALIZATION_RETRY_PROMPT: &str =
    "Please provide your response to the user based on the conversation above.";
/// The no-tools prompt after the iteration budget ran out.
pub const BUDGET_EXHAUSTED_FINALIZATION_PROMPT: &str = "The tool-call budget for this turn is exhausted. Based only on the conversation and tool results above, provide a concise final response to the user. Do not call or request tools. Do not claim the task is complete unless the evidence above clearly shows it is complete. State what was done, what remains, and the best next step if anything is incomplete.";
/// The prompt after a reply was cut at the token limit.
pub const LENGTH_RECOVERY_PROMPT: &str = "Output limit reached. Continue exactly where you left off — no recap, no apology. Break remaining work into smaller steps if needed.";
/// Characters of delivered text quoted back after a cut.
pub const LENGTH_RECOVERY_TAIL_CHARS: usize = 64;
/// The corrective note after every tool call of a response was malformed.
pub const MALFORMED_TOOL_CALLS_NOTE: &str = "The previous model response attempted to call tools, but every tool call was malformed: the tool_use blocks had missing or non-string tool names. Do not answer with a promise to use tools. Either call the required tools again using valid tool names from the provided tool list and JSON object inputs, or give a final answer only if no tool is required.";

/// Returns upstream's max-iterations message.
pub fn max_iterations_message(max: u32) -> String {
    format!(
        "I reached the maximum number of tool call iterations ({max}) without completing the task. You can try breaking the task into smaller steps."
    )
}

/// Returns `Error calling LLM: timed out after {t}s`.
pub fn timeout_message(secs: u64) -> String {
    format!("Error calling LLM: timed out after {secs}s")
}

/// Returns a user message.
pub fn user(content: impl Into<String>) -> Value {
    json!({"role": "user", "content": content.into()})
}

/// Returns the length-recovery message quoting the last delivered characters.
pub fn length_recovery_message(delivered: &str) -> Value {
    let tail: String = {
        let chars: Vec<char> = delivered.chars().collect();
        chars[chars.len().saturating_sub(LENGTH_RECOVERY_TAIL_CHARS)..]
            .iter()
            .collect()
    };
    if tail.trim().is_empty() {
        return user(LENGTH_RECOVERY_PROMPT);
    }
    user(format!(
        "{LENGTH_RECOVERY_PROMPT}\n\nThe following tail was already delivered to the user. Treat it as immutable context and do not output it again:\n<already_delivered_tail>\n{tail}\n</already_delivered_tail>\nBegin with the text that belongs immediately after this tail."
    ))
}

/// Returns the corrective note after malformed tool calls, quoting any text that came with them.
pub fn malformed_note(assistant_text: Option<&str>) -> Value {
    match assistant_text.filter(|t| !t.is_empty()) {
        Some(text) => user(format!(
            "{MALFORMED_TOOL_CALLS_NOTE}\n\nPrevious assistant text before the malformed calls:\n{text}"
        )),
        None => user(MALFORMED_TOOL_CALLS_NOTE),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn length_recovery_quotes_at_most_64_chars() {
        let text = "x".repeat(100) + "END";
        let m = length_recovery_message(&text);
        let content = m["content"].as_str().unwrap();
        assert!(content.starts_with(LENGTH_RECOVERY_PROMPT));
        let tail = content
            .split("<already_delivered_tail>\n")
            .nth(1)
            .unwrap()
            .split("\n</already_delivered_tail>")
            .next()
            .unwrap();
        assert_eq!(tail.chars().count(), 64);
        assert!(tail.ends_with("END"));
        assert_eq!(
            length_recovery_message("")["content"],
            LENGTH_RECOVERY_PROMPT
        );
    }
}
