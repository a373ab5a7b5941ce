//! Leader election: one cron replica holds the lease `keys::cron_leader` (the fleet's one
//! lease primitive, [`nanobot_runtime::lease`]); the others stand by and take over once a dead
//! leader's lease expires. A cron role scoped to one bot (`--bot`, a per-bot deployment)
//! elects its leader among that bot's replicas only.

use std::time::Duration;

use nanobot_runtime::store::Store;

use nanobot_proto::keys;
use nanobot_runtime::lease::{Lease, Leases};

/// Lease length; renewed every third of it.
pub const LEASE: Duration = Duration::from_secs(9);

/// This replica's view of the leadership.
#[derive(Debug)]
pub struct Leadership {
    leases: Leases,
    held: Option<Lease>,
    /// The lease key and its fence.
    keys: (String, String),
}

impl Leadership {
    /// Returns a stand-by replica named `instance`, of the cron role of every bot (`scope` =
    /// `None`) or of one bot's.
    pub fn new(redis: Store, instance: &str, scope: Option<&str>) -> Self {
        Self {
            leases: Leases::new(redis, instance, LEASE),
            held: None,
            keys: (keys::cron_leader(scope), keys::cron_leader_fence(scope)),
        }
    }

    /// Keeps or takes the leadership; returns whether this instance leads now.
    pub async fn hold(&mut self) -> bool {
        if self.held.as_ref().is_some_and(Lease::is_held) {
            return true;
        }
        self.held = None;
        match self.leases.try_acquire(&self.keys.0, &self.keys.1).await {
            Ok(lease) => self.held = lease,
            Err(e) => tracing::warn!(error = %e, "failed to take the cron leadership"),
        }
        self.held.is_some()
    }

    /// Gives the leadership up (on shutdown) if held.
    pub async fn resign(&mut self) {
        if let Some(lease) = self.held.take() {
            lease.release().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nanobot_runtime::testsuite::Redis;

    #[tokio::test]
    async fn each_bots_cron_replicas_elect_their_own_leader() {
        let redis = Redis::start().await.unwrap();
        let store = redis.conn().await.unwrap();
        let mut alpha = Leadership::new(store.clone(), "alpha-1", Some("alpha"));
        let mut standby = Leadership::new(store.clone(), "alpha-2", Some("alpha"));
        let mut beta = Leadership::new(store.clone(), "beta-1", Some("beta"));
        assert!(alpha.hold().await);
        assert!(!standby.hold().await, "one leader among a bot's replicas");
        assert!(beta.hold().await, "beta's cron leads beside alpha's");
        let mut every_bot = Leadership::new(store, "all-1", None);
        assert!(
            every_bot.hold().await,
            "a fleet-wide cron role has its own lease"
        );
        alpha.resign().await;
        assert!(standby.hold().await, "the standby takes over its bot");
    }
}
