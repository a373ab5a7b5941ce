//! A WeCom fake owned by the test suite: the intelligent bots' long connection (智能机器人长连接)
//! and their media downloads on one free 127.0.0.1 port, written from WeCom's public docs.
//!
//! # Surface
//! - The long connection at `ws://127.0.0.1:PORT/` (`channels.wecom.wsUrl`), JSON text frames
//!   `{"cmd", "headers": {"req_id"}, "body"}`; every request is answered under its `req_id`
//!   with `{"headers", "errcode", "errmsg"}`:
//!   - `aibot_subscribe` `{bot_id, secret}`: a wrong pair is answered errcode 40058 and closed;
//!     a right one makes the connection the bot's, and an older connection of the bot gets an
//!     `aibot_event_callback` `disconnected_event` and is closed (one connection per bot).
//!   - `ping`: answered errcode 0.
//!   - `aibot_respond_msg` with a `req_id` WeCom pushed: `msgtype: stream` (`stream.id`,
//!     `content`, `finish`; the content replaces what that stream showed) or `markdown`;
//!     content over 20,480 UTF-8 bytes is errcode 40058; an unknown `req_id` is errcode 846605
//!     `invalid req_id`; a stream already finished is errcode 846608.
//!   - `aibot_respond_welcome_msg` (`msgtype: text`) to an `enter_chat` push's `req_id`.
//!   - `aibot_send_msg` `{chatid, msgtype: markdown}`: a push to a chat.
//!   - `aibot_upload_media_init` (`filename`, `type`, `total_size`, `total_chunks`, `md5`) →
//!     `upload_id`; `aibot_upload_media_chunk` (`chunk_index`, `base64_data`);
//!     `aibot_upload_media_finish` → `media_id` when every chunk came and size and md5 match.
//!     A reply or push with `msgtype` `image`/`file`/`voice`/`video` and that `media_id` shows
//!     the file.
//!   - Anything before a successful subscribe, or another cmd: errcode 40001.
//! - Media users send: `GET /media/{id}`, the file AES-256-CBC encrypted with the message's
//!   `aeskey` (IV its first 16 bytes, PKCS#7 padded to 32) and a `Content-Disposition` naming it.
//!
//! # Test controls
//! [`WeComFake::text`], [`WeComFake::image`], [`WeComFake::file`], [`WeComFake::enter_chat`]
//! push callbacks to the bot's live connection; [`WeComFake::push_again`] repeats one (WeCom's
//! duplicate delivery); [`WeComFake::drop_connection`] closes the live connection,
//! [`WeComFake::expire_req_ids`] makes answers to earlier pushes refused;
//! [`WeComFake::hold_answers`] keeps replies unanswered (a reply in flight);
//! [`WeComFake::messages`] is what the users see (one entry per stream or markdown message);
//! [`WeComFake::wait_until`] wakes on every frame and connection change, never sleeps.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use aes::cipher::{BlockEncryptMut as _, KeyIvInit as _, block_padding::NoPadding};
use axum::Router;
use axum::extract::ws::{Message as WsMessage, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use base64::Engine as _;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::fake_server::{self, ServerTask, Watched};

/// How long the `wait_*` helpers wait by default.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(30);
/// WeCom's longest stream or markdown content, in UTF-8 bytes.
pub const MAX_BYTES: usize = 20_480;
/// Writer sentinels: kick (a newer connection took over) and close.
const KICK: &str = "__kick__";
const CLOSE: &str = "__close__";

/// A message the users see from the bot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shown {
    /// The chat (a single chat's is the user id).
    pub chat: String,
    /// `stream` (an answer), `markdown` (a push) or `welcome`.
    pub kind: String,
    /// Its text (a stream's latest).
    pub content: String,
    /// The stream id (empty for others).
    pub stream_id: String,
    /// Whether the stream finished.
    pub finished: bool,
    /// The msgid of the user's message it answers (empty for pushes).
    pub answers: String,
    /// How many frames wrote it.
    pub writes: usize,
    /// An uploaded file it shows: its name and bytes.
    pub file: Option<(String, Vec<u8>)>,
}

