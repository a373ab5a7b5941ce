//! Lua scripts behind every session write. Each first checks the session's fencing token
//! (`ARGV[1]`): a runner whose lease was taken over, or that never held it, gets `FENCED` and
//! changes nothing, so only the current lease holder can write a session. Every key a script
//! touches belongs to one session (one hash tag, one Redis Cluster slot); the bot's session
//! index is written apart (see `SessionStore::index`).

use std::sync::LazyLock;

use redis::Script;

/// The error code a script answers a stale (or absent) fencing token with.
pub(super) const FENCED: &str = "FENCED";

/// The fence check every script starts with (`KEYS[1]` is the fence counter).
macro_rules! fenced {
    ($body:expr) => {
        concat!(
            "if redis.call('GET', KEYS[1]) ~= ARGV[1] then ",
            "return redis.error_reply('FENCED session lease lost') end\n",
            $body
        )
    };
}

/// Skips a write already applied: a client that lost the reply (a primary killed right after
/// it ran the script, then a failover) sends the same invocation again, with the same write id
/// (`ARGV[n]`), which the first run recorded in the meta hash (`KEYS[3]`, field `last_write`).
macro_rules! fenced_once {
    ($n:literal, $body:literal) => {
        fenced!(concat!(
            "if redis.call('HGET', KEYS[3], 'last_write') == ARGV[",
            $n,
            "] then return 1 end\n",
            "redis.call('HSET', KEYS[3], 'last_write', ARGV[",
            $n,
            "])\n",
            $body
        ))
    };
}

/// Appends rows and touches the session. KEYS: fence, messages, meta.
/// ARGV: token, now, write id, rows….
/// Reads the part of a session a turn can replay: KEYS meta, messages; ARGV the suffix kept
/// loaded when archived, the replay cap → `{first index, meta fields, rows}`. The rows
/// start at `max(min(last_consolidated, len - suffix), len - cap)` (a `last_consolidated`
/// past the end counts as 0), so a turn reads no archived rows beyond the suffix.
pub(super) static LOAD_RECENT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "local len = redis.call('LLEN', KEYS[2])
         local lc = tonumber(redis.call('HGET', KEYS[1], 'last_consolidated') or '0') or 0
         if lc > len then lc = 0 end
         local from = math.max(math.min(lc, len - tonumber(ARGV[1])), len - tonumber(ARGV[2]), 0)
         return {from, redis.call('HGETALL', KEYS[1]), redis.call('LRANGE', KEYS[2], from, -1)}",
    )
});

pub(super) static APPEND: LazyLock<Script> = LazyLock::new(|| {
    Script::new(fenced_once!(
        "3",
        "for i = 4, #ARGV do redis.call('RPUSH', KEYS[2], ARGV[i]) end
         redis.call('HSETNX', KEYS[3], 'created_at', ARGV[2])
         redis.call('HSET', KEYS[3], 'updated_at', ARGV[2])
         return 1"
    ))
});

/// Sets one field of the meta hash. KEYS: fence, meta. ARGV: token, field, value.
pub(super) static SET_FIELD: LazyLock<Script> = LazyLock::new(|| {
    Script::new(fenced!(
        "redis.call('HSET', KEYS[2], ARGV[2], ARGV[3]) return 1"
    ))
});

/// Commits an archive checkpoint (0.3.5 `Session.commit_summary_checkpoint`): inserts a row
/// at index `boundary` (the rows from there on move one down), sets `last_consolidated` to
/// it and writes the metadata when given. KEYS: fence, messages, meta.
/// ARGV: token, boundary, row, metadata JSON or '', write id.
pub(super) static CHECKPOINT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(fenced_once!(
        "5",
        "local b = tonumber(ARGV[2])
         local tail = redis.call('LRANGE', KEYS[2], b, -1)
         if b == 0 then redis.call('DEL', KEYS[2]) else redis.call('LTRIM', KEYS[2], 0, b - 1) end
         redis.call('RPUSH', KEYS[2], ARGV[3])
         for _, row in ipairs(tail) do redis.call('RPUSH', KEYS[2], row) end
         redis.call('HSET', KEYS[3], 'last_consolidated', b)
         if ARGV[4] ~= '' then redis.call('HSET', KEYS[3], 'metadata', ARGV[4]) end
         return 1"
    ))
});

/// Clears the messages and drops metadata fields. KEYS: fence, messages, meta. ARGV: token,
/// now, metadata fields to drop….
pub(super) static CLEAR: LazyLock<Script> = LazyLock::new(|| {
    Script::new(fenced!(
        "redis.call('DEL', KEYS[2])
         redis.call('HSET', KEYS[3], 'last_consolidated', 0)
         redis.call('HSET', KEYS[3], 'updated_at', ARGV[2])
         local raw = redis.call('HGET', KEYS[3], 'metadata')
         if raw then
           local ok, meta = pcall(cjson.decode, raw)
           if ok and type(meta) == 'table' then
             for i = 3, #ARGV do meta[ARGV[i]] = nil end
             if next(meta) == nil then
               redis.call('HSET', KEYS[3], 'metadata', '{}')
             else
               redis.call('HSET', KEYS[3], 'metadata', cjson.encode(meta))
             end
           end
         end
         return 1"
    ))
});

/// Ends a turn atomically: rows, metadata, the mailbox cursor (only forward), the reply kept
/// in the outbox until published, and "seen" markers of every answered message.
/// KEYS: fence, messages, meta, cursor, outbox, seen markers….
/// ARGV: token, now, metadata JSON or '', cursor or '', outbox payload or '',
/// seen TTL seconds, row count, write id, rows….
pub(super) static COMMIT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(fenced_once!(
        "8",
        "local n = tonumber(ARGV[7])
         for i = 9, 8 + n do redis.call('RPUSH', KEYS[2], ARGV[i]) end
         if n > 0 or ARGV[3] ~= '' then
           redis.call('HSETNX', KEYS[3], 'created_at', ARGV[2])
           redis.call('HSET', KEYS[3], 'updated_at', ARGV[2])
         end
         if ARGV[3] ~= '' then redis.call('HSET', KEYS[3], 'metadata', ARGV[3]) end
         if ARGV[4] ~= '' then
           local cur = tonumber(redis.call('GET', KEYS[4]) or '0')
           if tonumber(ARGV[4]) > cur then redis.call('SET', KEYS[4], ARGV[4]) end
         end
         if ARGV[5] ~= '' then redis.call('SET', KEYS[5], ARGV[5]) end
         for i = 6, #KEYS do redis.call('SET', KEYS[i], '1', 'EX', ARGV[6]) end
         return 1"
    ))
});

/// Imports a whole session (`nanobot sessions import`): unless forced, a session that already
/// has rows or metadata is left alone (answers 0); otherwise its rows and meta hash are
/// replaced by the imported ones (answers 1). KEYS: fence, messages, meta.
/// ARGV: token, force ('1' or '0'), created_at, updated_at, last_consolidated, metadata JSON,
/// rows….
pub(super) static IMPORT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(fenced!(
        "if ARGV[2] ~= '1' and (redis.call('EXISTS', KEYS[2]) == 1 or redis.call('EXISTS', KEYS[3]) == 1) then
           return 0
         end
         redis.call('DEL', KEYS[2], KEYS[3])
         for i = 7, #ARGV do redis.call('RPUSH', KEYS[2], ARGV[i]) end
         redis.call('HSET', KEYS[3], 'created_at', ARGV[3], 'updated_at', ARGV[4],
                    'last_consolidated', ARGV[5], 'metadata', ARGV[6])
         return 1"
    ))
});
