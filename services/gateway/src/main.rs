//! `nanobot-gateway`: the channel gateways of the fleet (see the `nanobot_gateway` library).
#![forbid(unsafe_code)]

use std::collections::{BTreeMap, HashMap};

use clap::Parser;

/// nanobot channel gateways: the OpenAI-compatible HTTP API.
#[derive(Debug, Parser)]
#[command(name = "nanobot-gateway", version, about)]
struct Args {
    #[command(flatten)]
    common: nanobot_runtime::cli::CommonArgs,
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    let code = nanobot_runtime::cli::launch("nanobot-gateway", args.common, |cfg, common| {
        nanobot_gateway::run_seeding(
            cfg,
            seed(&common),
            common.health_addr,
            nanobot_runtime::shutdown::shutdown_signal(),
        )
    })
    .await;
    std::process::exit(code);
}

/// The config file's `bots` as written (`${VAR}` references unresolved), which the API seeds
/// the bot registry with; none when the file cannot be read again (logged).
fn seed(common: &nanobot_runtime::cli::CommonArgs) -> BTreeMap<String, serde_json::Value> {
    let env: HashMap<String, String> = std::env::vars().collect();
    let path = nanobot_runtime::config::resolve_path(common.config.as_deref(), &env);
    let mut bots = nanobot_runtime::bot_registry::raw_bots(&path).unwrap_or_else(|e| {
        tracing::warn!(
            error = format!("{e:#}"),
            "config bots not read for seeding the registry"
        );
        BTreeMap::new()
    });
    if let Some(only) = &common.bot {
        bots.retain(|id, _| id == only);
    }
    bots
}
