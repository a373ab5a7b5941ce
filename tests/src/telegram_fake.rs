//! A Telegram Bot API fake owned by the test suite: a real HTTP server on a free 127.0.0.1 port
//! (`TCP_NODELAY` on every accepted socket) serving several bots at once.
//!
//! # Surface
//! `{api_url}/bot{token}/{method}` (query string, JSON, form or multipart parameters) and
//! `{api_url}/file/bot{token}/{file_path}`. Unknown tokens get 401 `Unauthorized`, unknown
//! methods 404. Methods:
//! - `getMe` with the full field set teloxide 0.17's `Me` needs;
//! - `getUpdates`: long poll up to `timeout` s (≤ 50), `offset` confirms (negative keeps the
//!   last N), `limit`, `allowed_updates` (remembered, as Telegram does); a second concurrent
//!   poll of the same token terminates the first with **409** `Conflict: terminated by other
//!   getUpdates request…` (counted in [`PollStats::conflicts`]); 409 too while a webhook is set;
//! - `sendMessage` / `editMessageText`: `parse_mode: "HTML"` is checked against Telegram's
//!   rules (only its tags, balanced; 400 `Bad Request: can't parse entities: …` otherwise), the
//!   text after parsing must be 1..=4096 UTF-16 units (`message is too long`,
//!   `MESSAGE_TOO_LONG` for edits), an identical edit answers `message is not modified: …`;
//!   `reply_parameters` / `reply_to_message_id` embed the replied message;
//! - `deleteMessage`, `sendChatAction` (valid actions only), `setMessageReaction`,
//!   `setMyCommands` / `getMyCommands` / `deleteMyCommands`, `setWebhook` / `deleteWebhook` /
//!   `getWebhookInfo` (with a webhook set, injected updates are POSTed to it with
//!   `X-Telegram-Bot-Api-Secret-Token`, retried until 2xx);
//! - `sendPhoto` / `sendDocument` / `sendVoice` / `sendAudio` / `sendVideo` with a multipart
//!   upload, a known `file_id` or a URL; `getFile` and the download of any file.
//!
//! # Test controls
//! - [`TelegramFake::add_bot`] registers a token (the bot id is the number before `:`);
//! - [`FakeBot::inject`] queues a user's [`Incoming`] message (text, caption, photo, voice,
//!   audio, document, location, reply, forum topic; mention and command entities computed as
//!   Telegram does), [`FakeBot::inject_edit`] an edit, [`FakeBot::inject_media_group`] an
//!   album, [`FakeBot::inject_update`] any raw update; [`FakeBot::add_file`] makes a file users
//!   can send and the bot can download;
//! - [`FakeBot::fail_next`] makes the next N calls of a method fail ([`Failure::RetryAfter`]:
//!   429 with `parameters.retry_after`; [`Failure::CantParseEntities`]; any status);
//! - every call is recorded as a [`Call`] (method, token, parsed params, uploads, arrival time,
//!   result); [`TelegramFake::wait_until`] and the `wait_*` helpers wake on each recorded call
//!   and poll start (a `watch` channel), never sleep;
//! - [`TelegramFake::set_drip`] sends the `getUpdates` answers 1 to 3 bytes at a time;
//! - [`FakeBot::messages`] is what a chat shows now (after edits and deletions),
//!   [`FakeBot::poll_stats`] the concurrent polls seen and 409s given.
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! use nanobot_tests::telegram_fake::{Incoming, TelegramFake, TgUser};
//! let fake = TelegramFake::start().await?;
//! let bot = fake.add_bot("123456:TEST-token", "nanobot_test_bot");
//! // point `channels.telegram.apiBase` at `fake.api_url()`, start the gateway, then:
//! let alice = TgUser::new(42, "alice");
//! bot.inject(Incoming::text_from(&alice, "hello"));
//! let reply = bot.wait_for_call("sendMessage", |c| c.chat_id() == Some(42)).await?;
//! assert_eq!(reply.params["parse_mode"], "HTML");
//! # Ok(()) }
//! ```

mod bot;
mod html;
mod methods;
mod poll;
mod routes;
mod state;
#[cfg(test)]
mod tests;
mod updates;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use axum::Router;
use axum::serve::ListenerExt as _;
use bytes::Bytes;
use serde_json::Value;

