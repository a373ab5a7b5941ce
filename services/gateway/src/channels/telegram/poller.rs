//! Long polling under a lease: every replica tries to take [`keys::telegram_poller`]; the one
//! that holds it polls `getUpdates` from the offset kept in Redis, publishes each update's
//! inbound message, then moves the offset forward under the lease's fence. A replica that loses
//! the lease drops its in-flight poll at once (closing the connection), so two polls of one
//! token never overlap while the lease is respected; a dead poller is replaced within the
//! lease time. In webhook mode the lease is held without polling: its holder edits streaming
//! previews and sweeps albums left by a stopped replica.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use redis::AsyncCommands as _;
use teloxide::payloads::GetUpdatesSetters as _;
use teloxide::requests::Requester as _;
use teloxide::types::{AllowedUpdate, Update, UpdateKind};
use teloxide::{ApiError, RequestError};
use tokio_util::sync::CancellationToken;

use nanobot_proto::keys;
use nanobot_runtime::lease::Lease;

use super::{TelegramChannel, album, receive};
use crate::channels::Inbound;
use crate::channels::poison::{self, Failure};

/// Seconds one `getUpdates` waits for updates (below teloxide's client timeout).
pub(super) const POLL_SECS: u32 = 10;
/// How long an album must stay without a new part before it is one turn (upstream's 0.6 s).
const MEDIA_GROUP_WAIT: Duration = Duration::from_millis(600);
/// Longest an album is waited for while parts keep arriving.
const MEDIA_GROUP_WAIT_MAX: Duration = Duration::from_secs(5);

/// Polls while this replica holds the token's lease; otherwise keeps trying to take it.
pub(super) async fn run(
    ch: Arc<TelegramChannel>,
    inbound: Inbound,
    cancel: CancellationToken,
    polling: bool,
) -> anyhow::Result<()> {
    let key = keys::telegram_poller(&ch.bot_id, &ch.token_id);
    let fence_key = keys::telegram_poller_fence(&ch.bot_id, &ch.token_id);
    let retry = (ch.leases.ttl() / 4).min(Duration::from_secs(1));
    loop {
        match ch.leases.try_acquire(&key, &fence_key).await {
            Ok(Some(lease)) => {
                tracing::info!(bot = %ch.bot_id, token_id = %ch.token_id, fence = lease.fence().token, "telegram poller lease taken");
                ch.holder.store(true, Ordering::Release);
                if polling {
                    poll(&ch, &inbound, &lease, &cancel).await;
                } else {
                    // Webhook mode: the holder publishes albums their receivers left behind.
                    tokio::select! {
                        _ = cancel.cancelled() => {}
                        _ = lease.lost().cancelled() => {}
                        _ = album::sweep(&ch, &inbound, lease.lost()) => {}
                    }
                }
                ch.holder.store(false, Ordering::Release);
                let lost = !lease.is_held();
                lease.release().await;
                tracing::info!(bot = %ch.bot_id, token_id = %ch.token_id, lost, "telegram poller stopped polling");
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(bot = %ch.bot_id, error = %e, "telegram poller lease unavailable")
            }
        }
        tokio::select! {
            _ = cancel.cancelled() => return Ok(()),
            _ = tokio::time::sleep(retry) => {}
        }
    }
}

