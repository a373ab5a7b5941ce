//! The fleet's one lease primitive: a Redis lease with a fencing token, renewed in the
//! background while held. Session leases (agent), cron leadership, the memory workers' per-bot
//! lock and the Telegram poller all use it, so there is one compare-and-delete, one renewal
//! rule and one fencing rule.
//!
//! Taking a lease is `SET NX PX` plus a new value of its fence key, in one script: a counter and
//! a random nonce (`<n>:<nonce>`), the holder's fencing token. Writes guarded by the lease
//! check that the fence still equals the token (see [`Fence`]), so a holder that lost its
//! lease (paused, partitioned, presumed dead) changes nothing. The nonce keeps tokens unique
//! even when a Redis failover loses the latest fence write and the counter repeats. A holder renews every third of the TTL; a
//! holder that dies is replaced once the TTL ends.

mod placement;

use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

pub use self::placement::Placement;
use self::placement::{HandBack, Placed, Take};

use crate::store::{self, Store};
use prometheus_client::metrics::gauge::Gauge;
use redis::{FromRedisValue, Script, Value};
use tokio_util::sync::CancellationToken;

/// The shortest lease time accepted (shorter values are raised to it).
pub const MIN_TTL: Duration = Duration::from_millis(300);

/// Takes the lease when free: KEYS lease, fence; ARGV holder, ttl ms, nonce → the token
/// (`<n>:<nonce>`, n one more than the fence's), or `''`.
static ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "if redis.call('EXISTS', KEYS[1]) == 1 then return '' end
         local n = tonumber(string.match(redis.call('GET', KEYS[2]) or '0', '^%d+')) or 0
         local t = (n + 1) .. ':' .. ARGV[3]
         redis.call('SET', KEYS[2], t)
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

/// Deletes `KEYS[1]` only while it still holds `ARGV[1]` (the one compare-and-delete).
pub static DELETE_IF: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
         return 0",
    )
});

/// Sets `KEYS[2]` to `ARGV[2]` only while the fence counter `KEYS[1]` still equals `ARGV[1]`.
static SET_FENCED: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "if redis.call('GET', KEYS[1]) == ARGV[1] then
           redis.call('SET', KEYS[2], ARGV[2]) return 1 end
         return 0",
    )
});

/// A fencing token: the value of a fence counter when its lease was taken. A write guarded by
/// it first checks `GET key == token`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fence {
    /// The fence counter key.
    pub key: String,
    /// The token (`<n>:<nonce>`).
    pub token: String,
}

impl Fence {
    /// Returns the counter part of the token (it grows with every lease taken).
    pub fn counter(&self) -> u64 {
        let digits = self.token.split(':').next().unwrap_or_default();
        digits.parse().unwrap_or(0)
    }

    /// Returns whether this token is still the fence's current one (no other holder took the
    /// lease since); a holder checks it before a write it cannot fence in Redis (a file).
    pub async fn is_current(&self, redis: &Store) -> redis::RedisResult<bool> {
        let mut conn = redis.clone();
        let now: Option<String> = redis::cmd("GET")
            .arg(&self.key)
            .query_async(&mut conn)
            .await?;
        Ok(now.as_deref() == Some(self.token.as_str()))
    }

    /// Sets `key` to `value` only while this token is still the fence's current one; returns
    /// whether it was written (false: another holder took the lease since).
    pub async fn set(&self, redis: &Store, key: &str, value: &str) -> redis::RedisResult<bool> {
        let mut conn = redis.clone();
        let written: i64 = SET_FENCED
            .key(&self.key)
            .key(key)
            .arg(&self.token)
            .arg(value)
            .invoke_async(&mut conn)
            .await?;
        if written == 1 {
            redis.replicate(key).await;
        }
        Ok(written == 1)
    }
}

/// Takes leases for one holder (a process instance).
#[derive(Clone)]
pub struct Leases {
    redis: Store,
    holder: String,
    ttl: Duration,
    held: Option<Gauge>,
    placed: Option<Placed>,
}

impl std::fmt::Debug for Leases {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leases")
            .field("holder", &self.holder)
            .field("ttl", &self.ttl)
            .finish_non_exhaustive()
    }
}

