//! One Slack event → at most one inbound message, as upstream: the event filter, the channel
//! policy (`groupPolicy`), ACL with pairing for unknown DM senders, the receipt reaction, file
//! downloads, then the inbound message.
//!
//! Exactly once across retries and replicas: the event id is marked done in Redis
//! ([`keys::slack_event`]) only after the inbound message was accepted by JetStream; a retry of
//! a done event is only acknowledged. A replica killed before the mark leaves the event
//! unacknowledged, so Slack delivers it again and it is handled again with the same inbound id
//! (`slack:{channel}:{ts}`), which the stream and the runners' seen-set drop if it was
//! already published.

use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use redis::AsyncCommands as _;
use serde_json::{Value, json};
use tracing::Instrument as _;

use nanobot_proto::{InboundMessage, keys};

use super::inbound::{self, FileRef, Parsed};
use super::{CHANNEL, SlackChannel};
use crate::channels::media::{self, Budget};
use crate::channels::{Inbound, acl};
use crate::render::slack::escape;

/// How long a handled event id is remembered (Slack retries within minutes).
const DONE_TTL_SECS: u64 = 24 * 3600;

/// Handles one event callback (`event_id` and its `event`); an error means it was not handled
/// and must not be acknowledged (Slack delivers it again).
pub(super) async fn handle(
    ch: &SlackChannel,
    inbound: &Inbound,
    event_id: &str,
    event: &Value,
) -> anyhow::Result<()> {
    let Some(me) = ch.me.get() else {
        anyhow::bail!("bot identity unknown");
    };
    let key = keys::slack_event(&ch.bot_id, event_id);
    let mut conn = ch.redis.clone();
    let done: Option<String> = conn.get(&key).await.context("read the event record")?;
    if done.is_some() {
        tracing::info!(bot = %ch.bot_id, event_id, "slack event already handled; acknowledged again");
        return Ok(());
    }
    if let Some(parsed) = inbound::parse(event, me, ch.cfg.reply_in_thread) {
        handle_message(ch, inbound, &parsed).await?;
    }
    let _: () = conn
        .set_ex(&key, "done", DONE_TTL_SECS)
        .await
        .context("record the handled event")?;
    Ok(())
}

async fn handle_message(ch: &SlackChannel, inbound: &Inbound, msg: &Parsed) -> anyhow::Result<()> {
    let cfg = &ch.cfg;
    if msg.is_dm && !cfg.dm.enabled {
        tracing::debug!(bot = %ch.bot_id, "slack direct messages are disabled (dm.enabled)");
        return Ok(());
    }
    if !msg.is_dm && !addressed(ch, msg) {
        tracing::debug!(bot = %ch.bot_id, chat = %msg.chat_id, "slack channel message not addressed to the bot ignored");
        return Ok(());
    }
    // The turn's trace starts here: the ACL check, a pairing reply and the file downloads are
    // in the gateway's receive span (channel chatter not addressed to the bot opens none).
    let span = crate::channels::receive_span(&ch.bot_id, CHANNEL);
    accept(ch, inbound, msg).instrument(span).await
}

/// Handles a message for the bot: the ACL (pairing for DM senders), then the inbound message.
async fn accept(ch: &SlackChannel, inbound: &Inbound, msg: &Parsed) -> anyhow::Result<()> {
    if !allowed(ch, msg).await? {
        if msg.is_dm {
            let code = ch
                .pairing
                .code_for(CHANNEL, &msg.sender_id)
                .await
                .context("create a pairing code")?;
            tracing::info!(bot = %ch.bot_id, sender = %msg.sender_id, "unknown slack sender sent a pairing code");
            let text = escape(&nanobot_core::pairing::format_pairing_reply(&code));
            let posted = ch
                .api
                .call(
                    "chat.postMessage",
                    &json!({"channel": msg.chat_id, "text": text}),
                )
                .await;
            if let Err(e) = posted {
                tracing::warn!(bot = %ch.bot_id, error = %e, "slack pairing reply failed");
            }
        } else {
            tracing::warn!(bot = %ch.bot_id, sender = %msg.sender_id, chat = %msg.chat_id, "slack message from a sender not in allowFrom ignored");
        }
        return Ok(());
    }
    react(ch, msg).await;
    let (markers, paths) = save_files(ch, &msg.files).await;
    let content = std::iter::once(msg.text.as_str())
        .chain(markers.iter().map(String::as_str))
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join("\n");
    if content.is_empty() {
        return Ok(());
    }
    let out = InboundMessage {
        id: inbound::inbound_id(&msg.chat_id, &msg.ts),
        bot: ch.bot_id.clone(),
        channel: CHANNEL.into(),
        sender_id: msg.sender_id.clone(),
        chat_id: msg.chat_id.clone(),
        content,
        timestamp_ms: now_ms(),
        media: paths.iter().map(|p| p.display().to_string()).collect(),
        metadata_json: json!({
            "slack": {
                "ts": msg.ts,
                "thread_ts": msg.thread_ts,
                "channel_type": if msg.is_dm { "im" } else { "channel" },
            },
            "is_group": !msg.is_dm,
        })
        .to_string(),
        session_key: msg.session_key.clone(),
        stream: ch.cfg.streaming,
        reply_channel: String::new(),
        reply_chat_id: String::new(),
    };
    inbound.publish(&out).await.context("publish inbound")?;
    tracing::debug!(bot = %ch.bot_id, inbound_id = %out.id, session = %out.session_key, "slack message published");
    Ok(())
}

