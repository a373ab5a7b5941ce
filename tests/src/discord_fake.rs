//! A Discord fake owned by the test suite: one bot token, its REST API and its gateway
//! WebSocket on one free 127.0.0.1 port.
//!
//! # Surface
//! - REST under `{api_base}/v10` (`api_base` = `http://127.0.0.1:PORT/api`), every call
//!   checked for `Authorization: Bot {token}` (401 `401: Unauthorized` otherwise):
//!   `GET /users/@me`, `GET /gateway/bot`, `POST /channels/{id}/messages` (JSON or multipart
//!   with `payload_json` and `files[n]`; content over 2,000 characters, or no content and no
//!   file, is a 400 `Invalid Form Body` as Discord answers), `PATCH /channels/{id}/messages/{id}`
//!   (edits the content of a message the bot posted, same length rule; another message is a 404
//!   `Unknown Message`), `POST /channels/{id}/typing`,
//!   `PUT`/`DELETE /channels/{id}/messages/{id}/reactions/{emoji}/@me`; files users attached
//!   are served at `GET /attachments/{id}/{name}` (no token, as Discord's CDN).
//! - The gateway at `ws://127.0.0.1:PORT/gateway` (twilight appends `/?v=10&encoding=json`) speaking API v10 JSON: HELLO (op 10), then
//!   IDENTIFY (op 2; a wrong token is closed with 4004 `Authentication failed.`) answered by
//!   READY, HEARTBEAT (op 1) answered by HEARTBEAT_ACK (op 11), RESUME (op 6) answered by
//!   INVALID_SESSION (op 9, not resumable), and DISPATCH (op 0) `MESSAGE_CREATE` of injected
//!   messages to every identified session.
//!
//! # Test controls
//! [`DiscordFake::inject`] dispatches a user's [`DcMessage`] (DM or guild, mentions, a file);
//! [`DiscordFake::sent`] is what the bot posted, [`DiscordFake::sessions`] the identified
//! connections now and at peak; [`DiscordFake::wait_until`] wakes on every request and
//! connection change (a `watch` channel), never sleeps.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::ws::{CloseFrame, Message as WsMessage, WebSocket, WebSocketUpgrade};
use axum::extract::{FromRequest as _, Multipart, Path, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, patch, post, put};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::fake_server::{self, ServerTask, Watched};

/// How long the `wait_*` helpers wait by default.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(30);
/// The bot's user id.
pub const BOT_ID: u64 = 900_000_000_000_000_001;
/// Heartbeat interval announced in HELLO (short, so heartbeats happen in tests).
const HEARTBEAT_MS: u64 = 3_000;

/// A message a user sends, built with [`DcMessage::dm`] or [`DcMessage::guild`].
#[derive(Debug, Clone)]
pub struct DcMessage {
    /// Author's user id.
    pub author: u64,
    /// Channel id.
    pub channel: u64,
    /// Guild id (none: a DM).
    pub guild: Option<u64>,
    /// Text.
    pub content: String,
    /// Users mentioned (their ids).
    pub mentions: Vec<u64>,
    /// A file attached: (name, bytes).
    pub file: Option<(String, Vec<u8>)>,
}

impl DcMessage {
    /// A DM from `author` in DM channel `channel`.
    pub fn dm(author: u64, channel: u64, content: &str) -> Self {
        Self {
            author,
            channel,
            guild: None,
            content: content.into(),
            mentions: Vec::new(),
            file: None,
        }
    }

    /// A message from `author` in guild channel `channel`.
    pub fn guild(author: u64, channel: u64, content: &str) -> Self {
        Self {
            guild: Some(7_000),
            ..Self::dm(author, channel, content)
        }
    }

    /// Mentions the bot: `<@BOT_ID>` in front of the text and in `mentions`, as a client does.
    pub fn mentioning_bot(mut self) -> Self {
        self.content = format!("<@{BOT_ID}> {}", self.content);
        self.mentions.push(BOT_ID);
        self
    }

    /// Attaches a file.
    pub fn with_file(mut self, name: &str, bytes: &[u8]) -> Self {
        self.file = Some((name.into(), bytes.to_vec()));
        self
    }
}

