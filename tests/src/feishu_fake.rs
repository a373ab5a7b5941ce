//! A Feishu / Lark open-platform fake owned by the test suite, over real HTTP and WebSocket on
//! a free 127.0.0.1 port, for one app (one App ID and Secret), written from the open
//! platform's public API documentation.
//!
//! # Surface
//! - `POST /open-apis/auth/v3/tenant_access_token/internal` (`app_id`, `app_secret`; a wrong
//!   secret answers code 10014), every other call needs `Authorization: Bearer <tenant token>`
//!   (else code 99991663, HTTP 400);
//! - `GET /open-apis/bot/v3/info` (the bot's open id [`BOT_OPEN_ID`]);
//! - `POST /callback/ws/endpoint` (`AppID`, `AppSecret`) hands out the long connection's URL
//!   with a `service_id`; the WebSocket speaks [`ws`]'s frames;
//! - `POST /open-apis/im/v1/messages?receive_id_type=open_id|chat_id` and
//!   `POST /open-apis/im/v1/messages/{id}/reply`: `msg_type` `text`, `post`, `interactive`,
//!   `image`, `file`, `audio`, `media` with `content` a JSON string (a text over 150 KB or a
//!   card or post over 30 KB is refused with code 230025, as Feishu); a `uuid` seen before
//!   answers the message it created, creating none (Feishu's one-hour de-duplication);
//! - `PATCH /open-apis/im/v1/messages/{id}` replaces a card the bot sent;
//! - `POST /open-apis/im/v1/messages/{id}/reactions` and `DELETE …/reactions/{reaction_id}`;
//! - `GET /open-apis/im/v1/messages/{id}/resources/{key}?type=` serves resources added with
//!   [`FeishuFake::add_resource`];
//! - `POST /open-apis/im/v1/images` and `/open-apis/im/v1/files` (multipart) take uploads.
//!
//! # Test controls
//! [`FeishuFake::push_event`] sends an event document to one open long connection (split in
//! parts when asked); acknowledgements, pings, connections (now, total, peak) are counted;
//! [`FeishuFake::disconnect_all`] closes the long connections; [`FeishuFake::revoke_tokens`]
//! invalidates the tenant tokens handed out.
//! [`FeishuFake::set_stall`] makes message creation accept a message and then hold its answer
//! (a replica killed there has had its message posted without knowing it). Waiting is on a
//! `watch` channel bumped by every change, never a sleep.

mod ws;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, patch, post};
use serde_json::{Value, json};
use tokio::sync::{Notify, watch};

pub use self::ws::{Frame, SERVICE_ID, data_frames};

/// How long the `wait_*` helpers wait by default.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(30);
/// The bot's open id.
pub const BOT_OPEN_ID: &str = "ou_fakebot0001";
/// Feishu's limit of a text message's content, in bytes.
pub const TEXT_MAX_BYTES: usize = 150 * 1024;
/// Feishu's limit of a card's or post's content, in bytes.
pub const CARD_MAX_BYTES: usize = 30 * 1024;

/// One message the bot sent.
#[derive(Debug, Clone)]
pub struct Sent {
    /// Its id (`om_…`).
    pub message_id: String,
    /// Whom to: an open id or a chat id.
    pub receive_id: String,
    /// `open_id` or `chat_id` (empty for a reply).
    pub receive_id_type: String,
    /// The message it quotes (the reply API), if any.
    pub reply_to: Option<String>,
    /// `text`, `post`, `interactive`, `image`, `file`, …
    pub msg_type: String,
    /// The content, parsed.
    pub content: Value,
    /// The idempotency key sent.
    pub uuid: String,
    /// Times it was updated (PATCH).
    pub edits: usize,
}

impl Sent {
    /// Returns the text shown: a text's `text`, a post's paragraphs, a card's markdown.
    pub fn text(&self) -> String {
        match self.msg_type.as_str() {
            "text" => self.content["text"].as_str().unwrap_or_default().into(),
            "interactive" => self.content["elements"][0]["content"]
                .as_str()
                .unwrap_or_default()
                .into(),
            "post" => {
                let body = self
                    .content
                    .as_object()
                    .and_then(|o| o.values().next())
                    .cloned()
                    .unwrap_or_default();
                body["content"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|p| {
                        p.as_array()
                            .into_iter()
                            .flatten()
                            .map(|e| e["text"].as_str().unwrap_or_default())
                            .collect::<String>()
                    })
                    .collect::<Vec<_>>()
                    .join("\n")
            }
            _ => String::new(),
        }
    }
}

