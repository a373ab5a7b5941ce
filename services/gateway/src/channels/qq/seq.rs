//! Passive-reply sequence numbers. QQ accepts a few replies to a user's message (same
//! `msg_id`) within its reply window, each with its own `msg_seq`, and refuses a second send of
//! the same `msg_id` + `msg_seq` (code 40054005, "deduplicated"). So each reply part gets its
//! `msg_seq` once, from [`keys::channel_state`]`(bot, "qq", "seq:{msg_id}")` (a hash: the
//! counter `n` and one field per part name, expiring after the reply window), and keeps it:
//! a part sent again (a redelivery after a gateway died between QQ accepting it and the
//! delivery record) carries the same `msg_seq`, QQ refuses it as a duplicate, and the
//! channel counts it as sent. Never double.

use std::sync::LazyLock;

use nanobot_proto::keys;
use nanobot_runtime::store::Store;

use super::CHANNEL;

/// QQ's refusal of a `msg_id` + `msg_seq` already sent.
pub(super) const DUPLICATE: i64 = 40_054_005;
/// How long numbers are kept: past C2C's 60-minute reply window.
const TTL_SECS: u64 = 2 * 3600;

/// Returns the field's number, allocating the next one when the field has none.
static ALLOCATE: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(
        r"
        local v = redis.call('HGET', KEYS[1], ARGV[1])
        if not v then
            v = redis.call('HINCRBY', KEYS[1], 'n', 1)
            redis.call('HSET', KEYS[1], ARGV[1], v)
        end
        redis.call('EXPIRE', KEYS[1], ARGV[2])
        return tonumber(v)
        ",
    )
});

/// Returns the `msg_seq` of the part named `part` of the replies to `msg_id`: the same on
/// every call and every replica.
pub(super) async fn of(redis: &Store, bot: &str, msg_id: &str, part: &str) -> anyhow::Result<u64> {
    let key = keys::channel_state(bot, CHANNEL, &format!("seq:{msg_id}"));
    let mut conn = redis.clone();
    let seq: u64 = ALLOCATE
        .key(&key)
        .arg(part)
        .arg(TTL_SECS)
        .invoke_async(&mut conn)
        .await?;
    Ok(seq)
}
