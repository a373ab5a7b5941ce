//! One robot message → at most one inbound message, as 0.3.5's handler: the text (`text`,
//! an audio's `recognition`, a rich text's parts with bold/italic/code kept as Markdown),
//! pictures and files fetched by their `downloadCode` into the media folder and listed after
//! the text (`Received files:`), the chat `group:{conversationId}` for groups (`conversationType`
//! `2`) or the sender's staff id, `groupUserIsolation` giving each member of a group its own
//! session, `disablePrivateChat` answering 1:1 chats with 0.3.5's notice before any access
//! check. Senders outside `allowFrom` cost nothing; in a 1:1 chat they get a pairing code
//! (0.3.5 only drops them: the fleet pairs as its other channels do).
//!
//! Exactly once: the message id is marked done ([`keys::channel_event`]) after its inbound
//! message (id `dingtalk:{msgId}`) was published; DingTalk's redelivery of a done message is
//! only acknowledged.

use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use redis::AsyncCommands as _;
use serde_json::{Value, json};
use tracing::Instrument as _;

use nanobot_proto::{InboundMessage, keys};

use super::{CHANNEL, DingTalkChannel, outbound};
use crate::channels::media::{self, Budget};
use crate::channels::{Inbound, acl};

/// How long a handled message id is remembered.
const DONE_TTL_SECS: u64 = 24 * 3600;
/// How long the sender's display name of a group message is kept for the reply's header.
pub(super) const SENDER_TTL_SECS: u64 = 24 * 3600;
/// Largest file downloaded (0.3.5's remote media cap).
const MAX_FILE_BYTES: u64 = 20 * 1024 * 1024;
/// 0.3.5's answer to a 1:1 chat when `disablePrivateChat` is on.
pub(super) const PRIVATE_CHAT_DISABLED: &str = "该机器人未开启私聊，请在群聊中与我对话。";

/// A robot message, parsed.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Parsed {
    pub msg_id: String,
    pub sender: String,
    pub sender_name: String,
    pub group: Option<String>,
    pub text: String,
    /// Files to fetch: (downloadCode, file name).
    pub files: Vec<(String, String)>,
}

impl Parsed {
    /// The chat replies go to: `group:{conversationId}` or the sender.
    pub(super) fn chat_id(&self) -> String {
        match &self.group {
            Some(g) => format!("group:{g}"),
            None => self.sender.clone(),
        }
    }
}

/// Reads a robot message's fields; `None` when it has no id or no sender.
pub(super) fn parse(m: &Value) -> Option<Parsed> {
    let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
    let msg_id = s(&m["msgId"]);
    let sender = [&m["senderStaffId"], &m["senderId"]]
        .into_iter()
        .map(s)
        .find(|v| !v.is_empty())?;
    if msg_id.is_empty() {
        return None;
    }
    let conversation = [&m["conversationId"], &m["openConversationId"]]
        .into_iter()
        .map(s)
        .find(|v| !v.is_empty());
    let group = conversation.filter(|_| m["conversationType"] == "2");
    let content = &m["content"];
    let mut text = s(&m["text"]["content"]).trim().to_string();
    if text.is_empty() {
        text = s(&content["recognition"]).trim().to_string();
    }
    let mut files = Vec::new();
    let code = |v: &Value| s(&v["downloadCode"]);
    match m["msgtype"].as_str().unwrap_or_default() {
        "picture" if !code(content).is_empty() => files.push((code(content), "image.jpg".into())),
        "file" => {
            let c = [code(content), code(m)].into_iter().find(|c| !c.is_empty());
            let name = [s(&content["fileName"]), s(&m["fileName"])]
                .into_iter()
                .find(|n| !n.is_empty())
                .unwrap_or_else(|| "file".into());
            files.extend(c.map(|c| (c, name)));
        }
        "richText" => {
            for item in content["richText"].as_array().into_iter().flatten() {
                let t = s(&item["text"]).trim().to_string();
                if !t.is_empty() {
                    let part = match item["type"].as_str().unwrap_or_default() {
                        "bold" => format!("**{t}**"),
                        "italic" => format!("*{t}*"),
                        "inlineCode" => format!("`{t}`"),
                        "pre" => format!("```\n{t}\n```"),
                        _ => t,
                    };
                    text = if text.is_empty() {
                        part
                    } else {
                        format!("{text} {part}")
                    };
                }
                if !code(item).is_empty() {
                    let name = Some(s(&item["fileName"])).filter(|n| !n.is_empty());
                    files.push((code(item), name.unwrap_or_else(|| "file".into())));
                }
            }
        }
        _ => {}
    }
    Some(Parsed {
        msg_id,
        sender,
        sender_name: Some(s(&m["senderNick"]))
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| "Unknown".into()),
        group,
        text,
        files,
    })
}

