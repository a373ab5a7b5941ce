//! One turn's updates (a message, or an album) → at most one inbound message, as upstream:
//! group policy, ACL with pairing for unknown private senders, `/start`, the receipt reaction,
//! typing, media download and transcription.

use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use serde_json::json;
use teloxide::payloads::{SendMessageSetters as _, SetMessageReactionSetters as _};
use teloxide::requests::Requester as _;
use teloxide::types::{BotCommand, ChatId, MessageId, ReactionType, ThreadId, Update, UpdateKind};
use tracing::Instrument as _;

use nanobot_proto::InboundMessage;

use super::inbound::{self, Parsed};
use super::{CHANNEL, TelegramChannel, media};
use crate::channels::media::Budget;
use crate::channels::{Inbound, acl};

/// Upstream's command menu (`TelegramChannel.BOT_COMMANDS`, nanobot 0.3.5).
const COMMANDS: &[(&str, &str)] = &[
    ("start", "Start the bot"),
    ("new", "Start a new conversation"),
    ("compact", "Compact this chat's context"),
    ("stop", "Stop the current task"),
    ("restart", "Restart the bot"),
    ("status", "Show bot status"),
    ("history", "Show recent conversation messages"),
    ("goal", "Start a sustained objective (long-running task)"),
    ("trigger", "Create a named local trigger"),
    ("pairing", "Manage DM pairing (approve/deny/list)"),
    ("model", "Switch runtime model preset"),
    ("skill", "List enabled skills"),
    ("dream", "Run Dream memory consolidation now"),
    ("dream_log", "Show the latest Dream memory change"),
    (
        "dream_restore",
        "Restore Dream memory to an earlier version",
    ),
    ("dream_prompt", "Tell Dream how to organize memory"),
    (
        "evaluator_prompt",
        "Customize the heartbeat evaluator prompt",
    ),
    ("help", "Show available commands"),
];

/// Registers the command menu (`setMyCommands`); a failure is logged and ignored.
pub(super) async fn register_commands(ch: &TelegramChannel) {
    let commands: Vec<BotCommand> = COMMANDS
        .iter()
        .map(|(name, about)| BotCommand::new(*name, *about))
        .collect();
    if let Err(e) = ch.api.set_my_commands(commands).await {
        tracing::warn!(bot = %ch.bot_id, error = %ch.redact(&e.to_string()), "telegram setMyCommands failed");
    }
}

/// Returns the inbound id of an update: stable across re-fetches, so re-publishing it is a
/// no-op. The message id rides along for the reply's reaction and `replyToMessage`.
pub(super) fn inbound_id(update_id: u32, message_id: i32) -> String {
    format!("tg:{update_id}:{message_id}")
}

/// Returns the Telegram message id an inbound id (from [`inbound_id`]) answers.
pub(super) fn message_id_of(inbound_id: &str) -> Option<i32> {
    let rest = inbound_id.strip_prefix("tg:")?;
    rest.rsplit_once(':')?.1.parse().ok()
}

/// Handles one turn's updates; an error means nothing was published and the updates must be
/// handled again.
pub(super) async fn handle(
    ch: &TelegramChannel,
    inbound: &Inbound,
    updates: &[Update],
) -> anyhow::Result<()> {
    let Some(me) = ch.me.get() else {
        anyhow::bail!("bot identity unknown");
    };
    let mut parts: Vec<Parsed> = Vec::new();
    for update in updates {
        if let UpdateKind::Message(msg) = &update.kind
            && let Some(parsed) = inbound::parse(msg, me)
        {
            parts.push(parsed);
        }
    }
    let Some(first) = parts.first() else {
        return Ok(());
    };
    if !first.is_private && ch.cfg.group_policy != "open" && !parts.iter().any(|p| p.addressed) {
        tracing::debug!(bot = %ch.bot_id, chat = first.chat_id, "group message not addressed to the bot ignored");
        return Ok(());
    }
    // The turn's trace starts here: the ACL check, a pairing reply, the media download and
    // transcription are in the gateway's receive span (group chatter not addressed to the
    // bot opens none).
    let span = crate::channels::receive_span(&ch.bot_id, CHANNEL);
    accept(ch, inbound, updates, &parts).instrument(span).await
}

