//! A DingTalk fake owned by the test suite: one app (client id and secret), its OpenAPI and its
//! Stream gateway on one free 127.0.0.1 port, written from DingTalk's public Stream-mode and
//! robot-message documentation.
//!
//! # Surface
//! - `POST /v1.0/oauth2/accessToken` (`appKey`, `appSecret`): `accessToken`, `expireIn` 7200;
//!   wrong credentials a 400 `invalidClientIdOrSecret`.
//! - `POST /v1.0/gateway/connections/open` (`clientId`, `clientSecret`, `subscriptions`):
//!   `endpoint` (`ws://…/connect`) and a one-use `ticket`; wrong credentials a 401.
//! - The Stream WebSocket `GET /connect?ticket=…` (an unknown ticket is a 401): robot messages
//!   arrive as `CALLBACK` frames on `/v1.0/im/bot/messages/get`, each sent to ONE connection
//!   (the oldest); a frame not acknowledged (`{"code":200,"headers":{"messageId":…}}`) when its
//!   connection closes is delivered again to the next connection, as DingTalk retries.
//!   [`DingTalkFake::ping`] and [`DingTalkFake::disconnect`] send `SYSTEM` frames.
//! - Robot messages: `POST /v1.0/robot/oToMessages/batchSend` and
//!   `/v1.0/robot/groupMessages/send` with `x-acs-dingtalk-access-token` (unknown: 401),
//!   `robotCode` the client id, `msgKey` and `msgParam` (a JSON string); a `sampleMarkdown` text
//!   over 20,000 bytes is a 400 (a guard of the fake: DingTalk documents no exact limit).
//! - Files: `POST /v1.0/robot/messageFiles/download` (`downloadCode` → `downloadUrl`), the file
//!   at `GET /files/{code}`; `POST /media/upload?access_token=…&type=…` (multipart `media`)
//!   answers a `media_id`. [`DingTalkFake::hold_files`] keeps downloads waiting.
//!
//! # Test controls
//! [`DingTalkFake::inject`] delivers a user's [`RobotMsg`]; [`DingTalkFake::sent`] is what the
//! bot sent, [`DingTalkFake::conns`] the Stream connections now, at peak and opened in total;
//! [`DingTalkFake::wait_until`] wakes on every change, never sleeps.

use std::collections::{HashMap, HashSet, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::ws::{Message as WsMessage, WebSocket, WebSocketUpgrade};
use axum::extract::{ConnectInfo, Multipart, Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::fake_server::{self, ServerTask, Watched};

/// How long the `wait_*` helpers wait by default.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(30);
/// Topic of robot messages.
pub const BOT_TOPIC: &str = "/v1.0/im/bot/messages/get";
/// Largest `sampleMarkdown` text accepted, in bytes.
pub const MAX_TEXT_BYTES: usize = 20_000;

/// A robot message a user sends, built with [`RobotMsg::dm`] or [`RobotMsg::group`].
#[derive(Debug, Clone)]
pub struct RobotMsg {
    /// The message's JSON (`data` of the CALLBACK frame).
    pub data: Value,
}

impl RobotMsg {
    /// A 1:1 text from staff id `staff` (display name `nick`).
    pub fn dm(staff: &str, nick: &str, text: &str) -> Self {
        Self {
            data: json!({
                "msgId": format!("msg{}", uuid::Uuid::new_v4().simple()),
                "msgtype": "text", "text": {"content": text},
                "senderStaffId": staff, "senderId": format!("$:LWCP_v1:${staff}"),
                "senderNick": nick, "conversationType": "1",
                "conversationId": format!("cid-dm-{staff}"), "chatbotUserId": "$:bot",
                "isInAtList": true, "createAt": 1_764_000_000_000u64,
                "sessionWebhook": "http://127.0.0.1:9/unused", "robotCode": "unused",
            }),
        }
    }

    /// A text in group `conversation` from `staff`, @-mentioning the bot (DingTalk delivers only
    /// those).
    pub fn group(conversation: &str, staff: &str, nick: &str, text: &str) -> Self {
        let mut m = Self::dm(staff, nick, text);
        m.data["conversationType"] = json!("2");
        m.data["conversationId"] = json!(conversation);
        m.data["conversationTitle"] = json!("测试群");
        m
    }

    /// Turns it into a picture (`downloadCode` `code`) with no text.
    pub fn picture(mut self, code: &str) -> Self {
        self.data["msgtype"] = json!("picture");
        self.data["content"] = json!({"downloadCode": code, "pictureDownloadCode": code});
        self.data.as_object_mut().map(|o| o.remove("text"));
        self
    }

    /// Its `msgId`.
    pub fn msg_id(&self) -> String {
        self.data["msgId"].as_str().unwrap_or_default().to_string()
    }
}

/// A robot message the bot sent.
#[derive(Debug, Clone, PartialEq)]
pub struct Sent {
    /// `group:{openConversationId}` or the user's staff id.
    pub chat: String,
    /// `msgKey` (`sampleMarkdown`, `sampleImageMsg`, `sampleFile`).
    pub key: String,
    /// `msgParam`, decoded.
    pub param: Value,
}

impl Sent {
    /// The Markdown text (`msgParam.text`).
    pub fn text(&self) -> &str {
        self.param["text"].as_str().unwrap_or_default()
    }
}

/// Stream connections of the app.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Conns {
    /// Connected now.
    pub now: usize,
    /// The most ever connected at once.
    pub peak: usize,
    /// Connections accepted in total.
    pub opened: usize,
}

/// A file the bot uploaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upload {
    /// `type`: image, voice, video or file.
    pub kind: String,
    /// File name.
    pub name: String,
    /// Its bytes.
    pub bytes: Vec<u8>,
}