/// Handles one robot message; an error means nothing was marked done and it must be handled
/// again.
pub(super) async fn handle(
    ch: &DingTalkChannel,
    inbound: &Inbound,
    message: &Value,
) -> anyhow::Result<()> {
    let Some(msg) = parse(message) else {
        tracing::warn!(bot = %ch.bot_id, "dingtalk message without an id or sender dropped");
        return Ok(());
    };
    let key = keys::channel_event(&ch.bot_id, CHANNEL, &msg.msg_id);
    let mut conn = ch.redis.clone();
    let done: Option<String> = conn.get(&key).await.context("read the event record")?;
    if done.is_some() {
        tracing::info!(bot = %ch.bot_id, msg_id = %msg.msg_id, "dingtalk message already handled; acknowledged again");
        return Ok(());
    }
    // The turn's trace starts here: the private-chat switch, the ACL check, a pairing reply
    // and the file downloads are in the gateway's receive span.
    let span = crate::channels::receive_span(&ch.bot_id, CHANNEL);
    admit(ch, inbound, &msg).instrument(span).await?;
    let _: () = conn
        .set_ex(&key, "done", DONE_TTL_SECS)
        .await
        .context("record the handled message")?;
    Ok(())
}

/// The private-chat switch, the access check, then the inbound message.
async fn admit(ch: &DingTalkChannel, inbound: &Inbound, msg: &Parsed) -> anyhow::Result<()> {
    let chat = msg.chat_id();
    if msg.group.is_none() && ch.cfg.disable_private_chat {
        tracing::info!(bot = %ch.bot_id, sender = %msg.sender, "dingtalk private chat disabled; notice sent");
        outbound::notice(ch, &chat, PRIVATE_CHAT_DISABLED).await?;
        return Ok(());
    }
    let allowed = acl::allowed_by_list(&ch.settings.allow_from, &msg.sender)
        || ch
            .pairing
            .is_approved(CHANNEL, &msg.sender)
            .await
            .context("read pairing approvals")?;
    if !allowed {
        if msg.group.is_some() {
            tracing::warn!(bot = %ch.bot_id, sender = %msg.sender, "dingtalk group message from a sender not in allowFrom ignored");
            return Ok(());
        }
        let code = ch
            .pairing
            .code_for(CHANNEL, &msg.sender)
            .await
            .context("create a pairing code")?;
        tracing::info!(bot = %ch.bot_id, sender = %msg.sender, "unknown dingtalk sender sent a pairing code");
        let text = nanobot_core::pairing::format_pairing_reply(&code);
        outbound::notice(ch, &chat, &text).await?;
        return Ok(());
    }
    publish(ch, inbound, msg, chat).await
}

async fn publish(
    ch: &DingTalkChannel,
    inbound: &Inbound,
    msg: &Parsed,
    chat: String,
) -> anyhow::Result<()> {
    let (paths, failed) = save_files(ch, msg).await;
    let mut content = msg.text.clone();
    if content.is_empty() && !msg.files.is_empty() {
        content = if msg.files[0].1 == "image.jpg" {
            "[Image]"
        } else {
            "[File]"
        }
        .into();
    }
    if !paths.is_empty() {
        let list: Vec<String> = paths.iter().map(|p| format!("- {p}")).collect();
        content = format!("{content}\n\nReceived files:\n{}", list.join("\n"));
    }
    content.extend(failed.iter().map(|f| format!("\n{f}")));
    if content.trim().is_empty() {
        tracing::warn!(bot = %ch.bot_id, msg_id = %msg.msg_id, "dingtalk message empty or of an unsupported type ignored");
        return Ok(());
    }
    let id = inbound_id(&msg.msg_id);
    let session_key = match &msg.group {
        Some(g) if ch.cfg.group_user_isolation => format!("{CHANNEL}:group:{g}:{}", msg.sender),
        _ => format!("{CHANNEL}:{chat}"),
    };
    if msg.group.is_some() {
        remember_sender(ch, &id, &msg.sender_name).await;
    }
    let inbound_msg = InboundMessage {
        id,
        bot: ch.bot_id.clone(),
        channel: CHANNEL.into(),
        sender_id: msg.sender.clone(),
        chat_id: chat,
        content,
        timestamp_ms: now_ms(),
        media: paths,
        metadata_json: json!({
            "sender_name": msg.sender_name,
            "platform": CHANNEL,
            "conversation_type": if msg.group.is_some() { "2" } else { "1" },
            "message_id": msg.msg_id,
        })
        .to_string(),
        session_key,
        stream: false,
        reply_channel: String::new(),
        reply_chat_id: String::new(),
    };
    inbound
        .publish(&inbound_msg)
        .await
        .context("publish inbound")?;
    tracing::debug!(bot = %ch.bot_id, inbound_id = %inbound_msg.id, session = %inbound_msg.session_key, "dingtalk message published");
    Ok(())
}

