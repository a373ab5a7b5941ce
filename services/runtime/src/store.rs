//! Redis connection: one node (a multiplexed, auto-reconnecting connection manager) or a
//! Redis Cluster (the redis crate's cluster client, which follows slot moves and failovers),
//! behind one [`Store`] type every role uses.
//!
//! `store.url` forms:
//! - `redis://[user:password@]host:port[/db]` (also `rediss://`): one node;
//! - `redis+cluster://[user:password@]host:port,host:port,…`, or several `redis://` URLs
//!   separated by commas: a Redis Cluster, seeded from those nodes;
//! - `redis+sentinel://[user:password@]host:port,host:port,…[/master]`: the master (default
//!   `mymaster`) the listed sentinels monitor, followed across failovers ([`sentinel`]).
//!
//! On a cluster every key one script or pipeline touches must share a hash tag
//! (`nanobot_proto::keys` makes sure they do).

use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{Cmd, FromRedisValue, Pipeline, RedisFuture, RedisResult, Value};
use tokio_util::sync::CancellationToken;

use crate::config::StoreConfig;

mod cluster;
mod replicate;
mod sentinel;

pub use cluster::ClusterStore;
pub use replicate::ReplicaGate;
pub use sentinel::SentinelStore;

/// Scheme of a Redis Cluster URL.
const CLUSTER_SCHEME: &str = "redis+cluster://";
/// Scheme of a Redis Sentinel URL.
const SENTINEL_SCHEME: &str = "redis+sentinel://";

/// Redis errors.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The URL is invalid.
    #[error("invalid redis url: {0}")]
    Url(#[source] redis::RedisError),
    /// Shut down before Redis became reachable.
    #[error("cancelled while waiting for redis")]
    Cancelled,
}

/// A connection to the fleet's Redis: one node or a cluster. Cheap to clone; every clone
/// shares the underlying connections.
#[derive(Clone)]
pub enum Store {
    /// One Redis server (a primary that may have replicas), and its `WAIT` budget.
    Node(ConnectionManager, Arc<ReplicaGate>),
    /// A Redis Cluster, and its `WAIT` budget.
    Cluster(ClusterStore, Arc<ReplicaGate>),
    /// The master of a Sentinel-monitored group, and its `WAIT` budget.
    Sentinel(SentinelStore, Arc<ReplicaGate>),
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Node(..) => "Store::Node",
            Self::Cluster(..) => "Store::Cluster",
            Self::Sentinel(..) => "Store::Sentinel",
        })
    }
}

impl Store {
    /// When the primary that holds `key` reports a replica (`ROLE`, asked before the first
    /// `WAIT` and again while it has none: [`ReplicaGate`]), waits (`WAIT 1`) until the writes
    /// made so far on it reached a replica, so a failover after this returns keeps them. A
    /// primary without a replica is not waited on (its AOF keeps the writes across a restart).
    /// Best effort and bounded: a replica that does not confirm in time is logged, not fatal
    /// (Redis replication stays asynchronous), and pauses the waits.
    pub async fn replicate(&self, key: &str) {
        let mut wait = redis::cmd("WAIT");
        wait.arg(1).arg(replicate::TIMEOUT_MS);
        let role = redis::cmd("ROLE");
        match self {
            Self::Node(conn, gate) => {
                let (mut a, mut b) = (conn.clone(), conn.clone());
                let wait = async move { wait.query_async(&mut a).await };
                gate.replicate(wait, || async move { role.query_async(&mut b).await })
                    .await;
            }
            Self::Sentinel(conn, gate) => {
                let (mut a, mut b) = (conn.clone(), conn.clone());
                let wait = async move { wait.query_async(&mut a).await };
                gate.replicate(wait, || async move { role.query_async(&mut b).await })
                    .await;
            }
            Self::Cluster(conn, gate) => {
                let route = || {
                    RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(Route::with_key(
                        key,
                        SlotAddr::Master,
                    )))
                };
                let wait = conn.route_command(wait, route());
                gate.replicate(wait, || conn.route_command(role, route()))
                    .await;
            }
        }
    }
}

impl ConnectionLike for Store {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        let sent = match self {
            Self::Node(c, _) => c.req_packed_command(cmd),
            Self::Cluster(c, _) => c.req_packed_command(cmd),
            Self::Sentinel(c, _) => c.req_packed_command(cmd),
        };
        counted(sent)
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        let sent = match self {
            Self::Node(c, _) => c.req_packed_commands(pipeline, offset, count),
            Self::Cluster(c, _) => c.req_packed_commands(pipeline, offset, count),
            Self::Sentinel(c, _) => c.req_packed_commands(pipeline, offset, count),
        };
        counted(sent)
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Node(c, _) => c.get_db(),
            Self::Cluster(c, _) => c.get_db(),
            Self::Sentinel(c, _) => c.get_db(),
        }
    }
}

