//! The OpenAI-compatible chat provider: one request shape for every vendor, streaming over
//! SSE with deltas forwarded, retries with backoff 1/2/4 s on 429, 5xx and timeouts
//! (honouring `Retry-After`), `<think>` stripping and `reasoning_content` kept.

use std::time::Duration;

use futures::StreamExt as _;
use serde_json::{Map, Value, json};

/// Backoff before each retry (upstream `providers/base.py`).
pub const RETRY_DELAYS: [Duration; 3] = [
    Duration::from_secs(1),
    Duration::from_secs(2),
    Duration::from_secs(4),
];

/// A chat request.
#[derive(Debug, Clone, Default)]
pub struct ChatRequest {
    /// Model name as the endpoint expects it.
    pub model: String,
    /// OpenAI-format messages.
    pub messages: Vec<Value>,
    /// OpenAI function tool definitions.
    pub tools: Vec<Value>,
    /// Completion token cap.
    pub max_tokens: u32,
    /// Sampling temperature.
    pub temperature: f64,
    /// `reasoning_effort`, when set.
    pub reasoning_effort: Option<String>,
}

/// A parsed tool call.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    /// Call id.
    pub id: String,
    /// Tool name.
    pub name: String,
    /// Raw arguments text as the model produced it.
    pub arguments: String,
}

/// Token usage of one call.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Usage {
    /// Prompt tokens.
    pub prompt_tokens: u64,
    /// Completion tokens.
    pub completion_tokens: u64,
}

/// A chat response.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ChatResponse {
    /// Text content (think tags stripped).
    pub content: Option<String>,
    /// Tool calls.
    pub tool_calls: Vec<ToolCall>,
    /// `stop`, `tool_calls`, `length`, `error`, ...
    pub finish_reason: String,
    /// Usage, when reported.
    pub usage: Usage,
    /// `reasoning_content` or the text of stripped think tags.
    pub reasoning_content: Option<String>,
}

/// Provider errors.
#[derive(Debug, thiserror::Error)]
pub enum LlmError {
    /// HTTP error status with (truncated) body.
    #[error("llm returned {status}: {body}")]
    Status {
        status: u16,
        body: String,
        retry_after: Option<Duration>,
    },
    /// Connection failure or timeout.
    #[error("llm request failed: {0}")]
    Transport(String),
    /// The response could not be parsed.
    #[error("llm response was malformed: {0}")]
    Malformed(String),
}

impl LlmError {
    fn retryable(&self) -> bool {
        match self {
            Self::Status { status, .. } => *status == 429 || *status >= 500,
            Self::Transport(_) => true,
            Self::Malformed(_) => false,
        }
    }
}

/// Where and how to call the model.
#[derive(Debug, Clone)]
pub struct Endpoint {
    /// Base URL ending before `/chat/completions`.
    pub api_base: String,
    /// Bearer key (may be empty for local servers).
    pub api_key: String,
    /// Extra headers.
    pub headers: Vec<(String, String)>,
}

/// An OpenAI-compatible chat client.
#[derive(Debug, Clone)]
pub struct OpenAiProvider {
    http: reqwest::Client,
    endpoint: Endpoint,
}

/// Removes `<think>…</think>` (and `<thinking>`, `<thought>`) blocks; returns (text, reasoning).
pub fn strip_think(text: &str) -> (String, Option<String>) {
    let mut out = text.to_string();
    let mut reasoning = Vec::new();
    for tag in ["think", "thinking", "thought"] {
        let (open, close) = (format!("<{tag}>"), format!("</{tag}>"));
        while let Some(start) = out.find(&open) {
            let Some(rel_end) = out[start..].find(&close) else {
                reasoning.push(out[start + open.len()..].trim().to_string());
                out.truncate(start);
                break;
            };
            let end = start + rel_end;
            reasoning.push(out[start + open.len()..end].trim().to_string());
            out.replace_range(start..end + close.len(), "");
        }
    }
    let reasoning = (!reasoning.is_empty()).then(|| reasoning.join("\n"));
    (out.trim().to_string(), reasoning)
}

/// Returns messages without fleet-private keys (`_meta` on content blocks).
fn wire_messages(messages: &[Value]) -> Vec<Value> {
    messages
        .iter()
        .map(|m| {
            let mut m = m.clone();
            if let Some(blocks) = m.get_mut("content").and_then(Value::as_array_mut) {
                for b in blocks {
                    if let Some(obj) = b.as_object_mut() {
                        obj.remove("_meta");
                    }
                }
            }
            m
        })
        .collect()
}

impl OpenAiProvider {
    /// Returns a client for `endpoint` with a per-request `timeout`.
    pub fn new(endpoint: Endpoint, timeout: Option<Duration>) -> Self {
        let mut builder = reqwest::Client::builder().connect_timeout(Duration::from_secs(10));
        if let Some(t) = timeout {
            builder = builder.timeout(t);
        }
        let http = builder.build().unwrap_or_default();
        Self { http, endpoint }
    }

