//! Sending, as upstream's `send_outbound`: each file as its own message (at most 20 MB; a file
//! missing or refused is named in `[attachment: {name} - send failed]` when nothing else is
//! sent), then the text split at 2,000 characters as upstream's `split_message` (at a newline,
//! else a space, else between grapheme clusters), the first message a reply to the user's (without pinging them).
//! Rate limits (429), Discord's 5xx and network failures are retried by redelivery; other
//! refusals drop the message.

use std::path::Path;

use async_trait::async_trait;
use twilight_http::error::ErrorType;
use twilight_http::request::channel::reaction::RequestReactionType;
use twilight_model::channel::message::AllowedMentions;
use twilight_model::http::attachment::Attachment;
use twilight_model::id::Id;
use twilight_model::id::marker::{ChannelMarker, MessageMarker};

use nanobot_proto::{OutboundKind, OutboundMessage};

use super::DiscordChannel;
use super::receive::{MAX_ATTACHMENT_BYTES, message_id_of};
use crate::channels::stream::Editor;
use crate::channels::{Progress, SendError};
use crate::render::measure::Limit;
use crate::render::message::split_message;

/// Replies mention nobody (the user being answered is not pinged).
static NO_PING: AllowedMentions = AllowedMentions {
    parse: Vec::new(),
    replied_user: false,
    roles: Vec::new(),
    users: Vec::new(),
};

/// Discord's message length limit, in characters (code points, as upstream counts).
pub(super) const MAX_MESSAGE_LEN: usize = 2000;
/// [`MAX_MESSAGE_LEN`] as the splitter counts it.
const LIMIT: Limit = Limit::code_points(MAX_MESSAGE_LEN);

/// Returns the text messages of a reply: `content` in chunks of at most [`MAX_MESSAGE_LEN`]
/// characters as upstream's `split_message` cuts them (cut between grapheme clusters); with no
/// text, the names of the files that could not be sent (as upstream). A blank reply is no
/// message (upstream sends it, and Discord refuses it).
pub(super) fn build_chunks(content: &str, failed: &[String], sent_media: bool) -> Vec<String> {
    let mut chunks = split(content);
    chunks.retain(|c| !crate::render::message::is_blank(c));
    if !chunks.is_empty() || failed.is_empty() || sent_media {
        return chunks;
    }
    let fallback: Vec<String> = failed
        .iter()
        .map(|name| format!("[attachment: {name} - send failed]"))
        .collect();
    split(&fallback.join("\n"))
}

fn split(text: &str) -> Vec<String> {
    split_message(text, LIMIT, |_, cut| cut)
}

/// Delivers one outbound message.
pub(super) async fn send(
    ch: &DiscordChannel,
    msg: &OutboundMessage,
    progress: &mut Progress,
) -> Result<(), SendError> {
    let channel: Id<ChannelMarker> = msg.chat_id.parse().map_err(|_| {
        SendError::Permanent(format!("chat id {:?} is not a channel id", msg.chat_id))
    })?;
    let kind = OutboundKind::try_from(msg.kind).unwrap_or(OutboundKind::Final);
    let last = matches!(kind, OutboundKind::Final | OutboundKind::Error);
    if last {
        ch.typing.stop(channel.get());
    }
    let mut reference = match last {
        true => message_id_of(&msg.reply_to).and_then(Id::<MessageMarker>::new_checked),
        false => None,
    };
    if last
        && ch.cfg.streaming
        && !msg.content.is_empty()
        && let Some(preview) = ch.streams.finish(msg).await?
    {
        return send_streamed(ch, channel, msg, &preview, progress).await;
    }
    let (failed, sent_media) = send_files(ch, channel, msg, 0, &mut reference, progress).await?;
    let chunks = build_chunks(&msg.content, &failed, sent_media);
    for (i, chunk) in chunks.iter().enumerate() {
        let part = msg.media.len() + i;
        if part < progress.done() {
            continue;
        }
        let reply = if i == 0 { reference } else { None };
        create(ch, channel, chunk, reply).await?;
        progress.part_done().await;
    }
    if last {
        clear_reaction(ch, channel, &msg.reply_to).await;
    }
    Ok(())
}

