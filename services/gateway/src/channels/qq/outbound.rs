//! Sending, as 0.3.5's `send`: each file uploaded (`POST /v2/{users|groups}/{id}/files`,
//! base64, image type 1 else file type 4) and sent as a media message (msg_type 7), a file
//! that cannot be sent named in `[Attachment send failed: name]`; then the text, trimmed, as
//! plain text (msg_type 0) or markdown (msg_type 2), split at [`MAX_TEXT_CHARS`] characters
//! between graphemes. A reply to a user's message carries its `msg_id` and one `msg_seq` per
//! part, kept across redeliveries ([`seq`]), so a part QQ already accepted is refused as a
//! duplicate and counted as sent. Network failures, 5xx and 429 are retried by redelivery;
//! other refusals drop the message.

use std::path::Path;

use base64::Engine as _;
use redis::AsyncCommands as _;
use serde_json::{Value, json};

use nanobot_proto::OutboundMessage;

use super::api::ApiError;
use super::receive::{chat_kind_key, message_id_of};
use super::{QqChannel, seq};
use crate::channels::{Progress, SendError};
use crate::render::measure::Limit;
use crate::render::split::split_markdown;

/// Longest text part, in characters (code points). QQ publishes no limit for C2C and group
/// messages and refuses an over-long one (40054007); 2,000 keeps each part well inside what
/// clients show, and a reply rarely needs more than QQ's five replies per message.
pub(super) const MAX_TEXT_CHARS: usize = 2000;
/// Largest file sent (base64 in a JSON body).
const MAX_UPLOAD_BYTES: u64 = 20 * 1024 * 1024;

/// Returns the text parts of a reply: trimmed, split at [`MAX_TEXT_CHARS`] characters without
/// cutting a grapheme.
pub(super) fn text_parts(content: &str) -> Vec<String> {
    split_markdown(content.trim(), Limit::code_points(MAX_TEXT_CHARS))
}

/// Returns the message path of a chat.
fn messages_path(chat: &str, group: bool) -> String {
    match group {
        true => format!("/v2/groups/{chat}/messages"),
        false => format!("/v2/users/{chat}/messages"),
    }
}

/// Returns the body of a text message (`msg_id` and `msg_seq` added by [`post`]).
fn text_body(markdown: bool, text: &str) -> Value {
    match markdown {
        true => json!({"msg_type": 2, "markdown": {"content": text}}),
        false => json!({"msg_type": 0, "content": text}),
    }
}

/// Sends one text reply to `msg_id` as the part named `part` (its `msg_seq` kept in Redis).
pub(super) async fn reply_text(
    ch: &QqChannel,
    chat: &str,
    group: bool,
    msg_id: &str,
    part: &str,
    text: &str,
) -> Result<(), SendError> {
    let body = text_body(ch.cfg.markdown(), text);
    post(ch, chat, group, Some(msg_id), part, body).await
}

/// Posts one message; with `msg_id`, as a passive reply with the part's `msg_seq`, a
/// duplicate refusal counting as sent.
async fn post(
    ch: &QqChannel,
    chat: &str,
    group: bool,
    msg_id: Option<&str>,
    part: &str,
    mut body: Value,
) -> Result<(), SendError> {
    if let Some(msg_id) = msg_id {
        let n = seq::of(&ch.redis, &ch.bot_id, msg_id, part)
            .await
            .map_err(|e| SendError::Transient(format!("msg_seq: {e:#}")))?;
        body["msg_id"] = json!(msg_id);
        body["msg_seq"] = json!(n);
    }
    match ch.api.post(&messages_path(chat, group), &body).await {
        Ok(_) => Ok(()),
        Err(e) if e.code() == seq::DUPLICATE => {
            tracing::info!(bot = %ch.bot_id, part, "qq reply part already accepted; not sent again");
            Ok(())
        }
        Err(e) => Err(send_error(e)),
    }
}

fn send_error(e: ApiError) -> SendError {
    match e {
        ApiError::Transient(m) => SendError::Transient(m),
        e => SendError::Permanent(e.to_string()),
    }
}

