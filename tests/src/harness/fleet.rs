//! A whole fleet for end-to-end tests: NATS, Redis and the scripted LLM, a config file
//! pointing at them, and the role binaries, started and waited on until each reports ready.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use anyhow::Context as _;
use futures::StreamExt as _;
use prost::Message as _;
use serde_json::{Value, json};

use nanobot_proto::{ServiceStatus, StatusRequest, subjects};

use super::{
    Nats, NatsCluster, Redis, RedisCluster, RedisSentinel, ServiceProc, bin_path, connect_store,
    free_port, redis_primaries, wait_cluster_formed, wait_redis_cluster_healthy,
};
use crate::scripted_llm::ScriptedLlm;

/// How long status replies are collected per probe.
const STATUS_WINDOW: Duration = Duration::from_millis(200);
/// Default time every role gets to report ready.
const READY_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a CLI invocation may run.
const CLI_TIMEOUT: Duration = Duration::from_secs(60);
/// Log lines shown for a role that failed.
const LOG_TAIL: usize = 60;

/// Builds a [`Fleet`].
#[derive(Debug)]
pub struct FleetBuilder {
    roles: Vec<String>,
    extra: Value,
    env: Vec<(String, String)>,
    ready_timeout: Duration,
    local_model: bool,
    transcription: bool,
    nats_nodes: usize,
    /// Redis Cluster primaries (0: one Redis server).
    redis_masters: usize,
    /// Replicas of a Sentinel-monitored master (0: no Sentinel).
    sentinel_replicas: usize,
    secured: Option<Secured>,
}

/// Per-role credentials a fleet runs with ([`FleetBuilder::secured`]): NATS started with a
/// configuration from `nanobot deploy nats-config`, Redis with an ACL file from `nanobot
/// deploy redis-acl`, and each role process logged in as its own user (env
/// `NANOBOT_BUS__USER`/`PASSWORD`, `NANOBOT_STORE__URL`). The harness and [`Fleet::cli`]
/// log in as `cli`.
#[derive(Debug, Clone)]
pub struct Secured {
    /// The nats-server configuration.
    pub nats_config: PathBuf,
    /// The Redis ACL file.
    pub redis_acl: PathBuf,
    /// NATS password by role name (user = role name).
    pub nats: BTreeMap<String, String>,
    /// Redis password by role name, for the roles with a Redis user.
    pub redis: BTreeMap<String, String>,
}

impl Secured {
    fn nats_auth(&self, role: &str) -> Option<(String, String)> {
        let password = self.nats.get(role)?;
        Some((role.to_string(), password.clone()))
    }
}

impl FleetBuilder {
    /// Runs NATS as a JetStream cluster of `nodes` servers (streams with `nodes` replicas,
    /// `bus.url` listing every node) instead of one server.
    pub fn nats_cluster(mut self, nodes: usize) -> Self {
        self.nats_nodes = nodes;
        self
    }

    /// Runs Redis as a Redis Cluster of `masters` primaries with one replica each (`store.url`
    /// a `redis+cluster://` URL) instead of one server.
    pub fn redis_cluster(mut self, masters: usize) -> Self {
        self.redis_masters = masters;
        self
    }

    /// Runs Redis as a master with `replicas` replicas behind three sentinels (`store.url` a
    /// `redis+sentinel://` URL) instead of one server.
    pub fn redis_sentinel(mut self, replicas: usize) -> Self {
        self.sentinel_replicas = replicas;
        self
    }

    /// Runs NATS and Redis with per-role users, each role logged in as its own ([`Secured`]).
    pub fn secured(mut self, secured: Secured) -> Self {
        self.secured = Some(secured);
        self
    }

    /// Configures no provider, so bots fall back to the local default model, served by the
    /// scripted LLM at `runner.localModelUrl` (as `make run` does without an API key).
    pub fn local_model(mut self) -> Self {
        self.local_model = true;
        self
    }

    /// Points `providers.groq` (the transcription endpoint, as upstream) at the scripted LLM,
    /// which answers `/v1/audio/transcriptions`.
    pub fn transcription(mut self) -> Self {
        self.transcription = true;
        self
    }

    /// Sets the roles to start (`agent`, `tools`, `gateway`, `memory`, `cron`); each runs the
    /// binary `nanobot-<role>`.
    pub fn roles(mut self, roles: &[&str]) -> Self {
        self.roles = roles.iter().map(|r| (*r).to_string()).collect();
        self
    }

