//! A fake of the QQ official bot platform (QQ 开放平台 API v2) owned by the test suite, written
//! from QQ's public bot docs: one app (app id + secret), on one free 127.0.0.1 port.
//!
//! # Surface
//! - `POST /app/getAppAccessToken` with `{"appId", "clientSecret"}`: `{"access_token",
//!   "expires_in": "<seconds>"}` (a string, as QQ sends it); a wrong pair is
//!   `{"code": 100016, "message": "invalid appid or secret"}`. The same token is handed out
//!   until its last 60 seconds, then a new one (the old stays valid until it expires).
//! - REST, every call checked for `Authorization: QQBot {token}` and `X-Union-Appid` (401
//!   otherwise): `GET /gateway` (`{"url"}`), `POST /v2/users/{openid}/messages` and
//!   `/v2/groups/{group_openid}/messages` (`msg_type` 0 text, 2 markdown, 7 media; with
//!   `msg_id`, a `msg_id` + `msg_seq` already sent is refused with 400 code 40054005 as QQ
//!   does), `POST /v2/{users|groups}/{id}/files` (`file_info` back); attachments users sent are
//!   served at `GET /files/{id}/{name}`.
//! - The gateway at `ws://127.0.0.1:PORT/websocket`: HELLO (op 10), IDENTIFY (op 2; a wrong
//!   token is closed with 4004) answered by READY, RESUME (op 6) of a known session answered by
//!   the events after its `seq` and RESUMED (an unknown one by op 9), HEARTBEAT (op 1) by
//!   HEARTBEAT_ACK (op 11); DISPATCH (op 0) `C2C_MESSAGE_CREATE` / `GROUP_AT_MESSAGE_CREATE` of
//!   injected messages to every live session. Every event is kept with its sequence number, so
//!   a session resumed after its connection died gets what it missed.
//!
//! # Test controls
//! [`QqFake::inject`] sends a user's [`QqMessage`]; [`QqFake::sent`] is what the bot posted;
//! [`QqFake::lose_next_responses`] makes the next sends be accepted but answered 500 (a reply
//! lost on the way back); [`QqFake::close_connections`] and [`QqFake::ask_reconnect`] end
//! sessions as QQ does; [`QqFake::wait_until`] wakes on every change, never sleeps.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::ws::{CloseFrame, Message as WsMessage, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::fake_server::{self, ServerTask, Watched};

/// How long the `wait_*` helpers wait by default.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(30);
/// QQ's code for a `msg_id` + `msg_seq` sent twice.
pub const DUPLICATE_CODE: i64 = 40_054_005;
/// Marks a frame queued for a connection as "close with this code" instead.
const CLOSE: &str = "\u{0}close:";
/// Heartbeat interval announced in HELLO (short, so heartbeats happen in tests).
const HEARTBEAT_MS: u64 = 3_000;

/// A message a user sends: C2C ([`QqMessage::c2c`]) or a group @-message ([`QqMessage::group`]).
#[derive(Debug, Clone)]
pub struct QqMessage {
    /// The sender's openid.
    pub user: String,
    /// The group's openid (none: C2C).
    pub group: Option<String>,
    /// Text as QQ sends it (group @-messages start with a space where the mention was).
    pub content: String,
    /// A file attached: (name, bytes).
    pub file: Option<(String, Vec<u8>)>,
}

impl QqMessage {
    /// A C2C message from `user`.
    pub fn c2c(user: &str, content: &str) -> Self {
        Self {
            user: user.into(),
            group: None,
            content: content.into(),
            file: None,
        }
    }

