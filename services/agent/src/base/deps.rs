//! What every part of a runner shares ([`Deps`]): config, JetStream, Redis, the bots, session
//! leases and mailboxes, turn permits, running turns and the shutdown token.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::{Duration, Instant};

use async_nats::jetstream;
use nanobot_runtime::store::Store;
use redis::AsyncCommands as _;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use nanobot_core::session::SEEN_TTL_SECS;
use nanobot_runtime::config::Config;

use super::bots::{Bot, Bots};
use super::lease::Leases;
use super::mailbox::Mailbox;
use super::stop::ActiveTurns;

/// The bots removed from the registry while this runner ran (their messages get
/// `crate::handlers::registry::REMOVED_REPLY`; a bot never configured gets no reply).
pub type Removed = std::sync::RwLock<HashSet<String>>;

/// What a runner's handlers, sessions and turns share.
#[derive(Debug)]
pub struct Deps {
    /// Config.
    pub cfg: Config,
    /// JetStream.
    pub js: jetstream::Context,
    /// Redis.
    pub redis: Store,
    /// Bots by id (the registry watcher adds, changes and removes them).
    pub bots: Bots,
    /// Bots removed from the registry while this runner ran.
    pub removed: Removed,
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

    /// Returns the bot for a bot id, if this fleet serves it.
    pub fn bot(&self, id: &str) -> Option<Arc<Bot>> {
        self.bots
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(id)
            .cloned()
    }
}
