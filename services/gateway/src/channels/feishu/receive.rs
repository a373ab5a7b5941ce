//! One Feishu event → at most one inbound message, as 0.3.5's `_on_message`: only
//! `im.message.receive_v1`; messages of bots dropped; in groups only when the bot is @mentioned
//! (or `@_all`) unless `groupPolicy` is `open`; senders outside `allowFrom` get nothing in a group
//! and a pairing code in a direct chat, and cost no model call; the `reactEmoji` reaction; the
//! content as text (the bot's leading mention stripped, other mentions named), rich text, or
//! downloaded images and files; then the inbound message.
//!
//! Exactly once across redeliveries and replicas: the event id is marked done in Redis
//! ([`keys::channel_event`]) only after the inbound message was accepted by JetStream, whose
//! de-duplication (by the inbound id `feishu:{message_id}`) drops a second publish of the same
//! message by a replica that handled it at the same time or was killed before the mark.

use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use redis::AsyncCommands as _;
use reqwest::Method;
use serde_json::{Value, json};
use tracing::Instrument as _;

use nanobot_proto::{InboundMessage, keys};

use super::inbound::{Parsed, parse};
use super::{CHANNEL, FeishuChannel};
use crate::channels::media::{self, Budget};
use crate::channels::{Inbound, acl};

/// How long a handled event id is remembered (Feishu retries within hours).
const DONE_TTL_SECS: u64 = 24 * 3600;

/// Names the [`keys::channel_state`] mark of a message sent inside a group topic.
pub(super) fn topic_mark(message_id: &str) -> String {
    format!("topic:{}", media::safe_id(message_id))
}

/// Returns the inbound id of Feishu message `message_id`.
pub(super) fn inbound_id(message_id: &str) -> String {
    format!("{CHANNEL}:{message_id}")
}

/// Handles one event document (its `header` and `event`); an error means it was not handled
/// and must not be acknowledged.
pub(super) async fn handle(
    ch: &FeishuChannel,
    inbound: &Inbound,
    doc: &Value,
) -> anyhow::Result<()> {
    let header = &doc["header"];
    let event_type = header["event_type"].as_str().unwrap_or_default();
    if event_type != "im.message.receive_v1" {
        tracing::debug!(bot = %ch.bot_id, event_type, "feishu event ignored");
        return Ok(());
    }
    let event_id = header["event_id"].as_str().unwrap_or_default();
    let message_id = doc["event"]["message"]["message_id"]
        .as_str()
        .unwrap_or_default();
    let event_id = if event_id.is_empty() {
        message_id
    } else {
        event_id
    };
    let key = keys::channel_event(&ch.bot_id, CHANNEL, &media::safe_id(event_id));
    let mut conn = ch.redis.clone();
    let done: Option<String> = conn.get(&key).await.context("read the event record")?;
    if done.is_some() {
        tracing::info!(bot = %ch.bot_id, event_id, "feishu event already handled; acknowledged again");
        return Ok(());
    }
    let me = ch.me.get().map(String::as_str).unwrap_or_default();
    match parse(&doc["event"], me) {
        Some(parsed) => handle_message(ch, inbound, &parsed).await?,
        None => {
            tracing::warn!(bot = %ch.bot_id, event_id, "feishu message event without its routing fields ignored")
        }
    }
    let _: () = conn
        .set_ex(&key, "done", DONE_TTL_SECS)
        .await
        .context("record the handled event")?;
    Ok(())
}

async fn handle_message(ch: &FeishuChannel, inbound: &Inbound, msg: &Parsed) -> anyhow::Result<()> {
    if msg.is_group && ch.cfg.group_policy != "open" && !msg.mentioned {
        tracing::debug!(bot = %ch.bot_id, chat = %msg.chat_id, "feishu group message not addressed to the bot ignored");
        return Ok(());
    }
    // The turn's trace starts here: the ACL check, a pairing reply and the resource downloads
    // are in the gateway's receive span (group chatter not addressed to the bot opens none).
    let span = crate::channels::receive_span(&ch.bot_id, CHANNEL);
    accept(ch, inbound, msg).instrument(span).await
}

