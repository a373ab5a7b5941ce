//! A Redis lease lock (`SET key holder NX PX ttl`, released only by its holder).

use std::time::Duration;

use redis::aio::ConnectionManager;

const RELEASE: &str = r"if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end";

/// A held lock.
pub struct Lock {
    redis: ConnectionManager,
    key: String,
    holder: String,
}

impl Lock {
    /// Tries for up to `ttl`/4 to take the lock; `None` when someone else holds it.
    pub async fn acquire(
        redis: ConnectionManager,
        key: String,
        holder: &str,
        ttl: Duration,
    ) -> Option<Self> {
        let mut conn = redis.clone();
        let deadline = tokio::time::Instant::now() + ttl / 4;
        loop {
            let taken: Option<String> = redis::cmd("SET")
                .arg(&key)
                .arg(holder)
                .arg("NX")
                .arg("PX")
                .arg(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX))
                .query_async(&mut conn)
                .await
                .ok()
                .flatten();
            if taken.is_some() {
                return Some(Self {
                    redis,
                    key,
                    holder: holder.to_string(),
                });
            }
            if tokio::time::Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Releases the lock if still held by us.
    pub async fn release(self) {
        let mut conn = self.redis.clone();
        let released: redis::RedisResult<i32> = redis::Script::new(RELEASE)
            .key(&self.key)
            .arg(&self.holder)
            .invoke_async(&mut conn)
            .await;
        if let Err(e) = released {
            tracing::warn!(error = %e, "failed to release memory lock");
        }
    }
}
