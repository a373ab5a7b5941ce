//! Command-line definitions and dispatch.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use tokio_util::sync::CancellationToken;

use nanobot_proto::subjects::Role;
use nanobot_runtime::bus;
use nanobot_runtime::config::{self, Config};

/// nanobot — a personal AI agent, running as a fleet of services over NATS and Redis.
#[derive(Debug, Parser)]
#[command(name = "nanobot", version)]
pub struct Cli {
    /// Config file (default `~/.nanobot/config.json`).
    #[arg(long, short = 'c', global = true, env = "NANOBOT_CONFIG")]
    pub config: Option<PathBuf>,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create the config and workspace (never overwrites existing files).
    Onboard {
        /// Workspace directory (default from the config).
        #[arg(long, short = 'w')]
        workspace: Option<PathBuf>,
    },
    /// Chat with the agent through the fleet: one message with `-m`, else interactive.
    Agent {
        /// Message to send.
        #[arg(long, short = 'm')]
        message: Option<String>,
        /// Session key (default `cli:direct`).
        #[arg(long, short = 's')]
        session: Option<String>,
        /// Bot id (default: the first bot).
        #[arg(long)]
        bot: Option<String>,
    },
    /// Show every live service replica and the work waiting; exits 1 when a role is down.
    Status,
    /// The NATS side of the fleet.
    Bus {
        /// What to do.
        #[command(subcommand)]
        command: BusCommand,
    },
    /// Start the whole local fleet (NATS, Redis, local model, every role) in the background.
    Up {
        /// Directory for pids, logs and data (default `~/.nanobot/run`).
        #[arg(long)]
        run_dir: Option<PathBuf>,
        /// Start the local default model even when a provider is configured.
        #[arg(long)]
        with_model: bool,
        /// The fleet as before confinement: one NATS/Redis login every role shares, `exec`
        /// without the bubblewrap sandbox (the host's files and network), file tools outside
        /// the workspace. Default: each role logs in as itself, `exec` runs in bubblewrap.
        #[arg(long)]
        unconfined: bool,
    },
    /// Stop what `up` started, by pid.
    Down {
        /// Directory used by `up`.
        #[arg(long)]
        run_dir: Option<PathBuf>,
    },
    /// Approve or revoke chat-channel senders: `list`, `approve CODE`, `revoke SENDER`.
    Pairing {
        /// Bot id (default: every bot).
        #[arg(long)]
        bot: Option<String>,
        /// What to do.
        #[command(subcommand)]
        action: crate::pairing::PairingAction,
    },
    /// Tokens in/out per bot, UTC day and model, as the providers reported them.
    Usage {
        /// Bot id (default: every bot).
        #[arg(long)]
        bot: Option<String>,
        /// First UTC day to show, `YYYY-MM-DD` (default: the first day of this month).
        #[arg(long)]
        since: Option<String>,
    },
    /// The bot registry: add, change and remove bots while the fleet runs.
    Bots {
        /// What to do.
        #[command(subcommand)]
        action: crate::bots::BotsAction,
    },
    /// Sessions of a bot: `import` upstream nanobot's JSONL sessions into Redis.
    Sessions {
        /// Bot id (default: the first bot).
        #[arg(long)]
        bot: Option<String>,
        /// What to do.
        #[command(subcommand)]
        action: crate::sessions::SessionsAction,
    },
    /// Scheduled jobs of a bot: `list`, `add`, `remove ID`, `enable ID`, `run ID`.
    Cron {
        /// Bot id (default: the first bot).
        #[arg(long)]
        bot: Option<String>,
        /// What to do.
        #[command(subcommand)]
        action: crate::cron::CronAction,
    },
    /// Server-side security configuration: per-role NATS users and permissions
    /// (`nats-config`), per-role Redis ACL users (`redis-acl`); with `--bot`, per bot too
    /// (one NATS account and Redis users per bot).
    Deploy {
        /// What to write.
        #[command(subcommand)]
        command: crate::deploy::DeployCommand,
    },
    /// The config file: `scope` writes a role's copy without the other roles' secrets.
    Config {
        /// What to do.
        #[command(subcommand)]
        command: ConfigCommand,
    },
    /// Exit 0 when `GET <url>` answers 2xx (container health checks).
    Probe {
        /// URL to check.
        url: String,
    },
}

