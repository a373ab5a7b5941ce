//! Follow-ups of a running turn: messages of its session that arrive while it runs, read from
//! the session's mailbox past the turn's message and injected into the run.

use std::sync::Mutex;

use redis::AsyncCommands as _;
use serde_json::{Value, json};

use nanobot_core::runner::Injections;
use nanobot_core::subagent;
use nanobot_proto::keys;
use nanobot_runtime::store::Store;

use crate::base::command::Kind;
use crate::base::input::{Incoming, is_continuation};
use crate::base::mailbox::Mailbox;

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
    /// message answered before (a channel resending it). Fails when Redis cannot say.
    async fn answered(&self, id: &str) -> redis::RedisResult<bool> {
        if id == self.turn_id || self.taken().ids.iter().any(|t| t == id) {
            return Ok(true);
        }
        let mut conn = self.redis.clone();
        conn.exists(keys::inbound_seen(&self.bot, &self.session_key, id))
            .await
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
            let duplicate = match &entry.incoming {
                Some(i) => match self.answered(&i.message.id).await {
                    Ok(answered) => answered,
                    // Left in the mailbox: taken by a later drain, or by the next turn, once
                    // Redis can tell whether it was answered.
                    Err(e) => {
                        tracing::warn!(
                            "failed to check a follow-up against answered messages: {e:#}"
                        );
                        break;
                    }
                },
                None => false,
            };
            let text = match entry.incoming {
                // A slash command runs as its own turn after this one.
                Some(Incoming {
                    kind: Kind::Command(_) | Kind::Rejected(_),
                    ..
                }) if !duplicate => break,
                // So does a goal's internal continuation (its text is never a user's row).
                Some(Incoming { message, .. }) if !duplicate && is_continuation(&message) => {
                    break;
                }
                Some(Incoming {
                    kind: Kind::Text,
                    message,
                }) if !duplicate => Some(message),
                // Undecodable, answered by its receiver (a priority command), or a copy of a
                // message answered already: skipped.
                _ => None,
            };
            let mut taken = self.state.lock().unwrap_or_else(|e| e.into_inner());
            taken.last_seq = entry.seq;
            after = entry.seq;
            let Some(msg) = text else { continue };
            // A subagent's announcement is read as the user's, stored as upstream's assistant
            // row (`history::rows_to_save`).
            let announced = (msg.channel == nanobot_proto::SYSTEM_CHANNEL)
                .then(|| subagent::announced_task(&msg.metadata_json))
                .flatten();
            let mut row = match announced {
                Some(task) => subagent::injected_row(&msg.content, &task),
                None => json!({"role": "user", "content": msg.content}),
            };
            if !msg.media.is_empty() {
                row["media"] = json!(msg.media);
            }
            rows.push(row);
            taken.ids.push(msg.id);
        }
        rows
    }
}

#[cfg(test)]
mod tests {
    use nanobot_runtime::testsuite::{Nats, Redis};
    use redis::AsyncCommands as _;

    use async_nats::jetstream;
    use nanobot_proto::InboundMessage;

    use super::*;
    use crate::base::command::Command;

    const SESSION: &str = "cli:mail";

    /// Publishes messages (text by id, or raw bytes) on one session's mailbox; returns the
    /// subject and their stream sequences.
    async fn publish(
        js: &jetstream::Context,
        messages: &[(&str, Option<&str>)],
    ) -> (String, Vec<u64>) {
        let mut subject = String::new();
        let mut seqs = Vec::new();
        for (id, text) in messages {
            let msg = InboundMessage {
                id: (*id).into(),
                bot: "b".into(),
                channel: "cli".into(),
                chat_id: "mail".into(),
                content: text.unwrap_or_default().into(),
                session_key: SESSION.into(),
                ..Default::default()
            };
            subject = msg.subject();
            let payload = match text {
                Some(_) => prost::Message::encode_to_vec(&msg),
                None => b"\xff\xff\xff".to_vec(),
            };
            let ack = js
                .publish(subject.clone(), payload.into())
                .await
                .unwrap()
                .await
                .unwrap();
            seqs.push(ack.sequence);
        }
        (subject, seqs)
    }

