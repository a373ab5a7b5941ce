//! A OneBot v11 implementation fake (NapCat's forward WebSocket), written from the OneBot 11
//! spec (botuniverse/onebot-11: `communication/ws.md`, `api/public.md`, `event/message.md`,
//! `message/segment.md`), on one free 127.0.0.1 port.
//!
//! # Surface
//! - The forward WebSocket at `ws://127.0.0.1:PORT/` (events and API) and `/api` (API only, no
//!   events): the access token in `Authorization: Bearer …` or `?access_token=`; none is a
//!   401, a wrong one a 403, before the upgrade (the spec's rule), or with
//!   [`OneBotFake::refuse_like_napcat`] an upgrade, a retcode 1403 frame and a close (NapCat's).
//!   Every event connection gets a `lifecycle`/`connect` meta event first, then every injected
//!   event (as NapCat, events go to every client on `/`).
//! - Actions (`{"action","params","echo"}` → `{"status","retcode","data","echo"}`):
//!   `get_login_info`, `send_private_msg`, `send_group_msg`, `send_msg` (segment arrays or CQ
//!   strings; records the message, answers its `message_id`), `get_msg` (an injected or sent
//!   message: its `sender.user_id`), `get_group_member_info` (a card for every member); any
//!   other action is `failed` with retcode 1404.
//! - Images users "sent" are served at `GET /images/{name}`, in 1 KiB chunks.
//!
//! # Test controls
//! [`OneBotFake::inject`] sends a [`QqMessage`] (private or group, @bot, reply, image, as
//! segments or as a CQ string) to every connection; [`OneBotFake::sent`] is what the bot sent;
//! [`OneBotFake::connections`] counts sockets and the receiving ones (those that logged in);
//! [`OneBotFake::drop_connections`] closes every socket; [`OneBotFake::wait_until`] wakes on
//! every change, never sleeps.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::ws::{Message as WsMessage, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::fake_server::{self, ServerTask, Watched};

/// How long the `wait_*` helpers wait by default.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(30);
/// The bot's QQ number (`self_id`).
pub const SELF_ID: u64 = 3_000_000_001;

/// A message a user sends, built with [`QqMessage::private`] or [`QqMessage::group`].
#[derive(Debug, Clone)]
pub struct QqMessage {
    /// Sender's QQ number.
    pub user: u64,
    /// Group (none: private).
    pub group: Option<u64>,
    /// Segments.
    pub segments: Vec<Value>,
    /// Sender's nickname.
    pub nickname: String,
    /// Send `message` as a CQ string instead of an array.
    pub cq: bool,
}

impl QqMessage {
    /// A private message from `user`.
    pub fn private(user: u64, text: &str) -> Self {
        Self {
            user,
            group: None,
            segments: vec![json!({"type": "text", "data": {"text": text}})],
            nickname: format!("用户{user}"),
            cq: false,
        }
    }

    /// A message from `user` in `group`.
    pub fn group(group: u64, user: u64, text: &str) -> Self {
        Self {
            group: Some(group),
            ..Self::private(user, text)
        }
    }

    /// @s the bot in front of the text, as QQ clients do.
    pub fn at_bot(mut self) -> Self {
        self.segments.insert(
            0,
            json!({"type": "at", "data": {"qq": SELF_ID.to_string()}}),
        );
        self
    }

    /// Replies to message `id`.
    pub fn replying_to(mut self, id: i64) -> Self {
        self.segments
            .insert(0, json!({"type": "reply", "data": {"id": id.to_string()}}));
        self
    }

    /// Sets the sender's nickname.
    pub fn from_nickname(mut self, nickname: &str) -> Self {
        self.nickname = nickname.into();
        self
    }

    /// Adds an image served by `fake` (`file_size` announced when `announce`).
    pub fn with_image(
        mut self,
        fake: &OneBotFake,
        name: &str,
        bytes: &[u8],
        announce: bool,
    ) -> Self {
        let url = fake.host_image(name, bytes);
        let mut data = json!({"file": name, "url": url});
        if announce {
            data["file_size"] = json!(bytes.len().to_string());
        }
        self.segments.push(json!({"type": "image", "data": data}));
        self
    }

    /// Sends `message` as a CQ-code string (escaped per the spec).
    pub fn as_cq(mut self) -> Self {
        self.cq = true;
        self
    }
}