/// One recorded API call.
#[derive(Debug, Clone)]
pub struct Call {
    /// Method and path (`POST /open-apis/im/v1/messages`).
    pub route: String,
    /// The JSON body (or `null`).
    pub body: Value,
    /// Feishu's `code` answered.
    pub code: i64,
}

/// An upload (image or file).
#[derive(Debug, Clone)]
pub struct Uploaded {
    /// `image` or `file`.
    pub kind: String,
    /// The key handed out.
    pub key: String,
    /// The multipart body (the bytes are inside).
    pub body: Vec<u8>,
}

pub(crate) struct Shared {
    addr: SocketAddr,
    app_id: String,
    app_secret: String,
    tokens: Mutex<Vec<String>>,
    calls: Mutex<Vec<Call>>,
    sent: Mutex<Vec<Sent>>,
    /// `(message_id, emoji_type, reaction_id, removed)`.
    reactions: Mutex<Vec<(String, String, String, bool)>>,
    resources: Mutex<HashMap<String, (String, Vec<u8>)>>,
    uploads: Mutex<Vec<Uploaded>>,
    pub(crate) sockets: Mutex<Vec<(usize, tokio::sync::mpsc::UnboundedSender<Vec<u8>>)>>,
    pub(crate) acks: Mutex<Vec<String>>,
    pub(crate) pings: AtomicUsize,
    pub(crate) connections: AtomicUsize,
    pub(crate) peak: AtomicUsize,
    stall: AtomicBool,
    released: Notify,
    next: AtomicU64,
    turn: AtomicUsize,
    changed: watch::Sender<u64>,
}

impl Shared {
    pub(crate) fn bump(&self) {
        self.changed.send_modify(|n| *n += 1);
    }

    fn next_id(&self) -> u64 {
        self.next.fetch_add(1, Ordering::SeqCst) + 1
    }
}