    /// Deep-merges `extra` into the generated config (objects merge, other values replace).
    pub fn config(mut self, extra: Value) -> Self {
        merge(&mut self.extra, extra);
        self
    }

    /// Adds an environment variable for every role process.
    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    /// Sets how long roles get to report ready (default 20 s).
    pub fn ready_timeout(mut self, timeout: Duration) -> Self {
        self.ready_timeout = timeout;
        self
    }

    /// Starts NATS, Redis and the scripted LLM, writes the config, spawns every role and
    /// waits until each has a ready instance.
    pub async fn start(self) -> anyhow::Result<Fleet> {
        let (mut nats_nodes, (mut redis_nodes, store_url, sentinels), llm) =
            tokio::try_join!(self.start_nats(), self.start_redis(), ScriptedLlm::start())?;
        let nats = nats_nodes.remove(0);
        let redis = redis_nodes.remove(0);
        let bus_url = std::iter::once(&nats)
            .chain(&nats_nodes)
            .map(Nats::url)
            .collect::<Vec<_>>()
            .join(",");
        // As `nanobot up` does: the streams exist before any role starts (roles only check).
        let auth = self.secured.as_ref().and_then(|s| s.nats_auth("cli"));
        let client = connect_all(&bus_url, auth.as_ref()).await?;
        let js = async_nats::jetstream::new(client);
        let replicas = self.nats_nodes.max(1);
        let created = || async {
            nanobot_runtime::bus::init_streams(&js, replicas)
                .await
                .inspect_err(|e| tracing::debug!(error = %e, "stream creation retried"))
                .is_ok()
        };
        super::wait_until(created, Duration::from_secs(20))
            .await
            .context("create the streams")?;
        let root = tempfile::Builder::new()
            .prefix("nanobot-fleet-")
            .tempdir()?;
        let workspace = root.path().join("workspace");
        std::fs::create_dir_all(&workspace).context("create workspace")?;
        let api_port = free_port()?;
        // Secured: the shared config holds no credentials; each role gets its own by env.
        let config_store_url = match &self.secured {
            Some(_) => format!("redis://127.0.0.1:{}", redis.port()),
            None => store_url.clone(),
        };
        let mut config = json!({
            "bus": {"url": bus_url},
            "store": {"url": config_store_url},
            "providers": {"custom": {"apiBase": llm.base_url(), "apiKey": "test-key"}},
            "agents": {"defaults": {
                "model": "test-model",
                "provider": "custom",
                "workspace": workspace.display().to_string(),
            }},
            "api": {"host": "127.0.0.1", "port": api_port},
            "gateway": {"host": "127.0.0.1", "port": free_port()?},
            // Short, so tests that kill runners see them replaced quickly.
            "runner": {"sessionLeaseSecs": 2, "redeliverAfterSecs": 4},
        });
        merge(&mut config, self.extra);
        if self.local_model {
            config["providers"] = json!({});
            config["agents"]["defaults"]["provider"] = json!("auto");
            config["runner"]["localModelUrl"] = json!(llm.base_url());
        }
        if self.transcription {
            config["providers"]["groq"] = json!({"apiBase": llm.base_url()});
        }
        let config_path = root.path().join("config.json");
        let text = serde_json::to_string_pretty(&config).context("encode config")?;
        std::fs::write(&config_path, text).context("write config")?;
        let mut fleet = Fleet {
            services: Vec::new(),
            nats,
            nats_peers: nats_nodes,
            bus_url,
            redis,
            redis_peers: redis_nodes,
            redis_masters: self.redis_masters,
            sentinels,
            store_url,
            llm,
            env: self.env,
            config_path,
            workspace,
            api_port,
            ready_timeout: self.ready_timeout,
            nats_auth: auth,
            secured: self.secured,
            _root: root,
        };
        for role in &self.roles {
            fleet.spawn_role(role)?;
        }
        fleet.wait_ready().await?;
        Ok(fleet)
    }