/// Encodes segments as a CQ string: text escapes `& [ ]`, parameters also `,`.
pub fn to_cq(segments: &[Value]) -> String {
    let esc = |s: &str| {
        s.replace('&', "&amp;")
            .replace('[', "&#91;")
            .replace(']', "&#93;")
    };
    segments
        .iter()
        .map(|seg| {
            let data = seg["data"].as_object().cloned().unwrap_or_default();
            if seg["type"] == "text" {
                return esc(data.get("text").and_then(Value::as_str).unwrap_or_default());
            }
            let params: String = data
                .iter()
                .map(|(k, v)| {
                    let v = v.as_str().map_or_else(|| v.to_string(), str::to_string);
                    format!(",{k}={}", esc(&v).replace(',', "&#44;"))
                })
                .collect();
            format!("[CQ:{}{params}]", seg["type"].as_str().unwrap_or_default())
        })
        .collect()
}

/// A message the bot sent.
#[derive(Debug, Clone, PartialEq)]
pub struct Sent {
    /// Its `message_id`.
    pub id: i64,
    /// The action (`send_private_msg`, `send_group_msg`, `send_msg`).
    pub action: String,
    /// `private:{user}` or `group:{group}`.
    pub chat: String,
    /// Its text segments joined.
    pub text: String,
    /// Its image segments' `file`.
    pub images: Vec<String>,
}

/// WebSocket connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Connections {
    /// Open now.
    pub now: usize,
    /// Open now on `/api` (no events).
    pub api_only: usize,
    /// Open now and logged in (`get_login_info`): the event receivers.
    pub receiving: usize,
    /// The most receivers at once (above 1: two replicas received the same events).
    pub receiving_peak: usize,
    /// Upgrades accepted in total.
    pub accepted: usize,
    /// Upgrades refused for the token.
    pub refused: usize,
}

#[derive(Debug)]
struct Conn {
    id: u64,
    tx: mpsc::UnboundedSender<Option<String>>,
    receiving: bool,
    /// Connected on `/api`: gets no events.
    api: bool,
}

#[derive(Debug, Default)]
struct Inner {
    next_id: i64,
    conns: Vec<Conn>,
    stats: Connections,
    sent: Vec<Sent>,
    /// message id → sender, for `get_msg`.
    authors: Vec<(i64, u64)>,
    images: Vec<(String, Vec<u8>)>,
    actions: Vec<String>,
    /// Sends beyond this many are left unanswered and unrecorded (never reached QQ).
    hold_after: Option<usize>,
    held: usize,
    /// Refuse a wrong token as NapCat does: upgrade, a retcode 1403 frame, close.
    refuse_like_napcat: bool,
    /// Every event sent, by message id, for [`OneBotFake::send_again`].
    events: Vec<(i64, Value)>,
    /// Upgrades on `/` still to refuse with 503 (NapCat down).
    unavailable: usize,
    /// When each upgrade on `/` was attempted.
    attempts: Vec<std::time::Instant>,
}

impl Inner {
    fn recount(&mut self) {
        self.stats.now = self.conns.len();
        self.stats.receiving = self.conns.iter().filter(|c| c.receiving).count();
        self.stats.api_only = self.conns.iter().filter(|c| c.api).count();
        self.stats.receiving_peak = self.stats.receiving_peak.max(self.stats.receiving);
    }
}

#[derive(Debug)]
struct Shared {
    token: String,
    addr: SocketAddr,
    state: Watched<Inner>,
}

/// A running fake; cloning shares it. The server stops when the last clone drops.
#[derive(Debug, Clone)]
pub struct OneBotFake {
    shared: Arc<Shared>,
    _server: Arc<ServerTask>,
}

impl OneBotFake {
    /// Binds a free port of 127.0.0.1 and accepts `token` (empty: no token required).
    pub async fn start(token: &str) -> anyhow::Result<Self> {
        let listener = fake_server::bind("onebot fake").await?;
        let addr = listener.addr;
        let shared = Arc::new(Shared {
            token: token.into(),
            addr,
            state: Watched::new(Inner {
                next_id: 1_000,
                ..Inner::default()
            }),
        });
        let app = Router::new()
            .route("/", get(upgrade))
            .route("/api", get(upgrade_api))
            .route("/images/{name}", get(image))
            .with_state(shared.clone());
        let server = listener.serve(app);
        Ok(Self {
            shared,
            _server: server,
        })
    }

