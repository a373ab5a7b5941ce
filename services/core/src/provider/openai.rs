//! The OpenAI-compatible chat client: `POST {apiBase}/chat/completions`, streamed over SSE
//! when a delta sink is given.

use std::time::Duration;

use futures::StreamExt as _;
use serde::{Serialize, Serializer, ser::SerializeMap as _};
use serde_json::{Map, Value, json};

use super::{ChatRequest, ChatResponse, DeltaFn, Endpoint, LlmError, ToolCall, Usage};

/// An OpenAI-compatible chat client.
#[derive(Debug, Clone)]
pub struct OpenAiProvider {
    http: reqwest::Client,
    endpoint: Endpoint,
    /// Mark Claude requests for prompt caching (a gateway that honours `cache_control`).
    prompt_caching: bool,
}

/// Keys of a stored message the wire never carries.
const NOT_SENT: [&str; 3] = [
    "thinking_blocks",
    crate::subagent::rows::INJECTED_EVENT_KEY,
    crate::subagent::rows::TASK_ID_KEY,
];

/// The messages as sent: without [`NOT_SENT`] keys and content blocks' `_meta`, serialised
/// straight from the run's transcript (no copy per call).
struct Wire<'a>(&'a [Value]);

struct WireMessage<'a>(&'a Value);

struct WireBlocks<'a>(&'a [Value]);

struct WireBlock<'a>(&'a Value);

impl Serialize for Wire<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter().map(WireMessage))
    }
}

impl Serialize for WireMessage<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let Some(obj) = self.0.as_object() else {
            return self.0.serialize(s);
        };
        let mut map = s.serialize_map(None)?;
        for (k, v) in obj.iter().filter(|(k, _)| !NOT_SENT.contains(&k.as_str())) {
            match v.as_array() {
                Some(blocks) if k == "content" => map.serialize_entry(k, &WireBlocks(blocks))?,
                _ => map.serialize_entry(k, v)?,
            }
        }
        map.end()
    }
}

impl Serialize for WireBlocks<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter().map(WireBlock))
    }
}

impl Serialize for WireBlock<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let Some(obj) = self.0.as_object() else {
            return self.0.serialize(s);
        };
        s.collect_map(obj.iter().filter(|(k, _)| k.as_str() != "_meta"))
    }
}

/// The request body, borrowing the request's messages and tools.
#[derive(Serialize)]
struct Body<'a> {
    model: &'a str,
    messages: Wire<'a>,
    max_tokens: u32,
    temperature: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    tools: Option<&'a [Value]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_effort: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<StreamOptions>,
}

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

