//! Model requests of the runner: the LLM wall timeout (`Error calling LLM: timed out after
//! {t}s`), provider errors turned into `finish_reason: error` responses, streaming through
//! the hook, usage estimates when the provider reports none, and the malformed-tool-call
//! recovery (one corrective retry, then a no-tools request).

use std::time::Instant;

use serde_json::Value;
use tracing::Instrument as _;
use tracing::field::Empty;

use super::RunSpec;
use super::prompts;
use crate::hooks::AgentHook;
use crate::memory::budget::estimate_messages_by_bytes;
use crate::provider::{ChatModel, ChatRequest, ChatResponse, Usage};

/// What a request cost.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Cost {
    pub(crate) usage: Usage,
    pub(crate) calls: u32,
}

impl Cost {
    pub(crate) fn add(&mut self, other: Cost) {
        self.usage.add(&other.usage);
        self.calls += other.calls;
    }
}

/// Sends the runner's requests.
pub(crate) struct Requester<'a> {
    pub(crate) model: &'a dyn ChatModel,
    pub(crate) spec: &'a RunSpec,
    pub(crate) hook: &'a dyn AgentHook,
    pub(crate) streaming: bool,
}

fn is_tool_finish(reason: &str) -> bool {
    matches!(reason, "tool_calls" | "function_call" | "tool_use")
}

impl Requester<'_> {
    /// One request; errors and timeouts become `finish_reason: error` responses.
    pub(crate) async fn once(
        &self,
        messages: &[Value],
        tools: &[Value],
        stream: bool,
    ) -> (ChatResponse, Cost) {
        let request = ChatRequest {
            model: self.spec.model.clone(),
            messages: messages.into(),
            tools: tools.into(),
            max_tokens: self.spec.max_tokens,
            temperature: self.spec.temperature,
            reasoning_effort: self.spec.reasoning_effort.clone(),
            tool_choice: None,
        };
        let hook = self.hook;
        let sink = move |d: &str| {
            let _ = hook.on_stream(d);
        };
        let sink_ref: &crate::provider::DeltaFn<'_> = &sink;
        let on_delta = (stream && self.streaming).then_some(sink_ref);
        let span = chat_span(&request, &self.spec.telemetry);
        let started = Instant::now();
        let call = self.model.chat(&request, on_delta);
        let call = async {
            match self.spec.llm_timeout {
                Some(limit) => tokio::time::timeout(limit, call)
                    .await
                    .map_err(|_| limit.as_secs()),
                None => Ok(call.await),
            }
        };
        let outcome = call.instrument(span.clone()).await;
        let _entered = span.enter();
        let error_kind = match &outcome {
            Ok(Ok(_)) => None,
            Ok(Err(e)) => Some(e.kind()),
            Err(_) => Some("timeout"),
        };
        let mut response = match outcome {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "llm call failed");
                ChatResponse {
                    content: e
                        .is_arrearage()
                        .then(|| prompts::ARREARAGE_ERROR_MESSAGE.to_string()),
                    finish_reason: "error".into(),
                    ..Default::default()
                }
            }
            Err(secs) => {
                tracing::warn!(timeout_secs = secs, "llm call timed out");
                ChatResponse {
                    content: Some(prompts::timeout_message(secs)),
                    finish_reason: "error".into(),
                    ..Default::default()
                }
            }
        };
        if response.finish_reason != "error" && response.usage.total() == 0 {
            let out = response.content.as_deref().map_or(0, str::len)
                + response
                    .tool_calls
                    .iter()
                    .map(|c| c.name.len() + c.arguments.len())
                    .sum::<usize>();
            response.usage.prompt_tokens = estimate_messages_by_bytes(messages) as u64;
            response.usage.completion_tokens = (out / 4 + 1) as u64;
        }
        record_response(
            &span,
            &self.spec.telemetry,
            &self.spec.model,
            &response,
            error_kind,
        );
        nanobot_runtime::metrics::get().llm_call(
            &self.spec.telemetry.provider,
            &self.spec.model,
            started.elapsed(),
            (
                response.usage.prompt_tokens,
                response.usage.completion_tokens,
            ),
            error_kind,
        );
        let cost = Cost {
            usage: response.usage,
            calls: 1,
        };
        (response, cost)
    }

    /// A request with tools; when every tool call of the answer is malformed, retries once
    /// with a corrective note, then once more without tools.
    pub(crate) async fn with_tools(
        &self,
        messages: &[Value],
        tools: &[Value],
    ) -> (ChatResponse, Cost) {
        let (response, mut cost) = self.once(messages, tools, true).await;
        if !all_malformed(&response) {
            return (response, cost);
        }
        tracing::warn!(
            dropped = response.malformed_tool_calls,
            "retrying llm request after all malformed tool calls were dropped"
        );
        let mut retry = messages.to_vec();
        retry.push(prompts::malformed_note(response.content.as_deref()));
        let (second, more) = self.once(&retry, tools, true).await;
        cost.add(more);
        if !all_malformed(&second) {
            return (second, cost);
        }
        tracing::warn!(
            "malformed tool calls persisted after retry, falling back to no-tools request"
        );
        let mut fallback = messages.to_vec();
        fallback.push(prompts::malformed_note(second.content.as_deref()));
        let (third, more) = self.once(&fallback, &[], false).await;
        cost.add(more);
        (third, cost)
    }

    /// A no-tools request with `prompt` appended (finalization, budget exhausted).
    pub(crate) async fn finalize(&self, messages: &[Value], prompt: &str) -> (ChatResponse, Cost) {
        let mut request = messages.to_vec();
        request.push(prompts::user(prompt));
        self.once(&request, &[], false).await
    }
}

