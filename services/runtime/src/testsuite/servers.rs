//! `nats-server` (JetStream) and `redis-server` (AOF) on free loopback ports, with their data
//! in a temporary directory that survives [`Nats::restart`] / [`Redis::restart`].

use std::path::Path;
use std::time::Duration;

use anyhow::Context as _;

use super::{ServiceProc, find_server_binary, free_port};

/// How long a server may take to become ready.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a graceful stop may take before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(5);
/// Attempts with fresh ports when a server fails to start (a port taken meanwhile).
const START_ATTEMPTS: usize = 3;

/// A `nats-server -js` process on free ports, killed on drop.
#[derive(Debug)]
pub struct Nats {
    proc: ServiceProc,
    port: u16,
    monitor_port: u16,
    store: tempfile::TempDir,
}

impl Nats {
    /// Starts `nats-server` with JetStream and waits until `/healthz?js-enabled-only=true`.
    pub async fn start() -> anyhow::Result<Self> {
        Self::start_with(&[]).await
    }

    /// Starts `nats-server` with JetStream and `extra` arguments (e.g. cluster options).
    async fn start_with(extra: &[String]) -> anyhow::Result<Self> {
        let bin = find_server_binary("nats-server", "NATS_SERVER")?;
        let mut store = tempfile::Builder::new().prefix("nats-store-").tempdir()?;
        let mut last_error = None;
        for _ in 0..START_ATTEMPTS {
            let (port, monitor_port) = (free_port()?, free_port()?);
            let mut args = nats_args(port, monitor_port, store.path());
            args.extend_from_slice(extra);
            let proc = ServiceProc::spawn_program(&bin, &args, &[])?;
            let mut nats = Self {
                proc,
                port,
                monitor_port,
                store,
            };
            match nats.wait_ready().await {
                Ok(()) => return Ok(nats),
                Err(e) => {
                    last_error = Some(e);
                    nats.proc.sigkill()?;
                    store = nats.into_store();
                }
            }
        }
        Err(last_error.unwrap_or_else(|| anyhow::anyhow!("nats-server did not start")))
    }

    fn into_store(self) -> tempfile::TempDir {
        let Self { proc, store, .. } = self;
        drop(proc);
        store
    }

    /// Returns the client URL, `nats://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// Returns the monitoring URL, `http://127.0.0.1:PORT` (`/varz`, `/jsz`, `/healthz`).
    pub fn monitor_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.monitor_port)
    }

    /// Returns the JetStream store directory.
    pub fn store_dir(&self) -> &Path {
        self.store.path()
    }

    /// Connects a client.
    pub async fn client(&self) -> anyhow::Result<async_nats::Client> {
        async_nats::connect(self.url())
            .await
            .with_context(|| format!("connect to {}", self.url()))
    }

    /// Whether the server process runs.
    pub fn is_running(&mut self) -> bool {
        self.proc.is_running()
    }

    /// Kills the server with SIGKILL (a crash).
    pub fn kill(&mut self) -> anyhow::Result<()> {
        self.proc.sigkill()
    }

    /// Stops the server (gracefully if it runs) and starts it again on the same ports and
    /// store directory, so JetStream data survives.
    pub async fn restart(&mut self) -> anyhow::Result<()> {
        if self.proc.is_running() {
            self.proc.stop(STOP_GRACE).await?;
        }
        self.proc.restart()?;
        self.wait_ready().await
    }

    /// Returns the server log.
    pub fn logs(&self) -> String {
        self.proc.logs()
    }

    async fn wait_ready(&mut self) -> anyhow::Result<()> {
        let url = format!("{}/healthz?js-enabled-only=true", self.monitor_url());
        let http = reqwest::Client::new();
        let deadline = tokio::time::Instant::now() + READY_TIMEOUT;
        loop {
            if let Some(status) = self.proc.exit_status() {
                anyhow::bail!(
                    "nats-server exited with {status}:\n{}",
                    self.proc.log_tail(30)
                );
            }
            let healthy = http
                .get(&url)
                .send()
                .await
                .is_ok_and(|r| r.status().is_success());
            if healthy {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                anyhow::bail!(
                    "nats-server not ready in {READY_TIMEOUT:?}:\n{}",
                    self.proc.log_tail(30)
                );
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }
}

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
    super::wait_until(formed, READY_TIMEOUT * 3)
        .await
        .context("the nats cluster did not form")
}