/// The bot's subscribed connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Sessions {
    /// Subscribed and open now.
    pub now: usize,
    /// The most ever open at once.
    pub peak: usize,
    /// Subscribes accepted in total.
    pub subscribed: usize,
    /// Subscribes refused.
    pub refused: usize,
    /// Heartbeats answered.
    pub pings: usize,
}

#[derive(Debug, Default)]
struct Inner {
    next: u64,
    /// The bot's live connection: its id and writer.
    live: Option<(u64, mpsc::UnboundedSender<String>)>,
    open: usize,
    stats: Sessions,
    /// req_id pushed → (msgid, chat).
    pushed: HashMap<String, (String, String)>,
    /// Callbacks sent, by msgid, to push again.
    frames: HashMap<String, String>,
    shown: Vec<Shown>,
    media: HashMap<String, (String, Vec<u8>)>,
    hold: bool,
    held: Vec<(mpsc::UnboundedSender<String>, String)>,
    frames_in: Vec<Value>,
    /// Uploads in progress by upload_id.
    uploads: HashMap<String, Upload>,
    /// Uploaded files: media_id → (filename, bytes).
    uploaded: HashMap<String, (String, Vec<u8>)>,
}

/// An upload in progress: file name, announced size and md5, the chunks received.
type Upload = (String, u64, String, Vec<Option<Vec<u8>>>);

#[derive(Debug)]
struct Shared {
    bot_id: String,
    secret: String,
    addr: SocketAddr,
    state: Watched<Inner>,
}

/// A running fake; cloning shares it. The server stops when the last clone drops.
#[derive(Debug, Clone)]
pub struct WeComFake {
    shared: Arc<Shared>,
    _server: Arc<ServerTask>,
}

impl WeComFake {
    /// Binds a free port of 127.0.0.1 and serves the bot `bot_id` with `secret`.
    pub async fn start(bot_id: &str, secret: &str) -> anyhow::Result<Self> {
        let listener = fake_server::bind("wecom fake").await?;
        let addr = listener.addr;
        let shared = Arc::new(Shared {
            bot_id: bot_id.into(),
            secret: secret.into(),
            addr,
            state: Watched::default(),
        });
        let app = Router::new()
            .route("/", get(upgrade))
            .route("/media/{id}", get(media))
            .with_state(shared.clone());
        let server = listener.serve(app);
        Ok(Self {
            shared,
            _server: server,
        })
    }

    /// Returns the URL for `channels.wecom.wsUrl`.
    pub fn ws_url(&self) -> String {
        format!("ws://{}/", self.shared.addr)
    }

    /// Pushes a text message from `user` (a group message when `group` is set); returns its msgid.
    pub fn text(&self, user: &str, group: Option<&str>, text: &str) -> String {
        self.push("text", user, group, json!({"text": {"content": text}}))
    }

    /// Pushes an image `bytes` from `user`; returns its msgid.
    pub fn image(&self, user: &str, bytes: &[u8]) -> String {
        let info = self.host("image.png", bytes);
        self.push("image", user, None, json!({"image": info}))
    }

    /// Pushes a file `name` with `bytes` from `user`; returns its msgid.
    pub fn file(&self, user: &str, name: &str, bytes: &[u8]) -> String {
        let mut info = self.host(name, bytes);
        info["name"] = json!(name);
        self.push("file", user, None, json!({"file": info}))
    }

    /// Pushes a message of any `msgtype` from `user` whose body has `content`'s fields (voice,
    /// mixed, video, ...); returns its msgid.
    pub fn message(&self, msgtype: &str, user: &str, content: Value) -> String {
        self.push(msgtype, user, None, content)
    }

    /// Returns the `{url, aeskey}` of `bytes` kept encrypted, for a mixed message's image.
    pub fn hosted(&self, name: &str, bytes: &[u8]) -> Value {
        self.host(name, bytes)
    }

