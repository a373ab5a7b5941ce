//! The gateway connection under a lease: every replica tries to take [`keys::discord_gateway`];
//! the holder opens the WebSocket session (twilight's shard: HELLO, IDENTIFY, heartbeats,
//! RESUME) and handles each MESSAGE_CREATE; the others wait. A holder that loses the lease
//! (taken over after a Redis stall) drops its connection at once; one that is SIGKILLed leaves
//! a TCP connection Discord closes and a lease that expires, and another replica connects
//! within `leaseSecs`. A message being handled when the holder dies is lost unless Discord
//! replays it (it does not to a new session): the cost of one connection per token.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use twilight_gateway::{
    CloseFrame, ConfigBuilder, Event, EventTypeFlags, Intents, Shard, ShardId, StreamExt as _,
};

use nanobot_proto::keys;
use nanobot_runtime::lease::Lease;

use super::{DiscordChannel, receive};
use crate::channels::Inbound;
use crate::channels::backoff::Backoff;
use crate::channels::poison::{self, Failure};

/// Connects while this replica holds the token's lease; otherwise keeps trying to take it.
pub(super) async fn run(
    ch: Arc<DiscordChannel>,
    inbound: Inbound,
    cancel: CancellationToken,
) -> anyhow::Result<()> {
    let key = keys::discord_gateway(&ch.bot_id, &ch.token_id);
    let fence_key = keys::discord_gateway_fence(&ch.bot_id, &ch.token_id);
    let retry = (ch.leases.ttl() / 4).min(Duration::from_secs(1));
    loop {
        match ch.leases.try_acquire(&key, &fence_key).await {
            Ok(Some(lease)) => {
                tracing::info!(bot = %ch.bot_id, token_id = %ch.token_id, fence = lease.fence().counter(), "discord gateway lease taken");
                connect(&ch, &inbound, &lease, &cancel).await;
                let lost = !lease.is_held();
                lease.release().await;
                tracing::info!(bot = %ch.bot_id, token_id = %ch.token_id, lost, "discord gateway connection closed");
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(bot = %ch.bot_id, error = %e, "discord gateway lease unavailable")
            }
        }
        tokio::select! {
            _ = cancel.cancelled() => return Ok(()),
            _ = tokio::time::sleep(retry) => {}
        }
    }
}

/// Runs one gateway session until shutdown, the lease is lost, or Discord closes it for good.
async fn connect(
    ch: &DiscordChannel,
    inbound: &Inbound,
    lease: &Lease,
    cancel: &CancellationToken,
) {
    let intents = Intents::from_bits_truncate(ch.cfg.intents);
    let mut config = ConfigBuilder::new(ch.cfg.token.clone(), intents);
    if !ch.cfg.gateway_url.is_empty() {
        config = config.proxy_url(ch.cfg.gateway_url.trim_end_matches('/').to_string());
    }
    let mut shard = Shard::with_config(ShardId::ONE, config.build());
    let wanted = EventTypeFlags::READY | EventTypeFlags::MESSAGE_CREATE;
    loop {
        let next = tokio::select! {
            _ = cancel.cancelled() => break,
            _ = lease.lost().cancelled() => break,
            next = shard.next_event(wanted) => next,
        };
        match next {
            Some(Ok(Event::Ready(ready))) => {
                tracing::info!(bot = %ch.bot_id, user_id = %ready.user.id, guilds = ready.guilds.len(), "discord gateway session ready");
            }
            Some(Ok(Event::MessageCreate(message))) => {
                if !handle(ch, inbound, &message, lease, cancel).await {
                    break;
                }
            }
            Some(Ok(_)) => {}
            Some(Err(e)) => {
                tracing::warn!(bot = %ch.bot_id, error = %e, "discord gateway event unreadable")
            }
            None => {
                // twilight ends the stream on a close code that forbids reconnecting: a token
                // rejected by the gateway, or intents the application may not use.
                tracing::error!(bot = %ch.bot_id, token_id = %ch.token_id, "discord closed the gateway session for good: check the token and, for intents 32768 (message content), the Developer Portal's privileged intents");
                tokio::select! {
                    _ = cancel.cancelled() => {}
                    _ = tokio::time::sleep(Duration::from_secs(60)) => {}
                }
                return;
            }
        }
    }
    // A normal close ends the session at Discord at once (the next holder need not wait for
    // it to time out); the frame goes out on the next poll, bounded so a dead link cannot hold
    // the lease's release.
    shard.close(CloseFrame::NORMAL);
    let _ =
        tokio::time::timeout(Duration::from_secs(1), futures::StreamExt::next(&mut shard)).await;
}

/// Handles one message, retrying until its inbound message is published; false when the lease
/// was lost or shutdown began first.
async fn handle(
    ch: &DiscordChannel,
    inbound: &Inbound,
    message: &twilight_model::channel::Message,
    lease: &Lease,
    cancel: &CancellationToken,
) -> bool {
    let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(10));
    loop {
        match poison::guard(receive::handle(ch, inbound, message)).await {
            Ok(()) => return true,
            Err(Failure::Poison(why)) => {
                tracing::error!(bot = %ch.bot_id, message_id = %message.id, error = %why, "discord message cannot be handled; skipped");
                return true;
            }
            Err(Failure::Retry(e)) => {
                tracing::warn!(bot = %ch.bot_id, message_id = %message.id, error = format!("{e:#}"), retry_in = ?backoff.current(), "discord message not handled yet");
            }
        }
        tokio::select! {
            _ = cancel.cancelled() => return false,
            _ = lease.lost().cancelled() => return false,
            _ = backoff.sleep() => {}
        }
    }
}