/// `nanobot bus …` subcommands.
#[derive(Debug, Subcommand)]
pub enum BusCommand {
    /// Create the fleet's JetStream streams, or update them to this version's settings and
    /// `bus.streamReplicas` (idempotent; `up` runs it too). Roles only check them.
    Init,
}

/// `nanobot config …` subcommands.
#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Write the config for one role (`gateway`, `agent`, `tools`, `memory`, `cron`, `cli`)
    /// with the secrets it does not use withheld: provider keys only for agent and memory
    /// (and the gateway's transcription provider, `groq`), channel credentials and the API key
    /// only for the gateway, MCP servers' headers and env and web search keys only for tools.
    /// Both files are loaded and checked first; the copy is written with mode 0600.
    Scope {
        /// The role the copy is for.
        #[arg(long)]
        role: String,
        /// Where to write it (replaced whole, never half-written).
        #[arg(long)]
        out: PathBuf,
    },
}

fn load(cli: &Cli) -> anyhow::Result<Config> {
    let env: HashMap<String, String> = std::env::vars().collect();
    Ok(config::load(cli.config.as_deref(), &env)?)
}

async fn connect(cfg: &Config) -> anyhow::Result<bus::Bus> {
    let cancel = CancellationToken::new();
    let guard = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(5)).await;
        guard.cancel();
    });
    bus::connect(&cfg.bus, Role::Cli, "nanobot-cli", &cancel)
        .await
        .with_context(|| {
            format!(
                "connect to nats at {} (is the fleet running? `make run` or `nanobot up`)",
                config::redact_url(&cfg.bus.url)
            )
        })
}

/// Runs the command; returns the exit code.
pub async fn dispatch(cli: Cli) -> anyhow::Result<i32> {
    match &cli.command {
        Command::Onboard { workspace } => {
            let path = cli.config.clone().unwrap_or_else(config::default_path);
            let report = crate::onboard::onboard(&path, workspace.as_deref())?;
            println!("{report}");
            Ok(0)
        }
        Command::Agent {
            message,
            session,
            bot,
        } => agent(&cli, message.as_deref(), session.as_deref(), bot.as_deref()).await,
        Command::Bus {
            command: BusCommand::Init,
        } => bus_init(&cli).await,
        Command::Status => {
            let cfg = load(&cli)?;
            let bus = connect(&cfg).await?;
            Ok(crate::status::print(&bus).await)
        }
        Command::Up {
            run_dir,
            with_model,
            unconfined,
        } => up(&cli, run_dir.as_deref(), *with_model, *unconfined).await,
        Command::Down { run_dir } => {
            let dir = run_dir
                .clone()
                .unwrap_or_else(crate::fleet::default_run_dir);
            crate::fleet::down(&dir).await?;
            Ok(0)
        }
        Command::Pairing { bot, action } => {
            let cfg = load(&cli)?;
            crate::pairing::run(&cfg, bot.as_deref(), action).await
        }
        Command::Usage { bot, since } => usage(&cli, bot.as_deref(), since.as_deref()).await,
        Command::Bots { action } => {
            let cfg = load(&cli)?;
            let env: HashMap<String, String> = std::env::vars().collect();
            let path = config::resolve_path(cli.config.as_deref(), &env);
            let bus = connect(&cfg).await?;
            crate::bots::run(&cfg, &bus.js, cfg.bus.stream_replicas, &path, action).await
        }
        Command::Sessions { bot, action } => {
            let cfg = load(&cli)?;
            let env: HashMap<String, String> = std::env::vars().collect();
            let path = config::resolve_path(cli.config.as_deref(), &env);
            crate::sessions::run(&cfg, &path, bot.as_deref(), action).await
        }
        Command::Cron { bot, action } => {
            let mut cfg = load(&cli)?;
            if let Some(id) = bot.as_deref()
                && cfg.bot(id).is_none()
            {
                let bus = connect(&cfg).await?;
                crate::cron::with_live_bot(&mut cfg, &bus.js, id).await?;
            }
            crate::cron::run(&cfg, bot.as_deref(), action)
        }
        Command::Deploy { command } => {
            crate::deploy::run(command)?;
            Ok(0)
        }
        Command::Config {
            command: ConfigCommand::Scope { role, out },
        } => config_scope(&cli, role, out),
        Command::Probe { url } => {
            let ok = reqwest::Client::new()
                .get(url)
                .timeout(Duration::from_secs(3))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success());
            Ok(if ok { 0 } else { 1 })
        }
    }
}

