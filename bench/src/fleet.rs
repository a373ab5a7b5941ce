//! Starts the fleet as separate processes from the release build: NATS, Redis, the mock LLM,
//! a config pointing at them, a workspace made by `nanobot onboard`, then every role, each
//! timed from spawn to its first `200` on `/ready`.

use std::time::SystemTime;

use anyhow::Context as _;
use futures::future::try_join_all;
use serde_json::json;

use nanobot_tests::harness::{bin_path, free_port};

use crate::servers::{self, LlmMode, Member, TOOL_FILE};
use crate::system::{Clusters, Kind, Running};

/// NATS servers and Redis primaries (one replica each) of the cluster setup.
const CLUSTER_NODES: usize = 3;

/// The log line `nanobot_runtime::service::start` writes once the broker is connected.
const CONNECTED_LINE: &str = "connected to nats";

/// How a fleet is started.
#[derive(Debug, Clone)]
pub struct FleetOptions {
    /// How the mock LLM answers.
    pub llm: LlmMode,
    /// An LLM already running (the breakdown's probe); no mock is started then.
    pub llm_base: Option<String>,
    /// Agent runner replicas.
    pub agents: usize,
    /// `runner.maxConcurrentTurns` of each runner (0: the default).
    pub max_concurrent_turns: u32,
    /// `RUST_LOG` level of the roles (the connect line is always kept).
    pub log_level: String,
    /// Run on a 3-node NATS cluster (R3 streams) and a 3-primary Redis Cluster.
    pub clusters: bool,
    /// Serve a Telegram bot ([`TELEGRAM_TOKEN`]) against this Bot API base URL.
    pub telegram_api: Option<String>,
    /// The config's `bots` section (each bot's channels and limits) instead of the single
    /// Telegram bot; `telegram_api` is then every bot's Bot API base URL.
    pub bots: Option<serde_json::Value>,
    /// Gateway replicas (0 or 1: one).
    pub gateways: usize,
}

/// The token of the bench's Telegram bot.
pub const TELEGRAM_TOKEN: &str = "424242:bench-telegram-token";

/// Starts the whole fleet and waits until every role is ready.
pub async fn start(opts: &FleetOptions) -> anyhow::Result<Running> {
    let dir = tempfile::Builder::new()
        .prefix("nanobot-bench-fleet-")
        .tempdir()
        .context("create the fleet directory")?;
    let (infra, mock) = tokio::try_join!(
        infrastructure(dir.path(), opts.clusters),
        servers::llm(opts.llm, opts.llm_base.as_deref()),
    )?;
    let Infrastructure {
        members: infra_members,
        clusters,
        nats_url,
        redis_url,
        replicas,
    } = infra;
    create_streams(&nats_url, replicas).await?;
    let (mock, llm_base) = mock;
    let workspace = dir.path().join("workspace");
    let api_port = free_port()?;
    let config = json!({
        "bus": {"url": nats_url},
        "store": {"url": redis_url},
        "providers": {"custom": {"apiBase": llm_base, "apiKey": "bench-key"}},
        "agents": {"defaults": {
            "model": "test-model",
            "provider": "custom",
            "workspace": workspace.display().to_string(),
        }},
        "api": {"host": "127.0.0.1", "port": api_port, "timeout": 120.0},
        "gateway": {"host": "127.0.0.1", "port": free_port()?},
    });
    let mut config = config;
    if opts.max_concurrent_turns > 0 {
        config["runner"] = json!({"maxConcurrentTurns": opts.max_concurrent_turns});
    }
    config["bus"]["streamReplicas"] = json!(replicas);
    if let Some(bots) = &opts.bots {
        config["bots"] = bots.clone();
        if let Some(api) = &opts.telegram_api {
            config["channels"] = json!({"telegram": {"apiBase": api}});
        }
    } else if let Some(api) = &opts.telegram_api {
        config["channels"] = json!({"telegram": {
            "enabled": true, "token": TELEGRAM_TOKEN, "apiBase": api, "allowFrom": ["*"],
            "streaming": false,
        }});
    }
    let config_path = dir.path().join("config.json");
    let text = serde_json::to_string_pretty(&config).context("encode the config")?;
    std::fs::write(&config_path, text).context("write the config")?;
    onboard(&config_path).await?;
    std::fs::write(workspace.join(TOOL_FILE), tool_file_text()).context("write the tool file")?;

    let roles = roles(opts);
    let rust_log = format!("{},nanobot_runtime::service=info", opts.log_level);
    let config_arg = config_path.display().to_string();
    // A further gateway replica serves the API on its own port (the first keeps `api_base`).
    let mut api_ports = Vec::new();
    for (name, _) in &roles {
        let port = (name.starts_with("gateway#")).then(free_port).transpose()?;
        api_ports.push(port.map(|p| p.to_string()));
    }
    let starts = roles.iter().zip(&api_ports).map(|((name, bin), api_port)| {
        let env: Vec<(&str, &str)> = api_port
            .iter()
            .map(|p| ("NANOBOT_API__PORT", p.as_str()))
            .collect();
        start_role(name, bin, &config_arg, &rust_log, env)
    });
    let started = try_join_all(starts).await?;
    let mut members = infra_members;
    members.extend(mock);
    members.extend(started);
    let api_base = format!("http://127.0.0.1:{api_port}");
    let http = servers::probe_client()?;
    anyhow::ensure!(
        servers::http_ok(&http, &format!("{api_base}/health")).await,
        "the gateway is ready but its api does not answer /health"
    );
    Ok(Running {
        kind: Kind::Fleet,
        api_base,
        members,
        workspace,
        nats_url: Some(nats_url),
        redis_url: Some(redis_url),
        clusters,
        dir,
    })
}

