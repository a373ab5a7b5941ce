//! One OneBot event → at most one inbound message, as 0.3.5's `_on_message` / `_on_notice`:
//! private messages as `private:{qq}`; group messages as `group:{id}` with the text prefixed by
//! the sender's card or nickname, answered when they @ the bot, reply to one of its messages, or
//! the group's policy says so (decided before anything is downloaded); senders outside
//! `allowFrom` ignored in groups and given a pairing code in private; images downloaded up to
//! `maxImageBytes` (and the fleet's per-message caps); a member joining a group becomes 0.3.5's
//! `[group event]` line when `welcomeNewMembers`.

use std::hash::{DefaultHasher, Hash as _, Hasher as _};
use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use serde_json::{Value, json};
use tracing::Instrument as _;

use nanobot_proto::InboundMessage;
use nanobot_runtime::config::napcat::GroupPolicy;

use super::onebot::Conn;
use super::segments::{self, Image};
use super::{CHANNEL, NapcatChannel};
use crate::channels::media::{self, Budget};
use crate::channels::{Inbound, acl};

/// Returns a OneBot id (number or string) as text.
pub(super) fn id_of(v: &Value) -> Option<String> {
    match v {
        Value::Number(n) => Some(n.to_string()),
        Value::String(s) if !s.is_empty() => Some(s.clone()),
        _ => None,
    }
}

/// Returns whether `policy` answers an un-addressed group message; a probability is decided by
/// the message's id, so every replica and every retry decide alike.
pub(super) fn policy_answers(policy: GroupPolicy, message_key: &str) -> bool {
    match policy {
        GroupPolicy::Open => true,
        GroupPolicy::Mention => false,
        GroupPolicy::Chance(p) => {
            let mut h = DefaultHasher::new();
            message_key.hash(&mut h);
            (h.finish() as f64 / u64::MAX as f64) < p
        }
    }
}

/// Handles one event; an error means nothing was published and it must be handled again.
pub(super) async fn handle(
    ch: &NapcatChannel,
    inbound: &Inbound,
    conn: &Conn,
    me: &str,
    event: &Value,
) -> anyhow::Result<()> {
    let me = id_of(&event["self_id"]).unwrap_or_else(|| me.to_string());
    match event["post_type"].as_str() {
        Some("message") => on_message(ch, inbound, conn, &me, event).await,
        Some("notice")
            if event["notice_type"] == "group_increase" && ch.cfg.welcome_new_members =>
        {
            let span = crate::channels::receive_span(&ch.bot_id, CHANNEL);
            on_join(ch, inbound, conn, &me, event)
                .instrument(span)
                .await
        }
        _ => Ok(()),
    }
}

async fn on_message(
    ch: &NapcatChannel,
    inbound: &Inbound,
    conn: &Conn,
    me: &str,
    ev: &Value,
) -> anyhow::Result<()> {
    let (Some(sender), Some(message_id)) = (id_of(&ev["user_id"]), id_of(&ev["message_id"])) else {
        return Ok(());
    };
    let is_group = match ev["message_type"].as_str() {
        Some("group") => true,
        Some("private") => false,
        _ => return Ok(()),
    };
    if sender == me {
        return Ok(());
    }
    let parsed = segments::parse(&segments::of_message(&ev["message"]), me);
    let chat = if is_group {
        let Some(group) = id_of(&ev["group_id"]) else {
            return Ok(());
        };
        let addressed = parsed.mentions_me || replies_to_me(conn, &parsed.reply_to, me).await;
        if !addressed && !policy_answers(ch.cfg.policy_of(&group), &message_id) {
            tracing::debug!(bot = %ch.bot_id, group = %group, "napcat group message not addressed to the bot ignored");
            return Ok(());
        }
        format!("group:{group}")
    } else {
        format!("private:{sender}")
    };
    // The turn's trace starts here: the ACL check, a pairing reply and the image downloads
    // are in the gateway's receive span (group chatter not addressed to the bot opens none).
    let span = crate::channels::receive_span(&ch.bot_id, CHANNEL);
    async {
        if !allowed(ch, &sender).await? {
            if is_group {
                tracing::warn!(bot = %ch.bot_id, sender = %sender, chat = %chat, "napcat group message from a sender not in allowFrom ignored");
            } else {
                pair(ch, conn, &sender).await?;
            }
            return Ok(());
        }
        let media = save_images(ch, &message_id, &parsed.images).await;
        let nickname = ev["sender"]["card"]
            .as_str()
            .filter(|s| !s.is_empty())
            .or(ev["sender"]["nickname"].as_str())
            .filter(|s| !s.is_empty());
        let content = if is_group {
            format!("{}: {}", nickname.unwrap_or(&sender), parsed.text)
        } else {
            parsed.text.clone()
        };
        if content.is_empty() && media.is_empty() {
            return Ok(());
        }
        let metadata = json!({
            "message_id": message_id,
            "is_group": is_group,
            "nickname": nickname,
            "reply_to": parsed.reply_to,
        });
        let id = format!("{CHANNEL}:{me}:{message_id}");
        publish(ch, inbound, id, sender, chat, content, media, metadata).await
    }
    .instrument(span)
    .await
}