pub use bot::FakeBot;
use state::{BotState, Shared};
pub use updates::{FileRef, Incoming, TgChat, TgUser};

/// How long the `wait_*` helpers wait by default.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(30);

/// A Bot API error answer: `{"ok": false, "error_code", "description", "parameters"}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// HTTP status and `error_code`.
    pub code: u16,
    /// Telegram's `description`, e.g. `Bad Request: message is too long`.
    pub description: String,
    /// `parameters.retry_after` (429 only).
    pub retry_after: Option<u32>,
}

impl ApiError {
    /// Returns an error with `code` and `description`.
    pub fn new(code: u16, description: &str) -> Self {
        Self {
            code,
            description: description.to_string(),
            retry_after: None,
        }
    }

    /// Returns a 400 `Bad Request: {detail}`.
    pub fn bad_request(detail: &str) -> Self {
        Self::new(400, &format!("Bad Request: {detail}"))
    }

    fn unauthorized() -> Self {
        Self::new(401, "Unauthorized")
    }
}

/// A scripted failure for [`FakeBot::fail_next`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// 429 `Too Many Requests: retry after N` with `parameters.retry_after = N`.
    RetryAfter(u32),
    /// 400 `Bad Request: can't parse entities: …`.
    CantParseEntities,
    /// Any error answer.
    Error(ApiError),
}

impl Failure {
    fn into_error(self) -> ApiError {
        match self {
            Failure::RetryAfter(secs) => ApiError {
                code: 429,
                description: format!("Too Many Requests: retry after {secs}"),
                retry_after: Some(secs),
            },
            Failure::CantParseEntities => ApiError::bad_request(
                "can't parse entities: Can't find end tag corresponding to start tag \"b\"",
            ),
            Failure::Error(e) => e,
        }
    }
}

/// A file uploaded in a multipart call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upload {
    /// The form field (`photo`, `document`, `voice`, …).
    pub field: String,
    /// The file name the client gave.
    pub file_name: Option<String>,
    /// The part's content type.
    pub content_type: Option<String>,
    /// The bytes.
    pub bytes: Bytes,
}

/// One recorded call.
#[derive(Debug, Clone)]
pub struct Call {
    /// The bot token in the URL.
    pub token: String,
    /// The method as the client spelled it (`sendMessage`).
    pub method: String,
    /// The parameters as a JSON object (form and multipart values coerced: integers, booleans,
    /// JSON objects/arrays; `text`, `caption` and the like always strings).
    pub params: Value,
    /// Files uploaded with the call.
    pub uploads: Vec<Upload>,
    /// When the request arrived.
    pub at: Instant,
    /// What the fake answered: the `result`, or the error.
    pub result: Result<Value, ApiError>,
}

impl Call {
    /// Returns the `chat_id` parameter as a number.
    pub fn chat_id(&self) -> Option<i64> {
        let value = self.params.get("chat_id")?;
        value.as_i64().or_else(|| value.as_str()?.parse().ok())
    }

    /// Returns the `text` parameter.
    pub fn text(&self) -> Option<&str> {
        self.params.get("text")?.as_str()
    }

    /// Returns true when the fake answered `ok: true`.
    pub fn is_ok(&self) -> bool {
        self.result.is_ok()
    }
}

/// A message as a chat shows it now.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatMessage {
    /// The message id.
    pub message_id: i64,
    /// True for messages the bot sent, false for injected user messages.
    pub from_bot: bool,
    /// The text (or caption) after entity parsing: what the user reads.
    pub text: Option<String>,
    /// The text or caption as the bot sent it (the HTML source with `parse_mode: "HTML"`).
    pub raw: Option<String>,
    /// The `parse_mode` of the last send or edit.
    pub parse_mode: Option<String>,
    /// How many times the bot edited it.
    pub edits: u32,
    /// The emoji reactions the bot set on it.
    pub reactions: Vec<String>,
    /// The full `Message` JSON.
    pub json: Value,
}

