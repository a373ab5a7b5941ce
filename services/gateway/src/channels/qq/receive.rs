//! One C2C_MESSAGE_CREATE or GROUP_AT_MESSAGE_CREATE → at most one inbound message, as
//! 0.3.5's `_on_message`: an event already handled (its record in [`keys::channel_event`]) is
//! dropped; a sender outside `allowFrom` (and not paired) costs nothing but, in C2C, a pairing
//! code; attachments are downloaded (`downloadMaxBytes` each, within the message caps) and
//! listed under `Received files:`; `ackMessage` is sent as the first reply; then the inbound
//! message, id `qq:{message id}`.

use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use redis::AsyncCommands as _;
use serde_json::{Value, json};
use tracing::Instrument as _;

use nanobot_proto::{InboundMessage, keys};

use super::{CHANNEL, QqChannel, outbound};
use crate::channels::media::{self, Budget};
use crate::channels::{Inbound, acl};

/// How long a handled event is remembered (QQ replays a resumed session's events well
/// within it).
const EVENT_TTL_SECS: u64 = 24 * 3600;
/// How long a chat's kind (C2C or group) is remembered for replies.
const CHAT_TTL_SECS: u64 = 30 * 24 * 3600;

/// Returns the inbound id of a QQ message: the same on every replica and every delivery.
pub(super) fn inbound_id(message_id: &str) -> String {
    format!("qq:{message_id}")
}

/// Returns the QQ message id an inbound id answers.
pub(super) fn message_id_of(inbound_id: &str) -> Option<&str> {
    inbound_id.strip_prefix("qq:").filter(|id| !id.is_empty())
}

/// The key remembering whether `chat_id` is a group.
pub(super) fn chat_kind_key(bot: &str, chat_id: &str) -> String {
    keys::channel_state(bot, CHANNEL, &format!("chat:{chat_id}"))
}

/// Who sent a message and where to answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Origin {
    /// The message id.
    pub message_id: String,
    /// The sender's openid.
    pub sender: String,
    /// The user's openid (C2C) or the group's openid.
    pub chat: String,
}

/// Reads the ids of an event's data (`None`: not a message the channel can answer).
pub(super) fn origin(event: &Value, group: bool) -> Option<Origin> {
    let text = |v: &Value| v.as_str().filter(|s| !s.is_empty()).map(str::to_string);
    let message_id = text(&event["id"])?;
    let author = &event["author"];
    let (sender, chat) = if group {
        let sender = text(&author["member_openid"])?;
        (sender, text(&event["group_openid"])?)
    } else {
        let user = text(&author["user_openid"]).or_else(|| text(&author["id"]))?;
        (user.clone(), user)
    };
    Some(Origin {
        message_id,
        sender,
        chat,
    })
}

/// Handles one message event; an error means nothing was published and it must be handled
/// again.
pub(super) async fn handle(
    ch: &QqChannel,
    inbound: &Inbound,
    event: &Value,
    group: bool,
) -> anyhow::Result<()> {
    let Some(from) = origin(event, group) else {
        tracing::warn!(bot = %ch.bot_id, group, "qq message without ids ignored");
        return Ok(());
    };
    let record = keys::channel_event(&ch.bot_id, CHANNEL, &from.message_id);
    let mut conn = ch.redis.clone();
    let seen: Option<String> = conn.get(&record).await.context("read the event record")?;
    if seen.is_some() {
        tracing::debug!(bot = %ch.bot_id, message_id = %from.message_id, "qq message already handled");
        return Ok(());
    }
    // The turn's trace starts here: the ACL check, a pairing reply and the attachment
    // downloads are in the gateway's receive span.
    let span = crate::channels::receive_span(&ch.bot_id, CHANNEL);
    admit(ch, inbound, event, &from, group)
        .instrument(span)
        .await?;
    let _: () = conn
        .set_ex(&record, "done", EVENT_TTL_SECS)
        .await
        .context("write the event record")?;
    Ok(())
}

/// The ACL: an allowed sender's message is accepted, any other refused.
async fn admit(
    ch: &QqChannel,
    inbound: &Inbound,
    event: &Value,
    from: &Origin,
    group: bool,
) -> anyhow::Result<()> {
    let allowed = acl::allowed_by_list(&ch.settings.allow_from, &from.sender)
        || ch
            .pairing
            .is_approved(CHANNEL, &from.sender)
            .await
            .context("read pairing approvals")?;
    if !allowed {
        refuse(ch, from, group).await
    } else {
        accept(ch, inbound, event, from, group).await
    }
}

