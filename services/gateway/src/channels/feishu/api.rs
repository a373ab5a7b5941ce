//! The open platform's REST calls over plain reqwest: `{root}/open-apis/...` with the tenant
//! access token as a Bearer header (never in a URL, so never in an error text); an answer's
//! non-zero `code` is [`ApiError::Feishu`] with Feishu's code and message.
//!
//! The tenant access token (`/open-apis/auth/v3/tenant_access_token/internal`, valid two hours)
//! is kept in memory by each replica and fetched again ten minutes before it expires, or at
//! once when Feishu calls it invalid. It is a bearer secret: shared through Redis it would sit
//! there in clear, and a replica fetching its own costs one request per two hours.

use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{Value, json};
use tokio::sync::Mutex;

/// Longest wait for one call.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// A token is fetched again this long before it expires.
const REFRESH_BEFORE: Duration = Duration::from_secs(600);
/// Feishu's codes for an invalid or expired tenant access token.
const TOKEN_INVALID: &[i64] = &[99991661, 99991663, 99991668];
/// Feishu's codes for "too many requests".
const RATE_LIMITED: &[i64] = &[99991400, 11232, 230020];

/// A failed call.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ApiError {
    /// Feishu answered a non-zero `code`.
    #[error("feishu {path} refused: code {code}: {msg}")]
    Feishu {
        /// The path called.
        path: String,
        /// Feishu's code.
        code: i64,
        /// Feishu's message.
        msg: String,
    },
    /// Another HTTP status with no readable answer.
    #[error("feishu {path}: HTTP {status}")]
    Status {
        /// The path called.
        path: String,
        /// The status.
        status: u16,
    },
    /// The request did not complete.
    #[error("feishu {path}: {error}")]
    Network {
        /// The path called.
        path: String,
        /// What failed (no secret: the token travels in a header).
        error: String,
    },
}

impl ApiError {
    /// Returns whether trying again later may work.
    pub(crate) fn is_transient(&self) -> bool {
        match self {
            Self::Feishu { code, .. } => {
                RATE_LIMITED.contains(code) || TOKEN_INVALID.contains(code)
            }
            Self::Status { status, .. } => *status >= 500 || *status == 429,
            Self::Network { .. } => true,
        }
    }
}

/// One app's REST client.
pub(crate) struct Api {
    http: reqwest::Client,
    root: String,
    app_id: String,
    app_secret: String,
    token: Mutex<Option<(String, Instant)>>,
}

impl std::fmt::Debug for Api {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Api")
            .field("root", &self.root)
            .field("app_id", &self.app_id)
            .finish_non_exhaustive()
    }
}

impl Api {
    /// Returns the client of app `app_id` against `root` (`https://open.feishu.cn`).
    pub(crate) fn new(http: reqwest::Client, root: &str, app_id: &str, app_secret: &str) -> Self {
        Self {
            http,
            root: root.trim_end_matches('/').to_string(),
            app_id: app_id.into(),
            app_secret: app_secret.into(),
            token: Mutex::new(None),
        }
    }

    /// Returns the open platform's root.
    pub(crate) fn root(&self) -> &str {
        &self.root
    }

    /// Returns the app's credentials as the long connection's endpoint wants them.
    pub(crate) fn credentials(&self) -> Value {
        json!({"AppID": self.app_id, "AppSecret": self.app_secret})
    }

