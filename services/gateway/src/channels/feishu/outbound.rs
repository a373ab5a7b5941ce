//! Sending, as 0.3.5: the text in chunks of at most [`MAX_CONTENT_BYTES`] (Feishu limits a card
//! to 30 KB of JSON, counted in bytes), each as `text`, `post` or a markdown card as
//! [`format_of`] picks; then each file (images through `/im/v1/images`, others through
//! `/im/v1/files`). Every part carries a `uuid` made of the delivery id and the part's number:
//! Feishu posts at most one message per uuid within an hour, so a redelivery after a replica
//! died between Feishu's answer and the recorded progress does not post the part twice. With
//! `replyToMessage`, the first part quotes the user's message. A final reply adds `doneEmoji`
//! to the answered message. With `streaming`, the preview card is updated in place
//! (`PATCH /im/v1/messages/{id}`) and a final reply edits it into its first chunk.

use std::path::Path;

use async_trait::async_trait;
use reqwest::Method;
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};

use nanobot_proto::{OutboundKind, OutboundMessage, keys};
use redis::AsyncCommands as _;

use super::FeishuChannel;
use super::api::ApiError;
use super::receive::topic_mark;
use crate::channels::media;
use crate::channels::stream::Editor;
use crate::channels::{Progress, SendError};
use crate::render::measure::Limit;
use crate::render::split::split_markdown;

/// Most bytes of one chunk's JSON-escaped text (a card may be 30 KB; the rest is its frame).
pub const MAX_CONTENT_BYTES: usize = 28_000;
/// Plain text this short (in characters) goes as a `text` message (0.3.5's `_TEXT_MAX_LEN`).
const TEXT_MAX_CHARS: usize = 200;
/// Longer than this (in characters) always goes as a card (0.3.5's `_POST_MAX_LEN`).
const POST_MAX_CHARS: usize = 2000;
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
        OutboundKind::ToolHint => vec![format!(
            "{} {}",
            ch.cfg.tool_hint_prefix,
            msg.content.trim()
        )],
        _ => split_within_bytes(&msg.content, MAX_CONTENT_BYTES),
    };
    let last = matches!(kind, OutboundKind::Final | OutboundKind::Error);
    if ch.cfg.streaming
        && last
        && let Some(first) = chunks.first()
        && let Some(id) = ch.streams.finish(msg).await?
        && progress.done() == 0
    {
        match patch_card(ch, &id, first).await {
            Ok(_) => {}
            Err(e) if e.is_transient() => return Err(classify(e)),
            Err(e) => {
                tracing::warn!(bot = %ch.bot_id, error = %e, "feishu streaming card not updated; posting the reply");
                post(ch, msg, 0, "interactive", first)
                    .await
                    .map_err(classify)?;
            }
        }
        progress.part_done().await;
    }
    // One type for the whole reply, as 0.3.5 picks it (a long reply is all cards).
    let format = match kind {
        OutboundKind::ToolHint => "text",
        _ => format_of(&msg.content),
    };
    for (i, chunk) in chunks.iter().enumerate() {
        if i < progress.done() {
            continue;
        }
        post(ch, msg, i, format, chunk).await.map_err(classify)?;
        progress.part_done().await;
    }
    for (i, path) in msg.media.iter().enumerate() {
        let part = chunks.len() + i;
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
            post(ch, msg, part, "text", &format!("[Failed to send: {name}]"))
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

/// Returns `text` in chunks whose JSON-escaped UTF-8 is at most `max_bytes`, cut as
/// [`split_markdown`] cuts (between grapheme clusters, fences balanced).
pub fn split_within_bytes(text: &str, max_bytes: usize) -> Vec<String> {
    let mut out = Vec::new();
    for chunk in split_markdown(text, Limit::code_points(max_bytes)) {
        split_chunk(chunk, max_bytes, &mut out);
    }
    out
}

fn split_chunk(chunk: String, max_bytes: usize, out: &mut Vec<String>) {
    let bytes = escaped_len(&chunk);
    let chars = chunk.chars().count();
    if bytes <= max_bytes || chars <= 1 {
        out.push(chunk);
        return;
    }
    // Fewer characters in proportion to the overshoot; strictly fewer, so this ends.
    let fewer = (chars * max_bytes / bytes).clamp(1, chars - 1);
    for piece in split_markdown(&chunk, Limit::code_points(fewer)) {
        split_chunk(piece, max_bytes, out);
    }
}

/// Bytes of `text` inside a JSON string.
fn escaped_len(text: &str) -> usize {
    serde_json::to_string(text).map_or(text.len(), |s| s.len() - 2)
}

/// Which message type 0.3.5 picks for `content`: `text`, `post` or `interactive`.
pub(super) fn format_of(content: &str) -> &'static str {
    let s = content.trim();
    let lines = || s.lines().map(str::trim_start);
    let complex = s.contains("```")
        || lines().any(|l| {
            let hashes = l.chars().take_while(|c| *c == '#').count();
            (1..=6).contains(&hashes) && l[hashes..].starts_with(' ')
        })
        || lines().any(|l| l.starts_with('|') && l.contains("---"));
    let emphasis = ["**", "__", "~~"].iter().any(|m| s.contains(m));
    let list = lines().any(|l| {
        let digits = l.chars().take_while(char::is_ascii_digit).count();
        ["- ", "* ", "+ "].iter().any(|p| l.starts_with(p))
            || (digits > 0 && l[digits..].starts_with(". "))
    });
    let chars = s.chars().count();
    if complex || chars > POST_MAX_CHARS || emphasis || list {
        "interactive"
    } else if has_link(s) {
        "post"
    } else if chars <= TEXT_MAX_CHARS {
        "text"
    } else {
        "post"
    }
}

