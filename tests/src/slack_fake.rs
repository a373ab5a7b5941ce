//! A Slack fake owned by the test suite: the Web API methods the Slack channel uses and Socket
//! Mode, over real HTTP and WebSocket on a free 127.0.0.1 port, for one app (one bot token, one
//! app-level token).
//!
//! # Surface
//! - `POST {api_url}/{method}` with `Authorization: Bearer <token>`, JSON body and/or query
//!   arguments; a wrong token answers `{"ok": false, "error": "invalid_auth"}`, an unknown method
//!   `unknown_method`. Methods: `auth.test`, `apps.connections.open` (app token; hands out a
//!   `ws://` URL), `chat.postMessage` (needs `channel` and a 1..=40,000-character `text`;
//!   answers a fresh `ts`), `chat.update` (`channel`, the `ts` of a message the bot posted
//!   there, else `message_not_found`, and a text as for posting), `reactions.add` / `reactions.remove`, `files.getUploadURLExternal`
//!   (hands out an upload URL on the fake), `files.completeUploadExternal`;
//! - the upload URL takes the file (multipart or raw body);
//! - `GET /files/{id}` serves a file added with [`SlackFake::add_file`] to the bot token only
//!   (anything else gets an HTML sign-in page, as Slack does);
//! - the Socket Mode WebSocket: `hello` on connect, envelopes sent by
//!   [`SlackFake::send_event`] to **one** open connection (round robin, as Slack picks one of
//!   an app's connections), acknowledgements (`{"envelope_id"}`) recorded.
//!
//! # Test controls
//! Every API call is recorded as a [`Call`]; [`SlackFake::wait_until`] re-checks a condition
//! after every call, connection and acknowledgement (a `watch` channel), never sleeps.
//! [`SlackFake::disconnect_all`] sends Slack's `disconnect` to every connection.
//! [`signed_post`] posts an Events API request signed like Slack (or forged).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use axum::Router;
use axum::body::Bytes;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures::{SinkExt as _, StreamExt as _};
use hmac::{Hmac, Mac as _};
use serde_json::{Value, json};
use sha2::Sha256;
use tokio::sync::{mpsc, watch};

/// How long the `wait_*` helpers wait by default.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(30);
/// The bot's user id `auth.test` reports.
pub const BOT_USER: &str = "UBOT0001";

/// One recorded Web API call.
#[derive(Debug, Clone)]
pub struct Call {
    /// Method name (`chat.postMessage`).
    pub method: String,
    /// The arguments: the JSON body's fields and the query's.
    pub params: Value,
    /// The answer.
    pub result: Value,
}

impl Call {
    /// Returns whether Slack answered `ok: true`.
    pub fn is_ok(&self) -> bool {
        self.result["ok"] == true
    }

    /// Returns a string argument.
    pub fn arg(&self, name: &str) -> Option<&str> {
        self.params[name].as_str()
    }
}

/// A message the bot posted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Posted {
    /// Conversation id.
    pub channel: String,
    /// The mrkdwn text.
    pub text: String,
    /// The thread it was posted in.
    pub thread_ts: Option<String>,
    /// Its own ts.
    pub ts: String,
    /// How many times the bot edited it (`chat.update`; `text` is the latest).
    pub edits: usize,
}

/// A file the bot uploaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Uploaded {
    /// File name.
    pub name: String,
    /// Content.
    pub bytes: Vec<u8>,
    /// Conversation it was shared in (once completed).
    pub channel: Option<String>,
    /// Thread it was shared in.
    pub thread_ts: Option<String>,
}

struct Shared {
    addr: SocketAddr,
    bot_token: String,
    app_token: String,
    calls: Mutex<Vec<Call>>,
    sockets: Mutex<Vec<(usize, mpsc::UnboundedSender<String>)>>,
    acks: Mutex<Vec<String>>,
    files: Mutex<HashMap<String, (String, Vec<u8>)>>,
    uploads: Mutex<Vec<Uploaded>>,
    next: AtomicU64,
    turn: AtomicUsize,
    connections: AtomicUsize,
    changed: watch::Sender<u64>,
}

