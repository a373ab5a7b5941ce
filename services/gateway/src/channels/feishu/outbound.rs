//! Sending, as 0.3.5: the text in chunks of at most [`MAX_CONTENT_BYTES`] (Feishu limits a card
//! to 30 KB of JSON, counted in bytes), all in the one type [`format_of`] picks for the reply
//! (`text`, `post` or a markdown card); then each file (images through `/im/v1/images`, others
//! through `/im/v1/files`). Every part carries a `uuid` made of the delivery id and the part's
//! number: Feishu posts at most one message per uuid within an hour, so a redelivery after a
//! replica died between Feishu's answer and the recorded progress does not post the part twice.
//! A message inside a group topic is answered with the reply API (so the answer stays in the
//! topic); with `replyToMessage`, the first part quotes the user's message. A final reply swaps
//! the receipt reaction for `doneEmoji` ([`reaction`](super::reaction)). With `streaming`, the
//! preview card is updated in place (`PATCH /im/v1/messages/{id}`) and a final reply edits it
//! into its first chunk.

use std::path::Path;

use async_trait::async_trait;
use reqwest::Method;
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};

use nanobot_proto::{OutboundKind, OutboundMessage, keys};
use redis::AsyncCommands as _;

use super::FeishuChannel;
use super::api::ApiError;
use super::format::tool_hint;
use super::receive::topic_mark;
use super::render::{MAX_CONTENT_BYTES, card_of, format_of, messages_of, split_within_bytes};
use crate::channels::media;
use crate::channels::stream::Editor;
use crate::channels::{Progress, SendError};

const IMAGE_EXTS: &[&str] = &[
    "png", "jpg", "jpeg", "gif", "bmp", "webp", "ico", "tiff", "tif",
];

/// Delivers one outbound message; parts are the text chunks, then the files.
pub(super) async fn send(
    ch: &FeishuChannel,
    msg: &OutboundMessage,
    progress: &mut Progress,
) -> Result<(), SendError> {
    let kind = OutboundKind::try_from(msg.kind).unwrap_or(OutboundKind::Final);
    let chunks = match kind {
        OutboundKind::ToolHint => {
            let hint = tool_hint(msg.content.trim(), &ch.cfg.tool_hint_prefix);
            [hint].into_iter().filter(|h| !h.is_empty()).collect()
        }
        _ => split_within_bytes(&msg.content, MAX_CONTENT_BYTES),
    };
    let last = matches!(kind, OutboundKind::Final | OutboundKind::Error);
    // One type for the whole reply, as 0.3.5 picks it (a long reply is all cards).
    let format = format_of(&msg.content);
    let parts: Vec<(&str, String)> = match kind {
        // As 0.3.5: a card of one markdown element, the prefix before each call.
        OutboundKind::ToolHint => chunks
            .iter()
            .map(|hint| ("interactive", card_of(hint).to_string()))
            .collect(),
        _ => chunks
            .iter()
            .flat_map(|chunk| messages_of(format, chunk))
            .collect(),
    };
    if ch.cfg.streaming
        && last
        && let (Some(chunk), Some((msg_type, content))) = (chunks.first(), parts.first())
        && let Some(id) = ch.streams.finish(msg).await?
        && progress.done() == 0
    {
        let card = match *msg_type {
            "interactive" => content.clone(),
            _ => card_of(chunk).to_string(),
        };
        match patch_content(ch, &id, &card).await {
            Ok(_) => {}
            Err(e) if e.is_transient() => return Err(classify(e)),
            Err(e) => {
                tracing::warn!(bot = %ch.bot_id, error = %e, "feishu streaming card not updated; posting the reply");
                create(ch, msg, 0, "interactive", card)
                    .await
                    .map_err(classify)?;
            }
        }
        progress.part_done().await;
    }
    for (i, (msg_type, content)) in parts.iter().enumerate() {
        if i < progress.done() {
            continue;
        }
        create(ch, msg, i, msg_type, content.clone())
            .await
            .map_err(classify)?;
        progress.part_done().await;
    }
    for (i, path) in msg.media.iter().enumerate() {
        let part = parts.len() + i;
        if part < progress.done() {
            continue;
        }
        if let Err(e) = send_file(ch, msg, part, Path::new(path)).await {
            if e.is_transient() {
                return Err(classify(e));
            }
            tracing::warn!(bot = %ch.bot_id, error = %e, "feishu file not sent");
            let name = Path::new(path)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            post_text(ch, msg, part, &format!("[Failed to send: {name}]"))
                .await
                .map_err(classify)?;
        }
        progress.part_done().await;
    }
    if last {
        super::reaction::done(ch, message_of(&msg.reply_to)).await;
    }
    Ok(())
}

