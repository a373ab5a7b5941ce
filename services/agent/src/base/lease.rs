//! Per-session leases: one runner at a time runs a session's turns, whichever runner received
//! its messages. A thin naming layer over the fleet's one lease primitive
//! ([`nanobot_runtime::lease`]): the lease key and fence counter of a session come from
//! [`keys`], and every session write carries the lease's fencing token.

use std::time::Duration;

use nanobot_runtime::store::Store;

use nanobot_core::session::{Progress, ProgressReads, SessionStore};
use nanobot_proto::keys;

pub use nanobot_runtime::lease::Lease;

/// Takes session leases for one runner.
#[derive(Debug, Clone)]
pub struct Leases {
    inner: nanobot_runtime::lease::Leases,
}

impl Leases {
    /// Returns the lease taker of runner `holder` with lease time `ttl`.
    pub fn new(redis: Store, holder: &str, ttl: Duration) -> Self {
        Self {
            inner: nanobot_runtime::lease::Leases::new(redis, holder, ttl)
                .counted_in(nanobot_runtime::metrics::get().sessions_leased.clone()),
        }
    }

    /// Takes the lease of `session` of `bot` if nobody holds it.
    pub async fn try_acquire(&self, bot: &str, session: &str) -> redis::RedisResult<Option<Lease>> {
        let (lease, ()) = self.take(bot, session, &redis::pipe()).await?;
        Ok(lease)
    }

    /// Takes the lease of `session` if nobody holds it and reads the session's progress in
    /// the same round trip: as its holder sees it once taken, as it stands otherwise.
    pub async fn try_acquire_reading(
        &self,
        sessions: &SessionStore,
        session: &str,
    ) -> redis::RedisResult<(Option<Lease>, Progress)> {
        let (lease, reads): (_, ProgressReads) = self
            .take(sessions.bot(), session, &sessions.progress_reads(session))
            .await?;
        Ok((lease, reads.into()))
    }

    async fn take<T: redis::FromRedisValue>(
        &self,
        bot: &str,
        session: &str,
        reads: &redis::Pipeline,
    ) -> redis::RedisResult<(Option<Lease>, T)> {
        let taken = self
            .inner
            .try_acquire_then(
                keys::session_lease(bot, session),
                keys::session_fence(bot, session),
                reads,
            )
            .await?;
        if taken.0.is_some() {
            nanobot_runtime::metrics::get().session_lease(bot);
        }
        Ok(taken)
    }
}
