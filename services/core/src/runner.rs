//! The agent runner loop: call the model, run its tool calls through the executors, append
//! results, repeat until a final answer or the iteration cap.

use std::sync::Arc;

use futures::future::join_all;
use serde_json::{Value, json};

use nanobot_proto::ToolSpec;

use crate::provider::{ChatRequest, ChatResponse, LlmError, OpenAiProvider, ToolCall, Usage};
use crate::tools::ToolClient;

/// Upstream's error reply when the model cannot be called.
pub const LLM_ERROR_MESSAGE: &str = "Sorry, I encountered an error calling the AI model.";
/// Upstream's reply when a turn ends without text.
pub const EMPTY_FINAL_RESPONSE_MESSAGE: &str = "I completed the tool steps but couldn't produce a final answer. Please try again or narrow the task.";

/// Returns upstream's max-iterations message.
pub fn max_iterations_message(max: u32) -> String {
    format!(
        "I reached the maximum number of tool call iterations ({max}) without completing the task. You can try breaking the task into smaller steps."
    )
}

/// Receives streamed text deltas.
pub type DeltaSink = Arc<dyn Fn(&str) + Send + Sync>;
/// Receives each tool call before it runs.
pub type ToolHintSink = Arc<dyn Fn(&ToolCall) + Send + Sync>;

/// What a run needs.
pub struct RunSpec<'a> {
    /// Messages so far (system, history, current user).
    pub messages: Vec<Value>,
    /// Model name.
    pub model: String,
    /// Completion cap.
    pub max_tokens: u32,
    /// Temperature.
    pub temperature: f64,
    /// Iteration cap.
    pub max_iterations: u32,
    /// Session key, channel and chat id (passed to tools).
    pub session_key: &'a str,
    /// Channel of the turn.
    pub channel: &'a str,
    /// Chat id of the turn.
    pub chat_id: &'a str,
    /// Forwards streamed text deltas when set.
    pub on_delta: Option<DeltaSink>,
    /// Called with each tool call before it runs (progress hints).
    pub on_tool_hint: Option<ToolHintSink>,
}

/// What a run produced.
#[derive(Debug, Clone, Default)]
pub struct RunResult {
    /// The final text for the user.
    pub content: String,
    /// Messages appended during the run (assistant and tool rows).
    pub new_messages: Vec<Value>,
    /// `completed`, `max_iterations` or `error`.
    pub stop_reason: &'static str,
    /// Accumulated usage.
    pub usage: Usage,
    /// LLM calls made.
    pub llm_calls: u32,
}

/// Runs the LLM/tool loop.
pub async fn run(
    provider: &OpenAiProvider,
    tools: &ToolClient,
    specs: &[ToolSpec],
    mut spec: RunSpec<'_>,
) -> RunResult {
    let definitions = ToolClient::definitions(specs);
    let read_only: std::collections::HashSet<&str> = specs
        .iter()
        .filter(|s| s.read_only)
        .map(|s| s.name.as_str())
        .collect();
    let mut messages = std::mem::take(&mut spec.messages);
    let mut result = RunResult::default();
    for _ in 0..spec.max_iterations {
        let request = ChatRequest {
            model: spec.model.clone(),
            messages: messages.clone(),
            tools: definitions.clone(),
            max_tokens: spec.max_tokens,
            temperature: spec.temperature,
            reasoning_effort: None,
        };
        let response = match call_model(provider, &request, spec.on_delta.as_deref()).await {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %e, "llm call failed");
                result.content = LLM_ERROR_MESSAGE.into();
                result.stop_reason = "error";
                return result;
            }
        };
        result.llm_calls += 1;
        result.usage.prompt_tokens += response.usage.prompt_tokens;
        result.usage.completion_tokens += response.usage.completion_tokens;
        if response.tool_calls.is_empty() {
            let text = response.content.clone().unwrap_or_default();
            let mut row = json!({"role": "assistant", "content": text});
            if let Some(r) = &response.reasoning_content {
                row["reasoning_content"] = json!(r);
            }
            result.new_messages.push(row);
            result.content = if text.trim().is_empty() {
                EMPTY_FINAL_RESPONSE_MESSAGE.into()
            } else {
                text
            };
            result.stop_reason = "completed";
            return result;
        }
        let assistant = assistant_with_calls(&response);
        messages.push(assistant.clone());
        result.new_messages.push(assistant);
        let outcomes = execute(tools, &response.tool_calls, &read_only, &spec).await;
        for (call, content) in response.tool_calls.iter().zip(outcomes) {
            let row = json!({"role": "tool", "tool_call_id": call.id, "name": call.name, "content": content});
            messages.push(row.clone());
            result.new_messages.push(row);
        }
    }
    result.content = max_iterations_message(spec.max_iterations);
    result.stop_reason = "max_iterations";
    result
}

async fn call_model(
    provider: &OpenAiProvider,
    request: &ChatRequest,
    on_delta: Option<&(dyn Fn(&str) + Send + Sync)>,
) -> Result<ChatResponse, LlmError> {
    provider.chat_with_retry(request, on_delta).await
}

fn assistant_with_calls(response: &ChatResponse) -> Value {
    let calls: Vec<Value> = response
        .tool_calls
        .iter()
        .map(|c| json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}))
        .collect();
    let mut row = json!({"role": "assistant", "content": response.content.clone().filter(|c| !c.is_empty()), "tool_calls": calls});
    if let Some(r) = &response.reasoning_content {
        row["reasoning_content"] = json!(r);
    }
    row
}

/// Runs calls in order; consecutive read-only calls run in parallel, anything else alone.
async fn execute(
    tools: &ToolClient,
    calls: &[ToolCall],
    read_only: &std::collections::HashSet<&str>,
    spec: &RunSpec<'_>,
) -> Vec<Value> {
    let mut out = Vec::with_capacity(calls.len());
    let mut i = 0;
    while i < calls.len() {
        let mut end = i + 1;
        if read_only.contains(calls[i].name.as_str()) {
            while end < calls.len() && read_only.contains(calls[end].name.as_str()) {
                end += 1;
            }
        }
        let batch = &calls[i..end];
        if let Some(hint) = &spec.on_tool_hint {
            batch.iter().for_each(|c| hint(c));
        }
        let results = join_all(batch.iter().map(|c| {
            tools.call(
                spec.session_key,
                &c.id,
                &c.name,
                &c.arguments,
                spec.channel,
                spec.chat_id,
            )
        }))
        .await;
        out.extend(results.into_iter().map(|r| r.content));
        i = end;
    }
    out
}