#[derive(Debug, Default)]
struct Inner {
    next: u64,
    tickets: HashSet<String>,
    tokens: HashSet<String>,
    conns: Vec<(u64, mpsc::UnboundedSender<String>)>,
    stats: Conns,
    queue: VecDeque<(String, String)>,
    unacked: HashMap<String, (u64, String)>,
    acks: Vec<Value>,
    sent: Vec<Sent>,
    uploads: Vec<Upload>,
    files: HashMap<String, Vec<u8>>,
    refused: usize,
    file_requests: usize,
    hold_files: bool,
    sends: usize,
    issued: usize,
    fail_opens: usize,
    opens: usize,
    hold_send: Option<usize>,
    held_peer: Option<SocketAddr>,
}

impl Inner {
    fn next(&mut self) -> u64 {
        self.next += 1;
        self.next
    }

    /// Sends every queued frame to the oldest connection.
    fn flush(&mut self) {
        let Some((conn, tx)) = self.conns.first().cloned() else {
            return;
        };
        while let Some((id, frame)) = self.queue.pop_front() {
            if tx.send(frame.clone()).is_err() {
                self.queue.push_front((id, frame));
                return;
            }
            self.unacked.insert(id, (conn, frame));
        }
    }
}

#[derive(Debug)]
struct Shared {
    client_id: String,
    client_secret: String,
    addr: SocketAddr,
    state: Watched<Inner>,
}

/// A running fake; cloning shares it. The server stops when the last clone drops.
#[derive(Debug, Clone)]
pub struct DingTalkFake {
    shared: Arc<Shared>,
    _server: Arc<ServerTask>,
}

impl DingTalkFake {
    /// Binds a free port of 127.0.0.1 and serves the app `client_id`/`client_secret`.
    pub async fn start(client_id: &str, client_secret: &str) -> anyhow::Result<Self> {
        let listener = fake_server::bind("dingtalk fake").await?;
        let addr = listener.addr;
        let shared = Arc::new(Shared {
            client_id: client_id.into(),
            client_secret: client_secret.into(),
            addr,
            state: Watched::default(),
        });
        let app = Router::new()
            .route("/v1.0/oauth2/accessToken", post(access_token))
            .route("/v1.0/gateway/connections/open", post(open_connection))
            .route("/connect", get(connect))
            .route("/v1.0/robot/oToMessages/batchSend", post(send_to_user))
            .route("/v1.0/robot/groupMessages/send", post(send_to_group))
            .route("/v1.0/robot/messageFiles/download", post(download_url))
            .route("/files/{code}", get(file))
            .route("/media/upload", post(upload))
            .with_state(shared.clone());
        let server = listener.serve_with_peers(app);
        Ok(Self {
            shared,
            _server: server,
        })
    }

