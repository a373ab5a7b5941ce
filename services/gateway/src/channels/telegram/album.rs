//! Albums in webhook mode: Telegram posts each part of a media group as its own update, the
//! parts of one chat one after the other (each once the previous was answered), and two parts
//! may reach two replicas. So a part is answered as soon as it is buffered in Redis: appended
//! to the album's list ([`keys::telegram_album`]) and noted in the token's index of open albums
//! ([`keys::telegram_albums`], scored by the time of its last part). The replica that received
//! it then waits until the list got no new part for [`QUIET`] (upstream buffers 0.6 s); the
//! one that wins the claim ([`keys::telegram_album_claim`], `SET NX`) publishes every part
//! buffered so far as one turn (its inbound id is that of its first update, so publishing it
//! again is a no-op) and removes exactly those parts.
//!
//! A replica SIGKILLed mid-buffer loses nothing: its parts are in Redis and the holder of the
//! token's lease sweeps the index ([`sweep`]), publishing any album whose last part is older
//! than [`STALE`] (a dead claim expires after [`CLAIM_TTL`]). A part pushed while its album is
//! being published stays in the list and becomes a turn of its own.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use redis::AsyncCommands as _;
use teloxide::types::{Update, UpdateKind};
use tokio_util::sync::CancellationToken;

use nanobot_proto::keys;
use nanobot_runtime::store::Store;

use super::{TelegramChannel, receive};
use crate::channels::Inbound;
use crate::channels::poison::{self, Failure};

/// How long an album must stay without a new part before it is published (upstream's 0.6 s).
const QUIET: Duration = Duration::from_millis(600);
/// How long the claim of a replica publishing an album lasts (downloads included).
const CLAIM_TTL: Duration = Duration::from_secs(20);
/// How long buffered parts are kept at most.
const KEEP: Duration = Duration::from_secs(600);
/// An open album whose last part is this old is published by the sweeper (its receiver died).
const STALE: Duration = Duration::from_secs(3);
/// How often the lease holder sweeps.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// One album: a chat and a media group id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Album {
    chat: i64,
    group: String,
}

impl Album {
    /// Returns the album `update` is a part of.
    pub(super) fn of(update: &Update) -> Option<Self> {
        match &update.kind {
            UpdateKind::Message(m) => Some(Self {
                chat: m.chat.id.0,
                group: m.media_group_id()?.0.clone(),
            }),
            _ => None,
        }
    }

    /// The member of the index of open albums.
    fn member(&self) -> String {
        format!("{}:{}", self.chat, self.group)
    }

    fn from_member(member: &str) -> Option<Self> {
        let (chat, group) = member.split_once(':')?;
        Some(Self {
            chat: chat.parse().ok()?,
            group: group.to_string(),
        })
    }

    fn list(&self, ch: &TelegramChannel) -> String {
        keys::telegram_album(&ch.bot_id, &ch.token_id, self.chat, &self.group)
    }

    fn claim(&self, ch: &TelegramChannel) -> String {
        keys::telegram_album_claim(&ch.bot_id, &ch.token_id, self.chat, &self.group)
    }
}

/// Buffers one album part in Redis and starts waiting for the rest in the background; once
/// this returns Ok the part is safe (the webhook answers 200).
pub(super) async fn buffer(
    ch: &Arc<TelegramChannel>,
    inbound: &Inbound,
    update: &Update,
    album: Album,
) -> anyhow::Result<()> {
    let mut conn = ch.redis.clone();
    let json = serde_json::to_string(update).context("encode the album part")?;
    let list = album.list(ch);
    let len: usize = conn
        .rpush(&list, json)
        .await
        .context("buffer the album part")?;
    let _: () = conn.pexpire(&list, millis(KEEP)).await?;
    let index = keys::telegram_albums(&ch.bot_id, &ch.token_id);
    let _: () = conn.zadd(&index, album.member(), now_ms()).await?;
    tokio::spawn(settle(ch.clone(), inbound.clone(), album, len));
    Ok(())
}

/// Waits until the album got no new part for [`QUIET`], then publishes it unless another
/// replica does; retries a failed publication until it succeeds.
async fn settle(ch: Arc<TelegramChannel>, inbound: Inbound, album: Album, mut seen: usize) {
    let mut conn = ch.redis.clone();
    let mut delay = QUIET;
    loop {
        tokio::time::sleep(delay).await;
        let len: usize = match conn.llen(album.list(&ch)).await {
            Ok(len) => len,
            Err(e) => {
                tracing::warn!(bot = %ch.bot_id, error = %e, "telegram album unreadable; the sweeper will publish it");
                return;
            }
        };
        if len == 0 {
            return;
        }
        if len != seen {
            seen = len;
            delay = QUIET;
            continue;
        }
        match publish(&ch, &inbound, &album).await {
            Ok(_) => return,
            Err(e) => {
                tracing::warn!(bot = %ch.bot_id, error = %ch.redact(&format!("{e:#}")), "telegram album not published yet");
                delay = (delay * 2).min(Duration::from_secs(10));
            }
        }
    }
}

