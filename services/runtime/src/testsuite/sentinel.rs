//! Redis behind Sentinel on loopback for tests: one master, its replicas and three sentinels
//! (`redis-server --sentinel`) that fail over 1 s after the master stops answering. The data
//! nodes are [`Redis`] servers, killable on their own; everything is killed on drop.

use std::time::Duration;

use anyhow::Context as _;

use super::servers::READY_TIMEOUT;
use super::{Redis, ServiceProc, find_server_binary, free_port, wait_until};
use crate::store::Store;

/// The monitored master's name (Sentinel's own default, so URLs may leave it out).
pub const SENTINEL_MASTER: &str = "mymaster";
/// Sentinels started: a quorum of 2 survives losing one.
const SENTINELS: usize = 3;

/// One master, `replicas` replicas and three sentinels monitoring them.
#[derive(Debug)]
pub struct RedisSentinel {
    /// The data nodes: the first started as the master (roles change with failovers: see
    /// [`Self::master_port`]). A fleet harness may take them out; the sentinels stay.
    pub nodes: Vec<Redis>,
    sentinels: Vec<(ServiceProc, u16)>,
    _dir: tempfile::TempDir,
}

impl RedisSentinel {
    /// Starts the master, its replicas and the sentinels, and waits until every sentinel
    /// knows the replicas and the other sentinels (so a failover can be voted).
    pub async fn start(replicas: usize) -> anyhow::Result<Self> {
        anyhow::ensure!(replicas >= 1, "a failover needs a replica");
        let master = Redis::start().await?;
        let follow = [
            "--replicaof".into(),
            "127.0.0.1".into(),
            master.port().to_string(),
        ];
        let starts = (0..replicas).map(|_| Redis::start_with(&follow));
        let mut nodes = vec![master];
        nodes.extend(futures::future::try_join_all(starts).await?);
        let bin = find_server_binary("redis-server", "REDIS_SERVER")?;
        let dir = tempfile::Builder::new()
            .prefix("redis-sentinel-")
            .tempdir()?;
        let mut sentinels = Vec::with_capacity(SENTINELS);
        for i in 0..SENTINELS {
            let port = free_port()?;
            let conf = dir.path().join(format!("sentinel-{i}.conf"));
            std::fs::write(&conf, sentinel_conf(port, nodes[0].port()))
                .context("write sentinel config")?;
            let args = [conf.display().to_string(), "--sentinel".into()];
            sentinels.push((ServiceProc::spawn_program(&bin, &args, &[])?, port));
        }
        let group = Self {
            nodes,
            sentinels,
            _dir: dir,
        };
        group.wait_known(replicas).await?;
        let port = group.nodes[0].port();
        wait_until(
            || async { online_replicas(port).await == replicas },
            READY_TIMEOUT,
        )
        .await
        .context("the replicas did not finish their first sync")?;
        Ok(group)
    }

    /// Returns the fleet's `store.url`: `redis+sentinel://` and every sentinel.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .sentinels
            .iter()
            .map(|(_, port)| format!("127.0.0.1:{port}"))
            .collect();
        format!("redis+sentinel://{}/{SENTINEL_MASTER}", hosts.join(","))
    }

    /// Connects as the roles do.
    pub async fn conn(&self) -> anyhow::Result<Store> {
        super::connect_store(&self.url()).await
    }

    /// The port of the master the sentinels name now.
    pub async fn master_port(&self) -> Option<u16> {
        for (_, port) in &self.sentinels {
            let Some(mut conn) = single(*port).await else {
                continue;
            };
            let addr: Option<(String, u16)> = redis::cmd("SENTINEL")
                .arg("get-master-addr-by-name")
                .arg(SENTINEL_MASTER)
                .query_async(&mut conn)
                .await
                .ok()
                .flatten();
            if let Some((_, port)) = addr {
                return Some(port);
            }
        }
        None
    }

    /// Waits until the sentinels name a master other than the one on `old_port` that has at
    /// least one replica connected (after that one was killed); returns the new master's port.
    pub async fn wait_failover(&self, old_port: u16) -> anyhow::Result<u16> {
        let promoted = || async {
            match self.master_port().await {
                Some(port) if port != old_port => online_replicas(port).await >= 1,
                _ => false,
            }
        };
        wait_until(promoted, READY_TIMEOUT * 3)
            .await
            .context("the sentinels did not promote a replica")?;
        self.master_port()
            .await
            .context("the sentinels name no master")
    }

    async fn wait_known(&self, replicas: usize) -> anyhow::Result<()> {
        let ports: Vec<u16> = self.sentinels.iter().map(|(_, p)| *p).collect();
        let known = || async {
            for port in &ports {
                let Some(mut conn) = single(*port).await else {
                    return false;
                };
                let fields: Vec<String> = redis::cmd("SENTINEL")
                    .arg("master")
                    .arg(SENTINEL_MASTER)
                    .query_async(&mut conn)
                    .await
                    .unwrap_or_default();
                let field = |name: &str| {
                    fields
                        .iter()
                        .position(|f| f == name)
                        .and_then(|i| fields.get(i + 1))
                        .and_then(|v| v.parse::<usize>().ok())
                        .unwrap_or(0)
                };
                if field("num-slaves") < replicas || field("num-other-sentinels") < SENTINELS - 1 {
                    return false;
                }
            }
            true
        };
        // Sentinels find each other through the master's hello channel every 2 s.
        wait_until(known, READY_TIMEOUT * 3)
            .await
            .context("the sentinels did not discover the replicas and each other")
    }
}

/// One sentinel's config: monitor the master on `master_port` with a quorum of 2, call it
/// down after 1 s without an answer.
fn sentinel_conf(port: u16, master_port: u16) -> String {
    format!(
        "port {port}\nbind 127.0.0.1\n\
         sentinel monitor {SENTINEL_MASTER} 127.0.0.1 {master_port} 2\n\
         sentinel down-after-milliseconds {SENTINEL_MASTER} 1000\n\
         sentinel failover-timeout {SENTINEL_MASTER} 5000\n\
         sentinel parallel-syncs {SENTINEL_MASTER} 1\n"
    )
}

async fn single(port: u16) -> Option<redis::aio::MultiplexedConnection> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}")).ok()?;
    let connect = client.get_multiplexed_async_connection();
    tokio::time::timeout(Duration::from_secs(2), connect)
        .await
        .ok()?
        .ok()
}

/// Replicas of the node on `port` that finished their sync (`state=online`; 0 when it does
/// not answer).
async fn online_replicas(port: u16) -> usize {
    let Some(mut conn) = single(port).await else {
        return 0;
    };
    let info: String = redis::cmd("INFO")
        .arg("replication")
        .query_async(&mut conn)
        .await
        .unwrap_or_default();
    info.lines()
        .filter(|l| l.starts_with("slave") && l.contains("state=online"))
        .count()
}