/// Returns the inbound id of a robot message: the same on every replica and every delivery.
pub(super) fn inbound_id(msg_id: &str) -> String {
    format!("{CHANNEL}:{msg_id}")
}

/// Keeps a group sender's name for the reply's `# @name` header (best effort).
async fn remember_sender(ch: &DingTalkChannel, inbound_id: &str, name: &str) {
    let key = keys::channel_state(&ch.bot_id, CHANNEL, &format!("sender:{inbound_id}"));
    let mut conn = ch.redis.clone();
    let written: redis::RedisResult<()> = conn.set_ex(&key, name, SENDER_TTL_SECS).await;
    if let Err(e) = written {
        tracing::debug!(bot = %ch.bot_id, error = %e, "dingtalk sender name not kept");
    }
}

/// Downloads the message's files within the caps: the saved paths, and a line for each one
/// not saved.
async fn save_files(ch: &DingTalkChannel, msg: &Parsed) -> (Vec<String>, Vec<String>) {
    let mut budget = Budget::new(ch.caps);
    let (mut paths, mut failed) = (Vec::new(), Vec::new());
    for (code, name) in &msg.files {
        if let Err(why) = budget.take(0) {
            failed.push(format!("[file: {name} - {why}]"));
            continue;
        }
        let max = budget.bytes_left().min(MAX_FILE_BYTES);
        match download(ch, &msg.msg_id, code, name, max).await {
            Ok((path, len)) => match budget.settle(0, len) {
                Ok(()) => paths.push(path.display().to_string()),
                Err(why) => {
                    tokio::fs::remove_file(&path).await.ok();
                    failed.push(format!("[file: {name} - {why}]"));
                }
            },
            Err(e) => {
                tracing::warn!(bot = %ch.bot_id, file = %name, error = format!("{e:#}"), "dingtalk file download failed");
                failed.push(format!("[file: {name} - download failed]"));
            }
        }
    }
    (paths, failed)
}

/// Downloads one file to `{media}/{msgId}_{safe name}`; kept when already there.
async fn download(
    ch: &DingTalkChannel,
    msg_id: &str,
    code: &str,
    name: &str,
    max: u64,
) -> anyhow::Result<(PathBuf, u64)> {
    let path = media::path_in(&ch.media_dir, &media::stored_name(msg_id, name))?;
    if let Ok(meta) = tokio::fs::metadata(&path).await {
        return Ok((path, meta.len()));
    }
    let url = ch.api.download_url(code).await?;
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
    fn a_group_text_a_rich_text_and_a_file_parse_as_0_3_5_reads_them() {
        let group = parse(&json!({
            "msgId": "m1", "senderStaffId": "staff-1", "senderId": "$:x", "senderNick": "小明",
            "conversationType": "2", "conversationId": "cid-群", "msgtype": "text",
            "text": {"content": " 你好 🌏 "},
        }))
        .unwrap();
        assert_eq!(group.chat_id(), "group:cid-群");
        assert_eq!(group.sender, "staff-1");
        assert_eq!(group.text, "你好 🌏");
        let rich = parse(&json!({
            "msgId": "m2", "senderId": "$:y", "conversationType": "1", "msgtype": "richText",
            "content": {"richText": [{"text": "看"}, {"text": "这里", "type": "bold"},
                                      {"downloadCode": "dc-1", "fileName": "图.png"}]},
        }))
        .unwrap();
        assert_eq!(rich.chat_id(), "$:y", "no staff id: the sender id");
        assert_eq!(rich.text, "看 **这里**");
        assert_eq!(rich.files, vec![("dc-1".to_string(), "图.png".to_string())]);
        assert_eq!(rich.sender_name, "Unknown");
        let file = parse(&json!({
            "msgId": "m3", "senderStaffId": "s", "msgtype": "file",
            "content": {"downloadCode": "dc-2", "fileName": "报告.pdf"},
        }))
        .unwrap();
        assert_eq!(
            file.files,
            vec![("dc-2".to_string(), "报告.pdf".to_string())]
        );
        assert!(
            parse(&json!({"msgId": "m4", "msgtype": "text"})).is_none(),
            "no sender"
        );
    }
}
