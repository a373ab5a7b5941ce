//! The few Slack Web API calls the channel makes, over plain reqwest: `{apiBase}/{method}`
//! with the token as a Bearer header (never in a URL, so never in an error text), JSON bodies,
//! `ok: false` as [`ApiError::Slack`] with Slack's error code, 429 as
//! [`ApiError::RateLimited`] with its `Retry-After`.

use std::time::Duration;

use axum::body::Bytes;
use serde_json::Value;

/// Calls one method at most this many times when Slack rate-limits it or the network fails.
const ATTEMPTS: u32 = 3;
/// Longest wait for one call.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// A failed Web API call.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ApiError {
    /// Slack answered `ok: false`.
    #[error("slack {method} refused: {code}")]
    Slack {
        /// The method.
        method: String,
        /// Slack's error code (`invalid_auth`, `channel_not_found`, ...).
        code: String,
    },
    /// HTTP 429.
    #[error("slack {method} rate limited (retry after {retry_after:?})")]
    RateLimited {
        /// The method.
        method: String,
        /// Slack's `Retry-After`.
        retry_after: Duration,
    },
    /// Another HTTP status, or an unreadable answer.
    #[error("slack {method}: HTTP {status}")]
    Status {
        /// The method.
        method: String,
        /// The status.
        status: u16,
    },
    /// The request did not complete.
    #[error("slack {method}: {error}")]
    Network {
        /// The method.
        method: String,
        /// What failed (no token: it travels in a header).
        error: String,
    },
}

impl ApiError {
    /// Returns whether trying again later may work (network, rate limits, Slack-side errors).
    pub(crate) fn is_transient(&self) -> bool {
        match self {
            Self::Slack { code, .. } => matches!(
                code.as_str(),
                "ratelimited"
                    | "internal_error"
                    | "fatal_error"
                    | "service_unavailable"
                    | "request_timeout"
            ),
            Self::Status { status, .. } => *status >= 500,
            Self::RateLimited { .. } | Self::Network { .. } => true,
        }
    }

    /// Returns whether the token itself was refused (a configuration error, not worth retrying).
    pub(crate) fn is_bad_credentials(&self) -> bool {
        matches!(self, Self::Slack { code, .. } if matches!(code.as_str(),
            "invalid_auth" | "not_authed" | "account_inactive" | "token_revoked"
            | "token_expired" | "not_allowed_token_type"))
    }
}

/// A Web API client for one token.
#[derive(Clone)]
pub(crate) struct Api {
    http: reqwest::Client,
    base: String,
    token: String,
}

impl std::fmt::Debug for Api {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Api")
            .field("base", &self.base)
            .finish_non_exhaustive()
    }
}

impl Api {
    /// Returns the client of `token` against `base` (`https://slack.com/api`).
    pub(crate) fn new(http: reqwest::Client, base: &str, token: &str) -> Self {
        Self {
            http,
            base: base.trim_end_matches('/').to_string(),
            token: token.to_string(),
        }
    }

    /// Calls `method` with a JSON body, retrying rate limits (as told) and network failures
    /// (0.5 s, then 1 s) in place; returns the answer of an `ok: true`.
    pub(crate) async fn call(&self, method: &str, body: &Value) -> Result<Value, ApiError> {
        let mut backoff = Duration::from_millis(500);
        let mut attempt = 1;
        loop {
            let result = self.call_once(method, body).await;
            let wait = match &result {
                Err(ApiError::RateLimited { retry_after, .. }) => *retry_after,
                Err(ApiError::Network { .. }) => {
                    let wait = backoff;
                    backoff *= 2;
                    wait
                }
                _ => return result,
            };
            if attempt >= ATTEMPTS || wait > CALL_TIMEOUT {
                return result;
            }
            tracing::info!(method, attempt, wait = ?wait, "slack call retried");
            tokio::time::sleep(wait).await;
            attempt += 1;
        }
    }