/// Publishes the parts buffered so far as one turn when this replica wins the claim; returns
/// whether it did.
async fn publish(ch: &TelegramChannel, inbound: &Inbound, album: &Album) -> anyhow::Result<bool> {
    let mut conn = ch.redis.clone();
    let claim = album.claim(ch);
    let options = redis::SetOptions::default()
        .conditional_set(redis::ExistenceCheck::NX)
        .with_expiration(redis::SetExpiry::PX(
            u64::try_from(CLAIM_TTL.as_millis()).unwrap_or(u64::MAX),
        ));
    let won: Option<String> = conn.set_options(&claim, 1, options).await?;
    if won.is_none() {
        return Ok(false);
    }
    let published = publish_claimed(ch, inbound, album, &mut conn).await;
    let _: () = conn.del(&claim).await?;
    published.map(|()| true)
}

async fn publish_claimed(
    ch: &TelegramChannel,
    inbound: &Inbound,
    album: &Album,
    conn: &mut Store,
) -> anyhow::Result<()> {
    let list = album.list(ch);
    let raw: Vec<String> = conn.lrange(&list, 0, -1).await?;
    let taken = raw.len();
    // Ordered by message id; a part delivered twice is one entry.
    let mut parts: BTreeMap<(i32, u32), Update> = BTreeMap::new();
    for json in raw {
        match serde_json::from_str::<Update>(&json) {
            Ok(update) => {
                let message_id = match &update.kind {
                    UpdateKind::Message(m) => m.id.0,
                    _ => 0,
                };
                parts.insert((message_id, update.id.0), update);
            }
            Err(e) => {
                tracing::warn!(bot = %ch.bot_id, error = %e, "undecodable telegram album part dropped")
            }
        }
    }
    let parts: Vec<Update> = parts.into_values().collect();
    if !parts.is_empty() {
        match poison::guard(receive::handle(ch, inbound, &parts)).await {
            Ok(()) => {}
            // Trimmed like a published album: handling it again would fail the same way.
            Err(Failure::Poison(why)) => {
                tracing::error!(bot = %ch.bot_id, error = %ch.redact(&why), "telegram album cannot be handled; skipped");
            }
            Err(Failure::Retry(e)) => return Err(e),
        }
    }
    // Only the parts published leave the list; one pushed meanwhile stays for its own turn.
    let _: () = conn
        .ltrim(&list, isize::try_from(taken).unwrap_or(isize::MAX), -1)
        .await?;
    let left: usize = conn.llen(&list).await?;
    if left == 0 {
        let index = keys::telegram_albums(&ch.bot_id, &ch.token_id);
        let _: () = conn.zrem(&index, album.member()).await?;
    }
    tracing::debug!(bot = %ch.bot_id, parts = parts.len(), "telegram album published as one turn");
    Ok(())
}

/// Publishes, while `lost` is not cancelled, the open albums whose receiver stopped before
/// publishing them (run by the holder of the token's lease in webhook mode).
pub(super) async fn sweep(ch: &TelegramChannel, inbound: &Inbound, lost: &CancellationToken) {
    let index = keys::telegram_albums(&ch.bot_id, &ch.token_id);
    let mut conn = ch.redis.clone();
    loop {
        tokio::select! {
            _ = lost.cancelled() => return,
            _ = tokio::time::sleep(SWEEP_EVERY) => {}
        }
        let stale_before = now_ms() - millis(STALE);
        let members: Vec<String> = match conn.zrangebyscore(&index, "-inf", stale_before).await {
            Ok(members) => members,
            Err(e) => {
                tracing::warn!(bot = %ch.bot_id, error = %e, "telegram album index unreadable");
                continue;
            }
        };
        for member in members {
            let Some(album) = Album::from_member(&member) else {
                let _: redis::RedisResult<()> = conn.zrem(&index, &member).await;
                continue;
            };
            let len: usize = conn.llen(album.list(ch)).await.unwrap_or(1);
            if len == 0 {
                // Published, or expired: nothing left to do.
                let _: redis::RedisResult<()> = conn.zrem(&index, &member).await;
                continue;
            }
            match publish(ch, inbound, &album).await {
                Ok(true) => {
                    tracing::info!(bot = %ch.bot_id, chat = album.chat, "telegram album left by a stopped replica published")
                }
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!(bot = %ch.bot_id, error = %ch.redact(&format!("{e:#}")), "telegram album not published yet")
                }
            }
        }
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(millis)
        .unwrap_or(0)
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}
