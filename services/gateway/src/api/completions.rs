//! `POST /v1/chat/completions`: validates the request, publishes it as one inbound message
//! and answers with the agent's reply, as JSON or as server-sent events.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{FromRequest as _, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use tokio::time::Instant;
use tracing::field::Empty;
use tracing::{Instrument as _, Span};

use nanobot_proto::{InboundMessage, OutboundKind, Usage};
use nanobot_runtime::bus;
use nanobot_runtime::config::BotSpec;

use super::error::ApiError;
use super::request::{self, ChatRequest};
use super::session_lock::SessionGuard;
use super::{AppState, sse};
use crate::API_CHANNEL;
use crate::outbound::Waiter;

/// Chat id (and session suffix) of requests without a `session_id`, as upstream.
const DEFAULT_CHAT: &str = "default";

/// Handles one completion request.
pub(super) async fn handle(State(state): State<AppState>, request: Request) -> Response {
    let in_flight = state.inner.health.track();
    let span = tracing::info_span!(
        "api_completion",
        bot = Empty,
        session_key = Empty,
        inbound_id = Empty
    );
    let answer = async move {
        let headers = request.headers().clone();
        let body = read_body(request, state.inner.read_timeout).await;
        match accept(&state, &headers, body).await {
            Ok(turn) if turn.stream => sse::respond(turn, in_flight),
            Ok(turn) => match turn.wait_final().await {
                Ok((model, content, usage)) => {
                    Json(completion(&model, &content, usage)).into_response()
                }
                Err(e) => e.into_response(),
            },
            Err(e) => e.into_response(),
        }
    };
    answer.instrument(span).await
}

/// Validates the request and publishes it; returns the turn waiting for its reply.
async fn accept(
    state: &AppState,
    headers: &HeaderMap,
    body: Result<Bytes, ApiError>,
) -> Result<Turn, ApiError> {
    state.authorize(headers)?;
    let bot = state.bot(headers)?;
    let body = body?;
    let req = ChatRequest::parse(&body)?;
    req.check_model(&bot.model)?;
    let deadline = Instant::now() + state.inner.timeout;
    let chat_id = req
        .session_id
        .clone()
        .unwrap_or_else(|| DEFAULT_CHAT.to_string());
    let session_key = format!("{API_CHANNEL}:{chat_id}");
    let id = uuid::Uuid::new_v4().to_string();
    let span = Span::current();
    span.record("bot", bot.id.as_str());
    // The request is the root of the turn's trace; every span of it carries bot and channel.
    nanobot_runtime::telemetry::root(&span, &bot.id, API_CHANNEL);
    span.record("session_key", session_key.as_str());
    span.record("inbound_id", id.as_str());
    publish(state, &bot, req, chat_id, session_key, id, deadline).await
}

async fn publish(
    state: &AppState,
    bot: &BotSpec,
    req: ChatRequest,
    chat_id: String,
    session_key: String,
    id: String,
    deadline: Instant,
) -> Result<Turn, ApiError> {
    let media = request::save_images(req.images, &request::media_dir(&bot.workspace)).await?;
    let session = tokio::time::timeout_at(deadline, state.inner.locks.acquire(&session_key))
        .await
        .map_err(|_| ApiError::Timeout {
            secs: state.inner.timeout_secs,
        })?;
    let msg = InboundMessage {
        id: id.clone(),
        bot: bot.id.clone(),
        channel: API_CHANNEL.into(),
        sender_id: API_CHANNEL.into(),
        chat_id,
        content: req.text,
        timestamp_ms: now_ms(),
        media,
        metadata_json: "{}".into(),
        session_key,
        stream: req.stream,
        reply_channel: String::new(),
        reply_chat_id: String::new(),
    };
    // Registered before publishing, so the reply cannot arrive before anyone waits for it.
    let waiter = state.inner.pending.register(&id);
    bus::publish(&state.inner.js, msg.subject(), Some(&id), &msg)
        .await
        .map_err(|e| ApiError::internal("publish the inbound message", e))?;
    tracing::info!(stream = req.stream, "completion request published");
    Ok(Turn {
        model: bot.model.clone(),
        stream: req.stream,
        include_usage: req.include_usage,
        waiter,
        deadline,
        timeout_secs: state.inner.timeout_secs,
        span: Span::current(),
        _session: session,
    })
}

