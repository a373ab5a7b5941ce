//! Leader election: one cron replica holds the lease `keys::CRON_LEADER` (the fleet's one
//! lease primitive, [`nanobot_runtime::lease`]); the others stand by and take over once a dead
//! leader's lease expires.

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
}

impl Leadership {
    /// Returns a stand-by replica named `instance`.
    pub fn new(redis: Store, instance: &str) -> Self {
        Self {
            leases: Leases::new(redis, instance, LEASE),
            held: None,
        }
    }

    /// Keeps or takes the leadership; returns whether this instance leads now.
    pub async fn hold(&mut self) -> bool {
        if self.held.as_ref().is_some_and(Lease::is_held) {
            return true;
        }
        self.held = None;
        match self
            .leases
            .try_acquire(keys::CRON_LEADER, keys::CRON_LEADER_FENCE)
            .await
        {
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
