//! `nanobot bots add|update|remove|list|show`: the bot registry
//! ([`nanobot_runtime::bot_registry`]) the running roles watch. Secrets are given as `${VAR}`
//! references, resolved by each role from its own environment.
//!
//! The changes and their checks are [`admin`]'s, shared with the HTTP API's `/v1/bots`.
//!
//! SIGKILL: each change is one atomic KV write of one bot (`update` a compare-and-set on the
//! revision it read); a CLI killed mid-way changed that bot or nothing.

use std::path::Path;

use anyhow::{Context as _, bail};
use async_nats::jetstream;
use clap::{Args, Subcommand};
use serde_json::{Value, json};

use nanobot_runtime::bot_registry::{self, admin, admin::AdminError, admin::Edit};

/// What `nanobot bots` does.
#[derive(Debug, Subcommand)]
pub enum BotsAction {
    /// Add a bot; the gateway starts its channels and the runners serve it within seconds.
    Add(BotArgs),
    /// Change a bot: the given fields are laid over its entry.
    Update(BotArgs),
    /// Remove a bot: its channels stop and its messages are refused; its data is kept unless
    /// `--purge`.
    Remove {
        /// Bot id.
        id: String,
        /// Also delete its data: its Redis keys (sessions, markers, pairing, channel state),
        /// its cron jobs and its workspace when only it uses it and it is found here. Run again
        /// to complete a purge that was interrupted.
        #[arg(long)]
        purge: bool,
        /// With `--purge`, delete its token usage too (kept by default: billing data).
        #[arg(long, requires = "purge")]
        purge_usage: bool,
    },
    /// List the bots.
    List,
    /// Show one bot's entry (secrets as references).
    Show {
        /// Bot id.
        id: String,
    },
}

/// A bot's fields on the command line.
#[derive(Debug, Args)]
pub struct BotArgs {
    /// Bot id (letters, digits, `-`, `_`).
    pub id: String,
    /// The `bots.<id>` entry as JSON, e.g. `{"channels":{"telegram":{"enabled":true,"token":"${TG_TOKEN}"}}}`.
    #[arg(long)]
    pub json: Option<String>,
    /// Model.
    #[arg(long)]
    pub model: Option<String>,
    /// Provider.
    #[arg(long)]
    pub provider: Option<String>,
    /// Workspace directory.
    #[arg(long)]
    pub workspace: Option<String>,
    /// Telegram bot token as a reference to the roles' environment, e.g. `${TG_TOKEN}`
    /// (enables the bot's Telegram channel).
    #[arg(long)]
    pub telegram_token: Option<String>,
}

impl BotArgs {
    /// Returns the fields given, as a JSON object to lay over an entry.
    fn overlay(&self) -> anyhow::Result<Value> {
        let mut out = match &self.json {
            Some(text) => serde_json::from_str(text).context("--json is not valid JSON")?,
            None => json!({}),
        };
        let Some(map) = out.as_object_mut() else {
            bail!("--json must be a JSON object");
        };
        for (key, value) in [
            ("model", &self.model),
            ("provider", &self.provider),
            ("workspace", &self.workspace),
        ] {
            if let Some(v) = value {
                map.insert(key.into(), json!(v));
            }
        }
        if let Some(token) = &self.telegram_token {
            let tg = json!({"channels": {"telegram": {"enabled": true, "token": token}}});
            admin::merge(&mut out, tg);
        }
        Ok(out)
    }
}

/// Runs `action` against the registry over `js`, seeding it first from the config file at
/// `config_path` (create-if-absent). Returns the exit code.
pub async fn run(
    cfg: &nanobot_runtime::config::Config,
    js: &jetstream::Context,
    replicas: usize,
    config_path: &Path,
    action: &BotsAction,
) -> anyhow::Result<i32> {
    let store = bot_registry::init(js, replicas).await?;
    bot_registry::seed(&store, &bot_registry::raw_bots(config_path)?).await?;
    match action {
        BotsAction::Add(args) => match admin::add(&store, &args.id, &args.overlay()?).await {
            Ok(()) => println!("bot {} added", args.id),
            Err(AdminError::Exists(id)) => bail!("bot {id} exists; use `nanobot bots update`"),
            Err(e) => return Err(e.into()),
        },
        BotsAction::Update(args) => {
            admin::update(&store, &args.id, Edit::Merge(args.overlay()?)).await?;
            println!("bot {} updated", args.id);
        }
        BotsAction::Remove {
            id,
            purge,
            purge_usage,
        } => {
            match admin::remove(&store, id).await {
                Ok(()) if *purge => println!("bot {id} removed"),
                Ok(()) => println!("bot {id} removed (its sessions and workspace are kept)"),
                // A purge run again completes the one a SIGKILL interrupted.
                Err(AdminError::NotFound(_)) if *purge => {
                    println!("bot {id} is not in the registry; purging what is left of it")
                }
                Err(e) => return Err(e.into()),
            }
            if *purge {
                let config = bot_registry::raw_bots(config_path)?;
                let done = crate::purge::purge(cfg, &store, &config, id, *purge_usage).await?;
                println!(
                    "bot {id} purged: {} redis keys{}, {} cron jobs; workspace {}",
                    done.keys,
                    if *purge_usage {
                        " (usage included)"
                    } else {
                        " (its usage kept)"
                    },
                    done.cron_jobs,
                    done.workspace
                );
            }
        }
        BotsAction::List => {
            for (id, raw) in admin::list(&store).await? {
                let channels: Vec<&String> = raw
                    .get("channels")
                    .and_then(Value::as_object)
                    .map(|m| m.keys().collect())
                    .unwrap_or_default();
                let model = raw.get("model").and_then(Value::as_str).unwrap_or("-");
                println!("{id}\tmodel={model}\tchannels={channels:?}");
            }
        }
        BotsAction::Show { id } => {
            let raw = admin::masked(&admin::get(&store, id).await?);
            println!("{}", serde_json::to_string_pretty(&raw)?);
        }
    }
    Ok(0)
}
