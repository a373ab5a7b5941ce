//! Sessions in Redis, in nanobot's format: an append-only list of message rows (`role`,
//! `content`, `timestamp`, `tool_calls`, `tool_call_id`, `name`, …) plus a metadata hash
//! (`created_at`, `updated_at`, `last_consolidated`, `metadata`).

use redis::AsyncCommands as _;
use redis::aio::ConnectionManager;
use serde_json::{Map, Value};

use nanobot_proto::keys;

/// Session store errors.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// Redis failed.
    #[error("redis {op} failed for session {session}: {source}")]
    Redis {
        op: &'static str,
        session: String,
        #[source]
        source: redis::RedisError,
    },
}

/// Result alias of this module.
pub type Result<T> = std::result::Result<T, SessionError>;

/// A loaded session.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Session {
    /// Session key, e.g. `telegram:123` or `api:default`.
    pub key: String,
    /// Message rows in nanobot's session format.
    pub messages: Vec<Value>,
    /// Messages before this index are archived to `history.jsonl`.
    pub last_consolidated: usize,
    /// Free-form metadata (`runtime_checkpoint`, `pending_user_turn`, `_last_summary`, …).
    pub metadata: Map<String, Value>,
    /// ISO timestamp of creation.
    pub created_at: String,
}

/// Returns the local time in nanobot's ISO row format.
pub fn now_iso() -> String {
    chrono::Local::now()
        .format("%Y-%m-%dT%H:%M:%S%.6f")
        .to_string()
}

/// Reads and writes sessions of one bot.
#[derive(Clone)]
pub struct SessionStore {
    redis: ConnectionManager,
    bot: String,
}

impl std::fmt::Debug for SessionStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionStore")
            .field("bot", &self.bot)
            .finish_non_exhaustive()
    }
}

impl SessionStore {
    /// Returns a store for `bot`.
    pub fn new(redis: ConnectionManager, bot: &str) -> Self {
        Self {
            redis,
            bot: bot.to_string(),
        }
    }

    fn err(op: &'static str, session: &str) -> impl FnOnce(redis::RedisError) -> SessionError {
        let session = session.to_string();
        move |source| SessionError::Redis {
            op,
            session,
            source,
        }
    }

    /// Loads a session (empty when it does not exist). Unparseable rows are skipped with a
    /// warning, as upstream repairs corrupt lines.
    pub async fn load(&self, key: &str) -> Result<Session> {
        let mut conn = self.redis.clone();
        let (rows, meta): (Vec<String>, std::collections::HashMap<String, String>) = redis::pipe()
            .lrange(keys::session_messages(&self.bot, key), 0, -1)
            .hgetall(keys::session_meta(&self.bot, key))
            .query_async(&mut conn)
            .await
            .map_err(Self::err("load", key))?;
        let mut messages = Vec::with_capacity(rows.len());
        for (i, row) in rows.iter().enumerate() {
            match serde_json::from_str::<Value>(row) {
                Ok(v) if v.is_object() => messages.push(v),
                _ => tracing::warn!(session_id = %key, index = i, "skipping corrupt session row"),
            }
        }
        let metadata = meta
            .get("metadata")
            .and_then(|m| serde_json::from_str::<Map<String, Value>>(m).ok())
            .unwrap_or_default();
        let last_consolidated = meta
            .get("last_consolidated")
            .and_then(|v| v.parse::<usize>().ok())
            .unwrap_or(0)
            .min(messages.len());
        Ok(Session {
            key: key.to_string(),
            messages,
            last_consolidated,
            metadata,
            created_at: meta.get("created_at").cloned().unwrap_or_default(),
        })
    }

    /// Appends message rows and touches `updated_at` (creating the session if needed).
    pub async fn append(&self, key: &str, rows: &[Value]) -> Result<()> {
        let mut conn = self.redis.clone();
        let now = now_iso();
        let mut pipe = redis::pipe();
        pipe.atomic();
        if !rows.is_empty() {
            let encoded: Vec<String> = rows.iter().map(Value::to_string).collect();
            pipe.rpush(keys::session_messages(&self.bot, key), encoded)
                .ignore();
        }
        pipe.hset_nx(keys::session_meta(&self.bot, key), "created_at", &now)
            .ignore();
        pipe.hset(keys::session_meta(&self.bot, key), "updated_at", &now)
            .ignore();
        pipe.sadd(keys::sessions(&self.bot), key).ignore();
        pipe.query_async::<()>(&mut conn)
            .await
            .map_err(Self::err("append", key))
    }

    /// Writes the metadata map.
    pub async fn set_metadata(&self, key: &str, metadata: &Map<String, Value>) -> Result<()> {
        let mut conn = self.redis.clone();
        let encoded = Value::Object(metadata.clone()).to_string();
        conn.hset::<_, _, _, ()>(keys::session_meta(&self.bot, key), "metadata", encoded)
            .await
            .map_err(Self::err("set metadata", key))
    }

    /// Records archive progress (`last_consolidated`).
    pub async fn set_last_consolidated(&self, key: &str, index: usize) -> Result<()> {
        let mut conn = self.redis.clone();
        conn.hset::<_, _, _, ()>(
            keys::session_meta(&self.bot, key),
            "last_consolidated",
            index,
        )
        .await
        .map_err(Self::err("set last_consolidated", key))
    }

    /// Clears a session (`/new`): no messages, `last_consolidated` 0, metadata kept minus
    /// `_last_summary`.
    pub async fn clear(&self, key: &str) -> Result<()> {
        let mut conn = self.redis.clone();
        redis::pipe()
            .atomic()
            .del(keys::session_messages(&self.bot, key))
            .ignore()
            .hset(keys::session_meta(&self.bot, key), "last_consolidated", 0)
            .ignore()
            .hset(keys::session_meta(&self.bot, key), "updated_at", now_iso())
            .ignore()
            .query_async::<()>(&mut conn)
            .await
            .map_err(Self::err("clear", key))
    }

    /// Returns every session key of the bot.
    pub async fn list(&self) -> Result<Vec<String>> {
        let mut conn = self.redis.clone();
        let mut keys: Vec<String> = conn
            .smembers(keys::sessions(&self.bot))
            .await
            .map_err(Self::err("list", "*"))?;
        keys.sort();
        Ok(keys)
    }
}