/// A held lease, renewed in the background until released, dropped or lost.
#[derive(Debug)]
pub struct Lease {
    key: String,
    value: String,
    fence: Fence,
    lost: CancellationToken,
    renewer: tokio::task::JoinHandle<()>,
    redis: Store,
    held: Option<Gauge>,
    placement: Option<Arc<dyn Placement>>,
}

impl Leases {
    /// Returns the lease taker of `holder` with lease time `ttl` (at least [`MIN_TTL`]).
    pub fn new(redis: Store, holder: &str, ttl: Duration) -> Self {
        Self {
            redis,
            holder: holder.to_string(),
            ttl: ttl.max(MIN_TTL),
            held: None,
            placed: None,
        }
    }

    /// Spreads the leases this taker competes for as `placement` says ([`placement`]): a lease
    /// placed elsewhere is taken only after it stayed free for twice the lease time (and at
    /// least until the placement forgot a dead holder, [`Placement::forgets_within`]), and a
    /// lease placed here is handed back when the placement moves it.
    pub fn placed(mut self, placement: Arc<dyn Placement>) -> Self {
        self.placed = Some(Placed::new(placement, self.ttl));
        self
    }

    /// Counts the leases this taker holds in `gauge` (up when taken, down when dropped).
    pub fn counted_in(mut self, gauge: Gauge) -> Self {
        self.held = Some(gauge);
        self
    }

    /// Returns the lease time.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Returns the holder name written into the leases.
    pub fn holder(&self) -> &str {
        &self.holder
    }

    /// Takes the lease `key` (fence counter `fence_key`) if nobody holds it.
    pub async fn try_acquire(
        &self,
        key: impl Into<String>,
        fence_key: impl Into<String>,
    ) -> redis::RedisResult<Option<Lease>> {
        let (lease, ()) = self
            .try_acquire_then(key, fence_key, &redis::pipe())
            .await?;
        Ok(lease)
    }

    /// Takes the lease `key` (fence counter `fence_key`) if nobody holds it and runs `reads`
    /// right after, in the same round trip: once the lease is taken they read what its holder
    /// sees (a previous holder can no longer write fenced keys); when another holder keeps it,
    /// what is there now. `reads` must touch only keys in the lease's hash slot.
    pub async fn try_acquire_then<T: FromRedisValue>(
        &self,
        key: impl Into<String>,
        fence_key: impl Into<String>,
        reads: &redis::Pipeline,
    ) -> redis::RedisResult<(Option<Lease>, T)> {
        let key = key.into();
        let fence_key = fence_key.into();
        let mut hand_back = None;
        if let Some(placed) = &self.placed {
            if placed.prefers(&key) {
                hand_back = Some(placed.placement.clone());
            } else {
                let mut pipe = redis::pipe();
                pipe.exists(&key);
                for cmd in reads.cmd_iter() {
                    pipe.add_command(cmd.clone());
                }
                let mut answers: Vec<Value> = pipe.query_async(&mut self.redis.clone()).await?;
                let held: bool = store::answer(answers.remove(0))?;
                if placed.take_unpreferred(&key, held, Instant::now()) == Take::Wait {
                    return Ok((None, store::answer::<T>(Value::Array(answers))?));
                }
            }
        }
        let nonce = uuid::Uuid::new_v4().simple().to_string();
        let mut take = ACQUIRE.prepare_invoke();
        take.key(&key)
            .key(&fence_key)
            .arg(&self.holder)
            .arg(ttl_ms(self.ttl))
            .arg(&nonce);
        let mut pipe = redis::pipe();
        pipe.ignore_errors().invoke_script(&take);
        for cmd in reads.cmd_iter() {
            pipe.add_command(cmd.clone());
        }
        let mut conn = self.redis.clone();
        let mut answers: Vec<Value> = pipe.query_async(&mut conn).await?;
        if answers.first().is_some_and(store::is_noscript) {
            // The server lost its scripts: load this one and run it all again (the first run
            // took nothing, its script was refused).
            take.load_async(&mut conn).await?;
            answers = pipe.query_async(&mut conn).await?;
        }
        let mut answers = answers.into_iter();
        let token: String = store::answer(answers.next().unwrap_or(Value::Nil))?;
        let read = store::answer::<T>(Value::Array(answers.collect()));
        if token.is_empty() {
            return Ok((None, read?));
        }
        // Keep the new fence across a failover where possible (the nonce keeps a token lost
        // anyway from being handed out twice).
        self.redis.replicate(&fence_key).await;
        let value = format!("{}|{token}", self.holder);
        let lost = CancellationToken::new();
        if let Some(placed) = &self.placed {
            placed.taken(&key);
            placed.placement.holds(&key, true);
        }
        let renewer = tokio::spawn(renew(
            self.redis.clone(),
            Held {
                key: key.clone(),
                value: value.clone(),
                hand_back,
            },
            self.ttl,
            lost.clone(),
        ));
        let lease = Lease {
            key,
            value,
            fence: Fence {
                key: fence_key,
                token,
            },
            lost,
            renewer,
            redis: self.redis.clone(),
            held: self.held.clone().inspect(|g| {
                g.inc();
            }),
            placement: self.placed.as_ref().map(|p| p.placement.clone()),
        };
        match read {
            Ok(read) => Ok((Some(lease), read)),
            Err(e) => {
                lease.release().await;
                Err(e)
            }
        }
    }