impl Shared {
    fn bump(&self) {
        self.changed.send_modify(|n| *n += 1);
    }

    fn next_id(&self) -> u64 {
        self.next.fetch_add(1, Ordering::SeqCst) + 1
    }
}

/// The running fake.
pub struct SlackFake {
    shared: Arc<Shared>,
    _server: tokio::task::JoinHandle<()>,
}

impl Drop for SlackFake {
    fn drop(&mut self) {
        self._server.abort();
    }
}

impl SlackFake {
    /// Starts the fake for one app with these tokens.
    pub async fn start(bot_token: &str, app_token: &str) -> anyhow::Result<Self> {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .context("bind slack fake")?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            addr,
            bot_token: bot_token.into(),
            app_token: app_token.into(),
            calls: Mutex::default(),
            sockets: Mutex::default(),
            acks: Mutex::default(),
            files: Mutex::default(),
            uploads: Mutex::default(),
            next: AtomicU64::new(1000),
            turn: AtomicUsize::new(0),
            connections: AtomicUsize::new(0),
            changed: watch::channel(0).0,
        });
        let app = Router::new()
            .route("/api/{method}", post(api))
            .route("/upload/{id}", post(upload))
            .route("/files/{id}", get(file))
            .route("/socket", get(socket))
            .with_state(shared.clone());
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self {
            shared,
            _server: server,
        })
    }

    /// Returns the Web API root (`channels.slack.apiBase`).
    pub fn api_url(&self) -> String {
        format!("http://{}/api", self.shared.addr)
    }

    /// Makes a file users can share; returns its `url_private_download`.
    pub fn add_file(&self, id: &str, mimetype: &str, bytes: &[u8]) -> String {
        self.shared
            .files
            .lock()
            .unwrap()
            .insert(id.into(), (mimetype.into(), bytes.to_vec()));
        format!("http://{}/files/{id}", self.shared.addr)
    }

    /// Returns every call so far.
    pub fn calls(&self) -> Vec<Call> {
        self.shared.calls.lock().unwrap().clone()
    }

    /// Returns the calls of `method`.
    pub fn calls_of(&self, method: &str) -> Vec<Call> {
        self.calls()
            .into_iter()
            .filter(|c| c.method == method)
            .collect()
    }

    /// Returns the messages the bot posted in `channel`, in order, as last edited.
    pub fn posted(&self, channel: &str) -> Vec<Posted> {
        let mut posted: Vec<Posted> = self
            .calls_of("chat.postMessage")
            .into_iter()
            .filter(|c| c.is_ok() && c.arg("channel") == Some(channel))
            .map(|c| Posted {
                channel: channel.into(),
                text: c.arg("text").unwrap_or_default().into(),
                thread_ts: c.arg("thread_ts").map(str::to_string),
                ts: c.result["ts"].as_str().unwrap_or_default().into(),
                edits: 0,
            })
            .collect();
        for update in self.calls_of("chat.update") {
            if !update.is_ok() || update.arg("channel") != Some(channel) {
                continue;
            }
            if let Some(p) = posted
                .iter_mut()
                .find(|p| Some(p.ts.as_str()) == update.arg("ts"))
            {
                p.text = update.arg("text").unwrap_or_default().into();
                p.edits += 1;
            }
        }
        posted
    }

    /// Returns the files uploaded so far.
    pub fn uploads(&self) -> Vec<Uploaded> {
        self.shared.uploads.lock().unwrap().clone()
    }

    /// Returns the Socket Mode connections opened so far (including closed ones).
    pub fn connections(&self) -> usize {
        self.shared.connections.load(Ordering::SeqCst)
    }

    /// Returns the Socket Mode connections open now.
    pub fn open_connections(&self) -> usize {
        let mut sockets = self.shared.sockets.lock().unwrap();
        sockets.retain(|(_, tx)| !tx.is_closed());
        sockets.len()
    }

    /// Returns whether `envelope_id` was acknowledged.
    pub fn acked(&self, envelope_id: &str) -> bool {
        self.shared
            .acks
            .lock()
            .unwrap()
            .iter()
            .any(|a| a == envelope_id)
    }

    /// Sends `event` (a `message` or `app_mention` object) to one open Socket Mode connection as
    /// an `events_api` envelope with a fresh event id; returns `(envelope_id, event_id)`.
    pub fn send_event(&self, event: Value) -> anyhow::Result<(String, String)> {
        let event_id = format!("Ev{:08}", self.shared.next_id());
        let envelope_id = self.send_envelope(&event_id, event, 0)?;
        Ok((envelope_id, event_id))
    }

    /// Sends `event` again under `event_id` (Slack's redelivery of an unacknowledged event,
    /// `retry_attempt` set); returns the new envelope id.
    pub fn send_envelope(
        &self,
        event_id: &str,
        event: Value,
        retry: u32,
    ) -> anyhow::Result<String> {
        let envelope_id = format!("env-{}", self.shared.next_id());
        let envelope = json!({
            "envelope_id": envelope_id,
            "type": "events_api",
            "accepts_response_payload": false,
            "retry_attempt": retry,
            "retry_reason": if retry > 0 { "timeout" } else { "" },
            "payload": callback(event_id, event),
        });
        let mut sockets = self.shared.sockets.lock().unwrap();
        sockets.retain(|(_, tx)| !tx.is_closed());
        anyhow::ensure!(!sockets.is_empty(), "no open socket mode connection");
        let i = self.shared.turn.fetch_add(1, Ordering::SeqCst) % sockets.len();
        sockets[i]
            .1
            .send(envelope.to_string())
            .map_err(|_| anyhow::anyhow!("connection closed"))?;
        Ok(envelope_id)
    }

    /// Sends Slack's `disconnect` (`refresh_requested`) to every open connection.
    pub fn disconnect_all(&self) {
        let msg = json!({"type": "disconnect", "reason": "refresh_requested",
            "debug_info": {"host": "fake"}})
        .to_string();
        for (_, tx) in self.shared.sockets.lock().unwrap().iter() {
            let _ = tx.send(msg.clone());
        }
    }

    /// Waits until `check` returns `Some`, re-checking after every change; fails after
    /// `timeout` naming `what`.
    pub async fn wait_until<T>(
        &self,
        what: &str,
        timeout: Duration,
        mut check: impl FnMut(&SlackFake) -> Option<T>,
    ) -> anyhow::Result<T> {
        let found = crate::harness::wait_for_change(&self.shared.changed, timeout, || check(self));
        if let Some(found) = found.await {
            return Ok(found);
        }
        let seen: Vec<String> = self.calls().iter().map(|c| c.method.clone()).collect();
        anyhow::bail!("slack fake: timed out after {timeout:?} waiting for {what}; calls: {seen:?}")
    }

    /// Waits until `n` Socket Mode connections are open.
    pub async fn wait_connections(&self, n: usize) -> anyhow::Result<()> {
        self.wait_until(&format!("{n} open connections"), DEFAULT_WAIT, |f| {
            (f.open_connections() >= n).then_some(())
        })
        .await
    }

    /// Waits until the bot posted a message in `channel` matching `pred`.
    pub async fn wait_posted(
        &self,
        channel: &str,
        pred: impl Fn(&Posted) -> bool,
    ) -> anyhow::Result<Posted> {
        self.wait_until(&format!("a message in {channel}"), DEFAULT_WAIT, |f| {
            f.posted(channel).into_iter().find(|p| pred(p))
        })
        .await
    }
}

