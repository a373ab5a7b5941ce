//! Clusters on loopback for tests: a NATS JetStream cluster ([`NatsCluster`]) and a Redis
//! Cluster with replicas ([`RedisCluster`]), built from the single servers of
//! [`super::servers`], each node killable and restartable on its own.

use std::time::Duration;

use anyhow::Context as _;

use super::servers::READY_TIMEOUT;
use super::{Nats, Redis, find_server_binary, free_port, wait_until};
use crate::store::Store;

/// A JetStream cluster of `nats-server` processes on loopback (one cluster name, every node
/// routed to every other), killed on drop.
#[derive(Debug)]
pub struct NatsCluster {
    /// The servers, in start order.
    pub nodes: Vec<Nats>,
}

impl NatsCluster {
    /// Starts `size` clustered servers and waits until JetStream has a meta leader and every
    /// node sees the others.
    pub async fn start(size: usize) -> anyhow::Result<Self> {
        anyhow::ensure!(size >= 1, "a cluster has at least one node");
        let cluster_ports: Vec<u16> = (0..size).map(|_| free_port()).collect::<Result<_, _>>()?;
        let routes = cluster_ports
            .iter()
            .map(|p| format!("nats://127.0.0.1:{p}"))
            .collect::<Vec<_>>()
            .join(",");
        let starts = cluster_ports.iter().enumerate().map(|(i, port)| {
            let args = [
                "-n".to_string(),
                format!("n{i}"),
                "--cluster_name".into(),
                "nanobot-test".into(),
                "--cluster".into(),
                format!("nats://127.0.0.1:{port}"),
                "--routes".into(),
                routes.clone(),
            ];
            async move { Nats::start_with(&args).await }
        });
        let nodes = futures::future::try_join_all(starts).await?;
        let mut cluster = Self { nodes };
        cluster.wait_formed().await?;
        Ok(cluster)
    }

    /// Returns every node's client URL, comma-separated (the fleet's `bus.url` form).
    pub fn urls(&self) -> String {
        self.nodes
            .iter()
            .map(Nats::url)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Connects a client that knows every node.
    pub async fn client(&self) -> anyhow::Result<async_nats::Client> {
        let addrs = self
            .nodes
            .iter()
            .map(|n| n.url().parse())
            .collect::<Result<Vec<async_nats::ServerAddr>, _>>()?;
        async_nats::ConnectOptions::new()
            .connect(addrs)
            .await
            .context("connect to the nats cluster")
    }

    /// Waits until every running node reports a JetStream meta leader and a meta group with
    /// every node (after a start, or after a node came back).
    pub async fn wait_formed(&mut self) -> anyhow::Result<()> {
        wait_cluster_formed(&mut self.nodes.iter_mut().collect::<Vec<_>>()).await
    }

    /// Takes the nodes out of the cluster (they still stop when dropped).
    pub fn into_nodes(self) -> Vec<Nats> {
        self.nodes
    }
}

/// Waits until every running node of a JetStream cluster reports a meta leader and a current
/// meta group of all `nodes`.
pub async fn wait_cluster_formed(nodes: &mut [&mut Nats]) -> anyhow::Result<()> {
    let http = reqwest::Client::new();
    let size = nodes.len();
    let monitors: Vec<String> = nodes
        .iter_mut()
        .filter_map(|n| n.is_running().then(|| n.monitor_url()))
        .collect();
    // Every running node names the same leader; the leader (the only node that tracks its
    // followers) sees every other node current.
    let formed = || async {
        let mut leaders = Vec::new();
        let mut leader_sees_all = false;
        for monitor in &monitors {
            let url = format!("{monitor}/jsz");
            let Ok(resp) = http.get(&url).send().await else {
                return false;
            };
            let Ok(jsz) = resp.json::<serde_json::Value>().await else {
                return false;
            };
            let meta = &jsz["meta_cluster"];
            if meta["cluster_size"].as_u64() != Some(size as u64) {
                return false;
            }
            leaders.push(meta["leader"].as_str().unwrap_or_default().to_string());
            let followers = meta["replicas"].as_array().cloned().unwrap_or_default();
            leader_sees_all |= followers.len() == size - 1
                && followers
                    .iter()
                    .all(|p| p["current"].as_bool() == Some(true));
        }
        let agreed = leaders.windows(2).all(|w| w[0] == w[1]);
        agreed && !leaders[0].is_empty() && (size == 1 || leader_sees_all)
    };
    wait_until(formed, READY_TIMEOUT * 3)
        .await
        .context("the nats cluster did not form")
}

/// A Redis Cluster on loopback: `masters` primaries, each with `replicas` replicas, a 1 s node
/// timeout so a replica takes over about 2 s after its primary dies. Killed on drop.
#[derive(Debug)]
pub struct RedisCluster {
    /// The servers, in start order (roles change with failovers: see [`Self::masters`]).
    pub nodes: Vec<Redis>,
    masters: usize,
}

impl RedisCluster {
    /// Starts the nodes, joins them with `redis-cli --cluster create` and waits until the
    /// cluster is healthy.
    pub async fn start(masters: usize, replicas: usize) -> anyhow::Result<Self> {
        anyhow::ensure!(masters >= 3, "a Redis Cluster needs at least 3 primaries");
        let args: Vec<String> = [
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-node-timeout",
            "1000",
            "--cluster-replica-validity-factor",
            "0",
        ]
        .map(String::from)
        .to_vec();
        let starts = (0..masters * (1 + replicas)).map(|_| Redis::start_with(&args));
        let nodes = futures::future::try_join_all(starts).await?;
        let cli = find_server_binary("redis-cli", "REDIS_CLI")?;
        let mut create = tokio::process::Command::new(cli);
        create.args(["--cluster", "create"]);
        for node in &nodes {
            create.arg(format!("127.0.0.1:{}", node.port()));
        }
        let out = create
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .output()
            .await
            .context("run redis-cli --cluster create")?;
        anyhow::ensure!(
            out.status.success(),
            "redis-cli --cluster create failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let mut cluster = Self { nodes, masters };
        cluster.wait_healthy().await?;
        Ok(cluster)
    }

    /// Returns the fleet's `store.url` for this cluster (`redis+cluster://` and every node).
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port()))
            .collect();
        format!("redis+cluster://{}", hosts.join(","))
    }

    /// Connects as the roles do.
    pub async fn conn(&self) -> anyhow::Result<Store> {
        super::connect_store(&self.url()).await
    }

    /// Indices of the running nodes that are primaries now.
    pub async fn masters(&mut self) -> Vec<usize> {
        redis_primaries(&mut self.nodes.iter_mut().collect::<Vec<_>>()).await
    }

    /// Waits until the cluster is healthy again ([`wait_redis_cluster_healthy`]).
    pub async fn wait_healthy(&mut self) -> anyhow::Result<()> {
        let masters = self.masters;
        wait_redis_cluster_healthy(&mut self.nodes.iter_mut().collect::<Vec<_>>(), masters).await
    }

    /// Takes the nodes out of the cluster (they still stop when dropped).
    pub fn into_nodes(self) -> Vec<Redis> {
        self.nodes
    }
}