/// As `nanobot up` does: the streams exist before any role starts (roles only check).
async fn create_streams(nats_url: &str, replicas: usize) -> anyhow::Result<()> {
    let addrs = nats_url
        .split(',')
        .map(str::parse)
        .collect::<Result<Vec<async_nats::ServerAddr>, _>>()?;
    let client = async_nats::connect(addrs)
        .await
        .context("connect to nats")?;
    let js = async_nats::jetstream::new(client);
    let created = || async {
        nanobot_runtime::bus::init_streams(&js, replicas)
            .await
            .is_ok()
    };
    nanobot_tests::harness::wait_until(created, servers::READY_TIMEOUT)
        .await
        .context("create the streams")?;
    Ok(())
}

/// The roles to start, each with its binary: `opts.gateways` gateways, `opts.agents` agents
/// (at least one), tools, memory and cron.
fn roles(opts: &FleetOptions) -> Vec<(String, &'static str)> {
    let mut roles = vec![("gateway".to_string(), "nanobot-gateway")];
    for i in 2..=opts.gateways {
        roles.push((format!("gateway#{i}"), "nanobot-gateway"));
    }
    for i in 1..=opts.agents.max(1) {
        roles.push((format!("agent#{i}"), "nanobot-agent"));
    }
    roles.extend([
        ("tools".to_string(), "nanobot-tools"),
        ("memory".to_string(), "nanobot-memory"),
        ("cron".to_string(), "nanobot-cron"),
    ]);
    roles
}

/// NATS and Redis for one fleet: single servers (measured members) or clusters.
struct Infrastructure {
    members: Vec<Member>,
    clusters: Option<Clusters>,
    nats_url: String,
    redis_url: String,
    replicas: usize,
}

async fn infrastructure(dir: &std::path::Path, clusters: bool) -> anyhow::Result<Infrastructure> {
    use nanobot_tests::harness::{NatsCluster, RedisCluster};
    if clusters {
        let (nats, redis) = tokio::try_join!(
            NatsCluster::start(CLUSTER_NODES),
            RedisCluster::start(CLUSTER_NODES, 1)
        )?;
        return Ok(Infrastructure {
            members: Vec::new(),
            nats_url: nats.urls(),
            redis_url: redis.url(),
            clusters: Some(Clusters {
                nats: nats.into_nodes(),
                redis: redis.into_nodes(),
            }),
            replicas: CLUSTER_NODES,
        });
    }
    let ((nats, nats_url), (redis, redis_url)) =
        tokio::try_join!(servers::nats(dir), servers::redis(dir))?;
    Ok(Infrastructure {
        members: vec![nats, redis],
        clusters: None,
        nats_url,
        redis_url,
        replicas: 1,
    })
}

/// Spawns one role with its own health port and waits for `/ready`.
async fn start_role(
    name: &str,
    bin: &str,
    config: &str,
    rust_log: &str,
    extra_env: Vec<(&str, &str)>,
) -> anyhow::Result<Member> {
    let program = bin_path(bin)?;
    let health = format!("127.0.0.1:{}", free_port()?);
    let args = vec![
        "--config".to_string(),
        config.to_string(),
        "--health-addr".to_string(),
        health.clone(),
    ];
    let http = servers::probe_client()?;
    let url = format!("http://{health}/ready");
    let mut env = vec![("RUST_LOG", rust_log), ("NO_COLOR", "1")];
    env.extend(extra_env);
    let mut member = servers::spawn_ready(name, &program, &args, &env, || {
        servers::http_ok(&http, &url)
    })
    .await?;
    member.startup.connect_to_ready_ms = connected_at(&member.proc.logs())
        .and_then(|at| member.ready_at.duration_since(at).ok())
        .map(servers::ms);
    member.health_addr = Some(health);
    Ok(member)
}

/// Returns the wall-clock time of the role's "connected to nats" log line.
fn connected_at(logs: &str) -> Option<SystemTime> {
    let line = logs.lines().find(|l| l.contains(CONNECTED_LINE))?;
    let stamp = line.split_whitespace().next()?;
    let parsed = chrono::DateTime::parse_from_rfc3339(stamp).ok()?;
    Some(SystemTime::from(parsed.with_timezone(&chrono::Utc)))
}

/// Creates the workspace from the bundled templates with the fleet's own `nanobot onboard`.
async fn onboard(config: &std::path::Path) -> anyhow::Result<()> {
    let output = tokio::process::Command::new(bin_path("nanobot")?)
        .arg("--config")
        .arg(config)
        .arg("onboard")
        .env_remove("NANOBOT_CONFIG")
        .kill_on_drop(true)
        .output()
        .await
        .context("run nanobot onboard")?;
    anyhow::ensure!(
        output.status.success(),
        "nanobot onboard failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(())
}

/// Returns the text of the file the tool-heavy turn reads: 40 short lines.
pub fn tool_file_text() -> String {
    (1..=40)
        .map(|i| format!("line {i}: benchmark notes\n"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_time_is_read_from_the_first_token_of_the_connect_line() {
        let logs = "2026-01-02T03:04:05.123456Z  INFO health probe listening addr=x\n\
                    2026-01-02T03:04:05.250000Z  INFO connected to nats role=\"agent\"\n";
        let at = connected_at(logs).unwrap();
        let since = at.duration_since(std::time::UNIX_EPOCH).unwrap();
        assert_eq!(since.subsec_micros(), 250_000);
        assert!(connected_at("no such line").is_none());
    }
}