/// Returns an `event_callback` payload for `event`.
pub fn callback(event_id: &str, event: Value) -> Value {
    json!({
        "token": "verification-token-unused",
        "team_id": "T0001",
        "api_app_id": "A0001",
        "type": "event_callback",
        "event_id": event_id,
        "event_time": 1_700_000_000,
        "event": event,
    })
}

/// Posts `body` to an Events API endpoint signed with `secret` as Slack does (`v0` HMAC-SHA256
/// of `v0:{timestamp}:{body}`), with `X-Slack-Retry-Num` when `retry` is set; returns the
/// status and the body.
pub async fn signed_post(
    url: &str,
    secret: &str,
    body: &Value,
    retry: Option<u32>,
) -> anyhow::Result<(u16, String)> {
    let body = body.to_string();
    let ts = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_secs()
        .to_string();
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes())?;
    mac.update(format!("v0:{ts}:{body}").as_bytes());
    let signature = format!("v0={}", hex::encode(mac.finalize().into_bytes()));
    let mut request = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("x-slack-request-timestamp", ts)
        .header("x-slack-signature", signature)
        .body(body);
    if let Some(n) = retry {
        request = request
            .header("x-slack-retry-num", n.to_string())
            .header("x-slack-retry-reason", "http_timeout");
    }
    let response = request.send().await?;
    let status = response.status().as_u16();
    Ok((status, response.text().await?))
}

