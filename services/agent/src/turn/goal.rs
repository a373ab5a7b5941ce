//! Goal mode around a turn (upstream `session/turn_continuation.py` and the loop's
//! `_goal_continue`): a run that answers while the session's goal is still active is asked
//! to go on ([`GoalInjections`]), and a user turn whose tool budget runs out with the goal
//! still active ends without a reply and is continued by an internal message in the same
//! session ([`continuation`]), at most `MAX_CONTINUATION_ROUNDS` times per goal.
//!
//! The continuation message is published before the turn commits, with an id made of the
//! goal's root message id and the round, so JetStream drops a copy a redone turn publishes
//! again. A runner killed after publishing and before committing redoes the turn from its
//! checkpoint (the goal, saved with the tool rows, stays active); a continuation that
//! arrives once the goal has ended is dropped without a turn ([`stale`]). Upstream keeps it in
//! an in-memory queue, lost with its process.

use serde_json::{Map, Value, json};

use nanobot_core::goal::{self, CONTINUATION_KIND, CONTINUATION_KIND_META, CONTINUATION_META};
use nanobot_core::runner::Injections;
use nanobot_proto::InboundMessage;
use nanobot_runtime::bus::{self, BusError};

use crate::turn::checkpoints::SessionCheckpoints;
use crate::turn::follow_ups::FollowUps;

/// What a continuation's id adds to its root message's id, before its round.
const CONTINUATION_ID: &str = ":goal-continuation:";

/// Inbound metadata a continuation does not inherit from the message it continues.
const STRIPPED_META: [&str; 3] = [
    "_internal_continuation_pending",
    "goal_requested",
    "original_command",
];

/// The turn's follow-ups, then the goal's continuation when none is waiting.
pub struct GoalInjections<'a> {
    /// The session's waiting messages (chat turns).
    pub follow_ups: Option<&'a FollowUps>,
    /// The turn's metadata, holding the goal as the run changes it.
    pub sink: &'a SessionCheckpoints<'a>,
}

#[async_trait::async_trait]
impl Injections for GoalInjections<'_> {
    async fn drain(&self, max: usize) -> Vec<Value> {
        match self.follow_ups {
            Some(f) => f.drain(max).await,
            None => Vec::new(),
        }
    }

    async fn continuation(&self) -> Option<Value> {
        let text = self.sink.edit(|m| goal::answer_continuation(m)).await?;
        Some(json!({"role": "user", "content": text}))
    }
}

/// Whether a continuation arrived after its goal ended (it is dropped without a turn).
pub fn stale(continuation: bool, metadata: &Map<String, Value>) -> bool {
    continuation && !goal::is_active(metadata)
}

/// Appends the goal's runtime `block` to the last user message of a resumed turn's
/// transcript (its stored row is the bare text, so the model reads the guidance again).
pub fn append_to_last_user(messages: &mut [Value], block: &str) {
    let Some(row) = messages.iter_mut().rev().find(|m| m["role"] == "user") else {
        return;
    };
    match &mut row["content"] {
        Value::String(text) if text.is_empty() => *text = block.to_string(),
        Value::String(text) => *text = format!("{text}\n\n{block}"),
        Value::Array(parts) => parts.push(json!({"type": "text", "text": block})),
        _ => {}
    }
}

/// Whether the turn's messages end with the budget's finalization reply `content` (upstream
/// `_strip_terminal_assistant`): it is not saved when the goal continues.
pub fn strip_terminal_reply(messages: &mut Vec<Value>, content: &str) {
    let terminal = messages.last().is_some_and(|m| {
        m["role"] == "assistant" && m.get("tool_calls").is_none() && m["content"] == content
    });
    if terminal {
        messages.pop();
    }
}

/// The internal message continuing `origin`'s goal in its session (upstream
/// `maybe_continue_turn`): `prompt` from its sender `system:continuation`, round `round`.
pub fn continuation(origin: &InboundMessage, prompt: String, round: u64) -> InboundMessage {
    let mut metadata: Map<String, Value> =
        serde_json::from_str(&origin.metadata_json).unwrap_or_default();
    for key in STRIPPED_META {
        metadata.remove(key);
    }
    metadata.insert(CONTINUATION_META.into(), json!(true));
    metadata.insert(CONTINUATION_KIND_META.into(), json!(CONTINUATION_KIND));
    let root = root_id(&origin.id);
    InboundMessage {
        id: format!("{root}{CONTINUATION_ID}{round}"),
        sender_id: goal::CONTINUATION_SENDER.into(),
        content: prompt,
        media: Vec::new(),
        metadata_json: Value::Object(metadata).to_string(),
        session_key: origin.effective_session_key(),
        timestamp_ms: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64),
        ..origin.clone()
    }
}

