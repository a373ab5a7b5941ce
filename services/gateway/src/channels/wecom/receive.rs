//! One WeCom callback → at most one inbound message, as 0.3.5: the ACL (unknown single-chat
//! senders get a pairing code), the parts of the message (text, image, voice transcript, file,
//! mixed) with images and files downloaded and decrypted within the caps, the answer's `req_id`
//! kept for the reply, then the inbound message. An `enter_chat` event gets `welcomeMessage`.
//!
//! Exactly once: the inbound id is `wecom:{msgid}`; the msgid is marked done
//! ([`keys::channel_event`]) after the publish, so a callback WeCom pushes again (its documented
//! duplicate delivery) is dropped without downloading its files twice; one pushed again before
//! the mark is dropped by the stream's de-duplication.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use redis::AsyncCommands as _;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use nanobot_proto::{InboundMessage, keys};

use super::frame::{self, Frame};
use super::link::Link;
use super::{CHANNEL, WeComChannel, crypto};
use crate::channels::backoff::Backoff;
use crate::channels::media::{self, Budget};
use crate::channels::poison::{self, Failure};
use crate::channels::{Inbound, acl};

/// How long a handled msgid and a message's `req_id` are remembered.
pub(super) const KEEP_SECS: u64 = 24 * 3600;
/// 0.3.5's cap on one downloaded file (on top of the attachment caps).
const MAX_DOWNLOAD: u64 = 200 * 1024 * 1024;

/// Handles the callbacks of one connection in order until `rx` closes or shutdown.
pub(super) async fn handle_all(
    ch: Arc<WeComChannel>,
    inbound: Inbound,
    link: Arc<Link>,
    mut rx: mpsc::UnboundedReceiver<Frame>,
    cancel: CancellationToken,
) {
    while let Some(f) = rx.recv().await {
        if f.cmd == frame::EVENT_CALLBACK {
            if f.event_type() == Some("enter_chat") {
                welcome(&ch, &link, &f).await;
            }
            continue;
        }
        // The turn's trace starts here: the ACL check, a pairing reply and the media download
        // (every attempt) are in the gateway's receive span.
        let span = crate::channels::receive_span(&ch.bot_id, CHANNEL);
        let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(10));
        loop {
            let attempt = handle(&ch, &inbound, &link, &f).instrument(span.clone());
            match poison::guard(attempt).await {
                Ok(()) => break,
                Err(Failure::Poison(why)) => {
                    tracing::error!(bot = %ch.bot_id, error = %why, "wecom message cannot be handled; skipped");
                    break;
                }
                Err(Failure::Retry(e)) => {
                    tracing::warn!(bot = %ch.bot_id, error = format!("{e:#}"), retry_in = ?backoff.current(), "wecom message not handled yet");
                }
            }
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = backoff.sleep() => {}
            }
        }
    }
}

/// Returns the sender's user id (`from.userid`), `unknown` as 0.3.5 when missing.
fn sender_of(body: &Value) -> String {
    body["from"]["userid"]
        .as_str()
        .unwrap_or("unknown")
        .to_string()
}

/// Sends `welcomeMessage` to a user who opened the chat, when set and the user is allowed.
async fn welcome(ch: &WeComChannel, link: &Link, f: &Frame) {
    if ch.cfg.welcome_message.is_empty() {
        return;
    }
    // The event names the user; 0.3.5 reads `chatid`, which a single chat's event lacks.
    let user = f.body["chatid"]
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| sender_of(&f.body));
    let approved = ch
        .pairing
        .is_approved(CHANNEL, &user)
        .await
        .unwrap_or(false);
    if !acl::allowed_by_list(&ch.settings.allow_from, &user) && !approved {
        tracing::debug!(bot = %ch.bot_id, sender = %user, "wecom enter_chat from a sender not in allowFrom: no welcome");
        return;
    }
    let body = frame::text(&ch.cfg.welcome_message);
    match link
        .request(frame::RESPOND_WELCOME, &f.headers.req_id, body)
        .await
    {
        Ok(_) => tracing::info!(bot = %ch.bot_id, sender = %user, "wecom welcome message sent"),
        Err(e) => tracing::warn!(bot = %ch.bot_id, error = %e, "wecom welcome message failed"),
    }
}