fn nats_args(port: u16, monitor_port: u16, store: &Path) -> Vec<String> {
    let store = store.display().to_string();
    let (port, monitor_port) = (port.to_string(), monitor_port.to_string());
    [
        "-js",
        "-a",
        "127.0.0.1",
        "-p",
        &port,
        "-m",
        &monitor_port,
        "-sd",
        &store,
    ]
    .map(String::from)
    .to_vec()
}

/// A `redis-server` process on a free port with AOF persistence, killed on drop.
#[derive(Debug)]
pub struct Redis {
    proc: ServiceProc,
    port: u16,
    dir: tempfile::TempDir,
}

impl Redis {
    /// Starts `redis-server` and waits until it answers PING.
    pub async fn start() -> anyhow::Result<Self> {
        let bin = find_server_binary("redis-server", "REDIS_SERVER")?;
        let mut dir = tempfile::Builder::new().prefix("redis-data-").tempdir()?;
        let mut last_error = None;
        for _ in 0..START_ATTEMPTS {
            let port = free_port()?;
            let proc = ServiceProc::spawn_program(&bin, &redis_args(port, dir.path()), &[])?;
            let mut redis = Self { proc, port, dir };
            match redis.wait_ready().await {
                Ok(()) => return Ok(redis),
                Err(e) => {
                    last_error = Some(e);
                    redis.proc.sigkill()?;
                    let Self {
                        proc, dir: kept, ..
                    } = redis;
                    drop(proc);
                    dir = kept;
                }
            }
        }
        Err(last_error.unwrap_or_else(|| anyhow::anyhow!("redis-server did not start")))
    }

    /// Returns the URL, `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Returns a reconnecting connection.
    pub async fn conn(&self) -> anyhow::Result<redis::aio::ConnectionManager> {
        let client = redis::Client::open(self.url()).context("parse redis url")?;
        redis::aio::ConnectionManager::new(client)
            .await
            .with_context(|| format!("connect to {}", self.url()))
    }

    /// Kills the server with SIGKILL (a crash; AOF keeps acknowledged writes).
    pub fn kill(&mut self) -> anyhow::Result<()> {
        self.proc.sigkill()
    }

    /// Stops the server (gracefully if it runs) and starts it again on the same port and
    /// data directory.
    pub async fn restart(&mut self) -> anyhow::Result<()> {
        if self.proc.is_running() {
            self.proc.stop(STOP_GRACE).await?;
        }
        self.proc.restart()?;
        self.wait_ready().await
    }

    /// Returns the server log.
    pub fn logs(&self) -> String {
        self.proc.logs()
    }

    async fn wait_ready(&mut self) -> anyhow::Result<()> {
        let client = redis::Client::open(self.url()).context("parse redis url")?;
        let deadline = tokio::time::Instant::now() + READY_TIMEOUT;
        loop {
            if let Some(status) = self.proc.exit_status() {
                anyhow::bail!(
                    "redis-server exited with {status}:\n{}",
                    self.proc.log_tail(30)
                );
            }
            if ping(&client).await {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                anyhow::bail!(
                    "redis-server not ready in {READY_TIMEOUT:?}:\n{}",
                    self.proc.log_tail(30)
                );
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }
}

/// Returns whether the server answers PONG (not LOADING or an error).
async fn ping(client: &redis::Client) -> bool {
    let Ok(mut conn) = client.get_multiplexed_async_connection().await else {
        return false;
    };
    let pong: redis::RedisResult<String> = redis::cmd("PING").query_async(&mut conn).await;
    pong.is_ok_and(|p| p == "PONG")
}

fn redis_args(port: u16, dir: &Path) -> Vec<String> {
    let (port, dir) = (port.to_string(), dir.display().to_string());
    [
        "--port",
        &port,
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "yes",
        "--dir",
        &dir,
    ]
    .map(String::from)
    .to_vec()
}