/// A message the bot posted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sent {
    /// Its id.
    pub id: u64,
    /// Channel id.
    pub channel: u64,
    /// Text.
    pub content: String,
    /// The message it replies to.
    pub reply_to: Option<u64>,
    /// Names of the files attached.
    pub files: Vec<String>,
    /// How many times the bot edited it (its content is the latest).
    pub edits: usize,
}

/// Identified gateway sessions of the token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Sessions {
    /// Identified and connected now.
    pub now: usize,
    /// The most ever identified at once (above 1: two connections of one token overlapped).
    pub peak: usize,
    /// IDENTIFYs accepted in total.
    pub identified: usize,
}

#[derive(Debug, Default)]
struct Inner {
    next_id: u64,
    sessions: Vec<(u64, mpsc::UnboundedSender<String>)>,
    stats: Sessions,
    sent: Vec<Sent>,
    typing: Vec<u64>,
    reactions: Vec<(u64, String, bool)>,
    files: Vec<(u64, String, Vec<u8>)>,
    dispatched: usize,
}

#[derive(Debug)]
struct Shared {
    token: String,
    addr: SocketAddr,
    state: Watched<Inner>,
}

impl Shared {
    fn next_id(inner: &mut Inner) -> u64 {
        inner.next_id += 1;
        1_300_000_000_000_000_000 + inner.next_id
    }

    fn authorized(&self, headers: &HeaderMap) -> bool {
        headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v == format!("Bot {}", self.token))
    }
}

/// A running fake; cloning shares it. The server stops when the last clone drops.
#[derive(Debug, Clone)]
pub struct DiscordFake {
    shared: Arc<Shared>,
    _server: Arc<ServerTask>,
}

impl DiscordFake {
    /// Binds a free port of 127.0.0.1 and serves the bot with `token`.
    pub async fn start(token: &str) -> anyhow::Result<Self> {
        let listener = fake_server::bind("discord fake").await?;
        let addr = listener.addr;
        let shared = Arc::new(Shared {
            token: token.into(),
            addr,
            state: Watched::default(),
        });
        let app = Router::new()
            .route("/gateway", get(gateway))
            .route("/gateway/", get(gateway))
            .route("/api/v10/users/@me", get(users_me))
            .route("/api/v10/gateway/bot", get(gateway_bot))
            .route("/api/v10/channels/{channel}/messages", post(create_message))
            .route(
                "/api/v10/channels/{channel}/messages/{message}",
                patch(edit_message),
            )
            .route("/api/v10/channels/{channel}/typing", post(typing))
            .route(
                "/api/v10/channels/{channel}/messages/{message}/reactions/{emoji}/@me",
                put(add_reaction).delete(remove_reaction),
            )
            .route("/attachments/{id}/{name}", get(attachment))
            .with_state(shared.clone());
        let server = listener.serve(app);
        Ok(Self {
            shared,
            _server: server,
        })
    }

    /// Returns the REST root for `channels.discord.apiBase`.
    pub fn api_base(&self) -> String {
        format!("http://{}/api", self.shared.addr)
    }

    /// Returns the gateway URL for `channels.discord.gatewayUrl`.
    pub fn gateway_url(&self) -> String {
        format!("ws://{}/gateway", self.shared.addr)
    }

    /// Dispatches `msg` as MESSAGE_CREATE to every identified session; returns its id.
    pub fn inject(&self, msg: DcMessage) -> u64 {
        self.shared.state.with(|inner| {
            let id = Shared::next_id(inner);
            let attachments: Vec<Value> = msg
                .file
                .iter()
                .map(|(name, bytes)| {
                    let file_id = Shared::next_id(inner);
                    inner.files.push((file_id, name.clone(), bytes.clone()));
                    // Percent-encoded, as Discord's CDN links are.
                    let encoded: String =
                        url::form_urlencoded::byte_serialize(name.as_bytes()).collect();
                    let url = format!(
                        "http://{}/attachments/{file_id}/{encoded}",
                        self.shared.addr
                    );
                    json!({"id": file_id.to_string(), "filename": name, "size": bytes.len(),
                           "url": url, "proxy_url": url})
                })
                .collect();
            let mentions: Vec<Value> = msg.mentions.iter().map(|u| user(*u)).collect();
            let mut d = json!({
                "id": id.to_string(),
                "channel_id": msg.channel.to_string(),
                "author": user(msg.author),
                "content": msg.content,
                "timestamp": "2026-11-25T06:00:00.000000+00:00",
                "edited_timestamp": null,
                "tts": false,
                "mention_everyone": false,
                "mentions": mentions,
                "mention_roles": [],
                "attachments": attachments,
                "embeds": [],
                "pinned": false,
                "type": 0,
            });
            if let Some(guild) = msg.guild {
                d["guild_id"] = json!(guild.to_string());
            }
            let payload = json!({"op": 0, "s": 2, "t": "MESSAGE_CREATE", "d": d}).to_string();
            for (_, tx) in &inner.sessions {
                let _ = tx.send(payload.clone());
                inner.dispatched += 1;
            }
            id
        })
    }