    /// Starts one Redis server, a Redis Cluster or a Sentinel group (the first node becomes
    /// [`Fleet::redis`]); returns the nodes, the `store.url` and the sentinels.
    async fn start_redis(&self) -> anyhow::Result<(Vec<Redis>, String, Option<RedisSentinel>)> {
        if self.redis_masters > 0 {
            let cluster = RedisCluster::start(self.redis_masters, 1).await?;
            let url = cluster.url();
            Ok((cluster.into_nodes(), url, None))
        } else if let Some(secured) = &self.secured {
            let password = secured
                .redis
                .get("cli")
                .context("no redis password for cli")?;
            let redis = Redis::start_with_acl(&secured.redis_acl, "cli", password).await?;
            let url = redis.url();
            Ok((vec![redis], url, None))
        } else if self.sentinel_replicas > 0 {
            let mut group = RedisSentinel::start(self.sentinel_replicas).await?;
            let nodes = std::mem::take(&mut group.nodes);
            Ok((nodes, group.url(), Some(group)))
        } else {
            let redis = Redis::start().await?;
            let url = redis.url();
            Ok((vec![redis], url, None))
        }
    }

    /// Starts one server, or the cluster's nodes (the first one becomes [`Fleet::nats`]).
    async fn start_nats(&self) -> anyhow::Result<Vec<Nats>> {
        if let Some(secured) = &self.secured {
            Ok(vec![Nats::start_with_config(&secured.nats_config).await?])
        } else if self.nats_nodes > 1 {
            Ok(NatsCluster::start(self.nats_nodes).await?.into_nodes())
        } else {
            Ok(vec![Nats::start().await?])
        }
    }
}

/// Connects a client that knows every server of `bus_url` (comma-separated), as `auth`'s
/// user when given (the `cli` user: its replies come to the operator's inboxes).
async fn connect_all(
    bus_url: &str,
    auth: Option<&(String, String)>,
) -> anyhow::Result<async_nats::Client> {
    let addrs = bus_url
        .split(',')
        .map(str::parse)
        .collect::<Result<Vec<async_nats::ServerAddr>, _>>()?;
    let mut options = async_nats::ConnectOptions::new().custom_inbox_prefix(
        nanobot_proto::subjects::inbox_prefix(nanobot_proto::subjects::Role::Cli),
    );
    if let Some((user, password)) = auth {
        options = options.user_and_password(user.clone(), password.clone());
    }
    options
        .connect(addrs)
        .await
        .with_context(|| format!("connect to {bus_url}"))
}

/// A running fleet; every process stops when it drops (services first).
#[derive(Debug)]
pub struct Fleet {
    services: Vec<(String, ServiceProc)>,
    /// The NATS server (the first node when NATS runs as a cluster).
    pub nats: Nats,
    /// The other nodes of the NATS cluster ([`FleetBuilder::nats_cluster`]), else empty.
    pub nats_peers: Vec<Nats>,
    bus_url: String,
    /// The Redis server (the first node when Redis runs as a cluster).
    pub redis: Redis,
    /// The other nodes of the Redis Cluster ([`FleetBuilder::redis_cluster`]), else empty.
    pub redis_peers: Vec<Redis>,
    redis_masters: usize,
    /// The sentinels ([`FleetBuilder::redis_sentinel`]; the data nodes are `redis` and
    /// `redis_peers`).
    sentinels: Option<RedisSentinel>,
    store_url: String,
    /// The scripted LLM every bot talks to.
    pub llm: ScriptedLlm,
    env: Vec<(String, String)>,
    config_path: PathBuf,
    workspace: PathBuf,
    api_port: u16,
    ready_timeout: Duration,
    /// The harness's own NATS login (the `cli` user of a secured fleet).
    nats_auth: Option<(String, String)>,
    secured: Option<Secured>,
    _root: tempfile::TempDir,
}

impl Fleet {
    /// Returns a builder with no roles and no extra config.
    pub fn builder() -> FleetBuilder {
        FleetBuilder {
            roles: Vec::new(),
            extra: json!({}),
            env: Vec::new(),
            ready_timeout: READY_TIMEOUT,
            local_model: false,
            transcription: false,
            nats_nodes: 1,
            redis_masters: 0,
            sentinel_replicas: 0,
            secured: None,
        }
    }

    /// Returns the bot workspace directory (`agents.defaults.workspace`).
    pub fn workspace(&self) -> &Path {
        &self.workspace
    }

    /// Returns the config file every process was started with.
    pub fn config_path(&self) -> &Path {
        &self.config_path
    }

    /// Returns the gateway's HTTP API root, `http://127.0.0.1:PORT` (`/v1/...`, `/health`).
    pub fn api_base(&self) -> String {
        format!("http://127.0.0.1:{}", self.api_port)
    }