    fn body(&self, req: &ChatRequest, stream: bool) -> Value {
        let mut body = json!({
            "model": req.model,
            "messages": wire_messages(&req.messages),
            "max_tokens": req.max_tokens.max(1),
            "temperature": req.temperature,
        });
        if !req.tools.is_empty() {
            body["tools"] = Value::Array(req.tools.clone());
            body["tool_choice"] = json!("auto");
        }
        if let Some(effort) = &req.reasoning_effort {
            body["reasoning_effort"] = json!(effort);
        }
        if stream {
            body["stream"] = json!(true);
            body["stream_options"] = json!({"include_usage": true});
        }
        body
    }

    async fn send(&self, body: &Value) -> Result<reqwest::Response, LlmError> {
        let url = format!(
            "{}/chat/completions",
            self.endpoint.api_base.trim_end_matches('/')
        );
        let mut request = self.http.post(url).json(body);
        if !self.endpoint.api_key.is_empty() {
            request = request.bearer_auth(&self.endpoint.api_key);
        }
        for (k, v) in &self.endpoint.headers {
            request = request.header(k, v);
        }
        let response = request
            .send()
            .await
            .map_err(|e| LlmError::Transport(e.without_url().to_string()))?;
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let retry_after = response
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<f64>().ok())
            .map(|s| Duration::from_secs_f64(s.clamp(0.0, 60.0)));
        let text = response.text().await.unwrap_or_default();
        let body: String = text.chars().take(500).collect();
        Err(LlmError::Status {
            status: status.as_u16(),
            body,
            retry_after,
        })
    }

    /// Sends one chat request; with `on_delta`, streams and forwards each content delta.
    pub async fn chat(
        &self,
        req: &ChatRequest,
        on_delta: Option<&(dyn Fn(&str) + Send + Sync)>,
    ) -> Result<ChatResponse, LlmError> {
        let stream = on_delta.is_some();
        let response = self.send(&self.body(req, stream)).await?;
        let mut parsed = match on_delta {
            Some(f) => read_stream(response, f).await?,
            None => {
                let value: Value = response
                    .json()
                    .await
                    .map_err(|e| LlmError::Malformed(e.without_url().to_string()))?;
                parse_completion(&value)?
            }
        };
        if let Some(text) = parsed.content.take() {
            let (clean, think) = strip_think(&text);
            parsed.content = Some(clean);
            if parsed.reasoning_content.is_none() {
                parsed.reasoning_content = think;
            }
        }
        Ok(parsed)
    }

    /// [`chat`](Self::chat) with retries on 429, 5xx and transport errors (1/2/4 s or the
    /// server's `Retry-After`).
    pub async fn chat_with_retry(
        &self,
        req: &ChatRequest,
        on_delta: Option<&(dyn Fn(&str) + Send + Sync)>,
    ) -> Result<ChatResponse, LlmError> {
        let mut attempt = 0;
        loop {
            match self.chat(req, on_delta).await {
                Ok(r) => return Ok(r),
                Err(e) if e.retryable() && attempt < RETRY_DELAYS.len() => {
                    let delay = match &e {
                        LlmError::Status {
                            retry_after: Some(d),
                            ..
                        } => *d,
                        _ => RETRY_DELAYS[attempt],
                    };
                    tracing::warn!(attempt = attempt + 1, ?delay, error = %e, "llm call failed, retrying");
                    tokio::time::sleep(delay).await;
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }
}

fn parse_completion(value: &Value) -> Result<ChatResponse, LlmError> {
    let choice = value
        .pointer("/choices/0")
        .ok_or_else(|| LlmError::Malformed("no choices in response".into()))?;
    let message = choice.get("message").cloned().unwrap_or(Value::Null);
    let tool_calls = message
        .get("tool_calls")
        .and_then(Value::as_array)
        .map(|calls| calls.iter().filter_map(parse_tool_call).collect())
        .unwrap_or_default();
    Ok(ChatResponse {
        content: message
            .get("content")
            .and_then(Value::as_str)
            .map(str::to_string),
        tool_calls,
        finish_reason: choice
            .get("finish_reason")
            .and_then(Value::as_str)
            .unwrap_or("stop")
            .to_string(),
        usage: parse_usage(value.get("usage")),
        reasoning_content: message
            .get("reasoning_content")
            .and_then(Value::as_str)
            .map(str::to_string),
    })
}

/// Drops calls without a string name (malformed), as upstream.
fn parse_tool_call(call: &Value) -> Option<ToolCall> {
    let function = call.get("function")?;
    let name = function.get("name")?.as_str()?.to_string();
    let arguments = match function.get("arguments") {
        Some(Value::String(s)) => s.clone(),
        Some(other) if !other.is_null() => other.to_string(),
        _ => "{}".into(),
    };
    let id = call
        .get("id")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    Some(ToolCall {
        id,
        name,
        arguments,
    })
}

fn parse_usage(usage: Option<&Value>) -> Usage {
    let get = |k: &str| {
        usage
            .and_then(|u| u.get(k))
            .and_then(Value::as_u64)
            .unwrap_or(0)
    };
    Usage {
        prompt_tokens: get("prompt_tokens"),
        completion_tokens: get("completion_tokens"),
    }
}

async fn read_stream(
    response: reqwest::Response,
    on_delta: &(dyn Fn(&str) + Send + Sync),
) -> Result<ChatResponse, LlmError> {
    let mut content = String::new();
    let mut reasoning = String::new();
    let mut calls: Map<String, Value> = Map::new();
    let mut out = ChatResponse {
        finish_reason: "stop".into(),
        ..Default::default()
    };
    let mut buffer = String::new();
    let mut body = response.bytes_stream();
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(|e| LlmError::Transport(e.without_url().to_string()))?;
        buffer.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(pos) = buffer.find('\n') {
            let line = buffer[..pos].trim().to_string();
            buffer.drain(..=pos);
            let Some(data) = line.strip_prefix("data:").map(str::trim) else {
                continue;
            };
            if data == "[DONE]" {
                continue;
            }
            let Ok(event) = serde_json::from_str::<Value>(data) else {
                continue;
            };
            if event.get("usage").is_some_and(|u| !u.is_null()) {
                out.usage = parse_usage(event.get("usage"));
            }
            let Some(choice) = event.pointer("/choices/0") else {
                continue;
            };
            if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
                out.finish_reason = reason.to_string();
            }
            let delta = choice.get("delta").cloned().unwrap_or(Value::Null);
            if let Some(text) = delta.get("content").and_then(Value::as_str) {
                content.push_str(text);
                on_delta(text);
            }
            if let Some(text) = delta.get("reasoning_content").and_then(Value::as_str) {
                reasoning.push_str(text);
            }
            for call in delta
                .get("tool_calls")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let index = call
                    .get("index")
                    .and_then(Value::as_u64)
                    .unwrap_or(0)
                    .to_string();
                let entry = calls
                    .entry(index)
                    .or_insert_with(|| json!({"id": "", "name": "", "arguments": ""}));
                if let Some(id) = call.get("id").and_then(Value::as_str) {
                    entry["id"] = json!(id);
                }
                if let Some(name) = call.pointer("/function/name").and_then(Value::as_str) {
                    let joined = format!("{}{name}", entry["name"].as_str().unwrap_or(""));
                    entry["name"] = json!(joined);
                }
                if let Some(args) = call.pointer("/function/arguments").and_then(Value::as_str) {
                    let joined = format!("{}{args}", entry["arguments"].as_str().unwrap_or(""));
                    entry["arguments"] = json!(joined);
                }
            }
        }
    }
    let mut indexed: Vec<(u64, Value)> = calls
        .into_iter()
        .map(|(k, v)| (k.parse().unwrap_or(0), v))
        .collect();
    indexed.sort_by_key(|(i, _)| *i);
    out.tool_calls = indexed
        .into_iter()
        .filter_map(|(_, c)| {
            let name = c["name"].as_str().filter(|n| !n.is_empty())?.to_string();
            Some(ToolCall {
                id: c["id"].as_str().unwrap_or("").to_string(),
                name,
                arguments: c["arguments"]
                    .as_str()
                    .filter(|a| !a.is_empty())
                    .unwrap_or("{}")
                    .to_string(),
            })
        })
        .collect();
    out.content = (!content.is_empty()).then_some(content);
    out.reasoning_content = (!reasoning.is_empty()).then_some(reasoning);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn think_tags_are_stripped_into_reasoning() {
        let (text, reasoning) = strip_think("<think>plan it</think>\nAnswer.");
        assert_eq!(text, "Answer.");
        assert_eq!(reasoning.as_deref(), Some("plan it"));
        assert_eq!(strip_think("plain").0, "plain");
        assert_eq!(strip_think("x <thinking>unterminated").0, "x");
    }

    #[test]
    fn completions_parse_and_nameless_tool_calls_are_dropped() {
        let r = parse_completion(&json!({
            "choices": [{"message": {"content": null, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": "{\"path\":\"a\"}"}},
                {"id": "c2", "type": "function", "function": {"arguments": "{}"}}
            ]}, "finish_reason": "tool_calls"}],
            "usage": {"prompt_tokens": 7, "completion_tokens": 3}
        }))
        .unwrap();
        assert_eq!(
            r.tool_calls,
            vec![ToolCall {
                id: "c1".into(),
                name: "read_file".into(),
                arguments: "{\"path\":\"a\"}".into()
            }]
        );
        assert_eq!(
            r.usage,
            Usage {
                prompt_tokens: 7,
                completion_tokens: 3
            }
        );
        assert!(parse_completion(&json!({"nope": 1})).is_err());
    }
}