    /// Returns the OpenAPI root for `channels.dingtalk.apiBase` and `oapiBase`.
    pub fn api_base(&self) -> String {
        format!("http://{}", self.shared.addr)
    }

    /// Delivers `msg` as a CALLBACK frame (to the oldest connection, or the next one to
    /// connect); returns the frame's message id.
    pub fn inject(&self, msg: &RobotMsg) -> String {
        self.inject_data(&msg.data.to_string())
    }

    /// Delivers a CALLBACK frame whose `data` is `data` as given (possibly not JSON); returns
    /// the frame's message id.
    pub fn inject_data(&self, data: &str) -> String {
        self.shared.state.with(|inner| {
            let id = format!("frame-{}", inner.next());
            let frame = json!({
                "specVersion": "1.0", "type": "CALLBACK",
                "headers": {"appId": "app", "connectionId": "c", "contentType": "application/json",
                            "messageId": id, "time": "1764000000000", "topic": BOT_TOPIC},
                "data": data,
            });
            inner.queue.push_back((id.clone(), frame.to_string()));
            inner.flush();
            id
        })
    }

    /// Makes a file downloadable by `code`.
    pub fn add_file(&self, code: &str, bytes: &[u8]) {
        self.shared
            .state
            .with(|inner| inner.files.insert(code.into(), bytes.to_vec()));
    }

    /// Holds every file download (`GET /files/…`) until called with false.
    pub fn hold_files(&self, hold: bool) {
        self.shared.state.with(|i| i.hold_files = hold);
    }

    /// Revokes every access token issued so far (calls with them get a 401).
    pub fn revoke_tokens(&self) {
        self.shared.state.with(|i| i.tokens.clear());
    }

    /// Returns how many access tokens were issued.
    pub fn tokens_issued(&self) -> usize {
        self.shared.state.peek(|i| i.issued)
    }

    /// Answers the next `n` `connections/open` with a 503.
    pub fn fail_opens(&self, n: usize) {
        self.shared.state.with(|i| i.fail_opens = n);
    }

    /// Returns how many `connections/open` calls were made.
    pub fn opens(&self) -> usize {
        self.shared.state.peek(|i| i.opens)
    }

    /// Holds the `n`-th robot send (counting from 1) forever: it is never answered nor recorded.
    pub fn hold_send(&self, n: usize) {
        self.shared.state.with(|i| i.hold_send = Some(n));
    }

    /// Returns the client address of the held send, once it arrived.
    pub fn held_peer(&self) -> Option<SocketAddr> {
        self.shared.state.peek(|i| i.held_peer)
    }

    /// Returns how many file downloads were asked for.
    pub fn file_requests(&self) -> usize {
        self.shared.state.peek(|i| i.file_requests)
    }

    /// Sends a SYSTEM frame of `topic` to every connection; returns its message id.
    fn system(&self, topic: &str, data: Value) -> String {
        self.shared.state.with(|inner| {
            let id = format!("sys-{}", inner.next());
            let frame = json!({"specVersion": "1.0", "type": "SYSTEM",
                "headers": {"contentType": "application/json", "messageId": id, "topic": topic},
                "data": data.to_string()})
            .to_string();
            for (_, tx) in &inner.conns {
                let _ = tx.send(frame.clone());
            }
            id
        })
    }

    /// Sends a SYSTEM `ping` (data `{"opaque": …}`) to every connection; returns its message id.
    pub fn ping(&self, opaque: &str) -> String {
        self.system("ping", json!({"opaque": opaque}))
    }