/// Handles one message callback; an error means it was not handled yet (retried).
async fn handle(
    ch: &WeComChannel,
    inbound: &Inbound,
    link: &Link,
    f: &Frame,
) -> anyhow::Result<()> {
    let body = &f.body;
    let msg_type = body["msgtype"].as_str().unwrap_or_default();
    if !matches!(msg_type, "text" | "image" | "voice" | "file" | "mixed") {
        tracing::debug!(bot = %ch.bot_id, msg_type, "wecom message type not handled (as 0.3.5)");
        return Ok(());
    }
    let sender = sender_of(body);
    let chat_id = body["chatid"]
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| sender.clone());
    let is_group = body["chattype"].as_str() == Some("group");
    let msg_id = match body["msgid"].as_str() {
        Some(id) if !id.is_empty() => id.to_string(),
        _ => format!(
            "{chat_id}_{}",
            body["sendertime"].as_i64().unwrap_or_default()
        ),
    };
    if !allowed(ch, &sender).await? {
        if is_group {
            tracing::warn!(bot = %ch.bot_id, sender = %sender, chat = %chat_id, "wecom group message from a sender not in allowFrom ignored");
        } else {
            pair(ch, link, f, &sender).await?;
        }
        return Ok(());
    }
    let mut conn = ch.redis.clone();
    let event_key = keys::channel_event(&ch.bot_id, CHANNEL, &media::safe_id(&msg_id));
    let done: Option<String> = conn
        .get(&event_key)
        .await
        .context("read the event record")?;
    if done.is_some() {
        tracing::info!(bot = %ch.bot_id, msg_id = %msg_id, "wecom callback pushed again; already handled");
        return Ok(());
    }
    let reply = json!({"req_id": f.headers.req_id, "chat_id": chat_id}).to_string();
    let _: () = conn
        .set_ex(reply_key(ch, &msg_id), reply, KEEP_SECS)
        .await
        .context("keep the reply's req_id")?;
    let (content, paths) = content_of(ch, msg_type, body).await;
    if content.is_empty() {
        return Ok(());
    }
    let out = InboundMessage {
        id: inbound_id(&msg_id),
        bot: ch.bot_id.clone(),
        channel: CHANNEL.into(),
        sender_id: sender,
        chat_id: chat_id.clone(),
        content,
        timestamp_ms: now_ms(),
        media: paths.iter().map(|p| p.display().to_string()).collect(),
        metadata_json: json!({
            "message_id": msg_id,
            "msg_type": msg_type,
            "chat_type": if is_group { "group" } else { "single" },
            "is_group": is_group,
        })
        .to_string(),
        session_key: format!("{CHANNEL}:{chat_id}"),
        stream: false,
        reply_channel: String::new(),
        reply_chat_id: String::new(),
    };
    inbound.publish(&out).await.context("publish inbound")?;
    let _: () = conn
        .set_ex(&event_key, "done", KEEP_SECS)
        .await
        .context("record the handled callback")?;
    tracing::debug!(bot = %ch.bot_id, inbound_id = %out.id, session = %out.session_key, "wecom message published");
    Ok(())
}

/// Returns the inbound id of WeCom message `msg_id`.
pub(super) fn inbound_id(msg_id: &str) -> String {
    format!("{CHANNEL}:{msg_id}")
}

/// Returns the key keeping the `req_id` and chat of WeCom message `msg_id`.
pub(super) fn reply_key(ch: &WeComChannel, msg_id: &str) -> String {
    keys::channel_state(
        &ch.bot_id,
        CHANNEL,
        &format!("reply:{}", media::safe_id(msg_id)),
    )
}

async fn allowed(ch: &WeComChannel, sender: &str) -> anyhow::Result<bool> {
    if acl::allowed_by_list(&ch.settings.allow_from, sender) {
        return Ok(true);
    }
    ch.pairing
        .is_approved(CHANNEL, sender)
        .await
        .context("read pairing approvals")
}

/// Answers an unknown single-chat sender with a pairing code.
async fn pair(ch: &WeComChannel, link: &Link, f: &Frame, sender: &str) -> anyhow::Result<()> {
    let code = ch
        .pairing
        .code_for(CHANNEL, sender)
        .await
        .context("create a pairing code")?;
    tracing::info!(bot = %ch.bot_id, sender = %sender, "unknown wecom sender sent a pairing code");
    let text = nanobot_core::pairing::format_pairing_reply(&code);
    let stream_id = format!("pair_{}", uuid::Uuid::new_v4().simple());
    let body = frame::stream(&stream_id, &text, true);
    if let Err(e) = link.request(frame::RESPOND, &f.headers.req_id, body).await {
        tracing::warn!(bot = %ch.bot_id, error = %e, "wecom pairing reply failed");
    }
    Ok(())
}

/// Returns the turn's text and the saved files of a message, as 0.3.5 words them.
async fn content_of(ch: &WeComChannel, msg_type: &str, body: &Value) -> (String, Vec<PathBuf>) {
    let mut budget = Budget::new(ch.caps);
    let mut parts = Vec::new();
    let mut paths = Vec::new();
    let items: Vec<(&str, &Value)> = match msg_type {
        "mixed" => body["mixed"]["msg_item"]
            .as_array()
            .map(|items| {
                items
                    .iter()
                    .map(|i| (i["msgtype"].as_str().unwrap_or_default(), i))
                    .collect()
            })
            .unwrap_or_default(),
        _ => vec![(msg_type, body)],
    };
    let mixed = msg_type == "mixed";
    for (kind, item) in items {
        match kind {
            "text" => {
                let text = item["text"]["content"].as_str().unwrap_or_default();
                if !text.is_empty() {
                    parts.push(text.to_string());
                }
            }
            "voice" if !mixed => match item["voice"]["content"].as_str() {
                Some(said) if !said.is_empty() => parts.push(format!("[voice] {said}")),
                _ => parts.push("[voice]".into()),
            },
            "image" | "file" if !mixed || kind == "image" => {
                let info = &item[kind];
                let name = info["name"].as_str().filter(|n| !n.is_empty());
                match save(ch, &mut budget, kind, info).await {
                    Ok(path) => {
                        let shown = path.file_name().map(|n| n.to_string_lossy().into_owned());
                        parts.push(format!("[{kind}: {}]", shown.unwrap_or_default()));
                        paths.push(path);
                    }
                    Err(e) => {
                        tracing::warn!(bot = %ch.bot_id, kind, error = format!("{e:#}"), "wecom media not saved");
                        match (kind, mixed) {
                            (_, true) => {}
                            ("image", _) => parts.push("[image: download failed]".into()),
                            _ => parts.push(format!(
                                "[file: {}: download failed]",
                                name.unwrap_or("unknown")
                            )),
                        }
                    }
                }
            }
            other => parts.push(match other {
                "voice" => "[voice]".into(),
                "file" => "[file]".into(),
                _ => format!("[{other}]"),
            }),
        }
    }
    (parts.join("\n"), paths)
}

