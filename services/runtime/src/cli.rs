//! The flags every service binary shares, and the launcher sequence of `main.rs`.

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;

use crate::config::{self, Config};

/// Flags shared by every service.
#[derive(Debug, Clone, clap::Args)]
pub struct CommonArgs {
    /// Config file (default `~/.nanobot/config.json`).
    #[arg(long, short = 'c', env = "NANOBOT_CONFIG")]
    pub config: Option<PathBuf>,
    /// Address of the HTTP health probe (`/health`, `/ready`); port 0 picks a free one.
    #[arg(long, env = "NANOBOT_HEALTH_ADDR")]
    pub health_addr: Option<SocketAddr>,
    /// Print the effective config (secrets masked) and exit.
    #[arg(long)]
    pub dump_config: bool,
    /// Serve only this bot of the config (a per-bot deployment: one set of role processes
    /// per bot, each logged in as that bot's users; see `nanobot deploy nats-config --bot`).
    #[arg(long, env = "NANOBOT_BOT")]
    pub bot: Option<String>,
}

impl CommonArgs {
    /// Loads the config with overrides from the process environment.
    pub fn load_config(&self) -> Result<Config, config::ConfigError> {
        let env: HashMap<String, String> = std::env::vars().collect();
        let mut cfg = config::load(self.config.as_deref(), &env)?;
        if let Some(bot) = &self.bot {
            cfg.serve_only(bot).map_err(|problem| config::ConfigError {
                path: config::resolve_path(self.config.as_deref(), &env),
                problems: vec![problem],
            })?;
        }
        Ok(cfg)
    }
}

/// Runs a service the same way in every `main.rs`: config (exit 64 on error), `--dump-config`,
/// telemetry, `run`, flush. Returns the process exit code.
pub async fn launch<F, Fut>(service: &'static str, args: CommonArgs, run: F) -> i32
where
    F: FnOnce(Config, CommonArgs) -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
{
    // Tracing is not up yet: config errors go to stderr.
    let cfg = match args.load_config() {
        Ok(cfg) => cfg,
        Err(e) => {
            eprintln!("{service}: {e}");
            return 64;
        }
    };
    if args.dump_config {
        println!("{}", cfg.dump_redacted());
        return 0;
    }
    let telemetry = match crate::telemetry::init(service, &cfg.telemetry) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("{service}: failed to start telemetry: {e:#}");
            return 70;
        }
    };
    // The `bot` label admits the configured bots only.
    crate::metrics::get().serve_bots(cfg.bots().into_iter().map(|b| b.id));
    if !cfg.unknown_keys.is_empty() {
        tracing::warn!(
            keys = %cfg.unknown_keys.join(", "),
            "config keys unknown to the fleet are ignored (NANOBOT_STRICT_CONFIG=1 refuses them)"
        );
    }
    let code = match run(cfg, args).await {
        Ok(()) => 0,
        Err(e) => {
            tracing::error!("failed to run {service}: {e:#}");
            1
        }
    };
    telemetry.shutdown().await;
    code
}