    /// A group message from `user` in `group` @-mentioning the bot.
    pub fn group(user: &str, group: &str, content: &str) -> Self {
        Self {
            group: Some(group.into()),
            content: format!(" {content}"),
            ..Self::c2c(user, "")
        }
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
    /// The user's or group's openid.
    pub chat: String,
    /// Posted to a group.
    pub group: bool,
    /// `msg_type`: 0 text, 2 markdown, 7 media.
    pub msg_type: i64,
    /// The text (`content`, or `markdown.content`).
    pub text: String,
    /// `msg_id` (a passive reply), if any.
    pub msg_id: Option<String>,
    /// `msg_seq`.
    pub msg_seq: Option<i64>,
    /// For media: the uploaded file's name (as uploaded; images have none).
    pub file: Option<String>,
}

/// Gateway sessions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Sessions {
    /// Live (identified or resumed) connections now.
    pub now: usize,
    /// The most live at once (above 1: two connections of one app overlapped).
    pub peak: usize,
    /// IDENTIFYs accepted.
    pub identified: usize,
    /// RESUMEs accepted.
    pub resumed: usize,
}

#[derive(Debug, Default)]
struct Inner {
    next_id: u64,
    seq: u64,
    token: Option<(String, Instant)>,
    valid_tokens: Vec<String>,
    tokens_issued: usize,
    token_ttl_secs: u64,
    live: Vec<(u64, mpsc::UnboundedSender<String>)>,
    known_sessions: BTreeSet<String>,
    stats: Sessions,
    events: Vec<(u64, String)>,
    sent: Vec<Sent>,
    replied: BTreeSet<(String, i64)>,
    duplicates: usize,
    lose: usize,
    hold: bool,
    refuse: usize,
    attempts: Vec<Instant>,
    uploads: Vec<(u64, Option<String>)>,
    files: Vec<(u64, String, Vec<u8>)>,
}

#[derive(Debug)]
struct Shared {
    app_id: String,
    secret: String,
    addr: SocketAddr,
    state: Watched<Inner>,
    released: tokio::sync::Notify,
}

impl Shared {
    fn token_ok(&self, token: &str) -> bool {
        self.state
            .peek(|i| i.valid_tokens.iter().any(|t| t == token))
    }

    fn authorized(&self, headers: &HeaderMap) -> bool {
        let header = |name| headers.get(name).and_then(|v| v.to_str().ok());
        header(header::AUTHORIZATION.as_str())
            .and_then(|v| v.strip_prefix("QQBot "))
            .is_some_and(|t| self.token_ok(t))
            && header("x-union-appid") == Some(self.app_id.as_str())
    }
}

/// A running fake; cloning shares it. The server stops when the last clone drops.
#[derive(Debug, Clone)]
pub struct QqFake {
    shared: Arc<Shared>,
    _server: Arc<ServerTask>,
}

impl QqFake {
    /// Binds a free port of 127.0.0.1 and serves the app `app_id` with `secret`.
    pub async fn start(app_id: &str, secret: &str) -> anyhow::Result<Self> {
        let listener = fake_server::bind("qq fake").await?;
        let addr = listener.addr;
        let shared = Arc::new(Shared {
            app_id: app_id.into(),
            secret: secret.into(),
            addr,
            state: Watched::new(Inner {
                token_ttl_secs: 7200,
                ..Inner::default()
            }),
            released: tokio::sync::Notify::new(),
        });
        let app = Router::new()
            .route("/app/getAppAccessToken", post(access_token))
            .route("/gateway", get(gateway_url))
            .route("/websocket", get(websocket))
            .route("/v2/users/{chat}/messages", post(c2c_message))
            .route("/v2/groups/{chat}/messages", post(group_message))
            .route("/v2/users/{chat}/files", post(upload))
            .route("/v2/groups/{chat}/files", post(upload))
            .route("/files/{id}/{name}", get(attachment))
            .with_state(shared.clone());
        let server = listener.serve(app);
        Ok(Self {
            shared,
            _server: server,
        })
    }

    /// Returns the OpenAPI root for `channels.qq.apiBase`.
    pub fn api_base(&self) -> String {
        format!("http://{}", self.shared.addr)
    }

    /// Returns the token endpoint for `channels.qq.tokenUrl`.
    pub fn token_url(&self) -> String {
        format!("http://{}/app/getAppAccessToken", self.shared.addr)
    }

    /// Returns the gateway URL (what `GET /gateway` names).
    pub fn gateway_url(&self) -> String {
        format!("ws://{}/websocket", self.shared.addr)
    }

