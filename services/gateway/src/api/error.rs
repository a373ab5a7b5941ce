//! API errors and their upstream-compatible body `{"error":{"message","type","code"}}`.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use crate::error::{ErrorKind, UserFacingError};

/// Text of every internal failure shown to API users, as upstream.
const INTERNAL: &str = "Internal server error";

/// A failed API request.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The request is malformed or asks for something not offered (400).
    #[error("bad request: {0}")]
    BadRequest(String),
    /// No `Authorization: Bearer …` header while an API key is configured (401).
    #[error("missing authorization header")]
    MissingAuth,
    /// The bearer token does not match (401).
    #[error("invalid api key")]
    InvalidKey,
    /// `X-Nanobot-Bot` names no configured bot (404).
    #[error("unknown bot {0:?}")]
    UnknownBot(String),
    /// An admin endpoint this gateway does not offer (no API key configured, or a per-bot
    /// gateway); the text says why (403).
    #[error("forbidden: {0}")]
    Forbidden(String),
    /// The change conflicts with the registry's state (the bot exists, or changed meanwhile) (409).
    #[error("conflict: {0}")]
    Conflict(String),
    /// A store the endpoint reads is not available (no bot registry, Redis down) (503).
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// The body or an attachment is too large (413).
    #[error("too large: {0}")]
    TooLarge(String),
    /// The body did not arrive within `api.readTimeoutSecs` (408).
    #[error("request body not received within {secs} seconds")]
    BodyTimeout {
        /// The read deadline.
        secs: u64,
    },
    /// No reply within `api.timeout` seconds (504).
    #[error("no reply within {secs}s")]
    Timeout {
        /// The configured timeout, shown as upstream formats it (`120.0`).
        secs: f64,
    },
    /// The agent answered with an error; its text is meant for users (500).
    #[error("agent error: {0}")]
    Agent(String),
    /// The gateway failed; the cause stays in logs (500).
    #[error("{context}: {cause:#}")]
    Internal {
        /// What was being done.
        context: &'static str,
        /// Why it failed.
        #[source]
        cause: anyhow::Error,
    },
}

impl ApiError {
    /// Returns an internal error with its cause (logged, never shown).
    pub fn internal(context: &'static str, cause: impl Into<anyhow::Error>) -> Self {
        Self::Internal {
            context,
            cause: cause.into(),
        }
    }

    /// Returns the HTTP status.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::BadRequest(_) => StatusCode::BAD_REQUEST,
            Self::MissingAuth | Self::InvalidKey => StatusCode::UNAUTHORIZED,
            Self::UnknownBot(_) => StatusCode::NOT_FOUND,
            Self::Forbidden(_) => StatusCode::FORBIDDEN,
            Self::Conflict(_) => StatusCode::CONFLICT,
            Self::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            Self::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            Self::BodyTimeout { .. } => StatusCode::REQUEST_TIMEOUT,
            Self::Timeout { .. } => StatusCode::GATEWAY_TIMEOUT,
            Self::Agent(_) | Self::Internal { .. } => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// Returns the OpenAI-style error `type`; upstream's `_error_json` gives authentication
    /// failures its default `invalid_request_error` too.
    pub fn error_type(&self) -> &'static str {
        match self {
            Self::Agent(_) | Self::Internal { .. } | Self::Unavailable(_) => "server_error",
            _ => "invalid_request_error",
        }
    }

    /// Returns the upstream error body.
    pub fn body(&self) -> serde_json::Value {
        serde_json::json!({
            "error": {
                "message": self.to_user_message(),
                "type": self.error_type(),
                "code": self.status().as_u16(),
            }
        })
    }
}

impl UserFacingError for ApiError {
    fn to_user_message(&self) -> String {
        match self {
            Self::BadRequest(text)
            | Self::TooLarge(text)
            | Self::Forbidden(text)
            | Self::Conflict(text)
            | Self::Unavailable(text) => text.clone(),
            Self::MissingAuth => "Missing Authorization header. Use: Bearer <api_key>".into(),
            Self::InvalidKey => "Invalid API key".into(),
            Self::UnknownBot(bot) => format!("Unknown bot '{bot}'"),
            Self::Timeout { secs } => format!("Request timed out after {secs:?}s"),
            Self::BodyTimeout { secs } => format!("Request body not received within {secs}s"),
            Self::Agent(text) if !text.trim().is_empty() => text.clone(),
            Self::Agent(_) | Self::Internal { .. } => INTERNAL.into(),
        }
    }

    fn kind(&self) -> ErrorKind {
        match self {
            Self::BadRequest(_) | Self::Conflict(_) => ErrorKind::Request,
            Self::MissingAuth | Self::InvalidKey | Self::Forbidden(_) => ErrorKind::Auth,
            Self::Unavailable(_) => ErrorKind::Internal,
            Self::UnknownBot(_) => ErrorKind::NotFound,
            Self::TooLarge(_) => ErrorKind::TooLarge,
            Self::Timeout { .. } | Self::BodyTimeout { .. } => ErrorKind::Timeout,
            Self::Agent(_) => ErrorKind::Agent,
            Self::Internal { .. } => ErrorKind::Internal,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let kind = self.kind().as_str();
        match &self {
            Self::Internal { .. } => tracing::error!(kind, "failed to {self:#}"),
            _ => tracing::info!(kind, status = self.status().as_u16(), "api request refused"),
        }
        (self.status(), Json(self.body())).into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn internal_detail_never_reaches_the_body() {
        let err = ApiError::internal("publish inbound", anyhow::anyhow!("nats: connection reset"));
        let body = err.body().to_string();
        assert!(!body.contains("nats"), "{body}");
        assert_eq!(err.body()["error"]["message"], "Internal server error");
        assert_eq!(err.body()["error"]["type"], "server_error");
        assert_eq!(err.body()["error"]["code"], 500);
    }

    #[test]
    fn timeout_text_formats_seconds_as_upstream() {
        assert_eq!(
            ApiError::Timeout { secs: 120.0 }.to_user_message(),
            "Request timed out after 120.0s"
        );
        assert_eq!(
            ApiError::Timeout { secs: 0.5 }.to_user_message(),
            "Request timed out after 0.5s"
        );
    }

    #[test]
    fn empty_agent_error_falls_back_to_the_generic_text() {
        assert_eq!(
            ApiError::Agent(" ".into()).to_user_message(),
            "Internal server error"
        );
        assert_eq!(
            ApiError::Agent("LLM down".into()).to_user_message(),
            "LLM down"
        );
    }
}