    /// Returns the URL for `channels.napcat.wsUrl`.
    pub fn ws_url(&self) -> String {
        format!("ws://{}", self.shared.addr)
    }

    /// Serves `bytes` at `/images/{name}`; returns its URL.
    pub fn host_image(&self, name: &str, bytes: &[u8]) -> String {
        self.shared
            .state
            .with(|i| i.images.push((name.to_string(), bytes.to_vec())));
        let encoded: String = url::form_urlencoded::byte_serialize(name.as_bytes()).collect();
        format!("http://{}/images/{encoded}", self.shared.addr)
    }

    /// Sends `msg` as a message event to every connection; returns its `message_id`.
    pub fn inject(&self, msg: QqMessage) -> i64 {
        self.shared.state.with(|inner| {
            inner.next_id += 1;
            let id = inner.next_id;
            inner.authors.push((id, msg.user));
            let message = if msg.cq {
                Value::String(to_cq(&msg.segments))
            } else {
                Value::Array(msg.segments.clone())
            };
            let mut ev = json!({
                "time": 1_790_000_000, "self_id": SELF_ID, "post_type": "message",
                "message_type": if msg.group.is_some() { "group" } else { "private" },
                "sub_type": if msg.group.is_some() { "normal" } else { "friend" },
                "message_id": id, "user_id": msg.user, "message": message,
                "raw_message": to_cq(&msg.segments), "font": 0,
                "sender": {"user_id": msg.user, "nickname": msg.nickname, "card": ""},
            });
            if let Some(group) = msg.group {
                ev["group_id"] = json!(group);
            }
            broadcast(inner, &ev);
            inner.events.push((id, ev));
            id
        })
    }

    /// Sends `text` as is (any frame, valid or not) to every event connection.
    pub fn send_raw(&self, text: &str) {
        self.shared.state.with(|inner| {
            for c in inner.conns.iter().filter(|c| !c.api) {
                let _ = c.tx.send(Some(text.to_string()));
            }
        });
    }

    /// Sends message event `id` again, unchanged (as two overlapping connections would see it).
    pub fn send_again(&self, id: i64) {
        self.shared.state.with(|inner| {
            let ev = inner
                .events
                .iter()
                .find(|(m, _)| *m == id)
                .map(|(_, e)| e.clone());
            if let Some(ev) = ev {
                broadcast(inner, &ev);
            }
        });
    }

    /// Sends a `group_increase` notice (user joined group) to every connection.
    pub fn inject_join(&self, group: u64, user: u64) {
        self.shared.state.with(|inner| {
            let ev = json!({"time": 1_790_000_001, "self_id": SELF_ID, "post_type": "notice",
                "notice_type": "group_increase", "sub_type": "approve", "group_id": group,
                "operator_id": 0, "user_id": user});
            broadcast(inner, &ev);
        });
    }

    /// Answers the next `n` upgrades on `/` with 503 (NapCat down).
    pub fn refuse_next_upgrades(&self, n: usize) {
        self.shared.state.with(|i| i.unavailable = n);
    }

    /// Returns when each upgrade on `/` was attempted.
    pub fn attempts(&self) -> Vec<std::time::Instant> {
        self.shared.state.peek(|i| i.attempts.clone())
    }

    /// Refuses a wrong token as NapCat does (upgrade, a retcode 1403 frame, close) instead of
    /// the spec's 401/403.
    pub fn refuse_like_napcat(&self) {
        self.shared.state.with(|i| i.refuse_like_napcat = true);
    }

    /// Leaves every send after the first `n` recorded ones unanswered and unrecorded, as if
    /// it never reached QQ (the sender is to be killed while it waits).
    pub fn hold_sends_after(&self, n: usize) {
        self.shared.state.with(|i| i.hold_after = Some(n));
    }

    /// Lets sends through again.
    pub fn release_sends(&self) {
        self.shared.state.with(|i| i.hold_after = None);
    }

    /// Returns how many sends were held.
    pub fn held(&self) -> usize {
        self.shared.state.peek(|i| i.held)
    }

    /// Closes every connection (NapCat restarting).
    pub fn drop_connections(&self) {
        self.shared.state.with(|inner| {
            for c in &inner.conns {
                let _ = c.tx.send(None);
            }
        });
    }

    /// Returns every message the bot sent, in order.
    pub fn sent(&self) -> Vec<Sent> {
        self.shared.state.peek(|i| i.sent.clone())
    }