    /// Sends a SYSTEM `disconnect` to every connection.
    pub fn disconnect(&self) -> String {
        self.system("disconnect", json!({"reason": "switching"}))
    }

    /// Returns the ACK frames received, in order.
    pub fn acks(&self) -> Vec<Value> {
        self.shared.state.peek(|i| i.acks.clone())
    }

    /// Returns the ACK of frame `id`, if any.
    pub fn ack_of(&self, id: &str) -> Option<Value> {
        self.acks()
            .into_iter()
            .find(|a| a["headers"]["messageId"] == id)
    }

    /// Returns every message the bot sent, in order.
    pub fn sent(&self) -> Vec<Sent> {
        self.shared.state.peek(|i| i.sent.clone())
    }

    /// Returns the messages the bot sent to `chat`.
    pub fn sent_to(&self, chat: &str) -> Vec<Sent> {
        self.sent().into_iter().filter(|s| s.chat == chat).collect()
    }

    /// Returns the files the bot uploaded.
    pub fn uploads(&self) -> Vec<Upload> {
        self.shared.state.peek(|i| i.uploads.clone())
    }

    /// Returns the Stream connections now, at peak and in total.
    pub fn conns(&self) -> Conns {
        self.shared.state.peek(|i| i.stats)
    }

    /// Returns how many calls presented refused credentials.
    pub fn refused(&self) -> usize {
        self.shared.state.peek(|i| i.refused)
    }

    /// Waits until a Stream connection is up.
    pub async fn wait_connected(&self) -> anyhow::Result<()> {
        self.wait_until("a stream connection", DEFAULT_WAIT, |f| {
            (f.conns().now >= 1).then_some(())
        })
        .await
    }

    /// Waits until `chat` got at least `n` messages; returns them.
    pub async fn wait_sent(&self, chat: &str, n: usize) -> anyhow::Result<Vec<Sent>> {
        self.wait_until(&format!("{n} messages to {chat}"), DEFAULT_WAIT, |f| {
            let sent = f.sent_to(chat);
            (sent.len() >= n).then_some(sent)
        })
        .await
    }

    /// Waits until `check` returns `Some`, re-checking after every change; fails after
    /// `timeout` naming `what`.
    pub async fn wait_until<T>(
        &self,
        what: &str,
        timeout: Duration,
        mut check: impl FnMut(&DingTalkFake) -> Option<T>,
    ) -> anyhow::Result<T> {
        let found = self.shared.state.wait(timeout, || check(self));
        if let Some(found) = found.await {
            return Ok(found);
        }
        anyhow::bail!(
            "dingtalk fake: timed out after {timeout:?} waiting for {what}; sent: {:#?}, conns: {:?}",
            self.sent(),
            self.conns()
        )
    }
}

fn error(status: StatusCode, code: &str, message: &str) -> Response {
    (
        status,
        axum::Json(json!({"code": code, "message": message})),
    )
        .into_response()
}

async fn access_token(State(s): State<Arc<Shared>>, axum::Json(b): axum::Json<Value>) -> Response {
    if b["appKey"] != s.client_id.as_str() || b["appSecret"] != s.client_secret.as_str() {
        s.state.with(|i| i.refused += 1);
        return error(
            StatusCode::BAD_REQUEST,
            "invalidClientIdOrSecret",
            "无效的clientId或者clientSecret",
        );
    }
    let token = s.state.with(|i| {
        let token = format!("at-{}", i.next());
        i.tokens.insert(token.clone());
        i.issued += 1;
        token
    });
    axum::Json(json!({"accessToken": token, "expireIn": 7200})).into_response()
}