/// `nanobot agent`: one message, or a chat, with the fleet.
async fn agent(
    cli: &Cli,
    message: Option<&str>,
    session: Option<&str>,
    bot: Option<&str>,
) -> anyhow::Result<i32> {
    let cfg = load(cli)?;
    let bus = connect(&cfg).await?;
    bus::verify_streams(&bus.js)
        .await
        .context("check the jetstream streams")?;
    if crate::chat::live(&bus, "agent").await == 0 {
        eprintln!(
            "warning: no nanobot-agent replica answered; the message will wait in JetStream until one starts"
        );
    }
    let mut chat = crate::chat::Chat::open(&cfg, bus, session, bot).await?;
    match message {
        Some(text) => crate::chat::one_shot(&mut chat, text).await?,
        None => crate::chat::interactive(&mut chat).await?,
    }
    Ok(0)
}

/// `nanobot bus init`: creates the JetStream streams.
async fn bus_init(cli: &Cli) -> anyhow::Result<i32> {
    let cfg = load(cli)?;
    let bus = connect(&cfg).await?;
    bus::init_streams(&bus.js, cfg.bus.stream_replicas)
        .await
        .context("create the jetstream streams")?;
    println!(
        "jetstream streams ready ({} replica{})",
        cfg.bus.stream_replicas,
        if cfg.bus.stream_replicas == 1 {
            ""
        } else {
            "s"
        }
    );
    Ok(0)
}

/// `nanobot up`: makes the secrets file if missing and starts the fleet.
async fn up(
    cli: &Cli,
    run_dir: Option<&Path>,
    with_model: bool,
    unconfined: bool,
) -> anyhow::Result<i32> {
    let env: HashMap<String, String> = std::env::vars().collect();
    let secrets_file =
        config::secrets::path_for(&config::resolve_path(cli.config.as_deref(), &env));
    let secrets = config::secrets::ensure(&secrets_file, unconfined)
        .with_context(|| format!("create {}", secrets_file.display()))?;
    let cfg = load(cli)?;
    let mut opts = crate::fleet::UpOptions::new(cli.config.clone());
    if let Some(dir) = run_dir {
        opts.run_dir = dir.to_path_buf();
    }
    if with_model {
        opts.with_model = Some(true);
    }
    crate::fleet::up(&opts, &cfg, &secrets).await?;
    Ok(0)
}

/// `nanobot usage`.
async fn usage(cli: &Cli, bot: Option<&str>, since: Option<&str>) -> anyhow::Result<i32> {
    let cfg = load(cli)?;
    crate::usage::run(&cfg, bot, since).await
}

/// `nanobot config scope`: writes the config one role sees.
fn config_scope(cli: &Cli, role: &str, out: &Path) -> anyhow::Result<i32> {
    let role = config::scope::role_named(role).map_err(anyhow::Error::msg)?;
    let env: HashMap<String, String> = std::env::vars().collect();
    let (path, text) = config::load::read(cli.config.as_deref(), &env)?;
    let scoped = config::scope::scoped_text(text.as_deref(), &path, &env, role)?;
    // Written beside, then renamed: a copy killed mid-write is never read as the config.
    let mut partial = out.as_os_str().to_owned();
    partial.push(".partial");
    let partial = PathBuf::from(partial);
    config::secrets::write_private(&partial, &scoped)
        .with_context(|| format!("write {}", partial.display()))?;
    std::fs::rename(&partial, out).with_context(|| format!("write {}", out.display()))?;
    println!(
        "wrote {} for the {} role (other roles' secrets withheld)",
        out.display(),
        role.name()
    );
    Ok(0)
}
