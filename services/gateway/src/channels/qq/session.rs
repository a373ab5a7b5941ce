//! The gateway session to resume, shared by the replicas in
//! [`keys::channel_state`]`(bot, "qq", "session:{appId}")`: `{"session_id", "seq"}`, written by
//! the lease holder (fenced) after each event it handled, so a replica that takes over after
//! the holder died sends RESUME and QQ replays what came after.

use serde::{Deserialize, Serialize};

use nanobot_proto::keys;
use nanobot_runtime::lease::Fence;
use nanobot_runtime::store::Store;
use redis::AsyncCommands as _;

use super::CHANNEL;

/// A session QQ may resume.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Saved {
    /// `session_id` of READY.
    pub session_id: String,
    /// Sequence number of the last event handled.
    pub seq: u64,
}

/// Where one app's session is kept.
#[derive(Debug, Clone)]
pub(super) struct SessionStore {
    redis: Store,
    key: String,
}

impl SessionStore {
    /// The session of `app_id` of `bot`.
    pub(super) fn new(redis: Store, bot: &str, app_id: &str) -> Self {
        let key = keys::channel_state(bot, CHANNEL, &format!("session:{app_id}"));
        Self { redis, key }
    }

    /// Returns the saved session, if any (an unreadable one is none).
    pub(super) async fn load(&self) -> redis::RedisResult<Option<Saved>> {
        let mut conn = self.redis.clone();
        let raw: Option<String> = conn.get(&self.key).await?;
        Ok(raw.and_then(|r| serde_json::from_str(&r).ok()))
    }

    /// Saves `saved` while `fence` is current; false when another holder took over.
    pub(super) async fn save(&self, fence: &Fence, saved: &Saved) -> redis::RedisResult<bool> {
        let value = serde_json::to_string(saved).unwrap_or_default();
        fence.set(&self.redis, &self.key, &value).await
    }

    /// Forgets the session (QQ said it cannot be resumed).
    pub(super) async fn clear(&self) -> redis::RedisResult<()> {
        let mut conn = self.redis.clone();
        conn.del(&self.key).await
    }
}