/// Returns the Feishu message id an inbound id `feishu:{message_id}` names.
fn message_of(reply_to: &str) -> &str {
    reply_to.strip_prefix("feishu:").unwrap_or_default()
}

/// The idempotency key of part `part` of delivery `id` (Feishu allows 50 characters).
fn uuid_of(id: &str, part: usize) -> String {
    let digest = hex::encode(Sha256::digest(id.as_bytes()));
    format!("{}-{part}", &digest[..40])
}

/// Posts a short text as part `part` of `msg`.
async fn post_text(
    ch: &FeishuChannel,
    msg: &OutboundMessage,
    part: usize,
    text: &str,
) -> Result<Value, ApiError> {
    let content = json!({"text": text}).to_string();
    create(ch, msg, part, "text", content).await
}

async fn create(
    ch: &FeishuChannel,
    msg: &OutboundMessage,
    part: usize,
    msg_type: &str,
    content: String,
) -> Result<Value, ApiError> {
    let uuid = uuid_of(&msg.id, part);
    let quoted = message_of(&msg.reply_to);
    // Inside a topic every part is a reply (Feishu keeps it in the topic), as 0.3.5.
    if !quoted.is_empty()
        && ((ch.cfg.reply_to_message && part == 0) || in_topic(ch, quoted).await?)
    {
        let path = format!("/open-apis/im/v1/messages/{}/reply", media::safe_id(quoted));
        let body = json!({"msg_type": msg_type, "content": content, "uuid": uuid});
        match ch.api.call(Method::POST, &path, Some(&body)).await {
            Ok(v) => return Ok(v),
            Err(e) if e.is_transient() => return Err(e),
            Err(e) => {
                tracing::debug!(bot = %ch.bot_id, error = %e, "feishu reply failed; sending a new message")
            }
        }
    }
    let id_type = if msg.chat_id.starts_with("oc_") {
        "chat_id"
    } else {
        "open_id"
    };
    let path = format!("/open-apis/im/v1/messages?receive_id_type={id_type}");
    let body = json!({"receive_id": msg.chat_id, "msg_type": msg_type, "content": content,
        "uuid": uuid});
    ch.api.call(Method::POST, &path, Some(&body)).await
}

/// Whether Feishu message `message_id` was sent inside a group topic ([`topic_mark`]).
async fn in_topic(ch: &FeishuChannel, message_id: &str) -> Result<bool, ApiError> {
    let key = keys::channel_state(&ch.bot_id, super::CHANNEL, &topic_mark(message_id));
    let mut conn = ch.redis.clone();
    conn.exists(&key).await.map_err(|e| ApiError::Network {
        path: "redis topic mark".into(),
        error: e.to_string(),
    })
}

/// Replaces message `id`'s card with a card of `markdown`.
async fn patch_card(ch: &FeishuChannel, id: &str, markdown: &str) -> Result<Value, ApiError> {
    patch_content(ch, id, &card_of(markdown).to_string()).await
}

