//! The WebSocket channel (upstream's `channels.websocket`) and the web chat page, served by
//! every gateway replica on `host:port`.
//!
//! - [`http`]: the upgrade on `path` (token checked in constant time: 401; `client_id`
//!   outside `allowFrom`, or not the one an issued token is bound to: 403), the page (`GET
//!   path` without an upgrade), its script and style, `GET {path}/history`, and the token
//!   issue route (`tokenIssuePath`).
//! - [`access`]: chat owners (a chat is its first client's; others are refused) and issued
//!   tokens bound to one `client_id`, both in Redis, shared by the replicas.
//! - [`conn`]: one connection multiplexing any number of chats ([`protocol`]); a message over
//!   the bus limit or the client's bytes of the day is refused before anything is stored.
//! - [`log`]: every chat's user messages and replies in a Redis stream. The durable delivery
//!   consumer (whichever replica takes a reply) appends it once and publishes
//!   [`subjects::websocket_notify`]; every replica's connections attached to the chat read
//!   the log from their own cursor, so a reply reaches its client exactly once whichever
//!   replica holds the socket, and a client that was away resumes from the last entry id it
//!   saw. A lost notification (core NATS) is made up by each connection's periodic catch-up.
//! - Stream deltas are not durable: every replica's observer hands them to its own attached
//!   connections.
//!
//! A replica SIGKILLed mid-reply drops its sockets and whatever deltas they were being sent;
//! a reply it was delivering is redelivered by JetStream to another replica (the log append is
//! idempotent), and the client, reconnecting to any replica, resumes from its cursor.

pub mod access;
mod conn;
mod http;
mod hub;
pub mod log;
pub mod protocol;

use std::sync::Arc;

use anyhow::Context as _;
use async_trait::async_trait;
use futures::StreamExt as _;
use tokio_util::sync::CancellationToken;

use nanobot_proto::{OutboundKind, OutboundMessage, subjects};
use nanobot_runtime::config::{Config, DEFAULT_BOT, WebSocketConfig};

use self::access::Access;
use self::log::{ChatLog, Kind};
use super::{Channel, ChannelDeps, ChannelSettings, Inbound, Progress, SendError};

/// Channel name (subject token, session prefix: `websocket:<chat_id>`).
pub const CHANNEL: &str = "websocket";

/// The WebSocket channel of the single bot.
pub struct WebSocketChannel {
    bot_id: String,
    cfg: WebSocketConfig,
    settings: ChannelSettings,
    log: ChatLog,
    access: Access,
    nats: async_nats::Client,
    hub: hub::Hub,
    listener: std::sync::Mutex<Option<std::net::TcpListener>>,
}

impl std::fmt::Debug for WebSocketChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebSocketChannel")
            .field("bot", &self.bot_id)
            .finish_non_exhaustive()
    }
}

impl WebSocketChannel {
    /// Builds the channel and binds its listener (a bind failure stops the gateway's start).
    pub fn new(cfg: &Config, ws: &WebSocketConfig, deps: &ChannelDeps) -> anyhow::Result<Self> {
        let addr = format!("{}:{}", ws.host, ws.port);
        let listener = std::net::TcpListener::bind(&addr)
            .with_context(|| format!("bind the websocket listener {addr}"))?;
        listener
            .set_nonblocking(true)
            .context("set the websocket listener non-blocking")?;
        let settings = ChannelSettings::from_overrides(
            cfg,
            &ws.allow_from,
            ws.send_progress,
            ws.send_tool_hints,
        );
        Ok(Self {
            bot_id: DEFAULT_BOT.into(),
            cfg: ws.clone(),
            settings,
            log: ChatLog::new(deps.redis.clone(), DEFAULT_BOT),
            access: Access::new(deps.redis.clone(), DEFAULT_BOT),
            nats: deps.nats.clone(),
            hub: hub::Hub::default(),
            listener: std::sync::Mutex::new(Some(listener)),
        })
    }

    /// Tells every replica that `chat`'s log has new entries (best effort: connections also
    /// catch up periodically).
    async fn notify(&self, chat: &str) {
        let subject = subjects::websocket_notify(&self.bot_id);
        if let Err(e) = self.nats.publish(subject, chat.to_string().into()).await {
            tracing::warn!(bot = %self.bot_id, error = %e, "websocket log notification not published");
        }
    }
}

