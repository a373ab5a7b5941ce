//! `nanobot-gateway`: the channel gateways of the fleet (see the `nanobot_gateway` library).
#![forbid(unsafe_code)]

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
        nanobot_gateway::run(
            cfg,
            common.health_addr,
            nanobot_runtime::shutdown::shutdown_signal(),
        )
    })
    .await;
    std::process::exit(code);
}