/// Concurrency of `getUpdates` for one token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PollStats {
    /// Polls running now.
    pub in_flight: usize,
    /// The most polls ever running at once (above 1 means two pollers overlapped).
    pub peak: usize,
    /// 409 `terminated by other getUpdates request` answers given.
    pub conflicts: usize,
}

/// A running fake; cloning shares it. The server stops when the last clone drops.
#[derive(Debug, Clone)]
pub struct TelegramFake {
    shared: Arc<Shared>,
    addr: SocketAddr,
    _server: Arc<ServerTask>,
}

#[derive(Debug)]
struct ServerTask(tokio::task::JoinHandle<()>);

impl Drop for ServerTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl TelegramFake {
    /// Binds a free port of 127.0.0.1 and starts serving.
    pub async fn start() -> anyhow::Result<Self> {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .context("bind telegram fake")?;
        let addr = listener
            .local_addr()
            .context("read telegram fake address")?;
        let listener = listener.tap_io(|tcp| {
            if let Err(e) = tcp.set_nodelay(true) {
                tracing::warn!(error = %e, "telegram fake could not set TCP_NODELAY");
            }
        });
        let shared = Arc::new(Shared::new());
        let app = Router::new()
            .fallback(routes::handle)
            .with_state(shared.clone());
        let task = tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                tracing::warn!(error = %e, "telegram fake server stopped");
            }
        });
        Ok(Self {
            shared,
            addr,
            _server: Arc::new(ServerTask(task)),
        })
    }

    /// Returns the Bot API root, `http://127.0.0.1:PORT` (for `channels.telegram.apiBase`,
    /// `Bot::set_api_url` or `TELOXIDE_API_URL`).
    pub fn api_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Returns the bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Registers a bot: `token` like `123456:secret` (the id is the part before `:`), and its
    /// username (without `@`). Registering a token again keeps its state.
    pub fn add_bot(&self, token: &str, username: &str) -> FakeBot {
        let id = token
            .split(':')
            .next()
            .and_then(|id| id.parse().ok())
            .unwrap_or(1);
        self.shared
            .bots()
            .entry(token.to_string())
            .or_insert_with(|| BotState::new(id, username));
        self.bot(token)
    }

    /// Returns the handle of a registered bot (panics for an unknown token: a test bug).
    pub fn bot(&self, token: &str) -> FakeBot {
        assert!(
            self.shared.bots().contains_key(token),
            "telegram fake: no bot with token {token}"
        );
        FakeBot {
            fake: self.clone(),
            token: token.to_string(),
        }
    }

    /// Answers every later `getUpdates` in writes of 1 to 3 bytes, a millisecond apart
    /// ([`crate::drip`]), so the gateway reads a user's Chinese or emoji cut mid-character.
    pub fn set_drip(&self, drip: bool) {
        self.shared
            .drip
            .store(drip, std::sync::atomic::Ordering::SeqCst);
    }

    /// Returns every call so far, in the order they completed.
    pub fn calls(&self) -> Vec<Call> {
        self.shared.calls.lock().expect("call log poisoned").clone()
    }

    /// Returns the calls completed after the first `start` (a caller scanning a long log,
    /// such as the benchmark's 1,000 bots, copies only what is new since its last look).
    pub fn calls_from(&self, start: usize) -> Vec<Call> {
        let calls = self.shared.calls.lock().expect("call log poisoned");
        calls.get(start..).map(<[Call]>::to_vec).unwrap_or_default()
    }

    /// Waits until `check` returns `Some`, re-checking after every recorded call and poll
    /// start; fails after `timeout` naming `what`.
    pub async fn wait_until<T>(
        &self,
        what: &str,
        timeout: Duration,
        mut check: impl FnMut(&TelegramFake) -> Option<T>,
    ) -> anyhow::Result<T> {
        let found = crate::harness::wait_for_change(&self.shared.changed, timeout, || check(self));
        if let Some(found) = found.await {
            return Ok(found);
        }
        let seen: Vec<String> = self
            .calls()
            .iter()
            .map(|c| format!("{}({})", c.method, if c.is_ok() { "ok" } else { "err" }))
            .collect();
        anyhow::bail!(
            "telegram fake: timed out after {timeout:?} waiting for {what}; calls: {seen:?}"
        )
    }
}
