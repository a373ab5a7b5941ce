//! Sending, as 0.3.5: the text as `sampleMarkdown` robot messages (title `Nanobot Reply`), in a
//! group headed by `# @{sender}` (the asker's display name, Markdown-escaped, one line of at
//! most 80 characters: visual only, DingTalk sends no @ notification), cut into chunks of at
//! most [`MAX_MESSAGE_CHARS`] characters, never inside a character; then each file uploaded
//! (`media/upload`) and sent as `sampleImageMsg` (images, by media id) or `sampleFile`, HTML
//! zipped first as 0.3.5 does; a file that cannot be sent becomes
//! `[Attachment send failed: {name}]`.

use std::io::Write as _;
use std::path::Path;

use redis::AsyncCommands as _;
use serde_json::json;

use nanobot_proto::{OutboundMessage, keys};

use super::api::ApiError;
use super::{CHANNEL, DingTalkChannel};
use crate::channels::{Progress, SendError};
use crate::render::measure::Limit;
use crate::render::split::split_markdown;

/// Longest text of one message, in characters (code points). DingTalk documents no exact
/// limit for a robot Markdown message (0.3.5 sends any length whole); 4,000 characters is a
/// conservative cut: at most 16,000 UTF-8 bytes whatever the script, CJK and emoji included.
pub(super) const MAX_MESSAGE_CHARS: usize = 4000;
/// Title of a Markdown message (shown in notifications), as 0.3.5.
const TITLE: &str = "Nanobot Reply";
/// Longest sender name in a group reply's header.
const SENDER_NAME_MAX_CHARS: usize = 80;

/// Delivers one outbound message; parts are the text chunks, then the files.
pub(super) async fn send(
    ch: &DingTalkChannel,
    msg: &OutboundMessage,
    progress: &mut Progress,
) -> Result<(), SendError> {
    let chat = msg.chat_id.as_str();
    let sender = match chat.starts_with("group:") {
        true => sender_of(ch, &msg.reply_to).await,
        false => None,
    };
    let chunks = split(&reply_text(&msg.content, chat, sender.as_deref()));
    for (i, chunk) in chunks.iter().enumerate() {
        if i < progress.done() {
            continue;
        }
        markdown(ch, chat, chunk).await.map_err(classify)?;
        progress.part_done().await;
    }
    for (i, path) in msg.media.iter().enumerate() {
        if chunks.len() + i < progress.done() {
            continue;
        }
        if let Err(e) = send_file(ch, chat, Path::new(path)).await {
            if matches!(e, ApiError::Transient(_)) {
                return Err(classify(e));
            }
            tracing::warn!(bot = %ch.bot_id, error = %e, "dingtalk file not sent");
            let name = file_name(Path::new(path));
            let note = format!("[Attachment send failed: {name}]");
            markdown(ch, chat, &note).await.map_err(classify)?;
        }
        progress.part_done().await;
    }
    Ok(())
}

/// Sends a short text outside a delivery (a pairing code, the private-chat notice).
pub(super) async fn notice(ch: &DingTalkChannel, chat: &str, text: &str) -> anyhow::Result<()> {
    match markdown(ch, chat, text).await {
        Ok(()) => Ok(()),
        Err(ApiError::Transient(why)) => anyhow::bail!("dingtalk notice not sent yet: {why}"),
        Err(e) => {
            tracing::warn!(bot = %ch.bot_id, error = %e, "dingtalk notice not sent");
            Ok(())
        }
    }
}

/// Returns the text in chunks of at most [`MAX_MESSAGE_CHARS`] characters.
pub(super) fn split(text: &str) -> Vec<String> {
    split_markdown(text, Limit::code_points(MAX_MESSAGE_CHARS))
}

async fn markdown(ch: &DingTalkChannel, chat: &str, text: &str) -> Result<(), ApiError> {
    ch.api
        .send(
            chat,
            "sampleMarkdown",
            &json!({"text": text, "title": TITLE}),
        )
        .await
}

/// Returns the display name of the group member who asked `reply_to`.
async fn sender_of(ch: &DingTalkChannel, reply_to: &str) -> Option<String> {
    if reply_to.is_empty() {
        return None;
    }
    let key = keys::channel_state(&ch.bot_id, CHANNEL, &format!("sender:{reply_to}"));
    let mut conn = ch.redis.clone();
    conn.get::<_, Option<String>>(&key).await.ok().flatten()
}

/// Returns the Markdown 0.3.5 sends for `content` in `chat`: trimmed, and in a group headed
/// by `# @{sender}` (the asker's display name, escaped) when there is text and a name.
pub fn reply_text(content: &str, chat: &str, sender: Option<&str>) -> String {
    let content = content.trim_matches(crate::render::message::is_py_space);
    match sender.map(escape_sender_name) {
        Some(name) if chat.starts_with("group:") && !content.is_empty() && !name.is_empty() => {
            format!("# @{name}\n\n{content}")
        }
        _ => content.to_string(),
    }
}

