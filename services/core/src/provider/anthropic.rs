//! The native Anthropic Messages client: `POST {apiBase}/v1/messages` with `x-api-key` and
//! `anthropic-version`. The OpenAI-format message list is converted here: system messages
//! become system blocks, assistant tool calls become `tool_use` blocks, tool results become
//! `tool_result` blocks in a user message, thinking blocks are sent back verbatim, and
//! consecutive same-role messages are merged. Prompt-cache markers (`cache_control`) go on
//! the system prompt's last block, the last tool and the second-to-last message.

use std::time::Duration;

use serde_json::{Value, json};

use super::anthropic_stream::{arguments_text, finish_reason, parse_usage};
use super::{ChatRequest, ChatResponse, DeltaFn, Endpoint, LlmError, ToolCall};

/// Default `apiBase` of `providers.anthropic`.
pub const DEFAULT_API_BASE: &str = "https://api.anthropic.com";
/// The `anthropic-version` header sent.
pub const API_VERSION: &str = "2023-06-01";

/// A native Anthropic Messages client.
#[derive(Debug, Clone)]
pub struct AnthropicProvider {
    http: reqwest::Client,
    endpoint: Endpoint,
}

fn ephemeral() -> Value {
    json!({"type": "ephemeral"})
}

fn text_blocks(content: &Value) -> Vec<Value> {
    match content {
        Value::String(s) if !s.is_empty() => vec![json!({"type": "text", "text": s})],
        Value::Array(blocks) => blocks.iter().filter_map(convert_block).collect(),
        _ => Vec::new(),
    }
}