fn bearer(headers: &HeaderMap) -> &str {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or_default()
}

async fn api(
    State(s): State<Arc<Shared>>,
    Path(method): Path<String>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let mut params = serde_json::from_slice::<Value>(&body).unwrap_or_else(|_| json!({}));
    if !params.is_object() {
        params = json!({});
    }
    for (k, v) in query {
        params[k] = json!(v);
    }
    let token = bearer(&headers);
    let wanted = match method.as_str() {
        "apps.connections.open" => &s.app_token,
        _ => &s.bot_token,
    };
    let result = if token != wanted {
        json!({"ok": false, "error": "invalid_auth"})
    } else {
        answer(&s, &method, &params)
    };
    s.calls.lock().unwrap().push(Call {
        method,
        params,
        result: result.clone(),
    });
    s.bump();
    axum::Json(result).into_response()
}

fn answer(s: &Shared, method: &str, p: &Value) -> Value {
    let err = |e: &str| json!({"ok": false, "error": e});
    match method {
        "auth.test" => json!({"ok": true, "url": "https://fake.slack.com/", "team": "Fake",
            "user": "nanobot", "team_id": "T0001", "user_id": BOT_USER, "bot_id": "B0001"}),
        "apps.connections.open" => {
            json!({"ok": true, "url": format!("ws://{}/socket?ticket={}", s.addr, s.next_id())})
        }
        "chat.postMessage" => {
            let text = p["text"].as_str().unwrap_or_default();
            match p["channel"].as_str() {
                None | Some("") => err("channel_not_found"),
                _ if text.is_empty() => err("no_text"),
                _ if text.chars().count() > 40_000 => err("msg_too_long"),
                Some(channel) => {
                    json!({"ok": true, "channel": channel, "ts": format!("{}.000100", s.next_id())})
                }
            }
        }
        "chat.update" => {
            let text = p["text"].as_str().unwrap_or_default();
            let (Some(channel), Some(ts)) = (p["channel"].as_str(), p["ts"].as_str()) else {
                return err("invalid_arguments");
            };
            let known = s.calls.lock().unwrap().iter().any(|c| {
                c.method == "chat.postMessage"
                    && c.is_ok()
                    && c.arg("channel") == Some(channel)
                    && c.result["ts"].as_str() == Some(ts)
            });
            match () {
                _ if !known => err("message_not_found"),
                _ if text.is_empty() => err("no_text"),
                _ if text.chars().count() > 40_000 => err("msg_too_long"),
                _ => json!({"ok": true, "channel": channel, "ts": ts, "text": text}),
            }
        }
        "reactions.add" | "reactions.remove" => {
            match (
                p["channel"].as_str(),
                p["name"].as_str(),
                p["timestamp"].as_str(),
            ) {
                (Some(_), Some(_), Some(_)) => json!({"ok": true}),
                _ => err("invalid_arguments"),
            }
        }
        "files.getUploadURLExternal" => {
            let (Some(name), Some(_)) = (p["filename"].as_str(), p["length"].as_str()) else {
                return err("invalid_arguments");
            };
            let mut uploads = s.uploads.lock().unwrap();
            uploads.push(Uploaded {
                name: name.into(),
                bytes: Vec::new(),
                channel: None,
                thread_ts: None,
            });
            let id = uploads.len() - 1;
            json!({"ok": true, "upload_url": format!("http://{}/upload/{id}", s.addr),
                "file_id": format!("F{id}")})
        }
        "files.completeUploadExternal" => {
            let files: Value = p["files"]
                .as_str()
                .and_then(|f| serde_json::from_str(f).ok())
                .unwrap_or_default();
            let mut uploads = s.uploads.lock().unwrap();
            let Some(files) = files.as_array() else {
                return err("invalid_arguments");
            };
            for f in files {
                let idx = f["id"]
                    .as_str()
                    .and_then(|id| id.strip_prefix('F'))
                    .and_then(|n| n.parse::<usize>().ok());
                let Some(up) = idx.and_then(|i| uploads.get_mut(i)) else {
                    return err("file_not_found");
                };
                up.channel = p["channel_id"].as_str().map(str::to_string);
                up.thread_ts = p["thread_ts"].as_str().map(str::to_string);
            }
            json!({"ok": true, "files": files})
        }
        _ => err("unknown_method"),
    }
}