/// Whether a channel message is for the bot under `groupPolicy`, as upstream.
fn addressed(ch: &SlackChannel, msg: &Parsed) -> bool {
    let cfg = &ch.cfg;
    match cfg.group_policy.as_str() {
        "open" => true,
        "allowlist" => {
            cfg.group_allow_from.contains(&msg.chat_id)
                && (!cfg.group_require_mention || msg.mentioned)
        }
        _ => msg.mentioned,
    }
}

/// Whether the sender may talk to the bot: `allowFrom` (user or conversation ids, `"*"`),
/// `dm.allowFrom` in DMs, an allow-listed channel, or an approved pairing.
async fn allowed(ch: &SlackChannel, msg: &Parsed) -> anyhow::Result<bool> {
    let cfg = &ch.cfg;
    let listed = |list: &[String]| {
        acl::allowed_by_list(list, &msg.sender_id) || acl::allowed_by_list(list, &msg.chat_id)
    };
    if listed(&ch.settings.allow_from)
        || (msg.is_dm && listed(&cfg.dm.allow_from))
        || (!msg.is_dm
            && cfg.group_policy == "allowlist"
            && cfg.group_allow_from.contains(&msg.chat_id))
    {
        return Ok(true);
    }
    ch.pairing
        .is_approved(CHANNEL, &msg.sender_id)
        .await
        .context("read pairing approvals")
}

fn kind(file: &FileRef) -> &'static str {
    if file.is_image { "image" } else { "file" }
}

/// Downloads the shared files within the message's caps: one `[image: path]` / `[file: path]`
/// line each and the saved paths; a file past a cap or not downloaded is a line saying so.
async fn save_files(ch: &SlackChannel, files: &[FileRef]) -> (Vec<String>, Vec<PathBuf>) {
    let mut budget = Budget::new(ch.caps);
    let mut markers = Vec::new();
    let mut paths = Vec::new();
    for file in files {
        if let Err(why) = budget.take(file.size) {
            tracing::info!(bot = %ch.bot_id, file_id = %file.id, size = file.size, why = %why, "slack file skipped");
            markers.push(format!("[{}: {}: {why}]", kind(file), file.name));
            continue;
        }
        let saved = download(ch, file, budget.bytes_left() + file.size).await;
        let saved = saved.and_then(|(path, len)| match budget.settle(file.size, len) {
            Ok(()) => Ok(path),
            Err(why) => {
                std::fs::remove_file(&path).ok();
                Err(anyhow::anyhow!(why))
            }
        });
        match saved {
            Ok(path) => {
                markers.push(format!("[{}: {}]", kind(file), path.display()));
                paths.push(path);
            }
            Err(e) => {
                tracing::warn!(bot = %ch.bot_id, file_id = %file.id, error = format!("{e:#}"), "slack file not downloaded");
                markers.push(format!(
                    "[{}: {}: download failed; not available to nanobot. Check Slack files:read scope, reinstall the Slack app, and ensure the bot can access the file.]",
                    kind(file),
                    file.name
                ));
            }
        }
    }
    (markers, paths)
}

/// Downloads a shared file (at most `max` bytes) with the bot token into the media directory
/// as [`media::stored_name`]; returns its path and length.
async fn download(ch: &SlackChannel, file: &FileRef, max: u64) -> anyhow::Result<(PathBuf, u64)> {
    anyhow::ensure!(!file.url.is_empty(), "missing download url");
    let path = media::path_in(&ch.media_dir, &media::stored_name(&file.id, &file.name))?;
    let (content_type, body) = ch.api.download(&file.url, max).await?;
    let head = String::from_utf8_lossy(&body[..body.len().min(256)]).to_lowercase();
    let head = head.trim_start();
    // Slack answers a missing scope with its sign-in page instead of the file.
    anyhow::ensure!(
        !content_type.contains("text/html")
            && !head.starts_with("<!doctype html")
            && !head.starts_with("<html"),
        "Slack returned HTML instead of file content"
    );
    tokio::fs::create_dir_all(&ch.media_dir)
        .await
        .context("create the media directory")?;
    tokio::fs::write(&path, &body)
        .await
        .context("write the file")?;
    Ok((path, body.len() as u64))
}

/// Sets the receipt reaction (best effort).
async fn react(ch: &SlackChannel, msg: &Parsed) {
    if ch.cfg.react_emoji.is_empty() {
        return;
    }
    let body = json!({"channel": msg.chat_id, "name": ch.cfg.react_emoji, "timestamp": msg.ts});
    if let Err(e) = ch.api.call("reactions.add", &body).await {
        tracing::debug!(bot = %ch.bot_id, error = %e, "slack reaction failed");
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}