    /// While `on`, message sends are accepted (recorded) and their answers held until the
    /// client gives up (a gateway killed mid-send never hears back).
    pub fn hold_responses(&self, on: bool) {
        self.shared.state.with(|i| i.hold = on);
        if !on {
            self.shared.released.notify_waiters();
        }
    }

    /// Makes the next `n` message sends be accepted (recorded) but answered with a 500.
    pub fn lose_next_responses(&self, n: usize) {
        self.shared.state.with(|i| i.lose = n);
    }

    /// Sends `msg` as C2C_MESSAGE_CREATE or GROUP_AT_MESSAGE_CREATE to every live session
    /// (and keeps it for resumed ones); returns its message id.
    pub fn inject(&self, msg: QqMessage) -> String {
        let addr = self.shared.addr;
        self.shared.state.with(|inner| {
            inner.next_id += 1;
            let id = format!("ROBOT1.0_msg-{}_测!", inner.next_id);
            let attachments: Vec<Value> = msg
                .file
                .iter()
                .map(|(name, bytes)| {
                    inner.next_id += 1;
                    let file_id = inner.next_id;
                    inner.files.push((file_id, name.clone(), bytes.clone()));
                    let encoded: String =
                        url::form_urlencoded::byte_serialize(name.as_bytes()).collect();
                    json!({"content_type": "file", "filename": name, "size": bytes.len(),
                           "url": format!("http://{addr}/files/{file_id}/{encoded}")})
                })
                .collect();
            let (kind, d) = match &msg.group {
                None => (
                    "C2C_MESSAGE_CREATE",
                    json!({"id": id, "author": {"user_openid": msg.user},
                           "content": msg.content, "timestamp": "2026-11-27T20:00:00+08:00",
                           "attachments": attachments}),
                ),
                Some(group) => (
                    "GROUP_AT_MESSAGE_CREATE",
                    json!({"id": id, "author": {"member_openid": msg.user},
                           "group_openid": group, "content": msg.content,
                           "timestamp": "2026-11-27T20:00:00+08:00", "attachments": attachments}),
                ),
            };
            inner.seq += 1;
            let payload = json!({"op": 0, "s": inner.seq, "t": kind,
                                 "id": format!("{kind}:{}", inner.next_id), "d": d})
            .to_string();
            inner.events.push((inner.seq, payload.clone()));
            for (_, tx) in &inner.live {
                let _ = tx.send(payload.clone());
            }
            id
        })
    }

    /// Sends `frame` as it is (any text, JSON or not) on every live gateway connection; as an
    /// event (with the next sequence number) when it is a DISPATCH.
    pub fn send_raw(&self, frame: &str) {
        self.shared.state.with(|i| {
            let frame = match serde_json::from_str::<Value>(frame) {
                Ok(mut v) if v["op"] == 0 => {
                    i.seq += 1;
                    v["s"] = json!(i.seq);
                    let text = v.to_string();
                    i.events.push((i.seq, text.clone()));
                    text
                }
                _ => frame.to_string(),
            };
            for (_, tx) in &i.live {
                let _ = tx.send(frame.clone());
            }
        });
    }

    /// Returns every message the bot posted and QQ kept, in order.
    pub fn sent(&self) -> Vec<Sent> {
        self.shared.state.peek(|i| i.sent.clone())
    }

    /// Returns the messages the bot posted to `chat` (a user's or a group's openid).
    pub fn sent_to(&self, chat: &str) -> Vec<Sent> {
        self.sent().into_iter().filter(|s| s.chat == chat).collect()
    }

    /// Returns how many sends were refused as duplicates (40054005).
    pub fn duplicates(&self) -> usize {
        self.shared.state.peek(|i| i.duplicates)
    }

    /// Returns how many access tokens were handed out (a new one each time one expired).
    pub fn tokens_issued(&self) -> usize {
        self.shared.state.peek(|i| i.tokens_issued)
    }

    /// Closes every live gateway connection with close `code` (QQ's 4009: session timed out,
    /// resumable; 4006/4007: session invalid, identify anew).
    pub fn close_connections(&self, code: u16) {
        self.shared.state.with(|i| {
            for (_, tx) in &i.live {
                let _ = tx.send(format!("{CLOSE}{code}"));
            }
        });
    }