/// A sender outside `allowFrom`: a pairing code in C2C, nothing in a group.
async fn refuse(ch: &QqChannel, from: &Origin, group: bool) -> anyhow::Result<()> {
    if group {
        tracing::warn!(bot = %ch.bot_id, sender = %from.sender, chat = %from.chat, "qq group message from a sender not in allowFrom ignored");
        return Ok(());
    }
    let code = ch
        .pairing
        .code_for(CHANNEL, &from.sender)
        .await
        .context("create a pairing code")?;
    tracing::info!(bot = %ch.bot_id, sender = %from.sender, "unknown qq sender sent a pairing code");
    let text = nanobot_core::pairing::format_pairing_reply(&code);
    if let Err(e) =
        outbound::reply_text(ch, &from.chat, false, &from.message_id, "pairing", &text).await
    {
        tracing::warn!(bot = %ch.bot_id, error = %e, "qq pairing reply failed");
    }
    Ok(())
}

/// An allowed sender: ack, attachments, inbound message.
async fn accept(
    ch: &QqChannel,
    inbound: &Inbound,
    event: &Value,
    from: &Origin,
    group: bool,
) -> anyhow::Result<()> {
    let mut conn = ch.redis.clone();
    let kind = if group { "group" } else { "c2c" };
    let _: () = conn
        .set_ex(chat_kind_key(&ch.bot_id, &from.chat), kind, CHAT_TTL_SECS)
        .await
        .context("remember the chat kind")?;
    let text = event["content"].as_str().unwrap_or_default().trim();
    let attachments = event["attachments"].as_array().cloned().unwrap_or_default();
    let (paths, lines, meta) = save_attachments(ch, &from.message_id, &attachments).await;
    let content = compose(text, &paths, &lines);
    if content.is_empty() {
        return Ok(());
    }
    if !ch.cfg.ack_message.is_empty()
        && let Err(e) = outbound::reply_text(
            ch,
            &from.chat,
            group,
            &from.message_id,
            "ack",
            &ch.cfg.ack_message,
        )
        .await
    {
        tracing::debug!(bot = %ch.bot_id, error = %e, "qq ack message failed");
    }
    let msg = InboundMessage {
        id: inbound_id(&from.message_id),
        bot: ch.bot_id.clone(),
        channel: CHANNEL.into(),
        sender_id: from.sender.clone(),
        chat_id: from.chat.clone(),
        content,
        timestamp_ms: now_ms(),
        media: paths,
        metadata_json: json!({
            "message_id": from.message_id,
            "attachments": meta,
            "is_group": group,
        })
        .to_string(),
        session_key: format!("{CHANNEL}:{}", from.chat),
        stream: false,
        reply_channel: String::new(),
        reply_chat_id: String::new(),
    };
    inbound.publish(&msg).await.context("publish inbound")?;
    tracing::debug!(bot = %ch.bot_id, inbound_id = %msg.id, "qq message published");
    Ok(())
}

/// Returns the turn's text as 0.3.5 writes it: the text, then `Received files:` and one
/// `- name\n  saved: path` entry per attachment; with no text, `[Image]` or `[File]` first.
pub(super) fn compose(text: &str, paths: &[String], lines: &[String]) -> String {
    if lines.is_empty() {
        return text.to_string();
    }
    let block = format!("Received files:\n{}", lines.join("\n"));
    if !text.is_empty() {
        return format!("{text}\n\n{block}");
    }
    let image = paths.iter().any(|p| is_image(p));
    format!("{}\n{block}", if image { "[Image]" } else { "[File]" })
}

fn is_image(path: &str) -> bool {
    let ext = path.rsplit_once('.').map(|(_, e)| e.to_lowercase());
    matches!(
        ext.as_deref(),
        Some("png" | "jpg" | "jpeg" | "gif" | "bmp" | "webp" | "tif" | "tiff" | "ico" | "svg")
    )
}