/// Handles a message for the bot: the ACL (pairing for DM senders), then the inbound message.
async fn accept(ch: &FeishuChannel, inbound: &Inbound, msg: &Parsed) -> anyhow::Result<()> {
    if !allowed(ch, msg).await? {
        if !msg.is_group {
            pair(ch, msg).await?;
        } else {
            tracing::warn!(bot = %ch.bot_id, sender = %msg.sender_id, chat = %msg.chat_id, "feishu message from a sender not in allowFrom ignored");
        }
        return Ok(());
    }
    super::reaction::receipt(ch, &msg.message_id).await;
    let (markers, paths) = save_resources(ch, msg).await;
    let content = std::iter::once(msg.text.as_str())
        .chain(markers.iter().map(String::as_str))
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join("\n");
    if content.is_empty() {
        return Ok(());
    }
    let session_key = match (msg.is_group, ch.cfg.topic_isolation) {
        (true, true) => format!(
            "{CHANNEL}:{}:{}",
            msg.chat_id,
            msg.root_id.as_deref().unwrap_or(&msg.message_id)
        ),
        _ => format!("{CHANNEL}:{}", msg.chat_id),
    };
    let out = InboundMessage {
        id: inbound_id(&msg.message_id),
        bot: ch.bot_id.clone(),
        channel: CHANNEL.into(),
        sender_id: msg.sender_id.clone(),
        chat_id: msg.chat_id.clone(),
        content,
        timestamp_ms: now_ms(),
        media: paths.iter().map(|p| p.display().to_string()).collect(),
        metadata_json: json!({
            "message_id": msg.message_id,
            "chat_type": if msg.is_group { "group" } else { "p2p" },
            "msg_type": msg.msg_type,
            "parent_id": msg.parent_id,
            "root_id": msg.root_id,
            "thread_id": msg.thread_id,
            "is_group": msg.is_group,
        })
        .to_string(),
        session_key,
        stream: ch.cfg.streaming,
        reply_channel: String::new(),
        reply_chat_id: String::new(),
    };
    if msg.thread_id.is_some() {
        // The reply goes into the topic: outbound finds the mark by the message id.
        let key = keys::channel_state(&ch.bot_id, CHANNEL, &topic_mark(&msg.message_id));
        let mut conn = ch.redis.clone();
        let _: () = conn
            .set_ex(&key, "1", DONE_TTL_SECS)
            .await
            .context("mark the topic message")?;
    }
    inbound.publish(&out).await.context("publish inbound")?;
    tracing::debug!(bot = %ch.bot_id, inbound_id = %out.id, session = %out.session_key, "feishu message published");
    Ok(())
}

/// Whether the sender may talk to the bot: `allowFrom` (open ids, `"*"`) or a pairing.
async fn allowed(ch: &FeishuChannel, msg: &Parsed) -> anyhow::Result<bool> {
    if acl::allowed_by_list(&ch.settings.allow_from, &msg.sender_id) {
        return Ok(true);
    }
    ch.pairing
        .is_approved(CHANNEL, &msg.sender_id)
        .await
        .context("read pairing approvals")
}

/// Sends an unknown direct sender its pairing code (best effort once the code exists).
async fn pair(ch: &FeishuChannel, msg: &Parsed) -> anyhow::Result<()> {
    let code = ch
        .pairing
        .code_for(CHANNEL, &msg.sender_id)
        .await
        .context("create a pairing code")?;
    tracing::info!(bot = %ch.bot_id, sender = %msg.sender_id, "unknown feishu sender sent a pairing code");
    let text = nanobot_core::pairing::format_pairing_reply(&code);
    let body = json!({"receive_id": msg.sender_id, "msg_type": "text",
        "content": json!({"text": text}).to_string(), "uuid": format!("pair-{}", msg.message_id)});
    let path = "/open-apis/im/v1/messages?receive_id_type=open_id";
    if let Err(e) = ch.api.call(Method::POST, path, Some(&body)).await {
        tracing::warn!(bot = %ch.bot_id, error = %e, "feishu pairing reply failed");
    }
    Ok(())
}

/// Downloads the message's images and files within the caps: a `[image: path]` / `[file:
/// path]` line each and the saved paths; one not downloaded is a line saying so.
async fn save_resources(ch: &FeishuChannel, msg: &Parsed) -> (Vec<String>, Vec<PathBuf>) {
    let mut budget = Budget::new(ch.caps);
    let mut markers = Vec::new();
    let mut paths = Vec::new();
    for (kind, key, name) in &msg.resources {
        let label = if kind == "image" { "image" } else { "file" };
        if let Err(why) = budget.take(0) {
            markers.push(format!("[{label}: {name}: {why}]"));
            continue;
        }
        let saved = download(ch, &msg.message_id, kind, key, name, budget.bytes_left()).await;
        let saved = saved.and_then(|(path, len)| match budget.settle(0, len) {
            Ok(()) => Ok(path),
            Err(why) => {
                std::fs::remove_file(&path).ok();
                Err(anyhow::anyhow!(why))
            }
        });
        match saved {
            Ok(path) => {
                markers.push(format!("[{label}: {}]", path.display()));
                paths.push(path);
            }
            Err(e) => {
                tracing::warn!(bot = %ch.bot_id, key = %key, error = format!("{e:#}"), "feishu resource not downloaded");
                markers.push(format!("[{label}: {name}: download failed]"));
            }
        }
    }
    (markers, paths)
}

/// Downloads one message resource (`GET .../messages/{id}/resources/{key}?type=`) into the
/// media directory as [`media::stored_name`]; returns its path and length.
async fn download(
    ch: &FeishuChannel,
    message_id: &str,
    kind: &str,
    key: &str,
    name: &str,
    max: u64,
) -> anyhow::Result<(PathBuf, u64)> {
    anyhow::ensure!(!key.is_empty(), "missing resource key");
    let path = media::path_in(&ch.media_dir, &media::stored_name(key, name))?;
    let kind = if kind == "image" { "image" } else { "file" };
    let url = format!(
        "/open-apis/im/v1/messages/{}/resources/{}?type={kind}",
        media::safe_id(message_id),
        media::safe_id(key)
    );
    let (_, body) = ch.api.download(&url, max).await?;
    tokio::fs::create_dir_all(&ch.media_dir)
        .await
        .context("create the media directory")?;
    tokio::fs::write(&path, &body)
        .await
        .context("write the file")?;
    Ok((path, body.len() as u64))
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}
