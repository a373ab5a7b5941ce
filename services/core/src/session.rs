//! Sessions in Redis, in nanobot's format: an append-only list of message rows (`role`,
//! `content`, `timestamp`, `tool_calls`, `tool_call_id`, `name`, …) plus a metadata hash
//! (`created_at`, `updated_at`, `last_consolidated`, `metadata`).

use nanobot_runtime::store::Store;
use redis::AsyncCommands as _;
use serde_json::{Map, Value};

use nanobot_proto::keys;

pub mod import;
pub mod meta;
mod scripts;

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
    /// The write carried a fencing token that is no longer current: another runner holds the
    /// session now.
    #[error("session {session} is held by another runner (lease lost); write refused")]
    Fenced { session: String },
}

/// Rows before the archive boundary a turn loads besides the replayable ones
/// ([`SessionStore::load_recent`]): never replayed (0.3.5 replays from the boundary), but a
/// turn's checks on its session's latest rows (an announcement already stored) still see them.
pub const LOADED_ARCHIVED_ROWS: usize = 8;

/// How long "seen" markers of answered inbound messages are kept.
pub const SEEN_TTL_SECS: u64 = 7 * 24 * 3600;

pub use nanobot_runtime::lease::Fence;

/// What a turn writes when it ends (see [`SessionStore::commit`]).
#[derive(Debug, Clone, Default)]
pub struct Commit {
    /// Rows to append.
    pub rows: Vec<Value>,
    /// The session metadata to write, if it changed.
    pub metadata: Option<Map<String, Value>>,
    /// The stream sequence of the last inbound message answered.
    pub cursor: Option<u64>,
    /// The reply to keep until published (encoded by the caller).
    pub outbox: Option<Vec<u8>>,
    /// Inbound ids answered.
    pub seen: Vec<String>,
}

/// Result alias of this module.
pub type Result<T> = std::result::Result<T, SessionError>;

/// A loaded session.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Session {
    /// Session key, e.g. `telegram:123` or `api:default`.
    pub key: String,
    /// Message rows in nanobot's session format (from `first_index` on).
    pub messages: Vec<Value>,
    /// Stored index of `messages[0]`: 0 for a whole session, more for
    /// [`SessionStore::load_recent`].
    pub first_index: usize,
    /// Messages before this index are archived to `history.jsonl`.
    pub last_consolidated: usize,
    /// Free-form metadata (`runtime_checkpoint`, `pending_user_turn`, `_last_summary`, …).
    pub metadata: Map<String, Value>,
    /// ISO timestamp of creation.
    pub created_at: String,
}

/// How far a session's mailbox was answered.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Progress {
    /// The stream sequence of the last answered inbound message (0 when none).
    pub cursor: u64,
    /// The reply a committed turn left in the outbox, not known to be published yet.
    pub outbox: Option<Vec<u8>>,
}

/// What [`SessionStore::progress_reads`] answer: the cursor and the outbox.
pub type ProgressReads = (Option<u64>, Option<Vec<u8>>);

impl From<ProgressReads> for Progress {
    fn from((cursor, outbox): ProgressReads) -> Self {
        Self {
            cursor: cursor.unwrap_or(0),
            outbox,
        }
    }
}

/// A session's activity, as AutoCompact sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Activity {
    /// When it was last written (nanobot's ISO format, local time); empty when unknown.
    pub updated_at: String,
    /// Rows not archived yet.
    pub unarchived: usize,
    /// A runner holds its lease (a turn runs).
    pub busy: bool,
}

impl Session {
    /// Returns the history a turn replays, at most `cap` rows ([`crate::history::replay`]
    /// over the loaded rows).
    pub fn replay(&self, cap: usize) -> Vec<Value> {
        self.replay_within(cap, 0)
    }

    /// Returns the history a turn replays, at most `cap` rows and `max_tokens` tokens (0: no
    /// token budget; [`crate::history::replay_within`] over the loaded rows).
    pub fn replay_within(&self, cap: usize, max_tokens: usize) -> Vec<Value> {
        crate::history::replay_within(
            &self.messages,
            self.last_consolidated.saturating_sub(self.first_index),
            cap,
            max_tokens,
        )
    }
}

pub use crate::clock::now_iso;