    /// Answers the next `n` WebSocket upgrades with 503 (QQ's gateway unavailable).
    pub fn refuse_connections(&self, n: usize) {
        self.shared.state.with(|i| i.refuse = n);
    }

    /// Returns when each gateway connection was attempted.
    pub fn connection_attempts(&self) -> Vec<Instant> {
        self.shared.state.peek(|i| i.attempts.clone())
    }

    /// Sends RECONNECT (op 7) on every live gateway connection.
    pub fn ask_reconnect(&self) {
        self.shared.state.with(|i| {
            for (_, tx) in &i.live {
                let _ = tx.send(json!({"op": 7}).to_string());
            }
        });
    }

    /// Makes every token handed out so far invalid (as when they expire): REST calls with
    /// them get a 401 until a new one is fetched.
    pub fn expire_tokens(&self) {
        self.shared.state.with(|i| {
            i.valid_tokens.clear();
            i.token = None;
        });
    }

    /// Returns the gateway sessions.
    pub fn sessions(&self) -> Sessions {
        self.shared.state.peek(|i| i.stats)
    }

    /// Waits until a session is live.
    pub async fn wait_connected(&self) -> anyhow::Result<()> {
        self.wait_until("a live gateway session", DEFAULT_WAIT, |f| {
            (f.sessions().now >= 1).then_some(())
        })
        .await
    }

    /// Waits until `check` returns `Some`, re-checking after every change; fails after
    /// `timeout` naming `what`.
    pub async fn wait_until<T>(
        &self,
        what: &str,
        timeout: Duration,
        mut check: impl FnMut(&QqFake) -> Option<T>,
    ) -> anyhow::Result<T> {
        let found = self.shared.state.wait(timeout, || check(self));
        if let Some(found) = found.await {
            return Ok(found);
        }
        anyhow::bail!(
            "qq fake: timed out after {timeout:?} waiting for {what}; sent: {:#?}, sessions: {:?}",
            self.sent(),
            self.sessions()
        )
    }
}

fn refused(status: StatusCode, code: i64, message: &str) -> Response {
    (
        status,
        axum::Json(json!({"code": code, "message": message, "err_code": code})),
    )
        .into_response()
}

async fn access_token(
    State(s): State<Arc<Shared>>,
    axum::Json(body): axum::Json<Value>,
) -> Response {
    if body["appId"] != s.app_id.as_str() || body["clientSecret"] != s.secret.as_str() {
        s.state.with(|_| ());
        return axum::Json(json!({"code": 100016, "message": "invalid appid or secret"}))
            .into_response();
    }
    let (token, left) = s.state.with(|i| {
        let now = Instant::now();
        let fresh = i
            .token
            .as_ref()
            .is_some_and(|(_, until)| *until > now + Duration::from_secs(60));
        if !fresh {
            i.tokens_issued += 1;
            let token = format!(
                "qq-access-{}-{}",
                i.tokens_issued,
                uuid::Uuid::new_v4().simple()
            );
            i.valid_tokens.push(token.clone());
            i.token = Some((token, now + Duration::from_secs(i.token_ttl_secs)));
        }
        match i.token.clone() {
            Some((token, until)) => (token, until.saturating_duration_since(now).as_secs()),
            None => (String::new(), 0),
        }
    });
    axum::Json(json!({"access_token": token, "expires_in": left.to_string()})).into_response()
}

async fn gateway_url(State(s): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    if !s.authorized(&headers) {
        return refused(StatusCode::UNAUTHORIZED, 11244, "token not exist or expire");
    }
    axum::Json(json!({"url": format!("ws://{}/websocket", s.addr)})).into_response()
}

async fn c2c_message(
    State(s): State<Arc<Shared>>,
    Path(chat): Path<String>,
    headers: HeaderMap,
    axum::Json(body): axum::Json<Value>,
) -> Response {
    held(&s, message(&s, chat, false, &headers, &body)).await
}

