//! The receipt and done reactions, as 0.3.5: `reactEmoji` is added when a message is accepted
//! and its reaction id kept in [`keys::channel_state`] (`reaction:<message id>`, a day), so the
//! replica that delivers the final reply, whichever it is, removes it and adds `doneEmoji`.
//! Best effort: a failed reaction is logged at debug and never fails a turn or a delivery.
//! SIGKILL between the add and the record leaves the receipt reaction in place.

use redis::AsyncCommands as _;
use reqwest::Method;
use serde_json::json;

use nanobot_proto::keys;

use super::{CHANNEL, FeishuChannel};
use crate::channels::media;

/// How long a receipt reaction's id is kept.
const RECORD_TTL_SECS: u64 = 24 * 3600;

fn record_key(ch: &FeishuChannel, message_id: &str) -> String {
    keys::channel_state(
        &ch.bot_id,
        CHANNEL,
        &format!("reaction:{}", media::safe_id(message_id)),
    )
}

/// Adds reaction `emoji` to `message_id`; returns its reaction id.
async fn add(ch: &FeishuChannel, message_id: &str, emoji: &str) -> Option<String> {
    if emoji.is_empty() || message_id.is_empty() {
        return None;
    }
    let path = format!(
        "/open-apis/im/v1/messages/{}/reactions",
        media::safe_id(message_id)
    );
    let body = json!({"reaction_type": {"emoji_type": emoji}});
    match ch.api.call(Method::POST, &path, Some(&body)).await {
        Ok(answer) => answer["data"]["reaction_id"].as_str().map(str::to_string),
        Err(e) => {
            tracing::debug!(bot = %ch.bot_id, error = %e, "feishu reaction failed");
            None
        }
    }
}

/// Adds `reactEmoji` to a message just accepted and records its reaction id.
pub(super) async fn receipt(ch: &FeishuChannel, message_id: &str) {
    let Some(id) = add(ch, message_id, &ch.cfg.react_emoji).await else {
        return;
    };
    let mut conn = ch.redis.clone();
    let written: redis::RedisResult<()> = conn
        .set_ex(record_key(ch, message_id), id, RECORD_TTL_SECS)
        .await;
    if let Err(e) = written {
        tracing::debug!(bot = %ch.bot_id, error = %e, "feishu receipt reaction not recorded");
    }
}

/// Removes the receipt reaction of an answered message and adds `doneEmoji`.
pub(super) async fn done(ch: &FeishuChannel, message_id: &str) {
    if message_id.is_empty() {
        return;
    }
    let mut conn = ch.redis.clone();
    let receipt: Option<String> = conn
        .get_del(record_key(ch, message_id))
        .await
        .unwrap_or_default();
    if let Some(reaction) = receipt {
        let path = format!(
            "/open-apis/im/v1/messages/{}/reactions/{}",
            media::safe_id(message_id),
            media::safe_id(&reaction)
        );
        if let Err(e) = ch.api.call(Method::DELETE, &path, None).await {
            tracing::debug!(bot = %ch.bot_id, error = %e, "feishu receipt reaction not removed");
        }
    }
    if let Some(emoji) = ch.cfg.done_emoji.as_deref() {
        add(ch, message_id, emoji).await;
    }
}
