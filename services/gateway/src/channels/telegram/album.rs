//! Albums in webhook mode: Telegram posts each part of a media group as its own update, and
//! two parts may reach two replicas. Each part is appended to the album's list in Redis
//! ([`keys::telegram_album`]); its request then waits until no part came for [`QUIET`]
//! (upstream buffers 0.6 s), and the replica that sees the list quiet and wins the claim
//! ([`keys::telegram_album_claim`], `SET NX`) publishes the whole album as one turn (its
//! inbound id is that of its first update, so publishing it again is a no-op) and marks it
//! done ([`keys::telegram_album_done`]). Every part's request is answered 200 only once the
//! album was accepted by JetStream.
//!
//! A replica SIGKILLed mid-buffer loses nothing: the parts are in Redis, and the requests
//! still waiting on other replicas take over once its claim expires ([`CLAIM_TTL`]); a part
//! whose own request died is delivered again by Telegram (no 200), appended again (parts are
//! de-duplicated by update id) and the album published with it.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Context as _;
use redis::AsyncCommands as _;
use teloxide::types::{Update, UpdateKind};

use nanobot_proto::keys;

use super::{TelegramChannel, receive};
use crate::channels::Inbound;

/// How long an album must stay without a new part before it is published (upstream's 0.6 s).
const QUIET: Duration = Duration::from_millis(600);
/// How long the claim of a replica publishing an album lasts (downloads included).
const CLAIM_TTL: Duration = Duration::from_secs(20);
/// How long an album's parts and done marker are kept (repeats of its updates are answered).
const KEEP: Duration = Duration::from_secs(600);
/// Longest a part's request waits for its album (then 500: Telegram delivers it again).
const WAIT_MAX: Duration = Duration::from_secs(45);

/// Returns the album (chat, media group id) `update` is a part of.
pub(super) fn album_of(update: &Update) -> Option<(i64, String)> {
    match &update.kind {
        UpdateKind::Message(m) => Some((m.chat.id.0, m.media_group_id()?.0.clone())),
        _ => None,
    }
}

/// Buffers one album part and returns once its album was published (by this replica or
/// another); an error means the part must be delivered again.
pub(super) async fn buffer(
    ch: &TelegramChannel,
    inbound: &Inbound,
    update: &Update,
    chat: i64,
    group: &str,
) -> anyhow::Result<()> {
    let list = keys::telegram_album(&ch.bot_id, &ch.token_id, chat, group);
    let claim = keys::telegram_album_claim(&ch.bot_id, &ch.token_id, chat, group);
    let done = keys::telegram_album_done(&ch.bot_id, &ch.token_id, chat, group);
    let mut conn = ch.redis.clone();
    let json = serde_json::to_string(update).context("encode the album part")?;
    let mut seen: usize = conn
        .rpush(&list, json)
        .await
        .context("buffer the album part")?;
    let _: () = conn.pexpire(&list, millis(KEEP)).await?;
    let deadline = tokio::time::Instant::now() + WAIT_MAX;
    loop {
        tokio::time::sleep(QUIET).await;
        // Done with every part seen so far (this one included): a repeat, or another replica
        // published it.
        let published: Option<usize> = conn.get(&done).await?;
        let len: usize = conn.llen(&list).await?;
        if published.is_some_and(|n| n >= len) {
            return Ok(());
        }
        if len != seen {
            seen = len;
        } else if claimed(&mut conn, &claim).await? {
            let result = publish(ch, inbound, &mut conn, &list, &done).await;
            let _: () = conn.del(&claim).await?;
            return result;
        }
        if tokio::time::Instant::now() >= deadline {
            anyhow::bail!("album not published in time");
        }
    }
}

async fn claimed(conn: &mut nanobot_runtime::store::Store, claim: &str) -> anyhow::Result<bool> {
    let options = redis::SetOptions::default()
        .conditional_set(redis::ExistenceCheck::NX)
        .with_expiration(redis::SetExpiry::PX(
            u64::try_from(CLAIM_TTL.as_millis()).unwrap_or(u64::MAX),
        ));
    let set: Option<String> = conn.set_options(claim, 1, options).await?;
    Ok(set.is_some())
}

/// Publishes every part buffered so far as one turn, then marks the album done.
async fn publish(
    ch: &TelegramChannel,
    inbound: &Inbound,
    conn: &mut nanobot_runtime::store::Store,
    list: &str,
    done: &str,
) -> anyhow::Result<()> {
    let raw: Vec<String> = conn.lrange(list, 0, -1).await?;
    let count = raw.len();
    let mut parts: BTreeMap<(i32, u32), Update> = BTreeMap::new();
    for json in raw {
        let update: Update = serde_json::from_str(&json).context("decode an album part")?;
        let message_id = match &update.kind {
            UpdateKind::Message(m) => m.id.0,
            _ => 0,
        };
        parts.insert((message_id, update.id.0), update);
    }
    // A part delivered twice is one entry; the turn's id is that of the first part.
    let ordered: Vec<Update> = parts.into_values().collect();
    receive::handle(ch, inbound, &ordered).await?;
    let _: () = conn.set_ex(done, count, KEEP.as_secs()).await?;
    tracing::debug!(bot = %ch.bot_id, parts = ordered.len(), "telegram album published as one turn");
    Ok(())
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}