    /// Returns the id of the last file a user attached (none yet: 0).
    pub fn last_attachment_id(&self) -> u64 {
        self.shared
            .state
            .peek(|i| i.files.last().map_or(0, |(id, _, _)| *id))
    }

    /// Returns every message the bot posted, in order.
    pub fn sent(&self) -> Vec<Sent> {
        self.shared.state.peek(|i| i.sent.clone())
    }

    /// Returns the messages the bot posted in `channel`.
    pub fn sent_in(&self, channel: u64) -> Vec<Sent> {
        self.sent()
            .into_iter()
            .filter(|s| s.channel == channel)
            .collect()
    }

    /// Returns the typing triggers of `channel`.
    pub fn typing_in(&self, channel: u64) -> usize {
        self.shared
            .state
            .peek(|i| i.typing.iter().filter(|c| **c == channel).count())
    }

    /// Returns the reactions set (true) and removed (false) on `message`.
    pub fn reactions_on(&self, message: u64) -> Vec<(String, bool)> {
        self.shared.state.peek(|i| {
            i.reactions
                .iter()
                .filter(|(m, _, _)| *m == message)
                .map(|(_, e, set)| (e.clone(), *set))
                .collect()
        })
    }

    /// Returns the identified sessions now and at peak.
    pub fn sessions(&self) -> Sessions {
        self.shared.state.peek(|i| i.stats)
    }

    /// Waits until a session is identified.
    pub async fn wait_connected(&self) -> anyhow::Result<()> {
        self.wait_until("an identified gateway session", DEFAULT_WAIT, |f| {
            (f.sessions().now >= 1).then_some(())
        })
        .await
    }

    /// Waits until `check` returns `Some`, re-checking after every request and connection
    /// change; fails after `timeout` naming `what`.
    pub async fn wait_until<T>(
        &self,
        what: &str,
        timeout: Duration,
        mut check: impl FnMut(&DiscordFake) -> Option<T>,
    ) -> anyhow::Result<T> {
        let found = self.shared.state.wait(timeout, || check(self));
        if let Some(found) = found.await {
            return Ok(found);
        }
        anyhow::bail!(
            "discord fake: timed out after {timeout:?} waiting for {what}; sent: {:#?}, sessions: {:?}",
            self.sent(),
            self.sessions()
        )
    }
}

fn user(id: u64) -> Value {
    json!({"id": id.to_string(), "username": format!("user{id}"), "discriminator": "0",
           "avatar": null, "bot": id == BOT_ID, "public_flags": 0})
}

fn unauthorized() -> Response {
    (
        StatusCode::UNAUTHORIZED,
        axum::Json(json!({"message": "401: Unauthorized", "code": 0})),
    )
        .into_response()
}

fn bad_form(detail: &str) -> Response {
    (
        StatusCode::BAD_REQUEST,
        axum::Json(json!({"message": "Invalid Form Body", "code": 50035,
                          "errors": {"content": {"_errors": [{"code": "BASE_TYPE_BAD_LENGTH", "message": detail}]}}})),
    )
        .into_response()
}

async fn users_me(State(s): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    if !s.authorized(&headers) {
        return unauthorized();
    }
    s.state.with(|_| ());
    let mut me = user(BOT_ID);
    me["username"] = json!("nano_test_bot");
    me["mfa_enabled"] = json!(false);
    axum::Json(me).into_response()
}