async fn upload(State(s): State<Arc<Shared>>, Path(id): Path<usize>, body: Bytes) -> StatusCode {
    // The body is a multipart form; the test only compares that the content is inside it.
    let found = match s.uploads.lock().unwrap().get_mut(id) {
        Some(up) => {
            up.bytes = body.to_vec();
            true
        }
        None => false,
    };
    s.bump();
    if found {
        StatusCode::OK
    } else {
        StatusCode::NOT_FOUND
    }
}

async fn file(
    State(s): State<Arc<Shared>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let found = s.files.lock().unwrap().get(&id).cloned();
    match found {
        Some((mime, bytes)) if bearer(&headers) == s.bot_token => {
            ([(header::CONTENT_TYPE, mime)], bytes).into_response()
        }
        _ => (
            [(header::CONTENT_TYPE, "text/html")],
            "<!DOCTYPE html><html>Sign in to Slack</html>",
        )
            .into_response(),
    }
}

async fn socket(State(s): State<Arc<Shared>>, ws: WebSocketUpgrade) -> Response {
    ws.on_upgrade(move |socket| serve_socket(s, socket))
}

async fn serve_socket(s: Arc<Shared>, socket: WebSocket) {
    let (mut tx, mut rx) = socket.split();
    let (out_tx, mut out_rx) = mpsc::unbounded_channel::<String>();
    let hello = json!({"type": "hello", "num_connections": 1,
        "connection_info": {"app_id": "A0001"}, "debug_info": {"host": "fake"}});
    if tx
        .send(Message::Text(hello.to_string().into()))
        .await
        .is_err()
    {
        return;
    }
    let id = s.connections.fetch_add(1, Ordering::SeqCst);
    s.sockets.lock().unwrap().push((id, out_tx));
    s.bump();
    loop {
        tokio::select! {
            out = out_rx.recv() => {
                let Some(out) = out else { break };
                if tx.send(Message::Text(out.into())).await.is_err() {
                    break;
                }
            }
            frame = rx.next() => match frame {
                Some(Ok(Message::Text(text))) => {
                    if let Ok(ack) = serde_json::from_str::<Value>(&text)
                        && let Some(envelope) = ack["envelope_id"].as_str()
                    {
                        s.acks.lock().unwrap().push(envelope.to_string());
                        s.bump();
                    }
                }
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => break,
                Some(Ok(_)) => {}
            }
        }
    }
    s.sockets.lock().unwrap().retain(|(i, _)| *i != id);
    s.bump();
}
