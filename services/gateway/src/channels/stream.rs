//! Edit-in-place streaming shared by Slack and Discord (Telegram's previews, plain text with
//! their own HTML hand-over, live in `telegram::stream`). Stream deltas are not durable: every
//! replica sees them through its observer ([`Channel::observe`](super::Channel::observe)) and
//! exactly one shows them: the first delta of a reply claims [`keys::stream_preview`]
//! (`pending`, `SET NX`); the replica that got it posts the preview and stores its message id
//! there, every other replica ignores that reply's deltas. Later deltas edit the preview at
//! most every edit interval. A preview shows what fits in one platform message (the first
//! chunk of the reply as it will be split, so within the platform's limit and cut between
//! grapheme clusters); the rest comes with the final reply. The last cluster of the text so far
//! waits for the next delta ([`measure::settled`]): a ZWJ emoji or an accent arriving in
//! pieces is never shown halved.
//!
//! The final reply, delivered durably by whichever replica ([`Streamer::finish`]), marks the
//! record `final:<id>` (so no preview edit starts after it), waits for an edit in flight
//! ([`keys::stream_preview_edit`], held around each preview edit) and then edits the preview
//! into the first chunk of the final text and sends the other chunks as new messages.
//!
//! SIGKILL: a previewing replica killed mid-stream leaves its preview (partial text) and the
//! record; the final reply, delivered by another replica, still edits that preview into the
//! final text. Killed between the claim and the post, the record stays `pending`: the final
//! reply waits [`PENDING_WAIT`] and then sends normally. Killed after the post and before the
//! id was stored, the partial preview stays next to the final reply (one Redis round trip).

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use nanobot_runtime::store::Store;
use redis::AsyncCommands as _;

use nanobot_proto::{OutboundKind, OutboundMessage, keys};

use super::SendError;
use crate::render::measure;

/// How long a stream's record lives.
pub(super) const RECORD_TTL_SECS: u64 = 3600;
/// The record while the first preview is being posted.
pub(super) const PENDING: &str = "pending";
/// The record's prefix once the final reply took the preview over (`final:<id>`, or `final`
/// when there was no preview).
pub(super) const FINAL: &str = "final";
/// How long the final reply waits for a preview being posted or edited.
pub(super) const PENDING_WAIT: Duration = Duration::from_secs(5);
/// Longest a preview edit holds the edit key (a killed editor releases it by expiry).
const EDIT_HOLD_MS: u64 = 10_000;

/// What a channel does for the previews: post one, edit one, and split a text as it sends it.
#[async_trait]
pub(super) trait Editor: Send + Sync {
    /// Posts the first preview of the reply `msg` is a delta of; returns its message id.
    async fn post_preview(&self, msg: &OutboundMessage, text: &str) -> Result<String, SendError>;

    /// Replaces the text of message `id` in `msg`'s chat.
    async fn edit(&self, msg: &OutboundMessage, id: &str, text: &str) -> Result<(), SendError>;

    /// Returns the first message `text` is sent as (what a preview can show).
    fn first_chunk(&self, text: &str) -> String;
}

/// The previews of one bot's channel on this replica, by the inbound id they answer.
#[derive(Debug)]
pub(super) struct Streamer {
    channel: &'static str,
    bot: String,
    redis: Store,
    interval: Duration,
    previews: Mutex<HashMap<String, Preview>>,
}

#[derive(Debug, Clone, PartialEq)]
enum Owner {
    /// No delta acted on yet.
    Unclaimed,
    /// This replica shows the preview, message `id`.
    Here(String),
    /// Another replica shows it (or it could not be posted): deltas are ignored.
    Elsewhere,
}

#[derive(Debug, Clone)]
struct Preview {
    text: String,
    owner: Owner,
    last_edit: Instant,
    shown: String,
}

