//! One attempt of a tool call under the liveness protocol: the request goes out with
//! `heartbeat_ms` and a reply inbox of our own; the executor answers ACCEPTED once the call has
//! run for half a heartbeat, RUNNING every heartbeat while the tool runs, then the FINAL result
//! (a call done sooner: FINAL alone). Silence for longer than
//! [`Liveness::ack_timeout`] before the first message, or [`Liveness::silence`] after it,
//! means the executor died mid-call (a single-reply `request()` could not tell: it waits for
//! the whole deadline).

use std::time::Duration;

use bytes::Bytes;
use prost::Message as _;
use tokio::time::Instant;

use nanobot_proto::{CallState, ERROR_CODE_HEADER, ERROR_HEADER, Rpc as _, ToolCallRequest};
use nanobot_proto::{ErrorCode, ToolCallResult};
use nanobot_runtime::bus;

use super::replies::Replies;

/// Timing of the liveness protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Liveness {
    /// How often a running executor reports (sent to it as `heartbeat_ms`). Default 1 s.
    pub heartbeat: Duration,
    /// How long to wait for the executor to accept a call (or answer it): more than half a
    /// heartbeat. Default 2 s.
    pub ack_timeout: Duration,
    /// Silence after which an accepted call's executor is taken for dead. Default 3 s.
    pub silence: Duration,
}

impl Default for Liveness {
    fn default() -> Self {
        Self {
            heartbeat: Duration::from_secs(1),
            ack_timeout: Duration::from_secs(2),
            silence: Duration::from_secs(3),
        }
    }
}

/// Why an attempt produced no result.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AttemptError {
    /// No executor subscribes to the tool's subject.
    #[error("no responders")]
    NoResponders,
    /// The overall deadline passed while the executor was alive.
    #[error("deadline passed")]
    Timeout,
    /// The executor went silent: it died (or lost its connection) mid-call.
    #[error("executor went silent (accepted: {accepted})")]
    ExecutorLost {
        /// Whether the executor had acknowledged the call.
        accepted: bool,
    },
    /// The executor refused the call with an error reply.
    #[error("{code:?}: {message}")]
    Service {
        /// The stable error code.
        code: ErrorCode,
        /// The executor's error text.
        message: String,
    },
    /// Publishing, subscribing or decoding failed.
    #[error("{0}")]
    Transport(String),
}

/// Runs one attempt of `request` within `budget`, watching the executor's heartbeats. The
/// replies come through the runner's shared reply subscription ([`Replies`]).
pub async fn attempt(
    client: &async_nats::Client,
    replies: &Replies,
    request: &ToolCallRequest,
    budget: Duration,
    liveness: Liveness,
) -> Result<ToolCallResult, AttemptError> {
    let transport = |e: &dyn std::fmt::Display| AttemptError::Transport(e.to_string());
    let mut route = replies.open().await.map_err(|e| transport(&e))?;
    client
        .publish_with_reply_and_headers(
            request.subject(),
            route.inbox.clone(),
            bus::headers(None),
            Bytes::from(request.encode_to_vec()),
        )
        .await
        .map_err(|e| transport(&e))?;
    let deadline = Instant::now() + budget;
    let mut accepted = false;
    loop {
        let quiet = if accepted {
            liveness.silence
        } else {
            liveness.ack_timeout
        };
        let now = Instant::now();
        if now >= deadline {
            return Err(AttemptError::Timeout);
        }
        let wait = quiet.min(deadline - now);
        let msg = match tokio::time::timeout(wait, route.messages.recv()).await {
            Ok(Some(msg)) => msg,
            Ok(None) => return Err(AttemptError::Transport("reply subscription closed".into())),
            Err(_) if Instant::now() >= deadline => return Err(AttemptError::Timeout),
            Err(_) => return Err(AttemptError::ExecutorLost { accepted }),
        };
        if msg.status == Some(async_nats::StatusCode::NO_RESPONDERS) {
            return Err(AttemptError::NoResponders);
        }
        if let Some(refusal) = service_error(&msg) {
            return Err(refusal);
        }
        let result = ToolCallResult::decode(msg.payload).map_err(|e| transport(&e))?;
        match result.state() {
            CallState::Final => return Ok(result),
            CallState::Accepted | CallState::Running => accepted = true,
        }
    }
}

/// Returns the executor's error reply (`Nanobot-Error-Code` / `Nanobot-Error` headers).
fn service_error(msg: &async_nats::Message) -> Option<AttemptError> {
    let headers = msg.headers.as_ref()?;
    let code = headers.get(ERROR_CODE_HEADER)?;
    let message = headers
        .get(ERROR_HEADER)
        .map(|v| v.as_str().to_string())
        .unwrap_or_default();
    Some(AttemptError::Service {
        code: ErrorCode::parse(code.as_str()),
        message,
    })
}