fn has_link(s: &str) -> bool {
    s.find('[').is_some_and(|at| {
        s[at..]
            .find("](")
            .is_some_and(|m| s[at + m..].contains(')'))
    })
}

/// Returns `(msg_type, content)` of one chunk sent as `format` ([`format_of`]).
pub(super) fn content_of(format: &str, chunk: &str) -> (&'static str, String) {
    match format {
        "text" => ("text", json!({"text": chunk.trim()}).to_string()),
        "post" => ("post", post_of(chunk).to_string()),
        _ => ("interactive", card_of(chunk).to_string()),
    }
}

/// A markdown card (updatable, so a streaming preview can become the reply).
pub(super) fn card_of(markdown: &str) -> Value {
    json!({"config": {"wide_screen_mode": true, "update_multi": true},
        "elements": [{"tag": "markdown", "content": markdown}]})
}

/// A rich-text post: one paragraph per line, `[text](url)` as links, the rest as text.
fn post_of(content: &str) -> Value {
    let paragraphs: Vec<Value> = content
        .trim()
        .lines()
        .map(|line| {
            let mut els = Vec::new();
            let mut rest = line;
            while let Some((before, text, href, after)) = next_link(rest) {
                if !before.is_empty() {
                    els.push(json!({"tag": "text", "text": before}));
                }
                els.push(json!({"tag": "a", "text": text, "href": href}));
                rest = after;
            }
            if !rest.is_empty() || els.is_empty() {
                els.push(json!({"tag": "text", "text": rest}));
            }
            Value::Array(els)
        })
        .collect();
    json!({"zh_cn": {"content": paragraphs}})
}

/// Splits `s` around its first `[text](url)`.
fn next_link(s: &str) -> Option<(&str, &str, &str, &str)> {
    let open = s.find('[')?;
    let mid = open + s[open..].find("](")?;
    let close = mid + 2 + s[mid + 2..].find(')')?;
    let text = &s[open + 1..mid];
    let href = &s[mid + 2..close];
    if text.contains('[') || href.contains(char::is_whitespace) || href.is_empty() {
        return None;
    }
    Some((&s[..open], text, href, &s[close + 1..]))
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

/// Posts one chunk as part `part` of `msg` in `format` (the first quoting the user with
/// `replyToMessage`).
async fn post(
    ch: &FeishuChannel,
    msg: &OutboundMessage,
    part: usize,
    format: &str,
    chunk: &str,
) -> Result<Value, ApiError> {
    let (msg_type, content) = content_of(format, chunk);
    create(ch, msg, part, msg_type, content).await
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
    let path = format!("/open-apis/im/v1/messages/{}", media::safe_id(id));
    let body = json!({"content": card_of(markdown).to_string()});
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
    fn chunks_stay_within_the_byte_limit_and_never_cut_a_character_or_grapheme() {
        let family = "👩‍👩‍👧‍👦";
        let text = format!("{}\n{}", "飞书消息测试。".repeat(3000), family.repeat(2000));
        let chunks = split_within_bytes(&text, MAX_CONTENT_BYTES);
        assert!(chunks.len() >= 3, "{}", chunks.len());
        for c in &chunks {
            assert!(escaped_len(c) <= MAX_CONTENT_BYTES, "{}", escaped_len(c));
            assert!(
                !c.starts_with('\u{200d}') && !c.ends_with('\u{200d}'),
                "a ZWJ family was cut"
            );
        }
        let joined: String = chunks.concat();
        assert_eq!(
            joined.replace(char::is_whitespace, ""),
            text.replace(char::is_whitespace, "")
        );
        // Escapes count: a text of quotes needs twice its length in the JSON.
        let quotes = "\"".repeat(100);
        assert!(
            split_within_bytes(&quotes, 60)
                .iter()
                .all(|c| escaped_len(c) <= 60)
        );
        assert_eq!(split_within_bytes("短 👍", 60), ["短 👍"]);
    }

    #[test]
    fn the_message_type_follows_035() {
        assert_eq!(format_of("你好 👋"), "text");
        assert_eq!(format_of("see [文档](https://x.io)"), "post");
        assert_eq!(format_of(&"长".repeat(300)), "post");
        assert_eq!(format_of(&"长".repeat(2001)), "interactive");
        for md in [
            "**粗体**",
            "# 标题",
            "```\ncode\n```",
            "- 一\n- 二",
            "1. 一",
            "| a |\n|---|",
        ] {
            assert_eq!(format_of(md), "interactive", "{md}");
        }
        let (kind, content) = content_of("post", "看 [文档](https://x.io) 吧");
        assert_eq!(kind, "post");
        let post: Value = serde_json::from_str(&content).unwrap();
        assert_eq!(
            post["zh_cn"]["content"][0],
            json!([{"tag": "text", "text": "看 "}, {"tag": "a", "text": "文档", "href": "https://x.io"},
                {"tag": "text", "text": " 吧"}])
        );
    }

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