    /// Returns the messages the bot sent to `chat` (`private:1`, `group:2`).
    pub fn sent_to(&self, chat: &str) -> Vec<Sent> {
        self.sent().into_iter().filter(|s| s.chat == chat).collect()
    }

    /// Returns the actions called, in order.
    pub fn actions(&self) -> Vec<String> {
        self.shared.state.peek(|i| i.actions.clone())
    }

    /// Returns the connection counts.
    pub fn connections(&self) -> Connections {
        self.shared.state.peek(|i| i.stats)
    }

    /// Waits until a connection has logged in.
    pub async fn wait_receiving(&self) -> anyhow::Result<()> {
        self.wait_until("a logged-in connection", DEFAULT_WAIT, |f| {
            (f.connections().receiving >= 1).then_some(())
        })
        .await
    }

    /// Waits until `check` returns `Some`, re-checking after every change; fails after
    /// `timeout` naming `what`.
    pub async fn wait_until<T>(
        &self,
        what: &str,
        timeout: Duration,
        mut check: impl FnMut(&OneBotFake) -> Option<T>,
    ) -> anyhow::Result<T> {
        let found = self.shared.state.wait(timeout, || check(self));
        if let Some(found) = found.await {
            return Ok(found);
        }
        anyhow::bail!(
            "onebot fake: timed out after {timeout:?} waiting for {what}; sent: {:#?}, connections: {:?}",
            self.sent(),
            self.connections()
        )
    }
}

fn broadcast(inner: &mut Inner, ev: &Value) {
    let text = ev.to_string();
    for c in inner.conns.iter().filter(|c| !c.api) {
        let _ = c.tx.send(Some(text.clone()));
    }
}

async fn upgrade(
    State(s): State<Arc<Shared>>,
    Query(query): Query<std::collections::HashMap<String, String>>,
    headers: HeaderMap,
    ws: WebSocketUpgrade,
) -> Response {
    accept(s, &query, &headers, ws, false)
}

async fn upgrade_api(
    State(s): State<Arc<Shared>>,
    Query(query): Query<std::collections::HashMap<String, String>>,
    headers: HeaderMap,
    ws: WebSocketUpgrade,
) -> Response {
    accept(s, &query, &headers, ws, true)
}

fn accept(
    s: Arc<Shared>,
    query: &std::collections::HashMap<String, String>,
    headers: &HeaderMap,
    ws: WebSocketUpgrade,
    api: bool,
) -> Response {
    if !api {
        let down = s.state.with(|i| {
            i.attempts.push(std::time::Instant::now());
            let down = i.unavailable > 0;
            i.unavailable = i.unavailable.saturating_sub(1);
            down
        });
        if down {
            return StatusCode::SERVICE_UNAVAILABLE.into_response();
        }
    }
    // Compared as bytes: a token may be any UTF-8 (Node reads header bytes as they come).
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.as_bytes().strip_prefix(b"Bearer "))
        .or(query.get("access_token").map(String::as_bytes));
    if !s.token.is_empty() {
        let status = match bearer {
            None => Some(StatusCode::UNAUTHORIZED),
            Some(t) if t != s.token.as_bytes() => Some(StatusCode::FORBIDDEN),
            Some(_) => None,
        };
        if let Some(status) = status {
            s.state.with(|i| i.stats.refused += 1);
            if s.state.peek(|i| i.refuse_like_napcat) {
                return ws.on_upgrade(|mut socket| async move {
                    let no = json!({"status": "failed", "retcode": 1403, "data": null,
                                    "message": "token验证失败", "wording": "token验证失败"});
                    let _ = socket.send(WsMessage::Text(no.to_string().into())).await;
                    let _ = socket.send(WsMessage::Close(None)).await;
                });
            }
            return status.into_response();
        }
    }
    ws.on_upgrade(move |socket| serve(s, socket, api))
}