async fn group_message(
    State(s): State<Arc<Shared>>,
    Path(chat): Path<String>,
    headers: HeaderMap,
    axum::Json(body): axum::Json<Value>,
) -> Response {
    held(&s, message(&s, chat, true, &headers, &body)).await
}

/// Returns `response`, after [`QqFake::hold_responses`] ends when it is on.
async fn held(s: &Shared, response: Response) -> Response {
    let released = s.released.notified();
    if s.state.peek(|i| i.hold) {
        released.await;
    }
    response
}

fn message(s: &Shared, chat: String, group: bool, headers: &HeaderMap, body: &Value) -> Response {
    if !s.authorized(headers) {
        return refused(StatusCode::UNAUTHORIZED, 11244, "token not exist or expire");
    }
    let msg_type = body["msg_type"].as_i64().unwrap_or(0);
    let text = match msg_type {
        2 => body["markdown"]["content"].as_str(),
        _ => body["content"].as_str(),
    }
    .unwrap_or_default()
    .to_string();
    if msg_type != 7 && text.is_empty() {
        return refused(StatusCode::BAD_REQUEST, 40034001, "content is empty");
    }
    let msg_id = body["msg_id"].as_str().map(str::to_string);
    let msg_seq = body["msg_seq"].as_i64();
    let file = body["media"]["file_info"].as_str().and_then(|info| {
        let id: u64 = info.strip_prefix("file-info-")?.parse().ok()?;
        s.state.peek(|i| {
            i.uploads
                .iter()
                .find(|(u, _)| *u == id)
                .map(|(_, n)| n.clone())
        })?
    });
    let outcome = s.state.with(|i| {
        if let Some(id) = &msg_id
            && !i.replied.insert((id.clone(), msg_seq.unwrap_or(1)))
        {
            i.duplicates += 1;
            return Err(());
        }
        i.sent.push(Sent {
            chat,
            group,
            msg_type,
            text,
            msg_id,
            msg_seq,
            file,
        });
        i.next_id += 1;
        let lost = i.lose > 0;
        i.lose = i.lose.saturating_sub(1);
        Ok((i.next_id, lost))
    });
    match outcome {
        Err(()) => refused(
            StatusCode::BAD_REQUEST,
            DUPLICATE_CODE,
            "消息被去重，请检查请求msgseq",
        ),
        Ok((_, true)) => refused(StatusCode::INTERNAL_SERVER_ERROR, 500, "internal error"),
        Ok((id, false)) => axum::Json(json!({"id": format!("BOT-REPLY-{id}"),
            "timestamp": "2026-11-27T20:00:01+08:00"}))
        .into_response(),
    }
}

async fn upload(
    State(s): State<Arc<Shared>>,
    headers: HeaderMap,
    axum::Json(body): axum::Json<Value>,
) -> Response {
    if !s.authorized(&headers) {
        return refused(StatusCode::UNAUTHORIZED, 11244, "token not exist or expire");
    }
    use base64::Engine as _;
    let data = body["file_data"].as_str().unwrap_or_default();
    if base64::engine::general_purpose::STANDARD
        .decode(data)
        .is_err()
    {
        return refused(StatusCode::BAD_REQUEST, 40034001, "file_data is not base64");
    }
    let name = body["file_name"].as_str().map(str::to_string);
    let id = s.state.with(|i| {
        i.next_id += 1;
        i.uploads.push((i.next_id, name));
        i.next_id
    });
    axum::Json(json!({"file_uuid": format!("uuid-{id}"), "file_info": format!("file-info-{id}"), "ttl": 0}))
        .into_response()
}

