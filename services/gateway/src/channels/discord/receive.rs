//! One MESSAGE_CREATE → at most one inbound message, as upstream's `_handle_discord_message`:
//! own and system messages dropped; guild senders outside `allowFrom` ignored before any side
//! effect; `allowChannels`; the guild mention policy; pairing for unknown DM senders; the
//! read-receipt reaction, typing, attachments downloaded, then the inbound message.

use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use serde_json::json;
use tracing::Instrument as _;
use twilight_http::request::channel::reaction::RequestReactionType;
use twilight_model::channel::message::MessageType;
use twilight_model::channel::{Attachment, Message};
use twilight_model::id::Id;
use twilight_model::id::marker::UserMarker;

use nanobot_proto::InboundMessage;

use super::{CHANNEL, DiscordChannel};
use crate::channels::media::{self, Budget};
use crate::channels::{Inbound, acl};

/// Largest attachment downloaded (upstream's 20 MB).
pub(super) const MAX_ATTACHMENT_BYTES: u64 = 20 * 1024 * 1024;

/// Returns the inbound id of a Discord message: the same on every replica and every delivery.
pub(super) fn inbound_id(message_id: u64) -> String {
    format!("dc:{message_id}")
}

/// Returns the Discord message id an inbound id answers.
pub(super) fn message_id_of(inbound_id: &str) -> Option<u64> {
    inbound_id.strip_prefix("dc:")?.parse().ok()
}

/// Returns whether a guild message is addressed to the bot: it mentions the bot, or replies to
/// one of its messages.
pub(super) fn addressed(msg: &Message, me: Id<UserMarker>) -> bool {
    msg.mentions.iter().any(|m| m.id == me)
        || msg.content.contains(&format!("<@{me}>"))
        || msg.content.contains(&format!("<@!{me}>"))
        || msg
            .referenced_message
            .as_ref()
            .is_some_and(|r| r.author.id == me)
}

/// Returns `content` without the bot's mentions (`<@id>`, `<@!id>`), trimmed.
pub(super) fn strip_mention(content: &str, me: Id<UserMarker>) -> String {
    content
        .replace(&format!("<@!{me}>"), "")
        .replace(&format!("<@{me}>"), "")
        .trim()
        .to_string()
}

/// Handles one message; an error means nothing was published and it must be handled again.
pub(super) async fn handle(
    ch: &DiscordChannel,
    inbound: &Inbound,
    msg: &Message,
) -> anyhow::Result<()> {
    let Some(me) = ch.me.get().copied() else {
        anyhow::bail!("bot identity unknown");
    };
    if msg.author.id == me || !matches!(msg.kind, MessageType::Regular | MessageType::Reply) {
        return Ok(());
    }
    let is_dm = msg.guild_id.is_none();
    if !is_dm && ch.cfg.group_policy != "open" && !addressed(msg, me) {
        tracing::debug!(bot = %ch.bot_id, chat = %msg.channel_id, "guild message not addressed to the bot ignored");
        return Ok(());
    }
    // The turn's trace starts here: the ACL check, a pairing reply and the attachment
    // downloads are in the gateway's receive span (guild chatter not addressed to the bot
    // opens none).
    let span = crate::channels::receive_span(&ch.bot_id, CHANNEL);
    accept(ch, inbound, msg, me).instrument(span).await
}

/// Handles a message for the bot: the ACL (pairing for DM senders), `allowChannels`, then the
/// inbound message.
async fn accept(
    ch: &DiscordChannel,
    inbound: &Inbound,
    msg: &Message,
    me: Id<UserMarker>,
) -> anyhow::Result<()> {
    let is_dm = msg.guild_id.is_none();
    let sender = msg.author.id.to_string();
    let chat = msg.channel_id.to_string();
    let allowed = acl::allowed_by_list(&ch.settings.allow_from, &sender)
        || ch
            .pairing
            .is_approved(CHANNEL, &sender)
            .await
            .context("read pairing approvals")?;
    if !is_dm && !allowed {
        tracing::warn!(bot = %ch.bot_id, sender = %sender, chat = %chat, "guild message from a sender not in allowFrom ignored");
        return Ok(());
    }
    if !ch.cfg.allow_channels.is_empty() && !ch.cfg.allow_channels.contains(&chat) {
        tracing::debug!(bot = %ch.bot_id, chat = %chat, "message outside allowChannels ignored");
        return Ok(());
    }
    if !allowed {
        let code = ch
            .pairing
            .code_for(CHANNEL, &sender)
            .await
            .context("create a pairing code")?;
        tracing::info!(bot = %ch.bot_id, sender = %sender, "unknown DM sender sent a pairing code");
        let text = nanobot_core::pairing::format_pairing_reply(&code);
        if let Err(e) = ch.http.create_message(msg.channel_id).content(&text).await {
            tracing::warn!(bot = %ch.bot_id, error = %e, "discord pairing reply failed");
        }
        return Ok(());
    }
    react(ch, msg).await;
    ch.typing.start(&ch.http, msg.channel_id);
    ch.working.start(ch, msg.channel_id, msg.id);
    let (markers, paths) = save_attachments(ch, &msg.attachments).await;
    let text = strip_mention(&msg.content, me);
    let content = std::iter::once(text.as_str())
        .chain(markers.iter().map(String::as_str))
        .filter(|p| !p.is_empty())
        .collect::<Vec<_>>()
        .join("\n");
    let reply_to = msg.reference.as_ref().and_then(|r| r.message_id);
    let inbound_msg = InboundMessage {
        id: inbound_id(msg.id.get()),
        bot: ch.bot_id.clone(),
        channel: CHANNEL.into(),
        sender_id: sender,
        chat_id: chat.clone(),
        content: if content.is_empty() {
            "[empty message]".into()
        } else {
            content
        },
        timestamp_ms: now_ms(),
        media: paths,
        metadata_json: json!({
            "message_id": msg.id.to_string(),
            "guild_id": msg.guild_id.map(|g| g.to_string()),
            "reply_to": reply_to.map(|r| r.to_string()),
            "is_group": !is_dm,
        })
        .to_string(),
        session_key: format!("{CHANNEL}:{chat}"),
        stream: ch.cfg.streaming,
        reply_channel: String::new(),
        reply_chat_id: String::new(),
    };
    inbound
        .publish(&inbound_msg)
        .await
        .context("publish inbound")?;
    tracing::debug!(bot = %ch.bot_id, inbound_id = %inbound_msg.id, session = %inbound_msg.session_key, "discord message published");
    Ok(())
}

