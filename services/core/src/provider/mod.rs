//! LLM providers: one request/response shape ([`ChatRequest`], [`ChatResponse`]) served by an
//! OpenAI-compatible client ([`openai`]) or the native Anthropic Messages client
//! ([`anthropic`]), both streaming over SSE with deltas forwarded, both retried with backoff
//! 1/2/4 s on 429, 5xx and transport errors (honouring `Retry-After`). The runner talks to
//! [`Provider`] (or any [`ChatModel`]) and never to a vendor client directly.

pub mod anthropic;
mod anthropic_stream;
pub mod openai;
#[cfg(test)]
mod stream_tests;
mod think;

use std::borrow::Cow;
use std::time::Duration;

use serde_json::Value;

pub use anthropic::AnthropicProvider;
pub use openai::OpenAiProvider;
pub use think::{strip_think, strip_think_edges};

/// Backoff before each retry (upstream `providers/base.py`).
pub const RETRY_DELAYS: [Duration; 3] = [
    Duration::from_secs(1),
    Duration::from_secs(2),
    Duration::from_secs(4),
];
/// Longest `Retry-After` honoured.
const MAX_RETRY_AFTER: f64 = 60.0;

/// Receives streamed text deltas.
pub type DeltaFn<'a> = dyn Fn(&str) + Send + Sync + 'a;

/// A chat request. The messages and tools are borrowed from the run that sends them (a turn's
/// transcript is not copied per LLM call) or owned by a one-off request.
#[derive(Debug, Clone, Default)]
pub struct ChatRequest<'a> {
    /// Model name as the endpoint expects it.
    pub model: String,
    /// OpenAI-format messages.
    pub messages: Cow<'a, [Value]>,
    /// OpenAI function tool definitions (empty: a no-tools request).
    pub tools: Cow<'a, [Value]>,
    /// Completion token cap.
    pub max_tokens: u32,
    /// Sampling temperature.
    pub temperature: f64,
    /// `reasoning_effort`, when set.
    pub reasoning_effort: Option<String>,
    /// `tool_choice` when tools are sent (`None`: `auto`); `Some("none")` offers the tools
    /// for context (and prompt caching) but forbids calling them.
    pub tool_choice: Option<String>,
}

impl ChatRequest<'_> {
    /// An owned copy (what a test double records).
    pub fn to_owned_request(&self) -> ChatRequest<'static> {
        ChatRequest {
            model: self.model.clone(),
            messages: Cow::Owned(self.messages.to_vec()),
            tools: Cow::Owned(self.tools.to_vec()),
            max_tokens: self.max_tokens,
            temperature: self.temperature,
            reasoning_effort: self.reasoning_effort.clone(),
            tool_choice: self.tool_choice.clone(),
        }
    }
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

/// Token usage of one call (or, summed, of a turn).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Usage {
    /// Prompt tokens.
    pub prompt_tokens: u64,
    /// Completion tokens.
    pub completion_tokens: u64,
    /// Prompt tokens served from the provider's cache.
    pub cached_tokens: u64,
}

impl Usage {
    /// Adds `other` to `self`.
    pub fn add(&mut self, other: &Usage) {
        self.prompt_tokens += other.prompt_tokens;
        self.completion_tokens += other.completion_tokens;
        self.cached_tokens += other.cached_tokens;
    }

    /// Prompt plus completion tokens.
    pub fn total(&self) -> u64 {
        self.prompt_tokens + self.completion_tokens
    }
}

/// A chat response.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ChatResponse {
    /// Text content (think tags stripped).
    pub content: Option<String>,
    /// Well-formed tool calls.
    pub tool_calls: Vec<ToolCall>,
    /// Tool calls dropped because their name was missing or not a string.
    pub malformed_tool_calls: usize,
    /// `stop`, `tool_calls`, `length`, `error`, ...
    pub finish_reason: String,
    /// Usage, when reported.
    pub usage: Usage,
    /// `reasoning_content` or Anthropic thinking text (inline think tags are dropped, as 0.3.5).
    pub reasoning_content: Option<String>,
    /// Anthropic thinking blocks, kept verbatim (with signatures) for replay.
    pub thinking_blocks: Vec<Value>,
    /// The model that answered when it is not the requested one (a fallback model).
    pub model: Option<String>,
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
    /// Whether the call may succeed when repeated (429, 408/409, 5xx, transport).
    pub fn retryable(&self) -> bool {
        match self {
            Self::Status { status, body, .. } => {
                (*status == 429 && !is_quota_error(body))
                    || *status == 408
                    || *status == 409
                    || *status >= 500
            }
            Self::Transport(_) => true,
            Self::Malformed(_) => false,
        }
    }
}