async fn attachment(State(s): State<Arc<Shared>>, Path((id, _)): Path<(u64, String)>) -> Response {
    let file = s
        .state
        .peek(|i| i.files.iter().find(|(f, _, _)| *f == id).cloned());
    match file {
        Some((_, _, bytes)) => bytes.into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

async fn websocket(State(s): State<Arc<Shared>>, ws: WebSocketUpgrade) -> Response {
    let refused = s.state.with(|i| {
        i.attempts.push(Instant::now());
        let refused = i.refuse > 0;
        i.refuse = i.refuse.saturating_sub(1);
        refused
    });
    if refused {
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    }
    ws.on_upgrade(move |socket| session(s, socket))
}

/// What one client frame asks of the gateway.
enum Answer {
    /// Send these frames.
    Send(Vec<String>),
    /// Close with this code.
    Close(u16),
}

/// Answers IDENTIFY, RESUME and HEARTBEAT; registers the connection `conn` once it is live.
fn answer(s: &Shared, conn: u64, tx: &mpsc::UnboundedSender<String>, frame: &Value) -> Answer {
    let token = frame["d"]["token"].as_str().unwrap_or_default();
    let token_ok = token.strip_prefix("QQBot ").is_some_and(|t| s.token_ok(t));
    match frame["op"].as_u64() {
        Some(1) => Answer::Send(vec![json!({"op": 11}).to_string()]),
        Some(2) if !token_ok => Answer::Close(4004),
        Some(2) => s.state.with(|i| {
            i.next_id += 1;
            let session_id = format!("session-{}", i.next_id);
            i.known_sessions.insert(session_id.clone());
            go_live(i, conn, tx);
            i.stats.identified += 1;
            let ready = json!({"op": 0, "s": i.seq, "t": "READY", "d": {"version": 1,
                "session_id": session_id, "user": {"id": "BOT-1", "username": "nano测试", "bot": true},
                "shard": [0, 1]}});
            Answer::Send(vec![ready.to_string()])
        }),
        Some(6) if !token_ok => Answer::Close(4004),
        Some(6) => s.state.with(|i| {
            let session_id = frame["d"]["session_id"].as_str().unwrap_or_default();
            if !i.known_sessions.contains(session_id) {
                return Answer::Send(vec![json!({"op": 9, "d": false}).to_string()]);
            }
            let after = frame["d"]["seq"].as_u64().unwrap_or(0);
            let mut out: Vec<String> = i
                .events
                .iter()
                .filter(|(seq, _)| *seq > after)
                .map(|(_, p)| p.clone())
                .collect();
            out.push(json!({"op": 0, "s": i.seq, "t": "RESUMED", "d": ""}).to_string());
            go_live(i, conn, tx);
            i.stats.resumed += 1;
            Answer::Send(out)
        }),
        _ => Answer::Send(Vec::new()),
    }
}

fn go_live(i: &mut Inner, conn: u64, tx: &mpsc::UnboundedSender<String>) {
    i.live.retain(|(c, _)| *c != conn);
    i.live.push((conn, tx.clone()));
    i.stats.now = i.live.len();
    i.stats.peak = i.stats.peak.max(i.stats.now);
}

/// One gateway connection: HELLO, then client frames answered, events pushed while live.
async fn session(s: Arc<Shared>, mut socket: WebSocket) {
    let hello = json!({"op": 10, "d": {"heartbeat_interval": HEARTBEAT_MS}}).to_string();
    if socket.send(WsMessage::Text(hello.into())).await.is_err() {
        return;
    }
    let conn = s.state.with(|i| {
        i.next_id += 1;
        i.next_id
    });
    let (tx, mut rx) = mpsc::unbounded_channel::<String>();
    loop {
        tokio::select! {
            out = rx.recv() => {
                let Some(out) = out else { break };
                if let Some(code) = out.strip_prefix(CLOSE).and_then(|c| c.parse().ok()) {
                    let close = CloseFrame { code, reason: "closed by the fake".into() };
                    let _ = socket.send(WsMessage::Close(Some(close))).await;
                    break;
                }
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
                match answer(&s, conn, &tx, &frame) {
                    Answer::Close(code) => {
                        let close = CloseFrame { code, reason: "invalid token".into() };
                        let _ = socket.send(WsMessage::Close(Some(close))).await;
                        break;
                    }
                    Answer::Send(frames) => {
                        for f in frames {
                            if socket.send(WsMessage::Text(f.into())).await.is_err() {
                                break;
                            }
                        }
                    }
                }
            }
        }
    }
    s.state.with(|i| {
        i.live.retain(|(c, _)| *c != conn);
        i.stats.now = i.live.len();
    });
}
