//! The bot's memory lease as its writers see it. Only the holder of a bot's memory lease
//! writes the bot's memory files (`history.jsonl`, `.dream_cursor`, `SOUL.md`, `USER.md`,
//! `MEMORY.md`, skills) and its git repository. A worker that lost the lease (paused or cut
//! off past its TTL, taken over) must not write any more: every write first calls
//! [`Writer::check`], which fails once the renewal noticed the loss or another holder took the
//! lease (its fencing token is no longer the fence's current one). Files cannot be fenced
//! like Redis keys, so a write already under way when the lease is lost still lands; the
//! check bounds that to one write, not the rest of a Dream run.

use nanobot_runtime::lease::Lease;
use nanobot_runtime::store::Store;

/// The memory lease was lost: another worker writes this bot's memory now (the job is
/// retried).
#[derive(Debug, thiserror::Error)]
#[error("the memory lease of bot {0} was lost; another worker writes its memory now")]
pub struct LeaseLost(pub String);

/// A memory writer: the lease it writes under.
#[derive(Debug, Clone, Copy)]
pub struct Writer<'a> {
    bot: &'a str,
    lease: &'a Lease,
    redis: &'a Store,
}

impl<'a> Writer<'a> {
    /// Returns the writer of bot `bot` holding `lease`.
    pub fn new(bot: &'a str, lease: &'a Lease, redis: &'a Store) -> Self {
        Self { bot, lease, redis }
    }

    /// Fails when this worker no longer holds the memory lease (a Redis error counts as lost:
    /// the write waits for the retry).
    pub async fn check(&self) -> Result<(), LeaseLost> {
        let current = self.lease.is_held()
            && match self.lease.fence().is_current(self.redis).await {
                Ok(current) => current,
                Err(e) => {
                    tracing::warn!(bot = %self.bot, error = %e, "could not confirm the memory lease, not writing");
                    false
                }
            };
        if current {
            Ok(())
        } else {
            tracing::warn!(bot = %self.bot, "memory lease lost, not writing");
            Err(LeaseLost(self.bot.to_string()))
        }
    }
}