    /// Sends `text` as it is to the live connection (bad input).
    pub fn push_raw(&self, text: &str) {
        let tx = self
            .shared
            .state
            .peek(|i| i.live.as_ref().map(|(_, tx)| tx.clone()));
        tx.expect("a live connection")
            .send(text.into())
            .expect("connection open");
    }

    /// Pushes an `enter_chat` event of `user` (opened the single chat with the bot).
    pub fn enter_chat(&self, user: &str) {
        let body = json!({"msgid": self.next_id("ev"), "create_time": 1_700_000_000,
            "aibotid": self.shared.bot_id, "from": {"userid": user},
            "msgtype": "event", "event": {"eventtype": "enter_chat"}});
        self.deliver("aibot_event_callback", body, user);
    }

    /// Pushes the callback of `msgid` again, under a new req_id.
    pub fn push_again(&self, msgid: &str) {
        let body: Value = self
            .shared
            .state
            .peek(|i| i.frames.get(msgid).cloned())
            .and_then(|f| serde_json::from_str(&f).ok())
            .expect("a pushed msgid");
        let chat = body["chatid"]
            .as_str()
            .or(body["from"]["userid"].as_str())
            .unwrap_or_default()
            .to_string();
        self.deliver("aibot_msg_callback", body, &chat);
    }

    /// Keeps (true) or answers (false, answering those held) the bot's replies.
    pub fn hold_answers(&self, hold: bool) {
        let held = self.shared.state.with(|i| {
            i.hold = hold;
            if hold {
                Vec::new()
            } else {
                std::mem::take(&mut i.held)
            }
        });
        for (tx, answer) in held {
            let _ = tx.send(answer);
        }
    }

    /// Closes the bot's live connection (as a network failure or WeCom's restart would).
    pub fn drop_connection(&self) {
        if let Some((_, tx)) = self.shared.state.peek(|i| i.live.clone()) {
            let _ = tx.send(CLOSE.into());
        }
    }

    /// Forgets every `req_id` pushed so far: answers to them are refused (846605), as
    /// WeCom refuses an expired one.
    pub fn expire_req_ids(&self) {
        self.shared.state.with(|i| i.pushed.clear());
    }

    /// Returns how many reply frames are held unanswered.
    pub fn held(&self) -> usize {
        self.shared.state.peek(|i| i.held.len())
    }

    /// Returns what the users see, in order.
    pub fn messages(&self) -> Vec<Shown> {
        self.shared.state.peek(|i| i.shown.clone())
    }

    /// Returns what `chat` sees.
    pub fn messages_in(&self, chat: &str) -> Vec<Shown> {
        self.messages()
            .into_iter()
            .filter(|m| m.chat == chat)
            .collect()
    }

    /// Returns every frame the bot sent.
    pub fn frames_in(&self) -> Vec<Value> {
        self.shared.state.peek(|i| i.frames_in.clone())
    }

    /// Returns the bot's connections.
    pub fn sessions(&self) -> Sessions {
        self.shared.state.peek(|i| i.stats)
    }

    /// Waits until the bot has a live connection.
    pub async fn wait_connected(&self) -> anyhow::Result<()> {
        self.wait_until("a subscribed connection", DEFAULT_WAIT, |f| {
            (f.shared.state.peek(|i| i.live.is_some())).then_some(())
        })
        .await
    }

    /// Waits until `check` returns `Some`, re-checking after every frame and connection
    /// change; fails after `timeout` naming `what`.
    pub async fn wait_until<T>(
        &self,
        what: &str,
        timeout: Duration,
        mut check: impl FnMut(&WeComFake) -> Option<T>,
    ) -> anyhow::Result<T> {
        let found = self.shared.state.wait(timeout, || check(self));
        if let Some(found) = found.await {
            return Ok(found);
        }
        anyhow::bail!(
            "wecom fake: timed out after {timeout:?} waiting for {what}; shown: {:#?}, sessions: {:?}",
            self.messages(),
            self.sessions()
        )
    }

    fn next_id(&self, prefix: &str) -> String {
        self.shared.state.with(|i| {
            i.next += 1;
            format!("{prefix}{:08}", i.next)
        })
    }