/// Reads sessions of one bot. It cannot write: writes go through a [`SessionWriter`], which
/// only a lease holder can make ([`SessionStore::fenced`]).
#[derive(Clone)]
pub struct SessionStore {
    redis: Store,
    bot: String,
}

/// Writes sessions of one bot under a lease's fencing token: every write fails with
/// [`SessionError::Fenced`] once another runner took the session's lease. Reads go through
/// the underlying [`SessionStore`] (`Deref`).
#[derive(Clone)]
pub struct SessionWriter {
    store: SessionStore,
    fence: Fence,
    /// Sessions this writer knows to be in the bot's index (the index only grows).
    indexed: std::sync::Arc<std::sync::Mutex<std::collections::HashSet<String>>>,
}

impl std::fmt::Debug for SessionWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionWriter")
            .field("bot", &self.store.bot)
            .field("fence", &self.fence.key)
            .finish_non_exhaustive()
    }
}

impl std::ops::Deref for SessionWriter {
    type Target = SessionStore;

    fn deref(&self) -> &SessionStore {
        &self.store
    }
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
    pub fn new(redis: Store, bot: &str) -> Self {
        Self {
            redis,
            bot: bot.to_string(),
        }
    }

    /// Returns the bot whose sessions these are.
    pub fn bot(&self) -> &str {
        &self.bot
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
        Ok(Self::parse(key, 0, &rows, &meta))
    }

    /// Loads what a turn can replay: the metadata and the rows from
    /// `min(last_consolidated, len − 8)` on ([`LOADED_ARCHIVED_ROWS`]; a `last_consolidated` past
    /// the end counts as 0), at most the last `cap`, in one atomic read, so a turn's cost does
    /// not grow with the session's archived history.
    pub async fn load_recent(&self, key: &str, cap: usize) -> Result<Session> {
        let mut conn = self.redis.clone();
        let answer: redis::Value = self
            .recent_read(key, cap)
            .invoke_async(&mut conn)
            .await
            .map_err(Self::err("load", key))?;
        Self::parse_recent(key, answer)
    }

