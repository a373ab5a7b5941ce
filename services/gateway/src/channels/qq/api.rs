//! QQ's OpenAPI over reqwest: the app access token (fetched with `appId` and `clientSecret`,
//! kept in this process and fetched again a minute before it expires), `GET /gateway`, and
//! the `/v2` message and file endpoints. Every call carries `Authorization: QQBot {token}` and
//! `X-Union-Appid`; the token and the secret are never logged and never part of a key.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::sync::Mutex;

use nanobot_runtime::config::qq::QqConfig;

/// Longest a REST call may take.
const REST_TIMEOUT: Duration = Duration::from_secs(30);
/// A token is fetched again this long before it expires (QQ hands out a new one within its
/// last 60 seconds; the old one stays valid until it expires).
const REFRESH_BEFORE: Duration = Duration::from_secs(50);

/// A failed QQ call.
#[derive(Debug, thiserror::Error)]
pub(super) enum ApiError {
    /// The app id or secret was refused: nothing will work until the config changes.
    #[error("credentials refused: {0}")]
    Credentials(String),
    /// Worth retrying (network, 5xx, rate limit, an expired token).
    #[error("transient: {0}")]
    Transient(String),
    /// QQ refused the request (`code` is QQ's error code, 0 when none).
    #[error("refused ({status}, code {code}): {message}")]
    Refused {
        /// HTTP status.
        status: u16,
        /// QQ's error code.
        code: i64,
        /// QQ's message.
        message: String,
    },
}

impl ApiError {
    /// Returns QQ's error code of a refusal (0 otherwise).
    pub(super) fn code(&self) -> i64 {
        match self {
            Self::Refused { code, .. } => *code,
            _ => 0,
        }
    }
}

/// Returns whether a token valid until `until` is still used at `now` (not within
/// [`REFRESH_BEFORE`] of its end).
fn fresh(until: Instant, now: Instant) -> bool {
    now + REFRESH_BEFORE < until
}

/// The REST client of one app.
pub(super) struct Api {
    http: reqwest::Client,
    api_base: String,
    token_url: String,
    app_id: String,
    secret: String,
    token: Mutex<Option<(String, Instant)>>,
}

impl std::fmt::Debug for Api {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Api")
            .field("api_base", &self.api_base)
            .field("app_id", &self.app_id)
            .finish_non_exhaustive()
    }
}

impl Api {
    /// Returns the client of `cfg`'s app.
    pub(super) fn new(cfg: &QqConfig) -> anyhow::Result<Self> {
        Ok(Self {
            http: reqwest::Client::builder().timeout(REST_TIMEOUT).build()?,
            api_base: cfg.api_base.trim_end_matches('/').to_string(),
            token_url: cfg.token_url.clone(),
            app_id: cfg.app_id.clone(),
            secret: cfg.secret.clone(),
            token: Mutex::new(None),
        })
    }

    /// Returns a valid access token, fetching one when none is cached or it expires soon.
    pub(super) async fn token(&self) -> Result<String, ApiError> {
        let mut cached = self.token.lock().await;
        if let Some((token, until)) = cached.as_ref()
            && fresh(*until, Instant::now())
        {
            return Ok(token.clone());
        }
        let (token, ttl) = self.fetch_token().await?;
        *cached = Some((token.clone(), Instant::now() + ttl));
        Ok(token)
    }

    /// Forgets the cached token (QQ said it is no longer valid).
    pub(super) async fn forget_token(&self) {
        *self.token.lock().await = None;
    }

    async fn fetch_token(&self) -> Result<(String, Duration), ApiError> {
        let body = json!({"appId": self.app_id, "clientSecret": self.secret});
        let response = self
            .http
            .post(&self.token_url)
            .json(&body)
            .send()
            .await
            .map_err(|e| ApiError::Transient(format!("access token: {}", e.without_url())))?;
        let status = response.status();
        if status.is_server_error() || status.as_u16() == 429 {
            return Err(ApiError::Transient(format!("access token: HTTP {status}")));
        }
        let reply: Value = response
            .json()
            .await
            .map_err(|e| ApiError::Transient(format!("access token unreadable: {e}")))?;
        let Some(token) = reply["access_token"].as_str().filter(|t| !t.is_empty()) else {
            let message = reply["message"].as_str().unwrap_or("no access_token");
            return Err(ApiError::Credentials(format!(
                "HTTP {status}, code {}: {message}",
                reply["code"]
            )));
        };
        // QQ sends `expires_in` as a string of seconds.
        let secs = match &reply["expires_in"] {
            Value::String(s) => s.parse().unwrap_or(7200),
            v => v.as_u64().unwrap_or(7200),
        };
        Ok((token.to_string(), Duration::from_secs(secs)))
    }

    /// Returns the WebSocket URL of `GET /gateway`.
    pub(super) async fn gateway_url(&self) -> Result<String, ApiError> {
        let reply = self.call(reqwest::Method::GET, "/gateway", None).await?;
        reply["url"]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| ApiError::Transient("GET /gateway named no url".into()))
    }

    /// POSTs `body` to `path` (under the API root) and returns QQ's answer.
    pub(super) async fn post(&self, path: &str, body: &Value) -> Result<Value, ApiError> {
        self.call(reqwest::Method::POST, path, Some(body)).await
    }

    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value, ApiError> {
        let token = self.token().await?;
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.api_base))
            .header("Authorization", format!("QQBot {token}"))
            .header("X-Union-Appid", &self.app_id);
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request
            .send()
            .await
            .map_err(|e| ApiError::Transient(e.without_url().to_string()))?;
        let status = response.status();
        let reply: Value = response.json().await.unwrap_or(Value::Null);
        if status.is_success() {
            return Ok(reply);
        }
        if status.as_u16() == 401 {
            self.forget_token().await;
        }
        if status.is_server_error() || matches!(status.as_u16(), 401 | 429) {
            return Err(ApiError::Transient(format!(
                "HTTP {status}: {}",
                reply["message"].as_str().unwrap_or_default()
            )));
        }
        Err(ApiError::Refused {
            status: status.as_u16(),
            code: reply["code"].as_i64().unwrap_or(0),
            message: reply["message"].as_str().unwrap_or_default().to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_fetched_again_within_50_seconds_of_its_expiry() {
        let now = Instant::now();
        assert!(fresh(now + Duration::from_secs(7200), now));
        assert!(fresh(now + Duration::from_secs(51), now));
        assert!(!fresh(now + Duration::from_secs(50), now));
        assert!(!fresh(now, now), "expired");
    }
}
