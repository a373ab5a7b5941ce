//! One client connection: any number of chats, each with its own cursor in the chat's log.
//! Entries are sent in log order from the cursor, so each reaches this connection once;
//! frames for a chat the connection is not attached to are never sent to it. A chat is
//! attached only once it is the client's own ([`super::access`]).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::extract::ws::{CloseFrame, Message, WebSocket};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use nanobot_proto::InboundMessage;

use super::access::{Claim, client_tag};
use super::hub::{Event, QUEUE};
use super::log::{Appended, Kind};
use super::protocol::{self, Envelope};
use super::{CHANNEL, WebSocketChannel, inbound_id};
use crate::channels::Inbound;

/// How often a connection re-reads the logs of its chats (makes up for a lost notification).
const CATCH_UP: Duration = Duration::from_secs(3);
/// Close code of a server going away.
const GOING_AWAY: u16 = 1001;
/// Room left under the broker's message limit for headers (as for large replies).
const HEADROOM: usize = 64 * 1024;

type Sent = Result<(), axum::Error>;

/// Serves one upgraded connection of `client_id` until it closes or `cancel`.
pub(super) async fn run(
    ch: Arc<WebSocketChannel>,
    inbound: Inbound,
    mut socket: WebSocket,
    client_id: String,
    cancel: CancellationToken,
) {
    let (tx, mut rx) = mpsc::channel(QUEUE);
    let mut conn = Conn {
        id: ch.hub.connection(),
        ch: ch.clone(),
        inbound,
        tag: client_tag(&client_id),
        client_id,
        tx,
        default_chat: uuid::Uuid::new_v4().to_string(),
        cursors: HashMap::new(),
        owned: HashSet::new(),
        own: HashSet::new(),
    };
    tracing::debug!(client_id = %conn.client_id, "websocket client connected");
    if let Err(e) = conn.serve(&mut socket, &mut rx, &cancel).await {
        tracing::debug!(client_id = %conn.client_id, error = %e, "websocket connection ended");
    }
    ch.hub.detach(conn.id, conn.cursors.keys());
}

struct Conn {
    id: u64,
    ch: Arc<WebSocketChannel>,
    inbound: Inbound,
    client_id: String,
    /// [`client_tag`] of `client_id`.
    tag: String,
    tx: mpsc::Sender<Event>,
    default_chat: String,
    /// Attached chats and the id of the last log entry this connection sent of each.
    cursors: HashMap<String, String>,
    /// Chats known to be this client's.
    owned: HashSet<String>,
    /// Log entries of this connection's own messages (not echoed back to it).
    own: HashSet<String>,
}

impl Conn {
    async fn serve(
        &mut self,
        socket: &mut WebSocket,
        rx: &mut mpsc::Receiver<Event>,
        cancel: &CancellationToken,
    ) -> Sent {
        let ready = protocol::ready(&self.default_chat, &self.client_id);
        send(socket, ready).await?;
        // The default chat is a fresh random id: claimed on its first message.
        let default_chat = self.default_chat.clone();
        self.follow(socket, &default_chat, None).await?;
        let ping_every = Duration::from_secs_f64(self.ch.cfg.ping_interval_s);
        let silence = ping_every + Duration::from_secs_f64(self.ch.cfg.ping_timeout_s);
        let mut ping = tokio::time::interval(ping_every);
        ping.tick().await;
        let mut catch_up = tokio::time::interval(CATCH_UP);
        catch_up.tick().await;
        let mut heard = Instant::now();
        loop {
            tokio::select! {
                biased;
                _ = cancel.cancelled() => return close(socket, "server shutting down").await,
                frame = socket.recv() => {
                    heard = Instant::now();
                    match frame {
                        Some(Ok(Message::Text(text))) => self.on_text(socket, text.as_str()).await?,
                        Some(Ok(Message::Binary(bytes))) => match std::str::from_utf8(&bytes) {
                            Ok(text) => self.on_text(socket, text).await?,
                            Err(_) => send(socket, protocol::error("frames must be UTF-8 JSON or text", None, None)).await?,
                        },
                        Some(Ok(Message::Ping(_) | Message::Pong(_))) => {}
                        Some(Ok(Message::Close(_))) | Some(Err(_)) | None => return Ok(()),
                    }
                }
                Some(event) = rx.recv() => self.on_event(socket, event).await?,
                _ = ping.tick() => {
                    if heard.elapsed() > silence {
                        return close(socket, "ping timeout").await;
                    }
                    socket.send(Message::Ping(Default::default())).await?;
                }
                _ = catch_up.tick() => self.catch_up(socket).await?,
            }
        }
    }

