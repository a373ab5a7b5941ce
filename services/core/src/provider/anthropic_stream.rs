//! Anthropic Messages SSE: `message_start`, `content_block_start/delta/stop`,
//! `message_delta`, `message_stop`, `error`. Text deltas are forwarded as they arrive;
//! thinking blocks are rebuilt with their signatures; tool inputs are joined from
//! `input_json_delta` pieces.

use std::collections::BTreeMap;

use futures::StreamExt as _;
use serde_json::{Value, json};

use super::{ChatResponse, DeltaFn, LlmError, ToolCall, Usage};

/// A content block being assembled.
#[derive(Debug, Default)]
struct Block {
    kind: String,
    text: String,
    signature: String,
    id: String,
    name: Option<String>,
    json: String,
    start: Value,
}

/// Assembles one streamed message from its events.
#[derive(Debug, Default)]
pub(crate) struct StreamState {
    blocks: BTreeMap<u64, Block>,
    out: ChatResponse,
}

impl StreamState {
    /// Applies one event; forwards text deltas to `on_delta`.
    pub(crate) fn apply(&mut self, event: &Value, on_delta: &DeltaFn<'_>) -> Result<(), LlmError> {
        let index = event.get("index").and_then(Value::as_u64).unwrap_or(0);
        match event.get("type").and_then(Value::as_str).unwrap_or("") {
            "message_start" => {
                if let Some(usage) = event.pointer("/message/usage") {
                    parse_usage(usage, &mut self.out.usage);
                }
            }
            "content_block_start" => {
                let start = event.get("content_block").cloned().unwrap_or(Value::Null);
                let block = Block {
                    kind: start
                        .get("type")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .into(),
                    id: start.get("id").and_then(Value::as_str).unwrap_or("").into(),
                    name: start
                        .get("name")
                        .and_then(Value::as_str)
                        .map(str::to_string),
                    text: start
                        .get("text")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .into(),
                    start,
                    ..Default::default()
                };
                self.blocks.insert(index, block);
            }
            "content_block_delta" => {
                let delta = event.get("delta").cloned().unwrap_or(Value::Null);
                let block = self.blocks.entry(index).or_default();
                let s = |k: &str| delta.get(k).and_then(Value::as_str).unwrap_or("");
                match s("type") {
                    "text_delta" => {
                        block.text.push_str(s("text"));
                        if !s("text").is_empty() {
                            on_delta(s("text"));
                        }
                    }
                    "thinking_delta" => block.text.push_str(s("thinking")),
                    "signature_delta" => block.signature.push_str(s("signature")),
                    "input_json_delta" => block.json.push_str(s("partial_json")),
                    _ => {}
                }
            }
            "message_delta" => {
                if let Some(reason) = event.pointer("/delta/stop_reason").and_then(Value::as_str) {
                    self.out.finish_reason = finish_reason(reason);
                }
                if let Some(usage) = event.get("usage") {
                    parse_usage(usage, &mut self.out.usage);
                }
            }
            "error" => {
                let kind = event
                    .pointer("/error/type")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                let status = match kind {
                    "overloaded_error" => 529,
                    "rate_limit_error" => 429,
                    "invalid_request_error" => 400,
                    _ => 500,
                };
                return Err(LlmError::Status {
                    status,
                    body: event.to_string().chars().take(500).collect(),
                    retry_after: None,
                });
            }
            _ => {}
        }
        Ok(())
    }

    /// Returns the assembled response.
    pub(crate) fn finish(mut self) -> ChatResponse {
        let mut text = String::new();
        let mut thinking = Vec::new();
        for block in std::mem::take(&mut self.blocks).into_values() {
            match block.kind.as_str() {
                "text" => text.push_str(&block.text),
                "thinking" => {
                    self.out.thinking_blocks.push(json!({"type": "thinking", "thinking": block.text, "signature": block.signature}));
                    thinking.push(block.text);
                }
                "redacted_thinking" => self.out.thinking_blocks.push(block.start),
                "tool_use" => match block.name.filter(|n| !n.is_empty()) {
                    Some(name) => {
                        let arguments = if block.json.trim().is_empty() {
                            arguments_text(block.start.get("input").unwrap_or(&Value::Null))
                        } else {
                            block.json
                        };
                        self.out.tool_calls.push(ToolCall {
                            id: block.id,
                            name,
                            arguments,
                        });
                    }
                    None => self.out.malformed_tool_calls += 1,
                },
                _ => {}
            }
        }
        if self.out.finish_reason.is_empty() {
            self.out.finish_reason = "stop".into();
        }
        self.out.content = (!text.is_empty()).then_some(text);
        self.out.reasoning_content = (!thinking.is_empty()).then(|| thinking.join("\n"));
        self.out
    }
}

/// Reads a streamed response to the end.
pub(crate) async fn read(
    response: reqwest::Response,
    on_delta: &DeltaFn<'_>,
) -> Result<ChatResponse, LlmError> {
    let mut state = StreamState::default();
    let mut events = std::pin::pin!(super::sse_events(response));
    while let Some(sse) = events.next().await {
        if let Ok(event) = serde_json::from_str::<Value>(&sse?.data) {
            state.apply(&event, on_delta)?;
        }
    }
    Ok(state.finish())
}

// What a streamed and a non-streamed reply read alike (the client, `anthropic.rs`, uses these too).

/// Maps Anthropic `stop_reason` to the OpenAI `finish_reason` the runner reads.
pub fn finish_reason(stop_reason: &str) -> String {
    match stop_reason {
        "end_turn" | "stop_sequence" | "pause_turn" => "stop",
        "tool_use" => "tool_calls",
        "max_tokens" => "length",
        "refusal" => "refusal",
        other => other,
    }
    .to_string()
}

/// Reads Anthropic usage (cache reads and writes count as prompt tokens).
pub fn parse_usage(usage: &Value, into: &mut Usage) {
    let get = |k: &str| usage.get(k).and_then(Value::as_u64);
    if let Some(input) = get("input_tokens") {
        let read = get("cache_read_input_tokens").unwrap_or(0);
        let write = get("cache_creation_input_tokens").unwrap_or(0);
        into.prompt_tokens = input + read + write;
        into.cached_tokens = read;
    }
    if let Some(output) = get("output_tokens") {
        into.completion_tokens = output;
    }
}

/// Turns a tool_use `input` into argument text (a string input is kept raw: it is what a
/// model sends when its JSON did not parse).
pub fn arguments_text(input: &Value) -> String {
    match input {
        Value::String(s) => s.clone(),
        Value::Null => "{}".into(),
        other => other.to_string(),
    }
}