    /// Calls `method` with its arguments in the query string, for the methods that take no
    /// JSON body (`files.getUploadURLExternal`, `files.completeUploadExternal`).
    pub(crate) async fn call_args(
        &self,
        method: &str,
        args: &[(&str, &str)],
    ) -> Result<Value, ApiError> {
        let mut url =
            url::Url::parse(&format!("{}/{method}", self.base)).map_err(|e| ApiError::Network {
                method: method.into(),
                error: e.to_string(),
            })?;
        url.query_pairs_mut().extend_pairs(args);
        let sent = self
            .http
            .post(url)
            .bearer_auth(&self.token)
            .timeout(CALL_TIMEOUT)
            .send()
            .await;
        let response = sent.map_err(|e| ApiError::Network {
            method: method.into(),
            error: e.without_url().to_string(),
        })?;
        answer(method, response).await
    }

    async fn call_once(&self, method: &str, body: &Value) -> Result<Value, ApiError> {
        let url = format!("{}/{method}", self.base);
        let sent = self
            .http
            .post(url)
            .bearer_auth(&self.token)
            .timeout(CALL_TIMEOUT)
            .json(body)
            .send()
            .await;
        let response = sent.map_err(|e| ApiError::Network {
            method: method.into(),
            error: e.without_url().to_string(),
        })?;
        answer(method, response).await
    }

    /// Downloads `url` (a file's `url_private_download`) with the token, reading at most
    /// `max` bytes (more is refused as `file_too_large`, never held in memory whole).
    pub(crate) async fn download(&self, url: &str, max: u64) -> Result<(String, Bytes), ApiError> {
        let method = "file download";
        let response = self
            .http
            .get(url)
            .bearer_auth(&self.token)
            .timeout(CALL_TIMEOUT)
            .send()
            .await
            .map_err(|e| ApiError::Network {
                method: method.into(),
                error: e.without_url().to_string(),
            })?;
        let status = response.status();
        if !status.is_success() {
            return Err(ApiError::Status {
                method: method.into(),
                status: status.as_u16(),
            });
        }
        let kind = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_lowercase();
        let too_large = || ApiError::Slack {
            method: method.into(),
            code: "file_too_large".into(),
        };
        if response.content_length().is_some_and(|n| n > max) {
            return Err(too_large());
        }
        let mut body = Vec::new();
        let mut response = response;
        while let Some(chunk) = response.chunk().await.map_err(|e| ApiError::Network {
            method: method.into(),
            error: e.without_url().to_string(),
        })? {
            if (body.len() + chunk.len()) as u64 > max {
                return Err(too_large());
            }
            body.extend_from_slice(&chunk);
        }
        Ok((kind, Bytes::from(body)))
    }

    /// Uploads `bytes` as `name` to the URL `files.getUploadURLExternal` handed out.
    pub(crate) async fn upload(
        &self,
        upload_url: &str,
        name: &str,
        bytes: Vec<u8>,
    ) -> Result<(), ApiError> {
        let method = "file upload";
        let part = reqwest::multipart::Part::bytes(bytes).file_name(name.to_string());
        let form = reqwest::multipart::Form::new().part("file", part);
        let response = self
            .http
            .post(upload_url)
            .timeout(CALL_TIMEOUT)
            .multipart(form)
            .send()
            .await
            .map_err(|e| ApiError::Network {
                method: method.into(),
                error: e.without_url().to_string(),
            })?;
        match response.status() {
            s if s.is_success() => Ok(()),
            s => Err(ApiError::Status {
                method: method.into(),
                status: s.as_u16(),
            }),
        }
    }
}

async fn answer(method: &str, response: reqwest::Response) -> Result<Value, ApiError> {
    let status = response.status();
    if status.as_u16() == 429 {
        let secs = response
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(1);
        return Err(ApiError::RateLimited {
            method: method.into(),
            retry_after: Duration::from_secs(secs),
        });
    }
    let unreadable = || ApiError::Status {
        method: method.into(),
        status: status.as_u16(),
    };
    if !status.is_success() {
        return Err(unreadable());
    }
    let body: Value = response.json().await.map_err(|_| unreadable())?;
    if body["ok"].as_bool() == Some(true) {
        return Ok(body);
    }
    Err(ApiError::Slack {
        method: method.into(),
        code: body["error"]
            .as_str()
            .unwrap_or("unknown_error")
            .to_string(),
    })
}