/// `sent`, counted in `nanobot_store_requests_total` and, when its connection failed, in
/// `nanobot_store_errors_total` ([`crate::dependency_metrics`]).
fn counted<T: Send + 'static>(sent: RedisFuture<'_, T>) -> RedisFuture<'_, T> {
    Box::pin(async move {
        let result = sent.await;
        crate::dependency_metrics::get().store_request(&result);
        result
    })
}

/// Where `store.url` points.
#[derive(Debug, Clone, PartialEq)]
enum Target {
    Node(String),
    Cluster(Vec<String>),
    Sentinel(sentinel::SentinelTarget),
}

fn target(url: &str) -> Target {
    let url = url.trim();
    if let Some(rest) = url.strip_prefix(SENTINEL_SCHEME) {
        return Target::Sentinel(sentinel::parse(rest));
    }
    if let Some(rest) = url.strip_prefix(CLUSTER_SCHEME) {
        // Credentials written once, before the first node, apply to every node.
        let (auth, hosts) = match rest.rsplit_once('@') {
            Some((auth, hosts)) => (format!("{auth}@"), hosts),
            None => (String::new(), rest),
        };
        let nodes = hosts
            .split(',')
            .map(|h| format!("redis://{auth}{}", h.trim()))
            .collect();
        return Target::Cluster(nodes);
    }
    if url.contains(',') {
        return Target::Cluster(url.split(',').map(|u| u.trim().to_string()).collect());
    }
    Target::Node(url.to_string())
}

/// Connects to Redis (one node or a cluster), retrying with backoff (max 5 s) until it
/// answers or `cancel` fires.
pub async fn connect(cfg: &StoreConfig, cancel: &CancellationToken) -> Result<Store, StoreError> {
    let target = target(&cfg.url);
    let mut delay = Duration::from_millis(100);
    loop {
        let attempt = match &target {
            Target::Node(url) => connect_node(url).await,
            Target::Cluster(nodes) => connect_cluster(nodes).await,
            Target::Sentinel(target) => SentinelStore::connect(target)
                .await
                .map(|c| Store::Sentinel(c, Arc::new(ReplicaGate::waiting()))),
        };
        match attempt {
            Ok(store) => return Ok(store),
            Err(e) if is_invalid_url(&e) => return Err(StoreError::Url(e)),
            Err(e) => tracing::warn!(error = %e, retry_in = ?delay, "redis not reachable"),
        }
        tokio::select! {
            _ = cancel.cancelled() => return Err(StoreError::Cancelled),
            _ = tokio::time::sleep(delay) => {}
        }
        delay = (delay * 2).min(Duration::from_secs(5));
    }
}

fn is_invalid_url(e: &redis::RedisError) -> bool {
    e.kind() == redis::ErrorKind::InvalidClientConfig
}

async fn connect_node(url: &str) -> redis::RedisResult<Store> {
    let client = redis::Client::open(url)?;
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(5)))
        .set_response_timeout(Some(Duration::from_secs(10)))
        .set_number_of_retries(6)
        .set_max_delay(Duration::from_secs(2));
    Ok(Store::Node(
        ConnectionManager::new_with_config(client, config).await?,
        Arc::default(),
    ))
}

async fn connect_cluster(nodes: &[String]) -> redis::RedisResult<Store> {
    // Retries cover a failover: the replica's promotion takes the cluster's node timeout
    // plus an election (about 2–3 s with a 1 s node timeout).
    let client = redis::cluster::ClusterClient::builder(nodes.iter().map(String::as_str))
        .connection_timeout(Duration::from_secs(5))
        .response_timeout(Duration::from_secs(10))
        .retries(12)
        .max_retry_wait(2_000)
        .build()?;
    Ok(Store::Cluster(
        ClusterStore::connect(client).await?,
        Arc::new(ReplicaGate::waiting()),
    ))
}

/// Returns one answer of a pipeline run with `ignore_errors` as `T`; a server error in it is
/// the error.
pub fn answer<T: FromRedisValue>(answer: Value) -> RedisResult<T> {
    Ok(redis::from_redis_value(answer.extract_error()?)?)
}

/// Returns whether a pipeline's answer is the server's "no such script" error (it lost its
/// scripts: a restart, a failover).
pub fn is_noscript(answer: &Value) -> bool {
    matches!(answer, Value::ServerError(e) if e.code() == "NOSCRIPT")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_urls_name_one_node_or_a_cluster() {
        assert_eq!(
            target("redis://:pw@127.0.0.1:6379/0"),
            Target::Node("redis://:pw@127.0.0.1:6379/0".into())
        );
        assert_eq!(
            target("redis+cluster://:pw@10.0.0.1:7000,10.0.0.2:7000"),
            Target::Cluster(vec![
                "redis://:pw@10.0.0.1:7000".into(),
                "redis://:pw@10.0.0.2:7000".into()
            ])
        );
        assert_eq!(
            target("redis://a:1, redis://b:2"),
            Target::Cluster(vec!["redis://a:1".into(), "redis://b:2".into()])
        );
    }
}
