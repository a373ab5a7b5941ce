//! A Redis Cluster connection that replaces itself when it stalls. The redis crate's cluster
//! client can wedge after a failover: in the Redis Cluster failover chaos test, one runner in
//! a few saw every command time out for minutes after the killed primary came back (the other
//! runners, on the same cluster, went on), and only a new connection (a fresh slot map and
//! fresh node connections) ended it. So when commands time out and none has been answered for
//! [`STALL`], one background task connects anew and swaps the connection in; commands already
//! sent finish (or time out) on the old one.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use redis::aio::ConnectionLike;
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::RoutingInfo;
use redis::{Cmd, Pipeline, RedisFuture, RedisResult, Value};

/// How long no command may be answered, while commands time out, before reconnecting.
pub const STALL: Duration = Duration::from_secs(15);
/// How long one reconnect may take.
const RECONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A Redis Cluster connection, replaced when it stalls. Cheap to clone; clones share it.
#[derive(Clone)]
pub struct ClusterStore {
    shared: Arc<Shared>,
}

struct Shared {
    client: ClusterClient,
    conn: RwLock<ClusterConnection>,
    /// When a command was last answered (an error reply counts: the node answered).
    answered: Mutex<Instant>,
    reconnecting: AtomicBool,
}

impl ClusterStore {
    /// Connects through `client`.
    pub async fn connect(client: ClusterClient) -> RedisResult<Self> {
        let conn = client.get_async_connection().await?;
        Ok(Self {
            shared: Arc::new(Shared {
                client,
                conn: RwLock::new(conn),
                answered: Mutex::new(Instant::now()),
                reconnecting: AtomicBool::new(false),
            }),
        })
    }

    /// The current connection.
    pub fn conn(&self) -> ClusterConnection {
        self.shared
            .conn
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Sends `cmd` where `route` says.
    pub async fn route_command(&self, cmd: Cmd, route: RoutingInfo) -> RedisResult<Value> {
        let answer = self.conn().route_command(cmd, route).await;
        self.observe(answer.as_ref().err());
        answer
    }

    /// Learns from a command's outcome; starts a reconnect when the connection stalls.
    fn observe(&self, error: Option<&redis::RedisError>) {
        let now = Instant::now();
        let mut answered = self
            .shared
            .answered
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        match error {
            Some(e) if e.is_timeout() => {}
            _ => {
                *answered = now;
                return;
            }
        }
        let silent = now.duration_since(*answered);
        if silent < STALL || self.shared.reconnecting.swap(true, Ordering::AcqRel) {
            return;
        }
        drop(answered);
        tracing::warn!(
            silent_secs = silent.as_secs(),
            "redis cluster commands time out and none was answered; reconnecting"
        );
        let store = self.clone();
        tokio::spawn(async move {
            let shared = &store.shared;
            let fresh =
                tokio::time::timeout(RECONNECT_TIMEOUT, shared.client.get_async_connection());
            match fresh.await {
                Ok(Ok(conn)) => {
                    *shared.conn.write().unwrap_or_else(|e| e.into_inner()) = conn;
                    *shared.answered.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
                    tracing::info!("reconnected to the redis cluster");
                }
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "failed to reconnect to the redis cluster")
                }
                Err(_) => tracing::warn!("failed to reconnect to the redis cluster: timed out"),
            }
            shared.reconnecting.store(false, Ordering::Release);
        });
    }
}

impl ConnectionLike for ClusterStore {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let answer = self.conn().req_packed_command(cmd).await;
            self.observe(answer.as_ref().err());
            answer
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let answer = self
                .conn()
                .req_packed_commands(pipeline, offset, count)
                .await;
            self.observe(answer.as_ref().err());
            answer
        })
    }

    fn get_db(&self) -> i64 {
        0
    }
}
