//! One handler per message type, dispatched by the consumer loops in `lib.rs`; `session`
//! holds what they share: waiting for a session's lease and draining its mailbox. A handled
//! message is acknowledged by [`settle`].

pub mod cron_fire;
pub mod heartbeat;
pub mod inbound;
pub mod session;
pub mod subagent;

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, AckKind};
use nanobot_runtime::store::Store;
use redis::AsyncCommands as _;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use nanobot_core::session::SEEN_TTL_SECS;
use nanobot_runtime::config::Config;

use crate::bots::Bot;
use crate::lease::Leases;
use crate::mailbox::Mailbox;
use crate::stop::ActiveTurns;

/// How often an in-progress message extends its JetStream ack deadline, as a fraction of it.
const PROGRESS_FRACTION: u32 = 3;

/// What handlers share.
#[derive(Debug)]
pub struct Deps {
    /// Config.
    pub cfg: Config,
    /// JetStream.
    pub js: jetstream::Context,
    /// Redis.
    pub redis: Store,
    /// Bots by id (the registry watcher adds, changes and removes them).
    pub bots: crate::bots::Bots,
    /// Bots removed from the registry while this runner ran.
    pub removed: crate::registry::Removed,
    /// Session leases.
    pub leases: Leases,
    /// Sessions' mailboxes (the inbound stream).
    pub mailbox: Mailbox,
    /// Turns running here (`runner.maxConcurrentTurns` permits).
    pub turns: Arc<Semaphore>,
    /// Messages waiting here for a session another runner holds.
    pub waiting: AtomicUsize,
    /// Core NATS (stop requests).
    pub nats: async_nats::Client,
    /// Turns running here, for `/stop` and `/status`.
    pub active: Arc<ActiveTurns>,
    /// When this runner started (`/status` uptime).
    pub started: Instant,
    /// Cancelled at shutdown: waiting stops, running turns finish.
    pub cancel: CancellationToken,
}

impl Deps {
    /// Returns whether `marker` was already recorded. A Redis error is an error, never "not
    /// seen": during a failover that would run an answered message a second time.
    pub async fn seen(&self, marker: &str) -> redis::RedisResult<bool> {
        let mut conn = self.redis.clone();
        conn.exists(marker).await
    }

    /// Records `marker` as processed.
    pub async fn mark_seen(&self, marker: &str) {
        let mut conn = self.redis.clone();
        match conn.set_ex::<_, _, ()>(marker, 1, SEEN_TTL_SECS).await {
            Ok(()) => self.redis.replicate(marker).await,
            Err(e) => tracing::warn!(error = %e, "failed to record processed marker"),
        }
    }

    /// How long JetStream waits for an ack before redelivering to another runner.
    pub fn ack_wait(&self) -> Duration {
        Duration::from_secs_f64(self.cfg.runner.redeliver_after_secs)
    }
}

/// Keeps a JetStream message's ack deadline extended until dropped.
pub fn keep_alive(msg: &jetstream::Message, ack_wait: Duration) -> tokio::task::JoinHandle<()> {
    let acker = msg.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(ack_wait / PROGRESS_FRACTION);
        tick.tick().await;
        loop {
            tick.tick().await;
            if acker.ack_with(AckKind::Progress).await.is_err() {
                break;
            }
        }
    })
}

/// Terminates a message that can never be processed (undecodable, unknown bot).
pub async fn terminate(msg: &jetstream::Message, why: &str) {
    tracing::warn!(subject = %msg.subject, reason = why, "dropping message");
    if let Err(e) = msg.ack_with(AckKind::Term).await {
        tracing::warn!(error = %e, "failed to terminate message");
    }
}

/// Returns the bot for a bot id, if this fleet serves it.
pub fn bot(deps: &Deps, id: &str) -> Option<Arc<Bot>> {
    deps.bots
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .get(id)
        .cloned()
}

/// Acknowledges `msg` after `outcome`: acked when answered, otherwise redelivered soon (on
/// shutdown at once, to another runner).
pub async fn settle(deps: &Deps, msg: &jetstream::Message, outcome: anyhow::Result<()>) {
    let result = match outcome {
        Ok(()) => msg.ack().await,
        Err(e) => {
            let delay = if deps.cancel.is_cancelled() {
                Duration::ZERO
            } else {
                tracing::warn!("message not answered yet, redelivering later: {e:#}");
                Duration::from_secs(1)
            };
            msg.ack_with(AckKind::Nak(Some(delay))).await
        }
    };
    if let Err(e) = result {
        tracing::warn!(error = %e, "failed to acknowledge message");
    }
}