async fn open_connection(
    State(s): State<Arc<Shared>>,
    axum::Json(b): axum::Json<Value>,
) -> Response {
    if b["clientId"] != s.client_id.as_str() || b["clientSecret"] != s.client_secret.as_str() {
        s.state.with(|i| i.refused += 1);
        return error(
            StatusCode::UNAUTHORIZED,
            "InvalidAuthentication",
            "clientId or clientSecret invalid",
        );
    }
    let failing = s.state.with(|i| {
        i.opens += 1;
        let failing = i.fail_opens > 0;
        i.fail_opens = i.fail_opens.saturating_sub(1);
        failing
    });
    if failing {
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            "ServiceUnavailable",
            "稍后重试",
        );
    }
    let subscribed = b["subscriptions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|t| t["type"] == "CALLBACK" && t["topic"] == BOT_TOPIC);
    if !subscribed {
        return error(
            StatusCode::BAD_REQUEST,
            "invalidParameter",
            "no robot message subscription",
        );
    }
    let ticket = s.state.with(|i| {
        let ticket = format!("tk+{}/{}=", i.next(), uuid::Uuid::new_v4().simple());
        i.tickets.insert(ticket.clone());
        ticket
    });
    axum::Json(json!({"endpoint": format!("ws://{}/connect", s.addr), "ticket": ticket}))
        .into_response()
}

async fn connect(
    State(s): State<Arc<Shared>>,
    Query(q): Query<HashMap<String, String>>,
    ws: WebSocketUpgrade,
) -> Response {
    let ticket = q.get("ticket").cloned().unwrap_or_default();
    if !s.state.with(|i| i.tickets.remove(&ticket)) {
        return error(
            StatusCode::UNAUTHORIZED,
            "invalidTicket",
            "ticket unknown or used",
        );
    }
    ws.on_upgrade(move |socket| serve_socket(s, socket))
}

async fn serve_socket(s: Arc<Shared>, mut socket: WebSocket) {
    let (tx, mut rx) = mpsc::unbounded_channel::<String>();
    let conn = s.state.with(|i| {
        let conn = i.next();
        i.conns.push((conn, tx));
        i.stats.now += 1;
        i.stats.opened += 1;
        i.stats.peak = i.stats.peak.max(i.stats.now);
        i.flush();
        conn
    });
    loop {
        tokio::select! {
            out = rx.recv() => match out {
                Some(frame) => if socket.send(WsMessage::Text(frame.into())).await.is_err() { break },
                None => break,
            },
            incoming = socket.recv() => match incoming {
                Some(Ok(WsMessage::Text(text))) => {
                    let ack: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
                    s.state.with(|i| {
                        if let Some(id) = ack["headers"]["messageId"].as_str() {
                            i.unacked.remove(id);
                        }
                        i.acks.push(ack);
                    });
                }
                Some(Ok(WsMessage::Close(_))) | None | Some(Err(_)) => break,
                Some(Ok(_)) => {}
            },
        }
    }
    s.state.with(|i| {
        i.conns.retain(|(c, _)| *c != conn);
        i.stats.now -= 1;
        let mut again: Vec<(String, String)> = i
            .unacked
            .iter()
            .filter(|(_, (c, _))| *c == conn)
            .map(|(id, (_, frame))| (id.clone(), frame.clone()))
            .collect();
        again.sort();
        for (id, frame) in again.into_iter().rev() {
            i.unacked.remove(&id);
            i.queue.push_front((id, frame));
        }
        i.flush();
    });
}

fn token_ok(s: &Shared, headers: &HeaderMap) -> bool {
    let token = headers
        .get("x-acs-dingtalk-access-token")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    s.state.peek(|i| i.tokens.contains(token))
}