async fn serve(s: Arc<Shared>, mut socket: WebSocket, api: bool) {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let id = s.state.with(|inner| {
        inner.stats.accepted += 1;
        let id = inner.stats.accepted as u64;
        inner.conns.push(Conn {
            id,
            tx,
            receiving: false,
            api,
        });
        inner.recount();
        id
    });
    let hello = json!({"time": 1_790_000_000, "self_id": SELF_ID, "post_type": "meta_event",
        "meta_event_type": "lifecycle", "sub_type": "connect"});
    let mut open = api
        || socket
            .send(WsMessage::Text(hello.to_string().into()))
            .await
            .is_ok();
    while open {
        tokio::select! {
            out = rx.recv() => match out {
                Some(Some(text)) => open = socket.send(WsMessage::Text(text.into())).await.is_ok(),
                _ => open = false,
            },
            frame = socket.recv() => match frame {
                Some(Ok(WsMessage::Text(text))) => {
                    if let Some(answer) = act(&s, id, &text) {
                        open = socket.send(WsMessage::Text(answer.to_string().into())).await.is_ok();
                    }
                }
                Some(Ok(WsMessage::Close(_))) | None | Some(Err(_)) => open = false,
                Some(Ok(_)) => {}
            },
        }
    }
    s.state.with(|inner| {
        inner.conns.retain(|c| c.id != id);
        inner.recount();
    });
}

/// Answers one action frame (none: a held send).
fn act(s: &Shared, conn: u64, text: &str) -> Option<Value> {
    let Ok(req) = serde_json::from_str::<Value>(text) else {
        return Some(
            json!({"status": "failed", "retcode": 1400, "data": null, "message": "bad json"}),
        );
    };
    let action = req["action"].as_str().unwrap_or_default().to_string();
    let params = &req["params"];
    let ok = |data: Value| json!({"status": "ok", "retcode": 0, "data": data, "echo": req["echo"]});
    s.state.with(|inner| {
        inner.actions.push(action.clone());
        let is_send = action.starts_with("send_");
        if is_send && inner.hold_after.is_some_and(|n| inner.sent.len() >= n) {
            inner.held += 1;
            return None;
        }
        Some(match action.as_str() {
            "get_login_info" => {
                if let Some(c) = inner.conns.iter_mut().find(|c| c.id == conn) {
                    c.receiving = true;
                }
                inner.recount();
                ok(json!({"user_id": SELF_ID, "nickname": "小纳🤖"}))
            }
            "send_private_msg" | "send_group_msg" | "send_msg" => {
                let group = params["group_id"].as_u64();
                let chat = match (action.as_str(), group, params["message_type"].as_str()) {
                    ("send_group_msg", Some(g), _) | ("send_msg", Some(g), Some("group")) => {
                        format!("group:{g}")
                    }
                    _ => format!("private:{}", params["user_id"]),
                };
                let segments = match &params["message"] {
                    Value::Array(a) => a.clone(),
                    Value::String(s) => vec![json!({"type": "text", "data": {"text": s}})],
                    _ => Vec::new(),
                };
                inner.next_id += 1;
                let id = inner.next_id;
                inner.authors.push((id, SELF_ID));
                let field = |t: &str, k: &str| -> Vec<String> {
                    segments
                        .iter()
                        .filter(|seg| seg["type"] == t)
                        .filter_map(|seg| seg["data"][k].as_str().map(str::to_string))
                        .collect()
                };
                inner.sent.push(Sent {
                    id,
                    action: action.clone(),
                    chat,
                    text: field("text", "text").concat(),
                    images: field("image", "file"),
                });
                ok(json!({"message_id": id}))
            }
            "get_msg" => {
                let id = params["message_id"].as_i64().unwrap_or_default();
                match inner.authors.iter().find(|(m, _)| *m == id) {
                    Some((_, user)) => ok(json!({"message_id": id, "sender": {"user_id": user}})),
                    None => json!({"status": "failed", "retcode": 1404, "data": null,
                                   "message": "消息不存在", "echo": req["echo"]}),
                }
            }
            "get_group_member_info" => {
                let user = params["user_id"].as_u64().unwrap_or_default();
                ok(json!({"user_id": user, "nickname": format!("用户{user}"), "card": format!("新人{user}")}))
            }
            _ => json!({"status": "failed", "retcode": 1404, "data": null,
                        "message": "不支持的API", "echo": req["echo"]}),
        })
    })
}

async fn image(State(s): State<Arc<Shared>>, Path(name): Path<String>) -> Response {
    let Some(bytes) = s.state.peek(|i| {
        i.images
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, b)| b.clone())
    }) else {
        return StatusCode::NOT_FOUND.into_response();
    };
    // Chunked, 1 KiB at a time, no Content-Length: a reader must stream to the end.
    let chunks: Vec<Result<Bytes, std::io::Error>> = bytes
        .chunks(1024)
        .map(|c| Ok(Bytes::copy_from_slice(c)))
        .collect();
    Body::from_stream(futures::stream::iter(chunks)).into_response()
}