    /// Returns the first instance of `role`.
    ///
    /// # Panics
    /// When the fleet runs no such role (a mistake in the test).
    pub fn service(&mut self, role: &str) -> &mut ServiceProc {
        self.service_at(role, 0)
    }

    /// Returns the `index`-th instance of `role` (in start order).
    ///
    /// # Panics
    /// When there is no such instance (a mistake in the test).
    pub fn service_at(&mut self, role: &str, index: usize) -> &mut ServiceProc {
        self.services
            .iter_mut()
            .filter(|(r, _)| r == role)
            .nth(index)
            .map(|(_, p)| p)
            .unwrap_or_else(|| panic!("the fleet has no instance {index} of role {role}"))
    }

    /// Returns the first `role` instance's health probe root, `http://127.0.0.1:PORT`
    /// (`/health`, `/ready`, `/metrics`), read from its start-up log line.
    pub fn health_base(&mut self, role: &str) -> anyhow::Result<String> {
        let logs = self.service(role).logs();
        let addr = logs
            .lines()
            .filter(|l| l.contains("health probe listening"))
            .find_map(|l| l.split("addr=").nth(1))
            .and_then(|a| a.split_whitespace().next())
            .with_context(|| format!("nanobot-{role} logged no health probe address"))?;
        Ok(format!("http://{addr}"))
    }

    /// Returns the index of the first instance of `role` whose log contains `line` (the lease
    /// holder, say), for [`Fleet::service_at`].
    pub fn replica_logging(&mut self, role: &str, line: &str) -> Option<usize> {
        self.replicas(role)
            .iter()
            .position(|p| p.logs().contains(line))
    }

    /// Returns every instance of `role`.
    pub fn replicas(&mut self, role: &str) -> Vec<&mut ServiceProc> {
        self.services
            .iter_mut()
            .filter(|(r, _)| r == role)
            .map(|(_, p)| p)
            .collect()
    }

    /// Starts one more instance of `role` and waits until it reports ready.
    pub async fn add_replica(&mut self, role: &str) -> anyhow::Result<&mut ServiceProc> {
        self.add_replica_with(role, &[]).await
    }

    /// Starts one more instance of `role` with extra environment (config overrides such as
    /// `NANOBOT_CHANNELS__TELEGRAM__WEBHOOK_LISTEN_PORT`) and waits until it reports ready.
    pub async fn add_replica_with(
        &mut self,
        role: &str,
        env: &[(&str, &str)],
    ) -> anyhow::Result<&mut ServiceProc> {
        self.spawn_role_with(role, env)?;
        self.wait_ready().await?;
        let last = self.services.last_mut().context("replica vanished")?;
        Ok(&mut last.1)
    }

    /// Connects a NATS client (knowing every node of a cluster).
    pub async fn nats_client(&self) -> anyhow::Result<async_nats::Client> {
        connect_all(&self.bus_url, self.nats_auth.as_ref()).await
    }

    /// The environment that logs `role` in as its own user on a secured fleet (empty
    /// otherwise): `NANOBOT_BUS__USER`/`PASSWORD` and, for roles with a Redis user,
    /// `NANOBOT_STORE__URL`.
    pub fn role_credentials(&self, role: &str) -> Vec<(String, String)> {
        let Some(secured) = &self.secured else {
            return Vec::new();
        };
        let mut env = Vec::new();
        if let Some((user, password)) = secured.nats_auth(role) {
            env.push(("NANOBOT_BUS__USER".into(), user));
            env.push(("NANOBOT_BUS__PASSWORD".into(), password));
        }
        if let Some(password) = secured.redis.get(role) {
            let url = format!("redis://{role}:{password}@127.0.0.1:{}", self.redis.port());
            env.push(("NANOBOT_STORE__URL".into(), url));
        }
        env
    }

    /// Returns the `index`-th NATS server (0 is [`Fleet::nats`], then the cluster peers).
    ///
    /// # Panics
    /// When there is no such node (a mistake in the test).
    pub fn nats_node(&mut self, index: usize) -> &mut Nats {
        match index {
            0 => &mut self.nats,
            i => &mut self.nats_peers[i - 1],
        }
    }

    /// Waits until the NATS cluster has a meta leader and every running node is current again
    /// (after a node was killed or restarted).
    pub async fn wait_nats_formed(&mut self) -> anyhow::Result<()> {
        let mut nodes: Vec<&mut Nats> = std::iter::once(&mut self.nats)
            .chain(self.nats_peers.iter_mut())
            .collect();
        wait_cluster_formed(&mut nodes).await
    }