/// Reads the whole body (at most [`super::MAX_BODY_BYTES`]) within `deadline`, so a client
/// trickling its body cannot hold the request open.
pub(super) async fn read_body(request: Request, deadline: Duration) -> Result<Bytes, ApiError> {
    match tokio::time::timeout(deadline, Bytes::from_request(request, &())).await {
        Ok(body) => body.map_err(body_error),
        Err(_) => Err(ApiError::BodyTimeout {
            secs: deadline.as_secs(),
        }),
    }
}

fn body_error(rejection: BytesRejection) -> ApiError {
    if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
        ApiError::TooLarge("Request body too large".into())
    } else {
        ApiError::BadRequest("Invalid JSON body".into())
    }
}

/// A published request waiting for its reply; holds its session until dropped.
#[derive(Debug)]
pub(super) struct Turn {
    pub(super) model: String,
    pub(super) stream: bool,
    /// `stream_options.include_usage`.
    pub(super) include_usage: bool,
    pub(super) waiter: Waiter,
    pub(super) deadline: Instant,
    pub(super) timeout_secs: f64,
    /// The request's span (bot, session, inbound id), for what happens after the handler.
    pub(super) span: Span,
    _session: SessionGuard,
}

impl Turn {
    /// Waits for the final reply; returns the model name, the reply text and the turn's usage.
    async fn wait_final(mut self) -> Result<(String, String, Option<Usage>), ApiError> {
        loop {
            let reply = match tokio::time::timeout_at(self.deadline, self.waiter.recv()).await {
                Err(_) => {
                    return Err(ApiError::Timeout {
                        secs: self.timeout_secs,
                    });
                }
                Ok(None) => return Err(ApiError::internal("wait for the reply", Unregistered)),
                Ok(Some(reply)) => reply,
            };
            match reply.kind() {
                OutboundKind::Final => {
                    nanobot_runtime::metrics::get().delivery(&reply.bot, API_CHANNEL, "delivered");
                    // The model that answered: a fallback's when the primary failed.
                    let model = if reply.model.is_empty() {
                        self.model
                    } else {
                        reply.model
                    };
                    return Ok((model, reply.content, reply.usage));
                }
                OutboundKind::Error => return Err(ApiError::Agent(reply.content)),
                // Progress, tool hints and stream events are not part of a JSON answer.
                _ => {}
            }
        }
    }
}

/// The reply registration of a request vanished while it waited.
#[derive(Debug, thiserror::Error)]
#[error("reply registration vanished")]
pub(super) struct Unregistered;

/// Returns an OpenAI `usage` object (zeros when the reply carried none: a command's).
pub(super) fn usage_json(usage: Option<Usage>) -> serde_json::Value {
    let u = usage.unwrap_or_default();
    serde_json::json!({
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "total_tokens": u.total_tokens,
    })
}

/// Returns an OpenAI `chat.completion` object.
fn completion(model: &str, content: &str, usage: Option<Usage>) -> serde_json::Value {
    serde_json::json!({
        "id": completion_id(),
        "object": "chat.completion",
        "created": now_secs(),
        "model": model,
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": content},
            "finish_reason": "stop",
        }],
        "usage": usage_json(usage),
    })
}

/// Returns a fresh `chatcmpl-<12 hex>` id.
pub(super) fn completion_id() -> String {
    let hex = uuid::Uuid::new_v4().simple().to_string();
    format!("chatcmpl-{}", &hex[..12])
}

/// Returns the Unix time in seconds.
pub(super) fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn now_ms() -> i64 {
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    i64::try_from(ms).unwrap_or(i64::MAX)
}
