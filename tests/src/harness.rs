//! Real processes for tests, each killed when its handle drops: `nats-server` with JetStream,
//! `redis-server` with AOF, the fleet's own binaries, and a [`Fleet`] that wires them to a
//! [`crate::scripted_llm::ScriptedLlm`].
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! use nanobot_tests::harness::Fleet;
//! let fleet = Fleet::builder().roles(&["agent", "tools"]).start().await?;
//! let out = fleet.cli(&["agent", "-m", "hello"]).await?;
//! # Ok(()) }
//! ```

mod fleet;
#[cfg(test)]
mod tests;

pub use fleet::{Fleet, FleetBuilder, Secured, missing_ready_roles, request_statuses};
pub use nanobot_runtime::testsuite::{
    Nats, NatsCluster, Redis, RedisCluster, RedisSentinel, ServiceProc, bin_path, connect_store,
    find_server_binary, free_port, redis_primaries, wait_cluster_formed,
    wait_redis_cluster_healthy, wait_until,
};

/// Re-checks `check` after every change announced on `changed` until it returns `Some`;
/// `None` once `timeout` has passed. The fakes wait on their own change signal with it, so
/// a test wakes as soon as the fake sees something instead of on a polling tick.
pub async fn wait_for_change<W, T>(
    changed: &tokio::sync::watch::Sender<W>,
    timeout: std::time::Duration,
    mut check: impl FnMut() -> Option<T>,
) -> Option<T> {
    let mut rx = changed.subscribe();
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        rx.borrow_and_update();
        if let Some(found) = check() {
            return Some(found);
        }
        if tokio::time::timeout_at(deadline, rx.changed())
            .await
            .is_err()
        {
            return None;
        }
    }
}

/// Lays `extra`'s keys over the object `section` (one level: a channel section's test
/// defaults overridden by one test's settings) and returns it.
pub fn overlay(mut section: serde_json::Value, extra: serde_json::Value) -> serde_json::Value {
    if let (serde_json::Value::Object(base), serde_json::Value::Object(extra)) =
        (&mut section, extra)
    {
        base.extend(extra);
    }
    section
}