/// Delivers one outbound message: files, then text parts; part `i` is skipped when
/// `progress` says it was accepted earlier.
pub(super) async fn send(
    ch: &QqChannel,
    msg: &OutboundMessage,
    progress: &mut Progress,
) -> Result<(), SendError> {
    let chat = msg.chat_id.as_str();
    if chat.is_empty() || chat.contains('/') {
        return Err(SendError::Permanent(format!(
            "chat id {chat:?} is not an openid"
        )));
    }
    let mut conn = ch.redis.clone();
    let kind: Option<String> = conn
        .get(chat_kind_key(&ch.bot_id, chat))
        .await
        .map_err(|e| SendError::Transient(format!("chat kind: {e}")))?;
    let group = kind.as_deref() == Some("group");
    let msg_id = message_id_of(&msg.reply_to);
    let mut failed = Vec::new();
    for (i, file) in msg.media.iter().enumerate() {
        if i < progress.done() {
            continue;
        }
        let part = format!("{}:{i}", msg.id);
        if let Err(e) = send_file(ch, chat, group, msg_id, &part, Path::new(file)).await {
            if matches!(e, SendError::Transient(_)) {
                return Err(e);
            }
            tracing::warn!(bot = %ch.bot_id, error = %e, "qq file not sent");
            failed.push(file_name(Path::new(file)));
        }
        progress.part_done().await;
    }
    let failed_notes = failed
        .iter()
        .map(|name| format!("[Attachment send failed: {name}]"));
    let texts: Vec<String> = failed_notes.chain(text_parts(&msg.content)).collect();
    for (j, text) in texts.iter().enumerate() {
        let i = msg.media.len() + j;
        if i < progress.done() {
            continue;
        }
        let body = text_body(ch.cfg.markdown(), text);
        post(ch, chat, group, msg_id, &format!("{}:{i}", msg.id), body).await?;
        progress.part_done().await;
    }
    Ok(())
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "file".into())
}

/// Uploads a file and sends it as a media message.
async fn send_file(
    ch: &QqChannel,
    chat: &str,
    group: bool,
    msg_id: Option<&str>,
    part: &str,
    path: &Path,
) -> Result<(), SendError> {
    let name = file_name(path);
    let meta = tokio::fs::metadata(path)
        .await
        .map_err(|e| SendError::Permanent(format!("{name}: {e}")))?;
    if meta.len() > MAX_UPLOAD_BYTES {
        return Err(SendError::Permanent(format!(
            "{name}: larger than {MAX_UPLOAD_BYTES} bytes"
        )));
    }
    let bytes = tokio::fs::read(path)
        .await
        .map_err(|e| SendError::Permanent(format!("{name}: {e}")))?;
    let image = mime_guess::from_path(path)
        .first()
        .is_some_and(|m| m.type_() == mime_guess::mime::IMAGE);
    let mut upload = json!({
        "file_type": if image { 1 } else { 4 },
        "file_data": base64::engine::general_purpose::STANDARD.encode(&bytes),
        "srv_send_msg": false,
    });
    // A file name makes QQ show an image as a file, so images go without one (as 0.3.5).
    if !image {
        upload["file_name"] = json!(name);
    }
    let files = match group {
        true => format!("/v2/groups/{chat}/files"),
        false => format!("/v2/users/{chat}/files"),
    };
    let uploaded = ch.api.post(&files, &upload).await.map_err(send_error)?;
    let Some(file_info) = uploaded.get("file_info").cloned() else {
        return Err(SendError::Permanent(format!(
            "{name}: upload answered no file_info"
        )));
    };
    let body = json!({"msg_type": 7, "media": {"file_info": file_info}});
    post(ch, chat, group, msg_id, part, body).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cjk_and_emoji_reply_splits_at_whole_graphemes_within_2000_characters() {
        let family = "👩\u{200d}👩\u{200d}👧\u{200d}👦";
        let reply = format!("{}{}", "你好世界".repeat(450), family.repeat(100));
        let parts = text_parts(&format!("  {reply}\n"));
        assert!(parts.len() >= 2, "{}", parts.len());
        for p in &parts {
            assert!(p.chars().count() <= MAX_TEXT_CHARS, "{}", p.chars().count());
        }
        assert_eq!(parts.concat(), reply, "nothing lost, trimmed as 0.3.5");
        assert!(
            parts[1..].iter().all(|p| p.starts_with(family)),
            "{:?}",
            &parts[1][..30]
        );
    }

    #[test]
    fn markdown_and_plain_bodies_use_msg_type_2_and_0() {
        assert_eq!(
            text_body(false, "你好"),
            json!({"msg_type": 0, "content": "你好"})
        );
        assert_eq!(
            text_body(true, "**粗**"),
            json!({"msg_type": 2, "markdown": {"content": "**粗**"}})
        );
        assert_eq!(messages_path("G", true), "/v2/groups/G/messages");
        assert_eq!(messages_path("U", false), "/v2/users/U/messages");
    }
}