/// A member joined a group: 0.3.5's `[group event]` line, through the same `allowFrom`.
async fn on_join(
    ch: &NapcatChannel,
    inbound: &Inbound,
    conn: &Conn,
    me: &str,
    ev: &Value,
) -> anyhow::Result<()> {
    let (Some(group), Some(user)) = (id_of(&ev["group_id"]), id_of(&ev["user_id"])) else {
        return Ok(());
    };
    if user == me || !allowed(ch, &user).await? {
        return Ok(());
    }
    let params =
        json!({"group_id": as_number(&group), "user_id": as_number(&user), "no_cache": true});
    let name = match conn.call("get_group_member_info", params).await {
        Ok(info) => [&info["card"], &info["nickname"]]
            .into_iter()
            .find_map(|v| v.as_str().filter(|s| !s.is_empty()).map(str::to_string))
            .unwrap_or_else(|| user.clone()),
        Err(e) => {
            tracing::warn!(bot = %ch.bot_id, error = %e, "napcat get_group_member_info failed");
            user.clone()
        }
    };
    let time = id_of(&ev["time"]).unwrap_or_default();
    let id = format!("{CHANNEL}:{me}:join:{group}:{user}:{time}");
    let content = format!("[group event] new member {name} joined group {group}");
    let metadata = json!({"is_group": true, "event": "group_increase"});
    let chat = format!("group:{group}");
    publish(ch, inbound, id, user, chat, content, Vec::new(), metadata).await
}

#[allow(clippy::too_many_arguments)]
async fn publish(
    ch: &NapcatChannel,
    inbound: &Inbound,
    id: String,
    sender: String,
    chat: String,
    content: String,
    media: Vec<String>,
    metadata: Value,
) -> anyhow::Result<()> {
    let msg = InboundMessage {
        id,
        bot: ch.bot_id.clone(),
        channel: CHANNEL.into(),
        sender_id: sender,
        session_key: format!("{CHANNEL}:{chat}"),
        chat_id: chat,
        content,
        timestamp_ms: now_ms(),
        media,
        metadata_json: metadata.to_string(),
        stream: false,
        reply_channel: String::new(),
        reply_chat_id: String::new(),
    };
    inbound.publish(&msg).await.context("publish inbound")?;
    tracing::debug!(bot = %ch.bot_id, inbound_id = %msg.id, session = %msg.session_key, "napcat message published");
    Ok(())
}

async fn allowed(ch: &NapcatChannel, sender: &str) -> anyhow::Result<bool> {
    Ok(acl::allowed_by_list(&ch.settings.allow_from, sender)
        || ch
            .pairing
            .is_approved(CHANNEL, sender)
            .await
            .context("read pairing approvals")?)
}

/// Sends an unknown private sender its pairing code (best effort).
async fn pair(ch: &NapcatChannel, conn: &Conn, sender: &str) -> anyhow::Result<()> {
    let code = ch
        .pairing
        .code_for(CHANNEL, sender)
        .await
        .context("create a pairing code")?;
    tracing::info!(bot = %ch.bot_id, sender = %sender, "unknown private sender sent a pairing code");
    let text = nanobot_core::pairing::format_pairing_reply(&code);
    let params = json!({"user_id": as_number(sender), "message": segments::outbound(&[], &text)});
    if let Err(e) = conn.call("send_private_msg", params).await {
        tracing::warn!(bot = %ch.bot_id, error = %e, "napcat pairing reply failed");
    }
    Ok(())
}