    /// Connects a reconnecting Redis connection.
    pub async fn redis_conn(&self) -> anyhow::Result<nanobot_runtime::store::Store> {
        if self.redis_masters > 0 || self.sentinels.is_some() {
            connect_store(&self.store_url).await
        } else {
            self.redis.conn().await
        }
    }

    fn redis_nodes(&mut self) -> Vec<&mut Redis> {
        std::iter::once(&mut self.redis)
            .chain(self.redis_peers.iter_mut())
            .collect()
    }

    /// Returns the `index`-th Redis node (0 is [`Fleet::redis`], then the cluster peers).
    ///
    /// # Panics
    /// When there is no such node (a mistake in the test).
    pub fn redis_node(&mut self, index: usize) -> &mut Redis {
        match index {
            0 => &mut self.redis,
            i => &mut self.redis_peers[i - 1],
        }
    }

    /// Kills the master the sentinels name, waits until they promote a replica that has a
    /// replica of its own, and returns the old and the new master's index.
    ///
    /// # Panics
    /// When the fleet runs without Sentinel (a mistake in the test).
    pub async fn fail_over_sentinel_master(&mut self) -> anyhow::Result<(usize, usize)> {
        let group = self
            .sentinels
            .as_ref()
            .expect("the fleet runs with Sentinel");
        let port = group
            .master_port()
            .await
            .context("the sentinels name no master")?;
        let index = |nodes: &[&mut Redis], port: u16| {
            nodes
                .iter()
                .position(|n| n.port() == port)
                .context("master is not a fleet node")
        };
        let old = index(&self.redis_nodes(), port)?;
        self.redis_node(old).kill()?;
        let group = self
            .sentinels
            .as_ref()
            .expect("the fleet runs with Sentinel");
        let new_port = group.wait_failover(port).await?;
        Ok((old, index(&self.redis_nodes(), new_port)?))
    }

    /// Indices of the Redis Cluster nodes that are primaries now.
    pub async fn redis_primaries(&mut self) -> Vec<usize> {
        redis_primaries(&mut self.redis_nodes()).await
    }

    /// Waits until the Redis Cluster is healthy (after a failover or a node's return).
    pub async fn wait_redis_healthy(&mut self) -> anyhow::Result<()> {
        let masters = self.redis_masters;
        wait_redis_cluster_healthy(&mut self.redis_nodes(), masters).await
    }