/// Downloads the attachments within the message's caps (and Discord's 20 MB each): one
/// `[attachment: name]` line each and the saved paths; one skipped or not downloaded is a
/// line saying so.
async fn save_attachments(
    ch: &DiscordChannel,
    attachments: &[Attachment],
) -> (Vec<String>, Vec<String>) {
    let mut budget = Budget::new(ch.caps);
    let mut markers = Vec::new();
    let mut paths = Vec::new();
    for attachment in attachments {
        let name = &attachment.filename;
        if attachment.size > MAX_ATTACHMENT_BYTES {
            markers.push(format!("[attachment: {name} - too large]"));
            continue;
        }
        if let Err(why) = budget.take(attachment.size) {
            tracing::info!(bot = %ch.bot_id, attachment = %name, size = attachment.size, why = %why, "discord attachment skipped");
            markers.push(format!("[attachment: {name} - {why}]"));
            continue;
        }
        let max = (budget.bytes_left() + attachment.size).min(MAX_ATTACHMENT_BYTES);
        match download(ch, attachment, max).await {
            Ok((path, len)) => {
                if let Err(why) = budget.settle(attachment.size, len) {
                    tokio::fs::remove_file(&path).await.ok();
                    markers.push(format!("[attachment: {name} - {why}]"));
                    continue;
                }
                let file = path
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                markers.push(format!("[attachment: {file}]"));
                paths.push(path.display().to_string());
            }
            Err(e) => {
                tracing::warn!(bot = %ch.bot_id, attachment = %name, error = format!("{e:#}"), "discord attachment download failed");
                markers.push(format!("[attachment: {name} - download failed]"));
            }
        }
    }
    (markers, paths)
}

/// Downloads an attachment (at most `max` bytes) to `{media}/{attachment id}_{safe name}`
/// ([`media::stored_name`]); kept when already there, so a message handled again downloads
/// nothing. Returns its path and length.
async fn download(
    ch: &DiscordChannel,
    attachment: &Attachment,
    max: u64,
) -> anyhow::Result<(PathBuf, u64)> {
    let name = media::stored_name(&attachment.id.to_string(), &attachment.filename);
    let path = media::path_in(&ch.media_dir, &name)?;
    if let Ok(meta) = tokio::fs::metadata(&path).await {
        return Ok((path, meta.len()));
    }
    tokio::fs::create_dir_all(&ch.media_dir)
        .await
        .context("create the media folder")?;
    let response = ch
        .download
        .get(&attachment.url)
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .context("fetch")?;
    let bytes = media::read_capped(response, max).await?;
    // Written aside and renamed, so a crash never leaves a truncated file under the final name.
    let partial = path.with_extension("part");
    tokio::fs::write(&partial, &bytes).await.context("write")?;
    tokio::fs::rename(&partial, &path).await.context("rename")?;
    Ok((path, bytes.len() as u64))
}

/// Sets the read-receipt reaction (best effort).
async fn react(ch: &DiscordChannel, msg: &Message) {
    if ch.cfg.read_receipt_emoji.is_empty() {
        return;
    }
    let emoji = RequestReactionType::Unicode {
        name: &ch.cfg.read_receipt_emoji,
    };
    if let Err(e) = ch
        .http
        .create_reaction(msg.channel_id, msg.id, &emoji)
        .await
    {
        tracing::debug!(bot = %ch.bot_id, error = %e, "discord reaction failed");
    }
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
    fn the_bots_mentions_are_stripped_and_ids_round_trip() {
        let me = Id::new(42);
        assert_eq!(strip_mention("<@42> hello <@!42>", me), "hello");
        assert_eq!(strip_mention("<@43> hi", me), "<@43> hi");
        assert_eq!(message_id_of(&inbound_id(7)), Some(7));
        assert_eq!(message_id_of("tg:1:2"), None);
    }
}
