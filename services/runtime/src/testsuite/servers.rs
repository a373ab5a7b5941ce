//! `nats-server` (JetStream) and `redis-server` (AOF) on free loopback ports, with their data
//! in a temporary directory that survives [`Nats::restart`] / [`Redis::restart`].

use std::path::Path;
use std::time::Duration;

use anyhow::Context as _;

use super::{ServiceProc, find_server_binary, free_port};
/// How long a server may take to become ready.
pub(super) const READY_TIMEOUT: Duration = Duration::from_secs(10);
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

    /// Starts `nats-server` with JetStream and the configuration file `config` (e.g. the
    /// authorization `nanobot deploy nats-config` writes); command-line ports win over it.
    pub async fn start_with_config(config: &Path) -> anyhow::Result<Self> {
        Self::start_with(&["-c".into(), config.display().to_string()]).await
    }

    /// Starts `nats-server` with JetStream, the configuration file `config` and `env` in its
    /// environment (e.g. the passwords a `nanobot deploy nats-config --env-refs` file reads).
    pub async fn start_with_config_env(
        config: &Path,
        env: &[(&str, &str)],
    ) -> anyhow::Result<Self> {
        let extra = ["-c".into(), config.display().to_string()];
        Self::start_inner(&extra, env).await
    }

    /// Starts `nats-server` with JetStream and `extra` arguments (e.g. cluster options).
    pub(super) async fn start_with(extra: &[String]) -> anyhow::Result<Self> {
        Self::start_inner(extra, &[]).await
    }

    async fn start_inner(extra: &[String], env: &[(&str, &str)]) -> anyhow::Result<Self> {
        let bin = find_server_binary("nats-server", "NATS_SERVER")?;
        let mut store = tempfile::Builder::new().prefix("nats-store-").tempdir()?;
        let mut last_error = None;
        for _ in 0..START_ATTEMPTS {
            let (port, monitor_port) = (free_port()?, free_port()?);
            let mut args = nats_args(port, monitor_port, store.path());
            args.extend_from_slice(extra);
            let proc = ServiceProc::spawn_program(&bin, &args, env)?;
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

    /// Returns the pid while the process runs.
    pub fn pid(&self) -> Option<u32> {
        self.proc.pid()
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
    /// `user:password@` of [`Redis::url`] when started with an ACL file.
    auth: String,
}

impl Redis {
    /// Starts `redis-server` and waits until it answers PING.
    pub async fn start() -> anyhow::Result<Self> {
        Self::start_with(&[]).await
    }

    /// Starts `redis-server` with the ACL file `acl` (e.g. from `nanobot deploy redis-acl`);
    /// [`Redis::url`] and the ready check log in as `user`.
    pub async fn start_with_acl(acl: &Path, user: &str, password: &str) -> anyhow::Result<Self> {
        let extra = ["--aclfile".into(), acl.display().to_string()];
        Self::start_inner(&extra, format!("{user}:{password}@")).await
    }

    /// Starts `redis-server` with `extra` arguments after the harness's own (later ones win;
    /// e.g. the `--user` rules a deployment passes); [`Redis::url`] and the ready check log in
    /// as `user`.
    pub async fn start_with_args(
        extra: &[String],
        user: &str,
        password: &str,
    ) -> anyhow::Result<Self> {
        Self::start_inner(extra, format!("{user}:{password}@")).await
    }

    /// Starts `redis-server` with `extra` arguments (e.g. cluster mode).
    pub(super) async fn start_with(extra: &[String]) -> anyhow::Result<Self> {
        Self::start_inner(extra, String::new()).await
    }

    async fn start_inner(extra: &[String], auth: String) -> anyhow::Result<Self> {
        let bin = find_server_binary("redis-server", "REDIS_SERVER")?;
        let mut dir = tempfile::Builder::new().prefix("redis-data-").tempdir()?;
        let mut last_error = None;
        for _ in 0..START_ATTEMPTS {
            let port = free_port()?;
            let mut args = redis_args(port, dir.path());
            args.extend_from_slice(extra);
            let proc = ServiceProc::spawn_program(&bin, &args, &[])?;
            let mut redis = Self {
                proc,
                port,
                dir,
                auth: auth.clone(),
            };
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

    /// Returns the port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Whether the server process runs.
    pub fn is_running(&mut self) -> bool {
        self.proc.is_running()
    }

    /// Returns the pid while the process runs.
    pub fn pid(&self) -> Option<u32> {
        self.proc.pid()
    }

    /// Returns the URL, `redis://127.0.0.1:PORT` (with the ACL user's credentials when
    /// started with [`Redis::start_with_acl`]).
    pub fn url(&self) -> String {
        format!("redis://{}127.0.0.1:{}", self.auth, self.port)
    }

    /// Returns a reconnecting connection, as the roles hold one.
    pub async fn conn(&self) -> anyhow::Result<crate::store::Store> {
        let client = redis::Client::open(self.url()).context("parse redis url")?;
        redis::aio::ConnectionManager::new(client)
            .await
            .map(|c| crate::store::Store::Node(c, Default::default()))
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