/// Sends the files of `msg` (part `first_part + i` is file `i`), the first a reply to
/// `reference` (then cleared); returns the names of the files not sent and whether any was.
async fn send_files(
    ch: &DiscordChannel,
    channel: Id<ChannelMarker>,
    msg: &OutboundMessage,
    first_part: usize,
    reference: &mut Option<Id<MessageMarker>>,
    progress: &mut Progress,
) -> Result<(Vec<String>, bool), SendError> {
    let mut failed = Vec::new();
    let mut sent_media = false;
    for (i, path) in msg.media.iter().enumerate() {
        if first_part + i < progress.done() {
            sent_media = true;
            *reference = None;
            continue;
        }
        let path = Path::new(path);
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        match read_file(path).await {
            Ok(bytes) => {
                let files = [Attachment::from_bytes(name.clone(), bytes, 0)];
                let mut request = ch.http.create_message(channel).attachments(&files);
                if let Some(reply) = *reference {
                    request = request
                        .reply(reply)
                        .fail_if_not_exists(false)
                        .allowed_mentions(Some(&NO_PING));
                }
                match request.await {
                    Ok(_) => {
                        sent_media = true;
                        *reference = None;
                    }
                    Err(e) => match classify(&e) {
                        retry @ SendError::Transient(_) => return Err(retry),
                        SendError::Permanent(why) => {
                            tracing::warn!(bot = %ch.bot_id, file = %name, error = %why, "discord file refused");
                            failed.push(name);
                        }
                    },
                }
            }
            Err(why) => {
                tracing::warn!(bot = %ch.bot_id, file = %name, error = %why, "discord file not sent");
                failed.push(name);
            }
        }
        progress.part_done().await;
    }
    Ok((failed, sent_media))
}

/// Finishes a streamed reply: the preview `preview` edited into the first chunk (posted anew
/// when Discord refuses the edit, e.g. the preview was deleted), the other chunks as new
/// messages, then the files. Parts: chunk `i` is part `i`, the files follow.
async fn send_streamed(
    ch: &DiscordChannel,
    channel: Id<ChannelMarker>,
    msg: &OutboundMessage,
    preview: &str,
    progress: &mut Progress,
) -> Result<(), SendError> {
    let chunks = build_chunks(&msg.content, &[], false);
    for (i, chunk) in chunks.iter().enumerate() {
        if i < progress.done() {
            continue;
        }
        let edited = match (i, preview.parse::<Id<MessageMarker>>()) {
            (0, Ok(id)) => match ch
                .http
                .update_message(channel, id)
                .content(Some(chunk))
                .await
            {
                Ok(_) => true,
                Err(e) => match classify(&e) {
                    retry @ SendError::Transient(_) => return Err(retry),
                    SendError::Permanent(why) => {
                        tracing::warn!(bot = %ch.bot_id, error = %why, "discord preview not edited; posting the reply");
                        false
                    }
                },
            },
            _ => false,
        };
        if !edited {
            create(ch, channel, chunk, None).await?;
        }
        progress.part_done().await;
    }
    send_files(ch, channel, msg, chunks.len(), &mut None, progress).await?;
    clear_reaction(ch, channel, &msg.reply_to).await;
    Ok(())
}

/// Posts `text`, as a reply to `reply` (without pinging its author) when set; returns
/// Discord's answer.
async fn create(
    ch: &DiscordChannel,
    channel: Id<ChannelMarker>,
    text: &str,
    reply: Option<Id<MessageMarker>>,
) -> Result<twilight_http::Response<twilight_model::channel::Message>, SendError> {
    let mut request = ch.http.create_message(channel).content(text);
    if let Some(reply) = reply {
        request = request
            .reply(reply)
            .fail_if_not_exists(false)
            .allowed_mentions(Some(&NO_PING));
    }
    request.await.map_err(|e| classify(&e))
}

#[async_trait]
impl Editor for DiscordChannel {
    async fn post_preview(&self, msg: &OutboundMessage, text: &str) -> Result<String, SendError> {
        let channel: Id<ChannelMarker> = msg
            .chat_id
            .parse()
            .map_err(|_| SendError::Permanent(format!("chat id {:?}", msg.chat_id)))?;
        // A reply to the user's message, as the final reply would be.
        let reply = message_id_of(&msg.reply_to).and_then(Id::<MessageMarker>::new_checked);
        let answer = create(self, channel, text, reply).await?;
        // Only the id is needed: read it without the whole message model.
        let body = answer
            .bytes()
            .await
            .map_err(|e| SendError::Transient(format!("discord answer unreadable: {e}")))?;
        serde_json::from_slice::<serde_json::Value>(&body)
            .ok()
            .and_then(|m| m["id"].as_str().map(str::to_string))
            .ok_or_else(|| SendError::Permanent("discord answered no message id".into()))
    }

