//! The per-chat log ([`keys::websocket_log`]): a Redis stream of a chat's user messages and
//! replies that every replica reads and a client resumes from by the last entry id it saw.
//!
//! Appends are idempotent: the script writes the entry and a marker
//! ([`keys::websocket_logged`], holding the entry id) in one step, so a redelivered reply or a
//! resent user message appends nothing. Retention: the newest [`MAX_ENTRIES`] entries, for
//! [`RETENTION_SECS`] after the chat's last entry. A user message also counts its bytes against
//! its client's bytes of the day ([`keys::websocket_client_bytes`]) in the same script: past
//! the cap nothing is written.

use std::sync::LazyLock;

use redis::Script;

use nanobot_proto::keys;
use nanobot_runtime::store::Store;

/// Entries a chat's log keeps (older ones are trimmed on append).
pub const MAX_ENTRIES: usize = 1000;
/// Seconds a chat's log (and each marker) lives after its last append: 7 days.
pub const RETENTION_SECS: u64 = 7 * 24 * 3600;
/// Seconds a client's byte count of the day lives after its first message.
const DAY_SECS: u64 = 24 * 3600;
/// What the append script answers when a client's bytes of the day are used up.
const OVER_CAP: &str = "over-cap";
/// Entries read per round trip.
const PAGE: usize = 100;

/// Appends an entry unless its marker exists; returns the entry id (the earlier one on a
/// repeat), or `over-cap` (nothing written) when the text would take the client's bytes of the
/// day (KEYS[4]) past ARGV[6] (0: no cap). Refreshes the chat owner's TTL with the log's.
const APPEND: &str = r"
local seen = redis.call('GET', KEYS[2])
if seen then return seen end
local cap = tonumber(ARGV[6])
if cap > 0 then
  local used = tonumber(redis.call('GET', KEYS[4]) or '0')
  if used + string.len(ARGV[4]) > cap then return 'over-cap' end
  redis.call('SET', KEYS[4], 0, 'EX', ARGV[7], 'NX')
  redis.call('INCRBY', KEYS[4], string.len(ARGV[4]))
end
local id = redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[2], '*',
  'kind', ARGV[3], 'text', ARGV[4], 'msg', ARGV[5])
redis.call('EXPIRE', KEYS[1], ARGV[1])
redis.call('SET', KEYS[2], id, 'EX', ARGV[1])
redis.call('EXPIRE', KEYS[3], ARGV[1])
return id
";
static APPEND_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(APPEND));

/// What a log entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A message the user sent.
    User,
    /// The final reply of a turn.
    Final,
    /// Progress text while a turn runs.
    Progress,
    /// A tool-call hint while a turn runs.
    ToolHint,
    /// A turn that failed (user-facing text).
    Error,
}

impl Kind {
    /// Returns the wire name (the frame's `kind`).
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::User => "user",
            Kind::Final => "final",
            Kind::Progress => "progress",
            Kind::ToolHint => "tool_hint",
            Kind::Error => "error",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        [
            Kind::User,
            Kind::Final,
            Kind::Progress,
            Kind::ToolHint,
            Kind::Error,
        ]
        .into_iter()
        .find(|k| k.as_str() == s)
    }
}

/// What an append did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Appended {
    /// The entry is in the log (now or before) with this id.
    Entry(String),
    /// Refused: the client's bytes of the day are used up; nothing was written.
    OverCap,
}

/// One entry of a chat's log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The stream entry id (`<ms>-<seq>`): the resume cursor.
    pub id: String,
    /// What it is.
    pub kind: Kind,
    /// The text (Markdown for replies).
    pub text: String,
    /// The client's message id: its own for a user message, the one answered for a reply.
    pub msg: String,
}

/// The chat logs of one bot.
#[derive(Debug, Clone)]
pub struct ChatLog {
    redis: Store,
    bot: String,
}