/// Returns whether the replied-to message is the bot's (`get_msg`; a failed lookup is no).
async fn replies_to_me(conn: &Conn, reply_to: &Option<String>, me: &str) -> bool {
    let Some(id) = reply_to else {
        return false;
    };
    match conn
        .call("get_msg", json!({"message_id": as_number(id)}))
        .await
    {
        Ok(msg) => [&msg["sender"]["user_id"], &msg["user_id"]]
            .into_iter()
            .any(|v| id_of(v).as_deref() == Some(me)),
        Err(e) => {
            tracing::debug!(error = %e, "napcat get_msg of a replied-to message failed");
            false
        }
    }
}

/// Returns a numeric id as a JSON number (OneBot's ids are numbers), anything else as text.
pub(super) fn as_number(id: &str) -> Value {
    id.parse::<i64>()
        .map(Value::from)
        .unwrap_or_else(|_| id.into())
}

/// Downloads the images within `maxImageBytes` and the message's caps; returns their paths.
async fn save_images(ch: &NapcatChannel, message_id: &str, images: &[Image]) -> Vec<String> {
    let mut budget = Budget::new(ch.caps);
    let mut paths = Vec::new();
    for (i, image) in images.iter().enumerate() {
        let max = ch.cfg.max_image_bytes;
        if image.size.is_some_and(|s| s > max) {
            tracing::warn!(bot = %ch.bot_id, size = image.size, max, "napcat image over maxImageBytes skipped");
            continue;
        }
        let announced = image.size.unwrap_or(0);
        if let Err(why) = budget.take(announced) {
            tracing::info!(bot = %ch.bot_id, why = %why, "napcat image skipped");
            continue;
        }
        let cap = max.min(budget.bytes_left() + announced);
        match download(ch, &format!("{message_id}-{i}"), image, cap).await {
            Ok((path, len)) => match budget.settle(announced, len) {
                Ok(()) => paths.push(path.display().to_string()),
                Err(why) => {
                    tracing::info!(bot = %ch.bot_id, why = %why, "napcat image skipped");
                    tokio::fs::remove_file(&path).await.ok();
                }
            },
            Err(e) => {
                tracing::warn!(bot = %ch.bot_id, error = format!("{e:#}"), "napcat image download failed")
            }
        }
    }
    paths
}

/// Downloads one image (at most `max` bytes) to `{media}/{message id}-{n}_{safe name}`; kept
/// when already there, so an event handled again downloads nothing.
async fn download(
    ch: &NapcatChannel,
    id: &str,
    image: &Image,
    max: u64,
) -> anyhow::Result<(PathBuf, u64)> {
    let name = media::stored_name(id, image.file.as_deref().unwrap_or("image.jpg"));
    let path = media::path_in(&ch.media_dir, &name)?;
    if let Ok(meta) = tokio::fs::metadata(&path).await {
        return Ok((path, meta.len()));
    }
    tokio::fs::create_dir_all(&ch.media_dir)
        .await
        .context("create the media folder")?;
    let response = ch.download.get(&image.url).send().await.context("fetch")?;
    if !response.status().is_success() {
        anyhow::bail!("status {} (redirects are not followed)", response.status());
    }
    let bytes = media::read_capped(response, max).await?;
    // Written aside and renamed, so a crash never leaves a truncated file under the final name.
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
    fn a_probability_policy_answers_about_that_share_and_the_same_way_every_time() {
        let keys: Vec<String> = (0..2000)
            .map(|i| format!("{}", 1_000_000 + i * 7919))
            .collect();
        let answered = |p| {
            keys.iter()
                .filter(|k| policy_answers(GroupPolicy::Chance(p), k))
                .count()
        };
        assert_eq!(answered(0.0), 0);
        assert_eq!(answered(1.0), keys.len());
        let quarter = answered(0.25);
        assert!((350..650).contains(&quarter), "{quarter} of 2000");
        assert_eq!(quarter, answered(0.25), "deterministic");
        assert!(policy_answers(GroupPolicy::Open, "1"));
        assert!(!policy_answers(GroupPolicy::Mention, "1"));
        assert_eq!(as_number("123"), json!(123));
        assert_eq!(as_number("abc"), json!("abc"));
        assert_eq!(id_of(&json!(42)), Some("42".into()));
        assert_eq!(id_of(&json!("")), None);
    }
}