/// Upstream's `_apply_cache_control`: an ephemeral `cache_control` on the system message, on
/// the second-to-last message (with 3 or more) and on the last builtin tool and the last tool
/// (`_tool_cache_marker_indices`); string content becomes one text block carrying the marker.
fn apply_cache_control(body: &mut Value) {
    fn mark(message: &mut Value) {
        match message.get_mut("content") {
            Some(Value::String(text)) => {
                let text = std::mem::take(text);
                message["content"] = json!([
                    {"type": "text", "text": text, "cache_control": {"type": "ephemeral"}}
                ]);
            }
            Some(Value::Array(blocks)) if !blocks.is_empty() => {
                if let Some(last) = blocks.last_mut().and_then(Value::as_object_mut) {
                    last.insert("cache_control".into(), json!({"type": "ephemeral"}));
                }
            }
            _ => {}
        }
    }
    if let Some(messages) = body["messages"].as_array_mut() {
        if messages.first().is_some_and(|m| m["role"] == "system") {
            mark(&mut messages[0]);
        }
        if messages.len() >= 3 {
            let index = messages.len() - 2;
            mark(&mut messages[index]);
        }
    }
    if let Some(tools) = body["tools"].as_array_mut()
        && let Some(tail) = tools.len().checked_sub(1)
    {
        let name = |t: &Value| {
            t.pointer("/function/name")
                .or_else(|| t.get("name"))
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        let builtin = (0..=tail)
            .rev()
            .find(|&i| !name(&tools[i]).starts_with("mcp_"));
        for i in builtin.into_iter().chain([tail]) {
            if let Some(tool) = tools[i].as_object_mut() {
                tool.insert("cache_control".into(), json!({"type": "ephemeral"}));
            }
        }
    }
}

impl OpenAiProvider {
    /// Returns a client for `endpoint` with an optional per-request `timeout`.
    pub fn new(endpoint: Endpoint, timeout: Option<Duration>) -> Self {
        Self {
            http: super::http_client(timeout),
            endpoint,
            prompt_caching: false,
        }
    }

    /// Puts upstream's `cache_control` markers on requests for Claude models
    /// (`anthropic/…`, `claude…`) when the provider supports prompt caching (OpenRouter).
    pub fn with_prompt_caching(mut self, enabled: bool) -> Self {
        self.prompt_caching = enabled;
        self
    }

    fn wire<'a>(req: &'a ChatRequest<'_>, stream: bool) -> Body<'a> {
        let tools = !req.tools.is_empty();
        Body {
            model: &req.model,
            messages: Wire(&req.messages),
            max_tokens: req.max_tokens.max(1),
            temperature: req.temperature,
            tools: tools.then_some(&req.tools[..]),
            tool_choice: tools.then(|| req.tool_choice.as_deref().unwrap_or("auto")),
            reasoning_effort: req.reasoning_effort.as_deref(),
            stream: stream.then_some(true),
            stream_options: stream.then_some(StreamOptions {
                include_usage: true,
            }),
        }
    }

    /// Whether requests for `model` get upstream's prompt-caching markers.
    fn caches(&self, model: &str) -> bool {
        let model = model.to_lowercase();
        self.prompt_caching && (model.starts_with("anthropic/") || model.starts_with("claude"))
    }

    /// The request body as a JSON value (with the caching markers where they apply).
    fn body(&self, req: &ChatRequest<'_>, stream: bool) -> Value {
        let mut body = serde_json::to_value(Self::wire(req, stream)).unwrap_or_default();
        if self.caches(&req.model) {
            apply_cache_control(&mut body);
        }
        body
    }

    /// The request body as sent: serialised from the request without copying its messages,
    /// unless caching markers must be added.
    fn body_bytes(&self, req: &ChatRequest<'_>, stream: bool) -> Result<Vec<u8>, LlmError> {
        let bytes = if self.caches(&req.model) {
            serde_json::to_vec(&self.body(req, stream))
        } else {
            serde_json::to_vec(&Self::wire(req, stream))
        };
        bytes.map_err(|e| LlmError::Malformed(format!("unserialisable request: {e}")))
    }

    async fn send(&self, body: Vec<u8>) -> Result<reqwest::Response, LlmError> {
        let url = format!(
            "{}/chat/completions",
            self.endpoint.api_base.trim_end_matches('/')
        );
        let mut request = self
            .http
            .post(url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body);
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
        if response.status().is_success() {
            return Ok(response);
        }
        Err(super::status_error(response, &self.endpoint.api_key).await)
    }

    /// Sends one chat request; with `on_delta`, streams and forwards each content delta.
    pub async fn chat(
        &self,
        req: &ChatRequest<'_>,
        on_delta: Option<&DeltaFn<'_>>,
    ) -> Result<ChatResponse, LlmError> {
        let response = self.send(self.body_bytes(req, on_delta.is_some())?).await?;
        match on_delta {
            Some(f) => read_stream(response, f).await,
            None => {
                let value: Value = response
                    .json()
                    .await
                    .map_err(|e| LlmError::Malformed(e.without_url().to_string()))?;
                parse_completion(&value)
            }
        }
    }
}

fn parse_completion(value: &Value) -> Result<ChatResponse, LlmError> {
    let choice = value
        .pointer("/choices/0")
        .ok_or_else(|| LlmError::Malformed("no choices in response".into()))?;
    let message = choice.get("message").cloned().unwrap_or(Value::Null);
    let raw_calls = message
        .get("tool_calls")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let tool_calls: Vec<ToolCall> = raw_calls.iter().filter_map(parse_tool_call).collect();
    Ok(ChatResponse {
        malformed_tool_calls: raw_calls.len() - tool_calls.len(),
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
        thinking_blocks: Vec::new(),
        model: None,
    })
}

/// Drops calls without a string name (malformed), as upstream.
fn parse_tool_call(call: &Value) -> Option<ToolCall> {
    let function = call.get("function")?;
    let name = function
        .get("name")?
        .as_str()
        .filter(|n| !n.is_empty())?
        .to_string();
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
    let cached = usage
        .and_then(|u| u.pointer("/prompt_tokens_details/cached_tokens"))
        .and_then(Value::as_u64)
        .unwrap_or(0);
    Usage {
        prompt_tokens: get("prompt_tokens"),
        completion_tokens: get("completion_tokens"),
        cached_tokens: cached,
    }
}

pub(crate) async fn read_stream(
    response: reqwest::Response,
    on_delta: &(dyn Fn(&str) + Send + Sync),
) -> Result<ChatResponse, LlmError> {
    let mut state = StreamState::default();
    let mut events = std::pin::pin!(super::sse_events(response));
    while let Some(sse) = events.next().await {
        let data = sse?.data;
        if data == "[DONE]" {
            continue;
        }
        if let Ok(chunk) = serde_json::from_str::<Value>(&data) {
            state.apply(&chunk, on_delta);
        }
    }
    Ok(state.finish())
}

/// What a Chat Completions stream has said so far.
#[derive(Default)]
struct StreamState {
    content: String,
    reasoning: String,
    /// Tool calls by their `index`, their name and arguments joined from the deltas.
    calls: Map<String, Value>,
    finish_reason: Option<String>,
    usage: Usage,
}

impl StreamState {
    /// Applies one `chat.completion.chunk`.
    fn apply(&mut self, chunk: &Value, on_delta: &(dyn Fn(&str) + Send + Sync)) {
        if chunk.get("usage").is_some_and(|u| !u.is_null()) {
            self.usage = parse_usage(chunk.get("usage"));
        }
        let Some(choice) = chunk.pointer("/choices/0") else {
            return;
        };
        if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
            self.finish_reason = Some(reason.to_string());
        }
        let delta = choice.get("delta").unwrap_or(&Value::Null);
        if let Some(text) = delta.get("content").and_then(Value::as_str) {
            self.content.push_str(text);
            on_delta(text);
        }
        if let Some(text) = delta.get("reasoning_content").and_then(Value::as_str) {
            self.reasoning.push_str(text);
        }
        let calls = delta.get("tool_calls").and_then(Value::as_array);
        for call in calls.into_iter().flatten() {
            self.apply_call(call);
        }
    }

    fn apply_call(&mut self, call: &Value) {
        let index = call.get("index").and_then(Value::as_u64).unwrap_or(0);
        let entry = self
            .calls
            .entry(index.to_string())
            .or_insert_with(|| json!({"id": "", "name": "", "arguments": ""}));
        if let Some(id) = call.get("id").and_then(Value::as_str) {
            entry["id"] = json!(id);
        }
        for (field, pointer) in [
            ("name", "/function/name"),
            ("arguments", "/function/arguments"),
        ] {
            if let Some(more) = call.pointer(pointer).and_then(Value::as_str) {
                let joined = format!("{}{more}", entry[field].as_str().unwrap_or(""));
                entry[field] = json!(joined);
            }
        }
    }

    fn finish(self) -> ChatResponse {
        let mut indexed: Vec<(u64, Value)> = self
            .calls
            .into_iter()
            .map(|(k, v)| (k.parse().unwrap_or(0), v))
            .collect();
        indexed.sort_by_key(|(i, _)| *i);
        let total = indexed.len();
        let tool_calls: Vec<ToolCall> = indexed
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
        ChatResponse {
            finish_reason: self.finish_reason.unwrap_or_else(|| "stop".into()),
            malformed_tool_calls: total - tool_calls.len(),
            tool_calls,
            content: (!self.content.is_empty()).then_some(self.content),
            reasoning_content: (!self.reasoning.is_empty()).then_some(self.reasoning),
            usage: self.usage,
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use super::*;

    fn request(model: &str) -> ChatRequest<'static> {
        let tool = |name: &str| json!({"type": "function", "function": {"name": name}});
        ChatRequest {
            model: model.into(),
            messages: vec![
                json!({"role": "system", "content": "You are nanobot."}),
                json!({"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}),
                json!({"role": "assistant", "content": "c"}),
                json!({"role": "user", "content": "d"}),
            ]
            .into(),
            tools: vec![tool("read_file"), tool("exec"), tool("mcp_x_y")].into(),
            ..Default::default()
        }
    }

    #[test]
    fn claude_through_a_caching_gateway_gets_upstreams_cache_markers() {
        let endpoint = Endpoint {
            api_base: "https://openrouter.ai/api/v1".into(),
            api_key: String::new(),
            headers: Vec::new(),
        };
        let caching = OpenAiProvider::new(endpoint.clone(), None).with_prompt_caching(true);
        let body = caching.body(&request("anthropic/claude-sonnet-4.5"), false);
        let marker = json!({"type": "ephemeral"});
        assert_eq!(
            body["messages"][0]["content"],
            json!([{"type": "text", "text": "You are nanobot.", "cache_control": marker}])
        );
        assert_eq!(
            body["messages"][2]["content"],
            json!([{"type": "text", "text": "c", "cache_control": marker}]),
            "the second-to-last message"
        );
        assert!(
            body["messages"][1]["content"][1]
                .get("cache_control")
                .is_none()
        );
        assert_eq!(body["messages"][3]["content"], "d");
        let marked: Vec<bool> = body["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.get("cache_control") == Some(&marker))
            .collect();
        assert_eq!(
            marked,
            [false, true, true],
            "last builtin tool and last tool"
        );

        // Not Claude, or a provider without caching: the body is untouched.
        let plain = caching.body(&request("openai/gpt-4o"), false);
        assert!(!plain.to_string().contains("cache_control"));
        let off = OpenAiProvider::new(endpoint, None);
        let plain = off.body(&request("anthropic/claude-sonnet-4.5"), false);
        assert!(!plain.to_string().contains("cache_control"));
    }

    #[test]
    fn the_sent_body_drops_private_keys_and_keeps_the_rest_without_copying_the_transcript() {
        let endpoint = Endpoint {
            api_base: "http://127.0.0.1:1/v1".into(),
            api_key: String::new(),
            headers: Vec::new(),
        };
        let transcript = vec![
            json!({"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": "data:x"}, "_meta": {"path": "a.png"}},
                {"type": "text", "text": "look"}]}),
            json!({"role": "assistant", "content": "ok", "thinking_blocks": [{"thinking": "hm"}],
                crate::subagent::rows::INJECTED_EVENT_KEY: true, crate::subagent::rows::TASK_ID_KEY: "t1",
                "tool_calls": [{"id": "c1", "function": {"name": "exec", "arguments": "{}"}}]}),
        ];
        let tools = [json!({"type": "function", "function": {"name": "exec"}})];
        let req = ChatRequest {
            model: "gpt-x".into(),
            messages: transcript.as_slice().into(),
            tools: tools.as_slice().into(),
            max_tokens: 0,
            temperature: 0.5,
            reasoning_effort: Some("low".into()),
            tool_choice: None,
        };
        assert!(matches!(req.messages, Cow::Borrowed(_)));
        let provider = OpenAiProvider::new(endpoint, None);
        let sent: Value =
            serde_json::from_slice(&provider.body_bytes(&req, true).unwrap()).unwrap();
        assert_eq!(
            sent,
            json!({
                "model": "gpt-x",
                "messages": [
                    {"role": "user", "content": [
                        {"type": "image_url", "image_url": {"url": "data:x"}},
                        {"type": "text", "text": "look"}]},
                    {"role": "assistant", "content": "ok",
                        "tool_calls": [{"id": "c1", "function": {"name": "exec", "arguments": "{}"}}]},
                ],
                "max_tokens": 1,
                "temperature": 0.5,
                "tools": tools,
                "tool_choice": "auto",
                "reasoning_effort": "low",
                "stream": true,
                "stream_options": {"include_usage": true},
            })
        );
        assert_eq!(
            sent,
            provider.body(&req, true),
            "one body, as value or bytes"
        );
        let plain: Value = serde_json::from_slice(
            &provider
                .body_bytes(
                    &ChatRequest {
                        tools: Cow::Borrowed(&[]),
                        ..req.clone()
                    },
                    false,
                )
                .unwrap(),
        )
        .unwrap();
        for key in ["tools", "tool_choice", "stream", "stream_options"] {
            assert!(plain.get(key).is_none(), "{key} in {plain}");
        }
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
                completion_tokens: 3,
                cached_tokens: 0
            }
        );
        assert_eq!(r.malformed_tool_calls, 1);
        assert!(parse_completion(&json!({"nope": 1})).is_err());
    }
}