async fn gateway_bot(State(s): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    if !s.authorized(&headers) {
        return unauthorized();
    }
    axum::Json(json!({"url": format!("ws://{}/gateway", s.addr), "shards": 1,
        "session_start_limit": {"total": 1000, "remaining": 999, "reset_after": 0, "max_concurrency": 1}}))
    .into_response()
}

async fn create_message(
    State(s): State<Arc<Shared>>,
    Path(channel): Path<u64>,
    request: Request,
) -> Response {
    if !s.authorized(request.headers()) {
        return unauthorized();
    }
    let multipart = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("multipart/"));
    let mut files = Vec::new();
    let payload: Value = if multipart {
        let Ok(mut form) = Multipart::from_request(request, &()).await else {
            return bad_form("unreadable multipart body");
        };
        let mut payload = json!({});
        while let Ok(Some(field)) = form.next_field().await {
            let name = field.name().unwrap_or_default().to_string();
            let file_name = field.file_name().map(str::to_string);
            let Ok(bytes) = field.bytes().await else {
                return bad_form("unreadable multipart field");
            };
            if name == "payload_json" {
                payload = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            } else if name.starts_with("files[") {
                files.push(file_name.unwrap_or(name));
            }
        }
        payload
    } else {
        let Ok(body) = Bytes::from_request(request, &()).await else {
            return bad_form("unreadable body");
        };
        serde_json::from_slice(&body).unwrap_or(Value::Null)
    };
    let content = payload["content"].as_str().unwrap_or_default().to_string();
    if content.chars().count() > 2000 {
        return bad_form("Must be 2000 or fewer in length.");
    }
    if content.is_empty() && files.is_empty() {
        return bad_form("Cannot send an empty message");
    }
    let reply_to = payload["message_reference"]["message_id"]
        .as_str()
        .and_then(|m| m.parse().ok())
        .or_else(|| payload["message_reference"]["message_id"].as_u64());
    let sent = s.state.with(|inner| {
        let sent = Sent {
            id: Shared::next_id(inner),
            channel,
            content,
            reply_to,
            files,
            edits: 0,
        };
        inner.sent.push(sent.clone());
        sent
    });
    let mut me = user(BOT_ID);
    me["username"] = json!("nano_test_bot");
    axum::Json(json!({
        "id": sent.id.to_string(), "channel_id": channel.to_string(), "author": me,
        "content": sent.content, "timestamp": "2026-11-25T06:00:00.000000+00:00",
        "edited_timestamp": null, "tts": false, "mention_everyone": false, "mentions": [],
        "mention_roles": [], "attachments": [], "embeds": [], "pinned": false, "type": 0,
    }))
    .into_response()
}

async fn edit_message(
    State(s): State<Arc<Shared>>,
    Path((channel, message)): Path<(u64, u64)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if !s.authorized(&headers) {
        return unauthorized();
    }
    let payload: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let Some(content) = payload["content"].as_str() else {
        return bad_form("content is required");
    };
    if content.chars().count() > 2000 {
        return bad_form("Must be 2000 or fewer in length.");
    }
    let edited = s.state.with(|inner| {
        let sent = inner
            .sent
            .iter_mut()
            .find(|m| m.id == message && m.channel == channel)?;
        sent.content = content.to_string();
        sent.edits += 1;
        Some(sent.clone())
    });
    let Some(sent) = edited else {
        return (
            StatusCode::NOT_FOUND,
            axum::Json(json!({"message": "Unknown Message", "code": 10008})),
        )
            .into_response();
    };
    let mut me = user(BOT_ID);
    me["username"] = json!("nano_test_bot");
    axum::Json(json!({
        "id": sent.id.to_string(), "channel_id": channel.to_string(), "author": me,
        "content": sent.content, "timestamp": "2026-11-25T06:00:00.000000+00:00",
        "edited_timestamp": "2026-11-25T06:00:01.000000+00:00", "tts": false,
        "mention_everyone": false, "mentions": [], "mention_roles": [], "attachments": [],
        "embeds": [], "pinned": false, "type": 0,
    }))
    .into_response()
}

async fn typing(
    State(s): State<Arc<Shared>>,
    Path(channel): Path<u64>,
    headers: HeaderMap,
) -> Response {
    if !s.authorized(&headers) {
        return unauthorized();
    }
    s.state.with(|i| i.typing.push(channel));
    StatusCode::NO_CONTENT.into_response()
}

