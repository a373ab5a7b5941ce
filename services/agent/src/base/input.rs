//! What a turn is asked: a decoded, classified chat message ([`Incoming`]) and the input of
//! one turn, from a chat message or an automation ([`TurnInput`]).

use prost::Message as _;
use serde_json::{Value, json};

use nanobot_core::goal::{self, CONTINUATION_META};
use nanobot_core::subagent;
use nanobot_proto::InboundMessage;

use super::command::{self, Command, Kind};

/// A decoded inbound message and what it is: the one place a message is decoded and
/// classified (by its receiver and by the drainer that reads it from the mailbox).
#[derive(Debug, Clone)]
pub struct Incoming {
    /// The message.
    pub message: InboundMessage,
    /// What it is.
    pub kind: Kind,
}

impl Incoming {
    /// Decodes and classifies a message.
    pub fn decode(payload: impl bytes::Buf) -> Result<Self, prost::DecodeError> {
        let message = InboundMessage::decode(payload)?;
        let kind = command::classify(&message.content);
        Ok(Self { message, kind })
    }
}

/// The input of a turn, from a chat message or a cron fire.
#[derive(Debug, Clone)]
pub struct TurnInput {
    /// Idempotency id (inbound message id or cron fire id).
    pub id: String,
    /// Channel the message came from.
    pub channel: String,
    /// Chat it came from.
    pub chat_id: String,
    /// Text.
    pub content: String,
    /// Attachments.
    pub media: Vec<String>,
    /// Session key.
    pub session_key: String,
    /// Stream deltas back.
    pub stream: bool,
    /// The turn runs a cron job.
    pub in_cron: bool,
    /// The task whose result the message announces (a subagent's `system` message): stored
    /// as upstream's assistant row instead of a user row.
    pub announced: Option<String>,
    /// What the message is (classified when it was decoded).
    pub kind: Kind,
    /// A user's `/goal <task>` started the turn: the goal guidance is in the model's input
    /// and `create_goal` may run.
    pub goal_requested: bool,
    /// An internal goal continuation (made by `crate::turn::goal::continuation`): its text is
    /// not stored.
    pub continuation: bool,
    /// The chat message (goal continuations are made from it).
    pub message: Option<nanobot_proto::InboundMessage>,
}

impl TurnInput {
    /// The turn of a chat message; a `system` message's turn is its origin chat's (upstream:
    /// channel and chat from its `chat_id`), so the prompt and tools never see `system`.
    pub fn chat(incoming: &Incoming) -> Self {
        let m = &incoming.message;
        let (channel, chat_id) = m.origin();
        let announced = (m.channel == nanobot_proto::SYSTEM_CHANNEL)
            .then(|| subagent::announced_task(&m.metadata_json))
            .flatten();
        Self {
            id: m.id.clone(),
            channel,
            chat_id,
            announced,
            content: m.content.clone(),
            media: m.media.clone(),
            session_key: m.effective_session_key(),
            stream: m.stream,
            in_cron: false,
            kind: incoming.kind.clone(),
            goal_requested: matches!(
                &incoming.kind,
                Kind::Command(Command::Goal(Some(task))) if !task.trim().is_empty()
            ),
            continuation: is_continuation(m),
            message: Some(m.clone()),
        }
    }

    /// An automation turn (a cron fire, the heartbeat) with id `id` in session `session_key`,
    /// on behalf of `channel`/`chat_id`.
    pub fn automation(
        id: &str,
        channel: &str,
        chat_id: &str,
        content: String,
        session_key: &str,
    ) -> Self {
        Self {
            id: id.to_string(),
            channel: channel.to_string(),
            chat_id: chat_id.to_string(),
            kind: command::classify(&content),
            content,
            media: Vec::new(),
            session_key: session_key.to_string(),
            stream: false,
            in_cron: true,
            announced: None,
            goal_requested: false,
            continuation: false,
            message: None,
        }
    }
}

/// Whether `msg` is an internal goal continuation (its flag and its sender).
pub fn is_continuation(msg: &InboundMessage) -> bool {
    msg.sender_id == goal::CONTINUATION_SENDER
        && serde_json::from_str::<Value>(&msg.metadata_json)
            .is_ok_and(|m| m[CONTINUATION_META] == json!(true))
}