    /// Tries to take the lease until `within` has passed (polling every 100 ms); `None` when
    /// another holder kept it. Redis errors count as "not taken" and are retried.
    pub async fn acquire_within(
        &self,
        key: &str,
        fence_key: &str,
        within: Duration,
    ) -> Option<Lease> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            match self.try_acquire(key, fence_key).await {
                Ok(Some(lease)) => return Some(lease),
                Ok(None) => {}
                Err(e) => {
                    tracing::debug!(lease = %key, error = %e, "lease acquire failed, retrying")
                }
            }
            if tokio::time::Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Lease {
    /// Returns the fencing token to guard writes with.
    pub fn fence(&self) -> Fence {
        self.fence.clone()
    }

    /// Returns the lease key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Cancelled when the lease was lost (taken over, or not renewable within its TTL).
    pub fn lost(&self) -> &CancellationToken {
        &self.lost
    }

    /// Returns whether the lease is still held, as far as this holder knows.
    pub fn is_held(&self) -> bool {
        !self.lost.is_cancelled()
    }

    /// Releases the lease (a no-op when it was already lost).
    pub async fn release(self) {
        self.renewer.abort();
        let mut conn = self.redis.clone();
        let released: redis::RedisResult<i64> = DELETE_IF
            .key(&self.key)
            .arg(&self.value)
            .invoke_async(&mut conn)
            .await;
        if let Err(e) = released {
            tracing::warn!(lease = %self.key, error = %e, "failed to release lease; it expires on its own");
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.renewer.abort();
        if let Some(held) = &self.held {
            held.dec();
        }
        if let Some(placement) = &self.placement {
            placement.holds(&self.key, false);
        }
    }
}

fn ttl_ms(ttl: Duration) -> u64 {
    u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX)
}

/// What the renewer of one lease keeps.
struct Held {
    key: String,
    value: String,
    /// The placement that preferred this holder when the lease was taken.
    hand_back: Option<Arc<dyn Placement>>,
}

async fn renew(redis: Store, held: Held, ttl: Duration, lost: CancellationToken) {
    let Held {
        key,
        value,
        hand_back,
    } = held;
    let mut strikes = HandBack::default();
    let mut last_ok = Instant::now();
    let mut tick = tokio::time::interval(ttl / 3);
    tick.tick().await;
    loop {
        tick.tick().await;
        let mut conn = redis.clone();
        let renewed: redis::RedisResult<i64> = RENEW
            .key(&key)
            .arg(&value)
            .arg(ttl_ms(ttl))
            .invoke_async(&mut conn)
            .await;
        match renewed {
            Ok(1) => {
                last_ok = Instant::now();
                if let Some(placement) = &hand_back
                    && strikes.should_hand_back(!placement.moves(&key))
                {
                    // The holder stops, then releases it (or it expires): never two at once.
                    tracing::info!(lease = %key, "lease handed back to the holder it is placed with");
                    lost.cancel();
                    return;
                }
            }
            Ok(_) => {
                tracing::warn!(lease = %key, "lease taken over by another holder");
                lost.cancel();
                return;
            }
            Err(e) if last_ok.elapsed() >= ttl => {
                tracing::warn!(lease = %key, error = %e, "lease expired while redis was unreachable");
                lost.cancel();
                return;
            }
            Err(e) => tracing::debug!(lease = %key, error = %e, "lease renewal failed, retrying"),
        }
    }
}
