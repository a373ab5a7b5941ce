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