    async fn on_text(&mut self, socket: &mut WebSocket, raw: &str) -> Sent {
        match protocol::parse(raw) {
            Err(detail) => send(socket, protocol::error(&detail, None, None)).await,
            Ok(Envelope::NewChat) => {
                let chat = uuid::Uuid::new_v4().to_string();
                self.attach(socket, &chat, None).await?;
                send(socket, protocol::attached(&chat)).await
            }
            Ok(Envelope::Attach { chat_id, after }) => {
                if self.attach(socket, &chat_id, after).await? {
                    send(socket, protocol::attached(&chat_id)).await?;
                    self.flush(socket, &chat_id).await?;
                }
                Ok(())
            }
            Ok(Envelope::Message { chat_id, text, id }) => {
                let chat = chat_id.unwrap_or_else(|| self.default_chat.clone());
                let id = id.unwrap_or_else(|| uuid::Uuid::new_v4().simple().to_string());
                // The turn's trace starts here: the chat's ownership, the size and daily caps
                // and the log append are in the gateway's receive span.
                let span = crate::channels::receive_span(&self.ch.bot_id, CHANNEL);
                self.message(socket, &chat, &text, &id)
                    .instrument(span)
                    .await
            }
        }
    }

    /// Attaches `chat` from `after` once it is this client's (claimed now if nobody's).
    /// Returns false (and tells the client) when it is another client's or unreadable.
    async fn attach(
        &mut self,
        socket: &mut WebSocket,
        chat: &str,
        after: Option<String>,
    ) -> Result<bool, axum::Error> {
        if !self.own(socket, chat, None).await? {
            return Ok(false);
        }
        self.follow(socket, chat, after).await
    }

    /// Makes sure `chat` is this client's, claiming it when nobody owns it; tells the client
    /// (naming its message `msg_id`, if any) and returns false when it is not (or the owner
    /// cannot be read).
    async fn own(
        &mut self,
        socket: &mut WebSocket,
        chat: &str,
        msg_id: Option<&str>,
    ) -> Result<bool, axum::Error> {
        if self.owned.contains(chat) {
            return Ok(true);
        }
        let detail = match self.ch.access.claim(chat, &self.client_id).await {
            Ok(Claim::Mine) => {
                self.owned.insert(chat.to_string());
                return Ok(true);
            }
            Ok(Claim::Theirs) => {
                tracing::warn!(client_id = %self.client_id, chat_id = %chat, "websocket chat of another client refused");
                "this chat belongs to another client"
            }
            Err(e) => {
                tracing::warn!(chat_id = %chat, error = %e, "websocket chat owner unreadable");
                "chat unavailable, try again"
            }
        };
        send(socket, protocol::error(detail, Some(chat), msg_id)).await?;
        Ok(false)
    }

    /// Follows `chat`'s log from `after` (none: from its newest entry, or the current cursor
    /// when already attached). Returns false (and tells the client) when the log is
    /// unreadable.
    async fn follow(
        &mut self,
        socket: &mut WebSocket,
        chat: &str,
        after: Option<String>,
    ) -> Result<bool, axum::Error> {
        let cursor = match after {
            Some(after) => after,
            None if self.cursors.contains_key(chat) => return Ok(true),
            None => match self.ch.log.last_id(chat).await {
                Ok(last) => last,
                Err(e) => {
                    tracing::warn!(chat_id = %chat, error = %e, "websocket chat log unreadable");
                    let detail = "chat unavailable, try again";
                    send(socket, protocol::error(detail, Some(chat), None)).await?;
                    return Ok(false);
                }
            },
        };
        self.cursors.insert(chat.to_string(), cursor);
        self.ch.hub.attach(chat, self.id, &self.tx);
        Ok(true)
    }