impl ChatLog {
    /// Returns the logs of `bot` in `redis`.
    pub fn new(redis: Store, bot: &str) -> Self {
        Self {
            redis,
            bot: bot.to_string(),
        }
    }

    /// Appends an entry to `chat`'s log once per `marker` (a message id); returns its id, or
    /// [`Appended::OverCap`] (nothing written) when `budget` (the client's tag and its bytes
    /// per day) would be exceeded.
    pub async fn append(
        &self,
        chat: &str,
        marker: &str,
        entry: (Kind, &str, &str),
        budget: Option<(&str, u64)>,
    ) -> redis::RedisResult<Appended> {
        let (kind, text, msg) = entry;
        let (client, cap) = budget.unwrap_or_default();
        let mut conn = self.redis.clone();
        let id: String = APPEND_SCRIPT
            .key(keys::websocket_log(&self.bot, chat))
            .key(keys::websocket_logged(&self.bot, marker))
            .key(keys::websocket_owner(&self.bot, chat))
            .key(keys::websocket_client_bytes(&self.bot, client))
            .arg(RETENTION_SECS)
            .arg(MAX_ENTRIES)
            .arg(kind.as_str())
            .arg(text)
            .arg(msg)
            .arg(cap)
            .arg(DAY_SECS)
            .invoke_async(&mut conn)
            .await?;
        Ok(if id == OVER_CAP {
            Appended::OverCap
        } else {
            Appended::Entry(id)
        })
    }

    /// Returns the entries of `chat` after entry id `after` (`0-0`: from the start), at most
    /// one page; call again from the last id for more.
    pub async fn after(&self, chat: &str, after: &str) -> redis::RedisResult<Vec<Entry>> {
        let mut conn = self.redis.clone();
        let raw: Vec<(String, Vec<String>)> = redis::cmd("XRANGE")
            .arg(keys::websocket_log(&self.bot, chat))
            .arg(format!("({after}"))
            .arg("+")
            .arg("COUNT")
            .arg(PAGE)
            .query_async(&mut conn)
            .await?;
        Ok(raw.into_iter().filter_map(entry).collect())
    }

    /// Returns the id of `chat`'s newest entry, `0-0` when it has none.
    pub async fn last_id(&self, chat: &str) -> redis::RedisResult<String> {
        let mut conn = self.redis.clone();
        let raw: Vec<(String, Vec<String>)> = redis::cmd("XREVRANGE")
            .arg(keys::websocket_log(&self.bot, chat))
            .arg("+")
            .arg("-")
            .arg("COUNT")
            .arg(1)
            .query_async(&mut conn)
            .await?;
        Ok(raw
            .into_iter()
            .next()
            .map_or_else(|| "0-0".to_string(), |(id, _)| id))
    }
}

/// Returns whether `id` is a stream entry id (`<ms>-<seq>`), as a client's resume cursor.
pub fn is_entry_id(id: &str) -> bool {
    let Some((ms, seq)) = id.split_once('-') else {
        return false;
    };
    let digits = |s: &str| !s.is_empty() && s.len() <= 20 && s.bytes().all(|b| b.is_ascii_digit());
    digits(ms) && digits(seq)
}

fn entry((id, fields): (String, Vec<String>)) -> Option<Entry> {
    let mut kind = None;
    let mut text = String::new();
    let mut msg = String::new();
    for pair in fields.chunks(2) {
        let [name, value] = pair else { continue };
        match name.as_str() {
            "kind" => kind = Kind::parse(value),
            "text" => text = value.clone(),
            "msg" => msg = value.clone(),
            _ => {}
        }
    }
    Some(Entry {
        id,
        kind: kind?,
        text,
        msg,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resume_cursors_are_stream_ids_only() {
        assert!(is_entry_id("1732512345678-0"));
        assert!(is_entry_id("0-0"));
        assert!(!is_entry_id("1732512345678"));
        assert!(!is_entry_id("+"));
        assert!(!is_entry_id("1-2 3"));
        assert!(!is_entry_id("-1"));
    }
}