    /// [`Self::load_recent`] as one step of a caller's round trip: add it to a pipeline (run
    /// with `ignore_errors`), then pass its answer to [`Self::recent_from`].
    pub fn recent_read(&self, key: &str, cap: usize) -> redis::ScriptInvocation<'static> {
        let mut read = scripts::LOAD_RECENT.prepare_invoke();
        read.key(keys::session_meta(&self.bot, key))
            .key(keys::session_messages(&self.bot, key))
            .arg(LOADED_ARCHIVED_ROWS)
            .arg(cap.min(i64::MAX as usize));
        read
    }

    /// Returns the session in `answer`, the answer of [`Self::recent_read`] for `key` and
    /// `cap`; a server that had lost the script is asked again ([`Self::load_recent`]).
    pub async fn recent_from(
        &self,
        key: &str,
        cap: usize,
        answer: redis::Value,
    ) -> Result<Session> {
        if nanobot_runtime::store::is_noscript(&answer) {
            return self.load_recent(key, cap).await;
        }
        Self::parse_recent(key, answer)
    }

    fn parse_recent(key: &str, answer: redis::Value) -> Result<Session> {
        let (first, meta, rows): (
            usize,
            std::collections::HashMap<String, String>,
            Vec<String>,
        ) = nanobot_runtime::store::answer(answer).map_err(Self::err("load", key))?;
        Ok(Self::parse(key, first, &rows, &meta))
    }

    fn parse(
        key: &str,
        first_index: usize,
        rows: &[String],
        meta: &std::collections::HashMap<String, String>,
    ) -> Session {
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
            .unwrap_or(0);
        // A watermark past the end (corrupt metadata) would hide all history: 0.3.5 resets it.
        let last_consolidated = if last_consolidated > first_index + messages.len() {
            0
        } else {
            last_consolidated
        };
        Session {
            key: key.to_string(),
            messages,
            first_index,
            last_consolidated,
            metadata,
            created_at: meta.get("created_at").cloned().unwrap_or_default(),
        }
    }

    /// Returns a writer under `fence` (the session lease's fencing token): every write fails
    /// with [`SessionError::Fenced`] once another runner took the session's lease.
    pub fn fenced(&self, fence: Fence) -> SessionWriter {
        SessionWriter {
            store: self.clone(),
            fence,
            indexed: Default::default(),
        }
    }

    /// Returns the session's mailbox cursor (the stream sequence of the last answered inbound
    /// message; 0 when none).
    pub async fn cursor(&self, key: &str) -> Result<u64> {
        let mut conn = self.redis.clone();
        let v: Option<u64> = conn
            .get(keys::session_cursor(&self.bot, key))
            .await
            .map_err(Self::err("read cursor", key))?;
        Ok(v.unwrap_or(0))
    }

    /// Returns the session's mailbox cursor and the reply a committed turn left in its outbox,
    /// in one round trip.
    pub async fn progress(&self, key: &str) -> Result<Progress> {
        let mut conn = self.redis.clone();
        let reads: ProgressReads = self
            .progress_reads(key)
            .query_async(&mut conn)
            .await
            .map_err(Self::err("read progress", key))?;
        Ok(reads.into())
    }

    /// The reads of [`Self::progress`], to run within another round trip (taking the session's
    /// lease: `Leases::try_acquire_then`); they answer [`ProgressReads`].
    pub fn progress_reads(&self, key: &str) -> redis::Pipeline {
        let mut reads = redis::pipe();
        reads
            .get(keys::session_cursor(&self.bot, key))
            .get(keys::session_outbox(&self.bot, key));
        reads
    }

    /// Returns the reply a committed turn left in the outbox, if any.
    pub async fn outbox(&self, key: &str) -> Result<Option<Vec<u8>>> {
        let mut conn = self.redis.clone();
        conn.get(keys::session_outbox(&self.bot, key))
            .await
            .map_err(Self::err("read outbox", key))
    }

    /// Returns what AutoCompact needs to know about a session, without loading its rows.
    pub async fn activity(&self, key: &str) -> Result<Activity> {
        let mut conn = self.redis.clone();
        let meta = keys::session_meta(&self.bot, key);
        let (updated_at, last_consolidated, rows, busy): (
            Option<String>,
            Option<usize>,
            usize,
            bool,
        ) = redis::pipe()
            .hget(&meta, "updated_at")
            .hget(&meta, "last_consolidated")
            .llen(keys::session_messages(&self.bot, key))
            .exists(keys::session_lease(&self.bot, key))
            .query_async(&mut conn)
            .await
            .map_err(Self::err("activity", key))?;
        Ok(Activity {
            updated_at: updated_at.unwrap_or_default(),
            unarchived: rows.saturating_sub(last_consolidated.unwrap_or(0)),
            busy,
        })
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

impl SessionWriter {
    /// The fence key and token a write checks.
    fn token(&self) -> (&str, &str) {
        (&self.fence.key, &self.fence.token)
    }

    /// Adds `key` to the bot's session index (before its first write, so a crash in between
    /// leaves at most an index entry of an empty session; idempotent).
    async fn index(&self, key: &str) -> Result<()> {
        if self.is_indexed(key) {
            return Ok(());
        }
        let mut conn = self.store.redis.clone();
        conn.sadd::<_, _, ()>(keys::sessions(&self.store.bot), key)
            .await
            .map_err(SessionStore::err("index", key))?;
        self.indexed().insert(key.to_string());
        Ok(())
    }

    fn indexed(&self) -> std::sync::MutexGuard<'_, std::collections::HashSet<String>> {
        self.indexed.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn is_indexed(&self, key: &str) -> bool {
        self.indexed().contains(key)
    }

    /// Records that `session`, as loaded, exists (it has a `created_at`, written after the
    /// session was indexed), so this writer's commits skip indexing it again.
    pub fn note_indexed(&self, session: &Session) {
        if !session.created_at.is_empty() {
            self.indexed().insert(session.key.clone());
        }
    }

    async fn run(
        &self,
        op: &'static str,
        session: &str,
        invocation: redis::ScriptInvocation<'_>,
    ) -> Result<()> {
        let mut conn = self.store.redis.clone();
        match invocation.invoke_async::<()>(&mut conn).await {
            Ok(()) => {
                self.store
                    .redis
                    .replicate(&keys::session_meta(&self.store.bot, session))
                    .await;
                Ok(())
            }
            Err(e) if e.code() == Some(scripts::FENCED) => Err(SessionError::Fenced {
                session: session.to_string(),
            }),
            Err(e) => Err(SessionStore::err(op, session)(e)),
        }
    }

    /// Appends message rows and touches `updated_at` (creating the session if needed).
    pub async fn append(&self, key: &str, rows: &[Value]) -> Result<()> {
        self.index(key).await?;
        let (fence, token) = self.token();
        let mut inv = scripts::APPEND.prepare_invoke();
        inv.key(fence)
            .key(keys::session_messages(&self.store.bot, key))
            .key(keys::session_meta(&self.store.bot, key))
            .arg(token)
            .arg(now_iso())
            .arg(uuid::Uuid::new_v4().to_string());
        for row in rows {
            inv.arg(row.to_string());
        }
        self.run("append", key, inv).await
    }

    /// Writes the metadata map.
    pub async fn set_metadata(&self, key: &str, metadata: &Map<String, Value>) -> Result<()> {
        let encoded = Value::Object(metadata.clone()).to_string();
        self.set_field(key, "metadata", encoded).await
    }

    /// Records archive progress (`last_consolidated`).
    pub async fn set_last_consolidated(&self, key: &str, index: usize) -> Result<()> {
        self.set_field(key, "last_consolidated", index.to_string())
            .await
    }

    /// Commits an archive checkpoint in one fenced write, as 0.3.5's
    /// `commit_summary_checkpoint`: the hidden continuation row inserted at `boundary` (later
    /// rows move one down), `last_consolidated` set to it (replay resumes there) and, when
    /// given, the metadata (its `_last_summary`).
    pub async fn checkpoint(
        &self,
        key: &str,
        boundary: usize,
        metadata: Option<&Map<String, Value>>,
    ) -> Result<()> {
        let (fence, token) = self.token();
        let mut inv = scripts::CHECKPOINT.prepare_invoke();
        inv.key(fence)
            .key(keys::session_messages(&self.store.bot, key))
            .key(keys::session_meta(&self.store.bot, key))
            .arg(token)
            .arg(boundary)
            .arg(crate::history::summary_checkpoint_row().to_string())
            .arg(
                metadata
                    .map(|m| Value::Object(m.clone()).to_string())
                    .unwrap_or_default(),
            )
            .arg(uuid::Uuid::new_v4().to_string());
        self.run("checkpoint", key, inv).await
    }

    async fn set_field(&self, key: &str, field: &str, value: String) -> Result<()> {
        let (fence, token) = self.token();
        let mut inv = scripts::SET_FIELD.prepare_invoke();
        inv.key(fence)
            .key(keys::session_meta(&self.store.bot, key))
            .arg(token)
            .arg(field)
            .arg(value);
        self.run("set field", key, inv).await
    }

    /// Clears a session (`/new`): no messages, `last_consolidated` 0, metadata kept minus
    /// `_last_summary` and the file reads (upstream forgets a reset session's file state).
    pub async fn clear(&self, key: &str) -> Result<()> {
        let (fence, token) = self.token();
        let mut inv = scripts::CLEAR.prepare_invoke();
        inv.key(fence)
            .key(keys::session_messages(&self.store.bot, key))
            .key(keys::session_meta(&self.store.bot, key))
            .arg(token)
            .arg(now_iso())
            .arg(meta::LAST_SUMMARY)
            .arg(meta::FILE_READS);
        self.run("clear", key, inv).await
    }

    /// Ends a turn in one atomic, fenced write: `commit.rows` appended, the metadata written,
    /// the mailbox cursor moved forward, the reply put in the outbox, the answered messages
    /// marked seen.
    pub async fn commit(&self, key: &str, commit: &Commit) -> Result<()> {
        if !commit.rows.is_empty() || commit.metadata.is_some() {
            self.index(key).await?;
        }
        let (fence, token) = self.token();
        let mut inv = scripts::COMMIT.prepare_invoke();
        inv.key(fence)
            .key(keys::session_messages(&self.store.bot, key))
            .key(keys::session_meta(&self.store.bot, key))
            .key(keys::session_cursor(&self.store.bot, key))
            .key(keys::session_outbox(&self.store.bot, key));
        for id in &commit.seen {
            inv.key(keys::inbound_seen(&self.store.bot, key, id));
        }
        inv.arg(token)
            .arg(now_iso())
            .arg(
                commit
                    .metadata
                    .as_ref()
                    .map(|m| Value::Object(m.clone()).to_string())
                    .unwrap_or_default(),
            )
            .arg(commit.cursor.map(|c| c.to_string()).unwrap_or_default())
            .arg(commit.outbox.clone().unwrap_or_default())
            .arg(SEEN_TTL_SECS)
            .arg(commit.rows.len())
            .arg(uuid::Uuid::new_v4().to_string());
        for row in &commit.rows {
            inv.arg(row.to_string());
        }
        self.run("commit", key, inv).await
    }

    /// Writes an imported session (`nanobot sessions import`) in one fenced script: its rows,
    /// `created_at`, `updated_at`, `last_consolidated` and metadata. A session that already
    /// exists in Redis is left alone unless `force` (then it is replaced, never appended to),
    /// so importing the same file twice stores it once. Returns whether it was written.
    pub async fn import(&self, session: &import::Imported, force: bool) -> Result<bool> {
        let key = session.key.as_str();
        self.index(key).await?;
        let (fence, token) = self.token();
        let mut inv = scripts::IMPORT.prepare_invoke();
        inv.key(fence)
            .key(keys::session_messages(&self.store.bot, key))
            .key(keys::session_meta(&self.store.bot, key))
            .arg(token)
            .arg(if force { "1" } else { "0" })
            .arg(&session.created_at)
            .arg(&session.updated_at)
            .arg(session.last_consolidated)
            .arg(Value::Object(session.metadata.clone()).to_string());
        for row in &session.messages {
            inv.arg(row.to_string());
        }
        let mut conn = self.store.redis.clone();
        let written = match inv.invoke_async::<i64>(&mut conn).await {
            Ok(n) => n == 1,
            Err(e) if e.code() == Some(scripts::FENCED) => {
                return Err(SessionError::Fenced {
                    session: key.to_string(),
                });
            }
            Err(e) => return Err(SessionStore::err("import", key)(e)),
        };
        if written {
            self.store
                .redis
                .replicate(&keys::session_meta(&self.store.bot, key))
                .await;
        }
        Ok(written)
    }

    /// Empties the outbox once `payload` is published (unless it was replaced meanwhile).
    pub async fn clear_outbox(&self, key: &str, payload: &[u8]) -> Result<()> {
        let mut conn = self.store.redis.clone();
        nanobot_runtime::lease::DELETE_IF
            .key(keys::session_outbox(&self.store.bot, key))
            .arg(payload)
            .invoke_async::<i64>(&mut conn)
            .await
            .map(|_| ())
            .map_err(SessionStore::err("clear outbox", key))
    }
}

#[cfg(test)]
mod tests {
    use nanobot_runtime::testsuite::Redis;

    use super::*;

    /// Takes the lease of session `key` of bot `b`.
    async fn lease(redis: &Store, key: &str) -> nanobot_runtime::lease::Lease {
        nanobot_runtime::lease::Leases::new(
            redis.clone(),
            "test",
            std::time::Duration::from_secs(30),
        )
        .try_acquire(keys::session_lease("b", key), keys::session_fence("b", key))
        .await
        .unwrap()
        .expect("free")
    }

    #[tokio::test]
    async fn a_recent_load_reads_only_the_replayable_tail_and_replays_like_a_full_load() {
        let redis = Redis::start().await.unwrap();
        let conn = redis.conn().await.unwrap();
        let key = "cli:long";
        let lease = lease(&conn, key).await;
        let store = SessionStore::new(conn, "b").fenced(lease.fence());
        let rows: Vec<Value> = (0..500)
            .map(|i| {
                let role = if i % 2 == 0 { "user" } else { "assistant" };
                serde_json::json!({"role": role, "content": format!("m{i}")})
            })
            .collect();
        store.append(key, &rows).await.unwrap();
        store.set_last_consolidated(key, 490).await.unwrap();
        let full = store.load(key).await.unwrap();
        let recent = store
            .load_recent(key, crate::history::MAX_REPLAY_MESSAGES)
            .await
            .unwrap();
        assert_eq!(recent.first_index, 490, "from last_consolidated");
        assert_eq!(recent.messages.len(), 10);
        assert_eq!(recent.last_consolidated, 490);
        let cap = crate::history::MAX_REPLAY_MESSAGES;
        assert_eq!(recent.replay(cap), full.replay(cap));
        // Archived up to the end: the last 8 rows are loaded but, as in 0.3.5, not replayed.
        store.set_last_consolidated(key, 500).await.unwrap();
        let recent = store.load_recent(key, cap).await.unwrap();
        assert_eq!((recent.first_index, recent.messages.len()), (492, 8));
        assert_eq!(recent.replay(cap), Vec::<Value>::new());
        assert_eq!(
            recent.replay(cap),
            store.load(key).await.unwrap().replay(cap)
        );
        // Nothing archived: no count cap, everything is replayed (the token budget bounds it).
        store.set_last_consolidated(key, 0).await.unwrap();
        let recent = store.load_recent(key, cap).await.unwrap();
        assert_eq!(recent.messages.len(), 500);
        assert_eq!(recent.replay(cap).len(), 500);
        // A caller's own cap still bounds the read.
        let capped = store.load_recent(key, 120).await.unwrap();
        assert_eq!((capped.first_index, capped.messages.len()), (380, 120));
        // A watermark past the end (corrupt metadata) is reset, as 0.3.5 does: all replayed.
        store.set_last_consolidated(key, 900).await.unwrap();
        let recent = store.load_recent(key, cap).await.unwrap();
        assert_eq!((recent.first_index, recent.last_consolidated), (0, 0));
        assert_eq!(recent.replay(cap).len(), 500);
        let whole = store.load_recent(key, usize::MAX).await.unwrap();
        assert_eq!((whole.first_index, whole.messages.len()), (0, 500));
    }

    /// Writes go through a writer, and the scripts check its token whatever it is: a writer
    /// whose fence was never issued, or is no longer current, changes nothing.
    #[tokio::test]
    async fn only_the_current_fence_holder_writes_a_session() {
        let redis = Redis::start().await.unwrap();
        let conn = redis.conn().await.unwrap();
        let key = "cli:fenced";
        let reader = SessionStore::new(conn.clone(), "b");
        let row = serde_json::json!({"role": "user", "content": "hi"});
        let forged = reader.fenced(Fence {
            key: keys::session_fence("b", key),
            token: String::new(),
        });
        let refused = forged.append(key, std::slice::from_ref(&row)).await;
        assert!(
            matches!(refused, Err(SessionError::Fenced { .. })),
            "{refused:?}"
        );
        let old = lease(&conn, key).await;
        let stale = reader.fenced(old.fence());
        stale.append(key, std::slice::from_ref(&row)).await.unwrap();
        old.release().await;
        let current = reader.fenced(lease(&conn, key).await.fence());
        let refused = stale
            .commit(
                key,
                &Commit {
                    rows: vec![row.clone()],
                    ..Default::default()
                },
            )
            .await;
        assert!(
            matches!(refused, Err(SessionError::Fenced { .. })),
            "{refused:?}"
        );
        assert_eq!(reader.load(key).await.unwrap().messages.len(), 1);
        current.append(key, &[row]).await.unwrap();
        assert_eq!(reader.load(key).await.unwrap().messages.len(), 2);
    }

    #[tokio::test]
    async fn a_writer_indexes_a_new_session_once_and_a_loaded_existing_one_never() {
        let redis = Redis::start().await.unwrap();
        let mut conn = redis.conn().await.unwrap();
        let key = "cli:index";
        let reader = SessionStore::new(conn.clone(), "b");
        let row = serde_json::json!({"role": "user", "content": "hi"});
        let commit = Commit {
            rows: vec![row],
            ..Default::default()
        };
        let index = keys::sessions("b");
        let first = lease(&conn, key).await;
        let writer = reader.fenced(first.fence());
        writer.commit(key, &commit).await.unwrap();
        assert_eq!(reader.list().await.unwrap(), vec![key.to_string()]);
        // With the index gone (only for this check: nothing removes entries), the same
        // writer's next commit does not write it again; a writer that loaded the session as
        // existing does not either, and a fresh one does.
        let _: () = conn.del(&index).await.unwrap();
        writer.commit(key, &commit).await.unwrap();
        first.release().await;
        let second = lease(&conn, key).await;
        let other = reader.fenced(second.fence());
        other.note_indexed(&reader.load_recent(key, 50).await.unwrap());
        other.commit(key, &commit).await.unwrap();
        assert!(reader.list().await.unwrap().is_empty());
        second.release().await;
        let third = lease(&conn, key).await;
        let fresh = reader.fenced(third.fence());
        fresh.commit(key, &commit).await.unwrap();
        assert_eq!(reader.list().await.unwrap(), vec![key.to_string()]);
        assert_eq!(reader.load(key).await.unwrap().messages.len(), 4);
    }

    #[tokio::test]
    async fn a_cleared_session_forgets_its_summary_and_file_reads_and_keeps_other_metadata() {
        let redis = Redis::start().await.unwrap();
        let conn = redis.conn().await.unwrap();
        let key = "cli:new";
        let reader = SessionStore::new(conn.clone(), "b");
        let writer = reader.fenced(lease(&conn, key).await.fence());
        let row = serde_json::json!({"role": "user", "content": "hi"});
        writer.append(key, &[row]).await.unwrap();
        let mut metadata = Map::new();
        metadata.insert(
            meta::LAST_SUMMARY.into(),
            serde_json::json!({"text": "old"}),
        );
        metadata.insert(
            meta::FILE_READS.into(),
            serde_json::json!([{"path": "/w/a"}]),
        );
        metadata.insert("keep".into(), serde_json::json!(7));
        writer.set_metadata(key, &metadata).await.unwrap();
        writer.clear(key).await.unwrap();
        let session = reader.load(key).await.unwrap();
        assert!(session.messages.is_empty());
        assert_eq!(
            Value::Object(session.metadata),
            serde_json::json!({"keep": 7})
        );
    }

    /// A client that lost the reply sends the same invocation again (redis-rs retries on the
    /// new primary after a failover): the session must change once.
    #[tokio::test]
    async fn a_retried_write_with_the_same_write_id_changes_the_session_once() {
        let redis = Redis::start().await.unwrap();
        let mut conn = redis.conn().await.unwrap();
        let (bot, key) = ("b", "cli:retry");
        let _lease = lease(&conn, key).await;
        let token: String = conn
            .clone()
            .get(keys::session_fence(bot, key))
            .await
            .unwrap();
        let append = |write_id: &str| {
            let mut inv = scripts::APPEND.prepare_invoke();
            inv.key(keys::session_fence(bot, key))
                .key(keys::session_messages(bot, key))
                .key(keys::session_meta(bot, key))
                .arg(&token)
                .arg(now_iso())
                .arg(write_id)
                .arg(r#"{"role":"user","content":"hi"}"#);
            inv
        };
        for _ in 0..2 {
            append("w-1").invoke_async::<()>(&mut conn).await.unwrap();
        }
        let commit = |write_id: &str| {
            let mut inv = scripts::COMMIT.prepare_invoke();
            inv.key(keys::session_fence(bot, key))
                .key(keys::session_messages(bot, key))
                .key(keys::session_meta(bot, key))
                .key(keys::session_cursor(bot, key))
                .key(keys::session_outbox(bot, key))
                .arg(&token)
                .arg(now_iso())
                .arg("")
                .arg("")
                .arg("")
                .arg(SEEN_TTL_SECS)
                .arg(1)
                .arg(write_id)
                .arg(r#"{"role":"assistant","content":"hello"}"#);
            inv
        };
        for _ in 0..2 {
            commit("w-2").invoke_async::<()>(&mut conn).await.unwrap();
        }
        let rows: Vec<String> = redis::cmd("LRANGE")
            .arg(keys::session_messages(bot, key))
            .arg(0)
            .arg(-1)
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(rows.len(), 2, "{rows:?}");
        append("w-3").invoke_async::<()>(&mut conn).await.unwrap();
        let len: usize = redis::cmd("LLEN")
            .arg(keys::session_messages(bot, key))
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(len, 3, "a new write id appends");
    }
}