    /// Keeps `bytes` encrypted under a fresh key; returns the message's `{url, aeskey}`.
    fn host(&self, name: &str, bytes: &[u8]) -> Value {
        let id = self.next_id("m");
        let key: [u8; 32] =
            std::array::from_fn(|n| (n as u8).wrapping_mul(7).wrapping_add(id.len() as u8 + 3));
        let data = encrypt(bytes, &key);
        self.shared
            .state
            .with(|i| i.media.insert(id.clone(), (name.to_string(), data)));
        let aeskey = base64::engine::general_purpose::STANDARD.encode(key);
        json!({"url": format!("http://{}/media/{id}", self.shared.addr),
               "aeskey": aeskey.trim_end_matches('=')})
    }

    fn push(&self, msgtype: &str, user: &str, group: Option<&str>, content: Value) -> String {
        let msgid = self.next_id("msg");
        let mut body = json!({"msgid": msgid, "aibotid": self.shared.bot_id,
            "chattype": if group.is_some() { "group" } else { "single" },
            "from": {"userid": user}, "msgtype": msgtype});
        if let Some(group) = group {
            body["chatid"] = json!(group);
        }
        if let (Value::Object(b), Value::Object(c)) = (&mut body, content) {
            b.extend(c);
        }
        self.shared
            .state
            .with(|i| i.frames.insert(msgid.clone(), body.to_string()));
        self.deliver("aibot_msg_callback", body, group.unwrap_or(user));
        msgid
    }

    /// Sends a callback to the live connection (panics without one: a test bug).
    fn deliver(&self, cmd: &str, body: Value, chat: &str) {
        let req_id = self.next_id("req");
        let msgid = body["msgid"].as_str().unwrap_or_default().to_string();
        let frame = json!({"cmd": cmd, "headers": {"req_id": req_id}, "body": body}).to_string();
        let tx = self.shared.state.with(|i| {
            i.pushed.insert(req_id.clone(), (msgid, chat.to_string()));
            i.live.as_ref().map(|(_, tx)| tx.clone())
        });
        tx.expect("a live connection")
            .send(frame)
            .expect("connection open");
    }
}

fn encrypt(plain: &[u8], key: &[u8; 32]) -> Vec<u8> {
    let pad = 32 - plain.len() % 32;
    let mut buf = plain.to_vec();
    buf.extend(std::iter::repeat_n(pad as u8, pad));
    let len = buf.len();
    cbc::Encryptor::<aes::Aes256>::new(key[..].into(), key[..16].into())
        .encrypt_padded_mut::<NoPadding>(&mut buf, len)
        .expect("whole blocks")
        .to_vec()
}