impl LlmError {
    /// Whether another model may answer where this one failed (upstream
    /// `FallbackProvider._should_fallback`): what retrying may fix (timeouts, connection
    /// errors, 408/409/429, 5xx), an exhausted quota, and a key the provider refuses
    /// (401/403); not a request the provider rejects as such (400, 404, 422, ...).
    pub fn falls_back(&self) -> bool {
        match self {
            Self::Status { status, .. } => {
                self.retryable() || self.is_arrearage() || matches!(status, 401 | 403)
            }
            Self::Transport(_) => true,
            Self::Malformed(_) => false,
        }
    }

    /// The error's kind as metrics and spans name it: `quota`, `rate_limited`,
    /// `client_error`, `server_error`, `transport` or `malformed`.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Status { status: 429, .. } if self.is_arrearage() => "quota",
            Self::Status { status: 429, .. } => "rate_limited",
            Self::Status { status, .. } if *status >= 500 => "server_error",
            Self::Status { .. } => "client_error",
            Self::Transport(_) => "transport",
            Self::Malformed(_) => "malformed",
        }
    }

    /// Whether the provider refused for quota or billing (a 429 that retrying cannot fix).
    pub fn is_arrearage(&self) -> bool {
        matches!(self, Self::Status { status: 429, body, .. } if is_quota_error(body))
    }
}

/// A 429 that retrying cannot fix (quota or billing).
fn is_quota_error(body: &str) -> bool {
    let body = body.to_lowercase();
    ["insufficient_quota", "billing", "arrear"]
        .iter()
        .any(|m| body.contains(m))
}

/// Where and how to call the model.
#[derive(Debug, Clone)]
pub struct Endpoint {
    /// Base URL (`…/v1` for OpenAI-compatible servers; the host root for Anthropic).
    pub api_base: String,
    /// API key (may be empty for local servers).
    pub api_key: String,
    /// Extra headers.
    pub headers: Vec<(String, String)>,
}

/// Anything the runner can ask for a completion.
#[async_trait::async_trait]
pub trait ChatModel: Send + Sync {
    /// Sends one request (with whatever retries the model applies); with `on_delta`, streams
    /// and forwards each text delta.
    async fn chat(
        &self,
        req: &ChatRequest<'_>,
        on_delta: Option<&DeltaFn<'_>>,
    ) -> Result<ChatResponse, LlmError>;
}

/// The provider of a bot: OpenAI-compatible or native Anthropic.
#[derive(Debug, Clone)]
pub enum Provider {
    /// `POST {apiBase}/chat/completions`.
    OpenAi(OpenAiProvider),
    /// `POST {apiBase}/v1/messages`.
    Anthropic(AnthropicProvider),
    /// A provider with upstream's `fallbackModels` behind it.
    Fallback(std::sync::Arc<Fallbacks>),
}

/// Upstream's `agents.defaults.fallbackModels` (`providers/fallback_provider.py`): when the
/// primary's call fails with an error another model may not share ([`LlmError::falls_back`])
/// after its retries, and before any content was streamed, the fallbacks are tried in order,
/// each with its own retries and settings. A circuit breaker skips the primary for a cooldown
/// (upstream: 60 s) after [`BREAKER_THRESHOLD`] consecutive such failures; then one call probes
/// it again (a failed probe opens the breaker again). The breaker lives in this value: one per
/// bot, preset and runner process.
#[derive(Debug)]
pub struct Fallbacks {
    /// The bot's own provider.
    pub primary: Provider,
    /// The primary's model name on the wire (for logs).
    primary_model: String,
    /// Each fallback: its provider, the model name sent on the wire and its settings.
    pub chain: Vec<Fallback>,
    breaker: Breaker,
}

/// Consecutive failures of the primary that open its circuit breaker (upstream
/// `_PRIMARY_FAILURE_THRESHOLD`).
pub const BREAKER_THRESHOLD: u32 = 3;

/// One fallback model.
#[derive(Debug)]
pub struct Fallback {
    /// Its provider.
    pub provider: Provider,
    /// The model name sent on the wire.
    pub model: String,
    /// Its temperature (a per-model override, else the entry's).
    pub temperature: f64,
    /// Its completion cap.
    pub max_tokens: u32,
    /// Its `reasoning_effort` (none sent when unset).
    pub reasoning_effort: Option<String>,
}

/// The primary's circuit breaker: consecutive failures and when it opened.
#[derive(Debug)]
struct Breaker {
    cooldown: Duration,
    state: std::sync::Mutex<(u32, Option<std::time::Instant>)>,
}

impl Breaker {
    fn state(&self) -> std::sync::MutexGuard<'_, (u32, Option<std::time::Instant>)> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Closed, or open for longer than the cooldown (half-open: one probe may go).
    fn available(&self) -> bool {
        self.state()
            .1
            .is_none_or(|opened| opened.elapsed() >= self.cooldown)
    }