    /// Runs the `nanobot` CLI with `--config <path>` and `args`, and returns its output.
    pub async fn cli(&self, args: &[&str]) -> anyhow::Result<Output> {
        let mut command = tokio::process::Command::new(bin_path("nanobot")?);
        command
            .arg("--config")
            .arg(&self.config_path)
            .args(args)
            .kill_on_drop(true);
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("NANOBOT_") {
                command.env_remove(key);
            }
        }
        command.env("NANOBOT_CONFIG", &self.config_path);
        command.envs(self.env.iter().map(|(k, v)| (k, v)));
        command.envs(self.role_credentials("cli"));
        let run = command.output();
        let output = tokio::time::timeout(CLI_TIMEOUT, run)
            .await
            .with_context(|| format!("nanobot {args:?} still running after {CLI_TIMEOUT:?}"))?;
        output.with_context(|| format!("run nanobot {args:?}"))
    }

    /// Probes [`subjects::STATUS`] once and returns every answer.
    pub async fn statuses(&self) -> anyhow::Result<Vec<ServiceStatus>> {
        let client = self.nats_client().await?;
        request_statuses(&client, STATUS_WINDOW).await
    }

    /// Waits until every running role process is matched by a ready instance. Fails early
    /// when a process exits, or after the ready timeout, with that role's logs.
    pub async fn wait_ready(&mut self) -> anyhow::Result<()> {
        let client = self.nats_client().await?;
        let deadline = tokio::time::Instant::now() + self.ready_timeout;
        loop {
            let mut expected: BTreeMap<String, usize> = BTreeMap::new();
            for (role, proc) in &mut self.services {
                if let Some(status) = proc.exit_status() {
                    anyhow::bail!(
                        "nanobot-{role} exited with {status} before it was ready:\n{}",
                        proc.log_tail(LOG_TAIL)
                    );
                }
                *expected.entry(role.clone()).or_default() += 1;
            }
            let missing = missing_ready_roles(&client, &expected).await?;
            let Some(role) = missing.first() else {
                return Ok(());
            };
            if tokio::time::Instant::now() >= deadline {
                let logs = self
                    .replicas(role)
                    .iter()
                    .map(|p| p.log_tail(LOG_TAIL))
                    .collect::<Vec<_>>();
                anyhow::bail!(
                    "nanobot-{role} not ready within {:?}:\n{}",
                    self.ready_timeout,
                    logs.join("\n---\n")
                );
            }
        }
    }

    /// Spawns one more instance of `role` without waiting for it to be ready.
    pub fn spawn_role(&mut self, role: &str) -> anyhow::Result<()> {
        self.spawn_role_with(role, &[])
    }

    fn spawn_role_with(&mut self, role: &str, extra: &[(&str, &str)]) -> anyhow::Result<()> {
        let config = self.config_path.display().to_string();
        let args = ["--config", config.as_str(), "--health-addr", "127.0.0.1:0"];
        let credentials = self.role_credentials(role);
        let mut env: Vec<(&str, &str)> = vec![("RUST_LOG", "info")];
        env.extend(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        env.extend(credentials.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        env.extend_from_slice(extra);
        // A further gateway replica listens on its own API port (the first keeps api_base).
        let api_port;
        if role == "gateway" && self.services.iter().any(|(r, _)| r == "gateway") {
            api_port = free_port()?.to_string();
            env.push(("NANOBOT_API__PORT", api_port.as_str()));
        }
        let proc = ServiceProc::spawn(&format!("nanobot-{role}"), &args, &env)?;
        self.services.push((role.to_string(), proc));
        Ok(())
    }
}

/// Sends one [`StatusRequest`] on [`subjects::STATUS`] with a reply inbox and collects the
/// [`ServiceStatus`] answers that arrive within `window` (undecodable answers are skipped).
pub async fn request_statuses(
    client: &async_nats::Client,
    window: Duration,
) -> anyhow::Result<Vec<ServiceStatus>> {
    let inbox = client.new_inbox();
    let mut sub = client
        .subscribe(inbox.clone())
        .await
        .context("subscribe to status inbox")?;
    let request = StatusRequest {}.encode_to_vec();
    client
        .publish_with_reply(subjects::STATUS, inbox, request.into())
        .await
        .context("publish status request")?;
    client.flush().await.context("flush status request")?;
    let deadline = tokio::time::Instant::now() + window;
    let mut statuses = Vec::new();
    while let Ok(Some(msg)) = tokio::time::timeout_at(deadline, sub.next()).await {
        // A "no responders" status message carries no payload: nobody is up yet.
        if msg.status.is_some() {
            continue;
        }
        if let Ok(status) = ServiceStatus::decode(msg.payload) {
            statuses.push(status);
        }
    }
    // The subscription ends when dropped; an unsubscribe failure changes nothing here.
    let _ = sub.unsubscribe().await;
    Ok(statuses)
}

/// Returns the roles of `expected` (role → instance count) that have fewer ready instances
/// than expected, after one status probe.
pub async fn missing_ready_roles(
    client: &async_nats::Client,
    expected: &BTreeMap<String, usize>,
) -> anyhow::Result<Vec<String>> {
    if expected.is_empty() {
        return Ok(Vec::new());
    }
    let statuses = request_statuses(client, STATUS_WINDOW).await?;
    let mut ready: BTreeMap<&str, std::collections::BTreeSet<&str>> = BTreeMap::new();
    for status in statuses.iter().filter(|s| s.ready) {
        ready
            .entry(status.role.as_str())
            .or_default()
            .insert(status.instance.as_str());
    }
    let mut missing = Vec::new();
    for (role, want) in expected {
        let have = ready.get(role.as_str()).map_or(0, |set| set.len());
        if have < *want {
            missing.push(role.clone());
        }
    }
    Ok(missing)
}

/// Deep-merges `extra` into `base`: objects merge key by key, anything else replaces.
pub(crate) fn merge(base: &mut Value, extra: Value) {
    match (base, extra) {
        (Value::Object(base), Value::Object(extra)) => {
            for (key, value) in extra {
                merge(base.entry(key).or_insert(Value::Null), value);
            }
        }
        (base, extra) => *base = extra,
    }
}