    async fn edit(&self, msg: &OutboundMessage, id: &str, text: &str) -> Result<(), SendError> {
        let (Ok(channel), Ok(id)) = (
            msg.chat_id.parse::<Id<ChannelMarker>>(),
            id.parse::<Id<MessageMarker>>(),
        ) else {
            return Err(SendError::Permanent("not a discord message".into()));
        };
        self.http
            .update_message(channel, id)
            .content(Some(text))
            .await
            .map(drop)
            .map_err(|e| classify(&e))
    }

    fn first_chunk(&self, text: &str) -> String {
        build_chunks(text, &[], false)
            .into_iter()
            .next()
            .unwrap_or_default()
    }
}

/// Reads a file to attach, refusing what Discord would refuse anyway.
async fn read_file(path: &Path) -> Result<Vec<u8>, String> {
    let meta = tokio::fs::metadata(path)
        .await
        .map_err(|e| format!("file not found: {e}"))?;
    if meta.len() > MAX_ATTACHMENT_BYTES {
        return Err("file too large (>20MB)".into());
    }
    tokio::fs::read(path).await.map_err(|e| e.to_string())
}

/// Removes the read-receipt and working reactions from the answered message (best effort).
async fn clear_reaction(ch: &DiscordChannel, channel: Id<ChannelMarker>, reply_to: &str) {
    ch.working.stop(channel.get());
    let Some(message) = message_id_of(reply_to).and_then(Id::<MessageMarker>::new_checked) else {
        return;
    };
    for name in [&ch.cfg.read_receipt_emoji, &ch.cfg.working_emoji] {
        if name.is_empty() {
            continue;
        }
        let emoji = RequestReactionType::Unicode { name };
        if let Err(e) = ch
            .http
            .delete_current_user_reaction(channel, message, &emoji)
            .await
        {
            tracing::debug!(bot = %ch.bot_id, error = %e, "discord reaction removal failed");
        }
    }
}

/// Sorts a REST failure into retry-later and never-going-to-work.
fn classify(e: &twilight_http::Error) -> SendError {
    match e.kind() {
        ErrorType::Response { status, .. } if status.get() == 429 || status.is_server_error() => {
            SendError::Transient(format!("discord answered {}", status.get()))
        }
        ErrorType::Response { status, error, .. } => {
            SendError::Permanent(format!("discord answered {}: {error}", status.get()))
        }
        ErrorType::RequestCanceled | ErrorType::RequestError | ErrorType::RequestTimedOut => {
            SendError::Transient(e.to_string())
        }
        // A revoked token may be replaced by the operator: keep the reply until then.
        ErrorType::Unauthorized => SendError::Transient("discord rejected the bot token".into()),
        _ => SendError::Permanent(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_replies_split_under_discords_limit_and_failed_files_are_named() {
        let long = "word ".repeat(900);
        let chunks = build_chunks(&long, &[], false);
        assert_eq!(chunks.len(), 3);
        assert!(chunks.iter().all(|c| c.chars().count() <= MAX_MESSAGE_LEN));
        // As upstream: cut at the last line end, a fence left open (no closing added).
        let fenced = format!("```\n{}```", "第一行\n".repeat(600));
        let chunks = build_chunks(&fenced, &[], false);
        assert_eq!(chunks.len(), 2);
        assert!(chunks.iter().all(|c| c.chars().count() <= MAX_MESSAGE_LEN));
        assert_eq!(chunks.join("\n"), fenced);
        assert!(build_chunks(" \n ", &[], false).is_empty());
        assert_eq!(
            build_chunks("", &["a.png".into()], false),
            ["[attachment: a.png - send failed]"]
        );
        assert!(build_chunks("", &["a.png".into()], true).is_empty());
    }

    #[test]
    fn an_emoji_reply_splits_at_whole_families_within_2000_code_points() {
        let family = "👩\u{200d}👩\u{200d}👧\u{200d}👦";
        let reply = format!("{}{}", family.repeat(300), "🇨🇳e\u{301}".repeat(400));
        let chunks = build_chunks(&reply, &[], false);
        let lens: Vec<usize> = chunks.iter().map(|c| c.chars().count()).collect();
        assert_eq!(lens, [1995, 1705]);
        assert_eq!(chunks.concat(), reply);
        // A preview of a family still arriving shows only the families already whole.
        let streamed = format!("Hi {}", &family[..family.len() - 4]);
        let preview = build_chunks(crate::render::measure::settled(&streamed), &[], false);
        assert_eq!(preview, ["Hi "]);
    }
}
