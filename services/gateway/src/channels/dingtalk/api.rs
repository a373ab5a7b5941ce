//! DingTalk's HTTP APIs, as 0.3.5 calls them: the app access token
//! (`POST {apiBase}/v1.0/oauth2/accessToken` with `appKey`/`appSecret`, cached until 60 s
//! before it expires), the Stream gateway's connection ticket
//! (`POST {apiBase}/v1.0/gateway/connections/open`), robot messages
//! (`/v1.0/robot/oToMessages/batchSend` to a user, `/v1.0/robot/groupMessages/send` to a
//! group, header `x-acs-dingtalk-access-token`), the download URL of a received file
//! (`/v1.0/robot/messageFiles/download`) and media upload (`POST {oapiBase}/media/upload`).
//!
//! The client secret goes only in request bodies; the access token in a header, except the
//! legacy upload which takes it as a query parameter: errors are reported without their URL.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::sync::Mutex;

/// Topic of robot messages on the Stream gateway.
pub(super) const BOT_MESSAGE_TOPIC: &str = "/v1.0/im/bot/messages/get";

/// A failed call.
#[derive(Debug, thiserror::Error)]
pub(super) enum ApiError {
    /// DingTalk refused the app's credentials (the channel cannot work).
    #[error("credentials rejected: {0}")]
    Rejected(String),
    /// Worth retrying (network, 5xx, 429, an expired token).
    #[error("transient: {0}")]
    Transient(String),
    /// Never going to work (a bad request).
    #[error("{0}")]
    Permanent(String),
}

/// The HTTP client of one app.
pub(super) struct Api {
    http: reqwest::Client,
    api_base: String,
    oapi_base: String,
    client_id: String,
    client_secret: String,
    token: Mutex<Option<(String, Instant)>>,
}

impl Api {
    /// Returns the client of app `client_id`.
    pub(super) fn new(
        http: reqwest::Client,
        cfg: &nanobot_runtime::config::dingtalk::DingTalkConfig,
    ) -> Self {
        Self {
            http,
            api_base: cfg.api_base.trim_end_matches('/').to_string(),
            oapi_base: cfg.oapi_base.trim_end_matches('/').to_string(),
            client_id: cfg.client_id.clone(),
            client_secret: cfg.client_secret.clone(),
            token: Mutex::new(None),
        }
    }

    /// Returns the app access token, fetched when none is cached or it expires within 60 s.
    pub(super) async fn token(&self) -> Result<String, ApiError> {
        let mut cached = self.token.lock().await;
        if let Some((token, until)) = cached.as_ref()
            && Instant::now() < *until
        {
            return Ok(token.clone());
        }
        let body = json!({"appKey": self.client_id, "appSecret": self.client_secret});
        let answer = self
            .post(
                "accessToken",
                &format!("{}/v1.0/oauth2/accessToken", self.api_base),
                &body,
                None,
            )
            .await
            .map_err(credentials_refused)?;
        let token = answer["accessToken"]
            .as_str()
            .filter(|t| !t.is_empty())
            .ok_or_else(|| ApiError::Transient("accessToken answered no token".into()))?
            .to_string();
        let secs = answer["expireIn"]
            .as_u64()
            .unwrap_or(7200)
            .saturating_sub(60);
        *cached = Some((token.clone(), Instant::now() + Duration::from_secs(secs)));
        Ok(token)
    }

    /// Forgets the cached token (DingTalk answered 401 with it).
    async fn forget_token(&self) {
        *self.token.lock().await = None;
    }

    /// Asks for a Stream connection subscribed to robot messages: `(endpoint, ticket)`.
    pub(super) async fn open_connection(&self) -> Result<(String, String), ApiError> {
        let body = json!({
            "clientId": self.client_id,
            "clientSecret": self.client_secret,
            "subscriptions": [{"type": "CALLBACK", "topic": BOT_MESSAGE_TOPIC}],
            "ua": concat!("nanobot-fleet/", env!("CARGO_PKG_VERSION")),
        });
        let url = format!("{}/v1.0/gateway/connections/open", self.api_base);
        let answer = self
            .post("connections/open", &url, &body, None)
            .await
            .map_err(credentials_refused)?;
        match (answer["endpoint"].as_str(), answer["ticket"].as_str()) {
            (Some(endpoint), Some(ticket)) if !endpoint.is_empty() => {
                Ok((endpoint.to_string(), ticket.to_string()))
            }
            _ => Err(ApiError::Transient(
                "connections/open answered no endpoint or ticket".into(),
            )),
        }
    }

    /// Sends one robot message (`msgKey` with its `msgParam`) to `chat`: `group:{id}` is a
    /// group conversation, anything else a user's staff id.
    pub(super) async fn send(&self, chat: &str, key: &str, param: &Value) -> Result<(), ApiError> {
        let param = param.to_string();
        let (url, body) = match chat.strip_prefix("group:") {
            Some(group) => (
                format!("{}/v1.0/robot/groupMessages/send", self.api_base),
                json!({"robotCode": self.client_id, "openConversationId": group,
                       "msgKey": key, "msgParam": param}),
            ),
            None => (
                format!("{}/v1.0/robot/oToMessages/batchSend", self.api_base),
                json!({"robotCode": self.client_id, "userIds": [chat],
                       "msgKey": key, "msgParam": param}),
            ),
        };
        self.call_with_token("robot send", &url, &body)
            .await
            .map(drop)
    }

