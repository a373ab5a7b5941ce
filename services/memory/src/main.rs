//! `nanobot-memory`: the memory worker launcher.
use clap::Parser;

/// Memory worker: consolidation and Dream.
#[derive(Parser)]
#[command(name = "nanobot-memory", version)]
struct Args {
    #[command(flatten)]
    common: nanobot_runtime::cli::CommonArgs,
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    let code = nanobot_runtime::cli::launch("nanobot-memory", args.common, |cfg, common| {
        nanobot_memory::run(
            cfg,
            common.health_addr,
            nanobot_runtime::shutdown::shutdown_signal(),
        )
    })
    .await;
    std::process::exit(code);
}
