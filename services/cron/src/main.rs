//! `nanobot-cron`: the cron scheduler launcher.
use clap::Parser;

/// Cron scheduler: fires jobs into agent runners (one leader).
#[derive(Parser)]
#[command(name = "nanobot-cron", version)]
struct Args {
    #[command(flatten)]
    common: nanobot_runtime::cli::CommonArgs,
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    let code = nanobot_runtime::cli::launch("nanobot-cron", args.common, |cfg, common| {
        nanobot_cron::run(
            cfg,
            common.health_addr,
            nanobot_runtime::shutdown::shutdown_signal(),
        )
    })
    .await;
    std::process::exit(code);
}