async fn reaction(
    s: &Shared,
    headers: &HeaderMap,
    message: u64,
    emoji: String,
    set: bool,
) -> Response {
    if !s.authorized(headers) {
        return unauthorized();
    }
    s.state.with(|i| i.reactions.push((message, emoji, set)));
    StatusCode::NO_CONTENT.into_response()
}

async fn add_reaction(
    State(s): State<Arc<Shared>>,
    Path((_, message, emoji)): Path<(u64, u64, String)>,
    headers: HeaderMap,
) -> Response {
    reaction(&s, &headers, message, emoji, true).await
}

async fn remove_reaction(
    State(s): State<Arc<Shared>>,
    Path((_, message, emoji)): Path<(u64, u64, String)>,
    headers: HeaderMap,
) -> Response {
    reaction(&s, &headers, message, emoji, false).await
}

async fn attachment(
    State(s): State<Arc<Shared>>,
    Path((id, _name)): Path<(u64, String)>,
) -> Response {
    let file = s
        .state
        .peek(|i| i.files.iter().find(|(f, _, _)| *f == id).cloned());
    match file {
        Some((_, _, bytes)) => bytes.into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

async fn gateway(State(s): State<Arc<Shared>>, ws: WebSocketUpgrade) -> Response {
    ws.on_upgrade(move |socket| session(s, socket))
}

/// One gateway connection: HELLO, then IDENTIFY/RESUME/HEARTBEAT in, READY/ACK/DISPATCH out.
async fn session(s: Arc<Shared>, mut socket: WebSocket) {
    let hello = json!({"op": 10, "d": {"heartbeat_interval": HEARTBEAT_MS}}).to_string();
    if socket.send(WsMessage::Text(hello.into())).await.is_err() {
        return;
    }
    let (tx, mut rx) = mpsc::unbounded_channel::<String>();
    let mut identified: Option<u64> = None;
    loop {
        tokio::select! {
            out = rx.recv() => {
                let Some(out) = out else { break };
                if socket.send(WsMessage::Text(out.into())).await.is_err() {
                    break;
                }
            }
            incoming = socket.recv() => {
                let text = match incoming {
                    Some(Ok(WsMessage::Text(text))) => text.to_string(),
                    Some(Ok(WsMessage::Close(_))) | None | Some(Err(_)) => break,
                    Some(Ok(_)) => continue,
                };
                let frame: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
                let reply = match frame["op"].as_u64() {
                    Some(1) => json!({"op": 11}),
                    Some(2) => {
                        let token = frame["d"]["token"].as_str().unwrap_or_default();
                        if token.trim_start_matches("Bot ") != s.token {
                            let close = CloseFrame { code: 4004, reason: "Authentication failed.".into() };
                            let _ = socket.send(WsMessage::Close(Some(close))).await;
                            break;
                        }
                        let id = s.state.with(|inner| {
                            let id = Shared::next_id(inner);
                            inner.sessions.push((id, tx.clone()));
                            inner.stats.now = inner.sessions.len();
                            inner.stats.peak = inner.stats.peak.max(inner.stats.now);
                            inner.stats.identified += 1;
                            id
                        });
                        identified = Some(id);
                        let mut me = user(BOT_ID);
                        me["username"] = json!("nano_test_bot");
                        me["mfa_enabled"] = json!(false);
                        json!({"op": 0, "s": 1, "t": "READY", "d": {
                            "v": 10, "user": me, "guilds": [], "session_id": format!("session-{id}"),
                            "resume_gateway_url": format!("ws://{}/gateway", s.addr),
                            "shard": [0, 1], "application": {"id": BOT_ID.to_string(), "flags": 0},
                        }})
                    }
                    Some(6) => json!({"op": 9, "d": false}),
                    _ => continue,
                };
                if socket.send(WsMessage::Text(reply.to_string().into())).await.is_err() {
                    break;
                }
            }
        }
    }
    if let Some(id) = identified {
        s.state.with(|inner| {
            inner.sessions.retain(|(sid, _)| *sid != id);
            inner.stats.now = inner.sessions.len();
        });
    }
}
