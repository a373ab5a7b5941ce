//! Per-session leases in Redis with fencing tokens: one runner at a time runs a session's
//! turns, whichever runner received its messages. Taking a lease increments the session's
//! fence counter; every session write carries the token and is refused once a newer holder
//! exists, so a runner that lost its lease (paused, partitioned) can never write the session.
//! A holder renews every third of the TTL; a holder that dies is replaced once the TTL ends.

use std::sync::LazyLock;
use std::time::{Duration, Instant};

use redis::Script;
use redis::aio::ConnectionManager;
use tokio_util::sync::CancellationToken;

use nanobot_core::session::Fence;
use nanobot_proto::keys;

/// Takes the lease when free: KEYS lease, fence; ARGV holder, ttl ms → the token, or 0.
static ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
         local t = redis.call('INCR', KEYS[2])
         redis.call('SET', KEYS[1], ARGV[1] .. '|' .. t, 'PX', ARGV[2])
         return t",
    )
});

/// Extends the lease while held: KEYS lease; ARGV value, ttl ms → 1, or 0 when lost.
static RENEW: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "if redis.call('GET', KEYS[1]) == ARGV[1] then
           return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
         return 0",
    )
});

/// Releases the lease while held: KEYS lease; ARGV value.
static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
         return 0",
    )
});

/// Takes leases for one runner.
#[derive(Clone)]
pub struct Leases {
    redis: ConnectionManager,
    holder: String,
    ttl: Duration,
}

impl std::fmt::Debug for Leases {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leases")
            .field("holder", &self.holder)
            .field("ttl", &self.ttl)
            .finish_non_exhaustive()
    }
}

/// A held session lease, renewed in the background until released or lost.
#[derive(Debug)]
pub struct Lease {
    key: String,
    value: String,
    fence: Fence,
    lost: CancellationToken,
    renewer: tokio::task::JoinHandle<()>,
    redis: ConnectionManager,
}

impl Leases {
    /// Returns the lease taker of runner `holder` with lease time `ttl`.
    pub fn new(redis: ConnectionManager, holder: &str, ttl: Duration) -> Self {
        Self {
            redis,
            holder: holder.to_string(),
            ttl: ttl.max(Duration::from_millis(300)),
        }
    }

    /// Takes the lease of `session` of `bot` if nobody holds it.
    pub async fn try_acquire(&self, bot: &str, session: &str) -> redis::RedisResult<Option<Lease>> {
        let key = keys::session_lease(bot, session);
        let fence_key = keys::session_fence(bot, session);
        let mut conn = self.redis.clone();
        let token: u64 = ACQUIRE
            .key(&key)
            .key(&fence_key)
            .arg(&self.holder)
            .arg(self.ttl.as_millis() as u64)
            .invoke_async(&mut conn)
            .await?;
        if token == 0 {
            return Ok(None);
        }
        let value = format!("{}|{token}", self.holder);
        let lost = CancellationToken::new();
        let renewer = tokio::spawn(renew(
            self.redis.clone(),
            key.clone(),
            value.clone(),
            self.ttl,
            lost.clone(),
        ));
        Ok(Some(Lease {
            key,
            value,
            fence: Fence {
                key: fence_key,
                token,
            },
            lost,
            renewer,
            redis: self.redis.clone(),
        }))
    }
}

impl Lease {
    /// The fencing token to write the session with.
    pub fn fence(&self) -> Fence {
        self.fence.clone()
    }

    /// Cancelled when the lease was lost (taken over, or not renewable within its TTL).
    pub fn lost(&self) -> &CancellationToken {
        &self.lost
    }

    /// Releases the lease (a no-op when it was already lost).
    pub async fn release(self) {
        self.renewer.abort();
        let mut conn = self.redis.clone();
        let released: redis::RedisResult<i64> = RELEASE
            .key(&self.key)
            .arg(&self.value)
            .invoke_async(&mut conn)
            .await;
        if let Err(e) = released {
            tracing::warn!(error = %e, "failed to release session lease; it expires on its own");
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.renewer.abort();
    }
}

async fn renew(
    redis: ConnectionManager,
    key: String,
    value: String,
    ttl: Duration,
    lost: CancellationToken,
) {
    let mut last_ok = Instant::now();
    let mut tick = tokio::time::interval(ttl / 3);
    tick.tick().await;
    loop {
        tick.tick().await;
        let mut conn = redis.clone();
        let renewed: redis::RedisResult<i64> = RENEW
            .key(&key)
            .arg(&value)
            .arg(ttl.as_millis() as u64)
            .invoke_async(&mut conn)
            .await;
        match renewed {
            Ok(1) => last_ok = Instant::now(),
            Ok(_) => {
                tracing::warn!(lease = %key, "session lease taken over by another runner");
                lost.cancel();
                return;
            }
            Err(e) if last_ok.elapsed() >= ttl => {
                tracing::warn!(lease = %key, error = %e, "session lease expired while redis was unreachable");
                lost.cancel();
                return;
            }
            Err(e) => tracing::debug!(error = %e, "lease renewal failed, retrying"),
        }
    }
}
