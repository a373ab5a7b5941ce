//! Leader election: one cron replica holds `keys::CRON_LEADER` (SET NX PX); the others stand by.

use std::time::Duration;

use redis::aio::ConnectionManager;

use nanobot_proto::keys;

/// Lease length; renewed every third of it.
pub const LEASE: Duration = Duration::from_secs(9);

const RENEW: &str = r"if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end";

/// Takes or renews the leadership; returns whether this instance leads now.
pub async fn hold(redis: &ConnectionManager, instance: &str) -> bool {
    let mut conn = redis.clone();
    let ms = u64::try_from(LEASE.as_millis()).unwrap_or(9000);
    let renewed: i32 = redis::Script::new(RENEW)
        .key(keys::CRON_LEADER)
        .arg(instance)
        .arg(ms)
        .invoke_async(&mut conn)
        .await
        .unwrap_or(0);
    if renewed == 1 {
        return true;
    }
    let taken: Option<String> = redis::cmd("SET")
        .arg(keys::CRON_LEADER)
        .arg(instance)
        .arg("NX")
        .arg("PX")
        .arg(ms)
        .query_async(&mut conn)
        .await
        .ok()
        .flatten();
    taken.is_some()
}

/// Gives the leadership up (on shutdown) if held.
pub async fn resign(redis: &ConnectionManager, instance: &str) {
    let mut conn = redis.clone();
    let script = r"if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end";
    let _: redis::RedisResult<i32> = redis::Script::new(script)
        .key(keys::CRON_LEADER)
        .arg(instance)
        .invoke_async(&mut conn)
        .await;
}
