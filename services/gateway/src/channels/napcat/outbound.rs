//! Sending, as 0.3.5's `send`: `private:{qq}` through `send_private_msg`, `group:{id}` through
//! `send_group_msg`, as segment arrays (JSON, so no CQ escaping is involved); the images first
//! (an http(s) URL passed on, a local file as `base64://` so NapCat may run on another host),
//! then the text. 0.3.5 sent any length in one message; QQ refuses very long ones, so the text
//! is split at [`MAX_MESSAGE_CHARS`] characters between grapheme clusters, the images riding
//! with the first part. A lost connection or an unanswered call is retried by redelivery
//! (resuming after the parts already accepted); a refusal drops the message.

use std::path::Path;

use base64::Engine as _;
use serde_json::{Value, json};

use nanobot_proto::OutboundMessage;

use super::NapcatChannel;
use super::onebot::CallError;
use super::receive::as_number;
use super::segments;
use crate::channels::{Progress, SendError};
use crate::render::measure::Limit;
use crate::render::split::split_markdown;

/// Longest text part, in characters (code points).
pub(super) const MAX_MESSAGE_CHARS: usize = 4000;
const LIMIT: Limit = Limit::code_points(MAX_MESSAGE_CHARS);

/// Returns the action and its target parameter for a chat id (`private:1`, `group:2`).
pub(super) fn target(chat_id: &str) -> Option<(&'static str, Value)> {
    let (kind, id) = chat_id.split_once(':')?;
    if id.is_empty() {
        return None;
    }
    match kind {
        "private" => Some(("send_private_msg", json!({"user_id": as_number(id)}))),
        "group" => Some(("send_group_msg", json!({"group_id": as_number(id)}))),
        _ => None,
    }
}

/// Returns the messages (segment arrays) of a reply: images with the first text part.
pub(super) fn messages(images: &[String], content: &str) -> Vec<Vec<Value>> {
    let mut chunks = split_markdown(content.trim(), LIMIT);
    if chunks.is_empty() && !images.is_empty() {
        chunks.push(String::new());
    }
    chunks
        .iter()
        .enumerate()
        .map(|(i, text)| segments::outbound(if i == 0 { images } else { &[] }, text))
        .collect()
}

/// Delivers one outbound message.
pub(super) async fn send(
    ch: &NapcatChannel,
    msg: &OutboundMessage,
    progress: &mut Progress,
) -> Result<(), SendError> {
    let Some((action, target)) = target(&msg.chat_id) else {
        return Err(SendError::Permanent(format!(
            "napcat chat id {:?} is neither private:<qq> nor group:<id>",
            msg.chat_id
        )));
    };
    let images = if progress.done() == 0 {
        image_files(ch, &msg.media).await
    } else {
        Vec::new()
    };
    let parts = messages(&images, &msg.content);
    if progress.done() >= parts.len() {
        return Ok(());
    }
    let conn = ch.sending_conn().await?;
    for segments in parts.into_iter().skip(progress.done()) {
        let mut params = target.clone();
        params["message"] = Value::Array(segments);
        match conn.call(action, params).await {
            Ok(_) => progress.part_done().await,
            Err(_) if conn.was_refused() => {
                return Err(SendError::Permanent(format!(
                    "napcat at {} refused the access token",
                    ch.url_for_logs
                )));
            }
            Err(e @ CallError::Lost(_)) => return Err(SendError::Transient(e.to_string())),
            Err(e @ CallError::Failed { .. }) => return Err(SendError::Permanent(e.to_string())),
        }
    }
    Ok(())
}

/// Returns the `file` of each image to send; a missing or unreadable one is skipped (logged).
async fn image_files(ch: &NapcatChannel, media: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    for reference in media.iter().map(|m| m.trim()).filter(|m| !m.is_empty()) {
        if reference.starts_with("http://") || reference.starts_with("https://") {
            out.push(reference.to_string());
            continue;
        }
        let path = Path::new(reference);
        match tokio::fs::read(path).await {
            Ok(bytes) => out.push(format!(
                "base64://{}",
                base64::engine::general_purpose::STANDARD.encode(bytes)
            )),
            Err(e) => {
                let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
                tracing::warn!(bot = %ch.bot_id, file = ?name, error = %e, "napcat image to send not readable; skipped");
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chat_ids_choose_the_action_and_target() {
        assert_eq!(
            target("private:10001"),
            Some(("send_private_msg", json!({"user_id": 10001})))
        );
        assert_eq!(
            target("group:123456"),
            Some(("send_group_msg", json!({"group_id": 123456})))
        );
        assert_eq!(target("channel:1"), None);
        assert_eq!(target("private:"), None);
        assert_eq!(target("10001"), None);
    }

    #[test]
    fn a_long_cjk_and_emoji_reply_splits_at_4000_characters_without_cutting_a_family() {
        let family = "👨‍👩‍👧‍👦"; // 7 code points, one grapheme
        let text = format!("{}{}", "汉".repeat(3998), family.repeat(600));
        let parts = messages(&["base64://AA==".into()], &text);
        let texts: Vec<String> = parts
            .iter()
            .map(|p| {
                p.last().unwrap()["data"]["text"]
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .collect();
        assert_eq!(texts.concat(), text, "nothing lost or added");
        for t in &texts {
            assert!(
                t.chars().count() <= MAX_MESSAGE_CHARS,
                "{}",
                t.chars().count()
            );
        }
        assert_eq!(
            texts[0],
            "汉".repeat(3998),
            "the family is not split off in the middle"
        );
        assert!(texts[1].starts_with(family));
        assert_eq!(
            parts[0][0]["type"], "image",
            "images ride with the first part"
        );
        assert!(parts[1..].iter().all(|p| p.len() == 1));
        let only_image = messages(&["https://x/a.png".into()], "  ");
        assert_eq!(
            only_image,
            vec![vec![
                json!({"type": "image", "data": {"file": "https://x/a.png"}})
            ]]
        );
        assert!(messages(&[], "").is_empty());
    }
}
