//! Publishes a turn's outbound messages (final reply, stream deltas, tool hints) to JetStream,
//! each with a delivery id derived from the inbound id so a redone turn is de-duplicated.

use async_nats::jetstream;

use nanobot_proto::{OutboundKind, OutboundMessage, subjects};
use nanobot_runtime::bus::{self, BusError};

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
    /// Publishes one outbound message of `kind`; `seq` orders deltas.
    pub async fn send(&self, kind: OutboundKind, content: &str, seq: u32) -> Result<(), BusError> {
        let id = format!("{}:{}:{seq}", self.reply_to, kind.as_str_name());
        let msg = OutboundMessage {
            id: id.clone(),
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
        };
        let subject = subjects::outbound(&self.bot, &self.channel, &self.chat_id);
        bus::publish(&self.js, subject, Some(&id), &msg).await
    }
}