    /// Returns the temporary download URL of a received file's `downloadCode`.
    pub(super) async fn download_url(&self, code: &str) -> Result<String, ApiError> {
        let url = format!("{}/v1.0/robot/messageFiles/download", self.api_base);
        let body = json!({"downloadCode": code, "robotCode": self.client_id});
        let answer = self
            .call_with_token("messageFiles/download", &url, &body)
            .await?;
        answer["downloadUrl"]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| ApiError::Permanent("messageFiles/download answered no URL".into()))
    }

    /// Uploads a file (`kind`: image, voice, video or file) and returns its media id.
    pub(super) async fn upload(
        &self,
        kind: &str,
        name: &str,
        bytes: Vec<u8>,
    ) -> Result<String, ApiError> {
        let token = self.token().await?;
        let mime = mime_guess::from_path(name).first_or_octet_stream();
        let part = reqwest::multipart::Part::bytes(bytes)
            .file_name(name.to_string())
            .mime_str(mime.as_ref())
            .map_err(|e| ApiError::Permanent(e.without_url().to_string()))?;
        let form = reqwest::multipart::Form::new().part("media", part);
        let response = self
            .http
            .post(upload_url(&self.oapi_base, &token, kind))
            .multipart(form)
            .send()
            .await
            .map_err(|e| ApiError::Transient(format!("media upload: {}", e.without_url())))?;
        let answer = read("media upload", response).await?;
        if answer["errcode"].as_i64().unwrap_or(0) != 0 {
            return Err(ApiError::Permanent(format!(
                "media upload: errcode {} {}",
                answer["errcode"], answer["errmsg"]
            )));
        }
        ["media_id", "mediaId"]
            .iter()
            .find_map(|k| answer[k].as_str())
            .map(str::to_string)
            .ok_or_else(|| ApiError::Permanent("media upload answered no media_id".into()))
    }

    /// Calls with the access token; one DingTalk refuses (expired, revoked) is forgotten and
    /// the call made once more with a fresh one.
    async fn call_with_token(
        &self,
        what: &str,
        url: &str,
        body: &Value,
    ) -> Result<Value, ApiError> {
        let token = self.token().await?;
        match self.post(what, url, body, Some(&token)).await {
            Err(ApiError::Rejected(why)) => {
                tracing::info!(call = what, reason = %why, "dingtalk access token refused; fetching a new one");
                self.forget_token().await;
                let token = self.token().await?;
                self.post(what, url, body, Some(&token))
                    .await
                    .map_err(|e| match e {
                        ApiError::Rejected(why) => ApiError::Transient(format!(
                            "{what}: a fresh token refused too ({why})"
                        )),
                        e => e,
                    })
            }
            other => other,
        }
    }

    async fn post(
        &self,
        what: &str,
        url: &str,
        body: &Value,
        token: Option<&str>,
    ) -> Result<Value, ApiError> {
        let mut request = self.http.post(url).json(body);
        if let Some(token) = token {
            request = request.header("x-acs-dingtalk-access-token", token);
        }
        let response = request
            .send()
            .await
            .map_err(|e| ApiError::Transient(format!("{what}: {}", e.without_url())))?;
        read(what, response).await
    }
}

/// Returns the legacy upload URL (its API takes the token as a query parameter).
fn upload_url(oapi_base: &str, token: &str, kind: &str) -> String {
    let query: String = url::form_urlencoded::Serializer::new(String::new())
        .append_pair("access_token", token)
        .append_pair("type", kind)
        .finish();
    format!("{oapi_base}/media/upload?{query}")
}

/// Reads an answer: 2xx its JSON; 401/403 rejected; 429 and 5xx transient; other 4xx
/// permanent. DingTalk's `code`/`message` are kept, nothing else.
async fn read(what: &str, response: reqwest::Response) -> Result<Value, ApiError> {
    let status = response.status();
    let text = response.text().await.unwrap_or_default();
    let answer: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
    if status.is_success() {
        return Ok(answer);
    }
    let why = format!(
        "{what}: HTTP {} {} {}",
        status.as_u16(),
        answer["code"].as_str().unwrap_or_default(),
        answer["message"].as_str().unwrap_or_default()
    )
    .trim_end()
    .to_string();
    match status.as_u16() {
        401 | 403 => Err(ApiError::Rejected(why)),
        429 | 500.. => Err(ApiError::Transient(why)),
        _ => Err(ApiError::Permanent(why)),
    }
}

/// On the two calls that carry only the credentials, a refusal of any kind (DingTalk answers
/// 400 `invalidClientIdOrSecret` as well as 401) means the credentials.
fn credentials_refused(e: ApiError) -> ApiError {
    match e {
        ApiError::Permanent(why) => ApiError::Rejected(why),
        e => e,
    }
}