/// Returns the inbound id of the message `id` of the client tagged `client`
/// ([`access::client_tag`]) in `chat`: message ids are de-duplicated per client.
fn inbound_id(chat: &str, client: &str, id: &str) -> String {
    format!("ws:{chat}:{client}:{id}")
}

/// Returns the client's message id an outbound message answers (empty when it answers
/// nothing the client sent: cron, heartbeat).
fn client_msg_id<'a>(chat: &str, reply_to: &'a str) -> &'a str {
    reply_to
        .strip_prefix("ws:")
        .and_then(|rest| rest.strip_prefix(chat))
        .and_then(|rest| rest.strip_prefix(':'))
        .and_then(|rest| rest.split_once(':'))
        .map(|(_client, id)| id)
        .unwrap_or_default()
}

#[async_trait]
impl Channel for WebSocketChannel {
    fn name(&self) -> &'static str {
        CHANNEL
    }

    fn bot(&self) -> &str {
        &self.bot_id
    }

    fn settings(&self) -> &ChannelSettings {
        &self.settings
    }

    async fn run(
        self: Arc<Self>,
        inbound: Inbound,
        cancel: CancellationToken,
    ) -> anyhow::Result<()> {
        let listener = self
            .listener
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
            .context("the websocket channel runs once")?;
        let listener = tokio::net::TcpListener::from_std(listener)?;
        let addr = listener.local_addr()?;
        let mut notified = self
            .nats
            .subscribe(subjects::websocket_notify(&self.bot_id))
            .await
            .context("subscribe to websocket log notifications")?;
        let server = tokio::spawn(http::serve(self.clone(), listener, inbound, cancel.clone()));
        tracing::info!(bot = %self.bot_id, addr = %addr, path = %self.cfg.normalized_path(), "websocket server listening");
        loop {
            tokio::select! {
                _ = cancel.cancelled() => break,
                next = notified.next() => match next {
                    Some(msg) => self.hub.log(&String::from_utf8_lossy(&msg.payload)),
                    None => break,
                },
            }
        }
        let _ = server.await;
        Ok(())
    }

    async fn send(&self, msg: &OutboundMessage, _progress: &mut Progress) -> Result<(), SendError> {
        let kind = match OutboundKind::try_from(msg.kind) {
            Ok(OutboundKind::Final) => Kind::Final,
            Ok(OutboundKind::Progress) => Kind::Progress,
            Ok(OutboundKind::ToolHint) => Kind::ToolHint,
            Ok(OutboundKind::Error) => Kind::Error,
            _ => return Ok(()),
        };
        let mut text = msg.content.clone();
        for path in &msg.media {
            // Files are not served to the browser: the reply names them.
            text.push_str(&format!("\n[file: {path}]"));
        }
        let answered = client_msg_id(&msg.chat_id, &msg.reply_to);
        self.log
            .append(&msg.chat_id, &msg.id, (kind, &text, answered), None)
            .await
            .map_err(|e| SendError::Transient(format!("append to the websocket chat log: {e}")))?;
        self.notify(&msg.chat_id).await;
        Ok(())
    }

    async fn observe(&self, msg: &OutboundMessage) {
        let stream_id = client_msg_id(&msg.chat_id, &msg.reply_to);
        match OutboundKind::try_from(msg.kind) {
            Ok(OutboundKind::StreamDelta) if self.cfg.streaming => {
                let frame = protocol::delta(&msg.chat_id, &msg.content, stream_id);
                self.hub.frame(&msg.chat_id, frame);
            }
            Ok(OutboundKind::StreamEnd) if self.cfg.streaming => {
                let frame = protocol::stream_end(&msg.chat_id, stream_id);
                self.hub.frame(&msg.chat_id, frame);
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_name_the_client_message_they_answer() {
        let id = inbound_id("c-1", "0a1b", "m:7");
        assert_eq!(client_msg_id("c-1", &id), "m:7");
        assert_eq!(
            client_msg_id("c-2", &id),
            "",
            "another chat's id is not ours"
        );
        assert_eq!(client_msg_id("c-1", "cron:1"), "");
    }
}