    fn succeeded(&self) {
        *self.state() = (0, None);
    }

    /// Counts a failure; returns the count when it opened (or re-opened) the breaker.
    fn failed(&self) -> Option<u32> {
        let mut state = self.state();
        state.0 += 1;
        (state.0 >= BREAKER_THRESHOLD).then(|| {
            state.1 = Some(std::time::Instant::now());
            state.0
        })
    }
}

impl Fallbacks {
    /// `primary` (sending `primary_model`) with `chain` behind it; the breaker keeps the
    /// primary off for `cooldown` once open.
    pub fn new(
        primary: Provider,
        primary_model: String,
        chain: Vec<Fallback>,
        cooldown: Duration,
    ) -> Self {
        Self {
            primary,
            primary_model,
            chain,
            breaker: Breaker {
                cooldown,
                state: std::sync::Mutex::new((0, None)),
            },
        }
    }

    async fn chat(
        &self,
        req: &ChatRequest<'_>,
        on_delta: Option<&DeltaFn<'_>>,
    ) -> Result<ChatResponse, LlmError> {
        let streamed = std::sync::atomic::AtomicBool::new(false);
        let forward = |text: &str| {
            streamed.store(true, std::sync::atomic::Ordering::Relaxed);
            if let Some(f) = on_delta {
                f(text);
            }
        };
        let sink: Option<&DeltaFn<'_>> = on_delta.map(|_| &forward as &DeltaFn<'_>);
        let mut error = None;
        if self.breaker.available() {
            match self.primary.chat_with_retry(req, sink).await {
                Ok(r) => {
                    self.breaker.succeeded();
                    return Ok(r);
                }
                Err(e)
                    if !e.falls_back() || streamed.load(std::sync::atomic::Ordering::Relaxed) =>
                {
                    return Err(e);
                }
                Err(e) => {
                    if let Some(failures) = self.breaker.failed() {
                        tracing::warn!(model = %self.primary_model, failures, cooldown = ?self.breaker.cooldown, "primary model circuit open, skipping it for the cooldown");
                    }
                    error = Some(e);
                }
            }
        } else {
            tracing::debug!(model = %self.primary_model, "primary model circuit open, skipped");
        }
        for fallback in &self.chain {
            if streamed.load(std::sync::atomic::Ordering::Relaxed) {
                break;
            }
            match &error {
                Some(e) => {
                    tracing::warn!(model = %fallback.model, error = %e, "llm call failed, trying the next fallback model");
                }
                None => {
                    tracing::info!(model = %fallback.model, "primary model skipped, trying a fallback model");
                }
            }
            let mut next = req.clone();
            next.model = fallback.model.clone();
            next.temperature = fallback.temperature;
            next.max_tokens = fallback.max_tokens;
            next.reasoning_effort = fallback.reasoning_effort.clone();
            match fallback.provider.chat_with_retry(&next, sink).await {
                Ok(mut r) => {
                    r.model = Some(fallback.model.clone());
                    return Ok(r);
                }
                Err(e) => error = Some(e),
            }
        }
        Err(error.unwrap_or_else(|| {
            LlmError::Transport(format!(
                "primary model '{}' circuit open and no fallbacks available",
                self.primary_model
            ))
        }))
    }
}

impl Provider {
    /// One attempt, no retries.
    pub async fn chat_once(
        &self,
        req: &ChatRequest<'_>,
        on_delta: Option<&DeltaFn<'_>>,
    ) -> Result<ChatResponse, LlmError> {
        let mut response = match self {
            Self::OpenAi(p) => p.chat(req, on_delta).await?,
            Self::Anthropic(p) => p.chat(req, on_delta).await?,
            Self::Fallback(f) => return Box::pin(f.primary.chat_once(req, on_delta)).await,
        };
        // As 0.3.5's `extract_reasoning`: the reply loses its inline reasoning tags; the
        // message keeps only the reasoning the provider sent apart (`reasoning_content`).
        if let Some(text) = response.content.take() {
            response.content = Some(strip_think(&text).0);
        }
        Ok(response)
    }