async fn media(State(s): State<Arc<Shared>>, Path(id): Path<String>) -> Response {
    match s.state.peek(|i| i.media.get(&id).cloned()) {
        Some((name, data)) => {
            let encoded: String = url::form_urlencoded::byte_serialize(name.as_bytes()).collect();
            let disposition = format!(
                "attachment; filename*=UTF-8''{}",
                encoded.replace('+', "%20")
            );
            ([(header::CONTENT_DISPOSITION, disposition)], data).into_response()
        }
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

async fn upgrade(State(s): State<Arc<Shared>>, ws: WebSocketUpgrade) -> Response {
    ws.on_upgrade(move |socket| session(s, socket))
}

fn answer(req_id: &str, errcode: i64, errmsg: &str) -> String {
    json!({"headers": {"req_id": req_id}, "errcode": errcode, "errmsg": errmsg}).to_string()
}

/// One connection: subscribe, then heartbeats, replies and pushes.
async fn session(s: Arc<Shared>, mut socket: WebSocket) {
    let (tx, mut rx) = mpsc::unbounded_channel::<String>();
    let id = s.state.with(|i| {
        i.next += 1;
        i.next
    });
    let mut subscribed = false;
    loop {
        tokio::select! {
            out = rx.recv() => {
                let Some(out) = out else { break };
                if out == CLOSE {
                    let _ = socket.send(WsMessage::Close(None)).await;
                    break;
                }
                let kick = out == KICK;
                let text = if kick {
                    json!({"cmd": "aibot_event_callback", "headers": {"req_id": "kick"},
                           "body": {"msgtype": "event", "event": {"eventtype": "disconnected_event"}}}).to_string()
                } else { out };
                if socket.send(WsMessage::Text(text.into())).await.is_err() || kick {
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
                let req_id = frame["headers"]["req_id"].as_str().unwrap_or_default().to_string();
                let cmd = frame["cmd"].as_str().unwrap_or_default();
                if cmd == "aibot_subscribe" {
                    let ok = frame["body"]["bot_id"] == s.bot_id.as_str() && frame["body"]["secret"] == s.secret.as_str();
                    if !ok {
                        s.state.with(|i| i.stats.refused += 1);
                        let _ = socket.send(WsMessage::Text(answer(&req_id, 40058, "invalid bot_id or secret").into())).await;
                        break;
                    }
                    subscribed = true;
                    let old = s.state.with(|i| {
                        let old = i.live.replace((id, tx.clone()));
                        i.open += 1;
                        i.stats.subscribed += 1;
                        i.stats.now = i.open;
                        i.stats.peak = i.stats.peak.max(i.open);
                        old
                    });
                    if let Some((_, old)) = old {
                        let _ = old.send(KICK.into());
                    }
                    if socket.send(WsMessage::Text(answer(&req_id, 0, "ok").into())).await.is_err() {
                        break;
                    }
                    continue;
                }
                let reply = if !subscribed {
                    Some(answer(&req_id, 40001, "not subscribed"))
                } else {
                    handle(&s, &tx, &frame, &req_id, cmd)
                };
                if let Some(reply) = reply
                    && socket.send(WsMessage::Text(reply.into())).await.is_err()
                {
                    break;
                }
            }
        }
    }
    if subscribed {
        s.state.with(|i| {
            i.open -= 1;
            i.stats.now = i.open;
            if i.live.as_ref().is_some_and(|(live, _)| *live == id) {
                i.live = None;
            }
        });
    }
}

/// Handles one request of a subscribed connection; the answer to send now (None: held).
fn handle(
    s: &Shared,
    tx: &mpsc::UnboundedSender<String>,
    frame: &Value,
    req_id: &str,
    cmd: &str,
) -> Option<String> {
    if cmd == "ping" {
        s.state.with(|i| i.stats.pings += 1);
        return Some(answer(req_id, 0, "ok"));
    }
    let body = &frame["body"];
    if cmd.starts_with("aibot_upload_media_") {
        return Some(s.state.with(|i| {
            i.frames_in.push(frame.clone());
            upload(i, cmd, req_id, body)
        }));
    }
    let outcome = s.state.with(|i| {
        i.frames_in.push(frame.clone());
        let result = record(i, cmd, req_id, body);
        if result.0 == 0 && i.hold && cmd == "aibot_respond_msg" {
            i.held.push((tx.clone(), answer(req_id, 0, "ok")));
            return None;
        }
        Some(result)
    });
    outcome.map(|(code, msg)| answer(req_id, code, msg))
}

/// Applies one request to what users see; its errcode and errmsg.
fn record(i: &mut Inner, cmd: &str, req_id: &str, body: &Value) -> (i64, &'static str) {
    let msgtype = body["msgtype"].as_str().unwrap_or_default();
    let content = match msgtype {
        "stream" => body["stream"]["content"].as_str(),
        "markdown" => body["markdown"]["content"].as_str(),
        "text" => body["text"]["content"].as_str(),
        _ => None,
    };
    let file = body[msgtype]["media_id"]
        .as_str()
        .and_then(|id| i.uploaded.get(id).cloned());
    let named = file
        .as_ref()
        .map(|(name, _)| format!("<{msgtype}: {name}>"));
    let Some(content) = content.or(named.as_deref()) else {
        return (40008, "invalid message type or media_id");
    };
    if content.len() > MAX_BYTES {
        return (40058, "content exceeds 20480 bytes");
    }
    let shown = |chat: &str, kind: &str, answers: &str| Shown {
        chat: chat.into(),
        kind: kind.into(),
        content: content.into(),
        stream_id: String::new(),
        finished: true,
        answers: answers.into(),
        writes: 1,
        file: None,
    };
    match cmd {
        "aibot_send_msg" => {
            let chat = body["chatid"].as_str().unwrap_or_default();
            i.shown.push(Shown {
                file,
                ..shown(chat, msgtype, "")
            });
        }
        "aibot_respond_welcome_msg" | "aibot_respond_msg" => {
            let Some((msgid, chat)) = i.pushed.get(req_id).cloned() else {
                return (846605, "invalid req_id");
            };
            if cmd == "aibot_respond_welcome_msg" {
                i.shown.push(shown(&chat, "welcome", &msgid));
                return (0, "ok");
            }
            let stream_id = body["stream"]["id"].as_str().unwrap_or_default();
            let finish = body["stream"]["finish"].as_bool().unwrap_or(false);
            let existing = i
                .shown
                .iter_mut()
                .find(|m| !stream_id.is_empty() && m.stream_id == stream_id);
            match existing {
                Some(m) if m.finished && m.content != content => {
                    return (846608, "stream message update expired");
                }
                Some(m) => {
                    m.content = content.into();
                    m.finished = finish;
                    m.writes += 1;
                }
                None => i.shown.push(Shown {
                    file,
                    stream_id: stream_id.into(),
                    finished: msgtype != "stream" || finish,
                    ..shown(&chat, msgtype, &msgid)
                }),
            }
        }
        _ => return (40001, "unknown cmd"),
    }
    (0, "ok")
}

/// Handles one step of a media upload; the answer (with its body).
fn upload(i: &mut Inner, cmd: &str, req_id: &str, body: &Value) -> String {
    let refuse = |code: i64, msg: &str| answer(req_id, code, msg);
    let ok = |body: Value| {
        json!({"headers": {"req_id": req_id}, "errcode": 0, "errmsg": "ok", "body": body})
            .to_string()
    };
    match cmd {
        "aibot_upload_media_init" => {
            let chunks = body["total_chunks"].as_u64().unwrap_or(0) as usize;
            let name = body["filename"].as_str().unwrap_or_default().to_string();
            if chunks == 0 || name.is_empty() || body["type"].as_str().is_none() {
                return refuse(40001, "invalid upload init");
            }
            i.next += 1;
            let id = format!("up{}", i.next);
            let size = body["total_size"].as_u64().unwrap_or(0);
            let md5 = body["md5"].as_str().unwrap_or_default().to_string();
            i.uploads
                .insert(id.clone(), (name, size, md5, vec![None; chunks]));
            ok(json!({"upload_id": id}))
        }
        "aibot_upload_media_chunk" => {
            let id = body["upload_id"].as_str().unwrap_or_default();
            let index = body["chunk_index"].as_u64().unwrap_or(u64::MAX) as usize;
            let data = base64::engine::general_purpose::STANDARD
                .decode(body["base64_data"].as_str().unwrap_or_default());
            match (i.uploads.get_mut(id), data) {
                (Some(up), Ok(data)) if index < up.3.len() => {
                    up.3[index] = Some(data);
                    ok(json!({}))
                }
                _ => refuse(40001, "invalid upload chunk"),
            }
        }
        _ => {
            let id = body["upload_id"].as_str().unwrap_or_default();
            let Some((name, size, md5, chunks)) = i.uploads.remove(id) else {
                return refuse(40001, "unknown upload_id");
            };
            let Some(parts) = chunks.into_iter().collect::<Option<Vec<_>>>() else {
                return refuse(40001, "missing chunks");
            };
            let data = parts.concat();
            let digest = hex::encode(<md5::Md5 as md5::Digest>::digest(&data));
            if data.len() as u64 != size || digest != md5 {
                return refuse(40001, "size or md5 mismatch");
            }
            i.next += 1;
            let media_id = format!("media{}", i.next);
            i.uploaded.insert(media_id.clone(), (name, data));
            ok(json!({"media_id": media_id}))
        }
    }
}
