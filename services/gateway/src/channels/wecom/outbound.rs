//! Sending a reply over the long connection (only the replica holding it can): its files
//! first, uploaded ([`upload`]) and sent as media messages (one that cannot be uploaded is named
//! in the text, `[file upload failed: name]`, as 0.3.5), then the text in
//! parts of at most 20,480 UTF-8 bytes (WeCom's limit for a stream or markdown message), cut
//! between graphemes. Each part answers the user's message as a finished stream message
//! (markdown) under its `req_id`; with no message to answer (a cron job's push) or when WeCom
//! refuses the answer (its `req_id` expired), the part is pushed to the chat as markdown
//! (`aibot_send_msg`), as 0.3.5.
//!
//! Each part's stream id is derived from the delivery id and the part's index: a part sent
//! again by a redelivery (the replica died after WeCom accepted it, before the record was
//! written) replaces the message it already showed rather than adding a second one.
//! Progress messages are finished streams too (0.3.5 leaves them open, which keeps WeCom's
//! "typing" indicator on a message that never completes until its 6-minute timeout).

use std::path::Path;

use serde::Deserialize;
use serde_json::{Value, json};

use nanobot_proto::OutboundMessage;
use redis::AsyncCommands as _;

use super::frame;
use super::link::{Link, LinkError};
use super::receive::reply_key;
use super::{CHANNEL, WeComChannel, upload};
use crate::channels::{Progress, SendError};
use crate::render::measure::Limit;
use crate::render::split::split_markdown;

/// WeCom's longest stream or markdown message, in UTF-8 bytes.
pub(super) const MAX_BYTES: usize = 20_480;

/// What the receiver kept of the message being answered.
#[derive(Debug, Deserialize)]
struct Reply {
    req_id: String,
    chat_id: String,
}

/// Delivers one outbound message: its files (uploaded), then its text in parts.
pub(super) async fn send(
    ch: &WeComChannel,
    msg: &OutboundMessage,
    progress: &mut Progress,
) -> Result<(), SendError> {
    if msg.content.trim().is_empty() && msg.media.is_empty() {
        return Ok(());
    }
    let Some(link) = ch.link() else {
        return Err(SendError::Transient(
            "this replica does not hold the WeCom connection".into(),
        ));
    };
    let reply = reply_of(ch, &msg.reply_to).await?;
    let mut notes = String::new();
    for path in msg.media.iter().skip(progress.done()) {
        match upload::upload(&link, Path::new(path)).await {
            Ok(up) => {
                let chat = reply
                    .as_ref()
                    .map_or(msg.chat_id.as_str(), |r| r.chat_id.as_str());
                let mut push = up.body();
                push["chatid"] = json!(chat);
                send_part(ch, &link, reply.as_ref(), up.body(), push).await?;
            }
            Err(e) if is_link_down(&e) => return Err(SendError::Transient(format!("{e:#}"))),
            Err(e) => {
                let name = Path::new(path)
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                tracing::warn!(bot = %ch.bot_id, file = %name, error = format!("{e:#}"), "wecom file upload failed");
                notes.push_str(&format!("\n[file upload failed: {name}]"));
            }
        }
        progress.part_done().await;
    }
    let content = format!("{}{notes}", msg.content.trim());
    let content = content.trim();
    let parts = if content.is_empty() {
        Vec::new()
    } else {
        split(content)
    };
    let files = msg.media.len();
    let stream_base = super::token_id(&msg.id);
    for (i, part) in parts.iter().enumerate() {
        if files + i < progress.done() {
            continue;
        }
        let stream_id = format!("nb{stream_base}{i}");
        let chat = reply
            .as_ref()
            .map_or(msg.chat_id.as_str(), |r| r.chat_id.as_str());
        let answer = frame::stream(&stream_id, part, true);
        send_part(
            ch,
            &link,
            reply.as_ref(),
            answer,
            frame::markdown_to(chat, part),
        )
        .await?;
        progress.part_done().await;
    }
    tracing::debug!(bot = %ch.bot_id, chat = %msg.chat_id, files, parts = parts.len(), "wecom reply sent");
    Ok(())
}

/// Returns whether an upload failed because the connection did (worth retrying whole).
fn is_link_down(e: &anyhow::Error) -> bool {
    matches!(
        e.downcast_ref::<LinkError>(),
        Some(LinkError::Closed | LinkError::Timeout(_))
    )
}

/// Splits `content` into WeCom-sized parts.
pub(super) fn split(content: &str) -> Vec<String> {
    split_markdown(content, Limit::utf8_bytes(MAX_BYTES))
}

/// Returns the `req_id` and chat of the message `reply_to` answers, when still known.
async fn reply_of(ch: &WeComChannel, reply_to: &str) -> Result<Option<Reply>, SendError> {
    let Some(msg_id) = reply_to.strip_prefix(&format!("{CHANNEL}:")) else {
        return Ok(None);
    };
    let mut conn = ch.redis.clone();
    let kept: Option<String> = conn
        .get(reply_key(ch, msg_id))
        .await
        .map_err(|e| SendError::Transient(format!("read the reply's req_id: {e}")))?;
    Ok(kept.and_then(|k| serde_json::from_str(&k).ok()))
}

/// Sends `answer` as the reply to the user's message, or `push` to the chat when there is
/// none or WeCom refuses the answer.
async fn send_part(
    ch: &WeComChannel,
    link: &Link,
    reply: Option<&Reply>,
    answer: Value,
    push: Value,
) -> Result<(), SendError> {
    if let Some(reply) = reply {
        match link.request(frame::RESPOND, &reply.req_id, answer).await {
            Ok(_) => return Ok(()),
            Err(LinkError::Refused { code, msg: why }) => {
                tracing::info!(bot = %ch.bot_id, code, reason = %why, "wecom refused the answer; pushing it to the chat instead");
            }
            Err(e) => return Err(SendError::Transient(e.to_string())),
        }
    }
    let req_id = format!("{}_{}", frame::SEND, uuid::Uuid::new_v4().simple());
    match link.request(frame::SEND, &req_id, push).await {
        Ok(_) => Ok(()),
        Err(e @ LinkError::Refused { .. }) => Err(SendError::Permanent(e.to_string())),
        Err(e) => Err(SendError::Transient(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_reply_is_cut_at_20480_utf8_bytes_between_graphemes() {
        let family = "👩\u{200d}👩\u{200d}👧\u{200d}👦";
        let text = format!("{}{family}{}", "中".repeat(6_826), "文😀".repeat(3_000));
        let parts = split(&text);
        assert!(parts.len() >= 2, "{}", parts.len());
        assert!(
            parts.iter().all(|p| p.len() <= MAX_BYTES),
            "{:?}",
            parts.iter().map(String::len).collect::<Vec<_>>()
        );
        assert_eq!(
            parts.concat(),
            text,
            "nothing lost, nothing cut inside a character"
        );
        assert!(
            parts.iter().filter(|p| p.contains(family)).count() == 1,
            "the ZWJ family stays whole"
        );
        assert_eq!(split("你好 👋"), vec!["你好 👋".to_string()]);
    }
}