    /// Returns a valid tenant access token, fetching one when there is none or it is about to
    /// expire.
    pub(crate) async fn token(&self) -> Result<String, ApiError> {
        let mut held = self.token.lock().await;
        if let Some((token, until)) = held.as_ref()
            && Instant::now() + REFRESH_BEFORE < *until
        {
            return Ok(token.clone());
        }
        let path = "/open-apis/auth/v3/tenant_access_token/internal";
        let body = json!({"app_id": self.app_id, "app_secret": self.app_secret});
        let answer = self.send(Method::POST, path, None, Some(&body)).await?;
        let token = answer["tenant_access_token"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let expire = answer["expire"].as_u64().unwrap_or(7200);
        *held = Some((token.clone(), Instant::now() + Duration::from_secs(expire)));
        tracing::debug!(app_id = %self.app_id, expire, "feishu tenant access token fetched");
        Ok(token)
    }

    /// Calls `path` with the tenant token and a JSON body; a token Feishu calls invalid is
    /// fetched again and the call made once more.
    pub(crate) async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value, ApiError> {
        let token = self.token().await?;
        match self.send(method.clone(), path, Some(&token), body).await {
            Err(ApiError::Feishu { code, .. }) if TOKEN_INVALID.contains(&code) => {
                self.token.lock().await.take();
                let token = self.token().await?;
                self.send(method, path, Some(&token), body).await
            }
            other => other,
        }
    }

    /// Posts a multipart form (an image or file upload) with the tenant token.
    pub(crate) async fn upload(
        &self,
        path: &str,
        form: reqwest::multipart::Form,
    ) -> Result<Value, ApiError> {
        let token = self.token().await?;
        let sent = self
            .http
            .post(format!("{}{path}", self.root))
            .bearer_auth(token)
            .timeout(Duration::from_secs(120))
            .multipart(form)
            .send()
            .await;
        let response = sent.map_err(|e| network(path, e))?;
        answer(path, response).await
    }

    /// Downloads a message resource (at most `max` bytes); returns its content type and bytes.
    pub(crate) async fn download(
        &self,
        path: &str,
        max: u64,
    ) -> Result<(String, Vec<u8>), ApiError> {
        let token = self.token().await?;
        let response = self
            .http
            .get(format!("{}{path}", self.root))
            .bearer_auth(token)
            .timeout(Duration::from_secs(120))
            .send()
            .await
            .map_err(|e| network(path, e))?;
        let status = response.status();
        let kind = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        if !status.is_success() || kind.starts_with("application/json") {
            return answer(path, response).await.map(|_| (kind, Vec::new()));
        }
        let mut body = Vec::new();
        let mut response = response;
        while let Some(chunk) = response.chunk().await.map_err(|e| network(path, e))? {
            body.extend_from_slice(&chunk);
            if body.len() as u64 > max {
                return Err(ApiError::Feishu {
                    path: path.into(),
                    code: -1,
                    msg: format!("larger than {max} bytes"),
                });
            }
        }
        Ok((kind, body))
    }

    async fn send(
        &self,
        method: Method,
        path: &str,
        token: Option<&str>,
        body: Option<&Value>,
    ) -> Result<Value, ApiError> {
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.root))
            .timeout(CALL_TIMEOUT);
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request.send().await.map_err(|e| network(path, e))?;
        answer(path, response).await
    }
}

fn network(path: &str, e: reqwest::Error) -> ApiError {
    ApiError::Network {
        path: strip_query(path),
        error: e.without_url().to_string(),
    }
}

fn strip_query(path: &str) -> String {
    path.split('?').next().unwrap_or_default().to_string()
}

/// Reads an answer: `code` 0 is success; any other code, or an unreadable body, is an error.
async fn answer(path: &str, response: reqwest::Response) -> Result<Value, ApiError> {
    let status = response.status().as_u16();
    let body: Value = match response.json().await {
        Ok(v) => v,
        Err(_) => {
            return Err(ApiError::Status {
                path: strip_query(path),
                status,
            });
        }
    };
    match body["code"].as_i64() {
        Some(0) => Ok(body),
        Some(code) => Err(ApiError::Feishu {
            path: strip_query(path),
            code,
            msg: body["msg"].as_str().unwrap_or_default().to_string(),
        }),
        None if (200..300).contains(&status) => Ok(body),
        None => Err(ApiError::Status {
            path: strip_query(path),
            status,
        }),
    }
}