    /// [`chat_once`](Self::chat_once) with retries on transient errors (1/2/4 s or the
    /// server's `Retry-After`).
    pub async fn chat_with_retry(
        &self,
        req: &ChatRequest<'_>,
        on_delta: Option<&DeltaFn<'_>>,
    ) -> Result<ChatResponse, LlmError> {
        if let Self::Fallback(f) = self {
            return Box::pin(f.chat(req, on_delta)).await;
        }
        let mut attempt = 0;
        loop {
            match self.chat_once(req, on_delta).await {
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

#[async_trait::async_trait]
impl ChatModel for Provider {
    async fn chat(
        &self,
        req: &ChatRequest<'_>,
        on_delta: Option<&DeltaFn<'_>>,
    ) -> Result<ChatResponse, LlmError> {
        self.chat_with_retry(req, on_delta).await
    }
}

/// Returns an HTTP client with a connect timeout; the wall timeout of a call is the runner's.
pub(crate) fn http_client(timeout: Option<Duration>) -> reqwest::Client {
    let mut builder = reqwest::Client::builder().connect_timeout(Duration::from_secs(10));
    if let Some(t) = timeout {
        builder = builder.timeout(t);
    }
    builder.build().unwrap_or_default()
}

/// Turns a non-success HTTP response into [`LlmError::Status`]. `api_key` is masked in the
/// body: a provider refusing a key may quote it, and the error is logged and may be shown.
pub(crate) async fn status_error(response: reqwest::Response, api_key: &str) -> LlmError {
    let status = response.status();
    let retry_after = response
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map(|s| Duration::from_secs_f64(s.clamp(0.0, MAX_RETRY_AFTER)));
    let mut text = response.text().await.unwrap_or_default();
    if !api_key.is_empty() {
        text = text.replace(api_key, "***");
    }
    LlmError::Status {
        status: status.as_u16(),
        body: text.chars().take(500).collect(),
        retry_after,
    }
}

/// The events of a streamed response, read whole whatever its chunking (see
/// [`nanobot_runtime::sse`]); a broken body is a transport error (its URL left out: it may
/// hold a key).
pub(crate) fn sse_events(
    response: reqwest::Response,
) -> impl futures::Stream<Item = Result<nanobot_runtime::sse::Event, LlmError>> + Send {
    use futures::StreamExt as _;
    let body = response
        .bytes_stream()
        .map(|chunk| chunk.map_err(|e| e.without_url().to_string()));
    nanobot_runtime::sse::events(body).map(|event| {
        event.map_err(|e| match e {
            nanobot_runtime::sse::SseError::Transport(e) => LlmError::Transport(e),
            nanobot_runtime::sse::SseError::Parse(e) => LlmError::Malformed(e),
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quota_429s_and_client_errors_are_not_retried() {
        let status = |status, body: &str| LlmError::Status {
            status,
            body: body.into(),
            retry_after: None,
        };
        assert!(status(429, "slow down").retryable());
        assert!(status(503, "").retryable());
        assert!(!status(429, "{\"error\":{\"code\":\"insufficient_quota\"}}").retryable());
        assert!(!status(400, "bad").retryable());
    }

    #[test]
    fn the_breaker_opens_after_three_consecutive_failures_and_half_opens_after_the_cooldown() {
        let breaker = Breaker {
            cooldown: Duration::from_millis(50),
            state: std::sync::Mutex::new((0, None)),
        };
        assert_eq!((breaker.failed(), breaker.failed()), (None, None));
        breaker.succeeded();
        assert_eq!((breaker.failed(), breaker.failed()), (None, None));
        assert!(breaker.available(), "a success reset the count");
        assert_eq!(breaker.failed(), Some(3));
        assert!(!breaker.available(), "open for the cooldown");
        let opened = breaker.state().1.unwrap();
        while opened.elapsed() < breaker.cooldown {
            std::hint::spin_loop();
        }
        assert!(breaker.available(), "half-open: one probe");
        assert_eq!(breaker.failed(), Some(4), "a failed probe opens it again");
        assert!(!breaker.available());
    }

    #[test]
    fn fallback_follows_upstreams_error_classes() {
        let status = |status, body: &str| LlmError::Status {
            status,
            body: body.into(),
            retry_after: None,
        };
        for falls_back in [
            status(503, ""),
            status(429, "slow down"),
            status(429, "insufficient_quota"),
            status(401, "bad key"),
            status(403, ""),
            LlmError::Transport("refused".into()),
        ] {
            assert!(falls_back.falls_back(), "{falls_back}");
        }
        for stays in [status(400, "bad"), status(404, ""), status(422, "")] {
            assert!(!stays.falls_back(), "{stays}");
        }
    }

    #[test]
    fn errors_are_counted_by_kind() {
        let status = |status, body: &str| LlmError::Status {
            status,
            body: body.into(),
            retry_after: None,
        };
        assert_eq!(status(429, "slow down").kind(), "rate_limited");
        assert_eq!(status(429, "insufficient_quota").kind(), "quota");
        assert_eq!(status(401, "bad key").kind(), "client_error");
        assert_eq!(status(502, "").kind(), "server_error");
        assert_eq!(LlmError::Transport("refused".into()).kind(), "transport");
        assert_eq!(LlmError::Malformed("no choices".into()).kind(), "malformed");
    }
}