/// Returns an untrusted display name as one bounded Markdown-safe line, as 0.3.5.
pub fn escape_sender_name(name: &str) -> String {
    let one_line = name
        .split(crate::render::message::is_py_space)
        .filter(|w| !w.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    one_line
        .chars()
        .take(SENDER_NAME_MAX_CHARS)
        .fold(String::new(), |mut out, c| {
            if r"\`*_{}[]()<>#+-.!|~".contains(c) {
                out.push('\\');
            }
            out.push(c);
            out
        })
}

/// Uploads a local file and sends it: an image as `sampleImageMsg`, falling back to
/// `sampleFile`; anything else as `sampleFile`.
async fn send_file(ch: &DingTalkChannel, chat: &str, path: &Path) -> Result<(), ApiError> {
    let bytes = tokio::fs::read(path)
        .await
        .map_err(|e| ApiError::Permanent(format!("unreadable file: {}", e.kind())))?;
    let (bytes, name) = zip_html(file_name(path), bytes)?;
    let kind = upload_kind(&name);
    let media_id = ch.api.upload(kind, &name, bytes).await?;
    if kind == "image" {
        let sent = ch
            .api
            .send(chat, "sampleImageMsg", &json!({"photoURL": media_id}))
            .await;
        match sent {
            Ok(()) => return Ok(()),
            Err(ApiError::Transient(why)) => return Err(ApiError::Transient(why)),
            Err(e) => {
                tracing::warn!(bot = %ch.bot_id, error = %e, "dingtalk image not sent; sending it as a file")
            }
        }
    }
    let ext = Path::new(&name)
        .extension()
        .map(|e| e.to_string_lossy().to_lowercase())
        .map(|e| if e == "jpeg" { "jpg".into() } else { e })
        .unwrap_or_else(|| "bin".into());
    let param = json!({"mediaId": media_id, "fileName": name, "fileType": ext});
    ch.api.send(chat, "sampleFile", &param).await
}

/// Returns 0.3.5's upload type of a file name.
pub(super) fn upload_kind(name: &str) -> &'static str {
    let ext = Path::new(name)
        .extension()
        .map(|e| e.to_string_lossy().to_lowercase())
        .unwrap_or_default();
    match ext.as_str() {
        "jpg" | "jpeg" | "png" | "gif" | "bmp" | "webp" => "image",
        "amr" | "mp3" | "wav" | "ogg" | "m4a" | "aac" => "voice",
        "mp4" | "mov" | "avi" | "mkv" | "webm" => "video",
        _ => "file",
    }
}

/// DingTalk refuses raw HTML attachments: they go as `{stem}.zip` holding the file, as 0.3.5.
fn zip_html(name: String, bytes: Vec<u8>) -> Result<(Vec<u8>, String), ApiError> {
    let lower = name.to_lowercase();
    if !(lower.ends_with(".html") || lower.ends_with(".htm")) {
        return Ok((bytes, name));
    }
    let stem = Path::new(&name)
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "attachment".into());
    let zipped = (|| -> zip::result::ZipResult<Vec<u8>> {
        let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
        let options = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated);
        zip.start_file(name.as_str(), options)?;
        zip.write_all(&bytes)?;
        Ok(zip.finish()?.into_inner())
    })()
    .map_err(|e| ApiError::Permanent(format!("zip the HTML file: {e}")))?;
    Ok((zipped, format!("{stem}.zip")))
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "file.bin".into())
}

/// Maps a failed call to redeliver-later or give-up.
fn classify(e: ApiError) -> SendError {
    match e {
        ApiError::Transient(why) => SendError::Transient(why),
        e => SendError::Permanent(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_cjk_and_emoji_reply_is_cut_at_4000_characters_never_inside_one() {
        let family = "👩‍👩‍👧‍👦";
        let text = format!("{}{}", "钉".repeat(3999), family.repeat(3));
        let chunks = split(&text);
        assert!(
            chunks
                .iter()
                .all(|c| c.chars().count() <= MAX_MESSAGE_CHARS)
        );
        assert!(chunks.iter().all(|c| c.len() <= 20_000), "within 20 KB");
        assert_eq!(chunks.concat(), text, "nothing lost, no grapheme halved");
        assert_eq!(chunks[0], "钉".repeat(3999), "the family emoji moved whole");
        let short = split("你好 👋");
        assert_eq!(short, vec!["你好 👋".to_string()]);
    }

    #[test]
    fn sender_names_are_one_escaped_line_of_at_most_80_characters() {
        assert_eq!(escape_sender_name("张 三\n[x](y)"), r"张 三 \[x\]\(y\)");
        assert_eq!(escape_sender_name(&"王".repeat(100)).chars().count(), 80);
    }

    #[test]
    fn html_is_zipped_and_upload_kinds_follow_the_extension() {
        let (bytes, name) = zip_html("页面.html".into(), b"<p>hi</p>".to_vec()).unwrap();
        assert_eq!(name, "页面.zip");
        assert_eq!(&bytes[..2], b"PK");
        assert_eq!(upload_kind("a.JPG"), "image");
        assert_eq!(upload_kind("a.mp3"), "voice");
        assert_eq!(upload_kind("a.pdf"), "file");
    }
}
