//! A session's mailbox is its subject in the inbound work-queue stream
//! (`subjects::inbound(bot, channel, session)`): the lease holder reads the session's messages
//! in stream order with direct gets past the session's cursor, so turns run in arrival order
//! whichever runner received each message, and follow-ups are read from there mid-turn.

use std::sync::Mutex;

use async_nats::jetstream::{self, stream::DirectGetErrorKind};
use prost::Message as _;
use serde_json::{Value, json};

use nanobot_core::runner::Injections;
use nanobot_proto::{InboundMessage, keys, subjects};
use nanobot_runtime::store::Store;
use redis::AsyncCommands as _;

use crate::commands::{self, Parsed};

/// Reads sessions' messages from the inbound stream.
#[derive(Debug, Clone)]
pub struct Mailbox {
    stream: jetstream::stream::Stream,
}

/// One message of a session's mailbox.
#[derive(Debug, Clone)]
pub struct Entry {
    /// Stream sequence.
    pub seq: u64,
    /// The message; `None` when it cannot be decoded (it is skipped).
    pub message: Option<InboundMessage>,
}

impl Mailbox {
    /// Opens the inbound stream.
    pub async fn open(js: &jetstream::Context) -> anyhow::Result<Self> {
        let stream = js.get_stream(subjects::INBOUND_STREAM).await?;
        Ok(Self { stream })
    }

    /// Returns the first message on `subject` with a sequence above `after`.
    pub async fn next_after(&self, subject: &str, after: u64) -> anyhow::Result<Option<Entry>> {
        match self
            .stream
            .direct_get_next_for_subject(subject, Some(after + 1))
            .await
        {
            Ok(m) => Ok(Some(Entry {
                seq: m.sequence,
                message: InboundMessage::decode(m.payload).ok(),
            })),
            Err(e) if e.kind() == DirectGetErrorKind::NotFound => Ok(None),
            Err(e) => Err(anyhow::anyhow!("read session mailbox {subject}: {e}")),
        }
    }
}

/// Whether a mailbox entry is answered by a turn of its own, or skipped by the drainer
/// (undecodable, or a priority command its receiver already answered).
pub fn needs_turn(entry: &Entry) -> bool {
    entry.message.as_ref().is_some_and(|m| {
        !matches!(
            commands::parse(&m.content),
            Parsed::Command(commands::Command::Stop | commands::Command::Status)
        )
    })
}

/// Follow-ups of a running turn, read from its session's mailbox past the turn's message.
pub struct FollowUps {
    mailbox: Mailbox,
    subject: String,
    state: Mutex<Taken>,
    redis: Store,
    bot: String,
    session_key: String,
    turn_id: String,
}

impl std::fmt::Debug for FollowUps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FollowUps")
            .field("subject", &self.subject)
            .field("taken", &self.taken())
            .finish_non_exhaustive()
    }
}

/// What a turn took from its mailbox.
#[derive(Debug, Clone, Default)]
pub struct Taken {
    /// The last stream sequence consumed (injected or skipped).
    pub last_seq: u64,
    /// Ids of the injected messages.
    pub ids: Vec<String>,
}

impl FollowUps {
    /// Follow-ups of the turn of message `turn_id` (bot `bot`, session `session_key`), on
    /// `subject` after `seq`.
    pub fn new(
        mailbox: Mailbox,
        redis: Store,
        bot: &str,
        session_key: &str,
        turn_id: &str,
        subject: &str,
        seq: u64,
    ) -> Self {
        Self {
            mailbox,
            subject: subject.to_string(),
            state: Mutex::new(Taken {
                last_seq: seq,
                ids: Vec::new(),
            }),
            redis,
            bot: bot.to_string(),
            session_key: session_key.to_string(),
            turn_id: turn_id.to_string(),
        }
    }

    /// Whether `id` is a copy of this turn's message, of a follow-up already taken, or of a
    /// message answered before (a channel resending it).
    async fn answered(&self, id: &str) -> bool {
        if id == self.turn_id || self.taken().ids.iter().any(|t| t == id) {
            return true;
        }
        let mut conn = self.redis.clone();
        conn.exists(keys::inbound_seen(&self.bot, &self.session_key, id))
            .await
            .unwrap_or(false)
    }

    /// Continues from what a previous attempt at this turn took and saved.
    pub fn resume(&self, taken: Taken) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if taken.last_seq > state.last_seq {
            *state = taken;
        }
    }

    /// What was taken so far.
    pub fn taken(&self) -> Taken {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

#[async_trait::async_trait]
impl Injections for FollowUps {
    async fn drain(&self, max: usize) -> Vec<Value> {
        let mut rows = Vec::new();
        let mut after = self.taken().last_seq;
        while rows.len() < max {
            let entry = match self.mailbox.next_after(&self.subject, after).await {
                Ok(Some(e)) => e,
                Ok(None) => break,
                Err(e) => {
                    tracing::warn!("failed to read follow-ups: {e:#}");
                    break;
                }
            };
            let duplicate = match &entry.message {
                Some(m) => self.answered(&m.id).await,
                None => false,
            };
            let mut taken = self.state.lock().unwrap_or_else(|e| e.into_inner());
            if duplicate || !needs_turn(&entry) {
                taken.last_seq = entry.seq;
                after = entry.seq;
                continue;
            }
            let Some(msg) = entry.message else { break };
            // A slash command runs as its own turn after this one.
            if !matches!(commands::parse(&msg.content), Parsed::Text) {
                break;
            }
            let mut row = json!({"role": "user", "content": msg.content});
            if !msg.media.is_empty() {
                row["media"] = json!(msg.media);
            }
            rows.push(row);
            taken.last_seq = entry.seq;
            taken.ids.push(msg.id);
            after = entry.seq;
        }
        rows
    }
}