/// The running fake.
pub struct FeishuFake {
    shared: Arc<Shared>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for FeishuFake {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl FeishuFake {
    /// Starts the fake for app `app_id` with `app_secret`.
    pub async fn start(app_id: &str, app_secret: &str) -> anyhow::Result<Self> {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .context("bind feishu fake")?;
        let shared = Arc::new(Shared {
            addr: listener.local_addr()?,
            app_id: app_id.into(),
            app_secret: app_secret.into(),
            tokens: Mutex::default(),
            calls: Mutex::default(),
            sent: Mutex::default(),
            reactions: Mutex::default(),
            resources: Mutex::default(),
            uploads: Mutex::default(),
            sockets: Mutex::default(),
            acks: Mutex::default(),
            pings: AtomicUsize::new(0),
            connections: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
            stall: AtomicBool::new(false),
            released: Notify::new(),
            next: AtomicU64::new(1000),
            turn: AtomicUsize::new(0),
            changed: watch::channel(0).0,
        });
        let app = Router::new()
            .route(
                "/open-apis/auth/v3/tenant_access_token/internal",
                post(token),
            )
            .route("/callback/ws/endpoint", post(endpoint))
            .route("/ws", get(ws::upgrade))
            .route("/open-apis/bot/v3/info", get(bot_info))
            .route("/open-apis/im/v1/messages", post(create))
            .route("/open-apis/im/v1/messages/{id}", patch(update))
            .route("/open-apis/im/v1/messages/{id}/reply", post(reply))
            .route("/open-apis/im/v1/messages/{id}/reactions", post(react))
            .route(
                "/open-apis/im/v1/messages/{id}/reactions/{reaction_id}",
                axum::routing::delete(unreact),
            )
            .route(
                "/open-apis/im/v1/messages/{id}/resources/{key}",
                get(resource),
            )
            .route("/open-apis/im/v1/images", post(upload_image))
            .route("/open-apis/im/v1/files", post(upload_file))
            .with_state(shared.clone());
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self { shared, server })
    }

    /// Returns the open platform's root (`channels.feishu.apiBase`).
    pub fn api_url(&self) -> String {
        format!("http://{}", self.shared.addr)
    }

    /// Makes a message resource (image or file) downloadable under `key`.
    pub fn add_resource(&self, key: &str, mime: &str, bytes: &[u8]) {
        self.shared
            .resources
            .lock()
            .unwrap()
            .insert(key.into(), (mime.into(), bytes.to_vec()));
    }

    /// Returns every API call so far.
    pub fn calls(&self) -> Vec<Call> {
        self.shared.calls.lock().unwrap().clone()
    }

    /// Returns the messages sent to `receive_id` (an open id or chat id), in order.
    pub fn sent_to(&self, receive_id: &str) -> Vec<Sent> {
        let sent = self.shared.sent.lock().unwrap();
        sent.iter()
            .filter(|s| s.receive_id == receive_id)
            .cloned()
            .collect()
    }

    /// Returns every message sent.
    pub fn sent(&self) -> Vec<Sent> {
        self.shared.sent.lock().unwrap().clone()
    }

    /// Returns the reactions on messages now, as `(message_id, emoji_type)`.
    pub fn reactions(&self) -> Vec<(String, String)> {
        let reactions = self.shared.reactions.lock().unwrap();
        reactions
            .iter()
            .filter(|r| !r.3)
            .map(|r| (r.0.clone(), r.1.clone()))
            .collect()
    }

    /// Returns the reactions added and then removed, as `(message_id, emoji_type)`.
    pub fn removed_reactions(&self) -> Vec<(String, String)> {
        let reactions = self.shared.reactions.lock().unwrap();
        reactions
            .iter()
            .filter(|r| r.3)
            .map(|r| (r.0.clone(), r.1.clone()))
            .collect()
    }

    /// Invalidates every tenant access token handed out (Feishu answers 99991663 until the
    /// client fetches a new one).
    pub fn revoke_tokens(&self) {
        self.shared.tokens.lock().unwrap().clear();
    }

    /// Returns the uploads.
    pub fn uploads(&self) -> Vec<Uploaded> {
        self.shared.uploads.lock().unwrap().clone()
    }

    /// Returns the long connections opened so far.
    pub fn connections(&self) -> usize {
        self.shared.connections.load(Ordering::SeqCst)
    }

    /// Returns the long connections open now.
    pub fn open_connections(&self) -> usize {
        self.shared.sockets.lock().unwrap().len()
    }

    /// Returns the most long connections ever open at once.
    pub fn peak_connections(&self) -> usize {
        self.shared.peak.load(Ordering::SeqCst)
    }

    /// Returns the pings received.
    pub fn pings(&self) -> usize {
        self.shared.pings.load(Ordering::SeqCst)
    }

    /// Returns whether the data frame `frame_id` was acknowledged.
    pub fn acked(&self, frame_id: &str) -> bool {
        self.shared
            .acks
            .lock()
            .unwrap()
            .iter()
            .any(|a| a == frame_id)
    }

    /// Sends an event document over one open long connection in `parts` data frames; returns
    /// the frames' message id.
    pub fn push_event(&self, doc: &Value, parts: usize) -> anyhow::Result<String> {
        let frame_id = format!("frame-{}", self.shared.next_id());
        let frames = data_frames(&frame_id, doc.to_string().as_bytes(), parts);
        let mut sockets = self.shared.sockets.lock().unwrap();
        sockets.retain(|(_, tx)| !tx.is_closed());
        anyhow::ensure!(!sockets.is_empty(), "no open long connection");
        let i = self.shared.turn.fetch_add(1, Ordering::SeqCst) % sockets.len();
        for frame in frames {
            sockets[i]
                .1
                .send(frame)
                .map_err(|_| anyhow::anyhow!("connection closed"))?;
        }
        Ok(frame_id)
    }

    /// Closes every open long connection (as Feishu does when it moves a client).
    pub fn disconnect_all(&self) {
        self.shared.sockets.lock().unwrap().clear();
        self.shared.bump();
    }

    /// Makes message creation hold its answer (after accepting the message) while `on`.
    pub fn set_stall(&self, on: bool) {
        self.shared.stall.store(on, Ordering::SeqCst);
        if !on {
            self.shared.released.notify_waiters();
        }
    }

    /// Waits until `check` returns `Some`, re-checking after every change; fails after
    /// `timeout` naming `what`.
    pub async fn wait_until<T>(
        &self,
        what: &str,
        timeout: Duration,
        mut check: impl FnMut(&FeishuFake) -> Option<T>,
    ) -> anyhow::Result<T> {
        let found = crate::harness::wait_for_change(&self.shared.changed, timeout, || check(self));
        if let Some(found) = found.await {
            return Ok(found);
        }
        let seen: Vec<String> = self.calls().iter().map(|c| c.route.clone()).collect();
        anyhow::bail!(
            "feishu fake: timed out after {timeout:?} waiting for {what}; calls: {seen:?}"
        )
    }

    /// Waits until `n` long connections are open.
    pub async fn wait_connections(&self, n: usize) -> anyhow::Result<()> {
        self.wait_until(&format!("{n} open connections"), DEFAULT_WAIT, |f| {
            (f.open_connections() >= n).then_some(())
        })
        .await
    }

    /// Waits until a message to `receive_id` matches `pred`.
    pub async fn wait_sent(
        &self,
        receive_id: &str,
        pred: impl Fn(&Sent) -> bool,
    ) -> anyhow::Result<Sent> {
        self.wait_until(&format!("a message to {receive_id}"), DEFAULT_WAIT, |f| {
            f.sent_to(receive_id).into_iter().find(|s| pred(s))
        })
        .await
    }

    /// Waits until data frame `frame_id` was acknowledged.
    pub async fn wait_acked(&self, frame_id: &str) -> anyhow::Result<()> {
        self.wait_until(&format!("ack of {frame_id}"), DEFAULT_WAIT, |f| {
            f.acked(frame_id).then_some(())
        })
        .await
    }
}

/// Returns an `im.message.receive_v1` event document (schema 2.0) carrying `token`.
pub fn message_event(token: &str, event_id: &str, message: Value, sender_open_id: &str) -> Value {
    json!({
        "schema": "2.0",
        "header": {"event_id": event_id, "event_type": "im.message.receive_v1",
            "create_time": "1700000000000", "token": token, "app_id": "cli_fake",
            "tenant_key": "tenant-fake"},
        "event": {
            "sender": {"sender_id": {"open_id": sender_open_id, "union_id": "on_x", "user_id": null},
                "sender_type": "user", "tenant_key": "tenant-fake"},
            "message": message,
        }
    })
}

/// Returns a text message object (`content` JSON-encoded as Feishu sends it).
pub fn text_message(
    message_id: &str,
    chat_id: &str,
    chat_type: &str,
    text: &str,
    mentions: Value,
) -> Value {
    json!({"message_id": message_id, "root_id": null, "parent_id": null,
        "create_time": "1700000000000", "chat_id": chat_id, "chat_type": chat_type,
        "message_type": "text", "content": json!({"text": text}).to_string(),
        "mentions": mentions})
}

fn bearer(headers: &HeaderMap) -> &str {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or_default()
}

fn record(s: &Shared, route: String, body: &Value, code: i64) {
    s.calls.lock().unwrap().push(Call {
        route,
        body: body.clone(),
        code,
    });
    s.bump();
}

fn answer(code: i64, msg: &str, data: Value) -> Response {
    let status = if code == 0 {
        StatusCode::OK
    } else {
        StatusCode::BAD_REQUEST
    };
    (
        status,
        axum::Json(json!({"code": code, "msg": msg, "data": data})),
    )
        .into_response()
}

/// Checks the bearer token; `Err` is Feishu's answer to a bad one.
fn authed(s: &Shared, headers: &HeaderMap, route: &str) -> Result<(), Box<Response>> {
    let token = bearer(headers);
    if s.tokens.lock().unwrap().iter().any(|t| t == token) {
        return Ok(());
    }
    record(s, route.into(), &Value::Null, 99991663);
    Err(Box::new(answer(
        99991663,
        "Invalid access token for authorization",
        json!({}),
    )))
}

async fn token(State(s): State<Arc<Shared>>, body: Bytes) -> Response {
    let b: Value = serde_json::from_slice(&body).unwrap_or_default();
    let route = "POST /open-apis/auth/v3/tenant_access_token/internal".to_string();
    if b["app_id"] != s.app_id.as_str() || b["app_secret"] != s.app_secret.as_str() {
        record(&s, route, &json!({"app_id": b["app_id"]}), 10014);
        return answer(10014, "app secret invalid", json!({}));
    }
    let token = format!("t-fake-{}", s.next_id());
    s.tokens.lock().unwrap().push(token.clone());
    record(&s, route, &json!({"app_id": b["app_id"]}), 0);
    axum::Json(json!({"code": 0, "msg": "ok", "tenant_access_token": token, "expire": 7200}))
        .into_response()
}

async fn endpoint(State(s): State<Arc<Shared>>, body: Bytes) -> Response {
    let b: Value = serde_json::from_slice(&body).unwrap_or_default();
    let route = "POST /callback/ws/endpoint".to_string();
    if b["AppID"] != s.app_id.as_str() || b["AppSecret"] != s.app_secret.as_str() {
        record(&s, route, &Value::Null, 1000040343);
        return answer(1000040343, "system busy", json!({}));
    }
    record(&s, route, &Value::Null, 0);
    let url = format!(
        "ws://{}/ws?device_id={}&service_id={SERVICE_ID}",
        s.addr,
        s.next_id()
    );
    axum::Json(json!({"code": 0, "msg": "ok", "data": {"URL": url, "ClientConfig":
        {"PingInterval": 120, "ReconnectCount": -1, "ReconnectInterval": 120, "ReconnectNonce": 30}}}))
    .into_response()
}

async fn bot_info(State(s): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    let route = "GET /open-apis/bot/v3/info";
    if let Err(r) = authed(&s, &headers, route) {
        return *r;
    }
    record(&s, route.into(), &Value::Null, 0);
    axum::Json(
        json!({"code": 0, "msg": "ok", "bot": {"activate_status": 2, "app_name": "nanobot",
        "open_id": BOT_OPEN_ID}}),
    )
    .into_response()
}

/// Checks a message's type and content as Feishu does; `Err` is the code and message.
fn check_content(msg_type: &str, content: &str) -> Result<Value, (i64, &'static str)> {
    let parsed: Value = serde_json::from_str(content).map_err(|_| (230001, "invalid content"))?;
    let limit = match msg_type {
        "text" => TEXT_MAX_BYTES,
        "post" | "interactive" => CARD_MAX_BYTES,
        "image" | "file" | "audio" | "media" => CARD_MAX_BYTES,
        _ => return Err((230001, "invalid msg_type")),
    };
    if content.len() > limit {
        return Err((230025, "message content too long"));
    }
    if msg_type == "text" && parsed["text"].as_str().is_none_or(str::is_empty) {
        return Err((230001, "empty text"));
    }
    Ok(parsed)
}

async fn store(
    s: &Shared,
    route: String,
    b: Value,
    receive_id: String,
    id_type: String,
    reply_to: Option<String>,
) -> Response {
    let msg_type = b["msg_type"].as_str().unwrap_or_default().to_string();
    let content = match check_content(&msg_type, b["content"].as_str().unwrap_or_default()) {
        Ok(c) => c,
        Err((code, msg)) => {
            record(s, route, &b, code);
            return answer(code, msg, json!({}));
        }
    };
    let uuid = b["uuid"].as_str().unwrap_or_default().to_string();
    let known = (!uuid.is_empty())
        .then(|| {
            s.sent
                .lock()
                .unwrap()
                .iter()
                .find(|m| m.uuid == uuid)
                .map(|m| m.message_id.clone())
        })
        .flatten();
    let message_id = match known {
        Some(id) => id,
        None => {
            let id = format!("om_{}", s.next_id());
            s.sent.lock().unwrap().push(Sent {
                message_id: id.clone(),
                receive_id,
                receive_id_type: id_type,
                reply_to,
                msg_type,
                content,
                uuid,
                edits: 0,
            });
            id
        }
    };
    record(s, route, &b, 0);
    if s.stall.load(Ordering::SeqCst) {
        s.released.notified().await;
    }
    answer(0, "success", json!({"message_id": message_id}))
}

async fn create(
    State(s): State<Arc<Shared>>,
    Query(q): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let route = "POST /open-apis/im/v1/messages".to_string();
    if let Err(r) = authed(&s, &headers, &route) {
        return *r;
    }
    let b: Value = serde_json::from_slice(&body).unwrap_or_default();
    let id_type = q.get("receive_id_type").cloned().unwrap_or_default();
    let receive_id = b["receive_id"].as_str().unwrap_or_default().to_string();
    let valid = match id_type.as_str() {
        "open_id" => receive_id.starts_with("ou_"),
        "chat_id" => receive_id.starts_with("oc_"),
        _ => false,
    };
    if !valid {
        record(&s, route, &b, 230001);
        return answer(230001, "invalid receive_id", json!({}));
    }
    store(&s, route, b, receive_id, id_type, None).await
}

async fn reply(
    State(s): State<Arc<Shared>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let route = "POST /open-apis/im/v1/messages/{id}/reply".to_string();
    if let Err(r) = authed(&s, &headers, &route) {
        return *r;
    }
    let b: Value = serde_json::from_slice(&body).unwrap_or_default();
    store(&s, route, b, String::new(), String::new(), Some(id)).await
}

async fn update(
    State(s): State<Arc<Shared>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let route = "PATCH /open-apis/im/v1/messages/{id}".to_string();
    if let Err(r) = authed(&s, &headers, &route) {
        return *r;
    }
    let b: Value = serde_json::from_slice(&body).unwrap_or_default();
    let content = match check_content("interactive", b["content"].as_str().unwrap_or_default()) {
        Ok(c) => c,
        Err((code, msg)) => {
            record(&s, route, &b, code);
            return answer(code, msg, json!({}));
        }
    };
    let found = {
        let mut sent = s.sent.lock().unwrap();
        match sent
            .iter_mut()
            .find(|m| m.message_id == id && m.msg_type == "interactive")
        {
            Some(m) => {
                m.content = content;
                m.edits += 1;
                true
            }
            None => false,
        }
    };
    let code = if found { 0 } else { 230011 };
    record(&s, route, &b, code);
    answer(
        code,
        if found {
            "success"
        } else {
            "message not found"
        },
        json!({}),
    )
}

async fn react(
    State(s): State<Arc<Shared>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let route = "POST /open-apis/im/v1/messages/{id}/reactions".to_string();
    if let Err(r) = authed(&s, &headers, &route) {
        return *r;
    }
    let b: Value = serde_json::from_slice(&body).unwrap_or_default();
    let emoji = b["reaction_type"]["emoji_type"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let reaction = format!("r-{}", s.next_id());
    s.reactions
        .lock()
        .unwrap()
        .push((id, emoji.clone(), reaction.clone(), false));
    record(&s, route, &b, 0);
    answer(
        0,
        "success",
        json!({"reaction_id": reaction, "reaction_type": {"emoji_type": emoji}}),
    )
}

async fn unreact(
    State(s): State<Arc<Shared>>,
    Path((id, reaction)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    let route = "DELETE /open-apis/im/v1/messages/{id}/reactions/{reaction_id}".to_string();
    if let Err(r) = authed(&s, &headers, &route) {
        return *r;
    }
    let found = {
        let mut reactions = s.reactions.lock().unwrap();
        match reactions
            .iter_mut()
            .find(|r| r.0 == id && r.2 == reaction && !r.3)
        {
            Some(r) => {
                r.3 = true;
                true
            }
            None => false,
        }
    };
    let code = if found { 0 } else { 231003 };
    record(&s, route, &Value::Null, code);
    answer(
        code,
        if found {
            "success"
        } else {
            "reaction not found"
        },
        json!({}),
    )
}

async fn resource(
    State(s): State<Arc<Shared>>,
    Path((_id, key)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    let route = "GET /open-apis/im/v1/messages/{id}/resources/{key}";
    if let Err(r) = authed(&s, &headers, route) {
        return *r;
    }
    let found = s.resources.lock().unwrap().get(&key).cloned();
    record(
        &s,
        route.into(),
        &json!({"key": key}),
        if found.is_some() { 0 } else { 234003 },
    );
    match found {
        Some((mime, bytes)) => ([(header::CONTENT_TYPE, mime)], bytes).into_response(),
        None => answer(234003, "file not found", json!({})),
    }
}

async fn upload_image(State(s): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    upload(&s, &headers, "image", body).await
}

async fn upload_file(State(s): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    upload(&s, &headers, "file", body).await
}

async fn upload(s: &Shared, headers: &HeaderMap, kind: &str, body: Bytes) -> Response {
    let route = format!("POST /open-apis/im/v1/{kind}s");
    if let Err(r) = authed(s, headers, &route) {
        return *r;
    }
    let key = format!(
        "{}_{}",
        if kind == "image" { "img" } else { "file" },
        s.next_id()
    );
    s.uploads.lock().unwrap().push(Uploaded {
        kind: kind.into(),
        key: key.clone(),
        body: body.to_vec(),
    });
    record(s, route, &Value::Null, 0);
    answer(0, "success", json!({format!("{kind}_key"): key}))
}