/// Handles the parsed messages of one turn's updates: the ACL, then the inbound message.
async fn accept(
    ch: &TelegramChannel,
    inbound: &Inbound,
    updates: &[Update],
    parts: &[Parsed],
) -> anyhow::Result<()> {
    let Some(first) = parts.first() else {
        return Ok(());
    };
    let chat_allowed = acl::allowed_by_list(&ch.settings.allow_from, &first.chat_id.to_string());
    let allowed = chat_allowed
        || acl::allowed_by_list(&ch.settings.allow_from, &first.sender_id)
        || ch
            .pairing
            .is_approved(CHANNEL, &first.sender_id)
            .await
            .context("read pairing approvals")?;
    if !allowed {
        if first.is_private {
            let code = ch
                .pairing
                .code_for(CHANNEL, &first.sender_id)
                .await
                .context("create a pairing code")?;
            tracing::info!(bot = %ch.bot_id, sender = %first.sender_id, "unknown private sender sent a pairing code");
            reply_plain(
                ch,
                first,
                &nanobot_core::pairing::format_pairing_reply(&code),
            )
            .await;
        } else {
            tracing::warn!(bot = %ch.bot_id, sender = %first.sender_id, chat = first.chat_id, "message from a sender not in allowFrom ignored");
        }
        return Ok(());
    }
    if first.command.as_deref() == Some("start") {
        let text = format!(
            "👋 Hi {}! I'm nanobot.\n\nSend me a message and I'll respond!\nType /help to see available commands.",
            first.first_name
        );
        reply_plain(ch, first, &text).await;
        return Ok(());
    }
    react(ch, first).await;
    ch.typing.start(
        &ch.api,
        first.chat_id,
        inbound::thread_of(&first.session_key),
    );
    let (attachments, paths) = save_media(ch, parts).await?;
    let update_id = updates[0].id.0;
    let msg = InboundMessage {
        id: inbound_id(update_id, first.message_id),
        bot: ch.bot_id.clone(),
        channel: CHANNEL.into(),
        sender_id: first.sender_id.clone(),
        chat_id: first.chat_id.to_string(),
        content: inbound::content(first, &attachments),
        timestamp_ms: now_ms(),
        media: paths,
        metadata_json: json!({
            "message_id": first.message_id,
            "update_id": update_id,
            "is_group": !first.is_private,
        })
        .to_string(),
        session_key: first.session_key.clone(),
        stream: ch.cfg.streaming,
        reply_channel: String::new(),
        reply_chat_id: String::new(),
    };
    inbound.publish(&msg).await.context("publish inbound")?;
    tracing::debug!(bot = %ch.bot_id, inbound_id = %msg.id, session = %msg.session_key, "telegram message published");
    Ok(())
}

/// Downloads every part's attachments within the message's caps: the `[image: path]` (or
/// transcription) lines and the saved paths. One skipped (over a cap, refused by Telegram)
/// is a `[image: name - skipped: why]` line; an error means the update is handled again.
async fn save_media(
    ch: &TelegramChannel,
    parts: &[Parsed],
) -> anyhow::Result<(Vec<String>, Vec<String>)> {
    let mut budget = Budget::new(ch.caps);
    let mut attachments = Vec::new();
    let mut paths = Vec::new();
    for media in parts.iter().flat_map(|p| &p.media) {
        let saved = match media::save(ch, media, &mut budget).await {
            Ok(saved) => saved,
            Err(media::NotSaved::Skipped(why)) => {
                tracing::info!(bot = %ch.bot_id, kind = media.kind.tag(), size = media.size, why = %why, "telegram attachment skipped");
                attachments.push(format!("[{}: {why}]", media.kind.tag()));
                continue;
            }
            Err(media::NotSaved::Failed(e)) => return Err(e.context("save an attachment")),
        };
        // As upstream: a transcribed voice note or audio is its transcription; the tag
        // with the path stays only when there is none.
        let transcript = match media.kind.is_audio() {
            true => media::transcribe(ch, &saved).await,
            false => None,
        };
        attachments.push(match transcript {
            Some(text) => format!("[transcription: {text}]"),
            None => format!("[{}: {}]", media.kind.tag(), saved.display()),
        });
        paths.push(saved.display().to_string());
    }
    Ok((attachments, paths))
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Sets the receipt reaction (best effort).
async fn react(ch: &TelegramChannel, msg: &Parsed) {
    if ch.cfg.react_emoji.is_empty() {
        return;
    }
    let reaction = ReactionType::Emoji {
        emoji: ch.cfg.react_emoji.clone(),
    };
    let sent = ch
        .api
        .set_message_reaction(ChatId(msg.chat_id), MessageId(msg.message_id))
        .reaction(vec![reaction])
        .await;
    if let Err(e) = sent {
        tracing::debug!(bot = %ch.bot_id, error = %ch.redact(&e.to_string()), "telegram reaction failed");
    }
}

/// Answers `msg` directly with plain text (pairing codes, `/start`), best effort.
async fn reply_plain(ch: &TelegramChannel, msg: &Parsed, text: &str) {
    let mut request = ch.api.send_message(ChatId(msg.chat_id), text);
    if let Some(thread) = inbound::thread_of(&msg.session_key) {
        request = request.message_thread_id(ThreadId(MessageId(thread)));
    }
    if let Err(e) = request.await {
        tracing::warn!(bot = %ch.bot_id, error = %ch.redact(&e.to_string()), "telegram direct reply failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inbound_ids_are_stable_per_update_and_carry_the_message_id() {
        assert_eq!(inbound_id(10, 7), "tg:10:7");
        assert_eq!(inbound_id(10, 7), inbound_id(10, 7));
        assert_ne!(inbound_id(10, 7), inbound_id(11, 7));
        assert_eq!(message_id_of("tg:10:7"), Some(7));
        assert_eq!(message_id_of("api:x"), None);
        let names: Vec<&str> = COMMANDS.iter().map(|(n, _)| *n).collect();
        // nanobot 0.3.5's menu, in its order.
        assert_eq!(
            names.join(" "),
            "start new compact stop restart status history goal trigger pairing model skill \
             dream dream_log dream_restore dream_prompt evaluator_prompt help"
        );
        assert!(
            names
                .iter()
                .all(|n| n.chars().all(|c| c.is_ascii_lowercase() || c == '_'))
        );
    }
}