async fn record(
    s: &Shared,
    peer: SocketAddr,
    headers: &HeaderMap,
    chat: String,
    b: &Value,
) -> Response {
    let held = s.state.with(|i| {
        i.sends += 1;
        let held = i.hold_send == Some(i.sends);
        if held {
            i.held_peer = Some(peer);
        }
        held
    });
    if held {
        std::future::pending::<()>().await;
    }
    if !token_ok(s, headers) {
        return error(
            StatusCode::UNAUTHORIZED,
            "InvalidAuthentication",
            "token invalid",
        );
    }
    if b["robotCode"] != s.client_id.as_str() {
        return error(
            StatusCode::BAD_REQUEST,
            "invalidParameter.robotCode",
            "robot not found",
        );
    }
    let key = b["msgKey"].as_str().unwrap_or_default().to_string();
    let Some(param) = b["msgParam"]
        .as_str()
        .and_then(|p| serde_json::from_str::<Value>(p).ok())
    else {
        return error(
            StatusCode::BAD_REQUEST,
            "invalidParameter.msgParam",
            "msgParam is not JSON",
        );
    };
    if key == "sampleMarkdown" && param["text"].as_str().unwrap_or_default().len() > MAX_TEXT_BYTES
    {
        return error(
            StatusCode::BAD_REQUEST,
            "invalidParameter.msgParam",
            "text too long",
        );
    }
    s.state.with(|i| i.sent.push(Sent { chat, key, param }));
    axum::Json(json!({"processQueryKey": uuid::Uuid::new_v4().to_string()})).into_response()
}

async fn send_to_user(
    State(s): State<Arc<Shared>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    axum::Json(b): axum::Json<Value>,
) -> Response {
    let users = b["userIds"].as_array().cloned().unwrap_or_default();
    let [user] = users.as_slice() else {
        return error(
            StatusCode::BAD_REQUEST,
            "invalidParameter.userIds",
            "one user expected",
        );
    };
    let user = user.as_str().unwrap_or_default().to_string();
    record(&s, peer, &headers, user, &b).await
}

async fn send_to_group(
    State(s): State<Arc<Shared>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    axum::Json(b): axum::Json<Value>,
) -> Response {
    let chat = format!(
        "group:{}",
        b["openConversationId"].as_str().unwrap_or_default()
    );
    record(&s, peer, &headers, chat, &b).await
}

async fn download_url(
    State(s): State<Arc<Shared>>,
    headers: HeaderMap,
    axum::Json(b): axum::Json<Value>,
) -> Response {
    if !token_ok(&s, &headers) {
        return error(
            StatusCode::UNAUTHORIZED,
            "InvalidAuthentication",
            "token invalid",
        );
    }
    let code = b["downloadCode"].as_str().unwrap_or_default();
    if !s.state.peek(|i| i.files.contains_key(code)) {
        return error(
            StatusCode::BAD_REQUEST,
            "invalidParameter.downloadCode",
            "unknown code",
        );
    }
    let encoded: String = url::form_urlencoded::byte_serialize(code.as_bytes()).collect();
    axum::Json(json!({"downloadUrl": format!("http://{}/files/{encoded}", s.addr)})).into_response()
}

async fn file(State(s): State<Arc<Shared>>, Path(code): Path<String>) -> Response {
    s.state.with(|i| i.file_requests += 1);
    let mut changed = s.state.subscribe();
    while s.state.peek(|i| i.hold_files) {
        if changed.changed().await.is_err() {
            break;
        }
    }
    match s.state.peek(|i| i.files.get(&code).cloned()) {
        Some(bytes) => bytes.into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

async fn upload(
    State(s): State<Arc<Shared>>,
    Query(q): Query<HashMap<String, String>>,
    mut form: Multipart,
) -> Response {
    let token = q.get("access_token").cloned().unwrap_or_default();
    if !s.state.peek(|i| i.tokens.contains(&token)) {
        return axum::Json(json!({"errcode": 40014, "errmsg": "不合法的access_token"}))
            .into_response();
    }
    let kind = q.get("type").cloned().unwrap_or_default();
    while let Ok(Some(field)) = form.next_field().await {
        if field.name() != Some("media") {
            continue;
        }
        let name = field.file_name().unwrap_or("file").to_string();
        let Ok(bytes) = field.bytes().await else {
            break;
        };
        let id = s.state.with(|i| {
            i.uploads.push(Upload {
                kind: kind.clone(),
                name,
                bytes: bytes.to_vec(),
            });
            i.next()
        });
        return axum::Json(
            json!({"errcode": 0, "errmsg": "ok", "media_id": format!("@media-{id}"), "type": kind}),
        )
        .into_response();
    }
    axum::Json(json!({"errcode": 40004, "errmsg": "no media"})).into_response()
}