/// Downloads, decrypts and saves one image or file within the budget; returns its path.
async fn save(
    ch: &WeComChannel,
    budget: &mut Budget,
    kind: &str,
    info: &Value,
) -> anyhow::Result<PathBuf> {
    let url = info["url"].as_str().unwrap_or_default();
    let aes_key = info["aeskey"].as_str().unwrap_or_default();
    anyhow::ensure!(!url.is_empty() && !aes_key.is_empty(), "no url or aeskey");
    budget.take(0).map_err(anyhow::Error::msg)?;
    // Encrypted data is at most 32 bytes (the padding) longer than the file.
    let max = (budget.bytes_left() + 32).min(MAX_DOWNLOAD + 32);
    let (data, disposition) = download(ch, url, max).await?;
    let plain = crypto::decrypt(&data, aes_key)?;
    budget
        .settle(0, plain.len() as u64)
        .map_err(anyhow::Error::msg)?;
    let name = info["name"]
        .as_str()
        .filter(|n| !n.is_empty())
        .map(str::to_string)
        .or(disposition)
        .unwrap_or_else(|| format!("{kind}.{}", if kind == "image" { "jpg" } else { "bin" }));
    let id = info["md5sum"]
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| uuid::Uuid::new_v4().simple().to_string());
    let path = media::path_in(&ch.media_dir, &media::stored_name(&id, &name))?;
    tokio::fs::create_dir_all(&ch.media_dir)
        .await
        .context("create the media directory")?;
    tokio::fs::write(&path, &plain)
        .await
        .context("write the file")?;
    Ok(path)
}

/// Downloads at most `max` bytes from `url`; returns them and the file name WeCom gave.
async fn download(
    ch: &WeComChannel,
    url: &str,
    max: u64,
) -> anyhow::Result<(Vec<u8>, Option<String>)> {
    let mut response = ch.download.get(url).send().await.context("download")?;
    anyhow::ensure!(
        response.status().is_success(),
        "download: HTTP {}",
        response.status().as_u16()
    );
    if response.content_length().is_some_and(|len| len > max) {
        anyhow::bail!("skipped: larger than {max} bytes");
    }
    let name = response
        .headers()
        .get(reqwest::header::CONTENT_DISPOSITION)
        .and_then(|v| v.to_str().ok())
        .and_then(file_name_of);
    let mut data = Vec::new();
    while let Some(chunk) = response.chunk().await.context("download")? {
        data.extend_from_slice(&chunk);
        anyhow::ensure!(data.len() as u64 <= max, "skipped: larger than {max} bytes");
    }
    Ok((data, name))
}

/// Returns the file name of a `Content-Disposition` (RFC 5987 `filename*=UTF-8''…` first).
fn file_name_of(disposition: &str) -> Option<String> {
    for part in disposition.split(';').map(str::trim) {
        if let Some(v) = part.strip_prefix("filename*=") {
            let v = v.trim_matches('"');
            let v = v.split_once("''").map_or(v, |(_, rest)| rest);
            return percent_decode(v);
        }
    }
    disposition.split(';').map(str::trim).find_map(|part| {
        part.strip_prefix("filename=")
            .and_then(|v| percent_decode(v.trim_matches('"')))
    })
}

fn percent_decode(v: &str) -> Option<String> {
    let decoded = url::form_urlencoded::parse(format!("n={}", v.replace('+', "%2B")).as_bytes())
        .next()
        .map(|(_, v)| v.into_owned())?;
    (!decoded.is_empty()).then_some(decoded)
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
    fn file_names_come_from_content_disposition_utf8_first() {
        assert_eq!(
            file_name_of("attachment; filename*=UTF-8''%E6%8A%A5%E5%91%8A%20%F0%9F%93%84.pdf")
                .as_deref(),
            Some("报告 📄.pdf")
        );
        assert_eq!(
            file_name_of("attachment; filename=\"a+b.txt\"").as_deref(),
            Some("a+b.txt")
        );
        assert_eq!(file_name_of("inline"), None);
    }
}