impl Streamer {
    /// Returns the streamer of `bot`'s `channel`, editing at most every `interval`.
    pub(super) fn new(channel: &'static str, bot: &str, redis: Store, interval: Duration) -> Self {
        Self {
            channel,
            bot: bot.to_string(),
            redis,
            interval,
            previews: Mutex::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Preview>> {
        self.previews.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn key(&self, reply_to: &str) -> String {
        keys::stream_preview(&self.bot, self.channel, reply_to)
    }

    /// Acts on an observed outbound message: a delta updates the preview; the end of a stream
    /// segment or a final reply forgets it on this replica.
    pub(super) async fn observe(&self, editor: &dyn Editor, msg: &OutboundMessage) {
        match OutboundKind::try_from(msg.kind) {
            Ok(OutboundKind::StreamDelta) => self.delta(editor, msg).await,
            Ok(OutboundKind::StreamEnd | OutboundKind::Final | OutboundKind::Error) => {
                self.lock().remove(&msg.reply_to);
            }
            _ => {}
        }
    }

    async fn delta(&self, editor: &dyn Editor, msg: &OutboundMessage) {
        let preview = {
            let mut previews = self.lock();
            let entry = previews
                .entry(msg.reply_to.clone())
                .or_insert_with(|| Preview {
                    text: String::new(),
                    owner: Owner::Unclaimed,
                    last_edit: Instant::now(),
                    shown: String::new(),
                });
            entry.text.push_str(&msg.content);
            entry.clone()
        };
        let first = editor.first_chunk(measure::settled(&preview.text));
        if first.trim().is_empty() {
            return;
        }
        let key = self.key(&msg.reply_to);
        let mut conn = self.redis.clone();
        let owner = match preview.owner {
            Owner::Elsewhere => return,
            Owner::Unclaimed => {
                let owner = match claim(&mut conn, &key).await {
                    Ok(true) => match editor.post_preview(msg, &first).await {
                        Ok(id) => {
                            let _: redis::RedisResult<()> =
                                conn.set_ex(&key, &id, RECORD_TTL_SECS).await;
                            Owner::Here(id)
                        }
                        Err(e) => {
                            tracing::debug!(bot = %self.bot, channel = self.channel, error = %e, "stream preview not posted");
                            let _: redis::RedisResult<()> = conn.del(&key).await;
                            Owner::Elsewhere
                        }
                    },
                    _ => Owner::Elsewhere,
                };
                self.update(&msg.reply_to, owner, &first);
                return;
            }
            Owner::Here(id) => id,
        };
        if preview.last_edit.elapsed() < self.interval || preview.shown == first {
            return;
        }
        let edit_key = keys::stream_preview_edit(&self.bot, self.channel, &msg.reply_to);
        let held: redis::RedisResult<Option<String>> = redis::cmd("SET")
            .arg(&edit_key)
            .arg(1)
            .arg("NX")
            .arg("PX")
            .arg(EDIT_HOLD_MS)
            .query_async(&mut conn)
            .await;
        if !matches!(held, Ok(Some(_))) {
            return;
        }
        let state: Option<String> = conn.get(&key).await.ok().flatten();
        if state.is_none_or(|s| s.starts_with(FINAL)) {
            let _: redis::RedisResult<()> = conn.del(&edit_key).await;
            self.update(&msg.reply_to, Owner::Elsewhere, &first);
            return;
        }
        if let Err(e) = editor.edit(msg, &owner, &first).await {
            tracing::debug!(bot = %self.bot, channel = self.channel, error = %e, "stream preview not edited");
        }
        let _: redis::RedisResult<()> = conn.del(&edit_key).await;
        self.update(&msg.reply_to, Owner::Here(owner), &first);
    }

    fn update(&self, reply_to: &str, owner: Owner, shown: &str) {
        if let Some(p) = self.lock().get_mut(reply_to) {
            p.owner = owner;
            p.last_edit = Instant::now();
            p.shown = shown.to_string();
        }
    }

    /// Takes the preview of the reply `msg` over for the final reply: returns the preview's
    /// message id (edit it into the first chunk), or `None` when the reply was not previewed
    /// (send it normally). Idempotent: a redelivery gets the same answer.
    pub(super) async fn finish(&self, msg: &OutboundMessage) -> Result<Option<String>, SendError> {
        let key = self.key(&msg.reply_to);
        let mut conn = self.redis.clone();
        let unreadable = |e: redis::RedisError| SendError::Transient(format!("stream record: {e}"));
        let state = settled(&mut conn, &key).await.map_err(unreadable)?;
        let preview = match state.as_deref() {
            None | Some(PENDING) | Some(FINAL) => None,
            Some(s) => Some(s.strip_prefix("final:").unwrap_or(s).to_string()),
        };
        let record = match &preview {
            Some(id) => format!("{FINAL}:{id}"),
            None => FINAL.to_string(),
        };
        conn.set_ex::<_, _, ()>(&key, record, RECORD_TTL_SECS)
            .await
            .map_err(unreadable)?;
        if preview.is_some() {
            let edit_key = keys::stream_preview_edit(&self.bot, self.channel, &msg.reply_to);
            let until = Instant::now() + PENDING_WAIT;
            while Instant::now() < until {
                let editing: bool = conn.exists(&edit_key).await.map_err(unreadable)?;
                if !editing {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        Ok(preview)
    }
}

/// Claims the preview of a reply for this replica: sets its record to [`PENDING`] unless one
/// exists (`true`: this replica posts the preview).
pub(super) async fn claim(conn: &mut Store, key: &str) -> redis::RedisResult<bool> {
    let claimed: Option<String> = redis::cmd("SET")
        .arg(key)
        .arg(PENDING)
        .arg("NX")
        .arg("EX")
        .arg(RECORD_TTL_SECS)
        .query_async(conn)
        .await?;
    Ok(claimed.is_some())
}

/// Reads a preview record, waiting up to [`PENDING_WAIT`] while another replica is still
/// posting the preview (the record says [`PENDING`]).
pub(super) async fn settled(conn: &mut Store, key: &str) -> redis::RedisResult<Option<String>> {
    let deadline = Instant::now() + PENDING_WAIT;
    loop {
        let state: Option<String> = conn.get(key).await?;
        if state.as_deref() != Some(PENDING) || Instant::now() >= deadline {
            return Ok(state);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