    /// Stores the user's message in the chat's log, then publishes it; answers `accepted`,
    /// or an `error` naming the message (sending it again with the same id is safe). A message
    /// to another client's chat, over the bus limit or over the client's bytes of the day is
    /// refused before anything is stored.
    async fn message(&mut self, socket: &mut WebSocket, chat: &str, text: &str, id: &str) -> Sent {
        let refuse = |detail: &str| protocol::error(detail, Some(chat), Some(id));
        if text.trim().is_empty() {
            return send(socket, refuse("empty message")).await;
        }
        let msg = self.inbound_message(chat, text, id);
        let limit = self.ch.nats.server_info().max_payload;
        let size = prost::Message::encoded_len(&msg) + HEADROOM;
        if limit > 0 && size > limit {
            tracing::warn!(client_id = %self.client_id, chat_id = %chat, bytes = text.len(), limit, "websocket message over the bus limit refused");
            let most = limit.saturating_sub(size - text.len());
            let detail = format!(
                "message too large: {} bytes of text, at most {most}",
                text.len()
            );
            return send(socket, refuse(&detail)).await;
        }
        if !self.own(socket, chat, Some(id)).await? || !self.follow(socket, chat, None).await? {
            return Ok(());
        }
        let ch = &self.ch;
        let budget = Some((self.tag.as_str(), ch.cfg.client_bytes_per_day));
        let stored = ch.log.append(chat, &msg.id, (Kind::User, text, id), budget);
        let entry = match stored.await {
            Ok(Appended::Entry(entry)) => entry,
            Ok(Appended::OverCap) => {
                tracing::warn!(client_id = %self.client_id, chat_id = %chat, cap = ch.cfg.client_bytes_per_day, "websocket message over the client's bytes of the day refused");
                let detail = format!(
                    "message refused: this client stored its {} bytes for today",
                    ch.cfg.client_bytes_per_day
                );
                return send(socket, refuse(&detail)).await;
            }
            Err(e) => {
                tracing::warn!(chat_id = %chat, error = %e, "websocket message not stored");
                return send(socket, refuse("message not accepted, send it again")).await;
            }
        };
        self.own.insert(entry.clone());
        if let Err(e) = self.inbound.publish(&msg).await {
            tracing::warn!(chat_id = %chat, error = %e, "websocket message not published");
            return send(socket, refuse("message not accepted, send it again")).await;
        }
        tracing::debug!(chat_id = %chat, inbound_id = %msg.id, "websocket message published");
        ch.notify(chat).await;
        send(socket, protocol::accepted(chat, id, &entry)).await
    }

    /// The inbound message of the client's message `id` with `text` in `chat`.
    fn inbound_message(&self, chat: &str, text: &str, id: &str) -> InboundMessage {
        InboundMessage {
            id: inbound_id(chat, &self.tag, id),
            bot: self.ch.bot_id.clone(),
            channel: CHANNEL.into(),
            sender_id: self.client_id.clone(),
            chat_id: chat.to_string(),
            content: text.to_string(),
            timestamp_ms: now_ms(),
            media: Vec::new(),
            metadata_json: "{}".into(),
            session_key: format!("{CHANNEL}:{chat}"),
            stream: self.ch.cfg.streaming,
            reply_channel: String::new(),
            reply_chat_id: String::new(),
        }
    }

    async fn on_event(&mut self, socket: &mut WebSocket, event: Event) -> Sent {
        match event {
            Event::Log(chat) => self.flush(socket, &chat).await,
            Event::Frame { chat, frame } if self.cursors.contains_key(&chat) => {
                send(socket, frame).await
            }
            Event::Frame { .. } => Ok(()),
        }
    }

    async fn catch_up(&mut self, socket: &mut WebSocket) -> Sent {
        let chats: Vec<String> = self.cursors.keys().cloned().collect();
        for chat in chats {
            self.flush(socket, &chat).await?;
        }
        Ok(())
    }

    /// Sends `chat`'s entries after this connection's cursor, in order, moving the cursor.
    async fn flush(&mut self, socket: &mut WebSocket, chat: &str) -> Sent {
        loop {
            let Some(cursor) = self.cursors.get(chat).cloned() else {
                return Ok(());
            };
            let entries = match self.ch.log.after(chat, &cursor).await {
                Ok(entries) => entries,
                Err(e) => {
                    tracing::warn!(chat_id = %chat, error = %e, "websocket chat log unreadable; retrying on the next catch-up");
                    return Ok(());
                }
            };
            if entries.is_empty() {
                return Ok(());
            }
            for entry in entries {
                self.cursors.insert(chat.to_string(), entry.id.clone());
                if self.own.remove(&entry.id) {
                    continue;
                }
                send(socket, protocol::entry(chat, &entry).to_string()).await?;
            }
        }
    }
}

async fn send(socket: &mut WebSocket, frame: String) -> Sent {
    socket.send(Message::Text(frame.into())).await
}

async fn close(socket: &mut WebSocket, reason: &'static str) -> Sent {
    let frame = CloseFrame {
        code: GOING_AWAY,
        reason: reason.into(),
    };
    socket.send(Message::Close(Some(frame))).await
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}