/// Converts one OpenAI content block (text or `image_url`) to Anthropic's shape.
fn convert_block(block: &Value) -> Option<Value> {
    match block.get("type").and_then(Value::as_str)? {
        "text" => {
            let text = block.get("text").and_then(Value::as_str)?;
            (!text.is_empty()).then(|| json!({"type": "text", "text": text}))
        }
        "image_url" => {
            let url = block.pointer("/image_url/url").and_then(Value::as_str)?;
            if let Some(rest) = url.strip_prefix("data:") {
                let (media_type, data) = rest.split_once(";base64,")?;
                Some(
                    json!({"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}}),
                )
            } else {
                Some(json!({"type": "image", "source": {"type": "url", "url": url}}))
            }
        }
        _ => None,
    }
}

fn assistant_blocks(m: &Value) -> Vec<Value> {
    let mut blocks: Vec<Value> = m
        .get("thinking_blocks")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    blocks.extend(text_blocks(m.get("content").unwrap_or(&Value::Null)));
    for call in m
        .get("tool_calls")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let raw = call
            .pointer("/function/arguments")
            .map(|a| a.as_str().map_or_else(|| a.to_string(), str::to_string))
            .unwrap_or_default();
        let input = crate::args::parse_object(&raw).unwrap_or_else(|| json!({}));
        blocks.push(json!({
            "type": "tool_use",
            "id": call.get("id").and_then(Value::as_str).unwrap_or(""),
            "name": call.pointer("/function/name").and_then(Value::as_str).unwrap_or(""),
            "input": input,
        }));
    }
    blocks
}

fn tool_result_block(m: &Value) -> Value {
    let content = match m.get("content") {
        Some(Value::String(s)) => json!(s),
        Some(v @ Value::Array(_)) => Value::Array(text_blocks(v)),
        _ => json!(""),
    };
    json!({
        "type": "tool_result",
        "tool_use_id": m.get("tool_call_id").and_then(Value::as_str).unwrap_or(""),
        "content": content,
    })
}

/// Converts OpenAI-format messages into Anthropic `(system, messages)`, with cache markers on
/// the last system block and the second-to-last message.
pub fn convert_messages(messages: &[Value]) -> (Vec<Value>, Vec<Value>) {
    let mut system = Vec::new();
    let mut out: Vec<Value> = Vec::new();
    for m in messages {
        let (role, blocks) = match m.get("role").and_then(Value::as_str).unwrap_or("") {
            "system" => {
                system.extend(text_blocks(m.get("content").unwrap_or(&Value::Null)));
                continue;
            }
            "assistant" => ("assistant", assistant_blocks(m)),
            "tool" => ("user", vec![tool_result_block(m)]),
            _ => (
                "user",
                text_blocks(m.get("content").unwrap_or(&Value::Null)),
            ),
        };
        if blocks.is_empty() {
            continue;
        }
        match out.last_mut() {
            Some(last) if last["role"] == role => {
                if let Some(existing) = last["content"].as_array_mut() {
                    existing.extend(blocks);
                }
            }
            _ => out.push(json!({"role": role, "content": blocks})),
        }
    }
    if let Some(last) = system.last_mut() {
        last["cache_control"] = ephemeral();
    }
    if out.len() >= 3 {
        let index = out.len() - 2;
        mark_last_cacheable(&mut out[index]);
    }
    (system, out)
}

fn mark_last_cacheable(message: &mut Value) {
    let Some(blocks) = message["content"].as_array_mut() else {
        return;
    };
    let cacheable = |b: &Value| {
        !matches!(
            b.get("type").and_then(Value::as_str),
            Some("thinking" | "redacted_thinking")
        )
    };
    if let Some(block) = blocks.iter_mut().rev().find(|b| cacheable(b)) {
        block["cache_control"] = ephemeral();
    }
}

/// Converts OpenAI function definitions into Anthropic tools, the last one cache-marked.
pub fn convert_tools(tools: &[Value]) -> Vec<Value> {
    let mut out: Vec<Value> = tools
        .iter()
        .filter_map(|t| {
            let f = t.get("function")?;
            Some(json!({
                "name": f.get("name")?,
                "description": f.get("description").cloned().unwrap_or(json!("")),
                "input_schema": f.get("parameters").cloned().unwrap_or(json!({"type": "object", "properties": {}})),
            }))
        })
        .collect();
    if let Some(last) = out.last_mut() {
        last["cache_control"] = ephemeral();
    }
    out
}

/// Thinking budget for a `reasoning_effort`.
fn thinking_budget(effort: &str) -> Option<u32> {
    match effort {
        "low" => Some(1024),
        "medium" => Some(4096),
        "high" => Some(16_384),
        _ => None,
    }
}

/// Returns the request body for `req`.
pub fn request_body(req: &ChatRequest<'_>, stream: bool) -> Value {
    let (system, messages) = convert_messages(&req.messages);
    let mut body = json!({
        "model": req.model,
        "max_tokens": req.max_tokens.max(1),
        "messages": messages,
        "temperature": req.temperature,
    });
    if !system.is_empty() {
        body["system"] = Value::Array(system);
    }
    if !req.tools.is_empty() {
        body["tools"] = Value::Array(convert_tools(&req.tools));
        let choice = req.tool_choice.as_deref().unwrap_or("auto");
        body["tool_choice"] = json!({ "type": choice });
    }
    if let Some(budget) = req.reasoning_effort.as_deref().and_then(thinking_budget) {
        body["thinking"] = json!({"type": "enabled", "budget_tokens": budget});
        body["temperature"] = json!(1.0);
        body["max_tokens"] = json!(req.max_tokens.max(budget + 1024));
    }
    if stream {
        body["stream"] = json!(true);
    }
    body
}

/// Parses a non-streamed `message` response.
pub fn parse_message(value: &Value) -> Result<ChatResponse, LlmError> {
    let blocks = value
        .get("content")
        .and_then(Value::as_array)
        .ok_or_else(|| LlmError::Malformed("no content in message".into()))?;
    let mut out = ChatResponse {
        finish_reason: finish_reason(
            value
                .get("stop_reason")
                .and_then(Value::as_str)
                .unwrap_or("end_turn"),
        ),
        ..Default::default()
    };
    let mut text = String::new();
    let mut thinking = Vec::new();
    for block in blocks {
        match block.get("type").and_then(Value::as_str).unwrap_or("") {
            "text" => text.push_str(block.get("text").and_then(Value::as_str).unwrap_or("")),
            "thinking" => {
                if let Some(t) = block.get("thinking").and_then(Value::as_str) {
                    thinking.push(t.to_string());
                }
                out.thinking_blocks.push(block.clone());
            }
            "redacted_thinking" => out.thinking_blocks.push(block.clone()),
            "tool_use" => match block.get("name").and_then(Value::as_str) {
                Some(name) if !name.is_empty() => out.tool_calls.push(ToolCall {
                    id: block.get("id").and_then(Value::as_str).unwrap_or("").into(),
                    name: name.into(),
                    arguments: arguments_text(block.get("input").unwrap_or(&Value::Null)),
                }),
                _ => out.malformed_tool_calls += 1,
            },
            _ => {}
        }
    }
    out.content = (!text.is_empty()).then_some(text);
    out.reasoning_content = (!thinking.is_empty()).then(|| thinking.join("\n"));
    parse_usage(value.get("usage").unwrap_or(&Value::Null), &mut out.usage);
    Ok(out)
}

impl AnthropicProvider {
    /// Returns a client for `endpoint` with an optional per-request `timeout`.
    pub fn new(endpoint: Endpoint, timeout: Option<Duration>) -> Self {
        Self {
            http: super::http_client(timeout),
            endpoint,
        }
    }

    fn url(&self) -> String {
        let base = self.endpoint.api_base.trim_end_matches('/');
        if base.ends_with("/v1") {
            format!("{base}/messages")
        } else {
            format!("{base}/v1/messages")
        }
    }

    /// Sends one request; with `on_delta`, streams and forwards each text delta.
    pub async fn chat(
        &self,
        req: &ChatRequest<'_>,
        on_delta: Option<&DeltaFn<'_>>,
    ) -> Result<ChatResponse, LlmError> {
        let body = request_body(req, on_delta.is_some());
        let mut request = self
            .http
            .post(self.url())
            .header("anthropic-version", API_VERSION)
            .json(&body);
        if !self.endpoint.api_key.is_empty() {
            request = request.header("x-api-key", &self.endpoint.api_key);
        }
        for (k, v) in &self.endpoint.headers {
            request = request.header(k, v);
        }
        let response = request
            .send()
            .await
            .map_err(|e| LlmError::Transport(e.without_url().to_string()))?;
        if !response.status().is_success() {
            return Err(super::status_error(response, &self.endpoint.api_key).await);
        }
        match on_delta {
            Some(f) => super::anthropic_stream::read(response, f).await,
            None => {
                let value: Value = response
                    .json()
                    .await
                    .map_err(|e| LlmError::Malformed(e.without_url().to_string()))?;
                parse_message(&value)
            }
        }
    }
}

#[cfg(test)]
mod tests;
