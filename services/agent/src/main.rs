//! `nanobot-agent`: the agent runner launcher.
use clap::Parser;

/// Agent runner: turns from JetStream, LLM calls, tool loop, sessions in Redis.
#[derive(Parser)]
#[command(name = "nanobot-agent", version)]
struct Args {
    #[command(flatten)]
    common: nanobot_runtime::cli::CommonArgs,
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    let code = nanobot_runtime::cli::launch("nanobot-agent", args.common, |cfg, common| {
        nanobot_agent::run(
            cfg,
            common.health_addr,
            nanobot_runtime::shutdown::shutdown_signal(),
        )
    })
    .await;
    std::process::exit(code);
}