/// The id of the user's message a continuation (or that message itself) continues.
pub fn root_id(id: &str) -> &str {
    id.split(CONTINUATION_ID).next().unwrap_or(id)
}

/// Publishes `msg` to its session's mailbox (a copy with the same id is dropped).
pub async fn publish(
    js: &async_nats::jetstream::Context,
    msg: &InboundMessage,
) -> Result<(), BusError> {
    bus::publish(js, msg.subject(), Some(&msg.id), msg).await?;
    tracing::info!(session_id = %msg.session_key, "turn budget reached; scheduled internal continuation");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::input::is_continuation;

    #[test]
    fn a_continuation_is_upstreams_internal_message_in_the_same_session() {
        let origin = InboundMessage {
            id: "m1".into(),
            bot: "b".into(),
            channel: "telegram".into(),
            sender_id: "u1".into(),
            chat_id: "42".into(),
            content: "/goal 写一本书 📚".into(),
            media: vec!["a.png".into()],
            metadata_json:
                json!({"goal_requested": true, "original_command": "/goal", "话题": "📚"})
                    .to_string(),
            ..Default::default()
        };
        let first = continuation(&origin, "继续 📚".into(), 1);
        assert_eq!(first.id, "m1:goal-continuation:1");
        assert_eq!(first.sender_id, "system:continuation");
        assert_eq!(first.session_key, "telegram:42");
        assert_eq!(first.subject(), origin.subject());
        assert!(first.media.is_empty());
        let meta: Value = serde_json::from_str(&first.metadata_json).unwrap();
        assert_eq!(
            meta,
            json!({"话题": "📚", "_internal_continuation": true, "_internal_continuation_kind": "sustained_goal"})
        );
        assert!(is_continuation(&first));
        assert!(!is_continuation(&origin));
        let second = continuation(&first, "继续".into(), 2);
        assert_eq!(second.id, "m1:goal-continuation:2");
        assert_eq!(root_id(&second.id), "m1");
        assert_eq!(root_id("m1"), "m1");
        let forged = InboundMessage {
            sender_id: "u1".into(),
            ..first.clone()
        };
        assert!(!is_continuation(&forged), "a user's message is never one");
    }

    #[test]
    fn a_resumed_turn_reads_the_goal_block_after_its_last_user_message() {
        let mut rows = vec![
            json!({"role": "system", "content": "sys"}),
            json!({"role": "user", "content": "/goal 写一本书 📚"}),
            json!({"role": "assistant", "content": null, "tool_calls": []}),
            json!({"role": "tool", "content": "ok"}),
        ];
        append_to_last_user(&mut rows, "[Goal 📚]");
        assert_eq!(rows[1]["content"], "/goal 写一本书 📚\n\n[Goal 📚]");
        let mut parts = vec![json!({"role": "user", "content": [{"type": "text", "text": "图"}]})];
        append_to_last_user(&mut parts, "[Goal 📚]");
        assert_eq!(
            parts[0]["content"][1],
            json!({"type": "text", "text": "[Goal 📚]"})
        );
    }

    #[test]
    fn a_continuation_is_stale_once_its_goal_ended() {
        let active = json!({"goal_state": {"status": "active", "objective": "写一本书 📚"}});
        let active = active.as_object().unwrap();
        let done = json!({"goal_state": {"status": "completed", "objective": "写一本书 📚"}});
        assert!(!stale(true, active));
        assert!(stale(true, done.as_object().unwrap()));
        assert!(stale(true, &Map::new()));
        assert!(
            !stale(false, &Map::new()),
            "a user's message is never dropped"
        );
    }

    #[test]
    fn only_the_budgets_own_final_reply_is_stripped() {
        let mut rows = vec![
            json!({"role": "assistant", "content": null, "tool_calls": []}),
            json!({"role": "tool", "content": "ok"}),
            json!({"role": "assistant", "content": "总结 📚"}),
        ];
        strip_terminal_reply(&mut rows, "别的");
        assert_eq!(rows.len(), 3);
        strip_terminal_reply(&mut rows, "总结 📚");
        assert_eq!(rows.len(), 2);
        strip_terminal_reply(&mut rows, "ok");
        assert_eq!(rows.len(), 2);
    }
}
