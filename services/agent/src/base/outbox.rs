//! Publishing a turn's outbound messages (final reply, stream deltas, tool hints) to
//! JetStream, each with a delivery id derived from the inbound id so a redone turn is
//! de-duplicated. A final reply is first committed with the turn into the session's outbox
//! key, then published, then cleared: a runner dying in between leaves it for the next lease
//! holder to publish ([`flush`]), so a committed reply is never lost.

use async_nats::jetstream;
use prost::Message as _;

use nanobot_core::session::SessionWriter;
use nanobot_proto::{InboundMessage, OutboundKind, OutboundMessage};
use nanobot_runtime::bus::BusError;
use nanobot_runtime::payloads;

use super::error::Result;
use super::outcomes::{self, Outcome};

/// Where a turn's replies go.
#[derive(Debug, Clone)]
pub struct Outbox {
    /// JetStream context.
    pub js: jetstream::Context,
    /// Bot id.
    pub bot: String,
    /// Target channel.
    pub channel: String,
    /// Target chat.
    pub chat_id: String,
    /// Inbound id answered.
    pub reply_to: String,
    /// Session key.
    pub session_key: String,
}

impl Outbox {
    /// Where the replies to `msg` go: its reply channel and chat when it names them (a
    /// subagent's announcement answers the chat that spawned it), otherwise its origin's
    /// ([`InboundMessage::origin`]: a `system` message's reply goes to its origin chat).
    pub fn for_message(js: &jetstream::Context, msg: &InboundMessage) -> Self {
        let (channel, chat_id) = if msg.reply_channel.is_empty() {
            msg.origin()
        } else {
            (msg.reply_channel.clone(), msg.reply_chat_id.clone())
        };
        Self {
            js: js.clone(),
            bot: msg.bot.clone(),
            channel,
            chat_id,
            reply_to: msg.id.clone(),
            session_key: msg.effective_session_key(),
        }
    }

    /// Builds one outbound message of `kind`; `seq` orders deltas.
    pub fn message(&self, kind: OutboundKind, content: &str, seq: u32) -> OutboundMessage {
        OutboundMessage {
            id: format!("{}:{}:{seq}", self.reply_to, kind.as_str_name()),
            bot: self.bot.clone(),
            channel: self.channel.clone(),
            chat_id: self.chat_id.clone(),
            content: content.to_string(),
            reply_to: self.reply_to.clone(),
            media: Vec::new(),
            metadata_json: String::new(),
            kind: kind as i32,
            session_key: self.session_key.clone(),
            seq,
            answers: Vec::new(),
            content_ref: String::new(),
            usage: None,
            model: String::new(),
        }
    }

    /// Publishes one outbound message of `kind` at once (deltas, hints, progress).
    pub async fn send(&self, kind: OutboundKind, content: &str, seq: u32) -> Result<(), BusError> {
        publish(&self.js, &self.message(kind, content, seq)).await
    }
}

/// Publishes `msg` on its chat's subject with its delivery id (a reply over the broker's
/// message limit goes through the payload store).
pub async fn publish(js: &jetstream::Context, msg: &OutboundMessage) -> Result<(), BusError> {
    if msg.kind() == OutboundKind::Error {
        // Upstream's error reply: the turn failed every attempt.
        outcomes::report(&msg.reply_to, Outcome::Failed(msg.content.clone()));
    }
    payloads::publish_outbound(js, msg).await
}

/// Publishes a reply a previous holder of the session committed but may not have published
/// (the broker drops the copy when it was, by its delivery id).
pub async fn flush(
    js: &jetstream::Context,
    sessions: &SessionWriter,
    session_key: &str,
) -> Result<()> {
    match sessions.outbox(session_key).await? {
        Some(payload) => publish_left(js, sessions, session_key, payload).await,
        None => Ok(()),
    }
}

/// Publishes `payload`, the reply read from the session's outbox under its lease, then clears
/// it (see [`flush`]).
pub async fn publish_left(
    js: &jetstream::Context,
    sessions: &SessionWriter,
    session_key: &str,
    payload: Vec<u8>,
) -> Result<()> {
    match OutboundMessage::decode(payload.as_slice()) {
        Ok(msg) => {
            publish(js, &msg).await?;
            tracing::info!(delivery_id = %msg.id, "published a committed reply left by a previous runner");
        }
        Err(e) => tracing::warn!(error = %e, "dropping an undecodable outbox entry"),
    }
    sessions.clear_outbox(session_key, &payload).await?;
    Ok(())
}

/// Encodes a reply for the outbox.
pub fn encode(msg: &OutboundMessage) -> Vec<u8> {
    msg.encode_to_vec()
}
