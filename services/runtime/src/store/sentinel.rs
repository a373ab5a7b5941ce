//! Redis behind Sentinel: the master is found through the sentinels (the redis crate's
//! `SentinelClient`) and used through a connection manager. After a failover, the first command
//! that fails on the old master (connection lost or refused, a timeout, or `READONLY` once it
//! came back as a replica) asks the sentinels for the master again and is retried once there.
//! Writes a client sends twice this way are the same case as a retry on a Redis Cluster: the
//! fleet's session scripts carry write ids, so a repeat changes nothing.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::sentinel::{SentinelClient, SentinelNodeConnectionInfo, SentinelServerType};
use redis::{Cmd, ErrorKind, Pipeline, RedisConnectionInfo, RedisFuture, RedisResult, Value};

/// Where `redis+sentinel://` points.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct SentinelTarget {
    /// `redis://host:port` of each sentinel.
    pub sentinels: Vec<String>,
    /// The monitored master's name.
    pub master: String,
    /// Credentials of the master and replicas (`user:password@` of the URL).
    pub username: Option<String>,
    pub password: Option<String>,
}

/// The master's name when the URL names none (Sentinel's own default).
pub(super) const DEFAULT_MASTER: &str = "mymaster";

/// Parses `[user:password@]host:port,host:port[/master]`.
pub(super) fn parse(rest: &str) -> SentinelTarget {
    let (auth, hosts) = match rest.rsplit_once('@') {
        Some((auth, hosts)) => (Some(auth), hosts),
        None => (None, rest),
    };
    let (hosts, master) = match hosts.split_once('/') {
        Some((hosts, master)) if !master.trim().is_empty() => (hosts, master.trim()),
        Some((hosts, _)) => (hosts, DEFAULT_MASTER),
        None => (hosts, DEFAULT_MASTER),
    };
    let (username, password) = match auth.map(|a| a.split_once(':').unwrap_or(("", a))) {
        Some((user, password)) => (
            Some(user).filter(|u| !u.is_empty()).map(str::to_string),
            Some(password).filter(|p| !p.is_empty()).map(str::to_string),
        ),
        None => (None, None),
    };
    SentinelTarget {
        sentinels: hosts
            .split(',')
            .map(|h| format!("redis://{}", h.trim()))
            .collect(),
        master: master.to_string(),
        username,
        password,
    }
}

/// The master of a Sentinel-monitored group. Cheap to clone.
#[derive(Clone)]
pub struct SentinelStore {
    inner: Arc<Inner>,
}

struct Inner {
    client: tokio::sync::Mutex<SentinelClient>,
    /// The connection to the current master and how many times it was replaced.
    current: RwLock<(u64, ConnectionManager)>,
    replaced: AtomicU64,
}

impl SentinelStore {
    /// Asks the sentinels for the master and connects to it.
    pub(super) async fn connect(target: &SentinelTarget) -> RedisResult<Self> {
        let mut info = RedisConnectionInfo::default();
        if let Some(user) = &target.username {
            info = info.set_username(user);
        }
        if let Some(password) = &target.password {
            info = info.set_password(password);
        }
        let node = SentinelNodeConnectionInfo::default().set_redis_connection_info(info);
        let mut client = SentinelClient::build(
            target.sentinels.clone(),
            target.master.clone(),
            Some(node),
            SentinelServerType::Master,
        )?;
        let conn = master(&mut client).await?;
        Ok(Self {
            inner: Arc::new(Inner {
                client: tokio::sync::Mutex::new(client),
                current: RwLock::new((0, conn)),
                replaced: AtomicU64::new(0),
            }),
        })
    }

    fn current(&self) -> (u64, ConnectionManager) {
        let guard = self
            .inner
            .current
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        (guard.0, guard.1.clone())
    }

    /// Replaces the connection made at `generation` with one to the master the sentinels name
    /// now (once, however many commands failed on the old one).
    async fn refresh(&self, generation: u64) -> RedisResult<ConnectionManager> {
        let mut client = self.inner.client.lock().await;
        let (now, conn) = self.current();
        if now != generation {
            return Ok(conn);
        }
        let conn = master(&mut client).await?;
        let next = self.inner.replaced.fetch_add(1, Ordering::Relaxed) + 1;
        *self
            .inner
            .current
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = (next, conn.clone());
        tracing::info!(
            replaced = next,
            "redis master changed (sentinel); reconnected"
        );
        Ok(conn)
    }
}

/// Connects to the master the sentinels name.
async fn master(client: &mut SentinelClient) -> RedisResult<ConnectionManager> {
    let master = client.async_get_client().await?;
    // Few retries on one address: a master that stays away is asked of the sentinels again.
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(2)))
        .set_response_timeout(Some(Duration::from_secs(5)))
        .set_number_of_retries(1)
        .set_max_delay(Duration::from_millis(200));
    ConnectionManager::new_with_config(master, config).await
}

/// Whether an error means the master moved (or is gone).
fn master_moved(e: &redis::RedisError) -> bool {
    e.is_io_error()
        || e.is_connection_refusal()
        || e.is_connection_dropped()
        || e.is_timeout()
        || e.kind() == ErrorKind::Server(redis::ServerErrorKind::ReadOnly)
}

impl ConnectionLike for SentinelStore {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let (generation, mut conn) = self.current();
            match conn.req_packed_command(cmd).await {
                Err(e) if master_moved(&e) => {
                    tracing::warn!(error = %e, "redis master unreachable; asking the sentinels");
                    self.refresh(generation)
                        .await?
                        .req_packed_command(cmd)
                        .await
                }
                other => other,
            }
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let (generation, mut conn) = self.current();
            match conn.req_packed_commands(pipeline, offset, count).await {
                Err(e) if master_moved(&e) => {
                    tracing::warn!(error = %e, "redis master unreachable; asking the sentinels");
                    self.refresh(generation)
                        .await?
                        .req_packed_commands(pipeline, offset, count)
                        .await
                }
                other => other,
            }
        })
    }

    fn get_db(&self) -> i64 {
        self.current().1.get_db()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sentinel_urls_name_the_sentinels_the_master_and_its_credentials() {
        assert_eq!(
            parse(":s3cret@10.0.0.1:26379, 10.0.0.2:26379/cache"),
            SentinelTarget {
                sentinels: vec![
                    "redis://10.0.0.1:26379".into(),
                    "redis://10.0.0.2:26379".into()
                ],
                master: "cache".into(),
                username: None,
                password: Some("s3cret".into()),
            }
        );
        let plain = parse("127.0.0.1:26379");
        assert_eq!(plain.master, DEFAULT_MASTER);
        assert_eq!((plain.username, plain.password), (None, None));
        let user = parse("fleet:pw@h:1/m");
        assert_eq!(
            (user.username.as_deref(), user.password.as_deref()),
            (Some("fleet"), Some("pw"))
        );
    }
}