/// Indices (in `nodes`) of the running nodes that are primaries now.
pub async fn redis_primaries(nodes: &mut [&mut Redis]) -> Vec<usize> {
    let mut out = Vec::new();
    for (i, node) in nodes.iter_mut().enumerate() {
        if node.is_running() && role(&node.url()).await.as_deref() == Some("master") {
            out.push(i);
        }
    }
    out
}

/// Waits until every running node of a Redis Cluster reports `cluster_state:ok` and there are
/// `masters` primaries (after a start or a failover).
pub async fn wait_redis_cluster_healthy(
    nodes: &mut [&mut Redis],
    masters: usize,
) -> anyhow::Result<()> {
    let urls: Vec<String> = nodes
        .iter_mut()
        .filter_map(|n| n.is_running().then(|| n.url()))
        .collect();
    let healthy = || async {
        let mut primaries = 0;
        for url in &urls {
            let Some(info) = cluster_info(url).await else {
                return false;
            };
            if !info.contains("cluster_state:ok") {
                return false;
            }
            primaries += usize::from(role(url).await.as_deref() == Some("master"));
        }
        primaries == masters
    };
    wait_until(healthy, READY_TIMEOUT * 3)
        .await
        .context("the redis cluster did not become healthy")
}

async fn single(url: &str) -> Option<redis::aio::MultiplexedConnection> {
    let client = redis::Client::open(url).ok()?;
    let connect = client.get_multiplexed_async_connection();
    tokio::time::timeout(Duration::from_secs(2), connect)
        .await
        .ok()?
        .ok()
}

async fn cluster_info(url: &str) -> Option<String> {
    let mut conn = single(url).await?;
    redis::cmd("CLUSTER")
        .arg("INFO")
        .query_async(&mut conn)
        .await
        .ok()
}

/// `master` or `slave` (the first field of `ROLE`).
async fn role(url: &str) -> Option<String> {
    let mut conn = single(url).await?;
    let role: Vec<redis::Value> = redis::cmd("ROLE").query_async(&mut conn).await.ok()?;
    match role.first()? {
        redis::Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        redis::Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    }
}