async fn poll(ch: &TelegramChannel, inbound: &Inbound, lease: &Lease, cancel: &CancellationToken) {
    let offset_key = keys::telegram_offset(&ch.bot_id, &ch.token_id);
    let mut conn = ch.redis.clone();
    let mut offset: i32 = match conn.get::<_, Option<i32>>(&offset_key).await {
        Ok(offset) => offset.unwrap_or(0),
        Err(e) => {
            tracing::warn!(error = %e, "telegram offset unreadable");
            return;
        }
    };
    // A webhook left from webhook mode would make every `getUpdates` fail with 409.
    if let Err(e) = ch.api.delete_webhook().await {
        tracing::warn!(bot = %ch.bot_id, error = %ch.redact(&e.to_string()), "telegram deleteWebhook failed");
    }
    let mut delay = Duration::from_millis(200);
    // While an album arrives: (updates read when the wait began or last grew, since when).
    let mut album_wait: Option<(usize, tokio::time::Instant)> = None;
    loop {
        let timeout = if album_wait.is_some() { 0 } else { POLL_SECS };
        let request = ch
            .api
            .get_updates()
            .offset(offset)
            .timeout(timeout)
            .allowed_updates(vec![AllowedUpdate::Message]);
        let updates = tokio::select! {
            _ = cancel.cancelled() => return,
            _ = lease.lost().cancelled() => return,
            updates = request => updates,
        };
        let updates = match updates {
            Ok(updates) => updates,
            Err(RequestError::Api(ApiError::InvalidToken)) => {
                tracing::error!(bot = %ch.bot_id, token_id = %ch.token_id, "telegram rejected the bot token");
                wait(cancel, Duration::from_secs(60)).await;
                return;
            }
            Err(e) => {
                tracing::warn!(bot = %ch.bot_id, error = %ch.redact(&e.to_string()), retry_in = ?delay, "telegram getUpdates failed");
                wait(cancel, delay).await;
                delay = (delay * 2).min(Duration::from_secs(30));
                continue;
            }
        };
        delay = Duration::from_millis(200);
        // An album arrives as several updates: the offset stays put and they are read again
        // until no new one came for MEDIA_GROUP_WAIT, so its parts are one turn even when
        // they arrive in several batches.
        if updates.last().is_some_and(is_album_part) {
            let started = album_wait.map_or_else(tokio::time::Instant::now, |(_, t)| t);
            let grew = album_wait.is_none_or(|(n, _)| updates.len() > n);
            if grew && started.elapsed() < MEDIA_GROUP_WAIT_MAX {
                album_wait = Some((updates.len(), started));
                wait(cancel, MEDIA_GROUP_WAIT).await;
                continue;
            }
        }
        album_wait = None;
        for group in turns(&updates) {
            if !handle(ch, inbound, group, lease, cancel).await {
                return;
            }
            let last = group.last().map(|u| u.id.0).unwrap_or_default();
            offset = i32::try_from(last).unwrap_or(i32::MAX).saturating_add(1);
            match lease
                .fence()
                .set(&ch.redis, &offset_key, &offset.to_string())
                .await
            {
                Ok(true) => {}
                Ok(false) => {
                    tracing::warn!(bot = %ch.bot_id, "telegram poller lease taken over; stopping");
                    return;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "telegram offset not saved; stopping to re-read it");
                    return;
                }
            }
        }
    }
}

/// Handles one turn's updates, retrying until its inbound message is published (an update
/// whose handler panics is skipped, [`poison`]); false when the lease was lost or shutdown
/// began first.
async fn handle(
    ch: &TelegramChannel,
    inbound: &Inbound,
    group: &[Update],
    lease: &Lease,
    cancel: &CancellationToken,
) -> bool {
    let mut delay = Duration::from_millis(200);
    loop {
        match poison::guard(receive::handle(ch, inbound, group)).await {
            Ok(()) => return true,
            Err(Failure::Poison(why)) => {
                tracing::error!(bot = %ch.bot_id, update_id = group[0].id.0, error = %ch.redact(&why), "telegram update cannot be handled; skipped");
                return true;
            }
            Err(Failure::Retry(e)) => {
                tracing::warn!(bot = %ch.bot_id, update_id = group[0].id.0, error = %ch.redact(&format!("{e:#}")), retry_in = ?delay, "telegram update not handled yet");
            }
        }
        tokio::select! {
            _ = cancel.cancelled() => return false,
            _ = lease.lost().cancelled() => return false,
            _ = tokio::time::sleep(delay) => {}
        }
        delay = (delay * 2).min(Duration::from_secs(10));
    }
}

fn is_album_part(update: &Update) -> bool {
    matches!(&update.kind, UpdateKind::Message(m) if m.media_group_id().is_some())
}

/// Splits updates into turns: the consecutive parts of one album are one turn.
fn turns(updates: &[Update]) -> Vec<&[Update]> {
    let mut out = Vec::new();
    let mut start = 0;
    for i in 1..=updates.len() {
        let same_album = i < updates.len() && {
            let group = |u: &Update| match &u.kind {
                UpdateKind::Message(m) => m.media_group_id().cloned(),
                _ => None,
            };
            let (a, b) = (group(&updates[i - 1]), group(&updates[i]));
            a.is_some() && a == b
        };
        if !same_album {
            out.push(&updates[start..i]);
            start = i;
        }
    }
    out
}

async fn wait(cancel: &CancellationToken, delay: Duration) {
    tokio::select! {
        _ = cancel.cancelled() => {}
        _ = tokio::time::sleep(delay) => {}
    }
}