/// Downloads the attachments within the message caps and `downloadMaxBytes` each; returns the
/// saved paths, one `Received files:` entry each, and their metadata.
async fn save_attachments(
    ch: &QqChannel,
    message_id: &str,
    attachments: &[Value],
) -> (Vec<String>, Vec<String>, Vec<Value>) {
    let mut budget = Budget::new(ch.caps);
    let (mut paths, mut lines, mut meta) = (Vec::new(), Vec::new(), Vec::new());
    for (i, att) in attachments.iter().enumerate() {
        let url = att["url"].as_str().unwrap_or_default();
        let name = att["filename"].as_str().unwrap_or_default();
        let shown = if name.is_empty() { url } else { name };
        let size = att["size"].as_u64().unwrap_or(0);
        let saved = match budget.take(size.min(ch.cfg.download_cap())) {
            Err(why) => Err(why),
            Ok(()) => {
                let max = budget
                    .bytes_left()
                    .saturating_add(size)
                    .min(ch.cfg.download_cap());
                match download(ch, &format!("{message_id}-{i}"), url, name, max).await {
                    Ok((path, len)) => match budget.settle(size.min(ch.cfg.download_cap()), len) {
                        Ok(()) => Ok(path.display().to_string()),
                        Err(why) => {
                            tokio::fs::remove_file(&path).await.ok();
                            Err(why)
                        }
                    },
                    Err(e) => {
                        tracing::warn!(bot = %ch.bot_id, attachment = %shown, error = format!("{e:#}"), "qq attachment download failed");
                        Err("download failed".to_string())
                    }
                }
            }
        };
        let line = match &saved {
            Ok(path) => format!("- {shown}\n  saved: {path}"),
            Err(why) => format!("- {shown}\n  saved: [{why}]"),
        };
        lines.push(line);
        meta.push(
            json!({"url": url, "filename": name, "content_type": att["content_type"],
            "saved_path": saved.as_ref().ok()}),
        );
        if let Ok(path) = saved {
            paths.push(path);
        }
    }
    (paths, lines, meta)
}

/// Downloads `url` (at most `max` bytes, no redirects) to `{media}/{id}_{safe name}`; kept
/// when already there, so a message handled again downloads nothing.
async fn download(
    ch: &QqChannel,
    id: &str,
    url: &str,
    name: &str,
    max: u64,
) -> anyhow::Result<(PathBuf, u64)> {
    // QQ's CDN links may be protocol-relative.
    let url = match url.strip_prefix("//") {
        Some(rest) => format!("https://{rest}"),
        None => url.to_string(),
    };
    let name = if name.is_empty() { "file.bin" } else { name };
    let path = media::path_in(&ch.media_dir, &media::stored_name(id, name))?;
    if let Ok(meta) = tokio::fs::metadata(&path).await {
        return Ok((path, meta.len()));
    }
    tokio::fs::create_dir_all(&ch.media_dir)
        .await
        .context("create the media folder")?;
    let response = ch
        .download
        .get(&url)
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .map_err(|e| anyhow::anyhow!("fetch: {}", e.without_url()))?;
    let bytes = media::read_capped(response, max).await?;
    // Written aside and renamed, so a crash never leaves a truncated file under the final name.
    let partial = path.with_extension("part");
    tokio::fs::write(&partial, &bytes).await.context("write")?;
    tokio::fs::rename(&partial, &path).await.context("rename")?;
    Ok((path, bytes.len() as u64))
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn c2c_and_group_events_name_their_sender_and_chat() {
        let c2c = json!({"id": "M1", "author": {"user_openid": "U1"}, "content": "你好"});
        let from = origin(&c2c, false).unwrap();
        assert_eq!((from.sender.as_str(), from.chat.as_str()), ("U1", "U1"));
        let group = json!({"id": "M2", "author": {"member_openid": "U2"}, "group_openid": "G1"});
        let from = origin(&group, true).unwrap();
        assert_eq!((from.sender.as_str(), from.chat.as_str()), ("U2", "G1"));
        assert!(origin(&json!({"id": "M3", "author": {}}), false).is_none());
        assert_eq!(
            message_id_of(&inbound_id("ROBOT1.0_x!")),
            Some("ROBOT1.0_x!")
        );
        assert_eq!(message_id_of("dc:1"), None);
    }

    #[test]
    fn received_files_are_listed_as_0_3_5_lists_them() {
        assert_eq!(compose("你好 👋", &[], &[]), "你好 👋");
        let paths = vec!["/m/a_猫.png".to_string()];
        let lines = vec!["- 猫.png\n  saved: /m/a_猫.png".to_string()];
        assert_eq!(
            compose("看看", &paths, &lines),
            "看看\n\nReceived files:\n- 猫.png\n  saved: /m/a_猫.png"
        );
        assert_eq!(
            compose("", &paths, &lines),
            "[Image]\nReceived files:\n- 猫.png\n  saved: /m/a_猫.png"
        );
        let doc = vec!["/m/b.pdf".to_string()];
        assert!(compose("", &doc, &lines).starts_with("[File]\n"));
    }
}