/// Sends one LLM request outside the runner loop (the Consolidator's archive call) the way
/// the runner sends its own: under a `chat {model}` span with the GenAI attributes, counted in
/// the LLM metrics, within `timeout`. Returns the response, or why there is none (`timed
/// out`, or the provider's error).
pub async fn traced_chat(
    model: &dyn ChatModel,
    request: &ChatRequest<'_>,
    telemetry: &super::Telemetry,
    timeout: Option<std::time::Duration>,
) -> Result<ChatResponse, String> {
    let span = chat_span(request, telemetry);
    let started = Instant::now();
    let call = async {
        match timeout {
            Some(limit) => tokio::time::timeout(limit, model.chat(request, None))
                .await
                .ok(),
            None => Some(model.chat(request, None).await),
        }
    };
    let outcome = call.instrument(span.clone()).await;
    let error_kind = match &outcome {
        Some(Ok(_)) => None,
        Some(Err(e)) => Some(e.kind()),
        None => Some("timeout"),
    };
    let failed = ChatResponse {
        finish_reason: "error".into(),
        ..Default::default()
    };
    let response = match &outcome {
        Some(Ok(r)) => r,
        _ => &failed,
    };
    record_response(&span, telemetry, &request.model, response, error_kind);
    nanobot_runtime::metrics::get().llm_call(
        &telemetry.provider,
        &request.model,
        started.elapsed(),
        (
            response.usage.prompt_tokens,
            response.usage.completion_tokens,
        ),
        error_kind,
    );
    match outcome {
        Some(Ok(r)) => Ok(r),
        Some(Err(e)) => Err(e.to_string()),
        None => Err("timed out".into()),
    }
}

/// Returns the span of one LLM call, after OpenTelemetry's GenAI conventions (`chat {model}`,
/// a client span); the response's attributes are recorded by [`record_response`]. Message
/// contents go on it only with `telemetry.captureContent`.
fn chat_span(request: &ChatRequest<'_>, telemetry: &super::Telemetry) -> tracing::Span {
    let span = tracing::info_span!(
        "chat",
        "otel.name" = %format_args!("chat {}", request.model),
        "otel.kind" = "client",
        "gen_ai.operation.name" = "chat",
        "gen_ai.provider.name" = %telemetry.provider,
        "gen_ai.request.model" = %request.model,
        "gen_ai.request.max_tokens" = i64::from(request.max_tokens),
        "gen_ai.request.temperature" = request.temperature,
        "gen_ai.response.model" = Empty,
        "gen_ai.usage.input_tokens" = Empty,
        "gen_ai.usage.output_tokens" = Empty,
        "error.type" = Empty,
        "gen_ai.input.messages" = Empty,
        "gen_ai.output.messages" = Empty,
    );
    if telemetry.capture_content {
        let input = Value::Array(request.messages.to_vec()).to_string();
        span.record("gen_ai.input.messages", input.as_str());
    }
    span
}

/// Records the response of one LLM call on its span.
fn record_response(
    span: &tracing::Span,
    telemetry: &super::Telemetry,
    request_model: &str,
    response: &ChatResponse,
    error: Option<&'static str>,
) {
    nanobot_runtime::telemetry::set_string_list(
        span,
        "gen_ai.response.finish_reasons",
        &[response.finish_reason.as_str()],
    );
    // The model that answered: a fallback model's name when the primary failed.
    if error.is_none() {
        span.record(
            "gen_ai.response.model",
            response.model.as_deref().unwrap_or(request_model),
        );
    }
    // As i64: OpenTelemetry has no unsigned integers (a u64 would be exported as text).
    let int = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    span.record(
        "gen_ai.usage.input_tokens",
        int(response.usage.prompt_tokens),
    );
    span.record(
        "gen_ai.usage.output_tokens",
        int(response.usage.completion_tokens),
    );
    if let Some(kind) = error {
        span.record("error.type", kind);
    }
    if telemetry.capture_content {
        let calls: Vec<Value> = response.tool_calls.iter().map(super::call_json).collect();
        let output = serde_json::json!([{
            "role": "assistant",
            "content": response.content,
            "tool_calls": calls,
            "finish_reason": response.finish_reason,
        }]);
        span.record("gen_ai.output.messages", output.to_string().as_str());
    }
}

fn all_malformed(r: &ChatResponse) -> bool {
    r.malformed_tool_calls > 0 && r.tool_calls.is_empty() && is_tool_finish(&r.finish_reason)
}