/// Replaces the card of message `id` with `card` (its JSON).
async fn patch_content(ch: &FeishuChannel, id: &str, card: &str) -> Result<Value, ApiError> {
    let path = format!("/open-apis/im/v1/messages/{}", media::safe_id(id));
    let body = json!({"content": card});
    ch.api.call(Method::PATCH, &path, Some(&body)).await
}

/// Uploads one file and sends it as part `part`: an image by its extension, else a file.
async fn send_file(
    ch: &FeishuChannel,
    msg: &OutboundMessage,
    part: usize,
    path: &Path,
) -> Result<(), ApiError> {
    let unreadable = |e: std::io::Error| ApiError::Feishu {
        path: "file upload".into(),
        code: -1,
        msg: format!("unreadable file: {}", e.kind()),
    };
    let bytes = tokio::fs::read(path).await.map_err(unreadable)?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "file".into());
    let ext = path
        .extension()
        .map(|e| e.to_string_lossy().to_lowercase())
        .unwrap_or_default();
    let file = reqwest::multipart::Part::bytes(bytes).file_name(name.clone());
    let (msg_type, content) = if IMAGE_EXTS.contains(&ext.as_str()) {
        let form = reqwest::multipart::Form::new()
            .text("image_type", "message")
            .part("image", file);
        let up = ch.api.upload("/open-apis/im/v1/images", form).await?;
        let key = up["data"]["image_key"].as_str().unwrap_or_default();
        ("image", json!({"image_key": key}).to_string())
    } else {
        let (file_type, msg_type) = match ext.as_str() {
            "opus" => ("opus", "audio"),
            "mp4" => ("mp4", "media"),
            "pdf" => ("pdf", "file"),
            "doc" | "docx" => ("doc", "file"),
            "xls" | "xlsx" => ("xls", "file"),
            "ppt" | "pptx" => ("ppt", "file"),
            _ => ("stream", "file"),
        };
        let form = reqwest::multipart::Form::new()
            .text("file_type", file_type)
            .text("file_name", name)
            .part("file", file);
        let up = ch.api.upload("/open-apis/im/v1/files", form).await?;
        let key = up["data"]["file_key"].as_str().unwrap_or_default();
        (msg_type, json!({"file_key": key}).to_string())
    };
    create(ch, msg, part, msg_type, content).await.map(drop)
}

#[async_trait]
impl Editor for FeishuChannel {
    async fn post_preview(&self, msg: &OutboundMessage, text: &str) -> Result<String, SendError> {
        let content = card_of(text).to_string();
        // A preview is never retried under the same uuid: it has no delivery id of its own.
        let preview = OutboundMessage {
            id: format!("preview:{}", msg.reply_to),
            ..msg.clone()
        };
        let posted = create(self, &preview, 0, "interactive", content)
            .await
            .map_err(classify)?;
        posted["data"]["message_id"]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| SendError::Permanent("feishu answered no message_id".into()))
    }

    async fn edit(&self, _msg: &OutboundMessage, id: &str, text: &str) -> Result<(), SendError> {
        patch_card(self, id, text).await.map(drop).map_err(classify)
    }

    fn first_chunk(&self, text: &str) -> String {
        split_within_bytes(text, MAX_CONTENT_BYTES)
            .into_iter()
            .next()
            .unwrap_or_default()
    }
}

/// Maps a failed call to redeliver-later or give-up.
fn classify(e: ApiError) -> SendError {
    match e.is_transient() {
        true => SendError::Transient(e.to_string()),
        false => SendError::Permanent(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_part_has_one_uuid_per_delivery_and_index_within_feishus_50_characters() {
        let a = uuid_of("out-1", 0);
        assert_eq!(a, uuid_of("out-1", 0));
        assert_ne!(a, uuid_of("out-1", 1));
        assert_ne!(a, uuid_of("out-2", 0));
        assert!(uuid_of("x", 12345).len() <= 50);
        assert_eq!(message_of("feishu:om_1"), "om_1");
    }
}