    async fn servers() -> (Nats, Redis, jetstream::Context, Mailbox, Store) {
        let nats = Nats::start().await.unwrap();
        let redis = Redis::start().await.unwrap();
        let js = jetstream::new(async_nats::connect(nats.url()).await.unwrap());
        nanobot_runtime::bus::init_streams(&js, 1).await.unwrap();
        let mailbox = Mailbox::open(&js).await.unwrap();
        let store = redis.conn().await.unwrap();
        (nats, redis, js, mailbox, store)
    }

    #[tokio::test]
    async fn a_mailbox_reads_its_sessions_messages_in_order_decoded_and_classified_once() {
        let (_nats, _redis, js, mailbox, _) = servers().await;
        let (subject, seqs) = publish(
            &js,
            &[
                ("m1", Some("hello")),
                ("m2", Some("/stop")),
                ("m3", None),
                ("m4", Some("/new")),
            ],
        )
        .await;
        // Another session's message is not in this mailbox.
        let other = InboundMessage {
            id: "x".into(),
            bot: "b".into(),
            channel: "cli".into(),
            chat_id: "other".into(),
            content: "elsewhere".into(),
            ..Default::default()
        };
        js.publish(
            other.subject(),
            prost::Message::encode_to_vec(&other).into(),
        )
        .await
        .unwrap()
        .await
        .unwrap();
        let mut kinds = Vec::new();
        let mut after = 0;
        while let Some(entry) = mailbox.next_after(&subject, after).await.unwrap() {
            kinds.push((entry.seq, entry.incoming.map(|i| (i.message.id, i.kind))));
            after = entry.seq;
        }
        assert_eq!(
            kinds,
            [
                (seqs[0], Some(("m1".to_string(), Kind::Text))),
                (
                    seqs[1],
                    Some(("m2".to_string(), Kind::Priority(Command::Stop)))
                ),
                (seqs[2], None),
                (
                    seqs[3],
                    Some(("m4".to_string(), Kind::Command(Command::New)))
                ),
            ]
        );
    }

    #[tokio::test]
    async fn follow_ups_inject_new_text_skip_answered_and_priority_messages_and_stop_at_a_command()
    {
        let (_nats, _redis, js, mailbox, store) = servers().await;
        let (subject, seqs) = publish(
            &js,
            &[
                ("m1", Some("first")),
                ("m1", Some("first")),
                ("m2", Some("/status")),
                ("m3", Some("answered before")),
                ("m4", None),
                ("m5", Some("more")),
                ("m6", Some("/new")),
                ("m7", Some("after the command")),
            ],
        )
        .await;
        store
            .clone()
            .set::<_, _, ()>(keys::inbound_seen("b", SESSION, "m3"), 1)
            .await
            .unwrap();
        let follow_ups = FollowUps::new(mailbox, store, "b", SESSION, "m1", &subject, seqs[0]);
        let rows = follow_ups.drain(3).await;
        assert_eq!(rows, [json!({"role": "user", "content": "more"})]);
        let taken = follow_ups.taken();
        assert_eq!(taken.ids, ["m5"]);
        assert_eq!(
            taken.last_seq, seqs[5],
            "the command waits for a turn of its own"
        );
        assert!(
            follow_ups.drain(3).await.is_empty(),
            "still stopped at the command"
        );
    }

    #[tokio::test]
    async fn a_copy_of_an_answered_message_is_not_injected_while_redis_cannot_say_it_was_answered()
    {
        let (_nats, mut redis, js, mailbox, store) = servers().await;
        let (subject, seqs) = publish(
            &js,
            &[
                ("m2", Some("turn")),
                ("m1", Some("answered before")),
                ("m3", Some("new")),
            ],
        )
        .await;
        store
            .clone()
            .set::<_, _, ()>(keys::inbound_seen("b", SESSION, "m1"), 1)
            .await
            .unwrap();
        let follow_ups = FollowUps::new(mailbox, store, "b", SESSION, "m2", &subject, seqs[0]);
        redis.kill().unwrap();
        assert!(
            follow_ups.drain(3).await.is_empty(),
            "nothing is taken while Redis is down"
        );
        assert_eq!(
            follow_ups.taken().last_seq,
            seqs[0],
            "the copy stays in the mailbox"
        );
        redis.restart().await.unwrap();
        let rows = follow_ups.drain(3).await;
        assert_eq!(rows, [json!({"role": "user", "content": "new"})]);
        assert_eq!(follow_ups.taken().ids, ["m3"]);
    }
}
