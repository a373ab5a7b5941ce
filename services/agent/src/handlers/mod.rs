//! One handler per message type, dispatched by the consumer loops in `lib.rs`.

pub mod cron_fire;
pub mod inbound;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, AckKind};
use redis::AsyncCommands as _;
use redis::aio::ConnectionManager;

use nanobot_runtime::config::Config;

use crate::bots::Bot;
use crate::stop::ActiveTurns;

/// How often an in-progress turn extends its JetStream ack deadline.
const PROGRESS_EVERY: Duration = Duration::from_secs(15);
/// How long "already processed" markers are kept.
const SEEN_TTL_SECS: u64 = 7 * 24 * 3600;

/// What handlers share.
#[derive(Debug)]
pub struct Deps {
    /// Config.
    pub cfg: Config,
    /// JetStream.
    pub js: jetstream::Context,
    /// Redis.
    pub redis: ConnectionManager,
    /// Bots by id.
    pub bots: HashMap<String, Arc<Bot>>,
    /// Per-session locks so turns of one session never overlap in this runner.
    pub locks: SessionLocks,
    /// Core NATS (stop requests).
    pub nats: async_nats::Client,
    /// Turns running here, for `/stop` and `/status`.
    pub active: Arc<ActiveTurns>,
    /// When this runner started (`/status` uptime).
    pub started: Instant,
}

/// Per-session async locks, dropped when unused.
#[derive(Debug, Default)]
pub struct SessionLocks(Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>);

impl SessionLocks {
    /// Returns the lock of `key`.
    pub fn get(&self, key: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        map.entry(key.to_string()).or_default().clone()
    }

    /// Forgets the lock of `key` when nobody else holds a handle to it.
    pub fn release(&self, key: &str, lock: Arc<tokio::sync::Mutex<()>>) {
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        drop(lock);
        if map.get(key).is_some_and(|l| Arc::strong_count(l) == 1) {
            map.remove(key);
        }
    }
}

impl Deps {
    /// Returns whether `marker` was already recorded (Redis errors count as "not seen").
    pub async fn seen(&self, marker: &str) -> bool {
        let mut conn = self.redis.clone();
        conn.exists(marker).await.unwrap_or(false)
    }

    /// Records `marker` as processed.
    pub async fn mark_seen(&self, marker: &str) {
        let mut conn = self.redis.clone();
        if let Err(e) = conn.set_ex::<_, _, ()>(marker, 1, SEEN_TTL_SECS).await {
            tracing::warn!(error = %e, "failed to record processed marker");
        }
    }
}

/// Keeps a JetStream message's ack deadline extended until dropped.
pub fn keep_alive(msg: &jetstream::Message) -> tokio::task::JoinHandle<()> {
    let acker = msg.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(PROGRESS_EVERY);
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
pub fn bot<'a>(deps: &'a Deps, id: &str) -> Option<&'a Arc<Bot>> {
    deps.bots.get(id)
}
